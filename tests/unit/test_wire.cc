// Wire format: header round trips and sizes, the opcode table, PSN
// arithmetic, and the ICRC against a second implementation written here
// from the RoCEv2 annex (bitwise CRC, headers built with the system's
// struct iphdr / ip6_hdr / udphdr).
#include "wire/ceth.h"
#include "wire/icrc.h"
#include "wire/roce.h"
#include "ref_icrc.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/ip.h>
#include <netinet/ip6.h>
#include <netinet/udp.h>

#include <cstring>
#include <random>
#include <vector>

using namespace ibv_coll::emu::wire;
using ibvc_test::ref_crc;
using ibvc_test::ref_icrc;

TEST(Wire, HeaderSizes)
{
	EXPECT_EQ(kBthBytes, 12u);
	EXPECT_EQ(kRethBytes, 16u);
	EXPECT_EQ(kAethBytes, 4u);
	EXPECT_EQ(kImmBytes, 4u);
	EXPECT_EQ(kIcrcBytes, 4u);
}

TEST(Wire, BthRoundTripAndByteLayout)
{
	Bth b;
	b.opcode = kWriteFirst;
	b.se = true;
	b.mig = true;
	b.pad = 3;
	b.pkey = 0xffff;
	b.dqpn = 0xabcdef;
	b.ack_req = true;
	b.psn = 0x123456;
	uint8_t raw[12];
	b.store(raw);
	// Hand-computed bytes, IBTA vol. 1 fig. 9.
	const uint8_t want[12] = {0x06, 0xf0, 0xff, 0xff, 0x00, 0xab,
				  0xcd, 0xef, 0x80, 0x12, 0x34, 0x56};
	EXPECT_EQ(memcmp(raw, want, 12), 0);
	Bth c = Bth::load(raw);
	EXPECT_EQ(c.opcode, b.opcode);
	EXPECT_EQ(c.se, b.se);
	EXPECT_EQ(c.pad, b.pad);
	EXPECT_EQ(c.dqpn, b.dqpn);
	EXPECT_EQ(c.ack_req, b.ack_req);
	EXPECT_EQ(c.psn, b.psn);
	EXPECT_EQ(Bth::tver(raw), 0);
}

