// Performance regression gates that cannot be noisy: the engine and the
// switch in ibv_coll_sim's virtual time, where the same configuration
// gives the same figures on any machine.  Each gate states its target; a
// floor below a target is today's figure, kept so that it cannot get worse
// unseen (README.md "In virtual time" lists what is missed and why).
#include "sim/sim.h"

#include "wire/ceth.h"
#include "wire/roce.h"

#include <gtest/gtest.h>

#include <sys/resource.h>

using namespace ibv_coll::sim;
namespace wire = ibv_coll::emu::wire;

namespace {

// What a 4096-byte block costs on a link beyond itself: Ethernet, IPv4,
// UDP, BTH, CETH, ICRC.
constexpr double kHdr = 14 + 20 + 8 + wire::kBthBytes + wire::kCethBytes + wire::kIcrcBytes;
constexpr double kPerByte = 1.0 + kHdr / 4096;

// n hosts on one switch, every link of rate bits/s, delay_ns one way and
// a queue of queue bytes.
FabricSpec star(uint32_t n, uint64_t rate, uint64_t delay_ns, uint64_t queue)
{
	FabricSpec f;
	f.nodes = n;
	f.host.rate_bps = rate;
	f.host.delay_ns = delay_ns;
	f.host.queue_bytes = queue;
	return f;
}

// 100 Gb/s, 1 us a hop, 1 MiB queues.
FabricSpec fast(uint32_t n)
{
	return star(n, 100000000000ull, 1000, 1 << 20);
}

JobSpec job(SimTopology t, uint64_t bytes, uint32_t units = 256)
{
	JobSpec j;
	j.topology = t;
	j.sizes = {bytes};
	j.warmup = 1;
	j.iters = 2;
	j.seg_units = units;
	return j;
}

SizeResult run1(const FabricSpec &f, const JobSpec &j, uint64_t seed = 1)
{
	Simulator s(f, seed);
	std::string err;
	EXPECT_TRUE(s.add_job(j, &err)) << err;
	const SimReport r = s.run(60000000000ull);
	EXPECT_FALSE(r.stuck) << r.state;
	const SizeResult z = r.jobs.at(0).sizes.at(0);
	EXPECT_EQ(z.wrong, 0u);
	EXPECT_EQ(z.failed, 0u);
	return z;
}

// 6 hosts at 10 Gb/s whose every port holds each packet 2 ms, give or
// take 2 ms: packets arrive out of order.
FabricSpec reordering_ports()
{
	FabricSpec f = star(6, 10000000000ull, 1000, 4 << 20);
	f.port_delay_ns = 2000000;
	f.port_jitter_ns = 2000000;
	return f;
}

} // namespace

// 64 hosts on one switch at 16 MiB (in place): S on each link (plus
// headers), and the bound but for the headers.  The target, 0.98 of R,
// is beyond what the wire allows: a 4 KiB block's headers take 3.0 %, so
// R / wire/S = 0.971 R is all a link can carry of payload; the gate is
// 0.99 of that (today 0.968 of R, 0.997 of the wire's).
TEST(SimGate, SwitchOf64HostsAtTheBound)
{
	JobSpec j = job(SimTopology::sw, 16 << 20);
	j.iters = 1;
	j.in_place = true;
	const SizeResult z = run1(fast(64), j);
	RecordProperty("bound_share", std::to_string(z.busbw / z.bound));
	EXPECT_NEAR(z.wire_s, kPerByte, 0.02 * kPerByte);
	EXPECT_GE(z.busbw / z.bound * kPerByte, 0.99);
	EXPECT_GE(z.busbw / z.bound, 0.96);
}

// 64 hosts on one switch at 64 KiB: 16 blocks of 4 KiB, so each node's
// chunk is a quarter block.  A chunk through switches is a run of whole
// blocks (a node's may be empty), so S on each link with one header per
// 4 KiB; when a chunk was 1/64 of the message every node sent one
// packet of 1 KiB, wire/S 1.119 at 1 MiB and 1,024 nodes.
TEST(SimGate, SwitchChunksAreWholeBlocks)
{
	const SizeResult z = run1(fast(64), job(SimTopology::sw, 64 << 10));
	EXPECT_NEAR(z.wire_s, kPerByte, 0.01 * kPerByte);
}

