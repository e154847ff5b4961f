// The switch's receive path in one process: a Switch on a loopback port,
// driven by poll_once() from the test, and members played by plain UDP
// sockets that build every packet by hand from ibv_coll_wire(7) (ICRC by
// the test's own reference).  Checks that every datagram is counted in
// exactly one counter, and that packets of another job, with another
// job's key or from an address that is not a member never change a job's
// state or result while two jobs share the switch, and that members of one
// address and port (one shared device) are told apart by their QPs.
#include "switch_peer.h"

#include "switch/switch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

using namespace ibvc_test;
using ibv_coll::emu::Switch;
using ibv_coll::emu::SwitchCounters;
using ibv_coll::emu::SwitchParams;

namespace {

uint64_t drops(const SwitchCounters &c)
{
	return c.drop_icrc + c.drop_malformed + c.drop_key + c.drop_job + c.drop_node +
	       c.drop_block + c.drop_stale + c.drop_busy + c.drop_empty + c.drop_short +
	       c.drop_kind + c.drop_incarnation + c.duplicates;
}

class SwitchAcct : public ::testing::Test {
protected:
	void SetUp() override { open_switch(); }
	// A fresh switch on a loopback port, under `policy`, on `clock`.
	void open_switch(ibv_coll::emu::Policy policy = ibv_coll::emu::Policy::spatial,
			 const ibv_coll::util::Clock *clock = nullptr)
	{
		SwitchParams p;
		p.port = 0;
		p.units = 64;
		p.gso = false;
		p.policy = policy;
		if (clock)
			p.clock = clock;
		sw_ = std::make_unique<Switch>(p);
		ASSERT_EQ(sw_->open(), 0);
	}
	// Serve until the port has counted `total` datagrams since start.
	void pump(uint64_t total)
	{
		for (int i = 0; i < 2000 && sw_->totals().rx_packets < total; i++) {
			sw_->poll_once();
			if (sw_->totals().rx_packets < total)
				usleep(500);
		}
		sw_->poll_once();
		ASSERT_EQ(sw_->totals().rx_packets, total);
	}
	// Two members of job `jid` introduce themselves; both get the grant.
	void configure(const Peer &a, const Peer &b, uint32_t jid, uint64_t key)
	{
		const Peer *m[2] = {&a, &b};
		for (uint16_t n = 0; n < 2; n++) {
			Hdr h;
			h.opcode = 0xe4; // CONFIG
			h.jid = jid;
			h.key = key;
			h.src_node = n;
			h.node_map = 1u << n;
			m[n]->send(sw_->port(), h, task({.node = n}));
		}
		sent_ += 2;
		pump(sent_);
		for (const Peer *p : m) {
			Pkt pk;
			bool granted = false;
			while (p->recv(&pk, 200))
				granted |= pk.opcode == 0xe5 && pk.status == 0 && pk.seg >= 2;
			ASSERT_TRUE(granted) << "no grant for job " << jid;
		}
	}
	std::unique_ptr<Switch> sw_;
	uint64_t sent_ = 0;
};

constexpr uint64_t kKeyA = 0x1111222233334444ull, kKeyB = 0x5555666677778888ull;

} // namespace

