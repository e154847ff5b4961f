// The RoCEv2 invariant CRC; slicing-by-8 tables for the CRC itself.
#include "wire/icrc.h"

#include "wire/bytes.h"
#include "wire/roce.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

uint64_t fold_const(unsigned n)
{
	uint64_t k = xpow_mod(n) << 1, r = 0; // degree <= 32, no x^0 term
	for (unsigned t = 1; t <= 32; t++)
		if (k >> t & 1)
			r |= 1ull << (64 - t);
	return r;
}

struct FoldConsts {
	uint64_t k128_h, k128_l, k512_h, k512_l;
};

const FoldConsts kFold = {fold_const(128 + 63), fold_const(128 - 1), fold_const(512 + 63),
			  fold_const(512 - 1)};

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i a, __m128i k)
{
	return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_clmul(uint32_t crc, const uint8_t *p,
							       size_t len)
{
	const __m128i k128 = _mm_set_epi64x(int64_t(kFold.k128_l), int64_t(kFold.k128_h));
	const __m128i k512 = _mm_set_epi64x(int64_t(kFold.k512_l), int64_t(kFold.k512_h));
	auto load = [](const uint8_t *q) {
		return _mm_loadu_si128(reinterpret_cast<const __m128i *>(q));
	};
	// The register enters as an XOR into the first four bytes.
	__m128i a = _mm_xor_si128(load(p), _mm_cvtsi32_si128(int(crc)));
	p += 16;
	len -= 16;
	if (len >= 48) {
		__m128i b = load(p), c = load(p + 16), d = load(p + 32);
		p += 48;
		len -= 48;
		while (len >= 64) {
			a = _mm_xor_si128(fold(a, k512), load(p));
			b = _mm_xor_si128(fold(b, k512), load(p + 16));
			c = _mm_xor_si128(fold(c, k512), load(p + 32));
			d = _mm_xor_si128(fold(d, k512), load(p + 48));
			p += 64;
			len -= 64;
		}
		a = _mm_xor_si128(fold(a, k128), b);
		a = _mm_xor_si128(fold(a, k128), c);
		a = _mm_xor_si128(fold(a, k128), d);
	}
	while (len >= 16) {
		a = _mm_xor_si128(fold(a, k128), load(p));
		p += 16;
		len -= 16;
	}
	// What is left of A is reduced by the table walk, then the tail.
	uint8_t rest[16];
	_mm_storeu_si128(reinterpret_cast<__m128i *>(rest), a);
	return crc32_table(crc32_table(0, rest, 16), p, len);
}

bool have_clmul()
{
	static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
	return yes;
}

} // namespace
#endif

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = static_cast<const uint8_t *>(data);
#if defined(__x86_64__)
	if (len >= 64 && have_clmul())
		return crc32_clmul(crc, p, len);
#endif
	return crc32_table(crc, p, len);
}

uint32_t crc32_update_table(uint32_t crc, const void *data, size_t len)
{
	return crc32_table(crc, static_cast<const uint8_t *>(data), len);
}

bool is_v4mapped(const uint8_t a[16])
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(a, prefix, 12) == 0;
}

uint32_t icrc(const UdpEndpoints &ep, const uint8_t *roce, size_t roce_len)
{
	// Pseudo header: LRH stand-in, IP, UDP, BTH, all variant fields masked.
	uint8_t ph[8 + 40 + 8 + kBthBytes];
	size_t n = 0;
	memset(ph, 0xff, 8);
	n = 8;
	const uint16_t udp_len = uint16_t(8 + roce_len + kIcrcBytes);
	if (is_v4mapped(ep.src) && is_v4mapped(ep.dst)) {
		uint8_t *ip = ph + n;
		ip[0] = 0x45;
		ip[1] = 0xff; // TOS
		store_be16(ip + 2, uint16_t(20 + udp_len));
		store_be16(ip + 4, 0);	    // identification
		store_be16(ip + 6, 0x4000); // DF, offset 0
		ip[8] = 0xff;		    // TTL
		ip[9] = 17;		    // UDP
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
	memcpy(ph + n, roce, kBthBytes);
	ph[n + 4] = 0xff; // resv8a
	n += kBthBytes;

	uint32_t crc = crc32_update(0xffffffffu, ph, n);
	crc = crc32_update(crc, roce + kBthBytes, roce_len - kBthBytes);
	return ~crc;
}

} // namespace ibv_coll::emu::wire
