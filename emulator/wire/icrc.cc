// The RoCEv2 invariant CRC: slicing-by-8 tables, and folding by carry-less
// multiplication (PCLMULQDQ, or VPCLMULQDQ) where the CPU has it.
#include "wire/icrc.h"

#include "wire/bytes.h"
#include "wire/ceth.h"
#include "wire/roce.h"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__)
// GCC 12's AVX-512 headers trip its own uninitialized warnings (GCC PR
// 105593, fixed in GCC 13), as in reduce/kernels_avx512.cc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace ibv_coll::emu::wire {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables()
{
	Tables t{};
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		t[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int s = 1; s < 8; s++)
			t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
	return t;
}

constexpr Tables kT = make_tables();

} // namespace

static uint32_t crc32_table(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len >= 8) {
		uint32_t lo, hi;
		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
		lo ^= crc;
		crc = kT[7][lo & 0xff] ^ kT[6][(lo >> 8) & 0xff] ^ kT[5][(lo >> 16) & 0xff] ^
		      kT[4][lo >> 24] ^ kT[3][hi & 0xff] ^ kT[2][(hi >> 8) & 0xff] ^
		      kT[1][(hi >> 16) & 0xff] ^ kT[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = kT[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
// Folding with carry-less multiplication.  In the bit-reflected layout a
// 128-bit block A holds the coefficient of x^d at bit 127-d; A = H x^64 + L
// with H its low and L its high quadword.  Moving A forward by n bits is
// A x^n = H x^(n+64) + L x^n (mod P), and a quadword times a constant whose
// x^t coefficient sits at bit 64-t lands exactly in that layout, so each
// constant is (x^(n+63) mod P) x and (x^(n-1) mod P) x (the extra x keeps
// the constant inside 64 bits).  They are computed here, not typed in.
namespace {

uint64_t xpow_mod(unsigned n)
{
	uint64_t v = 1;
	while (n--) {
		v <<= 1;
		if (v & (1ull << 32))
			v ^= 0x104c11db7ull;
	}
	return v;
}

// v's low `bits` bits in the other order: a polynomial of degree < bits
// into the reflected layout (its x^0 term at bit bits - 1).
uint64_t reflect(uint64_t v, int bits)
{
	uint64_t r = 0;
	for (int i = 0; i < bits; i++)
		if (v >> i & 1)
			r |= 1ull << (bits - 1 - i);
	return r;
}

// (x^n mod P) x in the quadword layout: its x^t term at bit 64 - t.
uint64_t fold_const(unsigned n)
{
	return reflect(xpow_mod(n), 64);
}

struct FoldConsts {
	uint64_t k128_h, k128_l, k256_h, k256_l, k512_h, k512_l, k1024_h, k1024_l;
	uint64_t k2048_h, k2048_l;
	uint64_t k64; // x^64 of a low quadword: the end's folds (clmul_finish)
};

const FoldConsts kFold = {fold_const(128 + 63),	 fold_const(128 - 1),  fold_const(256 + 63),
			  fold_const(256 - 1),	 fold_const(512 + 63), fold_const(512 - 1),
			  fold_const(1024 + 63), fold_const(1024 - 1), fold_const(2048 + 63),
			  fold_const(2048 - 1),	 fold_const(63)};

// floor(x^64 / P), of degree 32: long division, the numerator's terms
// brought down from x^64 (the only one set) to x^0.
uint64_t x64_div_p()
{
	uint64_t rem = 0, q = 0;
	for (int d = 64; d >= 0; d--) {
		rem = rem << 1 | (d == 64);
		if (rem >> 32 & 1) {
			rem ^= 0x104c11db7ull;
			q |= 1ull << d;
		}
	}
	return q;
}

// The end's constants, reflected (clmul_finish): x^64 mod P (32 bits),
// Barrett's mu = floor(x^64 / P) and P itself (33 bits each).
struct BarrettConsts {
	uint64_t x64, mu, p;
};
const BarrettConsts kBarrett = {reflect(xpow_mod(64), 32), reflect(x64_div_p(), 33),
				reflect(0x104c11db7ull, 33)};

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i a, __m128i k)
{
	return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i load16(const uint8_t *q)
{
	return _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
}

// a folded over 16 bytes, then the 16 at q: the data XORed into one
// product before the other is taken (one register fewer live).
__attribute__((target("pclmul,sse4.1"), always_inline)) inline __m128i fold_in(__m128i a, __m128i k,
									       const uint8_t *q)
{
	const __m128i lo = _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), load16(q));
	return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x11), lo);
}

