// Independent reference for the collectives (see coll_ref.h).  Everything
// here is written from the documented contract:
//   - node j's partial P_j folds its ranks' elements in local rank order;
//   - ALLREDUCE/REDUCE: chunk c = [c*L/N, (c+1)*L/N) (a job given
//     switches: B*c/N whole blocks on) folds P_c, P_c+1, ... round the ring; REDUCE_SCATTER: node j's chunk folds P_j+1, ..., P_j;
//   - through switches (CollSpec::tree): every element folds the node
//     partials leaf by leaf in node order, then the leaves' partials in
//     the order of their lowest node;
//   - an ALLREDUCE of at most IBV_COLL_EMU_XCHG_BYTES per rank among
//     member NICs (no switch) folds pairwise: with p the largest power of
//     two <= N and r = N - p, the p values are P_2i op P_2i+1 for i < r,
//     then P_2r .. P_N-1; then, while more than one is left, each
//     neighbouring two fold into one, the lower first;
//   - AVG is SUM in that order, divided by K once at the end;
//   - float32/float64: one IEEE operation per step; fp16/bf16: exact
//     conversion to float, the float operation, round to nearest even back.
// Build with -ffp-contract=off (the project does so globally).
#include "coll_ref.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

// Each floating operation below must be a single IEEE operation in the
// type's own precision: no excess precision (x87).
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "coll_ref.cc needs FLT_EVAL_METHOD == 0 (SSE arithmetic)"
#endif

namespace ibvc_test {

namespace {

[[noreturn]] void invalid(const char *what)
{
	throw std::invalid_argument(std::string("coll_ref: ") + what);
}

bool is_float_dtype(int dtype)
{
	return dtype >= IBV_COLL_DTYPE_FLOAT16 && dtype <= IBV_COLL_DTYPE_FLOAT64;
}

bool is_signed_int(int dtype)
{
	return dtype >= IBV_COLL_DTYPE_INT8 && dtype <= IBV_COLL_DTYPE_INT64;
}

// The value-index pairs (MAXLOC/MINLOC): { value; int32_t index; } with
// the C padding.
bool is_pair_dtype(int dtype)
{
	return dtype >= IBV_COLL_DTYPE_FLOAT32_INT32 && dtype <= IBV_COLL_DTYPE_INT16_INT32;
}
int pair_value_dtype(int dtype)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_FLOAT32_INT32: return IBV_COLL_DTYPE_FLOAT32;
	case IBV_COLL_DTYPE_FLOAT64_INT32: return IBV_COLL_DTYPE_FLOAT64;
	case IBV_COLL_DTYPE_INT64_INT32: return IBV_COLL_DTYPE_INT64;
	case IBV_COLL_DTYPE_INT32_INT32: return IBV_COLL_DTYPE_INT32;
	default: return IBV_COLL_DTYPE_INT16;
	}
}
// Where a pair's index lies: after the value, at int32_t alignment.
size_t pair_index_at(int dtype)
{
	return std::max<size_t>(dtype_size(pair_value_dtype(dtype)), 4);
}
bool is_loc_op(int op)
{
	return op == IBV_COLL_OP_MAXLOC || op == IBV_COLL_OP_MINLOC;
}

bool is_reduction(int coll)
{
	return coll == IBV_COLL_WR_ALLREDUCE || coll == IBV_COLL_WR_REDUCE ||
	       coll == IBV_COLL_WR_REDUCE_SCATTER;
}

// ---------------------------------------------------------------------------
// fp16 / bf16 <-> float.  A narrow format has `mbits` stored significand
// bits and `ebits` exponent bits with bias 2^(ebits-1) - 1.

float narrow_to_float(uint16_t h, int mbits, int ebits)
{
	const uint32_t sign = (h >> (mbits + ebits)) & 1u;
	const uint32_t emax_field = (1u << ebits) - 1;
	const uint32_t E = (h >> mbits) & emax_field;
	const uint32_t F = h & ((1u << mbits) - 1);
	const int bias = (1 << (ebits - 1)) - 1;
	if (E == emax_field) {
		// Inf, or a NaN whose payload moves to the top of float's.
		uint32_t bits = (sign << 31) | 0x7f800000u;
		if (F != 0)
			bits |= 0x00400000u | (F << (23 - mbits));
		return std::bit_cast<float>(bits);
	}
	// Every narrow value is representable in float: ldexp is exact here.
	float mag;
	if (E == 0)
		mag = std::ldexp(static_cast<float>(F), 1 - bias - mbits);
	else
		mag = std::ldexp(static_cast<float>(F | (1u << mbits)),
				 static_cast<int>(E) - bias - mbits);
	return sign ? -mag : mag;
}

