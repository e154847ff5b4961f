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

void feed(Switch &sw, FuzzTransport &tr, const uint8_t *d, size_t n)
{
	const IpAddr self = v4_endpoint(kSelf, kPort).ip;
	for_each_record(d, n, [&](uint8_t f, const uint8_t *p, size_t len) {
		Endpoint src = peer(f);
		std::vector<uint8_t> pkt = frame(f, p, len, src, self, kPort);
		// Peer 3 is neither a child nor the parent of the set-up's jobs:
		// it may make jobs of its own, never change theirs.
		const bool stranger = (f & 3) == 3;
		std::vector<uint64_t> before;
		if (stranger)
			before = taken(sw);
		tr.put(pkt.data(), pkt.size(), src, self);
		sw.poll_once();
		if (stranger && taken(sw) != before) {
			fprintf(stderr, "fuzz_switch_rx: a non-member's packet changed a job\n");
			abort();
		}
	});
}

} // namespace

// One input against a fresh switch under one sharing policy.
static void run_one(Policy policy, const uint8_t *data, size_t size)
{
	static const std::vector<uint8_t> setup = switch_setup();
	FuzzTransport *tr = nullptr;
	SwitchParams p;
	p.name = "fuzz";
	p.port = kPort;
	p.units = 16;
	p.policy = policy;
	p.transport = [&](std::unique_ptr<Transport> *out) {
		auto t = std::make_unique<FuzzTransport>(kPort);
		tr = t.get();
		*out = std::move(t);
		return 0;
	};
	Switch sw(p);
	if (sw.open())
		abort();
	feed(sw, *tr, setup.data(), setup.size());
	feed(sw, *tr, data, size);
	// Whatever came in, every datagram is counted exactly once.
	SwitchCounters c = sw.totals();
	uint64_t drops = c.drop_icrc + c.drop_malformed + c.drop_key + c.drop_job + c.drop_node +
			 c.drop_block + c.drop_stale + c.drop_busy + c.drop_empty + c.drop_short +
			 c.drop_kind + c.drop_incarnation + c.duplicates;
	if (c.rx_packets != c.delivered + drops) {
		fprintf(stderr, "switch (%s): rx_packets %llu != delivered %llu + drops %llu\n",
			policy_name(policy), (unsigned long long)c.rx_packets,
			(unsigned long long)c.delivered, (unsigned long long)drops);
		abort();
	}
}

// Each input twice: under spatial sharing (the default) and under time
// division, whose per-message admission (CONFIG and RELEASE flagged ADMIT)
// only a tdm switch parses.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run_one(Policy::spatial, data, size);
	run_one(Policy::tdm, data, size);
	return 0;
}