// 128 hosts under two leaves of 64 and a spine: more than the CETH's 64
// bits, since a member's bit is its index at its leaf and a leaf's its
// index at the spine.  The same S on each link and the bound as one
// switch (today 0.957 of R, wire/S 1.030); a broadcast from a root
// under the second leaf goes to every host.  Before the bits were per
// leaf, the device refused the job.
TEST(SimGate, TreeOf128HostsBeyondTheBitmap)
{
	FabricSpec f = fast(128);
	f.shape = Shape::tree2;
	f.nodes_per_leaf = 64;
	const SizeResult z = run1(f, job(SimTopology::sw, 4 << 20));
	EXPECT_NEAR(z.wire_s, kPerByte, 0.02 * kPerByte);
	EXPECT_GE(z.busbw / z.bound, 0.95);
	JobSpec b = job(SimTopology::sw, 1 << 20);
	b.coll = SimColl::bcast;
	b.root = 100;
	run1(f, b);
}

// 64 hosts round the ring at 16 MiB (in place): 2(N-1)/N S on each
// link, nothing sent twice, and 0.95 of R (the target; today 0.965, and
// 0.77 at 4 MiB, where the pipeline's fill over 126 hops of 1 us weighs
// four times as much).
TEST(SimGate, RingOf64HostsSendsNothingTwice)
{
	JobSpec j = job(SimTopology::ring, 16 << 20, 1024);
	j.iters = 1;
	j.in_place = true;
	const SizeResult z = run1(fast(64), j);
	RecordProperty("bound_share", std::to_string(z.busbw / z.bound));
	EXPECT_NEAR(z.wire_s, 2.0 * 63 / 64 * kPerByte, 0.02 * kPerByte);
	EXPECT_GE(z.busbw / z.bound, 0.95);
}

// 8 hosts round the ring on 200 Mbit/s links of 20 us with 256 KiB
// queues, each host's passes up to 200 us late (a busy host, as the
// namespace fabric's processes are: examples/sim/ring8-200mbit-jitter.json).
// Target: the bound, and nothing sent twice (wire/S within 5 % of
// 2(N-1)/N S).  Today 0.96 of R and wire/S 1.81.  When a block late end
// to end went round the whole ring again on the round trip's timeout
// while the hops were repairing it, 0.40 and 4.28 (this gate fails):
// the laps filled the queues, their drops made later blocks later still,
// and thousands of blocks went round again (RingPath::timers).
TEST(SimGate, RingOf8HostsWithLateHostsOnSlowLinks)
{
	FabricSpec f = star(8, 200000000ull, 20000, 256 << 10);
	f.jitter_ns = 200000;
	JobSpec j = job(SimTopology::ring, 1600 << 10);
	j.iters = 3;
	const SizeResult z = run1(f, j);
	RecordProperty("bound_share", std::to_string(z.busbw / z.bound));
	RecordProperty("wire_s", std::to_string(z.wire_s));
	EXPECT_GE(z.busbw / z.bound, 0.85);
	EXPECT_LE(z.wire_s, 1.05 * 2.0 * 7 / 8 * kPerByte);
}

// 8 hosts through one switch, a window of 2,048 blocks and 4,096 Seg
// units (claim 001's largest window, docs/claims.md): a member that the
// span holds up waits for its oldest block's result behind its own deep
// queue, and asks for it only after the results stop coming.  Target: the
// bound and nothing sent twice.  Today 0.968 and wire/S 1.030; when the
// ask was due two least round trips after the block went, whatever came
// since, 0.849 and 1.034 (4,608 needless repeats; this gate fails).
TEST(SimGate, DeepWindowAsksNothingOfItsOwnQueue)
{
	FabricSpec f = fast(8);
	f.host.queue_bytes = 64 << 20;
	f.switch_units = 65536;
	f.nic_units = 8192;
	JobSpec j = job(SimTopology::sw, 16 << 20, 4096);
	j.iters = 1;
	j.window = 2048;
	const SizeResult z = run1(f, j);
	RecordProperty("bound_share", std::to_string(z.busbw / z.bound));
	RecordProperty("wire_s", std::to_string(z.wire_s));
	EXPECT_GE(z.busbw / z.bound, 0.95);
	EXPECT_NEAR(z.wire_s, kPerByte, 0.002 * kPerByte);
}

