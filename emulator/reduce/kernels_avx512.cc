// AVX-512 kernels (F + BW + VL + DQ). Same structure as kernels_avx2.cc, primitive for primitive, so that the
// AVX2 tests (which run on every x86 development machine) exercise all shared control flow.
//
// Deliberately not used: AVX512-BF16's VCVTNEPS2BF16 (flushes denormals, so it would not be bit-exact) — bf16
// narrowing uses the integer RNE instead. AVX512-FP16 arithmetic lives in kernels_avx512fp16.cc because requiring
// it here would exclude every AVX-512 CPU before Sapphire Rapids (and all Zen 4) from this path.
//
// GCC 12's AVX-512 intrinsic headers initialise their "undefined" pass-through operands from themselves and then
// trip -Wmaybe-uninitialized under -Werror (GCC PR 105593, fixed in GCC 13). Harmless; silenced for the header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <type_traits>

#include "reduce/reduce_detail.h"
#include "reduce/simd_kernel.h"

namespace ibv_coll::emu::detail {
namespace {

struct Avx512 {
	static constexpr size_t kVecBytes = 64;

	template <class T> static auto load(const T *p)
	{
		if constexpr (std::is_same_v<T, float>)
			return _mm512_loadu_ps(p);
		else if constexpr (std::is_same_v<T, double>)
			return _mm512_loadu_pd(p);
		else
			return _mm512_loadu_si512(p);
	}
	static void store(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
	static void store(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
	template <class T> static void store(T *p, __m512i v) { _mm512_storeu_si512(p, v); }

	// 512-bit VCVTPH2PS/VCVTPS2PH are part of AVX512F and behave like their F16C forms (exact, RNE immediate).
	static __m512 load_half(const uint16_t *p)
	{
		return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
	}
	static void store_half(uint16_t *p, __m512 v)
	{
		_mm256_storeu_si256(reinterpret_cast<__m256i *>(p),
				    _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
	}

	static __m512 bf16_lo(__m512i v)
	{
		return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v));
	}
	static __m512 bf16_hi(__m512i v)
	{
		return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v));
	}
	static __m512i bf16_pack(__m512 lo, __m512 hi)
	{
		return _mm512_packus_epi32(bf16_round(lo), bf16_round(hi));
	}
	static __m512i bf16_round(__m512 v)
	{
		const __m512i u = _mm512_castps_si512(v);
		const __m512i upper = _mm512_srli_epi32(u, 16);
		const __m512i bias = _mm512_add_epi32(_mm512_and_si512(upper, _mm512_set1_epi32(1)),
						      _mm512_set1_epi32(0x7FFF));
		const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
		const __mmask16 nan = _mm512_cmpgt_epu32_mask(
			_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
			_mm512_set1_epi32(0x7F800000));
		const __m512i quiet = _mm512_or_si512(upper, _mm512_set1_epi32(0x0040));
		return _mm512_mask_blend_epi32(nan, rounded, quiet);
	}

	template <class T, class V> static V add(V x, V y)
	{
		if constexpr (std::is_same_v<T, float>)
			return _mm512_add_ps(x, y);
		else if constexpr (std::is_same_v<T, double>)
			return _mm512_add_pd(x, y);
		else if constexpr (sizeof(T) == 1)
			return _mm512_add_epi8(x, y);
		else if constexpr (sizeof(T) == 2)
			return _mm512_add_epi16(x, y);
		else if constexpr (sizeof(T) == 4)
			return _mm512_add_epi32(x, y);
		else
			return _mm512_add_epi64(x, y);
	}