// The 16-byte steps and the end: A (the data before p, folded) moves on
// over what is left in whole blocks, three more folds and Barrett's
// reduction make it the register (until stop 70 the last fold and the
// reduction were one step of the tables, eight lookups), and the table
// walk takes the tail.
__attribute__((target("pclmul,sse4.1"))) uint32_t clmul_finish(__m128i a, const uint8_t *p,
							       size_t len)
{
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	while (len >= 16) {
		a = _mm_xor_si128(fold(a, k128), load16(p));
		p += 16;
		len -= 16;
	}
	// The register is A x^32 mod P.  A = H x^64 + L (H the low
	// quadword) is congruent to H (x^64 mod P) + L, of at most 96 bits,
	// whose terms of x^64 and up (now bits 32-63 of the low quadword) fold
	// the same way: L' of 64 bits, in the high quadword, and the register
	// is L' x^32 mod P.
	const __m128i k64 = _mm_set_epi64x(0, int64_t(kFold.k64));
	const __m128i zero = _mm_setzero_si128();
	a = _mm_xor_si128(_mm_clmulepi64_si128(a, k64, 0x00), _mm_blend_epi16(a, zero, 0x0f));
	a = _mm_xor_si128(_mm_clmulepi64_si128(a, k64, 0x00), _mm_blend_epi16(a, zero, 0x0f));
	// L' x^32 mod P without the tables: with L' = A x^32 + B (in the
	// reflected layout A is L''s low doubleword), L' x^32 = A x^64 + B x^32
	// is congruent to T = A (x^64 mod P) + B x^32, of degree < 64, and T
	// mod P is Barrett's reduction: q = floor(floor(T / x^32) mu / x^32),
	// then T - q P, whose terms below x^32 are the high doubleword.
	const __m128i lo32 = _mm_set_epi32(0, 0, 0, -1);
	const __m128i x = _mm_srli_si128(a, 8);
	__m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, lo32),
					 _mm_cvtsi64_si128(int64_t(kBarrett.x64)), 0x00);
	t = _mm_xor_si128(_mm_slli_epi64(t, 1), _mm_srli_epi64(x, 32)); // product 63 bits: align
	const __m128i q = _mm_and_si128(
		_mm_clmulepi64_si128(_mm_and_si128(t, lo32),
				     _mm_cvtsi64_si128(int64_t(kBarrett.mu)), 0x00),
		lo32);
	t = _mm_xor_si128(t, _mm_clmulepi64_si128(q, _mm_cvtsi64_si128(int64_t(kBarrett.p)), 0x00));
	const uint32_t crc = uint32_t(_mm_extract_epi32(t, 1));
	return len ? crc32_table(crc, p, len) : crc;
}