// 5 % of the packets every host and the switch send are lost: every
// collective completes right.  Target: within 1.5x of loss-free.  The
// ring repairs each hop on its own (ring_hop.cc), its end-to-end timeout
// left at the default: 1.31x at 16 hosts (seeds 1-10: 1.22x-1.59x, mean
// 1.33x; it was 12.9x when a lost block went again from its origin, 30
// hops).  The switch path's repair is end to end, with its timers at the
// fabric's scale: 1.30x with this seed (seeds 1-6, 4 messages: mean
// 1.39x).  A block waits for the last of 16 partials, so a lost one holds
// every member's window for its repair's round trip: 2.45x (mean 2.07x)
// while that repair queued behind the member's window on its link, the
// member asked for results that were late, not lost, and took a NAK that
// crossed its repeat for a loss (both opened its reordering window).
TEST(SimGate, LossOf5PercentCompletesRight)
{
	for (SimTopology t : {SimTopology::sw, SimTopology::ring}) {
		FabricSpec f = fast(16);
		f.probe_us = 10;
		if (t == SimTopology::sw)
			f.rto_us = 50;
		const SizeResult clean = run1(f, job(t, 1 << 20));
		FabricSpec lossy = f;
		lossy.loss = 0.05;
		const SizeResult z = run1(lossy, job(t, 1 << 20), 5);
		const double x = double(z.time_ns) / double(clean.time_ns);
		RecordProperty(t == SimTopology::sw ? "switch_x" : "ring_x", std::to_string(x));
		EXPECT_LE(x, 1.5) << (t == SimTopology::sw ? "switch" : "ring");
	}
}

// The same through one switch at 64 hosts, where nearly every block lacks
// some member's partial and few complete to show a loss behind them: the
// switch NAKs a partial as soon as the member's next one arrives, each
// result names the one sent before it, and a member the span holds up
// asks for its oldest block without backing off (wire/swproto.h, Loss).
// The last blocks of a message have nothing after them to show a loss:
// the switch NAKs what the newest block lacks by its age, and sends its
// results again while blocks are being repaired (switch_fold.cc,
// find_tail).  Target 1.5x, on the mean of six seeds (one seed swings
// +-0.1): today 1.496 (seeds 1.43-1.54); 1.593 (1.49-1.69) before the
// tail, which waited for the members' probes (20-27 us of a 90 us
// message); 2.17x before the NIC paced its new blocks to its port (a
// repair waited behind the window in the link's queue), before a member
// stopped asking for results late, not lost, and before a NAK that
// crossed a repeat stopped counting as a loss.
TEST(SimGate, LossOf5PercentThroughASwitchOf64Hosts)
{
	FabricSpec f = fast(64);
	f.probe_us = 10;
	f.rto_us = 50;
	const SizeResult clean = run1(f, job(SimTopology::sw, 1 << 20));
	FabricSpec lossy = f;
	lossy.loss = 0.05;
	double sum = 0;
	for (uint64_t seed = 1; seed <= 6; seed++) {
		const SizeResult z = run1(lossy, job(SimTopology::sw, 1 << 20), seed);
		const double x = double(z.time_ns) / double(clean.time_ns);
		RecordProperty("switch_x_seed" + std::to_string(seed), std::to_string(x));
		EXPECT_LE(x, 1.6) << "seed " << seed;
		sum += x;
	}
	RecordProperty("switch_x_mean", std::to_string(sum / 6));
	EXPECT_LE(sum / 6, 1.5);
}

