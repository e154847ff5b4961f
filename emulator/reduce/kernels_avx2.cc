// AVX2 + F16C kernels. Compiled with -mavx2 -mf16c (see CMakeLists.txt) and only called after the dispatcher
// has checked the CPU for both.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "reduce/reduce_detail.h"
#include "reduce/simd_kernel.h"

namespace ibv_coll::emu::detail {
namespace {

// Vector primitives for SimdKernel; the AVX-512 counterpart in kernels_avx512.cc has the same shape.
struct Avx2 {
	static constexpr size_t kVecBytes = 32;

	template <class T> static auto load(const T *p)
	{
		if constexpr (std::is_same_v<T, float>)
			return _mm256_loadu_ps(p);
		else if constexpr (std::is_same_v<T, double>)
			return _mm256_loadu_pd(p);
		else
			return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
	}
	static void store(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
	static void store(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
	template <class T> static void store(T *p, __m256i v)
	{
		_mm256_storeu_si256(reinterpret_cast<__m256i *>(p), v);
	}

	// fp16: F16C conversions are exact in both directions (immediate RNE, denormals kept).
	static __m256 load_half(const uint16_t *p)
	{
		return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
	}
	static void store_half(uint16_t *p, __m256 v)
	{
		_mm_storeu_si128(reinterpret_cast<__m128i *>(p),
				 _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
	}

	// bf16 -> float is placing the 16 bits in the upper half of a 32-bit lane: interleave with zeros. UNPCK and
	// PACK both work within 128-bit lanes, so bf16_pack(bf16_lo, bf16_hi) restores the original element order.
	static __m256 bf16_lo(__m256i v)
	{
		return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
	}
	static __m256 bf16_hi(__m256i v)
	{
		return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
	}
	static __m256i bf16_pack(__m256 lo, __m256 hi)
	{
		return _mm256_packus_epi32(bf16_round(lo), bf16_round(hi));
	}
	// float -> bf16 bits in the low half of each lane: the integer RNE of float_to_bf16_bits(), lane-wise.
	static __m256i bf16_round(__m256 v)
	{
		const __m256i u = _mm256_castps_si256(v);
		const __m256i upper = _mm256_srli_epi32(u, 16);
		const __m256i bias = _mm256_add_epi32(_mm256_and_si256(upper, _mm256_set1_epi32(1)),
						      _mm256_set1_epi32(0x7FFF));
		const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
		const __m256i nan = _mm256_cmpgt_epi32(
			_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
			_mm256_set1_epi32(0x7F800000));
		const __m256i quiet = _mm256_or_si256(upper, _mm256_set1_epi32(0x0040));
		// Lanes end up in 0..0xFFFF, so the signed-saturating PACKUSDW in bf16_pack is exact.
		return _mm256_blendv_epi8(rounded, quiet, nan);
	}

	template <class T, class V> static V add(V x, V y)
	{
		if constexpr (std::is_same_v<T, float>)
			return _mm256_add_ps(x, y);
		else if constexpr (std::is_same_v<T, double>)
			return _mm256_add_pd(x, y);
		else if constexpr (sizeof(T) == 1)
			return _mm256_add_epi8(x, y);
		else if constexpr (sizeof(T) == 2)
			return _mm256_add_epi16(x, y);
		else if constexpr (sizeof(T) == 4)
			return _mm256_add_epi32(x, y);
		else
			return _mm256_add_epi64(x, y);
	}

	// Low half of the product is the same for signed and unsigned operands, so one routine serves both.
	template <class T, class V> static V mul(V x, V y)
	{
		if constexpr (std::is_same_v<T, float>) {
			return _mm256_mul_ps(x, y);
		} else if constexpr (std::is_same_v<T, double>) {
			return _mm256_mul_pd(x, y);
		} else if constexpr (sizeof(T) == 1) {
			// No 8-bit multiply: multiply even and odd bytes in 16-bit lanes and keep each product's low byte.
			const __m256i lo_bytes = _mm256_set1_epi16(0x00FF);
			const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(x, y), lo_bytes);
			const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8),
							       _mm256_andnot_si256(lo_bytes, y));
			return _mm256_or_si256(even, odd);
		} else if constexpr (sizeof(T) == 2) {
			return _mm256_mullo_epi16(x, y);
		} else if constexpr (sizeof(T) == 4) {
			return _mm256_mullo_epi32(x, y);
		} else {
			// No 64-bit multiply: lo*lo (full 64 bits) + ((lo*hi + hi*lo) mod 2^32) << 32.
			const __m256i cross = _mm256_mullo_epi32(
				x, _mm256_shuffle_epi32(y, 0xB1)); // x.lo*y.hi, x.hi*y.lo
			const __m256i cross_sum = _mm256_add_epi32(cross,
								   _mm256_srli_epi64(cross, 32));
			return _mm256_add_epi64(_mm256_mul_epu32(x, y),
						_mm256_slli_epi64(cross_sum, 32));
		}
	}

