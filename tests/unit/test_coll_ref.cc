// Checks the collective reference (tests/common/coll_ref.*) itself on small
// cases whose results were worked out by hand from the contract: the ring
// fold order per chunk, REDUCE_SCATTER starting at node j+1, AVG, the
// per-type arithmetic (wrapping, signed zeros, NaN, fp16/bf16 rounding) and
// the input generator's determinism.
#include "coll_ref.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

using namespace ibvc_test;

namespace {

CollSpec make_spec(int coll, int op, int dtype, uint64_t count, std::vector<uint16_t> ranks,
		   uint32_t root = 0)
{
	CollSpec s;
	s.coll = coll;
	s.op = op;
	s.dtype = dtype;
	s.count = count;
	s.root = root;
	s.ranks = std::move(ranks);
	s.pairwise_max = 0; // round the ring; PairwiseFoldOrder sets its own
	return s;
}

template <typename T> std::vector<uint8_t> to_bytes(const std::vector<T> &v)
{
	std::vector<uint8_t> b(v.size() * sizeof(T));
	if (!v.empty())
		std::memcpy(b.data(), v.data(), b.size());
	return b;
}

template <typename T> std::vector<T> from_bytes(const std::vector<uint8_t> &b)
{
	std::vector<T> v(b.size() / sizeof(T));
	if (!v.empty())
		std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
	return v;
}

// Rank g's source: `elems` copies of per_rank[g].
template <typename T>
std::vector<std::vector<uint8_t>> uniform_srcs(const std::vector<T> &per_rank, uint64_t elems)
{
	std::vector<std::vector<uint8_t>> srcs;
	for (const T &v : per_rank)
		srcs.push_back(to_bytes(std::vector<T>(elems, v)));
	return srcs;
}

template <typename T>
std::vector<std::vector<uint8_t>> srcs_of(const std::vector<std::vector<T>> &per_rank)
{
	std::vector<std::vector<uint8_t>> srcs;
	for (const auto &v : per_rank)
		srcs.push_back(to_bytes(v));
	return srcs;
}

uint32_t bits(float f)
{
	return std::bit_cast<uint32_t>(f);
}
uint64_t bits(double d)
{
	return std::bit_cast<uint64_t>(d);
}
float fbits(uint32_t u)
{
	return std::bit_cast<float>(u);
}

// One reduction of a single element: rank values in order, result bits.
template <typename T>
T reduce1(int op, int dtype, std::vector<uint16_t> ranks, const std::vector<T> &vals,
	  int coll = IBV_COLL_WR_ALLREDUCE)
{
	CollSpec s = make_spec(coll, op, dtype, 1, std::move(ranks));
	auto out = from_bytes<T>(expected_output_from(s, uniform_srcs(vals, src_elems(s)), 0));
	EXPECT_EQ(out.size(), 1u);
	return out.empty() ? T() : out[0];
}

bool f16_is_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool bf16_is_nan(uint16_t h)
{
	return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

const int kAllDtypes[] = {
	IBV_COLL_DTYPE_INT8,	 IBV_COLL_DTYPE_INT16,	 IBV_COLL_DTYPE_INT32,
	IBV_COLL_DTYPE_INT64,	 IBV_COLL_DTYPE_UINT8,	 IBV_COLL_DTYPE_UINT16,
	IBV_COLL_DTYPE_UINT32,	 IBV_COLL_DTYPE_UINT64,	 IBV_COLL_DTYPE_FLOAT16,
	IBV_COLL_DTYPE_BFLOAT16, IBV_COLL_DTYPE_FLOAT32, IBV_COLL_DTYPE_FLOAT64,
};
const int kAllColls[] = {
	IBV_COLL_WR_ALLREDUCE, IBV_COLL_WR_REDUCE,	   IBV_COLL_WR_BCAST,
	IBV_COLL_WR_ALLGATHER, IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_WR_BARRIER,
};
bool is_float(int dtype)
{
	return dtype >= IBV_COLL_DTYPE_FLOAT16;
}

// f32 values whose sums depend on the order (spacing 8 around 1e8):
//   1e8 + 4          = tie -> 1e8        (1e8 / 8 = 12500000 is even)
//   4 - 100000008    = tie -> -1e8       (100000008 / 8 is odd)
//   -100000008 + 1e8 = -8 exactly
const float kA = 1e8f, kB = 4.0f, kC = -100000008.0f;

} // namespace

// ---------------------------------------------------------------------------
// Spec helpers.

TEST(CollRef, RankNumberingAndSizes)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLGATHER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT16, 5,
			       {2, 1, 3});
	EXPECT_EQ(s.total_ranks(), 6u);
	EXPECT_EQ(s.first_rank(0), 0u);
	EXPECT_EQ(s.first_rank(1), 2u);
	EXPECT_EQ(s.first_rank(2), 3u);
	EXPECT_EQ(s.first_rank(3), 6u);

	const uint64_t want[][2] = {{5, 5}, {5, 5}, {5, 5}, {5, 30}, {30, 5}, {0, 0}};
	for (size_t i = 0; i < std::size(kAllColls); i++) {
		s.coll = kAllColls[i];
		EXPECT_EQ(src_elems(s), want[i][0]) << "coll " << s.coll;
		EXPECT_EQ(dst_elems(s), want[i][1]) << "coll " << s.coll;
	}
	const size_t sizes[] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8};
	for (int d = 0; d < 12; d++)
		EXPECT_EQ(dtype_size(d), sizes[d]) << "dtype " << d;
}

