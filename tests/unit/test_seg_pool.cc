// Data cache & compute: a Seg unit fills on the first contribution,
// reduces later ones, refuses a contribution whose bit is not pending (so
// nothing is reduced twice), completes when both bitmaps are empty, and
// ranges are reserved by one owner at a time.
#include "seg/seg_pool.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace ibv_coll::emu;

TEST(SegPool, FillReduceDuplicateRelease)
{
	SegPool p(8, 4096);
	EXPECT_EQ(p.size(), 8u);
	EXPECT_EQ(p.unit_bytes(), 4096u);
	ASSERT_TRUE(p.acquire(3, 1, 2, 5, RedOp::sum, Dtype::int32, 16, 0b101, 0b11));
	EXPECT_FALSE(p.acquire(3, 1, 2, 6, RedOp::sum, Dtype::int32, 16, 1, 0)) << "busy";
	EXPECT_EQ(p.in_use(), 1u);
	const int32_t a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, c[4] = {100, 200, 300, 400};
	EXPECT_EQ(p.contribute(3, 0b001, 0, a, 16), SegResult::filled);
	EXPECT_EQ(p.contribute(3, 0b001, 0, a, 16), SegResult::duplicate) << "node 0 twice";
	EXPECT_EQ(p.contribute(3, 0b010, 0, a, 16), SegResult::duplicate) << "node 1 not expected";
	EXPECT_EQ(p.contribute(3, 0b100, 0, b, 12), SegResult::mismatch) << "wrong length";
	EXPECT_FALSE(p.complete(3));
	EXPECT_EQ(p.contribute(3, 0b100, 0, b, 16), SegResult::reduced);
	EXPECT_EQ(p.contribute_ranks(3, 0b11, c, 16), SegResult::reduced);
	EXPECT_EQ(p.contribute_ranks(3, 0b01, c, 16), SegResult::duplicate) << "rank 0 twice";
	EXPECT_TRUE(p.complete(3));
	int32_t got[4];
	memcpy(got, p.unit(3).data, 16);
	EXPECT_EQ(got[0], 111);
	EXPECT_EQ(got[3], 444);
	EXPECT_EQ(p.unit(3).node_map, 0b101u);
	p.release(3);
	EXPECT_EQ(p.in_use(), 0u);
	EXPECT_EQ(p.high_water(), 1u);
	EXPECT_TRUE(p.acquire(3, 1, 2, 6, RedOp::max, Dtype::int32, 16, 1, 0));
	EXPECT_FALSE(p.unit(3).filled) << "a reused unit starts empty";
	EXPECT_FALSE(p.acquire(4, 1, 2, 6, RedOp::max, Dtype::int32, 4097, 1, 0)) << "too long";
}

TEST(SegPool, NodeAndRanksInOnePass)
{
	SegPool p(4, 4096);
	const int32_t a[4] = {1, 2, 3, 4}, r[4] = {10, 20, 30, 40}, b[4] = {100, 200, 300, 400};
	// Empty unit: unit = a + r, both bitmaps cleared.
	ASSERT_TRUE(p.acquire(0, 1, 1, 0, RedOp::sum, Dtype::int32, 16, 0b10, 0b111));
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b01, a, 0b111, r, 16), SegResult::duplicate)
		<< "node 0 not expected";
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b10, a, 0b1000, r, 16), SegResult::duplicate)
		<< "rank 3 not expected";
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b10, a, 0b111, r, 8), SegResult::mismatch);
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b10, a, 0b111, r, 16), SegResult::filled);
	EXPECT_TRUE(p.complete(0));
	EXPECT_EQ(p.unit(0).node_map, 0b10u);
	int32_t got[4];
	memcpy(got, p.unit(0).data, 16);
	EXPECT_EQ(got[0], 11);
	EXPECT_EQ(got[3], 44);
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b10, a, 0b111, r, 16), SegResult::duplicate);
	// A unit that already holds a node's data: unit = (b + a) + r.
	ASSERT_TRUE(p.acquire(1, 1, 1, 1, RedOp::sum, Dtype::int32, 16, 0b11, 0b1));
	EXPECT_EQ(p.contribute(1, 0b01, 0, b, 16), SegResult::filled);
	EXPECT_EQ(p.contribute_node_and_ranks(1, 0b10, a, 0b1, r, 16), SegResult::reduced);
	memcpy(got, p.unit(1).data, 16);
	EXPECT_EQ(got[1], 222);
	EXPECT_EQ(got[2], 333);
	EXPECT_TRUE(p.complete(1));
	// The node's data is the first operand: min of two NaNs keeps the first's
	// payload.
	ASSERT_TRUE(p.acquire(2, 1, 1, 2, RedOp::min, Dtype::float32, 4, 0b1, 0b1));
	const uint32_t nan_node = 0x7fc00001u, nan_rank = 0x7fc00002u;
	EXPECT_EQ(p.contribute_node_and_ranks(2, 0b1, &nan_node, 0b1, &nan_rank, 4),
		  SegResult::filled);
	uint32_t bits;
	memcpy(&bits, p.unit(2).data, 4);
	EXPECT_EQ(bits, nan_node);
}