	// 64-bit lanes have no min/max instruction; compare (bias by 2^63 for unsigned) and blend.
	template <class T> static __m256i greater64(__m256i x, __m256i y)
	{
		if constexpr (std::is_signed_v<T>) {
			return _mm256_cmpgt_epi64(x, y);
		} else {
			const __m256i bias = _mm256_set1_epi64x(INT64_MIN);
			return _mm256_cmpgt_epi64(_mm256_xor_si256(x, bias),
						  _mm256_xor_si256(y, bias));
		}
	}

	template <class T> static __m256i min(__m256i x, __m256i y)
	{
		constexpr bool s = std::is_signed_v<T>;
		if constexpr (sizeof(T) == 1)
			return s ? _mm256_min_epi8(x, y) : _mm256_min_epu8(x, y);
		else if constexpr (sizeof(T) == 2)
			return s ? _mm256_min_epi16(x, y) : _mm256_min_epu16(x, y);
		else if constexpr (sizeof(T) == 4)
			return s ? _mm256_min_epi32(x, y) : _mm256_min_epu32(x, y);
		else
			return _mm256_blendv_epi8(x, y, greater64<T>(x, y));
	}

	template <class T> static __m256i max(__m256i x, __m256i y)
	{
		constexpr bool s = std::is_signed_v<T>;
		if constexpr (sizeof(T) == 1)
			return s ? _mm256_max_epi8(x, y) : _mm256_max_epu8(x, y);
		else if constexpr (sizeof(T) == 2)
			return s ? _mm256_max_epi16(x, y) : _mm256_max_epu16(x, y);
		else if constexpr (sizeof(T) == 4)
			return s ? _mm256_max_epi32(x, y) : _mm256_max_epu32(x, y);
		else
			return _mm256_blendv_epi8(y, x, greater64<T>(x, y));
	}

	static __m256i bit_and(__m256i x, __m256i y) { return _mm256_and_si256(x, y); }
	static __m256i bit_or(__m256i x, __m256i y) { return _mm256_or_si256(x, y); }
	static __m256i bit_xor(__m256i x, __m256i y) { return _mm256_xor_si256(x, y); }
	static __m256 bit_and(__m256 x, __m256 y) { return _mm256_and_ps(x, y); }
	static __m256 bit_or(__m256 x, __m256 y) { return _mm256_or_ps(x, y); }
	static __m256d bit_and(__m256d x, __m256d y) { return _mm256_and_pd(x, y); }
	static __m256d bit_or(__m256d x, __m256d y) { return _mm256_or_pd(x, y); }

	// MINPS/MAXPS: "x < y ? x : y" / "x > y ? x : y" (the second operand on NaN or equal operands).
	static __m256 x86_min(__m256 x, __m256 y) { return _mm256_min_ps(x, y); }
	static __m256 x86_max(__m256 x, __m256 y) { return _mm256_max_ps(x, y); }
	static __m256d x86_min(__m256d x, __m256d y) { return _mm256_min_pd(x, y); }
	static __m256d x86_max(__m256d x, __m256d y) { return _mm256_max_pd(x, y); }

	// Float lane masks are all-ones/all-zero vectors of the same type; select(m, t, f) = m ? t : f.
	static __m256 equal(__m256 x, __m256 y) { return _mm256_cmp_ps(x, y, _CMP_EQ_OQ); }
	static __m256 is_nan(__m256 x) { return _mm256_cmp_ps(x, x, _CMP_UNORD_Q); }
	static __m256 select(__m256 m, __m256 t, __m256 f) { return _mm256_blendv_ps(f, t, m); }
	static __m256d equal(__m256d x, __m256d y) { return _mm256_cmp_pd(x, y, _CMP_EQ_OQ); }
	static __m256d is_nan(__m256d x) { return _mm256_cmp_pd(x, x, _CMP_UNORD_Q); }
	static __m256d select(__m256d m, __m256d t, __m256d f) { return _mm256_blendv_pd(f, t, m); }
};

template <Dtype D, RedOp Op> using Avx2Kernel = SimdKernel<Avx2, D, Op>;

} // namespace

const KernelTable &avx2_kernels()
{
	static constexpr KernelTable table = make_table<Avx2Kernel>();
	return table;
}

} // namespace ibv_coll::emu::detail
