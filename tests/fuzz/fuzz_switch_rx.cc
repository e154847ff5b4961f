// libFuzzer target: the aggregation switch's receive path (Switch::handle
// and every kind it takes: CONFIG with its task, CONFIG_ACK, DATA inline or
// not, RESULT from a parent, RELEASE), in process, through a transport
// that hands it the fuzzer's packets.  See fuzz_transport.h for the input.
#include "fuzz_jobs.h"
#include "switch/switch.h"
#include "util/log.h"

using namespace ibvc_fuzz;
using namespace ibv_coll::emu;

namespace {

// What a packet a job takes in moves, for the set-up's two jobs (a job
// that is gone reads as all zero).
std::vector<uint64_t> taken(const Switch &sw)
{
	std::vector<uint64_t> r;
	for (uint32_t jid : {kJidFlat, kJidTree}) {
		SwitchCounters c;
		if (!sw.job_counters(jid, &c))
			c = SwitchCounters{};
		for (uint64_t x : {c.delivered, c.data, c.reductions, c.results, c.configs,
				   c.releases, c.retrans_answered, c.resent_up})
			r.push_back(x);
	}
	return r;
}

// The times each of the set-up's jobs was given again.
std::vector<uint64_t> incarnations(const Switch &sw)
{
	std::vector<uint64_t> r;
	for (uint32_t jid : {kJidFlat, kJidTree}) {
		SwitchCounters c;
		r.push_back(sw.job_counters(jid, &c) ? c.incarnations : 0);
	}
	return r;
}

// The worker that takes a record: the unit's (CETH seg modulo the
// workers) for a block's DATA (not inline) and RESULT, worker 0 for the
// rest, moved on by the framing byte's bits 2-3, so that the fuzzer picks
// any worker for any packet: the steering program only places packets
// (its runs of 16 units would give this set-up's 16 units all to worker
// 0), and every worker must handle every packet correctly.
unsigned worker_of(uint8_t framing, const std::vector<uint8_t> &pkt, unsigned workers)
{
	using namespace ibv_coll::emu::wire;
	if (workers == 1)
		return 0;
	unsigned k = 0;
	if (pkt.size() >= kBthBytes + 22 &&
	    (pkt[0] == kCollResult || (pkt[0] == kCollData && !(pkt[kBthBytes + 3] & kCethInline))))
		k = unsigned(pkt[kBthBytes + 20]) << 8 | pkt[kBthBytes + 21];
	return (k + (framing >> 2 & 3)) % workers;
}

void feed(Switch &sw, std::vector<FuzzTransport *> &trs, const uint8_t *d, size_t n)
{
	const IpAddr self = v4_endpoint(kSelf, kPort).ip;
	for_each_record(d, n, [&](uint8_t f, const uint8_t *p, size_t len) {
		Endpoint src = peer(f);
		std::vector<uint8_t> pkt = frame(f, p, len, src, self, kPort);
		// Peer 3 is neither a child nor the parent of the set-up's jobs:
		// it may make jobs of its own, never change theirs, but for one
		// thing: a CONFIG of theirs with their key and a later
		// incarnation is a member's that moved (a job given again from a
		// restarted process's new port; the key admits it, DESIGN.md 9),
		// and gives the job again.
		const bool keyed_config = pkt.size() >= wire::kBthBytes + wire::kCethBytes &&
					  pkt[0] == wire::kCollConfig &&
					  wire::load_be64(&pkt[wire::kBthBytes + 40]) == kKey;
		const bool stranger = (f & 3) == 3;
		std::vector<uint64_t> before, inc_before;
		if (stranger) {
			before = taken(sw);
			inc_before = incarnations(sw);
		}
		const unsigned k = worker_of(f, pkt, unsigned(trs.size()));
		trs[k]->put(pkt.data(), pkt.size(), src, self);
		sw.poll_worker(k);
		if (k)
			sw.poll_once(); // worker 0's timers
		if (stranger && taken(sw) != before &&
		    !(keyed_config && incarnations(sw) != inc_before)) {
			fprintf(stderr, "fuzz_switch_rx: a non-member's packet changed a job\n");
			abort();
		}
	});
}

} // namespace

// One input against a fresh switch of `workers` workers under one sharing
// policy.  Several workers are served in turn, each record by the worker
// the steering program would give it: their per-worker counters, unit
// locks, copied results and shared job table under the same inputs.
static void run_one(Policy policy, unsigned workers, const uint8_t *data, size_t size)
{
	static const std::vector<uint8_t> setup = switch_setup();
	std::vector<FuzzTransport *> trs;
	SwitchParams p;
	p.name = "fuzz";
	p.port = kPort;
	p.units = 16;
	p.policy = policy;
	p.threads = workers;
	p.transport = [&](std::unique_ptr<Transport> *out) {
		auto t = std::make_unique<FuzzTransport>(kPort);
		trs.push_back(t.get());
		*out = std::move(t);
		return 0;
	};
	Switch sw(p);
	if (sw.open() || trs.size() != workers)
		abort();
	feed(sw, trs, setup.data(), setup.size());
	feed(sw, trs, data, size);
	// Whatever came in, every datagram is counted exactly once.
	SwitchCounters c = sw.totals();
	uint64_t drops = c.drop_icrc + c.drop_malformed + c.drop_key + c.drop_job + c.drop_node +
			 c.drop_block + c.drop_stale + c.drop_busy + c.drop_empty + c.drop_short +
			 c.drop_kind + c.drop_incarnation + c.duplicates;
	if (c.rx_packets != c.delivered + drops) {
		fprintf(stderr,
			"switch (%s, %u workers): rx_packets %llu != delivered %llu + drops %llu\n",
			policy_name(policy), workers, (unsigned long long)c.rx_packets,
			(unsigned long long)c.delivered, (unsigned long long)drops);
		abort();
	}
}

// Each input four times: under spatial sharing (the default) and under
// time division, whose per-message admission (CONFIG and RELEASE flagged
// ADMIT) only a tdm switch parses, each with one worker and with four.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (unsigned workers : {1u, 4u}) {
		run_one(Policy::spatial, workers, data, size);
		run_one(Policy::tdm, workers, data, size);
	}
	return 0;
}