TEST(Wire, RethAethRoundTrip)
{
	uint8_t raw[16];
	Reth r{0x0102030405060708ull, 0x11223344, 0x55667788};
	r.store(raw);
	const uint8_t want[16] = {1,	2,    3,    4,	  5,	6,    7,    8,
				  0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
	EXPECT_EQ(memcmp(raw, want, 16), 0);
	Reth s = Reth::load(raw);
	EXPECT_EQ(s.va, r.va);
	EXPECT_EQ(s.rkey, r.rkey);
	EXPECT_EQ(s.len, r.len);

	Aeth a{kSynNakRemAccess, 0xfedcba};
	a.store(raw);
	EXPECT_EQ(raw[0], 0x62);
	EXPECT_EQ(raw[1], 0xfe);
	EXPECT_EQ(raw[3], 0xba);
	Aeth b = Aeth::load(raw);
	EXPECT_EQ(b.syndrome, a.syndrome);
	EXPECT_EQ(b.msn, a.msn);
	EXPECT_EQ(aeth_kind(kSynAckNoCredit), AethKind::ack);
	EXPECT_EQ(aeth_kind(kSynRnrNak | 5), AethKind::rnr_nak);
	EXPECT_EQ(aeth_kind(kSynNakSeqErr), AethKind::nak);
}

TEST(Wire, OpcodeTable)
{
	EXPECT_TRUE(opcode_flags(kWriteFirst) & kHasReth);
	EXPECT_TRUE(opcode_flags(kWriteOnlyImm) & kHasImm);
	EXPECT_FALSE(opcode_flags(kWriteMiddle) & kHasReth);
	EXPECT_TRUE(opcode_flags(kReadRespFirst) & kHasAeth);
	EXPECT_FALSE(opcode_flags(kReadRespMiddle) & kHasAeth);
	EXPECT_EQ(ext_header_bytes(opcode_flags(kWriteOnlyImm)), 20u);
	EXPECT_EQ(ext_header_bytes(opcode_flags(kAck)), 4u);
	EXPECT_EQ(opcode_flags(0x12), 0); // atomics: not supported
	EXPECT_EQ(opcode_flags(0xe0), 0); // the collective range is not RC
	for (int op = 0; op <= kAck; op++)
		EXPECT_NE(opcode_flags(uint8_t(op)), 0) << op;
}

TEST(Wire, PsnArithmeticWraps)
{
	EXPECT_EQ(psn_diff(5, 3), 2);
	EXPECT_EQ(psn_diff(3, 5), -2);
	EXPECT_EQ(psn_diff(0, 0xffffff), 1);
	EXPECT_EQ(psn_diff(0xffffff, 0), -1);
	EXPECT_EQ(psn_add(0xfffffe, 3), 1u);
	EXPECT_EQ(mtu_bytes(1), 256u);
	EXPECT_EQ(mtu_bytes(5), 4096u);
	EXPECT_EQ(mtu_bytes(6), 0u);
	EXPECT_EQ(rnr_timer_us(0), 655360u);
	EXPECT_EQ(rnr_timer_us(1), 10u);
	EXPECT_EQ(rnr_timer_us(31), 491520u);
}

TEST(Icrc, Crc32CheckValues)
{
	const char *s = "123456789";
	EXPECT_EQ(~crc32_update(0xffffffffu, s, 9), 0xcbf43926u); // the CRC-32 check value
	const uint8_t ff[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	// The state after the eight LRH stand-in bytes: the constant rxe starts from.
	EXPECT_EQ(crc32_update(0xffffffffu, ff, 8), 0xdebb20e3u);
	std::mt19937 rng(1);
	std::vector<uint8_t> buf(4099);
	for (auto &b : buf)
		b = uint8_t(rng());
	for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 4099u})
		EXPECT_EQ(crc32_update(0x12345678u, buf.data(), n),
			  ref_crc(0x12345678u, buf.data(), n));
}

TEST(Icrc, EveryImplementationMatchesTheBitwiseReference)
{
	// Every length from 0 to 700 and some long ones, every alignment, random
	// starting registers: each way of computing the CRC this CPU has (table
	// walk, 128-bit folding in SSE's and AVX's encodings, 256- and 512-bit
	// folding) against the bitwise reference.
	std::mt19937 rng(5);
	std::vector<uint8_t> buf(70000);
	for (auto &b : buf)
		b = uint8_t(rng());
	int tried = 0;
	for (CrcImpl impl : {CrcImpl::table, CrcImpl::clmul, CrcImpl::clmul_avx, CrcImpl::vclmul,
			     CrcImpl::vclmul512}) {
		if (!crc32_impl_available(impl))
			continue;
		tried++;
		for (size_t n = 0; n <= 700; n++) {
			uint32_t init = uint32_t(rng());
			size_t off = n % 13;
			ASSERT_EQ(crc32_update_with(impl, init, buf.data() + off, n),
				  ref_crc(init, buf.data() + off, n))
				<< "impl " << int(impl) << " length " << n;
		}
		for (size_t n : {4096u, 4097u, 4111u, 4224u, 9000u, 65536u, 69999u}) {
			uint32_t init = uint32_t(rng());
			EXPECT_EQ(crc32_update_with(impl, init, buf.data() + 1, n),
				  ref_crc(init, buf.data() + 1, n))
				<< "impl " << int(impl) << " length " << n;
		}
	}
	EXPECT_GE(tried, 1);
	for (size_t n : {0u, 100u, 300u, 4096u}) // and the dispatcher
		EXPECT_EQ(crc32_update(7, buf.data() + 3, n), ref_crc(7, buf.data() + 3, n));
}