// One datagram of each class; each moves exactly its counter and the sum
// of delivered and drops equals what the port received.
TEST_F(SwitchAcct, EveryDatagramCountedOnce)
{
	Peer a, b, stranger;
	configure(a, b, 1, kKeyA);
	SwitchCounters c0 = sw_->totals();
	ASSERT_EQ(c0.rx_packets, c0.delivered + drops(c0));
	ASSERT_EQ(c0.delivered, 2u);
	const uint16_t to = sw_->port();
	Hdr d;
	d.key = kKeyA;
	stranger.raw(to, {});		      // empty
	stranger.raw(to, {1, 2, 3, 4, 5, 6}); // too short
	a.send(to, d, i32(1), true);	      // bad ICRC
	Hdr x = d;
	x.opcode = 0x04; // an RC SEND: not a kind the switch takes
	a.send(to, x, i32(1));
	x = d;
	x.opcode = 0xe3; // ABORT: a switch takes one from its parent only
	a.send(to, x, i32(1));
	x = d;
	x.tver = 1; // bad transport version
	a.send(to, x, i32(1));
	x = d;
	x.len = 8; // CETH length not the payload's
	a.send(to, x, i32(1));
	x = d;
	x.key = kKeyB;
	a.send(to, x, i32(1)); // wrong key
	x = d;
	x.jid = 99;
	a.send(to, x, i32(1));	      // unknown job
	stranger.send(to, d, i32(1)); // not a member
	x = d;
	x.seg = 60;
	a.send(to, x, i32(1)); // beyond the grant
	x = d;
	x.inc = 7; // DATA of another incarnation than the job's
	a.send(to, x, i32(1));
	x = d;
	x.opcode = 0xe6; // RELEASE with a wrong key
	x.key = kKeyB;
	a.send(to, x, {});
	x.key = kKeyA;
	x.jid = 77; // RELEASE of an unknown job
	a.send(to, x, {});
	x.jid = 1;
	stranger.send(to, x, {}); // RELEASE from a non-member
	x = d;
	x.opcode = 0xe5; // CONFIG_ACK from a child: only a parent sends one
	a.send(to, x, {});
	a.send(to, d, i32(5)); // a real partial: delivered
	a.send(to, d, i32(5)); // its repeat: a duplicate
	sent_ += 18;
	pump(sent_);
	SwitchCounters c1 = sw_->totals();
	EXPECT_EQ(c1.rx_packets - c0.rx_packets, 18u);
	EXPECT_EQ(c1.drop_incarnation - c0.drop_incarnation, 1u);
	EXPECT_EQ(c1.drop_empty - c0.drop_empty, 1u);
	EXPECT_EQ(c1.drop_short - c0.drop_short, 1u);
	EXPECT_EQ(c1.drop_icrc - c0.drop_icrc, 1u);
	EXPECT_EQ(c1.drop_kind - c0.drop_kind, 1u);
	EXPECT_EQ(c1.drop_malformed - c0.drop_malformed, 2u);
	EXPECT_EQ(c1.drop_key - c0.drop_key, 2u);
	EXPECT_EQ(c1.drop_job - c0.drop_job, 2u);
	EXPECT_EQ(c1.drop_node - c0.drop_node, 4u);
	EXPECT_EQ(c1.drop_block - c0.drop_block, 1u);
	EXPECT_EQ(c1.duplicates - c0.duplicates, 1u);
	EXPECT_EQ(c1.delivered - c0.delivered, 1u);
	EXPECT_EQ(c1.rx_packets, c1.delivered + drops(c1)) << "a datagram counted nowhere or twice";

	// The job lives on: node 1's partial completes the block, 5 + 7.
	Hdr e = d;
	e.src_node = 1;
	e.node_map = 2;
	b.send(to, e, i32(7));
	pump(++sent_);
	for (const Peer *p : {&a, &b}) {
		Pkt pk;
		bool got = false;
		while (!got && p->recv(&pk, 200))
			got = pk.opcode == 0xe1;
		ASSERT_TRUE(got);
		ASSERT_EQ(pk.payload.size(), 4u);
		EXPECT_EQ(pk.value(), 12);
	}
	// Both RELEASE, then once more: the job is gone, the repeat counted.
	x = d;
	x.opcode = 0xe6;
	a.send(to, x, {});
	a.send(to, x, {});
	sent_ += 2;
	pump(sent_);
	SwitchCounters c2 = sw_->totals();
	EXPECT_EQ(c2.releases - c1.releases, 1u);
	EXPECT_EQ(c2.duplicates - c1.duplicates, 1u);
	EXPECT_EQ(c2.rx_packets, c2.delivered + drops(c2));
}