uint16_t float_to_narrow(float f, int mbits, int ebits)
{
	const uint32_t u = std::bit_cast<uint32_t>(f);
	const uint32_t sign = (u >> 31) << (mbits + ebits);
	const uint32_t E = (u >> 23) & 0xffu;
	const uint32_t F = u & 0x7fffffu;
	const uint32_t emax_field = (1u << ebits) - 1;
	const uint32_t inf = sign | (emax_field << mbits);
	if (E == 0xff) {
		if (F == 0)
			return static_cast<uint16_t>(inf);
		// Quiet NaN, keeping the sign and the payload's top bits.
		return static_cast<uint16_t>(inf | (1u << (mbits - 1)) | (F >> (23 - mbits)));
	}
	if (E == 0 && F == 0)
		return static_cast<uint16_t>(sign);

	// |f| = m * 2^e exactly, m an integer.
	const uint64_t m = E == 0 ? F : (F | 0x800000u);
	const int e = E == 0 ? -149 : static_cast<int>(E) - 150;
	const int bias = (1 << (ebits - 1)) - 1;
	const int x = e + static_cast<int>(std::bit_width(m)) - 1; // floor(log2 |f|)
	const int emin = 1 - bias;
	// Exponent of the unit in the last place of the result: the target's
	// significand spans [2^x, 2^(x+1)), or the denormal range below 2^emin.
	int ulp = std::max(x, emin) - mbits;
	const int shift = ulp - e;
	uint64_t q; // the result's significand, in units of 2^ulp
	if (shift <= 0) {
		q = m << -shift;
	} else if (shift > 40) {
		q = 0; // m < 2^24 is far below half a unit
	} else {
		q = m >> shift;
		const uint64_t rem = m & ((uint64_t(1) << shift) - 1);
		const uint64_t half = uint64_t(1) << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
	}
	if (q >> (mbits + 1)) { // rounding carried into the next binade
		q >>= 1;
		ulp++;
	}
	if (q < (uint64_t(1) << mbits)) // denormal (or zero): exponent field 0
		return static_cast<uint16_t>(sign | q);
	const int field = ulp + mbits + bias;
	if (field >= static_cast<int>(emax_field))
		return static_cast<uint16_t>(inf);
	return static_cast<uint16_t>(sign | (static_cast<uint32_t>(field) << mbits) |
				     static_cast<uint32_t>(q - (uint64_t(1) << mbits)));
}

// ---------------------------------------------------------------------------
// Elements as raw bits in a uint64_t (low dtype_size bytes).

uint64_t load_elem(const void *buf, uint64_t i, size_t size)
{
	const auto *p = static_cast<const uint8_t *>(buf) + i * size;
	switch (size) {
	case 1: return *p;
	case 2: {
		uint16_t v;
		std::memcpy(&v, p, 2);
		return v;
	}
	case 4: {
		uint32_t v;
		std::memcpy(&v, p, 4);
		return v;
	}
	default: {
		uint64_t v;
		std::memcpy(&v, p, 8);
		return v;
	}
	}
}

void store_elem(void *buf, uint64_t i, size_t size, uint64_t bits)
{
	auto *p = static_cast<uint8_t *>(buf) + i * size;
	switch (size) {
	case 1: *p = static_cast<uint8_t>(bits); break;
	case 2: {
		uint16_t v = static_cast<uint16_t>(bits);
		std::memcpy(p, &v, 2);
		break;
	}
	case 4: {
		uint32_t v = static_cast<uint32_t>(bits);
		std::memcpy(p, &v, 4);
		break;
	}
	default: std::memcpy(p, &bits, 8); break;
	}
}

// A floating element as float/double (fp16/bf16 exactly widened to float).
float as_f32(int dtype, uint64_t bits)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_FLOAT16: return f16_to_float(static_cast<uint16_t>(bits));
	case IBV_COLL_DTYPE_BFLOAT16: return bf16_to_float(static_cast<uint16_t>(bits));
	default: return std::bit_cast<float>(static_cast<uint32_t>(bits));
	}
}

uint64_t from_f32(int dtype, float v)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_FLOAT16: return float_to_f16(v);
	case IBV_COLL_DTYPE_BFLOAT16: return float_to_bf16(v);
	default: return std::bit_cast<uint32_t>(v);
	}
}

bool is_nan_bits(int dtype, uint64_t bits)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_FLOAT16: return (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0;
	case IBV_COLL_DTYPE_BFLOAT16: return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0;
	case IBV_COLL_DTYPE_FLOAT32:
		return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
	case IBV_COLL_DTYPE_FLOAT64:
		return (bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull &&
		       (bits & 0x000fffffffffffffull) != 0;
	default: return false;
	}
}

// MIN/MAX rule: a NaN a wins, else a NaN b, else the smaller/larger with
// -0 ordered below +0.  True when the result is b.
template <typename F> bool minmax_picks_b(F a, F b, bool is_max)
{
	if (std::isnan(a))
		return false;
	if (std::isnan(b))
		return true;
	if (a == b) {
		if (a == 0 && std::signbit(a) != std::signbit(b)) {
			// min wants the -0, max the +0.
			return is_max ? std::signbit(a) : std::signbit(b);
		}
		return false;
	}
	return is_max ? b > a : b < a;
}

} // namespace

bool op_valid(int op, int dtype)
{
	if (op < IBV_COLL_OP_SUM || op > IBV_COLL_OP_LXOR || is_loc_op(op) != is_pair_dtype(dtype))
		return false;
	return !is_float_dtype(dtype) || op < IBV_COLL_OP_BAND;
}