// MAXLOC/MINLOC and the logical ops, hand-computed: four ranks on two
// nodes, element by element.
TEST(CollRef, LocAndLogicalByHand)
{
	struct DI {
		double v;
		int32_t k;
		int32_t pad;
	};
	const double nan = std::nan("");
	// element 0: a tie of 2.5 at indices 9 and 3; element 1: a NaN (index
	// 8) beats everything in both; element 2: -0.0 (index 1) against +0.0
	// (index 2); element 3: distinct values.
	const DI in[4][4] = {
		{{2.5, 9, 0}, {1.0, 0, 0}, {-0.0, 1, 0}, {4.0, 5, 0}},
		{{2.5, 3, 0}, {nan, 8, 0}, {0.0, 2, 0}, {-4.0, 6, 0}},
		{{1.5, 0, 0}, {7.0, 1, 0}, {-1.0, 3, 0}, {3.0, 7, 0}},
		{{-2.0, 1, 0}, {-7.0, 2, 0}, {1.0, 4, 0}, {0.5, 8, 0}},
	};
	std::vector<std::vector<uint8_t>> srcs;
	for (const auto &r : in)
		srcs.emplace_back(reinterpret_cast<const uint8_t *>(r),
				  reinterpret_cast<const uint8_t *>(r) + sizeof(r));
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_MAXLOC,
			       IBV_COLL_DTYPE_FLOAT64_INT32, 4, {2, 2});
	auto out = expected_output_from(s, srcs, 0);
	ASSERT_EQ(out.size(), sizeof(DI) * 4);
	DI got[4];
	std::memcpy(got, out.data(), sizeof(got));
	EXPECT_EQ(got[0].v, 2.5);
	EXPECT_EQ(got[0].k, 3);
	EXPECT_TRUE(std::isnan(got[1].v));
	EXPECT_EQ(got[1].k, 8);
	EXPECT_EQ(got[2].v, 1.0);
	EXPECT_EQ(got[2].k, 4);
	EXPECT_EQ(got[3].v, 4.0);
	EXPECT_EQ(got[3].k, 5);
	s.op = IBV_COLL_OP_MINLOC;
	out = expected_output_from(s, srcs, 1);
	std::memcpy(got, out.data(), sizeof(got));
	EXPECT_EQ(got[0].v, -2.0);
	EXPECT_EQ(got[0].k, 1);
	EXPECT_TRUE(std::isnan(got[1].v));
	EXPECT_EQ(got[2].v, -1.0);
	EXPECT_EQ(got[2].k, 3);
	EXPECT_EQ(got[3].v, -4.0);
	EXPECT_EQ(got[3].k, 6);
	for (const DI &d : got)
		EXPECT_EQ(d.pad, 0);
	// Signed zeros alone: -0.0 is below +0.0.
	const DI z[2][1] = {{{0.0, 0, 0}}, {{-0.0, 1, 0}}};
	std::vector<std::vector<uint8_t>> zs;
	for (const auto &r : z)
		zs.emplace_back(reinterpret_cast<const uint8_t *>(r),
				reinterpret_cast<const uint8_t *>(r) + sizeof(r));
	CollSpec zsp = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_MINLOC,
				 IBV_COLL_DTYPE_FLOAT64_INT32, 1, {1, 1});
	out = expected_output_from(zsp, zs, 0);
	std::memcpy(got, out.data(), sizeof(DI));
	EXPECT_EQ(got[0].k, 1);
	zsp.op = IBV_COLL_OP_MAXLOC;
	out = expected_output_from(zsp, zs, 0);
	std::memcpy(got, out.data(), sizeof(DI));
	EXPECT_EQ(got[0].k, 0);

	const int32_t li[3][4] = {{0, 5, -1, 0}, {0, 0, 7, 0}, {0, 2, 3, 1}};
	std::vector<std::vector<uint8_t>> ls;
	for (const auto &r : li)
		ls.emplace_back(reinterpret_cast<const uint8_t *>(r),
				reinterpret_cast<const uint8_t *>(r) + sizeof(r));
	CollSpec l = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_LAND, IBV_COLL_DTYPE_INT32, 4,
			       {1, 2});
	auto lo = from_bytes<int32_t>(expected_output_from(l, ls, 0));
	EXPECT_EQ(lo, (std::vector<int32_t>{0, 0, 1, 0}));
	l.op = IBV_COLL_OP_LOR;
	lo = from_bytes<int32_t>(expected_output_from(l, ls, 0));
	EXPECT_EQ(lo, (std::vector<int32_t>{0, 1, 1, 1}));
	l.op = IBV_COLL_OP_LXOR;
	lo = from_bytes<int32_t>(expected_output_from(l, ls, 0));
	EXPECT_EQ(lo, (std::vector<int32_t>{0, 0, 1, 1}));
}

TEST(CollRef, InvalidSpecsThrow)
{
	const std::vector<std::vector<uint8_t>> none;
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_BAND, IBV_COLL_DTYPE_FLOAT32, 4,
			       {1, 1});
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.dtype = IBV_COLL_DTYPE_INT32;
	EXPECT_NO_THROW(expected_output(s, 1, 0, kInputNormal));
	s.dtype = 17;
	EXPECT_THROW(dtype_size(s.dtype), std::invalid_argument);
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.dtype = IBV_COLL_DTYPE_INT32;
	s.op = 13;
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.op = IBV_COLL_OP_MAXLOC; // only on the pairs
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.dtype = IBV_COLL_DTYPE_FLOAT32_INT32;
	EXPECT_NO_THROW(expected_output(s, 1, 0, kInputNormal));
	s.op = IBV_COLL_OP_SUM; // the pairs take only MAXLOC/MINLOC
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.op = IBV_COLL_OP_LAND;
	s.dtype = IBV_COLL_DTYPE_FLOAT64;
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.op = IBV_COLL_OP_MAXLOC;
	s.op = IBV_COLL_OP_SUM;
	s.coll = IBV_COLL_WR_REDUCE;
	s.root = 2;
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.root = 1;
	EXPECT_NO_THROW(expected_output(s, 1, 0, kInputNormal));
	s.ranks = {};
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.ranks = {2, 0};
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
	s.ranks = {1, 1};
	EXPECT_THROW(expected_output(s, 1, 0, 3), std::invalid_argument);
	EXPECT_THROW(expected_output_from(s, none, 1), std::invalid_argument);
	s.coll = IBV_COLL_WR_QUERY;
	EXPECT_THROW(expected_output(s, 1, 0, kInputNormal), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Fold order.

// N = 3 nodes of one rank, x = {1e8, 4, -100000008}.  Chunk c folds from
// node c round the ring:
//   c=0: (1e8 + 4) + -100000008          = 1e8 - 100000008 = -8
//   c=1: (4 + -100000008) + 1e8          = -1e8 + 1e8      = 0
//   c=2: (-100000008 + 1e8) + 4          = -8 + 4          = -4
// count 5: chunks [0,1), [1,3), [3,5).
TEST(CollRef, AllreduceF32ChunkStartsAtItsNode)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 5,
			       {1, 1, 1});
	auto srcs = uniform_srcs(std::vector<float>{kA, kB, kC}, 5);
	for (uint32_t g = 0; g < 3; g++)
		EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, g)),
			  (std::vector<float>{-8.0f, 0.0f, 0.0f, -4.0f, -4.0f}))
			<< "rank " << g;

	// count 2 over 3 nodes: chunk 0 is empty, element 0 is chunk 1's,
	// element 1 chunk 2's.
	s.count = 2;
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 1)),
		  (std::vector<float>{0.0f, -4.0f}));

	// One node of three ranks: the local order only, (1e8 + 4) - 100000008.
	s.ranks = {3};
	s.count = 3;
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 2)),
		  (std::vector<float>{-8.0f, -8.0f, -8.0f}));
}

// Through switches every element folds the node partials in a tree.
// x = {1e8, 4, -100000008, 4}; float spacing near 1e8 is 8.
//   one switch: ((1e8 + 4) + -100000008) + 4: 1e8 + 4 ties to 1e8, so -8 + 4 = -4
//   leaves {0, 2} and {1, 3}: (1e8 + -100000008) + (4 + 4) = -8 + 8 = 0
TEST(CollRef, SwitchTreeFoldOrder)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 3,
			       {1, 1, 1, 1});
	s.tree = true;
	auto srcs = uniform_srcs(std::vector<float>{kA, kB, kC, kB}, 3);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 2)),
		  (std::vector<float>{-4.0f, -4.0f, -4.0f}));
	s.leaf_of = {0, 1, 0, 1};
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0)),
		  (std::vector<float>{0.0f, 0.0f, 0.0f}));
	// Reduce-scatter through the switch: the same fold, each node its slice.
	s.coll = IBV_COLL_WR_REDUCE_SCATTER;
	s.count = 1;
	s.leaf_of.clear();
	auto rs = uniform_srcs(std::vector<float>{kA, kB, kC, kB}, 4);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, rs, 3)), (std::vector<float>{-4.0f}));
}

