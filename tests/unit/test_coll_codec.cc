// The collective packet codec (wire/coll_codec.h) against packets put
// together by hand here, byte by byte, and an ICRC computed here bit by
// bit over the masked packet (IBTA annex A17.3.3), never with the code
// under test.
#include "wire/coll_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace ibv_coll::emu::wire;

namespace {

// Reflected CRC-32 (IEEE 802.3), one bit at a time.
uint32_t ref_crc_bits(uint32_t crc, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
	}
	return crc;
}

const uint8_t kSrc[4] = {10, 0, 0, 1}, kDst[4] = {10, 0, 0, 2};
constexpr uint16_t kSport = 40000, kDport = 4791;

UdpEndpoints endpoints()
{
	UdpEndpoints ep{};
	ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
	memcpy(ep.src + 12, kSrc, 4);
	memcpy(ep.dst + 12, kDst, 4);
	ep.sport = kSport;
	ep.dport = kDport;
	return ep;
}

// The ICRC of roce (BTH to the end of the pad): the masked IPv4 and UDP
// headers of the datagram, the BTH with resv8a masked, the rest as is;
// stored least significant byte first.
std::vector<uint8_t> ref_icrc_bytes(const std::vector<uint8_t> &roce)
{
	const size_t udp_len = 8 + roce.size() + 4, ip_len = 20 + udp_len;
	std::vector<uint8_t> m(8, 0xff); // the LRH's place
	// clang-format off
	const uint8_t ip[20] = {
		0x45, 0xff,				// version, IHL; TOS
		uint8_t(ip_len >> 8), uint8_t(ip_len),	// total length
		0x00, 0x00,				// identification
		0x40, 0x00,				// DF
		0xff, 17,				// TTL; UDP
		0xff, 0xff,				// checksum
		kSrc[0], kSrc[1], kSrc[2], kSrc[3],
		kDst[0], kDst[1], kDst[2], kDst[3],
	};
	m.insert(m.end(), ip, ip + 20);
	const uint8_t udp[8] = {
		uint8_t(kSport >> 8), uint8_t(kSport),
		uint8_t(kDport >> 8), uint8_t(kDport),
		uint8_t(udp_len >> 8), uint8_t(udp_len),
		0xff, 0xff,				// checksum
	};
	// clang-format on
	m.insert(m.end(), udp, udp + 8);
	m.insert(m.end(), roce.begin(), roce.end());
	m[8 + 20 + 8 + 4] = 0xff; // BTH resv8a
	const uint32_t c = ~ref_crc_bits(0xffffffffu, m.data(), m.size());
	return {uint8_t(c), uint8_t(c >> 8), uint8_t(c >> 16), uint8_t(c >> 24)};
}

// A DATA packet with an 8-byte extension and a 5-byte payload (3 of pad),
// written out field by field.
std::vector<uint8_t> hand_packet(uint8_t opcode = 0xe0, uint16_t ceth_len = 13)
{
	// clang-format off
	std::vector<uint8_t> v = {
		// BTH
		opcode, 0x70,			 // SE 0, M 1, PadCnt 3, TVer 0
		0xff, 0xff,			 // P_Key
		0x00,				 // resv8a
		0x12, 0x34, 0x56,		 // DestQP
		0x00,				 // AckReq
		0x0a, 0x0b, 0x0c,		 // PSN: the sid's low 24 bits
		// CETH
		0x01, 0x02, 0x03,		 // coll, op, dtype
		0x01,				 // flags: inline
		0x00, 0x01,			 // status, phase
		0x00, 0x05,			 // src_node
		0x00, 0x00, 0x00, 0x09,		 // jid
		0x00, 0x00, 0x00, 0x2a,		 // mid
		0x77, 0x0a, 0x0b, 0x0c,		 // sid
		0x00, 0x03,			 // seg
		uint8_t(ceth_len >> 8), uint8_t(ceth_len),
		0, 0, 0, 0, 0, 0, 0, 0x06,	 // node_map
		0, 0, 0, 0, 0, 0, 0, 0x01,	 // rank_map
		0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04, // job_key
		0x00, 0x00, 0x00, 0x02,		 // inc
		0x00, 0x00, 0x01, 0x00,		 // seq
		0x00, 0x01, 0xe2, 0x40,		 // hold: 123456 ns
		0x00, 0x00, 0x30, 0x39,		 // queue: 12345 ns
		// extension (task information)
		0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
		// payload, pad
		0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x00, 0x00,
	};
	// clang-format on
	const std::vector<uint8_t> crc = ref_icrc_bytes(v);
	v.insert(v.end(), crc.begin(), crc.end());
	return v;
}

Ceth hand_ceth()
{
	Ceth h;
	h.coll = 1;
	h.op = 2;
	h.dtype = 3;
	h.flags = kCethInline;
	h.phase = 1;
	h.src_node = 5;
	h.jid = 9;
	h.mid = 42;
	h.sid = 0x770a0b0c;
	h.seg = 3;
	h.len = 999; // the encoder's to set
	h.node_map = 6;
	h.rank_map = 1;
	h.job_key = 0xdeadbeef01020304ull;
	h.inc = 2;
	h.seq = 256;
	h.hold = 123456;
	h.queue = 12345;
	return h;
}