// A grant lost when the last member's CONFIG came: that member sends its
// CONFIG again after as long as it has waited since every leaf answered
// (the others, granted, wait for its partials), not after 100 ms.  16
// hosts at 5 % loss, one warm-up and two 1 MiB messages: 0.6 ms of
// virtual time in all (100.5 ms when the repeat waited 100 ms).
TEST(SimGate, LostGrantCostsTheWaitSoFar)
{
	FabricSpec f = fast(16);
	f.probe_us = 10;
	f.rto_us = 50;
	f.loss = 0.05;
	Simulator s(f, 1);
	std::string err;
	ASSERT_TRUE(s.add_job(job(SimTopology::sw, 1 << 20), &err)) << err;
	const SimReport r = s.run(60000000000ull);
	ASSERT_FALSE(r.stuck) << r.state;
	EXPECT_EQ(r.jobs.at(0).sizes.at(0).wrong, 0u);
	RecordProperty("end_us", std::to_string(r.end_ns / 1000));
	EXPECT_LE(r.end_ns, 5000000u);
}

// A member that lacks a result once the switch answered it: its probes
// back off to eight times the first wait, or an eighth of the wait so far,
// not on to an eighth of the timeout.  8 hosts at 10 Gb/s, 20 % loss, seed 7 (as
// ibv_coll_sim -s 7 on a desc of these): one member lacked a 64 KiB
// message's block for a second, its probes doubling while five answers
// in a row were lost (64 KiB: 105 ms a message, the mean of 10; now 3 ms).
TEST(SimGate, AnsweredProbesBackOffLittle)
{
	FabricSpec f = star(8, 10000000000ull, 5000, 1 << 20);
	f.jitter_ns = 10000;
	f.loss = 0.2;
	JobSpec j = job(SimTopology::sw, 64);
	j.sizes = {64, 65536, 1 << 20};
	j.iters = 10;
	Simulator s(f, 7);
	std::string err;
	ASSERT_TRUE(s.add_job(j, &err)) << err;
	const SimReport r = s.run(60000000000ull);
	ASSERT_FALSE(r.stuck) << r.state;
	for (const SizeResult &z : r.jobs.at(0).sizes) {
		EXPECT_EQ(z.wrong, 0u);
		EXPECT_EQ(z.failed, 0u);
	}
	const uint64_t t = r.jobs.at(0).sizes.at(1).time_ns;
	RecordProperty("us_64k", std::to_string(t / 1000));
	EXPECT_LE(t, 20000000u);
}

// A host descheduled for 50 ms in the middle of a collective: the others
// wait for it, and every collective completes right, on both paths.
TEST(SimGate, StalledHostCompletes)
{
	FabricSpec f = fast(8);
	f.host.rate_bps = 10000000000ull;
	f.stalls = {{3, 1000000, 50000000}}; // from 1 ms, 50 ms
	for (SimTopology t : {SimTopology::sw, SimTopology::ring}) {
		JobSpec j = job(t, 4 << 20);
		j.warmup = 0;
		const SizeResult z = run1(f, j);
		EXPECT_GE(z.time_ns * 2, 50000000u); // the mean of two, one stalled
	}
}

// Every port holds each packet 2 ms, give or take 2 ms (as
// IBV_COLL_EMU_IMPAIR=delay=2ms,jitter=2ms, the path of
// coll.liveness_ring_jitter): packets arrive out of order.  The ring
// completes right with the congestion controller on and off.  Targets:
// on within 2x of off (the liveness tests' bound) and nothing sent twice
// (wire/S 2(N-1)/N = 1.67).  Today (6 hosts, 3 MiB): on 1.26x off, wire/S
// 2.22 on and 2.37 off (before the reordering window of gaps(), which NAKed
// every gap at once: 2.3x, 4.6 and 5.3).  The floors kept.
TEST(SimGate, ReorderingPortsRingWithTheControllerOnAndOff)
{
	FabricSpec f = reordering_ports();
	JobSpec j = job(SimTopology::ring, 3 << 20);
	j.warmup = 0;
	j.iters = 5;
	const SizeResult on = run1(f, j);
	f.cc = false;
	const SizeResult off = run1(f, j);
	const double x = double(on.time_ns) / double(off.time_ns);
	RecordProperty("on_over_off", std::to_string(x));
	RecordProperty("wire_s_on", std::to_string(on.wire_s));
	RecordProperty("wire_s_off", std::to_string(off.wire_s));
	EXPECT_LE(x, 1.6);
	EXPECT_LE(on.wire_s, 2.5 * kPerByte);
	EXPECT_LE(off.wire_s, 2.7 * kPerByte);
}