// A small allreduce among the NICs folds pairwise (the exchange), the lower
// first; with p the largest power of two <= N, r = N - p, the first 2r nodes
// fold in pairs first.  x = {1e8, 4, -100000008}, float spacing 8 near 1e8.
//   N=3, {4, 1e8, -100000008}: (4 + 1e8) + -100000008 = 1e8 - 100000008 = -8
//     (the ring's element 0 starts at node 2: (-100000008 + 4) + 1e8 = 0)
//   N=4, {1e8, 4, -100000008, 4}: (1e8 + 4) + (-100000008 + 4) = 1e8 - 1e8 = 0
//   N=5, {1e8, 4, -100000008, 4, 1e8}: ((1e8 + 4) + -100000008) + (4 + 1e8)
//     = -8 + 1e8 = 99999992
TEST(CollRef, PairwiseFoldOrder)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 1,
			       {1, 1, 1});
	auto srcs = uniform_srcs(std::vector<float>{kB, kA, kC}, 1);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 1)), (std::vector<float>{0.0f}))
		<< "the ring's";
	s.pairwise_max = 4096;
	for (uint32_t g = 0; g < 3; g++)
		EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, g)),
			  (std::vector<float>{-8.0f}))
			<< "rank " << g;

	s.ranks = {1, 1, 1, 1};
	s.count = 3;
	srcs = uniform_srcs(std::vector<float>{kA, kB, kC, kB}, 3);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 3)),
		  (std::vector<float>{0.0f, 0.0f, 0.0f}));

	s.ranks = {1, 1, 1, 1, 1};
	srcs = uniform_srcs(std::vector<float>{kA, kB, kC, kB, kA}, 3);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 4)),
		  (std::vector<float>{99999992.0f, 99999992.0f, 99999992.0f}));

	// Larger than the limit, or one node: not the exchange.
	s.ranks = {1, 1, 1};
	s.count = 1025;
	srcs = uniform_srcs(std::vector<float>{kB, kA, kC}, 1025);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0))[1024], 0.0f) << "the ring's";
	s.count = 1024;
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0))[1023], -8.0f);
	s.ranks = {3};
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0))[1023], -8.0f)
		<< "one node folds its ranks in order";
}

// Each node folds its own ranks before the ring: nodes {x0}, {x1, x2} with
// x = {1e8, -100000008, 4}: P1 = -100000008 + 4 = tie -> -1e8, so both
// chunks give 0 (a flat fold over the ranks would give -8 + 4 = -4).
TEST(CollRef, AllreducePartialPerNodeFirst)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 2,
			       {1, 2});
	auto srcs = uniform_srcs(std::vector<float>{kA, kC, kB}, 2);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0)),
		  (std::vector<float>{0.0f, 0.0f}));
}

// float64: 2^53 + 1 = tie -> 2^53; 1 - 2^53 is exact.
//   c=0: (2^53 + 1) - 2^53 = 0;  c=1: (1 - 2^53) + 2^53 = 1;  c=2: (-2^53 + 2^53) + 1 = 1
TEST(CollRef, AllreduceF64ChunkOrder)
{
	const double p53 = 9007199254740992.0;
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT64, 3,
			       {1, 1, 1});
	auto srcs = uniform_srcs(std::vector<double>{p53, 1.0, -p53}, 3);
	EXPECT_EQ(from_bytes<double>(expected_output_from(s, srcs, 0)),
		  (std::vector<double>{0.0, 1.0, 1.0}));
}

TEST(CollRef, ReduceOnlyAtRoot)
{
	CollSpec s = make_spec(IBV_COLL_WR_REDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 5,
			       {1, 1, 1}, 2);
	auto srcs = uniform_srcs(std::vector<float>{kA, kB, kC}, 5);
	EXPECT_TRUE(expected_output_from(s, srcs, 0).empty());
	EXPECT_TRUE(expected_output_from(s, srcs, 1).empty());
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 2)),
		  (std::vector<float>{-8.0f, 0.0f, 0.0f, -4.0f, -4.0f}));
	auto all = expected_outputs(s, 7, kInputNormal);
	ASSERT_EQ(all.size(), 3u);
	EXPECT_TRUE(all[0].empty());
	EXPECT_TRUE(all[1].empty());
	EXPECT_EQ(all[2].size(), 5 * sizeof(float));
}

// REDUCE_SCATTER, nodes of one rank, x = {1e8, 4, -100000008} everywhere.
// Node j's chunk folds from node j+1:
//   j=0: (4 + -100000008) + 1e8 = 0
//   j=1: (-100000008 + 1e8) + 4 = -4
//   j=2: (1e8 + 4) + -100000008 = -8
TEST(CollRef, ReduceScatterStartsAtNextNode)
{
	CollSpec s = make_spec(IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32,
			       2, {1, 1, 1});
	auto srcs = uniform_srcs(std::vector<float>{kA, kB, kC}, 6);
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 0)),
		  (std::vector<float>{0.0f, 0.0f}));
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 1)),
		  (std::vector<float>{-4.0f, -4.0f}));
	EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, 2)),
		  (std::vector<float>{-8.0f, -8.0f}));

	// Nodes {2, 1, 1}: x = {1e8, 0 | 4 | -100000008}, P = {1e8, 4, -100000008}.
	// Node 0's chunk (ranks 0 and 1) folds P1, P2, P0 = 0; node 1's (rank 2)
	// P2, P0, P1 = -4; node 2's (rank 3) P0, P1, P2 = -8.
	s.ranks = {2, 1, 1};
	s.count = 1;
	srcs = uniform_srcs(std::vector<float>{kA, 0.0f, kB, kC}, 4);
	const float want[] = {0.0f, 0.0f, -4.0f, -8.0f};
	for (uint32_t g = 0; g < 4; g++)
		EXPECT_EQ(from_bytes<float>(expected_output_from(s, srcs, g)),
			  std::vector<float>{want[g]})
			<< "rank " << g;
}

// Each rank's destination is its own slice: x_h[e] = 10h + e, ranks {2, 1},
// count 2: sum_h x_h[e] = 30 + 3e; rank g gets e = 2g, 2g+1.
TEST(CollRef, ReduceScatterSlices)
{
	CollSpec s = make_spec(IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, 2,
			       {2, 1});
	std::vector<std::vector<int32_t>> x(3);
	for (int h = 0; h < 3; h++)
		for (int e = 0; e < 6; e++)
			x[h].push_back(10 * h + e);
	auto srcs = srcs_of(x);
	EXPECT_EQ(from_bytes<int32_t>(expected_output_from(s, srcs, 0)),
		  (std::vector<int32_t>{30, 33}));
	EXPECT_EQ(from_bytes<int32_t>(expected_output_from(s, srcs, 1)),
		  (std::vector<int32_t>{36, 39}));
	EXPECT_EQ(from_bytes<int32_t>(expected_output_from(s, srcs, 2)),
		  (std::vector<int32_t>{42, 45}));
}

// ---------------------------------------------------------------------------
// Data movement.

// ranks {2, 1, 3}: x_h = {100h, 100h + 1}; every destination is
// {0, 1, 100, 101, ..., 500, 501}.
TEST(CollRef, AllgatherLayout)
{
	CollSpec s = make_spec(IBV_COLL_WR_ALLGATHER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT16, 2,
			       {2, 1, 3});
	std::vector<std::vector<int16_t>> x;
	std::vector<int16_t> want;
	for (int h = 0; h < 6; h++) {
		x.push_back({int16_t(100 * h), int16_t(100 * h + 1)});
		want.push_back(int16_t(100 * h));
		want.push_back(int16_t(100 * h + 1));
	}
	for (uint32_t g = 0; g < 6; g++)
		EXPECT_EQ(from_bytes<int16_t>(expected_output_from(s, srcs_of(x), g)), want)
			<< "rank " << g;

	// From generated inputs: slice h is rank h's input.
	auto all = expected_outputs(s, 42, kInputSpecial);
	for (uint32_t g = 0; g < 6; g++) {
		ASSERT_EQ(all[g].size(), 12 * sizeof(int16_t));
		for (uint32_t h = 0; h < 6; h++) {
			auto in = make_input(s, 42, h, kInputSpecial);
			EXPECT_EQ(std::memcmp(all[g].data() + h * 4, in.data(), 4), 0)
				<< g << " " << h;
		}
	}
}