// Four 16-byte lanes, 64 bytes a step, folded into one; eight, 128 bytes a
// step, where 256 bytes or more come (a step's multiplies and XORs are the
// same per byte, the loop's own three instructions come half as often:
// 17.5 instructions a 64 bytes in AVX's encoding against 21; the eight
// lanes start with the data, so that GCC 12 keeps each in one register).
// p and len move past what it took.  len >= 64.  Always inlined, into
// callers whose targets decide the encoding.
__attribute__((target("pclmul,sse4.1"), always_inline)) inline __m128i clmul_lanes(
	uint32_t crc, const uint8_t *&p, size_t &len)
{
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	const __m128i k512 = _mm_set_epi64x(int64_t(kFold.k512_l), int64_t(kFold.k512_h));
	// The register enters as an XOR into the first four bytes.
	__m128i a = _mm_xor_si128(load16(p), _mm_cvtsi32_si128(int(crc)));
	__m128i b = load16(p + 16), c = load16(p + 32), d = load16(p + 48);
	if (len >= 256) {
		const __m128i k1024 = _mm_set_epi64x(int64_t(kFold.k1024_l),
						     int64_t(kFold.k1024_h));
		__m128i e = load16(p + 64), f = load16(p + 80), g = load16(p + 96),
			h = load16(p + 112);
		p += 128;
		len -= 128; // >= 128: one step at least
		const uint8_t *const end = p + (len & ~size_t(127));
		len &= 127;
		do {
			a = fold_in(a, k1024, p);
			b = fold_in(b, k1024, p + 16);
			c = fold_in(c, k1024, p + 32);
			d = fold_in(d, k1024, p + 48);
			e = fold_in(e, k1024, p + 64);
			f = fold_in(f, k1024, p + 80);
			g = fold_in(g, k1024, p + 96);
			h = fold_in(h, k1024, p + 112);
			p += 128;
		} while (p != end);
		// The first four lanes 64 bytes on, onto the last four.
		a = _mm_xor_si128(fold(a, k512), e);
		b = _mm_xor_si128(fold(b, k512), f);
		c = _mm_xor_si128(fold(c, k512), g);
		d = _mm_xor_si128(fold(d, k512), h);
	} else {
		p += 64;
		len -= 64;
	}
	while (len >= 64) {
		a = fold_in(a, k512, p);
		b = fold_in(b, k512, p + 16);
		c = fold_in(c, k512, p + 32);
		d = fold_in(d, k512, p + 48);
		p += 64;
		len -= 64;
	}
	a = _mm_xor_si128(fold(a, k128), b);
	a = _mm_xor_si128(fold(a, k128), c);
	return _mm_xor_si128(fold(a, k128), d);
}

__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_clmul(uint32_t crc, const uint8_t *p,
							      size_t len)
{
	const __m128i a = clmul_lanes(crc, p, len);
	return clmul_finish(a, p, len);
}

// The same in AVX's encoding, for CPUs with AVX and PCLMULQDQ but not
// VPCLMULQDQ (before Ice Lake and Zen 3): three operands, so no copies
// of the registers the multiplies read, and the loads folded into the
// XORs: 23 instructions a 64-byte step instead of 32.
__attribute__((target("pclmul,avx"))) uint32_t crc32_clmul_avx(uint32_t crc, const uint8_t *p,
							       size_t len)
{
	const __m128i a = clmul_lanes(crc, p, len);
	return clmul_finish(a, p, len);
}

#define IBVC_VCLMUL_TARGET __attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))

IBVC_VCLMUL_TARGET inline __m256i vfold(__m256i a, __m256i k)
{
	return _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00),
				_mm256_clmulepi64_epi128(a, k, 0x11));
}

// A fold constant pair in both 128-bit lanes.
IBVC_VCLMUL_TARGET inline __m256i both(uint64_t h, uint64_t l)
{
	return _mm256_set_epi64x(int64_t(l), int64_t(h), int64_t(l), int64_t(h));
}

IBVC_VCLMUL_TARGET inline __m256i load32(const uint8_t *q)
{
	return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q));
}