// The same ports through one switch.  Target: on within 2x of off.
// Before the switch path's reordering window (SwitchPath::spurious) on
// was 13x off (934 ms against 71 ms for five 3 MiB allreduces, seed 1):
// every ASK that overtook its partial came back as a NAK naming us, and
// cost a repeat and a halved window.  Seed 5 was still 2.98x (211 ms):
// members ASKed for results that were late, not lost, as soon as a later
// one came (SwitchPath::find_gaps), and the answers cost repeats and
// cuts; with the window open an ASK now waits a round trip and the
// window (late_within_window): seed 1 1.19x, seed 5 1.21x; seeds 1-16
// 1.09x-2.24x, mean 1.31x (was 1.03x-2.98x, mean 1.45x).  With the window
// grown also by results that come twice (answered_twice): seed 1 1.10x,
// seed 5 1.18x, seeds 1-16 1.03x-1.25x, mean 1.16x.  With results that
// chain asked for only when the chain shows them lost (find_gaps): seed 1
// 1.10x, seed 5 1.22x, seeds 1-16 1.02x-1.25x, mean 1.07x.  wire/S 1.05
// on and off: nothing is sent twice.
TEST(SimGate, ReorderingPortsSwitchWithTheControllerOnAndOff)
{
	for (uint64_t seed : {1, 5}) {
		SCOPED_TRACE("seed " + std::to_string(seed));
		FabricSpec f = reordering_ports();
		JobSpec j = job(SimTopology::sw, 3 << 20);
		j.warmup = 0;
		j.iters = 5;
		const SizeResult on = run1(f, j, seed);
		f.cc = false;
		const SizeResult off = run1(f, j, seed);
		const double x = double(on.time_ns) / double(off.time_ns);
		RecordProperty("on_over_off_seed" + std::to_string(seed), std::to_string(x));
		EXPECT_LE(x, 2.0);
		EXPECT_LE(on.wire_s, 1.1 * kPerByte);
	}
}

// What the controller is for: a small allreduce behind a big one on the
// same links, the fabric of scripts/bench-fabric-latency.sh (4 hosts at
// 400 Mb/s, 256 KiB tail-drop queues).  The 8 KiB allreduce is a pairwise
// exchange of two steps, each across two queues the 64 MiB ring keeps
// busy; the ring's window holds them near its target (1 ms of standing
// delay for each link its round trip crosses: 4 ms), where a fixed
// window fills them.  Target: the small one at most 0.6x its time without
// the controller, and the big one at 0.95 of R or more either way.  Today
// (seed 1): 7.76 ms against 16.68 ms (0.47x), the ring 0.963 of R both
// ways.  (On the namespace fabric the controller does not shorten them:
// the noise it allows for on a 2-core host raises its target to 6-12 ms;
// README, On a shaped network.)
TEST(SimGate, ControllerKeepsTheQueuesOfASmallAllreduceShort)
{
	FabricSpec f = star(4, 400000000ull, 20000, 256 << 10);
	JobSpec big = job(SimTopology::ring, 64 << 20);
	big.warmup = 0;
	big.iters = 3;
	JobSpec small = job(SimTopology::ring, 8 << 10);
	small.iters = 30;
	small.start_ns = 500000000; // once the ring's windows are open
	SizeResult res[2][2];	    // [controller on][big, small]
	for (bool cc : {true, false}) {
		SCOPED_TRACE(cc ? "controller on" : "controller off");
		f.cc = cc;
		Simulator s(f, 1);
		std::string err;
		ASSERT_TRUE(s.add_job(big, &err)) << err;
		ASSERT_TRUE(s.add_job(small, &err)) << err;
		const SimReport r = s.run(60000000000ull);
		ASSERT_FALSE(r.stuck) << r.state;
		for (int k = 0; k < 2; k++) {
			res[cc][k] = r.jobs.at(k).sizes.at(0);
			EXPECT_EQ(res[cc][k].wrong, 0u);
			EXPECT_EQ(res[cc][k].failed, 0u);
		}
		// The small job ran while the big one did.
		EXPECT_GT(res[cc][0].time_ns * big.iters, small.start_ns + 31 * res[cc][1].time_ns);
		EXPECT_GE(res[cc][0].busbw / res[cc][0].bound, 0.95);
	}
	const double x = double(res[1][1].time_ns) / double(res[0][1].time_ns);
	RecordProperty("small_ms_on", std::to_string(res[1][1].time_ns / 1e6));
	RecordProperty("small_ms_off", std::to_string(res[0][1].time_ns / 1e6));
	EXPECT_LE(x, 0.6);
}