namespace {

// op(a, b) on raw bits, a being the accumulator.  AVG folds as SUM.
class Arith {
public:
	Arith(int op, int dtype) : op_(op == IBV_COLL_OP_AVG ? IBV_COLL_OP_SUM : op), dtype_(dtype)
	{
		// The pairs (16 bytes at most) are not computed here (reduce_pairs):
		// only their op is checked.
		const unsigned bits = std::min(static_cast<unsigned>(dtype_size(dtype)) * 8, 64u);
		mask_ = bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
		bits_ = bits;
		if (op < IBV_COLL_OP_SUM || op > IBV_COLL_OP_LXOR)
			invalid("unknown op");
		if (is_loc_op(op) != is_pair_dtype(dtype))
			invalid("MAXLOC/MINLOC go with the pair types, and only they");
		if (!op_valid(op, dtype))
			invalid("bitwise or logical op on a floating type");
	}

	uint64_t operator()(uint64_t a, uint64_t b) const
	{
		if (!is_float_dtype(dtype_))
			return int_op(a, b);
		if (dtype_ == IBV_COLL_DTYPE_FLOAT64)
			return f64_op(a, b);
		return float_op(a, b);
	}

private:
	int64_t sext(uint64_t v) const
	{
		return static_cast<int64_t>(v << (64 - bits_)) >> (64 - bits_);
	}

	uint64_t int_op(uint64_t a, uint64_t b) const
	{
		switch (op_) {
		case IBV_COLL_OP_SUM: return (a + b) & mask_;
		case IBV_COLL_OP_PROD: return (a * b) & mask_;
		case IBV_COLL_OP_MIN:
		case IBV_COLL_OP_MAX: {
			const bool b_less = is_signed_int(dtype_) ? sext(b) < sext(a) : b < a;
			const bool b_more = is_signed_int(dtype_) ? sext(b) > sext(a) : b > a;
			return (op_ == IBV_COLL_OP_MIN ? b_less : b_more) ? b : a;
		}
		case IBV_COLL_OP_BAND: return a & b;
		case IBV_COLL_OP_BOR: return a | b;
		case IBV_COLL_OP_LAND: return (a & mask_) != 0 && (b & mask_) != 0 ? 1 : 0;
		case IBV_COLL_OP_LOR: return (a & mask_) != 0 || (b & mask_) != 0 ? 1 : 0;
		case IBV_COLL_OP_LXOR: return ((a & mask_) != 0) != ((b & mask_) != 0) ? 1 : 0;
		default: return a ^ b;
		}
	}

	// float32, and fp16/bf16 through float.
	uint64_t float_op(uint64_t a, uint64_t b) const
	{
		const float fa = as_f32(dtype_, a);
		const float fb = as_f32(dtype_, b);
		switch (op_) {
		case IBV_COLL_OP_SUM: {
			const float r = fa + fb;
			return from_f32(dtype_, r);
		}
		case IBV_COLL_OP_PROD: {
			const float r = fa * fb;
			return from_f32(dtype_, r);
		}
		default:
			// The float rule picks an operand; its exact conversion round
			// trips, so the operand's own bits are the result.
			return minmax_picks_b(fa, fb, op_ == IBV_COLL_OP_MAX) ? b : a;
		}
	}

	uint64_t f64_op(uint64_t a, uint64_t b) const
	{
		const double da = std::bit_cast<double>(a);
		const double db = std::bit_cast<double>(b);
		switch (op_) {
		case IBV_COLL_OP_SUM: {
			const double r = da + db;
			return std::bit_cast<uint64_t>(r);
		}
		case IBV_COLL_OP_PROD: {
			const double r = da * db;
			return std::bit_cast<uint64_t>(r);
		}
		default: return minmax_picks_b(da, db, op_ == IBV_COLL_OP_MAX) ? b : a;
		}
	}

	int op_;
	int dtype_;
	uint64_t mask_;
	unsigned bits_;
};

// AVG's final step: the (wrapped / rounded) sum divided by K.
uint64_t avg_finish(int dtype, uint64_t sum, uint32_t K)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_INT8:
		return static_cast<uint8_t>(static_cast<int64_t>(static_cast<int8_t>(sum)) /
					    int64_t(K));
	case IBV_COLL_DTYPE_INT16:
		return static_cast<uint16_t>(static_cast<int64_t>(static_cast<int16_t>(sum)) /
					     int64_t(K));
	case IBV_COLL_DTYPE_INT32:
		return static_cast<uint32_t>(static_cast<int64_t>(static_cast<int32_t>(sum)) /
					     int64_t(K));
	case IBV_COLL_DTYPE_INT64:
		return static_cast<uint64_t>(static_cast<int64_t>(sum) / int64_t(K));
	case IBV_COLL_DTYPE_UINT8:
	case IBV_COLL_DTYPE_UINT16:
	case IBV_COLL_DTYPE_UINT32:
	case IBV_COLL_DTYPE_UINT64: return sum / K; // sum is already in [0, 2^bits)
	case IBV_COLL_DTYPE_FLOAT64: {
		const double r = std::bit_cast<double>(sum) / static_cast<double>(K);
		return std::bit_cast<uint64_t>(r);
	}
	default: { // float32, and fp16/bf16 divided in float then rounded once
		const float r = as_f32(dtype, sum) / static_cast<float>(K);
		return from_f32(dtype, r);
	}
	}
}