// Two jobs share the switch; forged packets across them change nothing.
TEST_F(SwitchAcct, ForgedAcrossTenantsChangeNothing)
{
	Peer a0, a1, b0, b1, stranger;
	configure(a0, a1, 1, kKeyA);
	configure(b0, b1, 2, kKeyB);
	const uint16_t to = sw_->port();
	SwitchCounters c0 = sw_->totals();
	// Node 0 of each job sends its partial of block (1, 0).
	Hdr da, db;
	da.jid = 1;
	da.key = kKeyA;
	db.jid = 2;
	db.key = kKeyB;
	a0.send(to, da, i32(100));
	b0.send(to, db, i32(1000));
	// Forgeries aimed at job 1, node 1's share of the same block:
	Hdr f = da;
	f.src_node = 1;
	f.node_map = 2;
	b1.send(to, f, i32(-50)); // job 2's member, job 1's ID and key
	Hdr g = f;
	g.key = kKeyB;
	b1.send(to, g, i32(-51)); // job 2's key on job 1's ID
	g = f;
	g.jid = 2;
	g.key = kKeyA;
	a1.send(to, g, i32(-52));	// job 1's key on job 2's ID
	stranger.send(to, f, i32(-53)); // right ID and key, not a member
	g = f;
	g.opcode = 0xe6;
	b1.send(to, g, {}); // job 2's member releases job 1
	g.key = kKeyB;
	a1.send(to, g, {}); // job 1's member, wrong key
	g = f;
	g.opcode = 0xe4; // a second CONFIG for node 1 from elsewhere
	stranger.send(to, g, task({.node = 1}));
	sent_ += 9;
	pump(sent_);
	SwitchCounters c1 = sw_->totals();
	EXPECT_EQ(c1.delivered - c0.delivered, 2u) << "only the two real partials";
	EXPECT_EQ(c1.reductions - c0.reductions, 2u) << "a forged partial was folded";
	EXPECT_EQ(c1.releases, c0.releases);
	EXPECT_EQ(c1.rx_packets, c1.delivered + drops(c1));
	for (const Peer *p : {&a0, &a1, &b0, &b1}) {
		Pkt pk;
		EXPECT_FALSE(p->recv(&pk, 50) && pk.opcode == 0xe1)
			<< "a result before the real members all sent";
	}
	// The real node-1 partials complete both blocks exactly.
	Hdr ra = da, rb = db;
	ra.src_node = rb.src_node = 1;
	ra.node_map = rb.node_map = 2;
	a1.send(to, ra, i32(1));
	b1.send(to, rb, i32(2));
	sent_ += 2;
	pump(sent_);
	auto result = [](const Peer &p) {
		Pkt pk;
		while (p.recv(&pk, 200))
			if (pk.opcode == 0xe1 && pk.payload.size() == 4)
				return pk.value();
		return INT32_MIN;
	};
	EXPECT_EQ(result(a0), 101);
	EXPECT_EQ(result(a1), 101);
	EXPECT_EQ(result(b0), 1002);
	EXPECT_EQ(result(b1), 1002);
	SwitchCounters c2 = sw_->totals();
	EXPECT_EQ(c2.rx_packets, c2.delivered + drops(c2));
}

