// Independent reference for the collectives: input generation and the
// expected destination of every rank, written from the device's documented
// contract (fold order per node and round the ring, AVG, per-type
// arithmetic) as plain scalar loops.  Shares no code with the library or the
// emulator; <ibv_coll/ibv_coll.h> is included for its enum values only.
//
// Invalid specifications (unknown collective, op or dtype, a bitwise op on a
// floating type, no nodes, a node without ranks, root out of range, unknown
// input mode, too few source buffers) throw std::invalid_argument.
#pragma once

#include <ibv_coll/ibv_coll.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ibvc_test {

struct CollSpec {
	int coll = IBV_COLL_WR_ALLREDUCE; // IBV_COLL_WR_* value
	int op = IBV_COLL_OP_SUM;	  // enum ibv_coll_op
	int dtype = IBV_COLL_DTYPE_INT32; // enum ibv_coll_dtype
	uint64_t count = 0;		  // per rank, as the WR's count
	uint32_t root = 0;		  // global rank (REDUCE, BCAST)
	std::vector<uint16_t> ranks;	  // ranks[j] = local ranks of node j; N = ranks.size()
	// Through aggregation switches instead of the ring: every element folds
	// the node partials in a tree.  leaf_of[j] = node j's leaf switch
	// (empty: one switch).  A leaf folds its nodes in node order; the
	// spine folds the leaves' partials in the order of each leaf's lowest
	// node.
	bool tree = false;
	std::vector<uint16_t> leaf_of;
	// Among the member NICs, an ALLREDUCE of at most this many bytes per
	// rank on two or more nodes folds pairwise (recursive doubling, see
	// coll_ref.cc) instead of round the ring: -1, IBV_COLL_EMU_XCHG_BYTES
	// as the device reads it (16384 when unset); 0: never (AUTO's members
	// that fell back from their switches run the ring).
	int64_t pairwise_max = -1;
	// Every node has one address (one host): with IBV_COLL_EMU_XCHG_BYTES
	// unset the device exchanges up to 65536 bytes per rank there, not
	// 16384 (CollEngine::xchg_most).
	bool one_host = false;
	// The path MTU: the exchange takes at most 64 pieces of it
	// (kXchgPiecesMost), a larger message goes round the ring.  0: no
	// such limit.
	uint32_t piece_bytes = 0;
	// A job given switches cuts ALLREDUCE's and REDUCE's chunks at whole
	// blocks of this many bytes (the path MTU, or the job's block length
	// if smaller): B blocks, chunk c = blocks [B*c/N, B*(c+1)/N).  This
	// matters where such a job runs round the ring (AUTO's fallback).  0:
	// near-equal chunks [c*L/N, (c+1)*L/N), as a job without switches.
	uint32_t block_bytes = 0;

	uint32_t total_ranks() const;		  // K = sum of ranks[]
	uint32_t first_rank(uint32_t node) const; // sum of ranks[] before node
};

// Bytes per element.
size_t dtype_size(int dtype);

// Whether the reference (and the device) take op on dtype: MAXLOC and
// MINLOC with the value-index pairs and only they, bitwise and logical ops
// on integer types only.
bool op_valid(int op, int dtype);

// Input modes for fill_input().
enum {
	// integers: uniformly random over the full range (sums and products wrap);
	// floats: uniform in [-4, 4), plus a few exact +0.0 and -0.0.
	kInputNormal = 0,
	// floats: quiet NaNs (either sign, random payload), +Inf, -Inf, -0.0, +0.0,
	// denormals, the largest finite value and the smallest normal (either sign),
	// mixed into normal-mode values; integers: the type's min, max, 0, -1 (all
	// ones) and 1 mixed into random values.
	kInputSpecial = 1,
	// integers in [-8, 8] (for unsigned types taken modulo 2^bits, so -1 is the
	// type's max); floats holding integers in [-8, 8], exact under any summation
	// order as long as |sum| stays below 2^(significand bits) (bf16: K <= 32,
	// fp16: K <= 256).
	kInputSmallInt = 2
};

// Source buffer contents of global rank g: `elems` elements from element 0.
// Element i depends only on (seed, g, i, mode, dtype), so a shorter fill is a
// prefix of a longer one.
void fill_input(const CollSpec &s, uint64_t seed, uint32_t g, void *buf, uint64_t elems, int mode);
// fill_input() of src_elems(s) elements into a new buffer.
std::vector<uint8_t> make_input(const CollSpec &s, uint64_t seed, uint32_t g, int mode);

// Elements in the source / destination buffer of any rank for this collective:
//   ALLREDUCE, REDUCE: count, count      BCAST: count, count
//   ALLGATHER: count, count*K             REDUCE_SCATTER: count*K, count
//   BARRIER: 0, 0
uint64_t src_elems(const CollSpec &s);
uint64_t dst_elems(const CollSpec &s);

// What global rank g's destination must hold after the collective
// (dst_elems(s) * dtype_size bytes), with every rank's source as fill_input()
// makes it.  For REDUCE at a rank other than the root, and for BARRIER, an
// empty vector: the destination is not written (check it is untouched).
std::vector<uint8_t> expected_output(const CollSpec &s, uint64_t seed, uint32_t g, int mode);
// expected_output() for every rank g = 0..K-1 at once (the reduction is
// computed once, so this is K times cheaper than K separate calls).
std::vector<std::vector<uint8_t>> expected_outputs(const CollSpec &s, uint64_t seed, int mode);
// The same from explicit sources: srcs[h] is global rank h's source buffer,
// at least src_elems(s) elements, for every h = 0..K-1 (BCAST reads only the
// root's; BARRIER none).
std::vector<uint8_t> expected_output_from(const CollSpec &s,
					  const std::vector<std::vector<uint8_t>> &srcs,
					  uint32_t g);

// Index of the first element that differs, or -1.  Bytes must be equal,
// except that for floating types any NaN matches any NaN.
int64_t first_mismatch(const CollSpec &s, const void *got, const void *want, uint64_t elems);

// Element `index` of a buffer of s.dtype, for failure messages: its value
// and its bits in hex, e.g. "-1.5 (0xbe00)".
std::string format_elem(int dtype, const void *buf, uint64_t index);

// The reference's own fp16 (IEEE binary16) and bfloat16 conversions.
// To float: exact.  From float: round to nearest, ties to even; overflow
// gives Inf of the same sign; NaN gives a quiet NaN of the same sign.
float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

} // namespace ibvc_test
