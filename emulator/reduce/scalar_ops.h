// Scalar reduction semantics, shared by every kernel translation unit.
//
// This is the single definition of what each (op, dtype) computes: the scalar kernels are built from it and the
// SIMD kernels use it for their tails, so a SIMD path can only differ from scalar inside its vector body.
//
// Everything below has internal linkage on purpose. This header is compiled into TUs built with different -m
// flags; an inline function with external linkage (or a std:: helper that is not inlined, e.g. at -O0) would be
// emitted as a COMDAT in each of them and the linker may keep the AVX2/AVX-512 copy for the scalar path, which
// then faults with SIGILL on older CPUs. For the same reason only compiler builtins are used here, no std::
// function templates.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "reduce/reduce.h"
#include "reduce/reduce_detail.h"

// x87 excess precision would change float results relative to the SIMD paths.
static_assert(FLT_EVAL_METHOD == 0,
	      "reduce kernels need float arithmetic without excess precision (SSE)");

namespace ibv_coll::emu::detail {
namespace {

inline uint32_t bits_of(float f)
{
	return __builtin_bit_cast(uint32_t, f);
}
inline uint64_t bits_of(double d)
{
	return __builtin_bit_cast(uint64_t, d);
}
inline float float_from_bits(uint32_t u)
{
	return __builtin_bit_cast(float, u);
}
inline double double_from_bits(uint64_t u)
{
	return __builtin_bit_cast(double, u);
}

// ---- fp16 / bf16 conversions (bit manipulation, exact, round-to-nearest-even) ----
//
// NaN handling mirrors F16C (vcvtph2ps/vcvtps2ph): the quiet bit is set and the top payload bits are kept, so the
// scalar and SIMD paths agree even on NaN bits where only conversions are involved.

inline float half_bits_to_float(uint16_t h)
{
	const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
	const uint32_t exp = (h >> 10) & 0x1Fu;
	const uint32_t mant = h & 0x3FFu;
	if (exp == 0x1F) // Inf / NaN
		return float_from_bits(sign | 0x7F800000u |
				       (mant ? (0x00400000u | (mant << 13)) : 0u));
	if (exp == 0) {
		if (mant == 0)
			return float_from_bits(sign);
		// Denormal: value = mant * 2^-24; renormalise so the leading 1 becomes the implicit bit.
		const int top = 31 - __builtin_clz(mant); // 0..9
		const uint32_t fexp = static_cast<uint32_t>(top - 24 + 127);
		const uint32_t fmant = (mant << (23 - top)) & 0x7FFFFFu;
		return float_from_bits(sign | (fexp << 23) | fmant);
	}
	return float_from_bits(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

inline uint16_t float_to_half_bits(float f)
{
	const uint32_t x = bits_of(f);
	const uint32_t sign = (x >> 16) & 0x8000u;
	const uint32_t ax = x & 0x7FFFFFFFu;
	if (ax > 0x7F800000u) // NaN: quiet it, keep the top 9 payload bits
		return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
	// 65520 = halfway between the largest half (65504) and 2^16; the tie rounds to the even side, i.e. overflows.
	if (ax >= 0x477FF000u)
		return static_cast<uint16_t>(sign | 0x7C00u);
	if (ax < 0x38800000u) { // below 2^-14: half denormal (or zero)
		if (ax <=
		    0x33000000u) // <= 2^-25, at most half of the smallest denormal: rounds (tie: to even) to 0
			return static_cast<uint16_t>(sign);
		// value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e), rounded to nearest even.
		const uint32_t e = ax >> 23;
		const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
		const uint32_t shift = 126 - e; // 14..24
		uint32_t q = m >> shift;
		const uint32_t rem = m & ((1u << shift) - 1);
		const uint32_t halfway = 1u << (shift - 1);
		if (rem > halfway || (rem == halfway && (q & 1u)))
			++q; // may carry into the exponent field, which is exactly the smallest normal
		return static_cast<uint16_t>(sign | q);
	}
	// Normal: rebias the exponent and round the 13 dropped mantissa bits; a mantissa carry correctly bumps the
	// exponent (overflow to Inf was excluded above).
	const uint32_t rebased = ax - ((127u - 15u) << 23);
	return static_cast<uint16_t>(sign | ((rebased + 0xFFFu + ((rebased >> 13) & 1u)) >> 13));
}

inline float bf16_bits_to_float(uint16_t h)
{
	uint32_t x = static_cast<uint32_t>(h) << 16;
	if ((x & 0x7FFFFFFFu) > 0x7F800000u)
		x |= 0x00400000u; // quiet a signalling NaN, like every arithmetic path would
	return float_from_bits(x);
}

inline uint16_t float_to_bf16_bits(float f)
{
	const uint32_t x = bits_of(f);
	if ((x & 0x7FFFFFFFu) > 0x7F800000u)
		return static_cast<uint16_t>((x >> 16) | 0x0040u);
	// Integer RNE on the low 16 bits. Also exact for denormals (unlike VCVTNEPS2BF16, which flushes them) and
	// overflows to Inf through the carry. Cannot wrap: the largest non-NaN magnitude is Inf (0x7F800000).
	return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// ---- dtype traits ----

template <Dtype D> struct DtypeTraits;
template <> struct DtypeTraits<Dtype::int8> {
	using S = int8_t;
};
template <> struct DtypeTraits<Dtype::int16> {
	using S = int16_t;
};
template <> struct DtypeTraits<Dtype::int32> {
	using S = int32_t;
};
template <> struct DtypeTraits<Dtype::int64> {
	using S = int64_t;
};
template <> struct DtypeTraits<Dtype::uint8> {
	using S = uint8_t;
};
template <> struct DtypeTraits<Dtype::uint16> {
	using S = uint16_t;
};
template <> struct DtypeTraits<Dtype::uint32> {
	using S = uint32_t;
};
template <> struct DtypeTraits<Dtype::uint64> {
	using S = uint64_t;
};
template <> struct DtypeTraits<Dtype::float16> {
	using S = uint16_t;
}; // raw IEEE binary16 bits
template <> struct DtypeTraits<Dtype::bfloat16> {
	using S = uint16_t;
}; // raw bfloat16 bits
template <> struct DtypeTraits<Dtype::float32> {
	using S = float;
};
template <> struct DtypeTraits<Dtype::float64> {
	using S = double;
};

// The value-index pairs: the C struct MPI's pair types describe.
template <class V> struct LocPair {
	V v;
	int32_t k;
};
static_assert(sizeof(LocPair<float>) == 8 && sizeof(LocPair<double>) == 16 &&
		      sizeof(LocPair<int64_t>) == 16 && sizeof(LocPair<int32_t>) == 8 &&
		      sizeof(LocPair<int16_t>) == 8,
	      "pair layouts are part of the ABI");
template <> struct DtypeTraits<Dtype::float32_int32> {
	using S = LocPair<float>;
};
template <> struct DtypeTraits<Dtype::float64_int32> {
	using S = LocPair<double>;
};
template <> struct DtypeTraits<Dtype::int64_int32> {
	using S = LocPair<int64_t>;
};
template <> struct DtypeTraits<Dtype::int32_int32> {
	using S = LocPair<int32_t>;
};
template <> struct DtypeTraits<Dtype::int16_int32> {
	using S = LocPair<int16_t>;
};

// Storage type of one element.
template <Dtype D> using storage_t = typename DtypeTraits<D>::S;

template <Dtype D> constexpr bool kIsHalfLike = D == Dtype::float16 || D == Dtype::bfloat16;
template <Dtype D>
constexpr bool kIsInteger = static_cast<unsigned>(D) <= static_cast<unsigned>(Dtype::uint64);

constexpr bool is_bitwise(RedOp op)
{
	return op == RedOp::band || op == RedOp::bor || op == RedOp::bxor;
}
constexpr bool is_logical(RedOp op)
{
	return op == RedOp::land || op == RedOp::lor || op == RedOp::lxor;
}
constexpr bool is_loc(RedOp op)
{
	return op == RedOp::maxloc || op == RedOp::minloc;
}
constexpr bool is_pair(Dtype d)
{
	return static_cast<unsigned>(d) >= static_cast<unsigned>(Dtype::float32_int32) &&
	       static_cast<unsigned>(d) < kNumDtypes;
}

constexpr bool supported(RedOp op, Dtype d)
{
	if (static_cast<unsigned>(op) >= kNumRedOps || static_cast<unsigned>(d) >= kNumDtypes)
		return false;
	if (is_loc(op) || is_pair(d))
		return is_loc(op) && is_pair(d);
	return !(is_bitwise(op) || is_logical(op)) ||
	       static_cast<unsigned>(d) <= static_cast<unsigned>(Dtype::uint64);
}

// ---- scalar operations ----

// min/max for float/double: a NaN a wins, then a NaN b; equal operands can only differ in the sign of zero, and
// OR/AND of the bit patterns then yields -0 for min and +0 for max independent of operand order.
template <bool kMin, class F> inline F float_minmax(F a, F b)
{
	if (a != a)
		return a;
	if (b != b)
		return b;
	if (a < b)
		return kMin ? a : b;
	if (b < a)
		return kMin ? b : a;
	if constexpr (sizeof(F) == 4)
		return float_from_bits(kMin ? (bits_of(a) | bits_of(b))
					    : (bits_of(a) & bits_of(b)));
	else
		return double_from_bits(kMin ? (bits_of(a) | bits_of(b))
					     : (bits_of(a) & bits_of(b)));
}

template <RedOp Op, class F> inline F float_op(F a, F b)
{
	if constexpr (Op == RedOp::sum || Op == RedOp::avg)
		return a + b;
	else if constexpr (Op == RedOp::prod)
		return a * b;
	else if constexpr (Op == RedOp::min)
		return float_minmax<true>(a, b);
	else
		return float_minmax<false>(a, b);
}

template <RedOp Op, class T> inline T int_op(T a, T b)
{
	// Wrapping arithmetic in an unsigned type at least as wide as unsigned int: narrower types would promote to
	// (signed) int, where e.g. 65535 * 65535 overflows, which is UB.
	using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
				     std::make_unsigned_t<T>>;
	if constexpr (Op == RedOp::sum || Op == RedOp::avg)
		return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
	else if constexpr (Op == RedOp::prod)
		return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
	else if constexpr (Op == RedOp::min)
		return b < a ? b : a;
	else if constexpr (Op == RedOp::max)
		return a < b ? b : a;
	else if constexpr (Op == RedOp::band)
		return static_cast<T>(a & b);
	else if constexpr (Op == RedOp::bor)
		return static_cast<T>(a | b);
	else if constexpr (Op == RedOp::bxor)
		return static_cast<T>(a ^ b);
	else if constexpr (Op == RedOp::land)
		return static_cast<T>(a != 0 && b != 0);
	else if constexpr (Op == RedOp::lor)
		return static_cast<T>(a != 0 || b != 0);
	else
		return static_cast<T>((a != 0) != (b != 0));
}

// How the value of a beats that of b for maxloc (kMin false) or minloc: 1 a wins, -1 b wins, 0 a tie. A NaN
// beats every number and ties with another NaN; -0.0 is below +0.0.
template <bool kMin, class V> inline int loc_value_cmp(V a, V b)
{
	if constexpr (std::is_floating_point_v<V>) {
		const bool na = a != a, nb = b != b;
		if (na || nb)
			return na && nb ? 0 : (na ? 1 : -1);
		if (a == b) {
			// Equal numbers differ in bits only as -0.0 and +0.0.
			const bool sa = __builtin_signbit(a) != 0, sb = __builtin_signbit(b) != 0;
			if (sa == sb)
				return 0;
			return (sa == kMin) ? 1 : -1;
		}
	} else if (a == b) {
		return 0;
	}
	return (a < b) == kMin ? 1 : -1;
}

// The winner of a and b (the result is written field by field: its padding is zero).
template <bool kMin, class P> inline const P &loc_op(const P &a, const P &b)
{
	int c = loc_value_cmp<kMin>(a.v, b.v);
	if (c == 0)
		c = b.k < a.k ? -1 : 1;
	return c > 0 ? a : b;
}

template <Dtype D, RedOp Op> inline storage_t<D> scalar_op(storage_t<D> a, storage_t<D> b)
{
	if constexpr (D == Dtype::float16)
		return float_to_half_bits(
			float_op<Op>(half_bits_to_float(a), half_bits_to_float(b)));
	else if constexpr (D == Dtype::bfloat16)
		return float_to_bf16_bits(
			float_op<Op>(bf16_bits_to_float(a), bf16_bits_to_float(b)));
	else if constexpr (D == Dtype::float32 || D == Dtype::float64)
		return float_op<Op>(a, b);
	else
		return int_op<Op>(a, b);
}

// Element-wise loop (the scalar ISA, and the tails of the vector kernels).
template <Dtype D, RedOp Op>
inline void scalar_loop(storage_t<D> *dst, const storage_t<D> *a, const storage_t<D> *b,
			size_t count)
{
	// Loads and stores through memcpy: buffers from the application (an
	// RDMA buffer may start at any byte) need not be element aligned, and
	// for aligned ones the compiler emits the same plain moves.  Each
	// element is read before it is written, so exact aliasing is fine.
	using S = storage_t<D>;
	auto *d = reinterpret_cast<unsigned char *>(dst);
	auto *x = reinterpret_cast<const unsigned char *>(a);
	auto *y = reinterpret_cast<const unsigned char *>(b);
	if constexpr (is_pair(D)) {
		for (size_t i = 0; i < count; ++i) {
			S u, v;
			std::memcpy(&u, x + i * sizeof(S), sizeof(S));
			std::memcpy(&v, y + i * sizeof(S), sizeof(S));
			const S &w = loc_op<Op == RedOp::minloc>(u, v);
			unsigned char *e = d + i * sizeof(S);
			__builtin_memset(e, 0, sizeof(S));
			std::memcpy(e, &w.v, sizeof(w.v));
			std::memcpy(e + offsetof(S, k), &w.k, sizeof(w.k));
		}
	} else {
		for (size_t i = 0; i < count; ++i) {
			S u, v;
			std::memcpy(&u, x + i * sizeof(S), sizeof(S));
			std::memcpy(&v, y + i * sizeof(S), sizeof(S));
			const S r = scalar_op<D, Op>(u, v);
			std::memcpy(d + i * sizeof(S), &r, sizeof(S));
		}
	}
}

template <Dtype D, RedOp Op> struct ScalarKernel {
	static void run(void *dst, const void *a, const void *b, size_t count)
	{
		scalar_loop<D, Op>(static_cast<storage_t<D> *>(dst),
				   static_cast<const storage_t<D> *>(a),
				   static_cast<const storage_t<D> *>(b), count);
	}
};

// ---- table construction ----
// K<D, Op>::run is the kernel for (D, Op); instantiated only for supported pairs.

// The pairs and the logical ops have only the scalar kernel (they are rare, and compare-heavy).
template <template <Dtype, RedOp> class K, RedOp Op, Dtype D> constexpr ReduceFn table_entry()
{
	if constexpr (supported(Op, D) && (is_pair(D) || is_logical(Op)))
		return &ScalarKernel<D, Op>::run;
	else if constexpr (supported(Op, D))
		return &K<D, Op>::run;
	else
		return nullptr;
}

template <template <Dtype, RedOp> class K, size_t... I>
constexpr KernelTable make_table_impl(std::index_sequence<I...>)
{
	KernelTable t{};
	((t.fn[I / kNumDtypes][I % kNumDtypes] = table_entry<K, static_cast<RedOp>(I / kNumDtypes),
							     static_cast<Dtype>(I % kNumDtypes)>()),
	 ...);
	return t;
}

template <template <Dtype, RedOp> class K> constexpr KernelTable make_table()
{
	return make_table_impl<K>(std::make_index_sequence<kNumRedOps * kNumDtypes>{});
}

} // namespace
} // namespace ibv_coll::emu::detail
