// The switch's accounting by packet class: one test for each row of
// ibv_coll_switchd(8), OUTPUT, Packet classes.  A Switch on a loopback port
// serves a job of two members, driven by poll_once() from the test; the
// members (and, for a leaf, its spine) are UDP sockets that build every
// packet by hand from ibv_coll_wire(7), the ICRC by the test's own
// reference.  Each test sends one packet, valid but for the defect of its
// class, and compares every counter of the totals before and after: the
// class's own counter moved by one, the port's by the datagram, those the
// page names with it (data, what is sent in answer) by what it says, and
// no other.  Then the job still reduces a block.
#include "switch_peer.h"

#include "switch/switch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace ibvc_test;
using ibv_coll::emu::Policy;
using ibv_coll::emu::Switch;
using ibv_coll::emu::SwitchCounters;
using ibv_coll::emu::SwitchParams;

namespace {

// Opcodes and CETH flags of ibv_coll_wire(7).
constexpr uint8_t kData = 0xe0, kResult = 0xe1, kAck = 0xe2, kAbort = 0xe3, kConfig = 0xe4,
		  kConfigAck = 0xe5, kRelease = 0xe6, kStats = 0xe7, kStatsReply = 0xe8;
constexpr uint8_t kInline = 1 << 0, kRetrans = 1 << 1, kSuperseded = 1 << 4, kAdmit = 1 << 5,
		  kNak = 1 << 6, kAsk = 1 << 7;
constexpr uint16_t kSwitchNode = 0xffff;
constexpr uint64_t kKey = 0x1111222233334444ull, kOtherKey = 0x5555666677778888ull;
constexpr size_t kTaskBytes = 48;	  // task information
constexpr uint32_t kGrant = 8;		  // the Seg units the members ask for (the pool has 64)
constexpr uint32_t kUnitBytes = 4096;	  // a Seg unit
constexpr uint32_t kLastSeq = kGrant - 1; // the block still_serves() reduces: no test uses its unit
static_assert(Task{}.seg_req == kGrant, "a task asks for kGrant units");

// Every counter by name: the test's own list, not the switch's.
struct Field {
	const char *name;
	uint64_t SwitchCounters::*m;
};
using C = SwitchCounters;
const Field kFields[] = {
	{"rx_packets", &C::rx_packets},
	{"rx_bytes", &C::rx_bytes},
	{"tx_packets", &C::tx_packets},
	{"tx_bytes", &C::tx_bytes},
	{"data", &C::data},
	{"reductions", &C::reductions},
	{"results", &C::results},
	{"duplicates", &C::duplicates},
	{"retrans_answered", &C::retrans_answered},
	{"resent_up", &C::resent_up},
	{"asks", &C::asks},
	{"naks", &C::naks},
	{"tail_naks", &C::tail_naks},
	{"results_again", &C::results_again},
	{"configs", &C::configs},
	{"grants", &C::grants},
	{"denials", &C::denials},
	{"releases", &C::releases},
	{"drop_icrc", &C::drop_icrc},
	{"drop_malformed", &C::drop_malformed},
	{"drop_key", &C::drop_key},
	{"drop_job", &C::drop_job},
	{"drop_node", &C::drop_node},
	{"drop_block", &C::drop_block},
	{"drop_stale", &C::drop_stale},
	{"drop_busy", &C::drop_busy},
	{"drop_incarnation", &C::drop_incarnation},
	{"incarnations", &C::incarnations},
	{"delivered", &C::delivered},
	{"drop_empty", &C::drop_empty},
	{"drop_short", &C::drop_short},
	{"drop_kind", &C::drop_kind},
	{"adm_grants", &C::adm_grants},
	{"adm_busy", &C::adm_busy},
	{"adm_scored", &C::adm_scored},
	{"adm_refused", &C::adm_refused},
	{"pool_us", &C::pool_us},
	{"adm_streak", &C::adm_streak},
};
static_assert(sizeof(SwitchCounters) == std::size(kFields) * sizeof(uint64_t),
	      "a counter the test does not check: add it to kFields");

// The counters a packet moves besides the port's receive counters: each
// by how much.
using Delta = std::vector<std::pair<uint64_t SwitchCounters::*, uint64_t>>;

// Sent in answer: n packets of `bytes` each.
Delta sent(uint64_t n, uint64_t bytes)
{
	return {{&C::tx_packets, n}, {&C::tx_bytes, n * bytes}};
}

Delta operator+(Delta a, const Delta &b)
{
	a.insert(a.end(), b.begin(), b.end());
	return a;
}

uint64_t counted(const SwitchCounters &c)
{
	return c.delivered + c.duplicates + c.drop_icrc + c.drop_malformed + c.drop_key +
	       c.drop_job + c.drop_node + c.drop_block + c.drop_stale + c.drop_busy +
	       c.drop_incarnation + c.drop_empty + c.drop_short + c.drop_kind;
}

class SwitchClass : public ::testing::Test {
protected:
	void SetUp() override
	{
		start();
		configure();
	}
	void start(Policy policy = Policy::spatial, uint32_t max_job_units = 0)
	{
		SwitchParams p;
		p.port = 0;
		p.units = 64;
		p.unit_bytes = kUnitBytes;
		p.gso = false;
		p.policy = policy;
		p.max_job_units = max_job_units;
		sw_ = std::make_unique<Switch>(p);
		ASSERT_EQ(sw_->open(), 0);
		sent_ = 0;
	}
	uint16_t to() const { return sw_->port(); }
	// Serve until the port has counted `total` datagrams.
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
	void serve(const Peer &from, const Hdr &h, const std::vector<uint8_t> &pl)
	{
		from.send(to(), h, pl);
		pump(++sent_);
	}
	static Hdr config_hdr(uint16_t n)
	{
		Hdr h;
		h.opcode = kConfig;
		h.key = kKey;
		h.src_node = n;
		h.node_map = 1ull << n;
		return h;
	}
	// Member n's partial of block seq (in unit seq mod kGrant, one plane).
	static Hdr data(uint16_t n, uint32_t seq = 0)
	{
		Hdr h;
		h.key = kKey;
		h.src_node = n;
		h.node_map = 1ull << n;
		h.seq = seq;
		h.seg = uint16_t(seq % kGrant);
		return h;
	}
	static Hdr bare(uint8_t opcode, uint16_t n, uint8_t flags = 0)
	{
		Hdr h = data(n);
		h.opcode = opcode;
		h.flags = flags;
		return h;
	}
	// Both members configure; with `granted`, both hear the grant.
	void configure(bool granted = true, uint16_t parent_port = 0)
	{
		serve(a_, config_hdr(0), task_of(0, parent_port));
		serve(b_, config_hdr(1), task_of(1, parent_port));
		for (const Peer *m : {&a_, &b_}) {
			bool grant = false;
			Pkt p;
			while (m->recv(&p))
				grant |= p.opcode == kConfigAck && p.status == 0 && p.seg >= 2;
			if (granted) {
				ASSERT_TRUE(grant) << "a member was not granted";
			}
		}
	}
	void complete(uint32_t seq)
	{
		serve(a_, data(0, seq), i32(5));
		serve(b_, data(1, seq), i32(7));
		a_.drain();
		b_.drain();
	}
	// The one packet of the class: sent, served, every counter checked.
	void one(const Peer &from, const Hdr &h, const std::vector<uint8_t> &pl, const Delta &want,
		 bool bad_icrc = false)
	{
		one_raw(from, from.build(to(), h, pl, bad_icrc), want);
	}
	void one_raw(const Peer &from, const std::vector<uint8_t> &datagram, const Delta &want)
	{
		const SwitchCounters c0 = sw_->totals();
		from.raw(to(), datagram);
		pump(++sent_);
		const SwitchCounters c1 = sw_->totals();
		Delta all = want;
		all.push_back({&C::rx_packets, 1});
		all.push_back({&C::rx_bytes, datagram.size()});
		for (const Field &f : kFields) {
			uint64_t expect = 0;
			for (const auto &[m, d] : all)
				if (m == f.m)
					expect += d;
			EXPECT_EQ(c1.*f.m - c0.*f.m, expect) << f.name;
		}
		EXPECT_EQ(c1.rx_packets, counted(c1)) << "a datagram counted nowhere or twice";
	}
	// The job still reduces a block, 5 + 7, through the spine if any.
	void still_serves(const Peer *spine = nullptr)
	{
		a_.drain();
		b_.drain();
		if (spine)
			spine->drain();
		serve(a_, data(0, kLastSeq), i32(5));
		serve(b_, data(1, kLastSeq), i32(7));
		Pkt p;
		if (spine) {
			ASSERT_TRUE(spine->next(kData, &p)) << "no partial up";
			EXPECT_EQ(p.value(), 12);
			Hdr r = data(0, kLastSeq);
			r.opcode = kResult;
			r.src_node = kSwitchNode;
			r.node_map = 3;
			serve(*spine, r, i32(12));
		}
		for (const Peer *m : {&a_, &b_}) {
			bool got = false;
			while (!got && m->next(kResult, &p))
				got = p.seg == kLastSeq % kGrant && !p.payload.empty();
			ASSERT_TRUE(got) << "no result";
			EXPECT_EQ(p.value(), 12);
		}
	}

