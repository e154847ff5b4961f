// Congestion control of one flow (nic/cc.h) driven by hand-made round
// trips: the liveness floor, host delay taken out of the delay signal,
// random loss that cuts nothing, the recovery of a collapsed window and
// the target that adapts to noise.  Every expectation is a number worked
// out here from the signals fed in, not read back from the controller's
// own arithmetic.
#include "nic/cc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace ibv_coll::emu;

namespace {

constexpr uint64_t kUs = 1000, kMs = 1000000;

struct Flow {
	CcParams p;
	CcCounters ctr;
	CongestionCtl cc;
	uint64_t now = 1000 * kMs;
	explicit Flow(double init = 16, double max = 64, uint32_t hops = 2)
	{
		p.target_us = 100;	// 100 us a queue, 200 us for the round trip
		p.host_target_us = 250; // the endpoint window on (its default is off)
		cc.init(&p, &ctr, init, max, hops);
	}
	// A round trip through a queue of this flow's own: every unit in
	// flight adds per_unit to the base delay.
	void queue_round(uint64_t base, uint64_t per_unit)
	{
		round(base + uint64_t(cc.window()) * per_unit);
	}
	// One round trip of rtt: the window's units all acknowledged at its
	// end, each with the given endpoint holding, of which queued was
	// queueing (by default all of it).
	void round(uint64_t rtt, uint64_t held = 0, uint64_t queued = UINT64_MAX)
	{
		const uint32_t w = cc.window();
		now += rtt;
		for (uint32_t i = 0; i < w; i++) {
			cc.on_rtt_sample(rtt, Holding{held, std::min(held, queued)}, now);
			cc.on_ack(1, now);
		}
	}
};

} // namespace

// However deep the queue, the window stays at one unit at least, and a
// flow with nothing in flight may always send (ibv_coll(7), LIVENESS).
// At the floor the one unit's own 20 ms is all the delay there is: it
// becomes the base (once), and the window stays within a few units of
// the floor, each unit more adding another 20 ms.
TEST(Cc, WindowNeverBelowOneUnit)
{
	Flow f;
	f.round(100 * kUs);
	uint32_t low = 64, high = 0;
	for (int i = 0; i < 200; i++) {
		f.queue_round(100 * kUs, 20 * kMs); // 20 ms a unit, 100 times the target
		low = std::min(low, f.cc.window());
		if (i >= 100)
			high = std::max(high, f.cc.window());
		EXPECT_GE(f.cc.cwnd(), 1.0);
		EXPECT_TRUE(f.cc.may_send(0, f.now));
	}
	EXPECT_GT(f.ctr.delay_cuts, 5u);
	EXPECT_EQ(low, 1u);
	EXPECT_LE(high, 4u);
	EXPECT_EQ(f.ctr.rebases, 1u) << "the base moved up more than the one unit's delay";
	for (int i = 0; i < 20; i++)
		f.cc.on_loss(f.now += 60 * kMs, true);
	EXPECT_EQ(f.cc.window(), 1u);
	EXPECT_TRUE(f.cc.may_send(0, f.now));
}

// A round trip made long by the peers' and this host's holding (a busy
// CPU, a member that posted late) is no queue when the holding is
// reported: the window keeps growing.  The same round trips without the
// report cut it: the signal is what the test checks, not the code.
TEST(Cc, HostDelayIsNotAQueue)
{
	Flow held, blind;
	held.round(100 * kUs);
	blind.round(100 * kUs);
	for (int i = 0; i < 50; i++) {
		const uint64_t host = 20 * kMs; // descheduled, or waiting for a member
		held.round(100 * kUs + host, host);
		blind.round(100 * kUs + host, 0);
	}
	EXPECT_EQ(held.ctr.delay_cuts, 0u);
	EXPECT_EQ(held.cc.cwnd(), 64.0);
	EXPECT_GT(held.ctr.host_delay_samples, 0u);
	// The endpoint window trims what waits at the hosts, down to an
	// eighth of the cap and no further.
	EXPECT_GT(held.ctr.host_cuts, 0u);
	EXPECT_EQ(held.cc.window(), 8u);
	EXPECT_GT(blind.ctr.delay_cuts, 0u);
	// The hosts keep up again: the endpoint window grows back.
	for (int i = 0; i < 80; i++)
		held.round(100 * kUs + 100 * kUs, 100 * kUs);
	EXPECT_EQ(held.cc.window(), 64u);
	// A holding reported as longer than the round trip (a clock step, a
	// forged hold) moves nothing either way.
	Flow odd;
	odd.round(100 * kUs);
	const double w = odd.cc.cwnd();
	odd.cc.on_rtt_sample(10 * kMs, Holding{20 * kMs, 20 * kMs}, odd.now += 10 * kMs);
	EXPECT_EQ(odd.ctr.delay_cuts, 0u);
	EXPECT_EQ(odd.cc.cwnd(), w);
}