const uint8_t kExt[8] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7};
const uint8_t kPayload[5] = {0x11, 0x22, 0x33, 0x44, 0x55};

} // namespace

TEST(CollCodec, EncodeMatchesHandAssembledPacket)
{
	const std::vector<uint8_t> want = hand_packet();
	const Ceth h = hand_ceth();
	// Payload built after the headers, sealed in place.
	std::vector<uint8_t> buf(256, 0xcc);
	const size_t hdr = coll_encode(buf.data(), kCollData, 0x123456, h.sid, h, kExt, 8, 5);
	ASSERT_EQ(hdr, 12u + 64u + 8u);
	memcpy(buf.data() + hdr, kPayload, 5);
	const size_t n = roce_seal(endpoints(), buf.data(), hdr, 5);
	ASSERT_EQ(n, want.size());
	EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + long(n)), want);

	// The payload sent from where it lies: headers, payload, trailer.
	std::vector<uint8_t> hb(256, 0xcc);
	const size_t hdr2 = coll_encode(hb.data(), kCollData, 0x123456, h.sid, h, kExt, 8, 5);
	const uint32_t trailer = roce_seal_split(endpoints(), hb.data(), hdr2, kPayload, 5,
						 nullptr);
	ASSERT_EQ(trailer, 3u + 4u);
	std::vector<uint8_t> wire(hb.begin(), hb.begin() + long(hdr2));
	wire.insert(wire.end(), kPayload, kPayload + 5);
	wire.insert(wire.begin() + long(wire.size()), hb.begin() + long(hdr2),
		    hb.begin() + long(hdr2 + trailer));
	EXPECT_EQ(wire, want);

	// The same with the payload's CRC known: the payload is not read.
	const uint8_t padded[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0};
	const uint32_t tail = ref_crc_bits(0, padded, 8);
	EXPECT_EQ(payload_crc(kPayload, 5), tail);
	const uint8_t junk[5] = {};
	std::vector<uint8_t> hc(256, 0xcc);
	coll_encode(hc.data(), kCollData, 0x123456, h.sid, h, kExt, 8, 5);
	roce_seal_split(endpoints(), hc.data(), hdr2, junk, 5, &tail);
	EXPECT_TRUE(std::equal(want.end() - 4, want.end(), hc.begin() + long(hdr2 + 3)));
}

TEST(CollCodec, IcrcMatchesBitwiseReference)
{
	// Several lengths, through the table and the folding code alike.
	for (uint32_t paylen : {0u, 1u, 4u, 61u, 200u, 1021u, 4096u}) {
		std::vector<uint8_t> buf(12 + 64 + paylen + 8);
		Ceth h = hand_ceth();
		const size_t hdr = coll_encode(buf.data(), kCollResult, 7, h.sid, h, nullptr, 0,
					       paylen);
		for (uint32_t i = 0; i < paylen; i++)
			buf[hdr + i] = uint8_t(i * 7 + 3);
		const size_t n = roce_seal(endpoints(), buf.data(), hdr, paylen);
		const std::vector<uint8_t> roce(buf.begin(), buf.begin() + long(n - 4));
		EXPECT_EQ(std::vector<uint8_t>(buf.begin() + long(n - 4), buf.begin() + long(n)),
			  ref_icrc_bytes(roce))
			<< "payload " << paylen;
		CollRx rx;
		ASSERT_EQ(coll_decode(endpoints(), buf.data(), n, &rx), CollError::ok);
		EXPECT_EQ(rx.paylen, paylen);
		// A RESULT's tail CRC: payload and pad, from register 0.
		EXPECT_EQ(rx.tail_crc, ref_crc_bits(0, buf.data() + hdr, n - 4 - hdr))
			<< "payload " << paylen;
	}
}