TEST(Icrc, ShiftIsFeedingZeros)
{
	// crc32_shift against feeding the zeros through the bitwise reference,
	// for every length to 300 and some packet sizes, and the split that
	// rests on it: crc(a, X || Y) == shift(crc(a, X), |Y|) ^ crc(0, Y).
	std::mt19937 rng(11);
	std::vector<uint8_t> zeros(70000, 0), buf(9000);
	for (auto &b : buf)
		b = uint8_t(rng());
	std::vector<size_t> lens;
	for (size_t n = 0; n <= 300; n++)
		lens.push_back(n);
	for (size_t n : {1024u, 2048u, 4096u, 4099u, 4100u, 4144u, 65536u, 69999u})
		lens.push_back(n);
	for (int pass = 0; pass < 2; pass++) { // the second from the cache of lengths
		for (size_t n : lens) {
			uint32_t init = uint32_t(rng());
			ASSERT_EQ(crc32_shift(init, n), ref_crc(init, zeros.data(), n))
				<< "length " << n;
		}
	}
	for (size_t x : {0u, 1u, 12u, 60u, 200u}) {
		for (size_t y : {0u, 3u, 64u, 4096u, 8000u}) {
			uint32_t init = uint32_t(rng());
			uint32_t whole = ref_crc(init, buf.data(), x + y);
			EXPECT_EQ(crc32_shift(crc32_update(init, buf.data(), x), y) ^
					  crc32_update(0, buf.data() + x, y),
				  whole)
				<< x << " + " << y;
		}
	}
}

TEST(Icrc, HeadAndTailMakeTheWholeIcrc)
{
	std::mt19937 rng(13);
	UdpEndpoints ep{};
	ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
	ep.src[15] = 1;
	ep.dst[15] = 2;
	ep.sport = 50000;
	ep.dport = 4791;
	for (size_t pay : {0u, 4u, 60u, 4096u}) {
		std::vector<uint8_t> roce(kBthBytes + 48 + pay);
		for (auto &b : roce)
			b = uint8_t(rng());
		for (size_t split : {kBthBytes, kBthBytes + 48, roce.size()}) {
			uint32_t tail = crc32_update(0, roce.data() + split, roce.size() - split);
			EXPECT_EQ(icrc_finish(icrc_head(ep, roce.data(), split, roce.size()), tail,
					      roce.size() - split),
				  ref_icrc(false, ep.src, ep.dst, ep.sport, ep.dport, roce))
				<< "payload " << pay << " split " << split;
		}
	}
}

TEST(Icrc, MatchesReferenceForIpv4AndIpv6)
{
	std::mt19937 rng(7);
	for (int v6 = 0; v6 < 2; v6++) {
		for (size_t pay : {0u, 1u, 4u, 255u, 4096u}) {
			UdpEndpoints ep{};
			for (auto &b : ep.src)
				b = uint8_t(rng());
			for (auto &b : ep.dst)
				b = uint8_t(rng());
			if (!v6) {
				memset(ep.src, 0, 10);
				memset(ep.dst, 0, 10);
				ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
			} else {
				ep.src[0] = 0x20; // not v4-mapped
				ep.dst[0] = 0x20;
			}
			ep.sport = uint16_t(rng());
			ep.dport = 4791;
			std::vector<uint8_t> roce(kBthBytes + pay);
			for (auto &b : roce)
				b = uint8_t(rng());
			EXPECT_EQ(icrc(ep, roce.data(), roce.size()),
				  ref_icrc(v6, ep.src, ep.dst, ep.sport, ep.dport, roce))
				<< "v6 " << v6 << " payload " << pay;
			// Variant fields do not count: FECN/BECN/resv8a.
			std::vector<uint8_t> other = roce;
			other[4] ^= 0xc0;
			EXPECT_EQ(icrc(ep, other.data(), other.size()),
				  icrc(ep, roce.data(), roce.size()));
			// Invariant ones do: a PSN bit.
			other = roce;
			other[11] ^= 1;
			EXPECT_NE(icrc(ep, other.data(), other.size()),
				  icrc(ep, roce.data(), roce.size()));
		}
	}
}