// A round trip held long waiting, not queued (a member that posted its
// collective late, the slowest member's partial at a switch): neither
// window moves, since sending less would not make the wait shorter.
TEST(Cc, WaitingIsNotCongestion)
{
	Flow f;
	f.round(100 * kUs);
	for (int i = 0; i < 50; i++)
		f.round(100 * kUs + 30 * kMs, 30 * kMs, 50 * kUs);
	EXPECT_EQ(f.ctr.delay_cuts + f.ctr.host_cuts, 0u);
	EXPECT_EQ(f.cc.window(), 64u);
}

// Loss with the fabric at its base delay is random loss: repeats, no cut.
// Loss with a standing queue (above half the target) is a full queue's.
TEST(Cc, LossCutsOnlyWithAQueue)
{
	Flow f(32);
	for (int i = 0; i < 5; i++)
		f.round(100 * kUs);
	const double w = f.cc.cwnd();
	for (int i = 0; i < 50; i++) {
		f.cc.on_loss(f.now += 200 * kUs, i % 2 == 0);
		f.round(100 * kUs);
	}
	EXPECT_EQ(f.ctr.loss_cuts, 0u);
	EXPECT_EQ(f.ctr.loss_no_queue, 50u);
	EXPECT_GE(f.cc.cwnd(), w);

	// 150 us of queue: above half the 200 us target, below the target
	// (standing long enough not to count as noise).
	Flow q(32);
	for (int i = 0; i < 5; i++)
		q.round(100 * kUs);
	for (int i = 0; i < 40; i++)
		q.round(250 * kUs);
	EXPECT_EQ(q.ctr.delay_cuts, 0u);
	const double before = q.cc.cwnd();
	q.cc.on_loss(q.now += 300 * kUs, true);
	EXPECT_EQ(q.ctr.loss_cuts, 1u);
	EXPECT_NEAR(q.cc.cwnd(), before * 0.5, 1e-9); // max_mdf 50 % on a timeout
	q.round(250 * kUs);
	const double mid = q.cc.cwnd();
	q.cc.on_loss(q.now += 300 * kUs, false);
	EXPECT_EQ(q.ctr.loss_cuts, 2u);
	EXPECT_NEAR(q.cc.cwnd(), mid * 0.875, 1e-9); // a quarter of that on a gap
}

// A window collapsed to the floor by a long queue comes back to half of
// where the collapse began in log2 of that many round trips once the
// queue is gone (slow start to half), not one unit per round trip.
TEST(Cc, CollapsedWindowRecoversInLog2RoundTrips)
{
	Flow f(64, 256);
	for (int i = 0; i < 3; i++)
		f.round(100 * kUs); // slow start to the cap
	ASSERT_EQ(f.cc.window(), 256u);
	int rounds = 0;
	while (f.cc.window() > 1 && rounds++ < 100)
		f.queue_round(100 * kUs, 10 * kMs); // a queue 50 times the target a unit
	ASSERT_EQ(f.cc.window(), 1u);
	int back = 0;
	while (f.cc.window() < 128 && back < 200) {
		f.round(100 * kUs);
		back++;
	}
	// 1 -> 128 doubling: 7 round trips (and one more to take the first
	// sample below the target).
	EXPECT_LE(back, 8);
	// Past half, additive: one unit a round trip.
	const uint32_t w = f.cc.window();
	f.round(100 * kUs);
	EXPECT_LE(f.cc.window(), w + 1);
}

