// The RoCEv2 invariant CRC; slicing-by-8 tables for the CRC itself.
#include "wire/icrc.h"

#include "wire/bytes.h"
#include "wire/roce.h"

#include <array>
#include <cstring>

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

uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = static_cast<const uint8_t *>(data);
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
