// ISA-independent skeleton of the SIMD kernels.
//
// Each SIMD translation unit defines an `Isa` traits struct (vector loads/stores and the per-lane primitives, see
// kernels_avx2.cc) and instantiates SimdKernel with it. Keeping loop structure, tail handling and the float
// min/max rule here means the AVX2 and AVX-512 paths differ only in the primitives, and the AVX-512 path (which
// cannot run on every development machine) shares all control flow with the AVX2 path that can.
//
// Internal linkage for the same reason as scalar_ops.h: every instantiation is compiled with its TU's -m flags.
#pragma once

#include <cstddef>
#include <type_traits>

#include "reduce/scalar_ops.h"

namespace ibv_coll::emu::detail {
namespace {

// min/max under the float32 rule, on whole vectors. MINPS/MAXPS compute "a < b ? a : b" / "a > b ? a : b", which
// is already right for unequal ordered operands and for a NaN b. Two fix-ups remain: equal operands (the only
// ones that can differ in bits are -0/+0, where OR yields -0 and AND yields +0, as in float_minmax) and a NaN a.
template <class Isa, bool kMin, class V> inline V vec_float_minmax(V a, V b)
{
	V r = kMin ? Isa::x86_min(a, b) : Isa::x86_max(a, b);
	r = Isa::select(Isa::equal(a, b), kMin ? Isa::bit_or(a, b) : Isa::bit_and(a, b), r);
	return Isa::select(Isa::is_nan(a), a, r);
}

// One reduction op on vectors whose lanes have element type T (float for fp16/bf16, which are widened first).
template <class Isa, class T, RedOp Op, class V> inline V vec_op(V x, V y)
{
	constexpr bool kFloat = std::is_floating_point_v<T>;
	if constexpr (Op == RedOp::sum || Op == RedOp::avg)
		return Isa::template add<T>(x, y);
	else if constexpr (Op == RedOp::prod)
		return Isa::template mul<T>(x, y);
	else if constexpr (Op == RedOp::min && kFloat)
		return vec_float_minmax<Isa, true>(x, y);
	else if constexpr (Op == RedOp::max && kFloat)
		return vec_float_minmax<Isa, false>(x, y);
	else if constexpr (Op == RedOp::min)
		return Isa::template min<T>(x, y);
	else if constexpr (Op == RedOp::max)
		return Isa::template max<T>(x, y);
	else if constexpr (Op == RedOp::band)
		return Isa::bit_and(x, y);
	else if constexpr (Op == RedOp::bor)
		return Isa::bit_or(x, y);
	else
		return Isa::bit_xor(x, y);
}

template <class Isa, Dtype D, RedOp Op> struct SimdKernel {
	using S = storage_t<D>;
	// fp16 is widened with VCVTPH2PS, so a step covers one float vector's worth of elements. bf16 is widened by
	// interleaving with zeros, which turns one full vector of bf16 into two float vectors.
	static constexpr size_t kLanes = D == Dtype::float16 ? Isa::kVecBytes / sizeof(float)
							     : Isa::kVecBytes / sizeof(S);

	// Processes exactly kLanes elements. All loads precede the store, so dst == a or dst == b is fine.
	static void step(S *dst, const S *a, const S *b)
	{
		if constexpr (D == Dtype::float16) {
			Isa::store_half(
				dst, vec_op<Isa, float, Op>(Isa::load_half(a), Isa::load_half(b)));
		} else if constexpr (D == Dtype::bfloat16) {
			const auto x = Isa::template load<S>(a);
			const auto y = Isa::template load<S>(b);
			const auto lo = vec_op<Isa, float, Op>(Isa::bf16_lo(x), Isa::bf16_lo(y));
			const auto hi = vec_op<Isa, float, Op>(Isa::bf16_hi(x), Isa::bf16_hi(y));
			Isa::store(dst, Isa::bf16_pack(lo, hi));
		} else {
			Isa::store(dst, vec_op<Isa, S, Op>(Isa::template load<S>(a),
							   Isa::template load<S>(b)));
		}
	}

	static void run(void *dst_v, const void *a_v, const void *b_v, size_t count)
	{
		S *dst = static_cast<S *>(dst_v);
		const S *a = static_cast<const S *>(a_v);
		const S *b = static_cast<const S *>(b_v);
		size_t i = 0;
		// Four independent steps per iteration keep more loads in flight (the kernels are bandwidth bound)
		// and spend the loop's own instructions once per four vectors.
		for (; i + 4 * kLanes <= count; i += 4 * kLanes) {
			step(dst + i, a + i, b + i);
			step(dst + i + kLanes, a + i + kLanes, b + i + kLanes);
			step(dst + i + 2 * kLanes, a + i + 2 * kLanes, b + i + 2 * kLanes);
			step(dst + i + 3 * kLanes, a + i + 3 * kLanes, b + i + 3 * kLanes);
		}
		for (; i + kLanes <= count; i += kLanes)
			step(dst + i, a + i, b + i);
		scalar_loop<D, Op>(dst + i, a + i, b + i, count - i);
	}
};

} // namespace
} // namespace ibv_coll::emu::detail
