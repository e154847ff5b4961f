// Native AVX512-FP16 sum/prod for float16, used on top of the AVX-512 table when the CPU has the extension.
//
// Why this is bit-identical to the reference (widen to float, operate, round to half): the exact sum or product
// of two binary16 values rounded once to binary32 and then to binary16 equals a single rounding to binary16,
// because binary32 carries at least 2*11+1 significand bits (double rounding is innocuous for p' >= 2p+1; the
// product of two 11-bit significands is even exact in binary32). The FP16 instructions ignore MXCSR.DAZ/FTZ, so
// denormals are exact too. min/max keep the generic kernel: VMINPH/VMAXPH have x86 NaN/zero semantics.
//
// GCC 12's AVX-512 intrinsic headers initialise their "undefined" pass-through operands from themselves and then
// trip -Wmaybe-uninitialized under -Werror (GCC PR 105593, fixed in GCC 13). Harmless; silenced for the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "reduce/reduce_detail.h"
#include "reduce/scalar_ops.h"

namespace ibv_coll::emu::detail {
namespace {

template <RedOp Op> void fp16_native(void *dst_v, const void *a_v, const void *b_v, size_t count)
{
	uint16_t *dst = static_cast<uint16_t *>(dst_v);
	const uint16_t *a = static_cast<const uint16_t *>(a_v);
	const uint16_t *b = static_cast<const uint16_t *>(b_v);
	constexpr size_t kLanes = 32;
	size_t i = 0;
	for (; i + kLanes <= count; i += kLanes) {
		const __m512h x = _mm512_castsi512_ph(_mm512_loadu_si512(a + i));
		const __m512h y = _mm512_castsi512_ph(_mm512_loadu_si512(b + i));
		const __m512h r = Op == RedOp::prod ? _mm512_mul_ph(x, y) : _mm512_add_ph(x, y);
		_mm512_storeu_si512(dst + i, _mm512_castph_si512(r));
	}
	scalar_loop<Dtype::float16, Op>(dst + i, a + i, b + i, count - i);
}

} // namespace

ReduceFn avx512fp16_kernel(RedOp op)
{
	switch (op) {
	case RedOp::sum: return &fp16_native<RedOp::sum>;
	case RedOp::avg: return &fp16_native<RedOp::avg>;
	case RedOp::prod: return &fp16_native<RedOp::prod>;
	default: return nullptr;
	}
}

} // namespace ibv_coll::emu::detail
