// The switch's receive path in one process: a Switch on a loopback port,
// driven by poll_once() from the test, and members played by plain UDP
// sockets that build every packet by hand from ibv_coll_wire(7) (ICRC by
// the test's own reference).  Checks that every datagram is counted in
// exactly one counter, and that packets of another job, with another
// job's key or from an address that is not a member never change a job's
// state or result while two jobs share the switch, and that members of one
// address and port (one shared device) are told apart by their QPs.
#include "ref_icrc.h"

#include "switch/switch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace ibvc_test;
using ibv_coll::emu::Switch;
using ibv_coll::emu::SwitchCounters;
using ibv_coll::emu::SwitchParams;

namespace {

const uint8_t kLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};

void put(std::vector<uint8_t> &v, uint64_t x, int bytes)
{
	for (int s = 8 * (bytes - 1); s >= 0; s -= 8)
		v.push_back(uint8_t(x >> s));
}

struct Hdr {
	uint8_t opcode = 0xe0; // DATA
	uint8_t tver = 0;
	uint16_t pkey = 0xffff;
	uint8_t coll = 0x40, op = 0 /* SUM */, dtype = 2 /* INT32 */, flags = 0, status = 0;
	uint8_t phase = 0;
	uint16_t src_node = 0;
	uint32_t jid = 1, mid = 1, sid = 0;
	uint16_t seg = 0;
	int len = -1; // -1: the payload's
	uint64_t node_map = 1, rank_map = 1, key = 0;
	uint32_t inc = 1; // the job's first incarnation
	uint32_t seq = 0; // the block's number in the job: all tests use block 0
	uint32_t hold = 0;
};

// Task information (wire/swproto.h's layout, written out here).
std::vector<uint8_t> task(uint16_t node, uint16_t nodes, uint64_t members, uint32_t seg_req,
			  uint32_t qpn = 0x77)
{
	std::vector<uint8_t> t;
	put(t, node, 2);
	put(t, nodes, 2);
	put(t, qpn, 4);
	put(t, members, 8);
	put(t, members, 8); // subtree: a single switch serves them all
	put(t, seg_req, 4);
	put(t, 0, 2);
	put(t, 0, 2);
	t.insert(t.end(), 16, 0);
	return t;
}

std::vector<uint8_t> i32(int32_t x)
{
	std::vector<uint8_t> b(4);
	memcpy(b.data(), &x, 4); // reduced in host order
	return b;
}

class Peer {
public:
	Peer()
	{
		fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		socklen_t l = sizeof(a);
		getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &l);
		port_ = ntohs(a.sin_port);
	}
	~Peer() { close(fd_); }
	Peer(const Peer &) = delete;
	Peer &operator=(const Peer &) = delete;

	void raw(uint16_t to, const std::vector<uint8_t> &b) const
	{
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = htons(to);
		sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<sockaddr *>(&a), sizeof(a));
	}
	void send(uint16_t to, const Hdr &h, const std::vector<uint8_t> &payload,
		  bool bad_icrc = false) const
	{
		std::vector<uint8_t> r;
		uint32_t pad = (4 - (payload.size() & 3)) & 3;
		r.push_back(h.opcode);
		r.push_back(uint8_t(0x40 | pad << 4 | h.tver));
		put(r, h.pkey, 2);
		put(r, 0, 4);
		put(r, 0, 4);
		for (uint8_t x : {h.coll, h.op, h.dtype, h.flags, h.status, h.phase})
			r.push_back(x);
		put(r, h.src_node, 2);
		put(r, h.jid, 4);
		put(r, h.mid, 4);
		put(r, h.sid, 4);
		put(r, h.seg, 2);
		put(r, h.len < 0 ? payload.size() : size_t(h.len), 2);
		put(r, h.node_map, 8);
		put(r, h.rank_map, 8);
		put(r, h.key, 8);
		put(r, h.inc, 4);
		put(r, h.seq, 4);
		put(r, h.hold, 4);
		put(r, 0, 4); // queue
		r.insert(r.end(), payload.begin(), payload.end());
		r.insert(r.end(), pad, 0);
		uint32_t crc = ref_icrc(false, kLo, kLo, port_, to, r) ^ (bad_icrc ? 1 : 0);
		for (int i = 0; i < 4; i++)
			r.push_back(uint8_t(crc >> (8 * i)));
		raw(to, r);
	}
	// The next packet to us: its opcode, CETH status/seg and payload, and
	// the BTH's destination QP.
	bool recv(uint8_t *opcode, std::vector<uint8_t> *payload, uint16_t *seg = nullptr,
		  uint8_t *status = nullptr, int timeout_ms = 0, uint32_t *dqpn = nullptr) const
	{
		uint8_t b[9000];
		pollfd pf{fd_, POLLIN, 0};
		if (poll(&pf, 1, timeout_ms) != 1)
			return false;
		ssize_t n = ::recv(fd_, b, sizeof(b), 0);
		if (n < 12 + 64 + 4)
			return false;
		*opcode = b[0];
		uint32_t pad = (b[1] >> 4) & 3;
		payload->assign(b + 12 + 64, b + n - 4 - pad);
		if (seg)
			*seg = uint16_t(b[12 + 20] << 8 | b[12 + 21]);
		if (status)
			*status = b[12 + 4];
		if (dqpn)
			*dqpn = uint32_t(b[5]) << 16 | uint32_t(b[6]) << 8 | b[7];
		return true;
	}
	void drain() const
	{
		uint8_t op;
		std::vector<uint8_t> p;
		while (recv(&op, &p))
			;
	}
	uint16_t port() const { return port_; }