TEST(CollRef, BcastIsRootSource)
{
	CollSpec s = make_spec(IBV_COLL_WR_BCAST, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT64, 9,
			       {2, 1, 3}, 3);
	auto root_in = make_input(s, 5, 3, kInputSpecial);
	for (uint32_t g = 0; g < 6; g++)
		EXPECT_EQ(expected_output(s, 5, g, kInputSpecial), root_in) << "rank " << g;
	std::vector<std::vector<uint8_t>> srcs(6);
	srcs[3] = root_in; // the other sources are not needed
	EXPECT_EQ(expected_output_from(s, srcs, 0), root_in);
}

TEST(CollRef, BarrierHasNoData)
{
	CollSpec s = make_spec(IBV_COLL_WR_BARRIER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, 0,
			       {2, 3});
	EXPECT_EQ(src_elems(s), 0u);
	EXPECT_EQ(dst_elems(s), 0u);
	EXPECT_TRUE(expected_output(s, 1, 4, kInputNormal).empty());
	for (const auto &d : expected_outputs(s, 1, kInputNormal))
		EXPECT_TRUE(d.empty());
}

// ---------------------------------------------------------------------------
// AVG.

TEST(CollRef, IntegerAvgTruncatesTowardZero)
{
	// -7 + 2 + 1 = -4; -4 / 3 = -1 (floor would be -2).
	EXPECT_EQ(reduce1<int32_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_INT32, {1, 1, 1}, {-7, 2, 1}),
		  -1);
	// int8: -300 wraps to 212 = -44; -44 / 3 = -14 (0xf2).
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_INT8, {3}, {-100, -100, -100}),
		  -14);
	// uint8: 600 wraps to 88; 88 / 3 = 29.
	EXPECT_EQ(reduce1<uint8_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_UINT8, {2, 1}, {200, 200, 200}),
		  29);
	// int64: INT64_MAX + 1 + 0 wraps to INT64_MIN; / 3 = -3074457345618258602.
	EXPECT_EQ(reduce1<int64_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_INT64, {1, 2},
				   {std::numeric_limits<int64_t>::max(), 1, 0}),
		  -3074457345618258602LL);
	// uint32 over 4 ranks: 10 / 4 = 2.
	EXPECT_EQ(reduce1<uint32_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_UINT32, {2, 2}, {1, 2, 3, 4}),
		  2u);
	// REDUCE_SCATTER divides by K as well: (5 - 9 + 1) / 3 = -1.
	EXPECT_EQ(reduce1<int16_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_INT16, {1, 2}, {5, -9, 1},
				   IBV_COLL_WR_REDUCE_SCATTER),
		  -1);
}

TEST(CollRef, FloatAvg)
{
	// 4 / 3 in float32: 1.0101...b rounds up to 0x3faaaaab.
	EXPECT_EQ(reduce1<uint32_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT32, {1, 1, 1},
				    {bits(1.0f), bits(1.0f), bits(2.0f)}),
		  0x3faaaaabu);
	// 5 / 3 = 1.10101...b: 23 bits 0x555555 and the next bit 0, rounds down
	// (5 * (1/3) would round up to 0x3fd55556).
	EXPECT_EQ(reduce1<uint32_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT32, {1, 2},
				    {bits(1.0f), bits(2.0f), bits(2.0f)}),
		  0x3fd55555u);
	// float64 5 / 3: 52 bits 0xaaaaaaaaaaaaa, then 1 and more: rounds up.
	EXPECT_EQ(reduce1<uint64_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT64, {3},
				    {bits(1.0), bits(2.0), bits(2.0)}),
		  0x3ffaaaaaaaaaaaabull);
	// float64: 3 / 2 = 1.5.
	EXPECT_EQ(reduce1<uint64_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT64, {2},
				    {bits(1.0), bits(2.0)}),
		  bits(1.5));
	// fp16 {2048, 1, 1}: 2048 + 1 ties to 2048 (even), + 1 again 2048; the
	// rounded sum / 3 = 682.67 -> 682.5 = 0x6155 (the exact 2050 / 3 would
	// give 683.5).
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT16, {3},
				    {0x6800, 0x3c00, 0x3c00}),
		  0x6155);
	// bf16 {1, 0, 0}: 1 / 3 = 1.0101010|1...b * 2^-2 rounds up to 0x3eab.
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_AVG, IBV_COLL_DTYPE_BFLOAT16, {1, 1, 1},
				    {0x3f80, 0, 0}),
		  0x3eab);
}

// ---------------------------------------------------------------------------
// Integer arithmetic.

TEST(CollRef, IntegerOps)
{
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT8, {2}, {100, 100}), -56);
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_PROD, IBV_COLL_DTYPE_INT8, {2}, {16, 16}), 0);
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_PROD, IBV_COLL_DTYPE_INT8, {1, 1}, {3, -128}), -128);
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_MIN, IBV_COLL_DTYPE_INT8, {2}, {1, -1}), -1);
	EXPECT_EQ(reduce1<int8_t>(IBV_COLL_OP_MAX, IBV_COLL_DTYPE_INT8, {2}, {-1, 1}), 1);
	EXPECT_EQ(reduce1<uint8_t>(IBV_COLL_OP_MIN, IBV_COLL_DTYPE_UINT8, {2}, {0xff, 1}), 1);
	EXPECT_EQ(reduce1<uint8_t>(IBV_COLL_OP_MAX, IBV_COLL_DTYPE_UINT8, {2}, {1, 0xff}), 0xff);
	EXPECT_EQ(reduce1<int16_t>(IBV_COLL_OP_MIN, IBV_COLL_DTYPE_INT16, {1, 1, 1},
				   {5, -32768, 32767}),
		  -32768);
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_MAX, IBV_COLL_DTYPE_UINT16, {1, 1, 1},
				    {5, 0x8000, 0x7fff}),
		  0x8000);
	EXPECT_EQ(reduce1<int32_t>(IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, {1, 1}, {INT32_MAX, 1}),
		  INT32_MIN);
	EXPECT_EQ(reduce1<int64_t>(IBV_COLL_OP_MIN, IBV_COLL_DTYPE_INT64, {2},
				   {INT64_MAX, INT64_MIN}),
		  INT64_MIN);
	EXPECT_EQ(reduce1<uint64_t>(IBV_COLL_OP_MAX, IBV_COLL_DTYPE_UINT64, {2}, {1, ~0ull}),
		  ~0ull);
	EXPECT_EQ(reduce1<uint64_t>(IBV_COLL_OP_PROD, IBV_COLL_DTYPE_UINT64, {2}, {1ull << 63, 2}),
		  0u);
	// (2^32 + 1)^2 = 2^64 + 2^33 + 1 -> 2^33 + 1.
	EXPECT_EQ(reduce1<uint64_t>(IBV_COLL_OP_PROD, IBV_COLL_DTYPE_UINT64, {2},
				    {0x100000001ull, 0x100000001ull}),
		  0x200000001ull);
	EXPECT_EQ(reduce1<uint32_t>(IBV_COLL_OP_PROD, IBV_COLL_DTYPE_UINT32, {3},
				    {0x10000, 0x10000, 3}),
		  0u);
	// Bitwise over three ranks.
	const std::vector<uint16_t> v = {0xf0f0, 0xff00, 0x3c3c};
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_BAND, IBV_COLL_DTYPE_UINT16, {1, 2}, v), 0x3000);
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_BOR, IBV_COLL_DTYPE_UINT16, {1, 2}, v), 0xfffc);
	EXPECT_EQ(reduce1<uint16_t>(IBV_COLL_OP_BXOR, IBV_COLL_DTYPE_UINT16, {1, 2}, v), 0x33cc);
	EXPECT_EQ(reduce1<int64_t>(IBV_COLL_OP_BXOR, IBV_COLL_DTYPE_INT64, {1, 1}, {-1, 0x0f}),
		  ~int64_t(0x0f));
}

