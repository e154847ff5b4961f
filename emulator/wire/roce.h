// RoCEv2 transport headers (IBTA vol. 1 ch. 9 and annex A17): BTH, RETH,
// AETH, ImmDt, the RC opcodes and PSN arithmetic.  This is the one place
// their byte layout is written down; ibv_coll_wire(7) documents it.
#pragma once

#include "wire/bytes.h"

#include <cstddef>
#include <cstdint>

namespace ibv_coll::emu::wire {

constexpr size_t kBthBytes = 12;
constexpr size_t kRethBytes = 16;
constexpr size_t kAethBytes = 4;
constexpr size_t kImmBytes = 4;
constexpr size_t kIcrcBytes = 4;
// Ethernet, IPv4 and UDP headers before the BTH on the wire.
constexpr size_t kFrameBytes = 14 + 20 + 8;
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint32_t kQpnMask = 0xffffff;
constexpr uint16_t kDefaultPkey = 0xffff;

// RC opcodes (transport 000).  0xe0..0xff is the manufacturer range the
// collective engine uses.
enum Opcode : uint8_t {
	kSendFirst = 0x00,
	kSendMiddle = 0x01,
	kSendLast = 0x02,
	kSendLastImm = 0x03,
	kSendOnly = 0x04,
	kSendOnlyImm = 0x05,
	kWriteFirst = 0x06,
	kWriteMiddle = 0x07,
	kWriteLast = 0x08,
	kWriteLastImm = 0x09,
	kWriteOnly = 0x0a,
	kWriteOnlyImm = 0x0b,
	kReadRequest = 0x0c,
	kReadRespFirst = 0x0d,
	kReadRespMiddle = 0x0e,
	kReadRespLast = 0x0f,
	kReadRespOnly = 0x10,
	kAck = 0x11,
};

// What an opcode carries and where it sits in a message.
enum OpFlags : uint16_t {
	kHasReth = 1 << 0,
	kHasAeth = 1 << 1,
	kHasImm = 1 << 2,
	kHasPayload = 1 << 3,
	kFirst = 1 << 4,
	kMiddle = 1 << 5,
	kLast = 1 << 6,
	kOnly = kFirst | kLast,
	kSend = 1 << 7,
	kWrite = 1 << 8,
	kRead = 1 << 9,	     // read request
	kReadResp = 1 << 10, // read response
	kAckOp = 1 << 11,
	kRequest = 1 << 12, // requester -> responder
};

// Flags of an RC opcode, 0 for an opcode this transport does not know.
uint16_t opcode_flags(uint8_t opcode);

// Header bytes after the BTH for an opcode.
inline size_t ext_header_bytes(uint16_t f)
{
	return (f & kHasReth ? kRethBytes : 0) + (f & kHasAeth ? kAethBytes : 0) +
	       (f & kHasImm ? kImmBytes : 0);
}

// Base Transport Header, 12 bytes:
//   0 opcode | 1 SE:1 M:1 PadCnt:2 TVer:4 | 2-3 P_Key
//   4 resv8a (FECN/BECN in IBA) | 5-7 DestQP
//   8 AckReq:1 resv7 | 9-11 PSN
struct Bth {
	uint8_t opcode = 0;
	bool se = false;
	bool mig = true;
	uint8_t pad = 0;
	uint16_t pkey = kDefaultPkey;
	uint32_t dqpn = 0;
	bool ack_req = false;
	uint32_t psn = 0;

	void store(uint8_t *p) const
	{
		p[0] = opcode;
		p[1] = uint8_t((se ? 0x80 : 0) | (mig ? 0x40 : 0) | (pad & 3) << 4);
		store_be16(p + 2, pkey);
		p[4] = 0;
		store_be24(p + 5, dqpn & kQpnMask);
		p[8] = ack_req ? 0x80 : 0;
		store_be24(p + 9, psn & kPsnMask);
	}
	static Bth load(const uint8_t *p)
	{
		Bth b;
		b.opcode = p[0];
		b.se = p[1] & 0x80;
		b.mig = p[1] & 0x40;
		b.pad = (p[1] >> 4) & 3;
		b.pkey = load_be16(p + 2);
		b.dqpn = load_be24(p + 5);
		b.ack_req = p[8] & 0x80;
		b.psn = load_be24(p + 9);
		return b;
	}
	static uint8_t tver(const uint8_t *p) { return p[1] & 0x0f; }
};

// RDMA Extended Transport Header, 16 bytes: VA(8) R_Key(4) DMA length(4).
struct Reth {
	uint64_t va = 0;
	uint32_t rkey = 0;
	uint32_t len = 0;

	void store(uint8_t *p) const
	{
		store_be64(p, va);
		store_be32(p + 8, rkey);
		store_be32(p + 12, len);
	}
	static Reth load(const uint8_t *p)
	{
		return {load_be64(p), load_be32(p + 8), load_be32(p + 12)};
	}
};

// ACK Extended Transport Header, 4 bytes: Syndrome(1) MSN(3).
struct Aeth {
	uint8_t syndrome = 0;
	uint32_t msn = 0;

	void store(uint8_t *p) const
	{
		p[0] = syndrome;
		store_be24(p + 1, msn);
	}
	static Aeth load(const uint8_t *p) { return {p[0], load_be24(p + 1)}; }
};

// AETH syndromes: bits 6..5 select ACK / RNR NAK / NAK.
constexpr uint8_t kSynAckNoCredit = 0x1f; // ACK, "invalid" credit count
constexpr uint8_t kSynRnrNak = 0x20;	  // | rnr timer (5 bits)
constexpr uint8_t kSynNakSeqErr = 0x60;
constexpr uint8_t kSynNakInvReq = 0x61;
constexpr uint8_t kSynNakRemAccess = 0x62;
constexpr uint8_t kSynNakRemOpErr = 0x63;

enum class AethKind : uint8_t { ack, rnr_nak, nak, reserved };
inline AethKind aeth_kind(uint8_t syn)
{
	switch (syn >> 5) {
	case 0: return AethKind::ack;
	case 1: return AethKind::rnr_nak;
	case 3: return AethKind::nak;
	default: return AethKind::reserved;
	}
}

// PSN arithmetic modulo 2^24: the signed distance a - b.
inline int32_t psn_diff(uint32_t a, uint32_t b)
{
	return int32_t((a - b) << 8) >> 8;
}
inline uint32_t psn_add(uint32_t a, uint32_t n)
{
	return (a + n) & kPsnMask;
}

// The RNR timer encoding of IBTA table 45, in microseconds.
uint32_t rnr_timer_us(uint8_t code);

// The IBTA MTU enum (1 = 256 ... 5 = 4096) in bytes; 0 when out of range.
inline uint32_t mtu_bytes(unsigned mtu_enum)
{
	return mtu_enum >= 1 && mtu_enum <= 5 ? 128u << mtu_enum : 0;
}

} // namespace ibv_coll::emu::wire