// Partials whose fold order cannot change the result's bits (integers:
// op_order_free) fold as they come; floats' wait for their turn in child
// order (copied), so that which partial came first does not change the
// result.  Node 1's partial of each job comes first.
TEST_F(SwitchAcct, IntegerPartialsFoldAsTheyComeFloatsInChildOrder)
{
	Peer a0, a1, b0, b1;
	configure(a0, a1, 1, kKeyA);
	configure(b0, b1, 2, kKeyB);
	const uint16_t to = sw_->port();
	auto f32 = [](float x) {
		std::vector<uint8_t> b(4);
		memcpy(b.data(), &x, 4);
		return b;
	};
	Hdr hi, hf;
	hi.jid = 1;
	hi.key = kKeyA;
	hf.jid = 2;
	hf.key = kKeyB;
	hf.dtype = 10; // FLOAT32
	hi.src_node = hf.src_node = 1;
	hi.node_map = hf.node_map = 2;
	const SwitchCounters c0 = sw_->totals();
	a1.send(to, hi, i32(7));
	b1.send(to, hf, f32(1.0f));
	sent_ += 2;
	pump(sent_);
	const SwitchCounters c1 = sw_->totals();
	EXPECT_EQ(c1.reductions - c0.reductions, 1u)
		<< "the integer partial waited for node 0's, or the float one did not";
	hi.src_node = hf.src_node = 0;
	hi.node_map = hf.node_map = 1;
	a0.send(to, hi, i32(35));
	b0.send(to, hf, f32(0.5f));
	sent_ += 2;
	pump(sent_);
	EXPECT_EQ(sw_->totals().reductions - c1.reductions, 3u);
	for (const Peer *p : {&a0, &a1, &b0, &b1}) {
		Pkt pk;
		bool got = false;
		while (!got && p->recv(&pk, 200))
			got = pk.opcode == 0xe1 && pk.payload.size() == 4;
		ASSERT_TRUE(got) << "no result";
		if (p == &a0 || p == &a1) {
			EXPECT_EQ(pk.value(), 42);
		} else {
			float v;
			memcpy(&v, pk.payload.data(), 4);
			EXPECT_EQ(v, 1.5f);
		}
	}
}

// Found by fuzz_switch_rx: a task naming a node index of 64 or more was
// used as a shift count (undefined; on x86 node 65 passed for node 1, so
// a stranger could take node 1's place in an inline job).
TEST_F(SwitchAcct, TaskWithNodeIndexBeyondTheJobIsRefused)
{
	Peer a, stranger;
	const uint16_t to = sw_->port();
	Hdr d;
	d.flags = 1; // inline: the task follows the CETH
	d.jid = 5;
	d.key = kKeyA;
	const std::vector<uint8_t> v = i32(1);
	// Node 0, as it should: makes the job, waits for node 1.
	a.send(to, d, cat(task({.seg_req = 4}), v));
	d.src_node = 1;
	d.node_map = 2;
	for (uint16_t bad : {uint16_t(65), uint16_t(129)}) // node 1's share under another index
		stranger.send(to, d, cat(task({.node = bad, .seg_req = 4}), v));
	sent_ += 3;
	pump(sent_);
	SwitchCounters c = sw_->totals();
	EXPECT_EQ(c.drop_busy, 1u); // node 0's partial: the job is not granted yet
	EXPECT_EQ(c.drop_node, 2u);
	EXPECT_EQ(c.delivered, 0u) << "a task with a node beyond the job was taken";
	EXPECT_EQ(c.rx_packets, c.delivered + drops(c));
}

// Found by fuzz_switch_rx: DATA whose phase (o + 1: only node o needs the
// result's data) named a node beyond the job was taken, and the result
// then shifted a node bitmap by it.
TEST_F(SwitchAcct, PhaseNamingANodeBeyondTheJobIsRefused)
{
	Peer a, b;
	configure(a, b, 1, kKeyA);
	const uint16_t to = sw_->port();
	SwitchCounters c0 = sw_->totals();
	Hdr d;
	d.key = kKeyA;
	d.phase = 116;
	a.send(to, d, i32(1));
	d.phase = 3; // node 2 of a two-node job
	a.send(to, d, i32(1));
	d.phase = 2; // node 1: fine
	a.send(to, d, i32(1));
	sent_ += 3;
	pump(sent_);
	SwitchCounters c1 = sw_->totals();
	EXPECT_EQ(c1.drop_block - c0.drop_block, 2u);
	EXPECT_EQ(c1.delivered - c0.delivered, 1u);
	EXPECT_EQ(c1.rx_packets, c1.delivered + drops(c1));
}