// Eight 16-byte lanes in four 256-bit registers, 128 bytes a step, with
// the 256-bit carry-less multiply (two products per instruction).  Then
// the lanes fold into one: the first two registers 64 bytes on, the third
// 32 bytes on, the low lane 16 bytes on.  len >= 128.
IBVC_VCLMUL_TARGET uint32_t crc32_vclmul(uint32_t crc, const uint8_t *p, size_t len)
{
	const __m256i k1024 = both(kFold.k1024_h, kFold.k1024_l);
	const __m256i k512 = both(kFold.k512_h, kFold.k512_l);
	const __m256i k256 = both(kFold.k256_h, kFold.k256_l);
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	__m256i a = _mm256_xor_si256(load32(p),
				     _mm256_zextsi128_si256(_mm_cvtsi32_si128(int(crc))));
	__m256i b = load32(p + 32), c = load32(p + 64), d = load32(p + 96);
	p += 128;
	len -= 128;
	while (len >= 128) {
		a = _mm256_xor_si256(vfold(a, k1024), load32(p));
		b = _mm256_xor_si256(vfold(b, k1024), load32(p + 32));
		c = _mm256_xor_si256(vfold(c, k1024), load32(p + 64));
		d = _mm256_xor_si256(vfold(d, k1024), load32(p + 96));
		p += 128;
		len -= 128;
	}
	c = _mm256_xor_si256(vfold(a, k512), c);
	d = _mm256_xor_si256(vfold(b, k512), d);
	d = _mm256_xor_si256(vfold(c, k256), d);
	__m128i x = _mm_xor_si128(fold(_mm256_castsi256_si128(d), k128),
				  _mm256_extracti128_si256(d, 1));
	// The rest is SSE code: leave the upper halves clean (else every SSE
	// instruction after this pays the mixed-state penalty).
	_mm256_zeroupper();
	return clmul_finish(x, p, len);
}

#define IBVC_VCLMUL512_TARGET \
	__attribute__((target("vpclmulqdq,avx512f,avx512vl,avx512bw,avx2,pclmul,sse4.1")))

IBVC_VCLMUL512_TARGET inline __m512i zfold(__m512i a, __m512i k)
{
	// a*k_h ^ a*k_l, XORed into the next data by the caller (ternlog
	// would take the three at once; two XORs are as fast here).
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(a, k, 0x00),
				_mm512_clmulepi64_epi128(a, k, 0x11));
}

IBVC_VCLMUL512_TARGET inline __m512i zboth(uint64_t h, uint64_t l)
{
	return _mm512_set_epi64(int64_t(l), int64_t(h), int64_t(l), int64_t(h), int64_t(l),
				int64_t(h), int64_t(l), int64_t(h));
}

IBVC_VCLMUL512_TARGET inline __m512i load64(const uint8_t *q)
{
	return _mm512_loadu_si512(q);
}

// Sixteen 16-byte lanes in four 512-bit registers, 256 bytes a step; then
// the registers fold into two 256-bit ones and the 256-bit code's end.
// len >= 256.
IBVC_VCLMUL512_TARGET uint32_t crc32_vclmul512(uint32_t crc, const uint8_t *p, size_t len)
{
	const __m512i k2048 = zboth(kFold.k2048_h, kFold.k2048_l);
	const __m512i k1024 = zboth(kFold.k1024_h, kFold.k1024_l);
	const __m512i k512 = zboth(kFold.k512_h, kFold.k512_l);
	__m512i a = _mm512_xor_si512(
		load64(p), _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, int(crc)));
	__m512i b = load64(p + 64), c = load64(p + 128), d = load64(p + 192);
	p += 256;
	len -= 256;
	while (len >= 256) {
		a = _mm512_xor_si512(zfold(a, k2048), load64(p));
		b = _mm512_xor_si512(zfold(b, k2048), load64(p + 64));
		c = _mm512_xor_si512(zfold(c, k2048), load64(p + 128));
		d = _mm512_xor_si512(zfold(d, k2048), load64(p + 192));
		p += 256;
		len -= 256;
	}
	// a and b 128 bytes on onto c and d, then c 64 bytes on onto d.
	c = _mm512_xor_si512(zfold(a, k1024), c);
	d = _mm512_xor_si512(zfold(b, k1024), d);
	d = _mm512_xor_si512(zfold(c, k512), d);
	// d's two halves: the low one 32 bytes on onto the high one.
	const __m256i k256 = both(kFold.k256_h, kFold.k256_l);
	__m256i y = _mm256_xor_si256(vfold(_mm512_castsi512_si256(d), k256),
				     _mm512_extracti64x4_epi64(d, 1));
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	__m128i x = _mm_xor_si128(fold(_mm256_castsi256_si128(y), k128),
				  _mm256_extracti128_si256(y, 1));
	_mm256_zeroupper();
	return clmul_finish(x, p, len);
}