void check_spec(const CollSpec &s)
{
	(void)dtype_size(s.dtype);
	if (s.ranks.empty())
		invalid("no nodes");
	for (uint16_t k : s.ranks)
		if (k == 0)
			invalid("a node without ranks");
	switch (s.coll) {
	case IBV_COLL_WR_ALLREDUCE:
	case IBV_COLL_WR_REDUCE:
	case IBV_COLL_WR_BCAST:
	case IBV_COLL_WR_ALLGATHER:
	case IBV_COLL_WR_REDUCE_SCATTER:
	case IBV_COLL_WR_BARRIER: break;
	default: invalid("unknown collective");
	}
	if ((s.coll == IBV_COLL_WR_REDUCE || s.coll == IBV_COLL_WR_BCAST) &&
	    s.root >= s.total_ranks())
		invalid("root out of range");
	if (is_reduction(s.coll))
		(void)Arith(s.op, s.dtype); // validates op against dtype
}

void check_mode(int mode)
{
	if (mode < kInputNormal || mode > kInputSmallInt)
		invalid("unknown input mode");
}

// A pair's value as a double and its NaN-ness; its index.
struct PairView {
	double v;
	bool nan;
	int32_t k;
};
PairView pair_at(int dtype, const void *buf, uint64_t e)
{
	const size_t size = dtype_size(dtype);
	const auto *p = static_cast<const uint8_t *>(buf) + e * size;
	PairView r{};
	std::memcpy(&r.k, p + pair_index_at(dtype), 4);
	switch (pair_value_dtype(dtype)) {
	case IBV_COLL_DTYPE_FLOAT32: {
		float f;
		std::memcpy(&f, p, 4);
		r.v = f;
		break;
	}
	case IBV_COLL_DTYPE_FLOAT64: std::memcpy(&r.v, p, 8); break;
	case IBV_COLL_DTYPE_INT64: {
		int64_t i;
		std::memcpy(&i, p, 8);
		r.v = static_cast<double>(i); // inputs stay within 2^53: exact
		break;
	}
	case IBV_COLL_DTYPE_INT32: {
		int32_t i;
		std::memcpy(&i, p, 4);
		r.v = i;
		break;
	}
	default: {
		int16_t i;
		std::memcpy(&i, p, 2);
		r.v = i;
		break;
	}
	}
	r.nan = std::isnan(r.v);
	return r;
}

// MAXLOC/MINLOC over every rank, element by element, as MPI defines it
// (the best value, the lowest index among equal values) and the device
// documents what MPI leaves open (NaN beats every number and ties with
// NaN; -0.0 is below +0.0).  With the indices fill_input() gives (distinct
// across ranks) that is a total order, so no fold order is needed.  The
// winner's value and index, padding zero.
std::vector<uint8_t> reduce_pairs(const CollSpec &s, const std::vector<std::vector<uint8_t>> &srcs)
{
	const size_t size = dtype_size(s.dtype);
	const size_t vsize = dtype_size(pair_value_dtype(s.dtype));
	const uint32_t K = s.total_ranks();
	const uint64_t L = src_elems(s);
	const bool is_max = s.op == IBV_COLL_OP_MAXLOC;
	std::vector<uint8_t> out(L * size, 0);
	for (uint64_t e = 0; e < L; e++) {
		uint32_t best = 0;
		PairView b = pair_at(s.dtype, srcs[0].data(), e);
		for (uint32_t g = 1; g < K; g++) {
			const PairView c = pair_at(s.dtype, srcs[g].data(), e);
			bool better;
			if (c.nan || b.nan)
				better = c.nan && (!b.nan || c.k < b.k);
			else if (c.v != b.v)
				better = is_max ? c.v > b.v : c.v < b.v;
			else if (std::signbit(c.v) != std::signbit(b.v))
				better = is_max ? !std::signbit(c.v) : std::signbit(c.v);
			else
				better = c.k < b.k;
			if (better) {
				best = g;
				b = c;
			}
		}
		const uint8_t *w = srcs[best].data() + e * size;
		std::memcpy(out.data() + e * size, w, vsize);
		const size_t ki = pair_index_at(s.dtype);
		std::memcpy(out.data() + e * size + ki, w + ki, 4);
	}
	return out;
}

// Whether an ALLREDUCE runs as the member NICs' pairwise exchange.
bool folds_pairwise(const CollSpec &s)
{
	int64_t most = s.pairwise_max;
	if (most < 0) {
		const char *v = getenv("IBV_COLL_EMU_XCHG_BYTES");
		most = v && *v ? strtoll(v, nullptr, 10) : s.one_host ? 65536 : 16384;
	}
	const uint64_t bytes = s.count * dtype_size(s.dtype);
	return s.coll == IBV_COLL_WR_ALLREDUCE && s.ranks.size() >= 2 && most > 0 &&
	       bytes <= uint64_t(most) && (!s.piece_bytes || bytes <= 64ull * s.piece_bytes);
}