// Fabric delay that varies from packet to packet by up to 4 ms (a link
// with jitter, a noisy host the timestamps do not cover) raises the
// target to twice the jitter seen: the noise alone never takes the
// window below half, and losses with it cut nothing.  A standing queue
// well above that still cuts.
TEST(Cc, TargetAdaptsToJitter)
{
	Flow f(16, 64);
	std::mt19937 rng(3);
	f.round(100 * kUs);
	uint32_t low = 64;
	uint64_t cuts = 0;
	for (int i = 0; i < 400; i++) {
		const uint32_t w = f.cc.window();
		uint64_t worst = 0;
		std::vector<uint64_t> rtts(w);
		for (uint64_t &r : rtts)
			worst = std::max(worst, r = 100 * kUs + rng() % (4 * kMs));
		f.now += worst;
		for (uint64_t r : rtts) {
			f.cc.on_rtt_sample(r, Holding{}, f.now);
			f.cc.on_ack(1, f.now);
		}
		if (i == 100)
			cuts = f.ctr.loss_cuts; // the jitter is learnt by now
		if (i % 10 == 0)
			f.cc.on_loss(f.now, false);
		if (i > 100)
			low = std::min(low, f.cc.window());
	}
	EXPECT_GT(f.cc.target_delay(), 2 * kMs);
	EXPECT_GE(low, 32u) << "the window collapsed on jitter";
	EXPECT_EQ(f.ctr.loss_cuts, cuts);
	for (int i = 0; i < 20; i++)
		f.queue_round(100 * kUs, 2 * kMs);
	EXPECT_GT(f.ctr.delay_cuts, 0u);
	EXPECT_LT(f.cc.window(), 32u);
}

// A path whose delay rose for good (a longer route, jitter that keeps
// order and holds every packet behind the slowest): no window lowers it.
// Three delay cuts in a row that lower nothing move the base to the delay
// now, and the window grows back; a queue of the flow's own, which cuts
// do drain, is still cut.
TEST(Cc, DelayThatCutsCannotLowerMovesTheBase)
{
	Flow f(32, 64);
	for (int i = 0; i < 5; i++)
		f.round(100 * kUs);
	for (int i = 0; i < 60; i++)
		f.round(100 * kUs + 5 * kMs); // whatever the window
	EXPECT_GE(f.ctr.rebases, 1u);
	EXPECT_LE(f.ctr.delay_cuts, 3u);
	EXPECT_EQ(f.cc.window(), 64u);
	EXPECT_GT(f.cc.base_delay(), 4 * kMs);
	// Now a queue that the window makes: the delay above the new base
	// grows with the window and falls when it is cut.
	const uint64_t base = 100 * kUs + 5 * kMs;
	for (int i = 0; i < 40; i++)
		f.round(base + uint64_t(f.cc.cwnd()) * 100 * kUs);
	EXPECT_GT(f.ctr.delay_cuts, 3u);
	EXPECT_LT(f.cc.window(), 64u);
}

namespace {

// A ring's round trips on a path whose every hop adds 0-4 ms: 10 ms and
// up to 8 ms more, each unit its own (seeded).
struct NoisyPath {
	Flow &f;
	std::mt19937 rng;
	void round()
	{
		const uint32_t w = f.cc.window();
		std::vector<uint64_t> rtts(w);
		uint64_t worst = 0;
		for (uint64_t &r : rtts)
			worst = std::max(worst, r = 10 * kMs + rng() % (8 * kMs));
		f.now += worst;
		for (uint64_t r : rtts) {
			f.cc.on_rtt_sample(r, Holding{}, f.now);
			f.cc.on_ack(1, f.now);
		}
	}
	// A few short round trips set a low base; the long ones' delay does
	// not fall when the window is cut, and the base moves up.
	void until_the_base_moves()
	{
		for (int i = 0; i < 5; i++)
			f.round(2 * kMs);
		for (int i = 0; i < 100 && !f.ctr.rebases; i++)
			round();
	}
};

} // namespace