TEST(SegPool, NodeAndRanksMadeWhereTheResultGoes)
{
	SegPool p(4, 4096);
	const int32_t a[4] = {1, 2, 3, 4}, r[4] = {10, 20, 30, 40}, b[4] = {100, 200, 300, 400};
	int32_t out[4] = {-1, -1, -1, -1};
	// Completed by this contribution: made at out, the unit's own buffer
	// untouched.
	ASSERT_TRUE(p.acquire(0, 1, 1, 0, RedOp::sum, Dtype::int32, 16, 0b10, 0b1));
	memset(p.unit(0).data, 0x5a, 16);
	EXPECT_EQ(p.contribute_node_and_ranks(0, 0b10, a, 0b1, r, 16,
					      reinterpret_cast<uint8_t *>(out)),
		  SegResult::filled);
	EXPECT_TRUE(p.complete(0));
	EXPECT_EQ(out[0], 11);
	EXPECT_EQ(out[3], 44);
	EXPECT_EQ(p.unit(0).data[0], 0x5a);
	// Not completed by it (another node still to come): made in the unit,
	// out untouched.
	int32_t out2[4] = {-1, -1, -1, -1};
	ASSERT_TRUE(p.acquire(1, 1, 1, 1, RedOp::sum, Dtype::int32, 16, 0b110, 0b1));
	EXPECT_EQ(p.contribute_node_and_ranks(1, 0b10, a, 0b1, r, 16,
					      reinterpret_cast<uint8_t *>(out2)),
		  SegResult::filled);
	EXPECT_EQ(out2[0], -1);
	int32_t got[4];
	memcpy(got, p.unit(1).data, 16);
	EXPECT_EQ(got[2], 33);
	// A unit holding a node's data, completed now: (b + a) + r at out.
	ASSERT_TRUE(p.acquire(2, 1, 1, 2, RedOp::sum, Dtype::int32, 16, 0b11, 0b1));
	EXPECT_EQ(p.contribute(2, 0b01, 0, b, 16), SegResult::filled);
	EXPECT_EQ(p.contribute_node_and_ranks(2, 0b10, a, 0b1, r, 16,
					      reinterpret_cast<uint8_t *>(out)),
		  SegResult::reduced);
	EXPECT_EQ(out[1], 222);
	EXPECT_EQ(out[3], 444);
}

TEST(SegPool, RangesHaveOneOwnerAtATime)
{
	SegPool p(16, 256);
	EXPECT_TRUE(p.reserve(0, 8, 1));
	EXPECT_TRUE(p.reserve(0, 8, 1)) << "the owner again";
	EXPECT_TRUE(p.reserve(8, 8, 2));
	EXPECT_FALSE(p.reserve(4, 8, 3)) << "overlaps both";
	p.unreserve(0, 8, 1);
	EXPECT_TRUE(p.reserve(4, 4, 3));
	EXPECT_FALSE(p.reserve(0, 8, 1));
	p.unreserve(4, 4, 2); // not its owner: no effect
	EXPECT_FALSE(p.reserve(0, 8, 1));
	// Releasing the middle of a range keeps both ends.
	p.unreserve(8, 8, 2);
	p.unreserve(4, 4, 3);
	EXPECT_TRUE(p.reserve(0, 16, 4));
	p.unreserve(6, 4, 4);
	EXPECT_FALSE(p.reserve(5, 1, 5)) << "left end still owner 4's";
	EXPECT_FALSE(p.reserve(10, 1, 5)) << "right end still owner 4's";
	EXPECT_TRUE(p.reserve(6, 4, 5)) << "the middle is free";
	EXPECT_FALSE(p.reserve(9, 2, 4)) << "owner 5 holds 9";
	p.unreserve(0, 16, 4);
	EXPECT_TRUE(p.reserve(0, 6, 6));
	EXPECT_TRUE(p.reserve(10, 6, 6));
	EXPECT_FALSE(p.reserve(0, 16, 6)) << "owner 5 still holds the middle";
	p.unreserve(0, 16, 5);
	EXPECT_TRUE(p.reserve(0, 16, 6));
}

// collecting() counts busy units not settled, against a walk over the
// pool after every step of a seeded run of takes, settles (some twice,
// some of free units) and releases.
TEST(SegPool, CollectingIsBusyLessSettled)
{
	SegPool p(64, 64);
	uint32_t x = 12345; // xorshift: the same steps every run
	auto next = [&x] {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		return x;
	};
	for (int step = 0; step < 20000; step++) {
		const uint32_t i = next() % 64;
		switch (next() % 3) {
		case 0: p.acquire(i, 1, 0, i, RedOp::sum, Dtype::int32, 16, 1, 0); break;
		case 1: p.settle(i); break;
		default: p.release(i); break;
		}
		uint32_t walk = 0;
		for (uint32_t k = 0; k < p.size(); k++)
			walk += p.unit(k).busy && !p.unit(k).settled;
		ASSERT_EQ(p.collecting(), walk) << "step " << step;
	}
	p.acquire(63, 1, 0, 0, RedOp::sum, Dtype::int32, 16, 1, 0); // busy either way
	p.settle(63);
	p.release(63);
	EXPECT_TRUE(p.acquire(63, 1, 0, 0, RedOp::sum, Dtype::int32, 16, 1, 0));
	EXPECT_FALSE(p.unit(63).settled) << "a unit taken again collects";
}