// The reduced vector every reduction's destinations are cut from: count
// elements for ALLREDUCE/REDUCE, K*count for REDUCE_SCATTER.
std::vector<uint8_t> reduce_all(const CollSpec &s, const std::vector<std::vector<uint8_t>> &srcs)
{
	const Arith op(s.op, s.dtype);
	const size_t size = dtype_size(s.dtype);
	const uint32_t N = static_cast<uint32_t>(s.ranks.size());
	const uint32_t K = s.total_ranks();
	const uint64_t L = src_elems(s);
	if (srcs.size() < K)
		invalid("a source buffer per rank is needed");
	for (uint32_t g = 0; g < K; g++)
		if (srcs[g].size() < L * size)
			invalid("source buffer too short");
	if (is_pair_dtype(s.dtype))
		return reduce_pairs(s, srcs);

	std::vector<uint32_t> first(N);
	for (uint32_t j = 0; j < N; j++)
		first[j] = s.first_rank(j);
	// P_j[e]: node j's ranks folded in local rank order.
	auto partial = [&](uint32_t j, uint64_t e) {
		uint64_t acc = load_elem(srcs[first[j]].data(), e, size);
		for (uint32_t r = 1; r < s.ranks[j]; r++)
			acc = op(acc, load_elem(srcs[first[j] + r].data(), e, size));
		return acc;
	};
	// The ring fold starting at node `start`: P_start, P_start+1, ... (mod N).
	auto ring = [&](uint32_t start, uint64_t e) {
		uint64_t acc = partial(start, e);
		for (uint32_t t = 1; t < N; t++)
			acc = op(acc, partial((start + t) % N, e));
		if (s.op == IBV_COLL_OP_AVG)
			acc = avg_finish(s.dtype, acc, K);
		return acc;
	};

	// The tree fold: each leaf's nodes in node order, then the leaves in
	// the order of their lowest node.
	auto tree = [&](uint64_t e) {
		std::vector<int> leaf_order; // leaves by lowest node
		std::vector<uint64_t> leaf_acc;
		std::vector<bool> leaf_seen;
		for (uint32_t j = 0; j < N; j++) {
			uint32_t l = s.leaf_of.empty() ? 0 : s.leaf_of.at(j);
			if (l >= leaf_seen.size()) {
				leaf_seen.resize(l + 1, false);
				leaf_acc.resize(l + 1, 0);
			}
			if (!leaf_seen[l]) {
				leaf_seen[l] = true;
				leaf_acc[l] = partial(j, e);
				leaf_order.push_back(int(l));
			} else {
				leaf_acc[l] = op(leaf_acc[l], partial(j, e));
			}
		}
		uint64_t acc = leaf_acc[size_t(leaf_order[0])];
		for (size_t i = 1; i < leaf_order.size(); i++)
			acc = op(acc, leaf_acc[size_t(leaf_order[i])]);
		if (s.op == IBV_COLL_OP_AVG)
			acc = avg_finish(s.dtype, acc, K);
		return acc;
	};

	// The pairwise fold (see the top of this file).
	auto pairwise = [&](uint64_t e) {
		uint32_t p = 1;
		while (p * 2 <= N)
			p *= 2;
		const uint32_t r = N - p;
		std::vector<uint64_t> v(p);
		for (uint32_t i = 0; i < p; i++)
			v[i] = i < r ? op(partial(2 * i, e), partial(2 * i + 1, e))
				     : partial(i + r, e);
		for (uint32_t n = p; n > 1; n /= 2)
			for (uint32_t i = 0; i < n / 2; i++)
				v[i] = op(v[2 * i], v[2 * i + 1]);
		uint64_t acc = v[0];
		if (s.op == IBV_COLL_OP_AVG)
			acc = avg_finish(s.dtype, acc, K);
		return acc;
	};

	std::vector<uint8_t> out(L * size);
	if (!s.tree && folds_pairwise(s)) {
		for (uint64_t e = 0; e < L; e++)
			store_elem(out.data(), e, size, pairwise(e));
	} else if (s.tree) {
		for (uint64_t e = 0; e < L; e++)
			store_elem(out.data(), e, size, tree(e));
	} else if (s.coll == IBV_COLL_WR_REDUCE_SCATTER) {
		for (uint32_t j = 0; j < N; j++) {
			const uint64_t lo = uint64_t(first[j]) * s.count;
			const uint64_t hi = uint64_t(first[j] + s.ranks[j]) * s.count;
			for (uint64_t e = lo; e < hi; e++)
				store_elem(out.data(), e, size, ring((j + 1) % N, e));
		}
	} else {
		// Chunk c's bounds: of whole blocks, or near-equal.
		const uint64_t be = std::max<uint64_t>(s.block_bytes / size, 1);
		const uint64_t B = (L + be - 1) / be;
		auto edge = [&](uint32_t c) {
			return s.block_bytes ? std::min<uint64_t>(L, B * c / N * be)
					     : uint64_t(c) * L / N;
		};
		for (uint32_t c = 0; c < N; c++) {
			const uint64_t lo = edge(c);
			const uint64_t hi = edge(c + 1);
			for (uint64_t e = lo; e < hi; e++)
				store_elem(out.data(), e, size, ring(c, e));
		}
	}
	return out;
}

// Global rank g's destination given the reduced vector (reductions only).
std::vector<uint8_t> cut_reduced(const CollSpec &s, const std::vector<uint8_t> &reduced, uint32_t g)
{
	const size_t size = dtype_size(s.dtype);
	if (s.coll == IBV_COLL_WR_REDUCE && g != s.root)
		return {};
	if (s.coll == IBV_COLL_WR_REDUCE_SCATTER) {
		const auto *p = reduced.data() + uint64_t(g) * s.count * size;
		return std::vector<uint8_t>(p, p + s.count * size);
	}
	return reduced;
}