// 8 hosts at 10 Gb/s whose ports hold each packet 20 us, give or take 20
// us (as a switch of several workers sends one plane's results out of
// block order): a result two blocks late is no loss, nor a partial behind
// the ASK that drew its NAK.  Each ASK for a late result was answered with
// a second copy of it, each NAK with a repeat; now the window grows when
// results come twice (SwitchPath::answered_twice).  Today 4 MiB: seeds 1,
// 2, 5 1.07x, 1.07x, 1.07x the time without jitter, wire/S within 0.003 of
// it (were 1.52x, 1.52x, 1.51x and +0.045, +0.095, +0.136; seeds 1-12 now
// 1.07x-1.09x).  A switch of one worker NAKs a partial that a later one
// of the member overtook, and tells with each result the block whose
// results went before (wire/swproto.h, Loss): both sure on a port that
// keeps its order, so a member takes them at once until a needless
// repeat shows the path reorders; on these ports the first message pays
// those repeats (seeds 1, 2, 5: 1.10x, 1.09x, 1.10x the time, wire/S
// +0.005, +0.006, +0.014).
TEST(SimGate, ResultsOutOfOrderAreNotAskedFor)
{
	FabricSpec f = star(8, 10000000000ull, 1000, 4 << 20);
	JobSpec j = job(SimTopology::sw, 4 << 20);
	j.warmup = 0;
	j.iters = 5;
	const SizeResult calm = run1(f, j);
	f.port_delay_ns = 20000;
	f.port_jitter_ns = 20000;
	for (uint64_t seed : {1, 2, 5}) {
		SCOPED_TRACE("seed " + std::to_string(seed));
		const SizeResult r = run1(f, j, seed);
		const double x = double(r.time_ns) / double(calm.time_ns);
		RecordProperty("over_calm_seed" + std::to_string(seed), std::to_string(x));
		EXPECT_LE(x, 1.15);
		EXPECT_LE(r.wire_s, calm.wire_s + 0.02);
	}
}

// A small allreduce among the member NICs is the pairwise exchange: about
// log2(N) one-way trips through the switch in a row (the phases, the
// extras' two and the last acknowledgement), where the ring takes 2(N-1).
// Target: within 1.2x of (phases + 1) trips of 2 us, and 10x the ring's
// speed at 64 hosts.  Today (8 B): 64 hosts 14.2 us, 7 trips (ring 257
// us), 48 hosts 14.2 us; with 5 % loss at 16 hosts, right.
TEST(SimGate, SmallAllreduceIsAPairwiseExchange)
{
	const uint64_t trip = 2 * fast(1).host.delay_ns;
	for (const uint32_t n : {64u, 48u}) {
		SCOPED_TRACE(std::to_string(n) + " hosts");
		uint32_t k = 0;
		while ((2u << k) <= n)
			k++;
		const uint32_t trips = k + 1 + ((n & (n - 1)) ? 2 : 0);
		const SizeResult x = run1(fast(n), job(SimTopology::ring, 8));
		RecordProperty("us_" + std::to_string(n), std::to_string(x.time_ns / 1e3));
		EXPECT_LE(double(x.time_ns), 1.2 * trips * trip);
		if (n == 64) {
			FabricSpec f = fast(n);
			f.xchg_bytes = 0;
			const SizeResult ring = run1(f, job(SimTopology::ring, 8, 1024));
			RecordProperty("ring_us_64", std::to_string(ring.time_ns / 1e3));
			EXPECT_GE(ring.time_ns, 10 * x.time_ns);
		}
	}
	FabricSpec lossy = fast(16);
	lossy.rto_us = 50;
	lossy.probe_us = 10;
	lossy.loss = 0.05;
	JobSpec j = job(SimTopology::ring, 64);
	j.iters = 50;
	run1(lossy, j, 3);
}