// Found by fuzz_switch_rx under --policy tdm: a repeated admission request
// was counted both delivered and duplicate.  Each member's first request is
// delivered, its repeat a duplicate, and every datagram counted once.
TEST_F(SwitchAcct, TdmAdmissionRequestsCountedOnce)
{
	open_switch(ibv_coll::emu::Policy::tdm);
	Peer a, b;
	configure(a, b, 1, kKeyA);
	const SwitchCounters c0 = sw_->totals();
	Hdr h;
	h.opcode = 0xe4; // CONFIG
	h.flags = 0x20;	 // ADMIT
	h.jid = 1;
	h.key = kKeyA;
	h.mid = 1;
	h.seq = 1000;	 // the job's timeout, ms
	h.rank_map = 64; // the message's bytes
	a.send(sw_->port(), h, {});
	a.send(sw_->port(), h, {}); // a repeat (our answer lost)
	h.src_node = 1;
	h.node_map = 2;
	b.send(sw_->port(), h, {});
	sent_ += 3;
	pump(sent_);
	const SwitchCounters c = sw_->totals();
	EXPECT_EQ(c.delivered - c0.delivered, 2u);
	EXPECT_EQ(c.duplicates - c0.duplicates, 1u);
	EXPECT_EQ(c.rx_packets, c.delivered + drops(c));
	// Both members hear the same decision, twice for a.
	for (const Peer *m : {&a, &b}) {
		Pkt pk;
		int answers = 0;
		while (m->recv(&pk, 200))
			answers += pk.opcode == 0xe5 && pk.status == 0;
		EXPECT_EQ(answers, m == &a ? 2 : 1);
	}
}