// For integers every order gives the same value, so REDUCE_SCATTER's
// destinations laid end to end are ALLREDUCE of count*K (same generated
// sources: inputs depend only on seed, rank, index, mode and dtype); and
// ALLREDUCE SUM is the plain wrapping sum.
TEST(CollRef, IntegerCrossChecks)
{
	const std::vector<uint16_t> ranks = {2, 1, 3};
	for (int dtype = IBV_COLL_DTYPE_INT8; dtype <= IBV_COLL_DTYPE_UINT64; dtype++)
		for (int op = IBV_COLL_OP_SUM; op <= IBV_COLL_OP_BXOR; op++)
			for (int mode = 0; mode < 3; mode++) {
				CollSpec rs = make_spec(IBV_COLL_WR_REDUCE_SCATTER, op, dtype, 7,
							ranks);
				CollSpec ar = make_spec(IBV_COLL_WR_ALLREDUCE, op, dtype, 42,
							ranks);
				auto parts = expected_outputs(rs, 99, mode);
				std::vector<uint8_t> cat;
				for (auto &p : parts)
					cat.insert(cat.end(), p.begin(), p.end());
				EXPECT_EQ(cat, expected_output(ar, 99, 4, mode))
					<< "dtype " << dtype << " op " << op << " mode " << mode;
			}

	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, 100,
			       ranks);
	std::vector<uint32_t> sum(100, 0);
	for (uint32_t h = 0; h < 6; h++) {
		auto in = from_bytes<uint32_t>(make_input(s, 3, h, kInputNormal));
		for (int e = 0; e < 100; e++)
			sum[e] += in[e];
	}
	EXPECT_EQ(from_bytes<uint32_t>(expected_output(s, 3, 0, kInputNormal)), sum);
}

// ---------------------------------------------------------------------------
// Floating MIN/MAX.

TEST(CollRef, MinMaxSignedZeroAndNaN)
{
	const uint32_t pz = bits(0.0f), nz = bits(-0.0f), one = bits(1.0f);
	const uint32_t nan_a = 0x7fc01234, nan_b = 0xffc00005;
	const int f32 = IBV_COLL_DTYPE_FLOAT32, mn = IBV_COLL_OP_MIN, mx = IBV_COLL_OP_MAX;
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {nz, pz}), nz);
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {pz, nz}), nz);
	EXPECT_EQ(reduce1<uint32_t>(mx, f32, {2}, {nz, pz}), pz);
	EXPECT_EQ(reduce1<uint32_t>(mx, f32, {2}, {pz, nz}), pz);
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {one, bits(2.0f)}), one);
	EXPECT_EQ(reduce1<uint32_t>(mx, f32, {2}, {one, bits(2.0f)}), bits(2.0f));
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {bits(5.0f), bits(-INFINITY)}), bits(-INFINITY));
	// A NaN accumulator stays (bit for bit); else a NaN operand is taken.
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {nan_a, one}), nan_a);
	EXPECT_EQ(reduce1<uint32_t>(mn, f32, {2}, {one, nan_b}), nan_b);
	EXPECT_EQ(reduce1<uint32_t>(mx, f32, {2}, {nan_a, nan_b}), nan_a);
	EXPECT_EQ(reduce1<uint32_t>(mx, f32, {2}, {bits(INFINITY), nan_b}), nan_b);

	// Over the ring, x = {nan_a, 1, nan_b}, count 3: chunk 0 min(min(nan_a,
	// 1), nan_b) = nan_a; chunk 1 min(min(1, nan_b), nan_a) = nan_b; chunk 2
	// min(min(nan_b, nan_a), 1) = nan_b.
	CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, mn, f32, 3, {1, 1, 1});
	auto got = from_bytes<uint32_t>(expected_output_from(
		s, uniform_srcs(std::vector<uint32_t>{nan_a, one, nan_b}, 3), 0));
	EXPECT_EQ(got, (std::vector<uint32_t>{nan_a, nan_b, nan_b}));

	const int f64 = IBV_COLL_DTYPE_FLOAT64;
	EXPECT_EQ(reduce1<uint64_t>(mn, f64, {1, 1}, {bits(0.0), bits(-0.0)}), bits(-0.0));
	EXPECT_EQ(reduce1<uint64_t>(mx, f64, {1, 1}, {bits(-0.0), bits(0.0)}), bits(0.0));
	EXPECT_EQ(reduce1<uint64_t>(mx, f64, {1, 1}, {bits(-3.0), 0x7ff8000000000123ull}),
		  0x7ff8000000000123ull);
	EXPECT_EQ(reduce1<uint64_t>(mn, f64, {1, 1}, {bits(-3.0), bits(-2.0)}), bits(-3.0));

	// fp16 / bf16: the float rule; a NaN result may be any NaN.
	const int f16 = IBV_COLL_DTYPE_FLOAT16, b16 = IBV_COLL_DTYPE_BFLOAT16;
	EXPECT_EQ(reduce1<uint16_t>(mn, f16, {2}, {0x0000, 0x8000}), 0x8000);
	EXPECT_EQ(reduce1<uint16_t>(mx, f16, {2}, {0x8000, 0x0000}), 0x0000);
	EXPECT_EQ(reduce1<uint16_t>(mn, f16, {2}, {0xbc00, 0x3c00}), 0xbc00);
	EXPECT_TRUE(f16_is_nan(reduce1<uint16_t>(mn, f16, {2}, {0x7e01, 0xfc00})));
	EXPECT_TRUE(f16_is_nan(reduce1<uint16_t>(mx, f16, {2}, {0x7c00, 0xfe00})));
	EXPECT_EQ(reduce1<uint16_t>(mn, b16, {2}, {0x0000, 0x8000}), 0x8000);
	EXPECT_EQ(reduce1<uint16_t>(mx, b16, {2}, {0x0000, 0x8000}), 0x0000);
	EXPECT_TRUE(bf16_is_nan(reduce1<uint16_t>(mx, b16, {2}, {0x3f80, 0x7fc1})));
	EXPECT_EQ(reduce1<uint16_t>(mx, b16, {2}, {0x3f80, 0x4000}), 0x4000);
}

// ---------------------------------------------------------------------------
// fp16 / bf16.