	std::unique_ptr<Switch> sw_;
	uint64_t sent_ = 0;
	Peer a_, b_, stranger_; // node 0, node 1, not a member
};

// ---- Every datagram -------------------------------------------------------

TEST_F(SwitchClass, EmptyDatagramIsDropEmpty)
{
	one_raw(stranger_, {}, {{&C::drop_empty, 1}});
	still_serves();
}

TEST_F(SwitchClass, ShorterThanTheHeadersIsDropShort)
{
	std::vector<uint8_t> d = a_.build(to(), data(0), {});
	d.pop_back(); // 79 bytes
	one_raw(a_, d, {{&C::drop_short, 1}});
	still_serves();
}

TEST_F(SwitchClass, BadIcrcIsDropIcrc)
{
	one(a_, data(0), i32(5), {{&C::drop_icrc, 1}}, true);
	still_serves();
}

TEST_F(SwitchClass, BadIcrcOfANonCollectiveOpcodeIsDropIcrc)
{
	Hdr h = data(0);
	h.opcode = 0x04; // RC SEND_ONLY
	one(a_, h, i32(5), {{&C::drop_icrc, 1}}, true);
	still_serves();
}

TEST_F(SwitchClass, RcOpcodeIsDropKind)
{
	Hdr h = data(0);
	h.opcode = 0x04;
	one(a_, h, i32(5), {{&C::drop_kind, 1}});
	still_serves();
}

TEST_F(SwitchClass, OpcodeBeyondStatsReplyIsDropKind)
{
	Hdr h = data(0);
	h.opcode = 0xe9;
	one(a_, h, i32(5), {{&C::drop_kind, 1}});
	still_serves();
}

TEST_F(SwitchClass, AckIsDropKind)
{
	one(a_, bare(kAck, 0), {}, {{&C::drop_kind, 1}});
	still_serves();
}

TEST_F(SwitchClass, StatsReplyIsDropKind)
{
	one(stranger_, bare(kStatsReply, 0), std::vector<uint8_t>(32, 0), {{&C::drop_kind, 1}});
	still_serves();
}

TEST_F(SwitchClass, TransportVersionIsDropMalformed)
{
	Hdr h = data(0);
	h.tver = 1;
	one(a_, h, i32(5), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, PkeyIsDropMalformed)
{
	Hdr h = data(0);
	h.pkey = 0x7fff;
	one(a_, h, i32(5), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, PadLongerThanThePacketIsDropMalformed)
{
	Hdr h = data(0);
	h.pad = 3; // and no payload for it to pad
	one(a_, h, {}, {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, CethLengthNotThePayloadsIsDropMalformed)
{
	Hdr h = data(0);
	h.len = 8;
	one(a_, h, i32(5), {{&C::drop_malformed, 1}});
	still_serves();
}

// ---- STATS ----------------------------------------------------------------

TEST_F(SwitchClass, StatsShorterThanANameIsDropMalformed)
{
	one(stranger_, bare(kStats, 0), std::vector<uint8_t>(28, 0), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, StatsIsDelivered)
{
	// Room for the name alone: the reply is as long, with no records.
	one(stranger_, bare(kStats, 0), std::vector<uint8_t>(32, 0),
	    Delta{{&C::delivered, 1}} + sent(1, kBare + 32));
	Pkt p;
	ASSERT_TRUE(stranger_.next(kStatsReply, &p));
	EXPECT_EQ(p.payload.size(), 32u);
	still_serves();
}

// ---- Before the job: the task information's length ------------------------

TEST_F(SwitchClass, ConfigTaskOfAnotherLengthIsDropMalformed)
{
	std::vector<uint8_t> t = task_of(0);
	t.resize(kTaskBytes - 4);
	one(a_, config_hdr(0), t, {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, InlineDataShorterThanATaskIsDropMalformed)
{
	Hdr h = data(0);
	h.flags = kInline;
	one(a_, h, std::vector<uint8_t>(20, 0), {{&C::drop_malformed, 1}});
	still_serves();
}

// ---- The job: ID, key, incarnation, one test per kind ---------------------

// A kind of packet a member sends with a job's ID, key and incarnation.
struct Kind {
	const char *name;
	uint8_t opcode, flags;
	bool task;    // carries task information (CONFIG, inline DATA)
	bool payload; // carries an int32 after it
};

const Kind kKinds[] = {
	{"Data", kData, 0, false, true},
	{"InlineData", kData, kInline, true, true},
	{"Config", kConfig, 0, true, false},
	{"ConfigAck", kConfigAck, 0, false, false},
	{"Result", kResult, 0, false, true},
	{"Abort", kAbort, kSuperseded, false, false},
	{"Release", kRelease, 0, false, false},
	{"Admit", kConfig, kAdmit, false, false},
	{"AdmitDone", kRelease, kAdmit, false, false},
};

class SwitchJobClass : public SwitchClass, public ::testing::WithParamInterface<Kind> {
protected:
	void send_kind(Hdr h, const Delta &want)
	{
		const Kind &k = GetParam();
		h.opcode = k.opcode;
		h.flags = k.flags;
		std::vector<uint8_t> pl;
		if (k.task)
			pl = task_of(0);
		if (k.payload)
			pl = cat(pl, i32(5));
		one(a_, h, pl, want);
	}
};

TEST_P(SwitchJobClass, UnknownJobIsDropJob)
{
	Hdr h = data(0);
	h.jid = 99;
	if (GetParam().task) {
		// It makes the job instead, and is answered (PENDING: node 1
		// has not spoken), or waits for its grant.
		const bool config = GetParam().opcode == kConfig;
		send_kind(h, config ? Delta{{&C::delivered, 1}, {&C::configs, 1}} + sent(1, kBare)
				    : Delta{{&C::drop_busy, 1}});
	} else {
		send_kind(h, {{&C::drop_job, 1}});
	}
	still_serves();
}

TEST_P(SwitchJobClass, WrongKeyIsDropKey)
{
	Hdr h = data(0);
	h.key = kOtherKey;
	send_kind(h, {{&C::drop_key, 1}});
	still_serves();
}

// An earlier incarnation's packets; its CONFIG and inline DATA (whose task
// names the sender) are answered with an ABORT flagged SUPERSEDED.
TEST_P(SwitchJobClass, EarlierIncarnationIsDropIncarnation)
{
	Hdr h = data(0);
	h.inc = 0;
	const bool told = GetParam().task;
	send_kind(h, Delta{{&C::drop_incarnation, 1}} + sent(told ? 1 : 0, kBare));
	if (told) {
		Pkt p;
		ASSERT_TRUE(a_.next(kAbort, &p));
		EXPECT_TRUE(p.flags & kSuperseded);
	}
	still_serves();
}

// A later incarnation's packets: dropped, but CONFIG and inline DATA,
// which replace the job's incarnation: collected afresh, node 0 is
// answered PENDING (CONFIG), or its partial waits for the grant (inline
// DATA).  LaterIncarnationConfigReplacesTheJob follows the new one.
TEST_P(SwitchJobClass, LaterIncarnationIsDropIncarnation)
{
	Hdr h = data(0);
	h.inc = 2;
	if (!GetParam().task) {
		send_kind(h, {{&C::drop_incarnation, 1}});
		still_serves();
	} else if (GetParam().opcode == kConfig) {
		send_kind(h, Delta{{&C::incarnations, 1}, {&C::delivered, 1}, {&C::configs, 1}} +
				     sent(1, kBare));
	} else {
		send_kind(h, {{&C::incarnations, 1}, {&C::drop_busy, 1}});
	}
}

INSTANTIATE_TEST_SUITE_P(Kinds, SwitchJobClass, ::testing::ValuesIn(kKinds),
			 [](const ::testing::TestParamInfo<Kind> &i) {
				 return std::string(i.param.name);
			 });

TEST_F(SwitchClass, LaterIncarnationConfigReplacesTheJob)
{
	Hdr h = config_hdr(0);
	h.inc = 2;
	// The job is collected afresh: node 0 is answered PENDING.
	one(a_, h, task_of(0),
	    Delta{{&C::delivered, 1}, {&C::configs, 1}, {&C::incarnations, 1}} + sent(1, kBare));
	b_.drain();
	Hdr g = config_hdr(1);
	g.inc = 2;
	serve(b_, g, task_of(1));
	a_.drain();
	b_.drain();
	// still_serves() in incarnation 2.
	Hdr d0 = data(0, kLastSeq), d1 = data(1, kLastSeq);
	d0.inc = d1.inc = 2;
	serve(a_, d0, i32(5));
	serve(b_, d1, i32(7));
	for (const Peer *m : {&a_, &b_}) {
		Pkt p;
		ASSERT_TRUE(m->next(kResult, &p));
		EXPECT_EQ(p.value(), 12);
	}
}

TEST_F(SwitchClass, ConfigMakingAJobWithAnInvalidTaskIsDropMalformed)
{
	Task t;
	t.nodes = 0;
	Hdr h = config_hdr(0);
	h.jid = 2;
	one(a_, h, task(t), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, InlineDataMakingAJobWithAnInvalidTaskIsDropMalformed)
{
	Task t;
	t.subtree = 4; // a node that is not a member
	Hdr h = data(0);
	h.jid = 2;
	h.flags = kInline;
	one(a_, h, cat(task(t), i32(5)), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, LaterIncarnationWithAnInvalidTaskIsDropMalformed)
{
	Task t;
	t.nodes = 0;
	Hdr h = config_hdr(0);
	h.inc = 2;
	one(a_, h, task(t), {{&C::drop_malformed, 1}});
	still_serves();
}

// A task whose sender could not join the job it makes (node 4 of two)
// makes none, and gives none again: a keyed CONFIG of a later incarnation
// ended the running one and then was refused as a child (fuzz_switch_rx).
TEST_F(SwitchClass, LaterIncarnationItsSenderCannotJoinIsDropMalformed)
{
	Task t;
	t.node = 4;
	Hdr h = config_hdr(0);
	h.inc = 2;
	one(stranger_, h, task(t), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigMakingAJobItsSenderCannotJoinIsDropMalformed)
{
	Task t;
	t.node = 4;
	Hdr h = config_hdr(0);
	h.jid = 2;
	one(a_, h, task(t), {{&C::drop_malformed, 1}});
	ibv_coll::emu::SwitchJobView v;
	EXPECT_FALSE(sw_->job_view(2, &v));
	still_serves();
}

TEST_F(SwitchClass, ConfigWhoseTaskDiffersFromTheJobsIsDropMalformed)
{
	Task t;
	t.plane = 1;
	one(a_, config_hdr(0), task(t), {{&C::drop_malformed, 1}});
	still_serves();
}

TEST_F(SwitchClass, InlineDataWhoseTaskDiffersFromTheJobsIsDropMalformed)
{
	Task t;
	t.nodes = 3;
	t.members = t.subtree = 7;
	Hdr h = data(0);
	h.flags = kInline;
	one(a_, h, cat(task(t), i32(5)), {{&C::drop_malformed, 1}});
	still_serves();
}

// ---- CONFIG and inline DATA: the child ------------------------------------

TEST_F(SwitchClass, ConfigWithAnEmptyNodeMapIsDropNode)
{
	Hdr h = config_hdr(0);
	h.node_map = 0;
	one(stranger_, h, task_of(0), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigWithNodesBeyondTheSubtreeIsDropNode)
{
	Hdr h = config_hdr(2);
	one(stranger_, h, task_of(2), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigWhoseTaskNamesAnotherNodeThanItsNodeMapIsDropNode)
{
	Hdr h = config_hdr(1);
	one(stranger_, h, task_of(0), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigOfAKnownChildCoveringOtherNodesIsDropNode)
{
	Hdr h = config_hdr(1);
	Task t;
	t.node = 1;
	t.qpn = 0x77; // node 0's QP: the child a_ is
	one(a_, h, task(t), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigForNodesAnotherChildCoversIsDropNode)
{
	one(stranger_, config_hdr(1), task_of(1), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, InlineDataWhoseTaskNamesANodeBeyondTheJobIsDropNode)
{
	Task t;
	t.node = 65;
	Hdr h = data(1);
	h.flags = kInline;
	one(stranger_, h, cat(task(t), i32(5)), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, RepeatedConfigIsDeliveredAndAnswered)
{
	one(a_, config_hdr(0), task_of(0),
	    Delta{{&C::delivered, 1}, {&C::configs, 1}} + sent(1, kBare));
	Pkt p;
	ASSERT_TRUE(a_.next(kConfigAck, &p));
	EXPECT_EQ(p.status, 0);
	EXPECT_EQ(p.seg, kGrant);
	still_serves();
}

// ---- DATA -----------------------------------------------------------------

TEST_F(SwitchClass, DataNotFromAChildIsDropNode)
{
	one(stranger_, data(0), i32(5), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataOfAnotherMembersNodeIsDropNode)
{
	one(a_, data(1), i32(5), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataWithANodeMapOtherThanItsChildsIsDropNode)
{
	Hdr h = data(0);
	h.node_map = 3;
	one(a_, h, i32(5), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataBeyondTheGrantIsDropBlock)
{
	Hdr h = data(0);
	h.seg = kGrant;
	one(a_, h, i32(5), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataWithAPhaseBeyondTheNodesIsDropBlock)
{
	Hdr h = data(0);
	h.phase = 3; // node 2 of a job of two
	one(a_, h, i32(5), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataLongerThanAUnitIsDropBlock)
{
	one(a_, data(0), std::vector<uint8_t>(kUnitBytes + 4, 0), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataNotOfWholeElementsIsDropBlock)
{
	one(a_, data(0), std::vector<uint8_t>(6, 0), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataOfAnUnknownOperationIsDropBlock)
{
	Hdr h = data(0);
	h.op = 0x7f;
	one(a_, h, i32(5), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataOfAnUnknownDatatypeIsDropBlock)
{
	Hdr h = data(0);
	h.dtype = 0x7f;
	one(a_, h, i32(5), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, DataOfAnOperationWithoutAKernelForItsDatatypeIsDropBlock)
{
	Hdr h = data(0);
	h.op = 7;     // BXOR
	h.dtype = 10; // FLOAT32
	one(a_, h, std::vector<uint8_t>(4, 0), {{&C::drop_block, 1}});
	still_serves();
}

// ---- DATA flagged ASK -----------------------------------------------------

TEST_F(SwitchClass, AskWithAPayloadIsDropBlock)
{
	Hdr h = data(0);
	h.flags = kAsk;
	one(a_, h, i32(5), {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, AskForTheUnitsBlockWithAnotherMidIsDropBlock)
{
	serve(a_, data(0), i32(5));
	Hdr h = data(1);
	h.flags = kAsk;
	h.mid = 2;
	one(b_, h, {}, {{&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, AskForAnOlderBlockIsDropStale)
{
	complete(kGrant); // unit 0's second block
	Hdr h = data(0, 0);
	h.flags = kAsk;
	one(a_, h, {}, {{&C::drop_stale, 1}});
	still_serves();
}

TEST_F(SwitchClass, AskForADoneBlockIsDeliveredAndAnswered)
{
	complete(0);
	Hdr h = data(0);
	h.flags = kAsk;
	one(a_, h, {},
	    Delta{{&C::asks, 1}, {&C::delivered, 1}, {&C::retrans_answered, 1}} +
		    sent(1, kBare + 4));
	Pkt p;
	ASSERT_TRUE(a_.next(kResult, &p));
	EXPECT_EQ(p.value(), 12);
	still_serves();
}

TEST_F(SwitchClass, AskForABlockNeverSeenIsDeliveredAndNaked)
{
	Hdr h = data(0);
	h.flags = kAsk;
	one(a_, h, {}, Delta{{&C::asks, 1}, {&C::delivered, 1}, {&C::naks, 1}} + sent(1, kBare));
	Pkt p;
	ASSERT_TRUE(a_.next(kResult, &p));
	EXPECT_TRUE(p.flags & kNak);
	still_serves();
}

// ---- DATA, a partial ------------------------------------------------------

TEST_F(SwitchClass, PartialForTheUnitsBlockWithAnotherMidIsDropBlock)
{
	serve(a_, data(0), i32(5));
	Hdr h = data(1);
	h.mid = 2;
	one(b_, h, i32(7), {{&C::data, 1}, {&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, PartialOfAnotherLengthThanTheBlocksIsDropBlock)
{
	serve(a_, data(0), i32(5));
	one(b_, data(1), std::vector<uint8_t>(8, 0), {{&C::data, 1}, {&C::drop_block, 1}});
	still_serves();
}

TEST_F(SwitchClass, RepeatedPartialWhileCollectingIsDuplicate)
{
	serve(a_, data(0), i32(5));
	one(a_, data(0), i32(5), {{&C::data, 1}, {&C::duplicates, 1}});
	still_serves();
}

TEST_F(SwitchClass, RepeatedPartialOfADoneBlockIsDuplicateAndAnswered)
{
	complete(0);
	one(a_, data(0), i32(5),
	    Delta{{&C::data, 1}, {&C::duplicates, 1}, {&C::retrans_answered, 1}} +
		    sent(1, kBare + 4));
	Pkt p;
	ASSERT_TRUE(a_.next(kResult, &p));
	EXPECT_EQ(p.value(), 12);
	still_serves();
}

TEST_F(SwitchClass, PartialOfAnOlderBlockIsDropStale)
{
	complete(kGrant);
	one(a_, data(0, 0), i32(5), {{&C::data, 1}, {&C::drop_stale, 1}});
	still_serves();
}

TEST_F(SwitchClass, PartialOfANewerBlockWhileTheUnitCollectsIsDropBusy)
{
	serve(a_, data(0, 0), i32(5));
	one(b_, data(1, kGrant), i32(7), {{&C::data, 1}, {&C::drop_busy, 1}});
	still_serves();
}

TEST_F(SwitchClass, FirstPartialIsDeliveredAndFolded)
{
	one(a_, data(0), i32(5), {{&C::data, 1}, {&C::delivered, 1}, {&C::reductions, 1}});
	still_serves();
}

// A float partial before its turn waits for it (the fold order makes the
// result's bits); an integer one, whose order changes no bit, is folded.
TEST_F(SwitchClass, PartialBeforeItsTurnIsDeliveredAndKept)
{
	Hdr h = data(1);
	h.dtype = 10; // FLOAT32
	const float v = 7.0f;
	std::vector<uint8_t> b(4);
	memcpy(b.data(), &v, 4);
	one(b_, h, b, {{&C::data, 1}, {&C::delivered, 1}});
	still_serves();
}

TEST_F(SwitchClass, IntegerPartialBeforeItsTurnIsDeliveredAndFolded)
{
	one(b_, data(1), i32(7), {{&C::data, 1}, {&C::delivered, 1}, {&C::reductions, 1}});
	still_serves();
}

TEST_F(SwitchClass, LastPartialIsDeliveredAndCompletesTheBlock)
{
	serve(a_, data(0), i32(5));
	one(b_, data(1), i32(7),
	    Delta{{&C::data, 1}, {&C::delivered, 1}, {&C::reductions, 1}, {&C::results, 1}} +
		    sent(2, kBare + 4));
	still_serves();
}

TEST_F(SwitchClass, PartialOfANewerBlockForADoneUnitIsDelivered)
{
	complete(0);
	one(a_, data(0, kGrant), i32(5), {{&C::data, 1}, {&C::delivered, 1}, {&C::reductions, 1}});
	still_serves();
}

// ---- RESULT, CONFIG_ACK, ABORT from a child (a switch without a parent) --

TEST_F(SwitchClass, ResultFromAChildIsDropNode)
{
	one(a_, bare(kResult, 0), i32(5), {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, ConfigAckFromAChildIsDropNode)
{
	one(a_, bare(kConfigAck, 0), {}, {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, AbortFromAChildIsDropNode)
{
	one(a_, bare(kAbort, 0, kSuperseded), {}, {{&C::drop_node, 1}});
	still_serves();
}

// ---- RELEASE --------------------------------------------------------------

TEST_F(SwitchClass, ReleaseNotFromAChildIsDropNode)
{
	one(stranger_, bare(kRelease, 0), {}, {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, FirstReleaseIsDelivered)
{
	one(a_, bare(kRelease, 0), {}, {{&C::delivered, 1}, {&C::releases, 1}});
	still_serves(); // the job stays until every child has released it
}

TEST_F(SwitchClass, RepeatedReleaseIsDuplicate)
{
	serve(a_, bare(kRelease, 0), {});
	one(a_, bare(kRelease, 0), {}, {{&C::duplicates, 1}});
	still_serves();
}

// ---- Admission (tdm) to a job that is not under tdm -----------------------

TEST_F(SwitchClass, AdmitToAJobNotUnderTdmIsDropNode)
{
	one(a_, bare(kConfig, 0, kAdmit), {}, {{&C::drop_node, 1}});
	still_serves();
}

TEST_F(SwitchClass, AdmitDoneToAJobNotUnderTdmIsDropNode)
{
	one(a_, bare(kRelease, 0, kAdmit), {}, {{&C::drop_node, 1}});
	still_serves();
}

// ---- A job not granted ----------------------------------------------------

class SwitchClassCollecting : public SwitchClass {
protected:
	void SetUp() override
	{
		start();
		serve(a_, config_hdr(0), task_of(0)); // node 1 has not spoken
		a_.drain();
	}
};

TEST_F(SwitchClassCollecting, DataBeforeTheGrantIsDropBusy)
{
	one(a_, data(0), i32(5), {{&C::drop_busy, 1}});
	serve(b_, config_hdr(1), task_of(1));
	still_serves();
}

TEST_F(SwitchClassCollecting, AdmitBeforeTheGrantIsDropNode)
{
	one(a_, bare(kConfig, 0, kAdmit), {}, {{&C::drop_node, 1}});
}

class SwitchClassRefused : public SwitchClass {
protected:
	void SetUp() override
	{
		start(Policy::spatial, 1); // fewer than 2 units a job: every job refused
		configure(false);
	}
};

TEST_F(SwitchClassRefused, DataOfARefusedJobIsDropBusyAndAnswered)
{
	one(a_, data(0), i32(5), Delta{{&C::drop_busy, 1}} + sent(1, kBare));
	Pkt p;
	ASSERT_TRUE(a_.next(kConfigAck, &p));
	EXPECT_EQ(p.status, 4); // DENIED
}

// ---- tdm ------------------------------------------------------------------

class SwitchClassTdm : public SwitchClass {
protected:
	void SetUp() override
	{
		start(Policy::tdm);
		configure();
	}
	static Hdr admit(uint16_t n, uint32_t mid = 1)
	{
		Hdr h = bare(kConfig, n, kAdmit);
		h.mid = mid;
		h.seq = 1000;	 // the job's timeout, ms
		h.rank_map = 64; // the message's bytes
		return h;
	}
	void admitted()
	{
		serve(a_, admit(0), {});
		serve(b_, admit(1), {});
		a_.drain();
		b_.drain();
	}
};

TEST_F(SwitchClassTdm, DataWhileNoMessageOfTheJobHoldsThePoolIsDropBusy)
{
	one(a_, data(0), i32(5), {{&C::drop_busy, 1}});
	admitted();
	still_serves();
}

TEST_F(SwitchClassTdm, AdmitNotFromAChildIsDropNode)
{
	one(stranger_, admit(0), {}, {{&C::drop_node, 1}});
	admitted();
	still_serves();
}

TEST_F(SwitchClassTdm, AdmitWithANodeMapOtherThanItsChildsIsDropNode)
{
	Hdr h = admit(0);
	h.node_map = 3;
	one(a_, h, {}, {{&C::drop_node, 1}});
	admitted();
	still_serves();
}

TEST_F(SwitchClassTdm, AdmitIsDeliveredDecidedAndAnswered)
{
	one(a_, admit(0), {}, Delta{{&C::delivered, 1}, {&C::adm_grants, 1}} + sent(1, kBare));
	Pkt p;
	ASSERT_TRUE(a_.next(kConfigAck, &p));
	EXPECT_EQ(p.status, 0);
	serve(b_, admit(1), {});
	still_serves();
}

TEST_F(SwitchClassTdm, RepeatedAdmitIsDuplicateAndAnswered)
{
	serve(a_, admit(0), {});
	one(a_, admit(0), {}, Delta{{&C::duplicates, 1}} + sent(1, kBare));
	serve(b_, admit(1), {});
	still_serves();
}

TEST_F(SwitchClassTdm, AdmitDoneNotFromAChildIsDropNode)
{
	admitted();
	one(stranger_, bare(kRelease, 0, kAdmit), {}, {{&C::drop_node, 1}});
	still_serves();
}

// Node 0 alone reports: the message keeps the pool (and pool_us stays).
TEST_F(SwitchClassTdm, AdmitDoneIsDelivered)
{
	admitted();
	one(a_, bare(kRelease, 0, kAdmit), {}, {{&C::delivered, 1}});
	still_serves();
}

TEST_F(SwitchClassTdm, RepeatedAdmitDoneIsDeliveredToo)
{
	admitted();
	serve(a_, bare(kRelease, 0, kAdmit), {});
	one(a_, bare(kRelease, 0, kAdmit), {}, {{&C::delivered, 1}});
	still_serves();
}

// ---- A leaf under a spine (played by the test) ----------------------------

class SwitchClassLeafWaiting : public SwitchClass {
protected:
	void SetUp() override
	{
		start();
		configure(false, spine_.port());
		Pkt p;
		ASSERT_TRUE(spine_.next(kConfig, &p)) << "the leaf did not configure up";
	}
	Hdr from_spine(uint8_t opcode, uint32_t seq = 0, uint8_t flags = 0) const
	{
		Hdr h = data(0, seq);
		h.opcode = opcode;
		h.flags = flags;
		h.src_node = kSwitchNode;
		h.node_map = 3;
		return h;
	}
	Hdr spine_grant() const
	{
		Hdr h = from_spine(kConfigAck);
		h.seg = kGrant;
		return h;
	}
	Peer spine_;
};

TEST_F(SwitchClassLeafWaiting, ConfigAckFromTheParentIsDeliveredAndGrants)
{
	one(spine_, spine_grant(), {}, Delta{{&C::delivered, 1}, {&C::grants, 1}} + sent(2, kBare));
	still_serves(&spine_);
}

TEST_F(SwitchClassLeafWaiting, DataWhileTheParentHasNotGrantedIsDropBusy)
{
	one(a_, data(0), i32(5), {{&C::drop_busy, 1}});
	serve(spine_, spine_grant(), {});
	still_serves(&spine_);
}

// Three levels: a member's CONFIG carries, after the task, what our
// parent (a spine) is to its own parent (the core): wire/swproto.h's
// Above record, written out here.
static std::vector<uint8_t> above(uint64_t subtree, uint8_t up, uint16_t port)
{
	std::vector<uint8_t> v;
	put(v, subtree, 8);
	put(v, up, 1);
	put(v, 0, 1);
	put(v, port, 2);
	v.insert(v.end(), kLoopback, kLoopback + 16);
	put(v, 0, 4);
	return v;
}

// Before any job (a fresh switch): the record checked.
class SwitchClassThreeLevels : public SwitchClass {
protected:
	void SetUp() override { start(); }
	Peer spine_;
};

TEST_F(SwitchClassThreeLevels, ConfigWithAPartOfAnAboveRecordIsDropMalformed)
{
	std::vector<uint8_t> t = cat(task_of(0, 4000), above(1, 0, 4001));
	t.resize(kTaskBytes + 28); // 4 bytes short of the record
	one(a_, config_hdr(0), t, {{&C::drop_malformed, 1}});
	configure();
	still_serves();
}

// The parent's bit at the core (5) is not one of the top's bits (3).
TEST_F(SwitchClassThreeLevels, ConfigAboveWhoseBitTheTopLacksIsDropMalformed)
{
	one(a_, config_hdr(0), cat(task_of(0, 4000), above(1, 5, 4001)), {{&C::drop_malformed, 1}});
	configure();
	still_serves();
}

// Without a parent there is nothing above the parent.
TEST_F(SwitchClassThreeLevels, ConfigAboveWithoutAParentIsDropMalformed)
{
	one(a_, config_hdr(0), cat(task_of(0), above(1, 0, 4001)), {{&C::drop_malformed, 1}});
	configure();
	still_serves();
}

// A leaf of a three-level job configures its spine with a task made of
// the Above record: the spine's subtree, its bit at the core, the core.
TEST_F(SwitchClassThreeLevels, LeafConfiguresTheSpineWithItsOwnTask)
{
	serve(a_, config_hdr(0), cat(task_of(0, spine_.port()), above(0x5, 1, 4321)));
	serve(b_, config_hdr(1), cat(task_of(1, spine_.port()), above(0x5, 1, 4321)));
	Pkt p;
	ASSERT_TRUE(spine_.next(kConfig, &p)) << "the leaf did not configure up";
	ASSERT_EQ(p.payload.size(), 48u);
	const uint8_t *t = p.payload.data();
	EXPECT_EQ(t[23], 0x5) << "subtree";
	EXPECT_EQ(t[28], 1) << "up";
	EXPECT_EQ(t[30] << 8 | t[31], 4321) << "parent port";
	EXPECT_EQ(memcmp(t + 32, kLoopback, 16), 0) << "parent address";
}

class SwitchClassLeaf : public SwitchClassLeafWaiting {
protected:
	void SetUp() override
	{
		SwitchClassLeafWaiting::SetUp();
		serve(spine_, spine_grant(), {});
		a_.drain();
		b_.drain();
	}
	// Block seq complete here: its partial went up.
	void up(uint32_t seq)
	{
		complete(seq);
		Pkt p;
		ASSERT_TRUE(spine_.next(kData, &p));
		ASSERT_EQ(p.value(), 12);
	}
};

TEST_F(SwitchClassLeaf, ConfigAckNotFromTheParentIsDropNode)
{
	one(a_, bare(kConfigAck, 0), {}, {{&C::drop_node, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultNotFromTheParentIsDropNode)
{
	up(0);
	one(a_, from_spine(kResult), i32(12), {{&C::drop_node, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultBeyondTheGrantIsDropBlock)
{
	Hdr h = from_spine(kResult);
	h.seg = kGrant;
	one(spine_, h, i32(12), {{&C::drop_block, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultForABlockTheUnitDoesNotHoldIsDropStale)
{
	up(0);
	Hdr h = from_spine(kResult);
	h.mid = 2;
	one(spine_, h, i32(12), {{&C::drop_stale, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, NakForAUnitStillCollectingIsDropStale)
{
	serve(a_, data(0), i32(5));
	one(spine_, from_spine(kResult, 0, kNak), {}, {{&C::drop_stale, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, NakWithAPayloadIsDropStale)
{
	up(0);
	one(spine_, from_spine(kResult, 0, kNak), i32(12), {{&C::drop_stale, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, NakIsDeliveredAndThePartialGoesUpAgain)
{
	up(0);
	one(spine_, from_spine(kResult, 0, kNak), {},
	    Delta{{&C::delivered, 1}, {&C::resent_up, 1}} + sent(1, kBare + 4));
	Pkt p;
	ASSERT_TRUE(spine_.next(kData, &p));
	EXPECT_EQ(p.value(), 12);
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultForAUnitStillCollectingIsDropBlock)
{
	serve(a_, data(0), i32(5));
	one(spine_, from_spine(kResult), i32(12), {{&C::drop_block, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultLongerThanAUnitIsDropBlock)
{
	up(0);
	one(spine_, from_spine(kResult), std::vector<uint8_t>(kUnitBytes + 4, 0),
	    {{&C::drop_block, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, ResultIsDeliveredAndPassedDown)
{
	up(0);
	one(spine_, from_spine(kResult), i32(12),
	    Delta{{&C::delivered, 1}, {&C::results, 1}} + sent(2, kBare + 4));
	for (const Peer *m : {&a_, &b_}) {
		Pkt p;
		ASSERT_TRUE(m->next(kResult, &p));
		EXPECT_EQ(p.value(), 12);
	}
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, RepeatedResultIsDuplicate)
{
	up(0);
	serve(spine_, from_spine(kResult), i32(12));
	one(spine_, from_spine(kResult), i32(12), {{&C::duplicates, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, AbortFromTheParentNotSupersededIsDropNode)
{
	one(spine_, from_spine(kAbort), {}, {{&C::drop_node, 1}});
	still_serves(&spine_);
}

TEST_F(SwitchClassLeaf, AbortFromTheParentIsDeliveredAndPassedDown)
{
	Hdr h = from_spine(kAbort, 0, kSuperseded);
	h.status = 3; // REMOTE_ABORT
	one(spine_, h, {}, Delta{{&C::delivered, 1}} + sent(2, kBare));
	for (const Peer *m : {&a_, &b_}) {
		Pkt p;
		ASSERT_TRUE(m->next(kAbort, &p));
		EXPECT_TRUE(p.flags & kSuperseded);
	}
	still_serves(&spine_);
}

} // namespace

// ---- The tail (switch_fold.cc, find_tail) ---------------------------------

// Serve (no packet sent) until one of `m`'s packets passes `is`, a few
// seconds at most.
template <typename F> bool heard(Switch &sw, const Peer &m, F is)
{
	Pkt p;
	for (int i = 0; i < 8000; i++) {
		sw.poll_once();
		while (m.recv(&p))
			if (is(p))
				return true;
		usleep(500);
	}
	return false;
}

// The newest block lacks a partial long after its first came (far longer
// than a clean block's took to follow each other): no later block shows
// the loss, so the block's age does, and the member lacking is NAKed.
TEST_F(SwitchClass, NewestBlockLackingAPartialIsNakedByItsAge)
{
	complete(0); // a clean block: how far apart its partials came
	serve(a_, data(0, 1), i32(5));
	EXPECT_TRUE(heard(*sw_, b_, [](const Pkt &p) {
		return p.opcode == kResult && (p.flags & kNak) && p.seq == 1 && p.payload.empty();
	})) << "member 1 was not NAKed";
	EXPECT_GE(sw_->totals().tail_naks, 1u);
	EXPECT_EQ(sw_->totals().tail_naks, sw_->totals().naks) << "only member 1 lacks a partial";
	a_.drain();
	serve(b_, data(1, 1), i32(7));
	Pkt p;
	do // past the NAKs sent again while member 1 was silent
		ASSERT_TRUE(b_.next(kResult, &p));
	while (p.flags & kNak);
	EXPECT_EQ(p.value(), 12);
	still_serves();
}

// The newest block, repaired (its partial from member 1 a repeat), has
// no later result to show a member that lost its own: its results go
// again, unasked, once, to every member.
TEST_F(SwitchClass, NewestRepairedBlocksResultsGoAgain)
{
	complete(0);
	serve(a_, data(0, 1), i32(5));
	Hdr h = data(1, 1);
	h.flags = kRetrans;
	serve(b_, h, i32(7));
	for (const Peer *m : {&a_, &b_}) {
		Pkt p;
		ASSERT_TRUE(m->next(kResult, &p));
		EXPECT_EQ(p.value(), 12);
		EXPECT_TRUE(heard(*sw_, *m, [](const Pkt &q) {
			return q.opcode == kResult && !(q.flags & kNak) && q.seq == 1 &&
			       q.value() == 12;
		})) << "no second result";
	}
	EXPECT_EQ(sw_->totals().results_again, 2u);
	still_serves();
}