bool have_vclmul512()
{
	static const bool yes = __builtin_cpu_supports("vpclmulqdq") &&
				__builtin_cpu_supports("avx512f") &&
				__builtin_cpu_supports("avx512vl") &&
				__builtin_cpu_supports("avx512bw") &&
				__builtin_cpu_supports("pclmul");
	return yes;
}

bool have_clmul()
{
	static const bool yes = __builtin_cpu_supports("pclmul") &&
				__builtin_cpu_supports("sse4.1");
	return yes;
}

bool have_clmul_avx()
{
	static const bool yes = have_clmul() && __builtin_cpu_supports("avx");
	return yes;
}

bool have_vclmul()
{
	static const bool yes = have_clmul() && __builtin_cpu_supports("avx2") &&
				__builtin_cpu_supports("vpclmulqdq");
	return yes;
}

// icrc_head of the packets every collective sends, IPv4 and the BTH and
// CETH (76 bytes) as the headers: their 112-byte pseudo header is seven
// 16-byte blocks, of which the first three (LRH stand-in, IP, UDP, BTH)
// are put together in registers and the last four are the CETH where it
// lies, so nothing is copied and the folds start at once.  The bytes are
// icrc_head's: see there.
__attribute__((target("pclmul,sse4.1"))) uint32_t icrc_head_coll_v4(const UdpEndpoints &ep,
								    const uint8_t *roce,
								    uint16_t udp_len)
{
	const uint16_t ip_len = uint16_t(20 + udp_len);
	// Bytes 8-15: version and IHL, TOS (masked), total length, id 0,
	// DF; 0-7 the LRH's ones.
	const uint64_t ip0 = 0x45u | 0xffu << 8 | uint64_t(ip_len >> 8) << 16 |
			     uint64_t(ip_len & 0xff) << 24 | uint64_t(0x40) << 48;
	// Bytes 16-31: TTL (masked), UDP, checksum (masked), the addresses,
	// the ports (big-endian).
	uint32_t src, dst;
	memcpy(&src, ep.src + 12, 4);
	memcpy(&dst, ep.dst + 12, 4);
	const uint64_t ip1 = 0xffu | 17u << 8 | 0xffffu << 16 | uint64_t(src) << 32;
	const uint64_t ip2 = uint64_t(dst) | uint64_t(__builtin_bswap16(ep.sport)) << 32 |
			     uint64_t(__builtin_bswap16(ep.dport)) << 48;
	// Bytes 32-47: UDP length, checksum (masked), the BTH's 12 with
	// resv8a (its byte 4, here 8) masked.
	__m128i bth = _mm_slli_si128(load16(roce), 4);
	bth = _mm_insert_epi32(bth, int(uint32_t(__builtin_bswap16(udp_len)) | 0xffff0000u), 0);
	bth = _mm_or_si128(bth, _mm_set_epi64x(0xff, 0));
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	// The register (0xffffffff) enters as an XOR into the first four
	// bytes, ones: zeros.
	__m128i a = _mm_set_epi64x(int64_t(ip0), int64_t(0xffffffff00000000u));
	a = _mm_xor_si128(fold(a, k128), _mm_set_epi64x(int64_t(ip2), int64_t(ip1)));
	a = _mm_xor_si128(fold(a, k128), bth);
	return clmul_finish(a, roce + kBthBytes, kCethBytes);
}

} // namespace
#endif

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = static_cast<const uint8_t *>(data);
#if defined(__x86_64__)
	if (len >= 64) {
		// What the CPU has, looked up once: every packet's headers
		// come this way.
		static const CrcImpl best = have_vclmul512()   ? CrcImpl::vclmul512
					    : have_vclmul()    ? CrcImpl::vclmul
					    : have_clmul_avx() ? CrcImpl::clmul_avx
					    : have_clmul()     ? CrcImpl::clmul
							       : CrcImpl::table;
		switch (best) {
		case CrcImpl::vclmul512:
			if (len >= 512)
				return crc32_vclmul512(crc, p, len);
			[[fallthrough]];
		case CrcImpl::vclmul:
			if (len >= 256)
				return crc32_vclmul(crc, p, len);
			return crc32_clmul_avx(crc, p, len); // AVX2 implies AVX
		case CrcImpl::clmul_avx: return crc32_clmul_avx(crc, p, len);
		case CrcImpl::clmul: return crc32_clmul(crc, p, len);
		case CrcImpl::table: break;
		}
	}