TEST(CollRef, F16SumRoundsTiesToEven)
{
	const int f16 = IBV_COLL_DTYPE_FLOAT16, sum = IBV_COLL_OP_SUM, prod = IBV_COLL_OP_PROD;
	// 1 + 2^-11 (0x1000) is halfway between 1 (0x3c00, even) and 1 + 2^-10.
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x3c00, 0x1000}), 0x3c00);
	// 1 + 3 * 2^-11: halfway between 0x3c01 (odd) and 0x3c02.
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x3c01, 0x1000}), 0x3c02);
	// The order matters: (1 + 2^-11) + 2^-11 = 1, (2^-11 + 2^-11) + 1 = 1 + 2^-10.
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {3}, {0x3c00, 0x1000, 0x1000}), 0x3c00);
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {3}, {0x1000, 0x1000, 0x3c00}), 0x3c01);
	// Overflow: 65504 + 15 = 65519 -> 65504; 65504 + 16 = 65520 ties away
	// from the odd 0x7bff to Inf; 65504 + 65504 = Inf.
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x7bff, 0x4b80}), 0x7bff);
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x7bff, 0x4c00}), 0x7c00);
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x7bff, 0x7bff}), 0x7c00);
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0xfbff, 0xcc00}), 0xfc00);
	EXPECT_TRUE(f16_is_nan(reduce1<uint16_t>(sum, f16, {2}, {0x7c00, 0xfc00})));
	// Denormal products: 2^-14 * 0.5 = 2^-15 (0x0200); 2^-24 * 0.5 ties to
	// 0; 3 * 2^-24 * 0.5 ties to 2 * 2^-24; -2^-24 * 0.5 = -0.
	EXPECT_EQ(reduce1<uint16_t>(prod, f16, {2}, {0x0400, 0x3800}), 0x0200);
	EXPECT_EQ(reduce1<uint16_t>(prod, f16, {2}, {0x0001, 0x3800}), 0x0000);
	EXPECT_EQ(reduce1<uint16_t>(prod, f16, {2}, {0x0003, 0x3800}), 0x0002);
	EXPECT_EQ(reduce1<uint16_t>(prod, f16, {2}, {0x8001, 0x3800}), 0x8000);
	EXPECT_EQ(reduce1<uint16_t>(sum, f16, {2}, {0x03ff, 0x0001}), 0x0400);
}

TEST(CollRef, F16Conversions)
{
	EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
	EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));
	EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));
	EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
	EXPECT_EQ(f16_to_float(0xc000), -2.0f);
	EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
	EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
	EXPECT_EQ(f16_to_float(0x7c00), INFINITY);
	EXPECT_EQ(f16_to_float(0xfc00), -INFINITY);
	EXPECT_EQ(bits(f16_to_float(0x8000)), 0x80000000u);
	EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
	EXPECT_TRUE(std::isnan(f16_to_float(0xfc01)));

	EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
	EXPECT_EQ(float_to_f16(65519.99f), 0x7bff);
	EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);
	EXPECT_EQ(float_to_f16(1e9f), 0x7c00);
	EXPECT_EQ(float_to_f16(-1e9f), 0xfc00);
	EXPECT_EQ(float_to_f16(INFINITY), 0x7c00);
	EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);
	EXPECT_EQ(float_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
	EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);
	EXPECT_EQ(float_to_f16(std::ldexp(2047.0f, -25)),
		  0x0400);				    // 1023.5 units: tie to the even 0x0400
	EXPECT_EQ(float_to_f16(fbits(0x00000001)), 0x0000); // float denormal
	EXPECT_EQ(float_to_f16(-fbits(0x00000001)), 0x8000);
	EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
	EXPECT_EQ(float_to_f16(1.0f / 3.0f), 0x3555);
	const uint16_t qn = float_to_f16(-NAN);
	EXPECT_TRUE(f16_is_nan(qn));
	EXPECT_EQ(qn & 0x8000, 0x8000);
	EXPECT_TRUE(f16_is_nan(
		float_to_f16(fbits(0x7f800001)))); // signalling NaN, payload in low bits only
}

TEST(CollRef, Bf16Denormals)
{
	EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
	EXPECT_EQ(bf16_to_float(0x007f), std::ldexp(127.0f, -133));
	EXPECT_EQ(bf16_to_float(0x0080), std::ldexp(1.0f, -126));
	EXPECT_EQ(bf16_to_float(0x8001), -std::ldexp(1.0f, -133));
	EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
	EXPECT_EQ(bf16_to_float(0x7f7f), fbits(0x7f7f0000));
	// From float denormals: bf16 keeps the top 16 bits, rounded.
	EXPECT_EQ(float_to_bf16(fbits(0x00010000)), 0x0001);
	EXPECT_EQ(float_to_bf16(fbits(0x00008000)), 0x0000); // tie to even 0
	EXPECT_EQ(float_to_bf16(fbits(0x00018000)), 0x0002); // tie to even 2
	EXPECT_EQ(float_to_bf16(fbits(0x00008001)), 0x0001);
	EXPECT_EQ(float_to_bf16(fbits(0x007fffff)), 0x0080); // up into the normals
	EXPECT_EQ(float_to_bf16(fbits(0x80008001)), 0x8001);
	// Overflow: 0x7f7f plus half a unit ties up to Inf.
	EXPECT_EQ(float_to_bf16(fbits(0x7f7f8000)), 0x7f80);
	EXPECT_EQ(float_to_bf16(fbits(0x7f7f7fff)), 0x7f7f);
	EXPECT_EQ(float_to_bf16(fbits(0xff7fffff)), 0xff80);
	EXPECT_TRUE(bf16_is_nan(float_to_bf16(fbits(0x7f800001))));

	const int b16 = IBV_COLL_DTYPE_BFLOAT16, sum = IBV_COLL_OP_SUM, prod = IBV_COLL_OP_PROD;
	EXPECT_EQ(reduce1<uint16_t>(sum, b16, {2}, {0x0001, 0x0001}), 0x0002);
	EXPECT_EQ(reduce1<uint16_t>(sum, b16, {2}, {0x007f, 0x0001}), 0x0080);
	EXPECT_EQ(reduce1<uint16_t>(sum, b16, {2}, {0x0001, 0x8001}), 0x0000);
	// 2^-133 * 0.5 ties to 0; 3 * 2^-133 * 0.5 ties to 2 * 2^-133;
	// 2^-126 * 0.75 = 96 * 2^-133.
	EXPECT_EQ(reduce1<uint16_t>(prod, b16, {2}, {0x0001, 0x3f00}), 0x0000);
	EXPECT_EQ(reduce1<uint16_t>(prod, b16, {2}, {0x0003, 0x3f00}), 0x0002);
	EXPECT_EQ(reduce1<uint16_t>(prod, b16, {2}, {0x0080, 0x3f40}), 0x0060);
	// 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7.
	EXPECT_EQ(reduce1<uint16_t>(sum, b16, {2}, {0x3f80, 0x3b80}), 0x3f80);
	EXPECT_EQ(reduce1<uint16_t>(sum, b16, {2}, {0x3f81, 0x3b80}), 0x3f82);
}