// Data movement collectives.
std::vector<uint8_t> move_data(const CollSpec &s, const std::vector<std::vector<uint8_t>> &srcs)
{
	const size_t size = dtype_size(s.dtype);
	const uint32_t K = s.total_ranks();
	const uint64_t bytes = s.count * size;
	if (s.coll == IBV_COLL_WR_BCAST) {
		if (srcs.size() <= s.root || srcs[s.root].size() < bytes)
			invalid("the root's source buffer is needed");
		return std::vector<uint8_t>(srcs[s.root].begin(), srcs[s.root].begin() + bytes);
	}
	// ALLGATHER: every rank's source, in global rank order.
	if (srcs.size() < K)
		invalid("a source buffer per rank is needed");
	std::vector<uint8_t> out;
	out.reserve(bytes * K);
	for (uint32_t h = 0; h < K; h++) {
		if (srcs[h].size() < bytes)
			invalid("source buffer too short");
		out.insert(out.end(), srcs[h].begin(), srcs[h].begin() + bytes);
	}
	return out;
}

// ---------------------------------------------------------------------------
// Input generation.

uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// A float element holding `v`, which must be exactly representable.
uint64_t float_elem(int dtype, double v)
{
	if (dtype == IBV_COLL_DTYPE_FLOAT64)
		return std::bit_cast<uint64_t>(v);
	return from_f32(dtype, static_cast<float>(v));
}

struct FloatLayout {
	int mbits;	   // stored significand bits
	int ebits;	   // exponent bits
	unsigned sign_bit; // its index
};

FloatLayout layout_of(int dtype)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_FLOAT16: return {10, 5, 15};
	case IBV_COLL_DTYPE_BFLOAT16: return {7, 8, 15};
	case IBV_COLL_DTYPE_FLOAT32: return {23, 8, 31};
	default: return {52, 11, 63};
	}
}

// Uniform in [-4, 4) on a grid every value of which the type holds exactly:
// k * 2^-(p-2) with k in [-2^p, 2^p), p = significand bits.
uint64_t float_normal(int dtype, uint64_t h1, uint64_t h2)
{
	const FloatLayout l = layout_of(dtype);
	const uint64_t sign = uint64_t(1) << l.sign_bit;
	switch (h2 % 64) {
	case 0: return 0;    // +0
	case 1: return sign; // -0
	default: break;
	}
	const int p = l.mbits + 1;
	const int64_t k = static_cast<int64_t>(h1 >> (64 - (p + 1))) - (int64_t(1) << p);
	return float_elem(dtype, std::ldexp(static_cast<double>(k), -(p - 2)));
}

uint64_t float_special(int dtype, uint64_t h1, uint64_t h2)
{
	const FloatLayout l = layout_of(dtype);
	const uint64_t sign = ((h2 >> 40) & 1) << l.sign_bit;
	const uint64_t exp_all = ((uint64_t(1) << l.ebits) - 1) << l.mbits;
	const uint64_t mant = (uint64_t(1) << l.mbits) - 1;
	const uint64_t quiet = uint64_t(1) << (l.mbits - 1);
	const uint64_t inf = exp_all;
	switch ((h2 >> 8) % 16) {
	case 0: return sign | exp_all | quiet | (h1 & (quiet - 1)); // quiet NaN
	case 1: return inf;
	case 2: return (uint64_t(1) << l.sign_bit) | inf;
	case 3: return uint64_t(1) << l.sign_bit; // -0
	case 4: return 0;			  // +0
	case 5:
	case 6: { // denormal
		uint64_t m = h1 & mant;
		return sign | (m ? m : 1);
	}
	case 7:
	case 8: return sign | (inf - 1);		// largest finite
	case 9: return sign | (uint64_t(1) << l.mbits); // smallest normal
	default: return float_normal(dtype, h1, h2);
	}
}

uint64_t int_special(int dtype, uint64_t h1, uint64_t h2, uint64_t mask)
{
	const bool sgn = is_signed_int(dtype);
	switch ((h2 >> 8) % 10) {
	case 0: return sgn ? (mask >> 1) + 1 : 0; // min
	case 1: return sgn ? mask >> 1 : mask;	  // max
	case 2: return 0;
	case 3: return mask; // -1
	case 4: return 1;
	default: return h1 & mask;
	}
}

} // namespace

// ---------------------------------------------------------------------------

uint32_t CollSpec::total_ranks() const
{
	uint32_t k = 0;
	for (uint16_t r : ranks)
		k += r;
	return k;
}

uint32_t CollSpec::first_rank(uint32_t node) const
{
	if (node > ranks.size())
		invalid("node out of range");
	uint32_t k = 0;
	for (uint32_t j = 0; j < node; j++)
		k += ranks[j];
	return k;
}

