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

// The set-up's two jobs.
constexpr uint32_t kJobs[] = {kJidFlat, kJidTree};

// What a packet job `jid` takes in moves (a job that is gone reads as all
// zero).
std::vector<uint64_t> taken(const Switch &sw, uint32_t jid)
{
	SwitchCounters c;
	if (!sw.job_counters(jid, &c))
		c = SwitchCounters{};
	return {c.delivered, c.data,	 c.reductions,	     c.results,
		c.configs,   c.releases, c.retrans_answered, c.resent_up};
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

// Set-up job `jid` as the switch holds it, or none (false).
bool view(const Switch &sw, uint32_t jid, SwitchJobView *v)
{
	*v = SwitchJobView{};
	return sw.job_view(jid, v);
}

bool member(const SwitchJobView &v, const Endpoint &ep)
{
	for (const SwitchJobView::Member &m : v.members)
		if (m.ep == ep)
			return true;
	return false;
}

// What one packet may do to a set-up job.  Within one incarnation a
// node's holder (the child that serves it) stays, and no incarnation
// changes the key.  Peer 3 is none of the set-up's members: it may make
// jobs of its own, never change theirs, but for one thing: a packet with
// a task (a CONFIG, or DATA inline) and their key is a member's that moved
// (a restarted process, from a new port; the key admits it, DESIGN.md 9):
// it may give the job again (a later incarnation) or claim a node its
// incarnation has not heard from, and is then a member like the others.
void check(uint32_t jid, bool had, const SwitchJobView &b, const std::vector<uint64_t> &tb,
	   bool has, const SwitchJobView &a, const std::vector<uint64_t> &ta, int who,
	   const std::vector<uint8_t> &pkt)
{
	using namespace ibv_coll::emu::wire;
	const char *why = nullptr;
	if (had && has && a.key != b.key)
		why = "its key changed";
	if (had && has && a.inc == b.inc)
		for (const SwitchJobView::Member &m : b.members) {
			bool kept = false;
			for (const SwitchJobView::Member &n : a.members)
				kept |= n.ep == m.ep && n.qpn == m.qpn &&
					(n.cover & m.cover) == m.cover;
			if (!kept)
				why = "a node's holder changed";
		}
	const Endpoint stranger = peer(3);
	const bool changed = had != has || tb != ta || a.inc != b.inc ||
			     a.members.size() != b.members.size();
	if (who == 3 && changed && !(had && member(b, stranger))) {
		const bool task = pkt.size() >= kBthBytes + kCethBytes &&
				  (pkt[0] == kCollConfig ||
				   (pkt[0] == kCollData && (pkt[kBthBytes + 3] & kCethInline)));
		if (!task || load_be32(&pkt[kBthBytes + 8]) != jid || !has ||
		    !member(a, stranger) || load_be64(&pkt[kBthBytes + 40]) != a.key)
			why = "a non-member's packet changed it";
	}
	if (why) {
		fprintf(stderr, "fuzz_switch_rx: job %u: %s\n", jid, why);
		abort();
	}
}

void feed(Switch &sw, std::vector<FuzzTransport *> &trs, const uint8_t *d, size_t n)
{
	const IpAddr self = v4_endpoint(kSelf, kPort).ip;
	for_each_record(d, n, [&](uint8_t f, const uint8_t *p, size_t len) {
		Endpoint src = peer(f);
		std::vector<uint8_t> pkt = frame(f, p, len, src, self, kPort);
		SwitchJobView before[2];
		bool had[2];
		std::vector<uint64_t> tb[2];
		for (int i = 0; i < 2; i++) {
			had[i] = view(sw, kJobs[i], &before[i]);
			tb[i] = taken(sw, kJobs[i]);
		}
		const unsigned k = worker_of(f, pkt, unsigned(trs.size()));
		trs[k]->put(pkt.data(), pkt.size(), src, self);
		sw.poll_worker(k);
		if (k)
			sw.poll_once(); // worker 0's timers
		for (int i = 0; i < 2; i++) {
			SwitchJobView after;
			const bool has = view(sw, kJobs[i], &after);
			check(kJobs[i], had[i], before[i], tb[i], has, after, taken(sw, kJobs[i]),
			      f & 3, pkt);
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