// Every 16-bit pattern round trips, and between two neighbours a float
// exactly halfway goes to the even one, anything off the midpoint to the
// nearer one.  Midpoints are computed in double from the two neighbours.
template <typename ToF, typename FromF>
void exhaustive_narrow(ToF to_float, FromF from_float, uint16_t max_finite, uint16_t nan_mask,
		       const char *name)
{
	int failures = 0;
	for (uint32_t h = 0; h < 0x10000 && failures < 10; h++) {
		const float f = to_float(uint16_t(h));
		const bool nan = (h & nan_mask) == nan_mask && (h & ~nan_mask & 0x7fff) != 0;
		if (nan) {
			if (!std::isnan(f) || ((from_float(f) & nan_mask) != nan_mask)) {
				ADD_FAILURE() << name << " NaN " << std::hex << h;
				failures++;
			}
			continue;
		}
		if (from_float(f) != h) {
			ADD_FAILURE() << name << " round trip " << std::hex << h;
			failures++;
		}
	}
	for (uint32_t sign = 0; sign < 2; sign++)
		for (uint32_t h = 0; h <= max_finite && failures < 10; h++) {
			const uint16_t lo = uint16_t(h | sign << 15),
				       hi = uint16_t((h + 1) | sign << 15);
			// Past max_finite the neighbour is where the next binade would start.
			const double dlo = to_float(lo);
			const double dhi = h < max_finite
						   ? double(to_float(hi))
						   : 2 * dlo - double(to_float(uint16_t(lo - 1)));
			const float mid = float((dlo + dhi) / 2);
			ASSERT_EQ(double(mid), (dlo + dhi) / 2) << "midpoint not exact";
			const uint16_t even = (h & 1) ? hi : lo;
			const float below = std::nextafter(mid, float(dlo)),
				    above = std::nextafter(mid, float(dhi));
			if (from_float(mid) != even || from_float(below) != lo ||
			    from_float(above) != hi) {
				ADD_FAILURE()
					<< name << " rounding between " << std::hex << lo << " and "
					<< hi << ": mid " << from_float(mid) << " below "
					<< from_float(below) << " above " << from_float(above);
				failures++;
			}
		}
}

TEST(CollRef, F16ExhaustiveRounding)
{
	// 0x7bff's upper neighbour 0x7c00 is Inf: the threshold 65520 ties to it.
	exhaustive_narrow(f16_to_float, float_to_f16, 0x7bff, 0x7c00, "fp16");
}

TEST(CollRef, Bf16ExhaustiveRounding)
{
	exhaustive_narrow(bf16_to_float, float_to_bf16, 0x7f7f, 0x7f80, "bf16");
}

// ---------------------------------------------------------------------------
// first_mismatch.

TEST(CollRef, FirstMismatchNaN)
{
	CollSpec s;
	s.dtype = IBV_COLL_DTYPE_FLOAT32;
	const std::vector<uint32_t> got = {bits(1.0f), 0x7fc00000, bits(3.0f)};
	std::vector<uint32_t> want = {bits(1.0f), 0xffc00001, bits(3.0f)};
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), -1);
	want[1] = 0x7f800001; // a signalling NaN is a NaN too
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), -1);
	want[1] = bits(2.0f);
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), 1);
	want[1] = 0x7f800000; // Inf is not a NaN
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), 1);
	want = got;
	want[2] = bits(-3.0f);
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), 2);
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 2), -1);
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 0), -1);
	// Signed zeros differ.
	const uint32_t pz = 0, nz = 0x80000000;
	EXPECT_EQ(first_mismatch(s, &pz, &nz, 1), 0);

	// Integers compare bytes: NaN-looking patterns must match exactly.
	s.dtype = IBV_COLL_DTYPE_INT32;
	want = {bits(1.0f), 0xffc00001, bits(3.0f)};
	EXPECT_EQ(first_mismatch(s, got.data(), want.data(), 3), 1);

	s.dtype = IBV_COLL_DTYPE_FLOAT16;
	const std::vector<uint16_t> h1 = {0x3c00, 0x7e00, 0x7c00}, h2 = {0x3c00, 0xfc01, 0x7e00};
	EXPECT_EQ(first_mismatch(s, h1.data(), h2.data(), 3), 2);
	s.dtype = IBV_COLL_DTYPE_BFLOAT16; // 0x7e00 is a number in bf16, 0xfc01 too
	EXPECT_EQ(first_mismatch(s, h1.data(), h2.data(), 3), 1);
	const std::vector<uint16_t> b1 = {0x7fc0, 0xff81}, b2 = {0x7f81, 0x7fff};
	EXPECT_EQ(first_mismatch(s, b1.data(), b2.data(), 2), -1);
	s.dtype = IBV_COLL_DTYPE_FLOAT64;
	const std::vector<uint64_t> d1 = {0x7ff8000000000000ull, bits(1.0)},
				    d2 = {0xfff0000000000001ull, bits(1.0)};
	EXPECT_EQ(first_mismatch(s, d1.data(), d2.data(), 2), -1);
	s.dtype = IBV_COLL_DTYPE_INT64;
	EXPECT_EQ(first_mismatch(s, d1.data(), d2.data(), 2), 0);
}

TEST(CollRef, FormatElem)
{
	const uint16_t h = 0xbe00;
	EXPECT_EQ(format_elem(IBV_COLL_DTYPE_FLOAT16, &h, 0), "-1.5 (0xbe00)");
	const int8_t i8[] = {0, -14};
	EXPECT_EQ(format_elem(IBV_COLL_DTYPE_INT8, i8, 1), "-14 (0xf2)");
	const uint32_t u = 4000000000u;
	EXPECT_EQ(format_elem(IBV_COLL_DTYPE_UINT32, &u, 0), "4000000000 (0xee6b2800)");
}

// ---------------------------------------------------------------------------
// Input generation.

TEST(CollRef, FillInputDeterministicPrefix)
{
	for (int dtype : kAllDtypes)
		for (int mode = 0; mode < 3; mode++) {
			CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, dtype, 0,
					       {1});
			const size_t sz = dtype_size(dtype);
			std::vector<uint8_t> a(1000 * sz), b(1000 * sz), c(37 * sz), d(1000 * sz);
			fill_input(s, 11, 3, a.data(), 1000, mode);
			fill_input(s, 11, 3, b.data(), 1000, mode);
			fill_input(s, 11, 3, c.data(), 37, mode);
			EXPECT_EQ(a, b) << "dtype " << dtype << " mode " << mode;
			EXPECT_EQ(std::memcmp(a.data(), c.data(), c.size()), 0)
				<< "dtype " << dtype << " mode " << mode;
			fill_input(s, 11, 4, d.data(), 1000, mode);
			EXPECT_NE(a, d) << "other rank, dtype " << dtype << " mode " << mode;
			fill_input(s, 12, 3, d.data(), 1000, mode);
			EXPECT_NE(a, d) << "other seed, dtype " << dtype << " mode " << mode;
			fill_input(s, 11, 3, d.data(), 1000, (mode + 1) % 3);
			EXPECT_NE(a, d) << "other mode, dtype " << dtype << " mode " << mode;
			// make_input is fill_input of src_elems.
			s.count = 1000;
			EXPECT_EQ(make_input(s, 11, 3, mode), a);
			// Independent of the collective: REDUCE_SCATTER's longer source
			// starts the same.
			s.coll = IBV_COLL_WR_REDUCE_SCATTER;
			s.ranks = {2, 2};
			s.count = 250;
			EXPECT_EQ(make_input(s, 11, 3, mode), a);
		}
}