size_t dtype_size(int dtype)
{
	switch (dtype) {
	case IBV_COLL_DTYPE_INT8:
	case IBV_COLL_DTYPE_UINT8: return 1;
	case IBV_COLL_DTYPE_INT16:
	case IBV_COLL_DTYPE_UINT16:
	case IBV_COLL_DTYPE_FLOAT16:
	case IBV_COLL_DTYPE_BFLOAT16: return 2;
	case IBV_COLL_DTYPE_INT32:
	case IBV_COLL_DTYPE_UINT32:
	case IBV_COLL_DTYPE_FLOAT32: return 4;
	case IBV_COLL_DTYPE_INT64:
	case IBV_COLL_DTYPE_UINT64:
	case IBV_COLL_DTYPE_FLOAT64: return 8;
	case IBV_COLL_DTYPE_FLOAT32_INT32:
	case IBV_COLL_DTYPE_INT32_INT32:
	case IBV_COLL_DTYPE_INT16_INT32: return 8;
	case IBV_COLL_DTYPE_FLOAT64_INT32:
	case IBV_COLL_DTYPE_INT64_INT32: return 16;
	default: invalid("unknown dtype");
	}
}

float f16_to_float(uint16_t h)
{
	return narrow_to_float(h, 10, 5);
}
uint16_t float_to_f16(float f)
{
	return float_to_narrow(f, 10, 5);
}
float bf16_to_float(uint16_t b)
{
	return narrow_to_float(b, 7, 8);
}
uint16_t float_to_bf16(float f)
{
	return float_to_narrow(f, 7, 8);
}

// Pairs: the value as its own type's input of the mode (small integers in
// every third element, so that equal values meet), the index distinct
// across ranks for each element: (g XOR a per-element mask) - 7, so the
// lowest index is not always the lowest rank.  Padding zero.
static void fill_pairs(const CollSpec &s, uint64_t seed, uint32_t g, void *buf, uint64_t elems,
		       int mode)
{
	const size_t size = dtype_size(s.dtype);
	CollSpec vs = s;
	vs.dtype = pair_value_dtype(s.dtype);
	const size_t vsize = dtype_size(vs.dtype);
	std::vector<uint8_t> vals(elems * vsize), small(elems * vsize);
	fill_input(vs, seed, g, vals.data(), elems, mode);
	fill_input(vs, seed, g, small.data(), elems, kInputSmallInt);
	auto *p = static_cast<uint8_t *>(buf);
	for (uint64_t i = 0; i < elems; i++) {
		const uint64_t h = mix64(seed ^ mix64(0x10c ^ i));
		uint8_t *e = p + i * size;
		std::memset(e, 0, size);
		std::memcpy(e, (h % 3 == 0 ? small : vals).data() + i * vsize, vsize);
		if (vs.dtype == IBV_COLL_DTYPE_INT64) { // keep within 2^53 (exact as a double)
			int64_t v;
			std::memcpy(&v, e, 8);
			v >>= 11;
			std::memcpy(e, &v, 8);
		}
		const int32_t k = static_cast<int32_t>(g ^ uint32_t((h >> 8) & 0x3f)) - 7;
		std::memcpy(e + pair_index_at(s.dtype), &k, 4);
	}
}

void fill_input(const CollSpec &s, uint64_t seed, uint32_t g, void *buf, uint64_t elems, int mode)
{
	const size_t size = dtype_size(s.dtype);
	check_mode(mode);
	if (is_pair_dtype(s.dtype))
		return fill_pairs(s, seed, g, buf, elems, mode);
	const uint64_t mask = size == 8 ? ~uint64_t(0) : (uint64_t(1) << (size * 8)) - 1;
	const bool fp = is_float_dtype(s.dtype);
	uint64_t base = mix64(seed ^ 0x6a09e667f3bcc908ull);
	base = mix64(base ^ g);
	base = mix64(base ^ (uint64_t(mode) << 8 | uint64_t(s.dtype)));
	for (uint64_t i = 0; i < elems; i++) {
		const uint64_t h1 = mix64(base ^ mix64(2 * i));
		const uint64_t h2 = mix64(base ^ mix64(2 * i + 1));
		uint64_t v;
		if (mode == kInputSmallInt) {
			const int64_t small = static_cast<int64_t>(h1 % 17) - 8;
			v = fp ? float_elem(s.dtype, static_cast<double>(small))
			       : static_cast<uint64_t>(small) & mask;
		} else if (mode == kInputSpecial) {
			v = fp ? float_special(s.dtype, h1, h2)
			       : int_special(s.dtype, h1, h2, mask);
		} else {
			v = fp ? float_normal(s.dtype, h1, h2) : h1 & mask;
		}
		store_elem(buf, i, size, v);
	}
}

std::vector<uint8_t> make_input(const CollSpec &s, uint64_t seed, uint32_t g, int mode)
{
	std::vector<uint8_t> buf(src_elems(s) * dtype_size(s.dtype));
	fill_input(s, seed, g, buf.data(), src_elems(s), mode);
	return buf;
}

uint64_t src_elems(const CollSpec &s)
{
	switch (s.coll) {
	case IBV_COLL_WR_ALLREDUCE:
	case IBV_COLL_WR_REDUCE:
	case IBV_COLL_WR_BCAST:
	case IBV_COLL_WR_ALLGATHER: return s.count;
	case IBV_COLL_WR_REDUCE_SCATTER: return s.count * s.total_ranks();
	case IBV_COLL_WR_BARRIER: return 0;
	default: invalid("unknown collective");
	}
}