#endif
	return crc32_table(crc, p, len);
}

// Polynomials modulo P in the reflected layout crc32_update keeps its
// register in: bit 31 is the coefficient of x^0, bit 0 that of x^31.
namespace {

uint32_t mul_x(uint32_t a)
{
	return (a >> 1) ^ (0xedb88320u & (0u - (a & 1)));
}

uint32_t mul_mod_bits(uint32_t a, uint32_t b)
{
	uint32_t r = 0;
	for (int i = 0; i < 32; i++, a <<= 1) {
		r ^= b & (0u - (a >> 31));
		b = mul_x(b);
	}
	return r;
}

#if defined(__x86_64__)
// One carry-less multiply: bit k of the 63-bit product is the coefficient
// of x^(62-k).  Bits 31..62 are the terms below x^32, already in the
// register's layout; bits 0..30 are Q x^32 with Q (shifted up one) in that
// layout, and Q x^32 mod P is what four zero bytes through the tables do.
__attribute__((target("pclmul,sse4.1"))) uint32_t mul_mod_clmul(uint32_t a, uint32_t b)
{
	const __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(int(a)), _mm_cvtsi32_si128(int(b)),
					       0);
	const uint64_t c = uint64_t(_mm_cvtsi128_si64(p));
	const uint32_t q = uint32_t(c << 1);
	return uint32_t(c >> 31) ^ kT[3][q & 0xff] ^ kT[2][(q >> 8) & 0xff] ^
	       kT[1][(q >> 16) & 0xff] ^ kT[0][q >> 24];
}
#endif

uint32_t mul_mod(uint32_t a, uint32_t b)
{
#if defined(__x86_64__)
	if (have_clmul())
		return mul_mod_clmul(a, b);
#endif
	return mul_mod_bits(a, b);
}

// x^(8 * 2^k) mod P, k = 0..63.
struct ZeroPowers {
	uint32_t p[64];
	ZeroPowers()
	{
		uint32_t x8 = 0x80000000u; // x^0
		for (int i = 0; i < 8; i++)
			x8 = mul_x(x8);
		p[0] = x8;
		for (int k = 1; k < 64; k++)
			p[k] = mul_mod(p[k - 1], p[k - 1]);
	}
};

const ZeroPowers kZeroPowers;

} // namespace

uint32_t crc32_shift(uint32_t crc, size_t len)
{
	// x^(8 len) mod P, remembered for the last few lengths: packets come
	// in few sizes.
	struct Entry {
		size_t len;
		uint32_t xpow;
	};
	thread_local Entry cache[8] = {};
	Entry &e = cache[(len ^ (len >> 3)) & 7];
	if (e.len != len || !e.xpow) {
		uint32_t x = 0x80000000u;
		for (int k = 0; len >> k; k++)
			if (len >> k & 1)
				x = mul_mod(x, kZeroPowers.p[k]);
		e = Entry{len, x};
	}
	return mul_mod(crc, e.xpow);
}

bool crc32_impl_available(CrcImpl impl)
{
#if defined(__x86_64__)
	switch (impl) {
	case CrcImpl::table: return true;
	case CrcImpl::clmul: return have_clmul();
	case CrcImpl::clmul_avx: return have_clmul_avx();
	case CrcImpl::vclmul: return have_vclmul();
	case CrcImpl::vclmul512: return have_vclmul512();
	}
	return false;
#else
	return impl == CrcImpl::table;
#endif
}