// The collective packets' headers (IPv4, BTH and CETH: 76 bytes), which
// icrc_head folds from registers where the CPU has PCLMULQDQ: every byte
// of the pseudo header counts as the reference says, and the variant
// fields do not, for random endpoints, lengths and headers.
TEST(Icrc, CollectiveHeadersOverIpv4MatchTheReference)
{
	std::mt19937 rng(11);
	const size_t hdr = kBthBytes + kCethBytes;
	for (int i = 0; i < 400; i++) {
		UdpEndpoints ep{};
		ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
		for (int k = 12; k < 16; k++) {
			ep.src[k] = uint8_t(rng());
			ep.dst[k] = uint8_t(rng());
		}
		ep.sport = uint16_t(rng());
		ep.dport = uint16_t(rng());
		const size_t pay = i % 5 == 0	? 0
				   : i % 5 == 1 ? 4096
						: size_t(rng() % 9000) & ~size_t(3);
		std::vector<uint8_t> roce(hdr + pay);
		for (auto &b : roce)
			b = uint8_t(rng());
		const uint32_t tail = crc32_update(0, roce.data() + hdr, pay);
		const uint32_t want = ref_icrc(false, ep.src, ep.dst, ep.sport, ep.dport, roce);
		ASSERT_EQ(icrc_finish(icrc_head(ep, roce.data(), hdr, roce.size()), tail, pay),
			  want)
			<< "case " << i << " payload " << pay;
		ASSERT_EQ(icrc(ep, roce.data(), roce.size()), want) << "case " << i;
		std::vector<uint8_t> other = roce;
		other[4] ^= 0xff; // resv8a, FECN, BECN: variant
		ASSERT_EQ(icrc_head(ep, other.data(), hdr, roce.size()),
			  icrc_head(ep, roce.data(), hdr, roce.size()));
		for (size_t at : {size_t(0), size_t(5), size_t(11), size_t(12), hdr - 1}) {
			other = roce;
			other[at] ^= uint8_t(1 << (i % 8));
			ASSERT_NE(icrc_head(ep, other.data(), hdr, roce.size()),
				  icrc_head(ep, roce.data(), hdr, roce.size()))
				<< "byte " << at;
		}
	}
}

TEST(Icrc, KnownPacket)
{
	// A SEND_ONLY from 10.0.0.1:4791 to 10.0.0.2:4791, QPN 0x11, PSN 0,
	// AckReq, payload "abcd".  The value was computed with Python's
	// zlib.crc32 over the pseudo packet built by hand with struct.pack,
	// independently of both implementations here.
	UdpEndpoints ep{};
	ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
	ep.src[12] = 10, ep.src[15] = 1;
	ep.dst[12] = 10, ep.dst[15] = 2;
	ep.sport = ep.dport = 4791;
	std::vector<uint8_t> roce = {0x04, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11,
				     0x80, 0x00, 0x00, 0x00, 'a',  'b',	 'c',  'd'};
	EXPECT_EQ(icrc(ep, roce.data(), roce.size()), 0x35d4e81du);
	EXPECT_EQ(ref_icrc(false, ep.src, ep.dst, 4791, 4791, roce), 0x35d4e81du);
	uint8_t le[4];
	store_icrc(le, 0x35d4e81du);
	const uint8_t wire_bytes[4] = {0x1d, 0xe8, 0xd4, 0x35}; // least significant first
	EXPECT_EQ(memcmp(le, wire_bytes, 4), 0);
	EXPECT_EQ(load_icrc(le), 0x35d4e81du);
}