// A clock the test may turn back: what worker 0's clock reading is when
// it waited for the exclusive lock while other workers stamped a job with
// later times under the shared one.
class TurnedClock final : public ibv_coll::util::Clock {
public:
	uint64_t now() const override { return t.load(); }
	std::atomic<uint64_t> t{10'000'000'000ull};
};

// Regression (tools.switch_tenants with 4 workers on a loaded host): worker
// 0 read the clock, then waited for the exclusive lock while the others
// stamped the job's packets later, and took now - last, unsigned, for
// centuries: the tdm pool's holder was found silent and the job idle and
// forgotten in the middle of its message, and the next job timed out.  A
// time older than a stamp is no time at all.
TEST_F(SwitchAcct, TimeReadBeforeAStampNeitherFreesThePoolNorForgetsTheJob)
{
	constexpr uint64_t kMs = 1000000;
	TurnedClock clk;
	open_switch(ibv_coll::emu::Policy::tdm, &clk);
	Peer a, b;
	configure(a, b, 1, kKeyA);
	const uint16_t to = sw_->port();
	// Message 1 takes the pool; its members' timeout is 5 s.
	Hdr ad;
	ad.opcode = 0xe4; // CONFIG
	ad.flags = 0x20;  // ADMIT
	ad.key = kKeyA;
	ad.seq = 5000;
	ad.rank_map = 4;
	a.send(to, ad, {});
	ad.src_node = 1;
	ad.node_map = 2;
	b.send(to, ad, {});
	sent_ += 2;
	pump(sent_);
	for (const Peer *m : {&a, &b}) {
		Pkt pk;
		bool admitted = false;
		while (m->recv(&pk, 200))
			admitted |= pk.opcode == 0xe5 && pk.status == 0;
		ASSERT_TRUE(admitted);
	}
	// a's partial 1.5 s on stamps the job; then the timers run with a
	// time read 0.3 s before that stamp (and more than a second after
	// the last look for idle jobs).
	clk.t += 1500 * kMs;
	Hdr d;
	d.key = kKeyA;
	a.send(to, d, i32(5));
	sent_++;
	pump(sent_);
	clk.t -= 300 * kMs;
	sw_->poll_once();
	clk.t += 400 * kMs;
	// b's partial completes the block: the job is still known and still
	// holds the pool, and both members get 5 + 7.
	Hdr e = d;
	e.src_node = 1;
	e.node_map = 2;
	b.send(to, e, i32(7));
	sent_++;
	pump(sent_);
	const SwitchCounters c = sw_->totals();
	EXPECT_EQ(c.drop_job, 0u);
	EXPECT_EQ(c.drop_busy, 0u);
	for (const Peer *m : {&a, &b}) {
		Pkt pk;
		int32_t got = INT32_MIN;
		while (m->recv(&pk, 200))
			if (pk.opcode == 0xe1)
				got = pk.value();
		EXPECT_EQ(got, 12);
	}
}

// Regression: the nodes of one job on one shared device (ibv_coll_devd)
// share its address and UDP port, each with its own collective QP.  The
// switch told children apart by address and port, so the second node's
// CONFIG was dropped (drop_node) and the job never granted.  Here one
// socket plays both nodes, QPs 0x11 and 0x12: each is granted, each gets
// the result 5 + 7 at its own QP, and a third QP of that endpoint claiming
// node 1 is refused without taking node 1's results.
TEST_F(SwitchAcct, MembersOfOneEndpointAreToldApartByQpn)
{
	Peer dev;
	const uint16_t to = sw_->port();
	const uint32_t qpn[2] = {0x11, 0x12};
	for (uint16_t n = 0; n < 2; n++) {
		Hdr h;
		h.opcode = 0xe4; // CONFIG
		h.key = kKeyA;
		h.src_node = n;
		h.node_map = 1u << n;
		dev.send(to, h, task({.node = n, .qpn = qpn[n]}));
	}
	sent_ += 2;
	pump(sent_);
	SwitchCounters c = sw_->totals();
	EXPECT_EQ(c.drop_node, 0u);
	EXPECT_EQ(c.grants, 1u);
	// Both QPs granted, each at its own QP: the BTH names it.
	Pkt pk;
	int grants[2] = {0, 0};
	while (dev.recv(&pk, 200))
		for (int n = 0; n < 2; n++)
			grants[n] += pk.opcode == 0xe5 && pk.status == 0 && pk.seg >= 2 &&
				     pk.dqpn == qpn[n];
	EXPECT_EQ(grants[0], 1);
	EXPECT_EQ(grants[1], 1);

	// Another QP of the same device claims node 1: refused.
	Hdr h;
	h.opcode = 0xe4;
	h.key = kKeyA;
	h.src_node = 1;
	h.node_map = 2;
	dev.send(to, h, task({.node = 1, .qpn = 0x13}));
	pump(++sent_);
	EXPECT_EQ(sw_->totals().drop_node, 1u) << "a second QP took node 1's place";
	dev.drain();

	// Each node's partial; the result goes to each QP, and only to them.
	Hdr d;
	d.key = kKeyA;
	dev.send(to, d, i32(5));
	d.src_node = 1;
	d.node_map = 2;
	dev.send(to, d, i32(7));
	sent_ += 2;
	pump(sent_);
	int results[2] = {0, 0}, others = 0;
	while (dev.recv(&pk, 200)) {
		if (pk.opcode != 0xe1)
			continue;
		ASSERT_EQ(pk.payload.size(), 4u);
		EXPECT_EQ(pk.value(), 12);
		if (pk.dqpn == qpn[0] || pk.dqpn == qpn[1])
			results[pk.dqpn == qpn[1]]++;
		else
			others++;
	}
	EXPECT_EQ(results[0], 1);
	EXPECT_EQ(results[1], 1);
	EXPECT_EQ(others, 0);

	// Each node releases: two releases from one endpoint end the job.
	Hdr r;
	r.opcode = 0xe6;
	r.key = kKeyA;
	dev.send(to, r, {});
	r.src_node = 1;
	r.node_map = 2;
	dev.send(to, r, {});
	sent_ += 2;
	pump(sent_);
	c = sw_->totals();
	EXPECT_EQ(c.releases, 2u);
	SwitchCounters job;
	EXPECT_FALSE(sw_->job_counters(1, &job)) << "the job outlived its members' releases";
	EXPECT_EQ(c.rx_packets, c.delivered + drops(c));
}