TEST(CollCodec, DecodeHandAssembledPacket)
{
	const std::vector<uint8_t> pkt = hand_packet();
	CollRx rx;
	ASSERT_EQ(coll_decode(endpoints(), pkt.data(), pkt.size(), &rx), CollError::ok);
	EXPECT_EQ(rx.bth.opcode, kCollData);
	EXPECT_EQ(rx.bth.dqpn, 0x123456u);
	EXPECT_EQ(rx.bth.psn, 0x0a0b0cu);
	EXPECT_EQ(rx.bth.pad, 3);
	const Ceth want = hand_ceth();
	EXPECT_EQ(rx.h.coll, 1);
	EXPECT_EQ(rx.h.op, 2);
	EXPECT_EQ(rx.h.dtype, 3);
	EXPECT_EQ(rx.h.flags, kCethInline);
	EXPECT_EQ(rx.h.phase, 1);
	EXPECT_EQ(rx.h.src_node, 5);
	EXPECT_EQ(rx.h.jid, 9u);
	EXPECT_EQ(rx.h.mid, 42u);
	EXPECT_EQ(rx.h.sid, want.sid);
	EXPECT_EQ(rx.h.seg, 3);
	EXPECT_EQ(rx.h.len, 13);
	EXPECT_EQ(rx.h.node_map, 6u);
	EXPECT_EQ(rx.h.rank_map, 1u);
	EXPECT_EQ(rx.h.job_key, want.job_key);
	EXPECT_EQ(rx.h.inc, 2u);
	EXPECT_EQ(rx.h.seq, 256u);
	EXPECT_EQ(rx.h.hold, 123456u);
	EXPECT_EQ(rx.h.queue, 12345u);
	// The payload is the extension and the data (the receiver splits them).
	ASSERT_EQ(rx.paylen, 13u);
	EXPECT_EQ(rx.payload, pkt.data() + 12 + 64);
	EXPECT_EQ(memcmp(rx.payload, kExt, 8), 0);
	EXPECT_EQ(memcmp(rx.payload + 8, kPayload, 5), 0);
	EXPECT_EQ(rx.len, pkt.size() - 4);
	EXPECT_EQ(rx.tail_crc, 0u) << "only a RESULT's payload CRC is kept";
}

TEST(CollCodec, RejectsDamagedPackets)
{
	const UdpEndpoints ep = endpoints();
	const std::vector<uint8_t> good = hand_packet();
	CollRx rx;
	EXPECT_EQ(coll_decode(ep, good.data(), 0, &rx), CollError::empty);
	// Cut anywhere short of BTH + CETH + ICRC.
	for (size_t n : {size_t(1), size_t(15), size_t(12 + 64 + 3)})
		EXPECT_EQ(coll_decode(ep, good.data(), n, &rx), CollError::truncated) << n;
	// Cut after the headers: the ICRC no longer matches.
	EXPECT_EQ(coll_decode(ep, good.data(), good.size() - 2, &rx), CollError::bad_icrc);
	// One bit of the payload, of the CETH, of the ICRC.
	for (size_t at : {size_t(12 + 64 + 9), size_t(12 + 20), good.size() - 1}) {
		std::vector<uint8_t> bad = good;
		bad[at] ^= 0x10;
		EXPECT_EQ(coll_decode(ep, bad.data(), bad.size(), &rx), CollError::bad_icrc) << at;
	}
	// The masked fields do not count: resv8a may change on the way.
	std::vector<uint8_t> ecn = good;
	ecn[4] = 0x40;
	EXPECT_EQ(coll_decode(ep, ecn.data(), ecn.size(), &rx), CollError::ok);
	// A CETH len that disagrees with the datagram, its ICRC right.
	std::vector<uint8_t> longer = hand_packet(0xe0, 12);
	EXPECT_EQ(coll_decode(ep, longer.data(), longer.size(), &rx), CollError::bad_length);
	std::vector<uint8_t> shorter = hand_packet(0xe0, 14);
	EXPECT_EQ(coll_decode(ep, shorter.data(), shorter.size(), &rx), CollError::bad_length);
	// Not one of the protocol's opcodes (RC SEND ONLY, the last + 1).
	std::vector<uint8_t> rc = hand_packet(0x04);
	EXPECT_EQ(coll_decode(ep, rc.data(), rc.size(), &rx), CollError::bad_kind);
	std::vector<uint8_t> next = hand_packet(uint8_t(kCollKindLast + 1));
	EXPECT_EQ(coll_decode(ep, next.data(), next.size(), &rx), CollError::bad_kind);
	EXPECT_STREQ(coll_error_str(CollError::bad_icrc), "bad ICRC");
}

TEST(CollCodec, ParseChecksTheHeaderAndThePad)
{
	std::vector<uint8_t> v = hand_packet();
	ASSERT_GT(v.size(), 4u);
	v.erase(v.end() - 4, v.end()); // as the NIC passes it on: ICRC checked and removed
	CollRx rx;
	ASSERT_EQ(coll_parse(v.data(), v.size(), &rx), CollError::ok);
	std::vector<uint8_t> bad = v;
	bad[1] |= 0x01; // transport version 1
	EXPECT_EQ(coll_parse(bad.data(), bad.size(), &rx), CollError::bad_header);
	bad = v;
	bad[3] = 0xfe; // another P_Key
	EXPECT_EQ(coll_parse(bad.data(), bad.size(), &rx), CollError::bad_header);
	// A pad longer than what follows the CETH.
	std::vector<uint8_t> hdr_only(v.begin(), v.begin() + 12 + 64 + 2);
	hdr_only[1] = 0x70;
	EXPECT_EQ(coll_parse(hdr_only.data(), hdr_only.size(), &rx), CollError::bad_length);
	EXPECT_EQ(coll_parse(v.data(), 12 + 63, &rx), CollError::truncated);
}
