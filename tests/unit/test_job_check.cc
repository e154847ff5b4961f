// emu::check_job, the one check of a job's shape that the providers,
// ibv_coll_devd, the simulator and the engine share: what it refuses, and
// the rank numbering it fills in, against hand-computed values.
#include "coll/coll_job.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>

namespace ibv_coll::emu {
namespace {

JobConfig job(std::initializer_list<uint16_t> ranks)
{
	JobConfig c;
	c.jid = 7;
	c.seg_count = 4;
	for (uint16_t r : ranks) {
		JobMember m;
		m.ranks = r;
		m.first_rank = 999; // to be renumbered
		c.members.push_back(m);
	}
	return c;
}

// A way to spoil a good job, and the field its refusal must name first.
struct Case {
	const char *field;
	void (*spoil)(JobConfig &);
};

// Each case, applied to a copy of good, is refused naming its field.
void expect_refused(const JobConfig &good, std::initializer_list<Case> cases)
{
	for (const Case &k : cases) {
		JobConfig c = good;
		ASSERT_EQ(check_job(c, nullptr), 0);
		k.spoil(c);
		const char *why = nullptr;
		EXPECT_EQ(check_job(c, &why), EINVAL) << k.field;
		ASSERT_NE(why, nullptr) << k.field;
		EXPECT_EQ(std::string(why).rfind(k.field, 0), 0u) << k.field << ": " << why;
	}
}

TEST(JobCheck, NumbersTheRanks)
{
	JobConfig c = job({3, 1, 4});
	c.node = 2;
	c.total_ranks = 1;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_EQ(c.members[0].first_rank, 0u);
	EXPECT_EQ(c.members[1].first_rank, 3u);
	EXPECT_EQ(c.members[2].first_rank, 4u);
	EXPECT_EQ(c.total_ranks, 8u);
	// All of the node's ranks, named as a range, is no range.
	c.local_first = 0;
	c.local_count = 4;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_EQ(c.local_count, 0);
	c.local_first = 1;
	c.local_count = 2;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_EQ(c.my_count(), 2);
}

// Each bad shape refused with a reason naming the field.
TEST(JobCheck, RefusesWithAReason)
{
	expect_refused(
		job({2, 2}),
		{
			{"nodes", [](JobConfig &c) { c.members.clear(); }},
			{"nodes", [](JobConfig &c) { c.members.resize(65536, c.members[0]); }},
			{"nodes with a switch",
			 [](JobConfig &c) {
				 c.members.resize(65, c.members[0]);
				 c.sw.on = true, c.sw.leaf.resize(1);
			 }},
			{"nodes with a switch",
			 [](JobConfig &c) {
				 c.members.resize(65, c.members[0]);
				 c.topology = Topology::autosel, c.sw.on = true,
				 c.sw.leaf.resize(1);
			 }},
			{"node", [](JobConfig &c) { c.node = 2; }},
			{"seg_count", [](JobConfig &c) { c.seg_count = 0; }},
			{"block_len", [](JobConfig &c) { c.block_len = 1020; }},
			{"topology", [](JobConfig &c) { c.topology = Topology(9); }},
			{"topology", [](JobConfig &c) { c.topology = Topology::sw; }},
			{"member ranks", [](JobConfig &c) { c.members.mut()[1].ranks = 0; }},
			{"member ranks", [](JobConfig &c) { c.members.mut()[1].ranks = 65; }},
			{"local ranks", [](JobConfig &c) { c.local_first = 1, c.local_count = 2; }},
			{"local ranks", [](JobConfig &c) { c.local_first = 1; }},
			{"switch planes",
			 [](JobConfig &c) {
				 c.sw.on = true, c.sw.planes = 9, c.sw.leaf.resize(9);
			 }},
			{"switch leaves", [](JobConfig &c) { c.sw.on = true; }},
			{"topology",
			 [](JobConfig &c) {
				 c.sw.on = true, c.topology = Topology::hierarchy,
				 c.sw.leaf.resize(1);
			 }},
			{"seg_count",
			 [](JobConfig &c) {
				 c.sw.on = true, c.sw.leaf.resize(1), c.seg_count = 1;
			 }},
			{"member_leaf",
			 [](JobConfig &c) {
				 c.sw.on = true, c.sw.leaves = 2, c.sw.leaf.resize(2),
				 c.sw.spine.resize(1);
				 c.sw.member_leaf = {0, 2};
			 }},
		});
	// A ring may be as long as src_node counts; one switch takes 64.
	JobConfig ring = job({2, 2});
	ring.members.resize(65535, ring.members[0]);
	EXPECT_EQ(check_job(ring, nullptr), 0);
	EXPECT_EQ(ring.total_ranks, 2u * 65535);
	JobConfig sw64 = job({2, 2});
	sw64.members.resize(64, sw64.members[0]);
	sw64.sw.on = true;
	sw64.sw.leaf.resize(1);
	EXPECT_EQ(check_job(sw64, nullptr), 0);
	// Good switch shapes pass.
	JobConfig one = job({2, 2});
	one.sw.on = true;
	one.sw.leaf.resize(1);
	EXPECT_EQ(check_job(one, nullptr), 0);
	JobConfig two = job({2, 2});
	two.topology = Topology::hierarchy;
	two.sw.on = true;
	two.sw.leaves = 2;
	two.sw.leaf.resize(2);
	two.sw.spine.resize(1);
	two.sw.member_leaf = {0, 1};
	EXPECT_EQ(check_job(two, nullptr), 0);
}

// A tree's bitmaps count a member's bit within its leaf and a leaf's bit
// at the spine, so 64 leaves of 64 members fit; 65 under one leaf do not.
TEST(JobCheck, TreeBitsAreMembersWithinTheirLeaf)
{
	JobConfig t = job({2, 2});
	t.members.resize(130, t.members[0]);
	t.topology = Topology::hierarchy;
	t.sw.on = true;
	t.sw.leaves = 4;
	t.sw.leaf.resize(4);
	t.sw.spine.resize(1);
	// Nodes alternate between leaves 1 and 3 (0 and 2 stay empty), but
	// for the last two, both on leaf 2.
	for (uint32_t n = 0; n < 130; n++)
		t.sw.member_leaf.push_back(n >= 128 ? 2 : n % 2 ? 3 : 1);
	t.node = 127; // leaf 3's 64th member
	ASSERT_EQ(check_job(t, nullptr), 0);
	EXPECT_EQ(t.sw.member_bit[t.node], 63);
	EXPECT_EQ(t.sw.leaf_bits, ~0ull);
	EXPECT_EQ(t.sw.top_bits, 0xeull); // leaves 1, 2, 3
	EXPECT_EQ(t.sw.member_bit[126], 63);
	EXPECT_EQ(t.sw.member_bit[2], 1);
	EXPECT_EQ(t.sw.member_bit[129], 1);
	t.node = 129;
	ASSERT_EQ(check_job(t, nullptr), 0);
	EXPECT_EQ(t.sw.member_bit[t.node], 1);
	EXPECT_EQ(t.sw.leaf_bits, 0x3ull);
	t.sw.member_leaf.mut()[128] = 3; // a 65th member under leaf 3
	const char *why = nullptr;
	EXPECT_EQ(check_job(t, &why), EINVAL);
	EXPECT_EQ(std::string(why).rfind("nodes with a switch", 0), 0u) << why;
}

// Three levels: a leaf's bit at its spine is its index among its pod's
// leaves, the top's bits are the pods that have members, the spine's are
// its leaves that have members; the shape's addresses are counted.
TEST(JobCheck, PodsGiveTheSpineAndCoreBits)
{
	JobConfig t = job({1, 1, 1, 1, 1});
	t.topology = Topology::hierarchy;
	t.sw.on = true;
	t.sw.leaves = 5;
	t.sw.pods = 3;
	t.sw.leaf.resize(5);
	t.sw.spine.resize(3);
	t.sw.core.resize(1);
	t.sw.leaf_pod = {0, 2, 0, 2, 1}; // pod 0: leaves 0, 2; pod 2: leaves 1, 3
	t.sw.member_leaf = {3, 3, 0, 2, 4};
	t.node = 1; // leaf 3: pod 2's second leaf
	ASSERT_EQ(check_job(t, nullptr), 0);
	EXPECT_EQ(t.sw.member_bit[1], 1);
	EXPECT_EQ(t.sw.leaf_bits, 0x3ull);
	EXPECT_EQ(t.sw.leaf_up, 1);
	EXPECT_EQ(t.sw.pod_bits, 0x2ull); // leaf 1 (bit 0) has no members
	EXPECT_EQ(t.sw.top_bits, 0x7ull);
	t.node = 3; // leaf 2: pod 0's second leaf, beside leaf 0
	ASSERT_EQ(check_job(t, nullptr), 0);
	EXPECT_EQ(t.sw.leaf_up, 1);
	EXPECT_EQ(t.sw.pod_bits, 0x3ull);
	expect_refused(
		t,
		{
			{"switch spines and cores", [](JobConfig &c) { c.sw.core.clear(); }},
			{"switch spines and cores", [](JobConfig &c) { c.sw.spine.resize(1); }},
			{"leaf_pod", [](JobConfig &c) { c.sw.leaf_pod.pop_back(); }},
			{"leaf_pod", [](JobConfig &c) { c.sw.leaf_pod.mut()[0] = 3; }},
			{"inline task", [](JobConfig &c) { c.sw.inline_task = true; }},
			{"switch pods", [](JobConfig &c) { c.sw.pods = 65; }},
			{"switch cores", [](JobConfig &c) { c.sw.pods = 1, c.sw.spine.resize(1); }},
		});
	// 65 leaves in one pod: beyond the spine's bitmap.
	JobConfig w = job({1, 1});
	w.topology = Topology::hierarchy;
	w.sw.on = true;
	w.sw.leaves = 66;
	w.sw.pods = 2;
	w.sw.leaf.resize(66);
	w.sw.spine.resize(2);
	w.sw.core.resize(1);
	w.sw.leaf_pod.assign(66, 0);
	w.sw.leaf_pod.mut()[65] = 1;
	w.sw.member_leaf = {0, 65};
	const char *why = nullptr;
	EXPECT_EQ(check_job(w, &why), EINVAL);
	EXPECT_EQ(std::string(why).rfind("leaf_pod: at most 64", 0), 0u) << why;
	w.sw.leaf_pod.mut()[64] = 1;
	EXPECT_EQ(check_job(w, nullptr), 0);
}

// Four nodes of 1, 2, 1 and 3 ranks under two leaves: nodes 0 and 3
// under leaf 0, 1 and 2 under leaf 1.
JobConfig two_leaves()
{
	JobConfig t = job({1, 2, 1, 3});
	t.topology = Topology::hierarchy;
	t.sw.on = true;
	t.sw.leaves = 2;
	t.sw.leaf.resize(2);
	t.sw.spine.resize(1);
	t.sw.member_leaf = {0, 1, 1, 0};
	return t;
}

// A job's lists are the same on every node: a copy checked again (as the
// engine checks the configuration it is given) keeps sharing them with
// the checked original, one array for a simulation's thousands of NICs;
// a change through one copy leaves the other as it was.
TEST(JobCheck, CopiesShareTheMemberListsUntilChanged)
{
	JobConfig t = two_leaves();
	ASSERT_EQ(check_job(t, nullptr), 0);
	JobConfig c = t;
	c.node = 2;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_TRUE(c.members.shares(t.members));
	EXPECT_TRUE(c.sw.member_bit.shares(t.sw.member_bit));
	EXPECT_TRUE(c.sw.member_leaf.shares(t.sw.member_leaf));
	EXPECT_TRUE(c.sw.leaf.shares(t.sw.leaf));
	EXPECT_EQ(c.members[3].first_rank, 4u);
	EXPECT_EQ(c.sw.member_bit[2], 1);
	c.members.mut()[1].ranks = 5;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_FALSE(c.members.shares(t.members));
	EXPECT_EQ(t.members[1].ranks, 2); // the original kept its own
	EXPECT_EQ(t.members[3].first_rank, 4u);
	EXPECT_EQ(c.members[3].first_rank, 7u);
	EXPECT_EQ(t.total_ranks, 7u);
	EXPECT_EQ(c.total_ranks, 10u);
}

// Each node's check takes the shape (first ranks, switch bits, address
// family) that a copy of a checked configuration carries, but only while
// the copy holds the very lists it was derived from: a list changed
// through the copy is walked again, and what it spoils is refused.
TEST(JobCheck, AShapeServesOnlyTheListsItCameFrom)
{
	JobConfig t = two_leaves();
	ASSERT_EQ(check_job(t, nullptr), 0);
	ASSERT_NE(t.shape, nullptr);
	EXPECT_EQ(t.shape->family, 6); // no member has an IPv4 address

	JobConfig c = t;
	c.node = 1;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_EQ(c.shape, t.shape); // taken, not derived again
	EXPECT_EQ(c.sw.leaf_bits, 0x3ull);
	EXPECT_EQ(c.sw.member_bit[1], 0);
	EXPECT_EQ(c.total_ranks, 7u);

	// Member 0 moves to leaf 1: leaf 0 keeps member 3 (bit 0), leaf 1 has
	// members 0, 1, 2 (bits 0, 1, 2).
	c.sw.member_leaf.mut()[0] = 1;
	ASSERT_EQ(check_job(c, nullptr), 0);
	EXPECT_NE(c.shape, t.shape);
	EXPECT_EQ(c.sw.member_bit[0], 0);
	EXPECT_EQ(c.sw.member_bit[1], 1);
	EXPECT_EQ(c.sw.member_bit[2], 2);
	EXPECT_EQ(c.sw.member_bit[3], 0);
	EXPECT_EQ(c.sw.leaf_bits, 0x7ull);
	EXPECT_EQ(t.sw.member_bit[1], 0); // the original's are its own

	expect_refused(t,
		       {
			       {"member_leaf", [](JobConfig &x) { x.sw.member_leaf.mut()[2] = 2; }},
			       {"member ranks", [](JobConfig &x) { x.members.mut()[3].ranks = 0; }},
		       });

	// The address family is the members': IPv4 alone, or mixed.
	JobConfig v = t;
	for (size_t i = 0; i < v.members.size(); i++)
		v.members.mut()[i].ep.ip = IpAddr::from_v4(0x0a000001u + uint32_t(i));
	ASSERT_EQ(check_job(v, nullptr), 0);
	EXPECT_EQ(v.shape->family, 4);
	v.members.mut()[2].ep.ip = IpAddr{};
	ASSERT_EQ(check_job(v, nullptr), 0);
	EXPECT_EQ(v.shape->family, 0);
}

// The layout of a message through switches, where it has fewer blocks
// than the job has nodes (most chunks empty, skipped without a look at
// each), against every chunk walked by hand.
TEST(JobCheck, ChunksWithBlocksAreFoundWithoutWalkingEveryNode)
{
	for (uint16_t n : {1, 2, 3, 7, 16, 63, 64, 100, 1000}) {
		JobConfig c;
		c.seg_count = 4;
		c.members.assign(n, JobMember{});
		c.sw.on = true;
		c.topology = Topology::sw;
		for (uint64_t count : {1ull, 5ull, 1024ull, 1025ull, 7000ull, 70000ull}) {
			Message m;
			m.coll = CollOp::allreduce;
			m.count = count;
			m.es = 4;
			build_chain(c, m, 4096); // blocks of 1,024 elements
			const uint64_t be = 1024, B = (count + be - 1) / be;
			std::vector<ChunkRole> want;
			std::vector<BlockDesc> chain;
			for (uint32_t ch = 0; ch < n; ch++) {
				ChunkRole r;
				r.vbegin = std::min<uint64_t>(count, B * ch / n * be);
				r.vend = std::min<uint64_t>(count, B * (ch + 1) / n * be);
				r.first_sid = uint32_t(chain.size());
				for (uint64_t v = r.vbegin; v < r.vend; v += be)
					chain.push_back(
						BlockDesc{v, uint32_t(std::min(be, r.vend - v)),
							  uint16_t(want.size()), 0, 0});
				r.nblocks = uint32_t(chain.size()) - r.first_sid;
				r.origin = uint16_t(ch);
				r.fin = uint16_t((ch + n - 1) % n);
				if (r.nblocks)
					want.push_back(r);
			}
			SCOPED_TRACE(testing::Message() << n << " nodes, " << count << " elements");
			ASSERT_EQ(m.chunks.size(), want.size());
			for (size_t k = 0; k < want.size(); k++) {
				EXPECT_EQ(m.chunks[k].vbegin, want[k].vbegin);
				EXPECT_EQ(m.chunks[k].vend, want[k].vend);
				EXPECT_EQ(m.chunks[k].first_sid, want[k].first_sid);
				EXPECT_EQ(m.chunks[k].nblocks, want[k].nblocks);
				EXPECT_EQ(m.chunks[k].origin, want[k].origin);
				EXPECT_EQ(m.chunks[k].fin, want[k].fin);
			}
			ASSERT_EQ(m.nblocks, chain.size());
			for (size_t b = 0; b < chain.size(); b++) {
				EXPECT_EQ(m.chain[b].voff, chain[b].voff);
				EXPECT_EQ(m.chain[b].elems, chain[b].elems);
				EXPECT_EQ(m.chain[b].chunk, chain[b].chunk);
				EXPECT_EQ(m.chain[b].end, b + 1 == chain.size());
			}
		}
	}
}

// A message's layout is kept for the job's lists (JobShape): the next
// message of the same shape, on this node or another copy of the
// configuration, takes the same arrays; one of another shape is laid out
// anew, and matches a layout made without the cache.
TEST(JobCheck, ALayoutIsSharedByMessagesOfOneShape)
{
	JobConfig t;
	t.seg_count = 4;
	t.members.assign(60, JobMember{});
	for (size_t i = 0; i < 60; i++)
		t.members.mut()[i].ranks = 1;
	t.sw.on = true;
	t.sw.leaf.resize(1);
	t.topology = Topology::sw;
	ASSERT_EQ(check_job(t, nullptr), 0);
	JobConfig a = t, b = t;
	a.node = 3;
	b.node = 57;
	ASSERT_EQ(check_job(a, nullptr), 0);
	ASSERT_EQ(check_job(b, nullptr), 0);
	auto msg = [](uint64_t count, CollOp coll) {
		Message m;
		m.coll = coll;
		m.count = count;
		m.es = 4;
		return m;
	};
	auto same = [](const Message &x, const Message &y) {
		ASSERT_EQ(x.chain.size(), y.chain.size());
		ASSERT_EQ(x.chunks.size(), y.chunks.size());
		EXPECT_EQ(x.nblocks, y.nblocks);
		for (size_t i = 0; i < x.chain.size(); i++) {
			EXPECT_EQ(x.chain[i].voff, y.chain[i].voff);
			EXPECT_EQ(x.chain[i].elems, y.chain[i].elems);
			EXPECT_EQ(x.chain[i].chunk, y.chain[i].chunk);
			EXPECT_EQ(x.chain[i].end, y.chain[i].end);
		}
		for (size_t k = 0; k < x.chunks.size(); k++) {
			EXPECT_EQ(x.chunks[k].vbegin, y.chunks[k].vbegin);
			EXPECT_EQ(x.chunks[k].vend, y.chunks[k].vend);
			EXPECT_EQ(x.chunks[k].origin, y.chunks[k].origin);
		}
	};
	JobConfig bare = t; // no shape: laid out every time
	bare.shape.reset();
	Message ma = msg(70000, CollOp::allreduce), mb = ma, mc = msg(5000, CollOp::allgather);
	build_chain(a, ma, 4096);
	build_chain(b, mb, 4096);
	EXPECT_TRUE(mb.chain.shares(ma.chain));
	EXPECT_TRUE(mb.chunks.shares(ma.chunks));
	build_chain(b, mc, 4096);
	EXPECT_FALSE(mc.chain.shares(ma.chain));
	Message rc = msg(5000, CollOp::allgather);
	build_chain(bare, rc, 4096);
	same(mc, rc);
	EXPECT_FALSE(rc.chain.shares(mc.chain));
	Message md = msg(70000, CollOp::allreduce), rd = md;
	build_chain(a, md, 2048); // another block size: another layout
	build_chain(bare, rd, 2048);
	same(md, rd);
	EXPECT_GT(md.nblocks, ma.nblocks);
}

} // namespace
} // namespace ibv_coll::emu