	template <class T, class V> static V mul(V x, V y)
	{
		if constexpr (std::is_same_v<T, float>) {
			return _mm512_mul_ps(x, y);
		} else if constexpr (std::is_same_v<T, double>) {
			return _mm512_mul_pd(x, y);
		} else if constexpr (sizeof(T) == 1) {
			// No 8-bit multiply: multiply even and odd bytes in 16-bit lanes and keep each product's low byte.
			const __m512i lo_bytes = _mm512_set1_epi16(0x00FF);
			const __m512i even = _mm512_and_si512(_mm512_mullo_epi16(x, y), lo_bytes);
			const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8),
							       _mm512_andnot_si512(lo_bytes, y));
			return _mm512_or_si512(even, odd);
		} else if constexpr (sizeof(T) == 2) {
			return _mm512_mullo_epi16(x, y);
		} else if constexpr (sizeof(T) == 4) {
			return _mm512_mullo_epi32(x, y);
		} else {
			return _mm512_mullo_epi64(x, y); // AVX512DQ
		}
	}

	template <class T> static __m512i min(__m512i x, __m512i y)
	{
		constexpr bool s = std::is_signed_v<T>;
		if constexpr (sizeof(T) == 1)
			return s ? _mm512_min_epi8(x, y) : _mm512_min_epu8(x, y);
		else if constexpr (sizeof(T) == 2)
			return s ? _mm512_min_epi16(x, y) : _mm512_min_epu16(x, y);
		else if constexpr (sizeof(T) == 4)
			return s ? _mm512_min_epi32(x, y) : _mm512_min_epu32(x, y);
		else
			return s ? _mm512_min_epi64(x, y) : _mm512_min_epu64(x, y);
	}

	template <class T> static __m512i max(__m512i x, __m512i y)
	{
		constexpr bool s = std::is_signed_v<T>;
		if constexpr (sizeof(T) == 1)
			return s ? _mm512_max_epi8(x, y) : _mm512_max_epu8(x, y);
		else if constexpr (sizeof(T) == 2)
			return s ? _mm512_max_epi16(x, y) : _mm512_max_epu16(x, y);
		else if constexpr (sizeof(T) == 4)
			return s ? _mm512_max_epi32(x, y) : _mm512_max_epu32(x, y);
		else
			return s ? _mm512_max_epi64(x, y) : _mm512_max_epu64(x, y);
	}

	static __m512i bit_and(__m512i x, __m512i y) { return _mm512_and_si512(x, y); }
	static __m512i bit_or(__m512i x, __m512i y) { return _mm512_or_si512(x, y); }
	static __m512i bit_xor(__m512i x, __m512i y) { return _mm512_xor_si512(x, y); }
	static __m512 bit_and(__m512 x, __m512 y) { return _mm512_and_ps(x, y); }
	static __m512 bit_or(__m512 x, __m512 y) { return _mm512_or_ps(x, y); }
	static __m512d bit_and(__m512d x, __m512d y) { return _mm512_and_pd(x, y); }
	static __m512d bit_or(__m512d x, __m512d y) { return _mm512_or_pd(x, y); }

	static __m512 x86_min(__m512 x, __m512 y) { return _mm512_min_ps(x, y); }
	static __m512 x86_max(__m512 x, __m512 y) { return _mm512_max_ps(x, y); }
	static __m512d x86_min(__m512d x, __m512d y) { return _mm512_min_pd(x, y); }
	static __m512d x86_max(__m512d x, __m512d y) { return _mm512_max_pd(x, y); }

	// Lane masks are k-registers here; select(m, t, f) = m ? t : f as on AVX2.
	static __mmask16 equal(__m512 x, __m512 y) { return _mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ); }
	static __mmask16 is_nan(__m512 x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }
	static __m512 select(__mmask16 m, __m512 t, __m512 f)
	{
		return _mm512_mask_blend_ps(m, f, t);
	}
	static __mmask8 equal(__m512d x, __m512d y) { return _mm512_cmp_pd_mask(x, y, _CMP_EQ_OQ); }
	static __mmask8 is_nan(__m512d x) { return _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q); }
	static __m512d select(__mmask8 m, __m512d t, __m512d f)
	{
		return _mm512_mask_blend_pd(m, f, t);
	}
};

template <Dtype D, RedOp Op> using Avx512Kernel = SimdKernel<Avx512, D, Op>;

} // namespace

const KernelTable &avx512_kernels()
{
	static constexpr KernelTable table = make_table<Avx512Kernel>();
	return table;
}

} // namespace ibv_coll::emu::detail