uint32_t crc32_update_with(CrcImpl impl, uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = static_cast<const uint8_t *>(data);
	if (!crc32_impl_available(impl))
		impl = CrcImpl::table;
#if defined(__x86_64__)
	if (impl == CrcImpl::vclmul512 && len >= 256)
		return crc32_vclmul512(crc, p, len);
	if ((impl == CrcImpl::vclmul || impl == CrcImpl::vclmul512) && len >= 128)
		return crc32_vclmul(crc, p, len);
	if (impl == CrcImpl::clmul_avx && len >= 64)
		return crc32_clmul_avx(crc, p, len);
	if (impl != CrcImpl::table && len >= 64)
		return crc32_clmul(crc, p, len);
#endif
	return crc32_table(crc, p, len);
}

bool is_v4mapped(const uint8_t a[16])
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(a, prefix, 12) == 0;
}

uint32_t icrc(const UdpEndpoints &ep, const uint8_t *roce, size_t roce_len)
{
	return ~icrc_head(ep, roce, roce_len, roce_len);
}

uint32_t icrc_head(const UdpEndpoints &ep, const uint8_t *roce, size_t hdr_len, size_t roce_len)
{
	// Pseudo header: LRH stand-in, IP, UDP, BTH, all variant fields
	// masked; the headers after the BTH (up to a CETH and a task) join it
	// here, so that one run of the folding code takes them all.
	constexpr size_t kRoom = 8 + 40 + 8 + 128;
	const uint16_t udp_len = uint16_t(8 + roce_len + kIcrcBytes);
	const bool v4 = is_v4mapped(ep.src) && is_v4mapped(ep.dst);
#if defined(__x86_64__)
	if (v4 && hdr_len == kBthBytes + kCethBytes && have_clmul())
		return icrc_head_coll_v4(ep, roce, udp_len);
#endif
	uint8_t ph[kRoom];
	size_t n = 0;
	memset(ph, 0xff, 8);
	n = 8;
	if (v4) {
		uint8_t *ip = ph + n;
		ip[0] = 0x45;
		ip[1] = 0xff; // TOS
		store_be16(ip + 2, uint16_t(20 + udp_len));
		store_be16(ip + 4, 0);	     // identification
		store_be16(ip + 6, 0x4000);  // DF, offset 0
		ip[8] = 0xff;		     // TTL
		ip[9] = 17;		     // UDP
		store_be16(ip + 10, 0xffff); // header checksum
		memcpy(ip + 12, ep.src + 12, 4);
		memcpy(ip + 16, ep.dst + 12, 4);
		n += 20;
	} else {
		uint8_t *ip = ph + n;
		store_be32(ip, 0x6fffffffu); // version 6, traffic class and flow label
		store_be16(ip + 4, udp_len);
		ip[6] = 17;   // next header
		ip[7] = 0xff; // hop limit
		memcpy(ip + 8, ep.src, 16);
		memcpy(ip + 24, ep.dst, 16);
		n += 40;
	}
	uint8_t *udp = ph + n;
	store_be16(udp, ep.sport);
	store_be16(udp + 2, ep.dport);
	store_be16(udp + 4, udp_len);
	store_be16(udp + 6, 0xffff);
	n += 8;
	const size_t take = std::min(hdr_len, kRoom - n);
	if (take == kBthBytes + kCethBytes) // most packets: a copy of known size
		memcpy(ph + n, roce, kBthBytes + kCethBytes);
	else
		memcpy(ph + n, roce, take);
	ph[n + 4] = 0xff; // resv8a
	n += take;

	const uint32_t crc = crc32_update(0xffffffffu, ph, n);
	return take == hdr_len ? crc : crc32_update(crc, roce + take, hdr_len - take);
}

} // namespace ibv_coll::emu::wire