private:
	int fd_;
	uint16_t port_;
};

uint64_t drops(const SwitchCounters &c)
{
	return c.drop_icrc + c.drop_malformed + c.drop_key + c.drop_job + c.drop_node +
	       c.drop_block + c.drop_stale + c.drop_busy + c.drop_empty + c.drop_short +
	       c.drop_kind + c.drop_incarnation + c.duplicates;
}

class SwitchAcct : public ::testing::Test {
protected:
	void SetUp() override
	{
		SwitchParams p;
		p.port = 0;
		p.units = 64;
		p.gso = false;
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
			m[n]->send(sw_->port(), h, task(n, 2, 3, 8));
		}
		sent_ += 2;
		pump(sent_);
		for (const Peer *p : m) {
			uint8_t op = 0, st = 1;
			uint16_t seg = 0;
			std::vector<uint8_t> pl;
			bool granted = false;
			while (p->recv(&op, &pl, &seg, &st, 200))
				granted |= op == 0xe5 && st == 0 && seg >= 2;
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
		uint8_t op = 0;
		std::vector<uint8_t> pl;
		bool got = false;
		while (!got && p->recv(&op, &pl, nullptr, nullptr, 200))
			got = op == 0xe1;
		ASSERT_TRUE(got);
		ASSERT_EQ(pl.size(), 4u);
		int32_t r;
		memcpy(&r, pl.data(), 4);
		EXPECT_EQ(r, 12);
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
	stranger.send(to, g, task(1, 2, 3, 8));
	sent_ += 9;
	pump(sent_);
	SwitchCounters c1 = sw_->totals();
	EXPECT_EQ(c1.delivered - c0.delivered, 2u) << "only the two real partials";
	EXPECT_EQ(c1.reductions - c0.reductions, 2u) << "a forged partial was folded";
	EXPECT_EQ(c1.releases, c0.releases);
	EXPECT_EQ(c1.rx_packets, c1.delivered + drops(c1));
	for (const Peer *p : {&a0, &a1, &b0, &b1}) {
		uint8_t op;
		std::vector<uint8_t> pl;
		EXPECT_FALSE(p->recv(&op, &pl, nullptr, nullptr, 50) && op == 0xe1)
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
		uint8_t op = 0;
		std::vector<uint8_t> pl;
		while (p.recv(&op, &pl, nullptr, nullptr, 200))
			if (op == 0xe1 && pl.size() == 4) {
				int32_t r;
				memcpy(&r, pl.data(), 4);
				return r;
			}
		return INT32_MIN;
	};
	EXPECT_EQ(result(a0), 101);
	EXPECT_EQ(result(a1), 101);
	EXPECT_EQ(result(b0), 1002);
	EXPECT_EQ(result(b1), 1002);
	SwitchCounters c2 = sw_->totals();
	EXPECT_EQ(c2.rx_packets, c2.delivered + drops(c2));
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
	std::vector<uint8_t> pl = task(0, 2, 3, 4);
	pl.insert(pl.end(), v.begin(), v.end());
	a.send(to, d, pl); // node 0, as it should: makes the job, waits for node 1
	d.src_node = 1;
	d.node_map = 2;
	for (uint16_t bad : {uint16_t(65), uint16_t(129)}) {
		std::vector<uint8_t> f = task(bad, 2, 3, 4);
		f.insert(f.end(), v.begin(), v.end());
		stranger.send(to, d, f); // node 1's share under another index
	}
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
	SwitchParams p;
	p.port = 0;
	p.units = 64;
	p.gso = false;
	p.policy = ibv_coll::emu::Policy::tdm;
	sw_ = std::make_unique<Switch>(p);
	ASSERT_EQ(sw_->open(), 0);
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
		uint8_t op = 0, st = 9;
		std::vector<uint8_t> pl;
		int answers = 0;
		while (m->recv(&op, &pl, nullptr, &st, 200))
			answers += op == 0xe5 && st == 0;
		EXPECT_EQ(answers, m == &a ? 2 : 1);
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
		dev.send(to, h, task(n, 2, 3, 8, qpn[n]));
	}
	sent_ += 2;
	pump(sent_);
	SwitchCounters c = sw_->totals();
	EXPECT_EQ(c.drop_node, 0u);
	EXPECT_EQ(c.grants, 1u);
	// Both QPs granted, each at its own QP: the BTH names it.
	uint8_t op = 0, st = 0;
	uint16_t seg = 0;
	uint32_t dqpn = 0;
	std::vector<uint8_t> pl;
	int grants[2] = {0, 0};
	while (dev.recv(&op, &pl, &seg, &st, 200, &dqpn))
		for (int n = 0; n < 2; n++)
			grants[n] += op == 0xe5 && st == 0 && seg >= 2 && dqpn == qpn[n];
	EXPECT_EQ(grants[0], 1);
	EXPECT_EQ(grants[1], 1);

	// Another QP of the same device claims node 1: refused.
	Hdr h;
	h.opcode = 0xe4;
	h.key = kKeyA;
	h.src_node = 1;
	h.node_map = 2;
	dev.send(to, h, task(1, 2, 3, 8, 0x13));
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
	while (dev.recv(&op, &pl, nullptr, nullptr, 200, &dqpn)) {
		if (op != 0xe1)
			continue;
		int32_t r = 0;
		ASSERT_EQ(pl.size(), 4u);
		memcpy(&r, pl.data(), 4);
		EXPECT_EQ(r, 12);
		if (dqpn == qpn[0] || dqpn == qpn[1])
			results[dqpn == qpn[1]]++;
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
