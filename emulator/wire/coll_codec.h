// The collective packet codec, the one used by the member NICs (coll/,
// nic/engine.cc) and by the aggregation switch (switch/):
//
//   BTH | CETH | [task information or other extension] | payload | pad | ICRC
//
// Encoding writes the headers into a transmit buffer; the payload is
// either built right after them or sent from where it lies, and the ICRC
// is taken in two parts (the headers, then the payload where it is, or a
// CRC of it already known), never over a copy of the two put together.
// Decoding checks the ICRC in the same two parts, so that a RESULT's
// payload CRC (tail_crc) serves the packets that pass it on.
// ibv_coll_wire(7) documents the layout.
#pragma once

#include "wire/ceth.h"
#include "wire/icrc.h"
#include "wire/roce.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ibv_coll::emu::wire {

// Why a datagram is not a collective packet (each side counts these under
// its own counters).
enum class CollError : uint8_t {
	ok,
	empty,	    // no bytes at all
	truncated,  // shorter than BTH + CETH + ICRC
	bad_icrc,   // the ICRC does not match
	bad_kind,   // not a collective BTH opcode this protocol knows
	bad_header, // transport version or P_Key not ours
	bad_length, // the pad or the CETH len disagree with the datagram's length
};
const char *coll_error_str(CollError e);

// A decoded collective packet; payload points into the datagram.
struct CollRx {
	Bth bth;
	Ceth h;
	const uint8_t *payload = nullptr;
	uint32_t paylen = 0; // without the pad (== h.len)
	size_t len = 0;	     // BTH to the end of the padded payload (no ICRC)
	// RESULT: crc32_update(0, payload || pad), for a packet passing the
	// payload on; 0 for other kinds.
	uint32_t tail_crc = 0;
};

// The pad that brings n payload bytes to a multiple of 4.
inline uint32_t pad_of(uint32_t n)
{
	return (4 - (n & 3)) & 3;
}

// Write BTH (opcode kind, destination QP dqpn, psn: the block's sid, or
// the tag of a STATS exchange; the pad of ext_len + paylen), then CETH
// (with len = ext_len + paylen) and ext at buf.
// Returns the header length, where the payload goes.  ext_len is a
// multiple of 4, so the pad is the payload's.
// Inline: every collective packet sent goes through it.
inline size_t coll_encode(uint8_t *buf, uint8_t kind, uint32_t dqpn, uint32_t psn, const Ceth &h,
			  const void *ext, uint32_t ext_len, uint32_t paylen)
{
	Bth bth;
	bth.opcode = kind;
	bth.dqpn = dqpn;
	bth.psn = psn & kPsnMask;
	bth.pad = uint8_t(pad_of(ext_len + paylen));
	bth.store(buf);
	// The CETH as given but its len.
	h.store(buf + kBthBytes);
	store_be16(buf + kBthBytes + 22, uint16_t(ext_len + paylen));
	if (ext_len)
		memcpy(buf + kBthBytes + kCethBytes, ext, ext_len);
	return kBthBytes + kCethBytes + ext_len;
}

// crc32_update(0, data || pad): the tail_crc of a payload that several
// packets carry.
uint32_t payload_crc(const uint8_t *data, uint32_t len);

// Finish a RoCEv2 packet whose hdr_len header bytes (BTH onwards) are at
// pkt, followed by paylen payload bytes: set the BTH pad count, pad with
// zeros, append the ICRC.  Returns the datagram's length.
size_t roce_seal(const UdpEndpoints &ep, uint8_t *pkt, size_t hdr_len, uint32_t paylen);
// The same for a payload sent from where it lies (pkt holds only the
// headers): the pad and the ICRC are written at pkt + hdr_len, to follow
// the payload on the wire.  tail_crc, when the caller knows it, is
// crc32_update(0, payload || pad) and the payload is not read.  Returns
// the trailer's length (pad + ICRC).
uint32_t roce_seal_split(const UdpEndpoints &ep, uint8_t *pkt, size_t hdr_len,
			 const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc);

// The ICRC of a collective packet of n bytes (n >= kBthBytes + kIcrcBytes;
// the ICRC included), taken over its headers and then its payload.  On
// success *len is n less the ICRC and, for a RESULT, *tail_crc the CRC of
// what follows the CETH (0 otherwise).
CollError coll_check_icrc(const UdpEndpoints &ep, const uint8_t *pkt, size_t n, size_t *len,
			  uint32_t *tail_crc);
// The structure of a packet whose ICRC was checked (len without the ICRC):
// a known collective kind, our transport version and P_Key, a pad and a
// CETH len that add up.  Fills out but its tail_crc.  Inline: it is on
// every collective packet's receive path.
inline CollError coll_parse(const uint8_t *pkt, size_t len, CollRx *out)
{
	if (len < kBthBytes + kCethBytes)
		return len ? CollError::truncated : CollError::empty;
	out->bth = Bth::load(pkt);
	const Bth &bth = out->bth;
	if (!is_coll_opcode(bth.opcode) || bth.opcode > kCollKindLast)
		return CollError::bad_kind;
	if (Bth::tver(pkt) != 0 || bth.pkey != kDefaultPkey)
		return CollError::bad_header;
	if (len < kBthBytes + kCethBytes + bth.pad)
		return CollError::bad_length;
	out->h = Ceth::load(pkt + kBthBytes);
	out->payload = pkt + kBthBytes + kCethBytes;
	out->paylen = uint32_t(len - kBthBytes - kCethBytes - bth.pad);
	out->len = len;
	return out->paylen == out->h.len ? CollError::ok : CollError::bad_length;
}
// Both, on a datagram of n bytes: a datagram shorter than the headers is
// refused before its ICRC is read.
CollError coll_decode(const UdpEndpoints &ep, const uint8_t *pkt, size_t n, CollRx *out);

} // namespace ibv_coll::emu::wire