// A small broadcast among the member NICs goes down a binomial tree from
// the root: log2(N) one-way trips to the last leaf (the root's completion
// waits one more, for its children's acknowledgement), where the ring
// takes N-1.  A barrier is the exchange's.  Target: 5x the ring's speed
// at 64 hosts, right with 5 % loss; the same broadcast of 1 MiB round the
// ring and through the switch, right.
TEST(SimGate, SmallBroadcastIsATree)
{
	const uint64_t trip = 2 * fast(1).host.delay_ns;
	JobSpec b = job(SimTopology::ring, 8);
	b.coll = SimColl::bcast;
	b.root = 37;
	const SizeResult x = run1(fast(64), b);
	RecordProperty("bcast_us_64", std::to_string(x.time_ns / 1e3));
	EXPECT_LE(double(x.time_ns), 1.2 * (6 + 1) * trip);
	FabricSpec f = fast(64);
	f.xchg_bytes = 0;
	JobSpec br = b;
	br.seg_units = 1024;
	const SizeResult ring = run1(f, br);
	RecordProperty("bcast_ring_us_64", std::to_string(ring.time_ns / 1e3));
	EXPECT_GE(ring.time_ns, 5 * x.time_ns);

	JobSpec bar = job(SimTopology::ring, 0);
	bar.coll = SimColl::barrier;
	const SizeResult y = run1(fast(64), bar);
	RecordProperty("barrier_us_64", std::to_string(y.time_ns / 1e3));
	EXPECT_LE(double(y.time_ns), 1.2 * (6 + 1) * trip);

	FabricSpec lossy = fast(16);
	lossy.rto_us = 50;
	lossy.probe_us = 10;
	lossy.loss = 0.05;
	JobSpec bl = b;
	bl.root = 3;
	bl.iters = 50;
	run1(lossy, bl, 3);
	for (SimTopology t : {SimTopology::ring, SimTopology::sw}) {
		JobSpec big = job(t, 1 << 20);
		big.coll = SimColl::bcast;
		big.root = 5;
		run1(lossy, big, 4);
	}
}

// The scale target: 65,536 hosts through three levels (64 pods of 64
// leaves of 16; one job of 65,535, a node index being 16 bits) in phantom
// mode, the example examples/sim/phantom65536-tree3.json.  The result is
// right, and the process's peak memory is within 64 KiB a host (today
// 35.2 KiB at 4 KiB, in 5 s: when each host checked the whole member
// list and walked every node's chunk, the set-up alone took 2 min).
TEST(SimGate, PhantomJobOf65535HostsThroughThreeLevels)
{
	FabricSpec f = fast(65536);
	f.shape = Shape::tree3;
	f.nodes_per_leaf = 16;
	f.leaves_per_pod = 64;
	f.nic_units = 64;
	f.switch_units = 256;
	JobSpec j = job(SimTopology::sw, 4096, 64);
	j.warmup = 0;
	j.iters = 1;
	j.phantom = true;
	for (uint32_t i = 0; i < 65535; i++)
		j.nodes.push_back(i);
	run1(f, j); // every rank's result right
	rusage ru{};
	getrusage(RUSAGE_SELF, &ru);
	const double kib_per_host = double(ru.ru_maxrss) / 65536; // ru_maxrss: KiB
	RecordProperty("kib_per_host", std::to_string(kib_per_host));
	EXPECT_LE(kib_per_host, 64.0);
}
