// The RoCEv2 invariant CRC (IBTA annex A17.3.3): CRC-32 (IEEE 802.3) over
// eight 0xff bytes standing for the absent LRH, the IP and UDP headers with
// their variant fields set to ones, the BTH with resv8a set to ones, and
// the rest of the packet.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ibv_coll::emu::wire {

// Reflected CRC-32, polynomial 0x04c11db7, no inversion in or out (the
// caller starts at 0xffffffff and inverts at the end).
uint32_t crc32_update(uint32_t crc, const void *data, size_t len);
// The ways to compute it: slicing-by-8 tables; folding 64 bytes a step
// with 128-bit carry-less multiplies (PCLMULQDQ), in SSE's encoding or in
// AVX's (three operands: fewer instructions); folding 128 bytes a step
// with 256-bit ones (VPCLMULQDQ with AVX2); folding 256 bytes a step with
// 512-bit ones (VPCLMULQDQ with AVX-512).  crc32_update picks the fastest
// the CPU has for the length; the others exist to be checked and measured
// against each other (tests/unit/test_wire.cc, ibv_coll_icrc_bench).
enum class CrcImpl { table, clmul, clmul_avx, vclmul, vclmul512 };
bool crc32_impl_available(CrcImpl impl);
// The register after LEN more zero bytes, crc32_update(crc, zeros, len),
// without reading them: CRC-32 is linear, so a CRC can be taken in parts
// and put together,
//   crc32_update(a, X || Y) == crc32_shift(crc32_update(a, X), |Y|) ^ crc32_update(0, Y),
// which lets one payload's CRC serve every packet that carries it.
uint32_t crc32_shift(uint32_t crc, size_t len);
// With IMPL (the table walk if the CPU lacks it; short lengths, and the
// tails, always go through the tables).
uint32_t crc32_update_with(CrcImpl impl, uint32_t crc, const void *data, size_t len);

// The addresses and ports of the UDP datagram carrying a packet.  IPv4
// addresses are IPv4-mapped IPv6 addresses (::ffff:a.b.c.d).
struct UdpEndpoints {
	uint8_t src[16];
	uint8_t dst[16];
	uint16_t sport;
	uint16_t dport;
};

bool is_v4mapped(const uint8_t a[16]);

// ICRC of a RoCEv2 packet: roce points at the BTH, roce_len counts the
// bytes from the BTH to the end of the padded payload (not the ICRC).  The
// IPv4 header is the one Linux sends from an unconnected UDP socket with
// IP_PMTUDISC_PROBE: identification 0 and DF set.  The value is stored on
// the wire least significant byte first, like an Ethernet FCS.
uint32_t icrc(const UdpEndpoints &ep, const uint8_t *roce, size_t roce_len);
// The same in two parts: the register after the pseudo header and the
// packet's first hdr_len bytes (from the BTH; the packet is roce_len bytes
// long), then the ICRC given the CRC of the remaining bytes, tail_crc =
// crc32_update(0, tail, roce_len - hdr_len).
uint32_t icrc_head(const UdpEndpoints &ep, const uint8_t *roce, size_t hdr_len, size_t roce_len);
inline uint32_t icrc_finish(uint32_t head, uint32_t tail_crc, size_t tail_len)
{
	return ~(crc32_shift(head, tail_len) ^ tail_crc);
}

inline void store_icrc(uint8_t *p, uint32_t v)
{
	p[0] = uint8_t(v);
	p[1] = uint8_t(v >> 8);
	p[2] = uint8_t(v >> 16);
	p[3] = uint8_t(v >> 24);
}
inline uint32_t load_icrc(const uint8_t *p)
{
	return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

} // namespace ibv_coll::emu::wire