uint64_t dst_elems(const CollSpec &s)
{
	switch (s.coll) {
	case IBV_COLL_WR_ALLREDUCE:
	case IBV_COLL_WR_REDUCE:
	case IBV_COLL_WR_BCAST:
	case IBV_COLL_WR_REDUCE_SCATTER: return s.count;
	case IBV_COLL_WR_ALLGATHER: return s.count * s.total_ranks();
	case IBV_COLL_WR_BARRIER: return 0;
	default: invalid("unknown collective");
	}
}

std::vector<uint8_t> expected_output_from(const CollSpec &s,
					  const std::vector<std::vector<uint8_t>> &srcs, uint32_t g)
{
	check_spec(s);
	if (g >= s.total_ranks())
		invalid("rank out of range");
	if (s.coll == IBV_COLL_WR_BARRIER || (s.coll == IBV_COLL_WR_REDUCE && g != s.root))
		return {};
	if (is_reduction(s.coll))
		return cut_reduced(s, reduce_all(s, srcs), g);
	return move_data(s, srcs);
}

std::vector<std::vector<uint8_t>> expected_outputs(const CollSpec &s, uint64_t seed, int mode)
{
	check_spec(s);
	check_mode(mode);
	const uint32_t K = s.total_ranks();
	std::vector<std::vector<uint8_t>> out(K);
	if (s.coll == IBV_COLL_WR_BARRIER)
		return out;
	std::vector<std::vector<uint8_t>> srcs(K);
	for (uint32_t h = 0; h < K; h++)
		if (s.coll != IBV_COLL_WR_BCAST || h == s.root)
			srcs[h] = make_input(s, seed, h, mode);
	if (is_reduction(s.coll)) {
		const std::vector<uint8_t> reduced = reduce_all(s, srcs);
		for (uint32_t g = 0; g < K; g++)
			out[g] = cut_reduced(s, reduced, g);
	} else {
		const std::vector<uint8_t> moved = move_data(s, srcs);
		for (uint32_t g = 0; g < K; g++)
			out[g] = moved;
	}
	return out;
}

std::vector<uint8_t> expected_output(const CollSpec &s, uint64_t seed, uint32_t g, int mode)
{
	check_spec(s);
	check_mode(mode);
	const uint32_t K = s.total_ranks();
	if (g >= K)
		invalid("rank out of range");
	if (s.coll == IBV_COLL_WR_BARRIER || (s.coll == IBV_COLL_WR_REDUCE && g != s.root))
		return {};
	std::vector<std::vector<uint8_t>> srcs(K);
	for (uint32_t h = 0; h < K; h++)
		if (s.coll != IBV_COLL_WR_BCAST || h == s.root)
			srcs[h] = make_input(s, seed, h, mode);
	return expected_output_from(s, srcs, g);
}

int64_t first_mismatch(const CollSpec &s, const void *got, const void *want, uint64_t elems)
{
	const size_t size = dtype_size(s.dtype);
	const bool fp = is_float_dtype(s.dtype);
	if (is_pair_dtype(s.dtype)) { // the winner's bits exactly, NaN payload and padding too
		for (uint64_t i = 0; i < elems; i++)
			if (std::memcmp(static_cast<const uint8_t *>(got) + i * size,
					static_cast<const uint8_t *>(want) + i * size, size) != 0)
				return static_cast<int64_t>(i);
		return -1;
	}
	for (uint64_t i = 0; i < elems; i++) {
		const uint64_t a = load_elem(got, i, size);
		const uint64_t b = load_elem(want, i, size);
		if (a == b)
			continue;
		if (fp && is_nan_bits(s.dtype, a) && is_nan_bits(s.dtype, b))
			continue;
		return static_cast<int64_t>(i);
	}
	return -1;
}

std::string format_elem(int dtype, const void *buf, uint64_t index)
{
	const size_t size = dtype_size(dtype);
	if (is_pair_dtype(dtype)) {
		const PairView v = pair_at(dtype, buf, index);
		uint64_t lo = 0;
		std::memcpy(&lo, static_cast<const uint8_t *>(buf) + index * size, 8);
		char out[96];
		std::snprintf(out, sizeof out, "(%.17g, %d) (0x%016" PRIx64 ")", v.v, v.k, lo);
		return out;
	}
	const uint64_t bits = load_elem(buf, index, size);
	const uint64_t mask = size == 8 ? ~uint64_t(0) : (uint64_t(1) << (size * 8)) - 1;
	char out[96];
	if (dtype == IBV_COLL_DTYPE_FLOAT64)
		std::snprintf(out, sizeof out, "%.17g (0x%016" PRIx64 ")",
			      std::bit_cast<double>(bits), bits);
	else if (is_float_dtype(dtype))
		std::snprintf(out, sizeof out, "%.9g (0x%0*" PRIx64 ")",
			      static_cast<double>(as_f32(dtype, bits)), static_cast<int>(size * 2),
			      bits);
	else if (is_signed_int(dtype))
		std::snprintf(out, sizeof out, "%" PRId64 " (0x%0*" PRIx64 ")",
			      static_cast<int64_t>(bits << (64 - size * 8)) >> (64 - size * 8),
			      static_cast<int>(size * 2), bits & mask);
	else
		std::snprintf(out, sizeof out, "%" PRIu64 " (0x%0*" PRIx64 ")", bits,
			      static_cast<int>(size * 2), bits);
	return out;
}

} // namespace ibvc_test