// One member of a switch job on 2 cores with 2 +- 2 ms on every packet
// (coll.liveness_switch_jitter, seed 7, 1 run in ~20): its round trips
// lay milliseconds above the least one it saw, each round's samples
// shifted together by how late its host ran.  A cut lowered the delay
// or not by chance, more than a sixteenth either way, so three futile
// cuts in a row never came and the base never moved: 102 cuts took the
// window to a fifth, and the other members waited for that one (2.4 s
// against 0.5 s).  A fall within the noise is no fall: the base moves
// after three cuts, and the window grows back.
TEST(Cc, JitterThatShiftsWholeRoundsMovesTheBase)
{
	Flow f(64, 64);
	std::mt19937 rng(7);
	for (int i = 0; i < 5; i++)
		f.round(2500 * kUs);
	uint32_t low = 64;
	for (int i = 0; i < 200; i++) {
		const uint32_t w = f.cc.window();
		const uint64_t shift = rng() % (2 * kMs); // the host ran late
		std::vector<uint64_t> rtts(w);
		uint64_t worst = 0;
		for (uint64_t &r : rtts)
			worst = std::max(worst, r = 6 * kMs + shift + rng() % (2 * kMs));
		f.now += worst;
		for (uint64_t r : rtts) {
			f.cc.on_rtt_sample(r, Holding{}, f.now);
			f.cc.on_ack(1, f.now);
		}
		low = std::min(low, f.cc.window());
	}
	// Three cuts (kFutileCuts: 64 -> 32 -> 21 -> 14 here), then the base
	// moves and the window grows back; a round late by most of the noise
	// may cut once more (without the allowance: 7 cuts, down to 3).
	EXPECT_GE(f.ctr.rebases, 1u);
	EXPECT_LE(f.ctr.delay_cuts, 5u) << "cuts went on after the base moved";
	EXPECT_GE(low, 8u) << "the window sank on a path whose delay no cut lowers";
	EXPECT_EQ(f.cc.window(), 64u);
}

// The stall of coll.liveness_ring_jitter (seed 7, 1 run in ~30): after the
// base moved up on a noisy path, a loss moved it back for an epoch and
// the delay cuts took the window to one unit.  There a round trip gives
// one sample, never near the base, and no cut can lower it: the flow ran
// a block a round trip for the rest of the epoch (10 s; the collective
// took 5.7 s against 0.4 s without the controller).  At the floor every
// round trip above the target counts as a futile cut and the base moves
// again, the epoch notwithstanding.
TEST(Cc, NoisyPathAtTheFloorMovesTheBaseAgain)
{
	Flow f(32, 64, 6);
	f.p.target_us = 1000; // the device default
	NoisyPath path{f, std::mt19937(7)};
	path.until_the_base_moves();
	ASSERT_EQ(f.ctr.rebases, 1u) << "the noisy path never moved the base";
	// A queue above the moved base, then a loss: the base goes back.
	for (int i = 0; i < 2; i++)
		f.round(40 * kMs);
	f.cc.on_loss(f.now, true);
	ASSERT_LT(f.cc.base_delay(), 3 * kMs) << "the loss did not move the base back";
	uint32_t low = 64, high = 0;
	for (int i = 0; i < 200; i++) {
		path.round();
		low = std::min(low, f.cc.window());
		if (i >= 150)
			high = std::max(high, f.cc.window());
	}
	EXPECT_EQ(low, 1u) << "the delay cuts took the window to the floor";
	EXPECT_GE(f.ctr.rebases, 2u);
	// 200 round trips (3 s) of a path nothing queues on: the window is
	// back near its cap, not at one unit a round trip.
	EXPECT_GE(high, 32u) << "the window stayed at the floor";
}

// What started that stall: the loss was a repeat on a timeout that the
// jitter made spurious, with the delay at the moved base.  A queue that
// overflows fills first; a loss without one is the path's and keeps the
// move (and, like any loss without a queue, cuts nothing).
TEST(Cc, LossAtTheMovedBaseKeepsTheMove)
{
	Flow f(32, 64, 6);
	f.p.target_us = 1000;
	NoisyPath path{f, std::mt19937(7)};
	path.until_the_base_moves();
	ASSERT_EQ(f.ctr.rebases, 1u);
	const uint64_t moved = f.cc.base_delay();
	ASSERT_GT(moved, 5 * kMs);
	// Round trips at the moved base, a window that has grown back.
	for (int i = 0; i < 20; i++)
		f.round(moved + 100 * kUs);
	const uint32_t w = f.cc.window();
	ASSERT_GE(w, 32u);
	const uint64_t cuts = f.ctr.rate_cuts;
	f.cc.on_loss(f.now, true);
	EXPECT_EQ(f.cc.base_delay(), moved);
	EXPECT_EQ(f.ctr.rate_cuts, cuts);
	EXPECT_EQ(f.cc.window(), w);
	// With a queue above the moved base a loss does move it back.
	f.round(moved + 20 * kMs);
	f.round(moved + 20 * kMs);
	f.cc.on_loss(f.now, true);
	EXPECT_LT(f.cc.base_delay(), 3 * kMs);
	EXPECT_EQ(f.ctr.rate_cuts, cuts + 1);
}