TEST(CollRef, FillInputModes)
{
	const uint64_t n = 4000;
	for (int dtype : kAllDtypes) {
		CollSpec s = make_spec(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, dtype, n, {1});
		const size_t sz = dtype_size(dtype);
		const unsigned bits_n = unsigned(sz * 8);
		const bool sgn = dtype <= IBV_COLL_DTYPE_INT64;
		auto value_of = [&](const std::vector<uint8_t> &buf, uint64_t i) -> double {
			uint64_t u = 0;
			std::memcpy(&u, buf.data() + i * sz, sz);
			switch (dtype) {
			case IBV_COLL_DTYPE_FLOAT16: return f16_to_float(uint16_t(u));
			case IBV_COLL_DTYPE_BFLOAT16: return bf16_to_float(uint16_t(u));
			case IBV_COLL_DTYPE_FLOAT32: return fbits(uint32_t(u));
			case IBV_COLL_DTYPE_FLOAT64: return std::bit_cast<double>(u);
			default:
				if (sgn)
					return double(int64_t(u << (64 - bits_n)) >> (64 - bits_n));
				return double(u);
			}
		};

		// Small integers: every value of [-8, 8] and nothing else.
		auto small = make_input(s, 1, 0, kInputSmallInt);
		std::set<int64_t> seen;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t u = 0;
			std::memcpy(&u, small.data() + i * sz, sz);
			double v = value_of(small, i);
			if (!is_float(dtype) && !sgn && v > 8) // unsigned: -k taken mod 2^bits
				v = -double((bits_n == 64 ? 0 : (uint64_t(1) << bits_n)) - u);
			ASSERT_EQ(v, std::trunc(v)) << "dtype " << dtype;
			ASSERT_GE(v, -8) << "dtype " << dtype;
			ASSERT_LE(v, 8) << "dtype " << dtype;
			seen.insert(int64_t(v));
		}
		EXPECT_EQ(seen.size(), 17u) << "dtype " << dtype;

		auto normal = make_input(s, 1, 0, kInputNormal);
		auto special = make_input(s, 1, 0, kInputSpecial);
		if (is_float(dtype)) {
			int pz = 0, nzero = 0, distinct_hint = 0;
			for (uint64_t i = 0; i < n; i++) {
				const double v = value_of(normal, i);
				ASSERT_TRUE(v >= -4 && v < 4)
					<< "dtype " << dtype << " value " << v;
				if (v == 0)
					(std::signbit(v) ? nzero : pz)++;
				if (i > 0 && v != value_of(normal, i - 1))
					distinct_hint++;
			}
			EXPECT_GT(pz, 0) << "dtype " << dtype;
			EXPECT_GT(nzero, 0) << "dtype " << dtype;
			EXPECT_GT(distinct_hint, int(n / 2)) << "dtype " << dtype;

			int nan = 0, pinf = 0, ninf = 0, den = 0, big = 0, npz = 0, nnz = 0;
			const double maxf = dtype == IBV_COLL_DTYPE_FLOAT16 ? 65504.0
					    : dtype == IBV_COLL_DTYPE_BFLOAT16
						    ? double(fbits(0x7f7f0000))
					    : dtype == IBV_COLL_DTYPE_FLOAT32
						    ? double(std::numeric_limits<float>::max())
						    : std::numeric_limits<double>::max();
			const double minn = dtype == IBV_COLL_DTYPE_FLOAT16 ? std::ldexp(1.0, -14)
					    : dtype == IBV_COLL_DTYPE_FLOAT64
						    ? std::ldexp(1.0, -1022)
						    : std::ldexp(1.0, -126);
			for (uint64_t i = 0; i < n; i++) {
				const double v = value_of(special, i);
				if (std::isnan(v))
					nan++;
				else if (v == INFINITY)
					pinf++;
				else if (v == -INFINITY)
					ninf++;
				else if (v == 0)
					(std::signbit(v) ? nnz : npz)++;
				else if (std::fabs(v) < minn)
					den++;
				else if (std::fabs(v) == maxf)
					big++;
			}
			EXPECT_GT(nan, 0) << "dtype " << dtype;
			EXPECT_GT(pinf, 0) << "dtype " << dtype;
			EXPECT_GT(ninf, 0) << "dtype " << dtype;
			EXPECT_GT(den, 0) << "dtype " << dtype;
			EXPECT_GT(big, 0) << "dtype " << dtype;
			EXPECT_GT(npz, 0) << "dtype " << dtype;
			EXPECT_GT(nnz, 0) << "dtype " << dtype;
		} else {
			const double lo = sgn ? -std::ldexp(1.0, int(bits_n) - 1) : 0;
			const double hi = sgn ? std::ldexp(1.0, int(bits_n) - 1) - 1
					      : std::ldexp(1.0, int(bits_n)) - 1;
			int mins = 0, maxs = 0, zeros = 0, ones = 0, neg1 = 0;
			for (uint64_t i = 0; i < n; i++) {
				const double v = value_of(special, i);
				uint64_t u = 0;
				std::memcpy(&u, special.data() + i * sz, sz);
				mins += v == lo;
				maxs += v == hi;
				zeros += v == 0;
				ones += v == 1;
				neg1 += u == (bits_n == 64 ? ~0ull : (uint64_t(1) << bits_n) - 1);
			}
			EXPECT_GT(mins, 0) << "dtype " << dtype;
			EXPECT_GT(maxs, 0) << "dtype " << dtype;
			EXPECT_GT(zeros, 0) << "dtype " << dtype;
			EXPECT_GT(ones, 0) << "dtype " << dtype;
			EXPECT_GT(neg1, 0) << "dtype " << dtype;
			// Normal mode covers the range: both halves of it occur.
			int low_half = 0;
			for (uint64_t i = 0; i < n; i++)
				low_half += value_of(normal, i) < (lo + hi) / 2;
			EXPECT_GT(low_half, int(n / 4)) << "dtype " << dtype;
			EXPECT_LT(low_half, int(3 * n / 4)) << "dtype " << dtype;
		}
	}
}

// expected_outputs, expected_output and expected_output_from agree, for
// every collective, valid (op, dtype) and mode; sizes match dst_elems.
TEST(CollRef, EntryPointsAgree)
{
	for (int coll : kAllColls)
		for (int dtype : kAllDtypes)
			for (int op = IBV_COLL_OP_SUM; op <= IBV_COLL_OP_BXOR; op++) {
				if (is_float(dtype) && op >= IBV_COLL_OP_BAND)
					continue;
				if (coll != IBV_COLL_WR_ALLREDUCE &&
				    coll != IBV_COLL_WR_REDUCE_SCATTER && op > 0)
					continue;
				for (int mode = 0; mode < 3; mode++) {
					CollSpec s = make_spec(coll, op, dtype, 17, {2, 1, 3}, 4);
					auto all = expected_outputs(s, 1234, mode);
					std::vector<std::vector<uint8_t>> srcs;
					for (uint32_t h = 0; h < 6; h++)
						srcs.push_back(make_input(s, 1234, h, mode));
					for (uint32_t g = 0; g < 6; g++) {
						auto one = expected_output(s, 1234, g, mode);
						const bool written = coll != IBV_COLL_WR_BARRIER &&
								     (coll != IBV_COLL_WR_REDUCE ||
								      g == s.root);
						EXPECT_EQ(one.size(),
							  written ? dst_elems(s) * dtype_size(dtype)
								  : 0);
						EXPECT_EQ(one, all[g]) << coll << " " << dtype
								       << " " << op << " " << g;
						EXPECT_EQ(one, expected_output_from(s, srcs, g));
					}
				}
			}
}
