// A second implementation of the RoCEv2 ICRC for tests, written from the
// annex (bitwise CRC-32, headers built with the system's struct iphdr /
// ip6_hdr / udphdr), sharing nothing with the library's.
#pragma once

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/udp.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace ibvc_test {

inline uint32_t ref_crc(uint32_t crc, const uint8_t *p, size_t n)
{
	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
	}
	return crc;
}

// roce: from the BTH to the end of the padded payload (no ICRC).  src and
// dst are 16-byte addresses, IPv4 ones mapped (::ffff:a.b.c.d).
inline uint32_t ref_icrc(bool v6, const uint8_t src[16], const uint8_t dst[16], uint16_t sport,
			 uint16_t dport, const std::vector<uint8_t> &roce)
{
	std::vector<uint8_t> b(8, 0xff);
	uint16_t udp_len = uint16_t(sizeof(udphdr) + roce.size() + 4);
	if (!v6) {
		iphdr ip{};
		ip.version = 4;
		ip.ihl = 5;
		ip.tos = 0xff;
		ip.tot_len = htons(uint16_t(sizeof(iphdr) + udp_len));
		ip.id = 0;
		ip.frag_off = htons(IP_DF);
		ip.ttl = 0xff;
		ip.protocol = IPPROTO_UDP;
		ip.check = 0xffff;
		memcpy(&ip.saddr, src + 12, 4);
		memcpy(&ip.daddr, dst + 12, 4);
		auto *p = reinterpret_cast<uint8_t *>(&ip);
		b.insert(b.end(), p, p + sizeof(ip));
	} else {
		ip6_hdr ip{};
		ip.ip6_flow = htonl(0x6fffffffu);
		ip.ip6_plen = htons(udp_len);
		ip.ip6_nxt = IPPROTO_UDP;
		ip.ip6_hlim = 0xff;
		memcpy(&ip.ip6_src, src, 16);
		memcpy(&ip.ip6_dst, dst, 16);
		auto *p = reinterpret_cast<uint8_t *>(&ip);
		b.insert(b.end(), p, p + sizeof(ip));
	}
	udphdr u{};
	u.source = htons(sport);
	u.dest = htons(dport);
	u.len = htons(udp_len);
	u.check = 0xffff;
	auto *up = reinterpret_cast<uint8_t *>(&u);
	b.insert(b.end(), up, up + sizeof(u));
	size_t bth = b.size();
	b.insert(b.end(), roce.begin(), roce.end());
	b[bth + 4] = 0xff; // resv8a
	return ~ref_crc(0xffffffffu, b.data(), b.size());
}

} // namespace ibvc_test
