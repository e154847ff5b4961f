// The collective packet codec (wire/coll_codec.h).
#include "wire/coll_codec.h"

#include <cstring>

namespace ibv_coll::emu::wire {

const char *coll_error_str(CollError e)
{
	switch (e) {
	case CollError::ok: return "ok";
	case CollError::empty: return "empty datagram";
	case CollError::truncated: return "truncated";
	case CollError::bad_icrc: return "bad ICRC";
	case CollError::bad_kind: return "not a collective opcode";
	case CollError::bad_header: return "bad transport version or P_Key";
	case CollError::bad_length: return "bad length";
	}
	return "?";
}

uint32_t payload_crc(const uint8_t *data, uint32_t len)
{
	const uint32_t pad = pad_of(len);
	const uint32_t crc = crc32_update(0, data, len);
	return pad ? crc32_shift(crc, pad) : crc;
}

static void set_pad(uint8_t *pkt, uint32_t pad)
{
	pkt[1] = uint8_t((pkt[1] & ~0x30) | pad << 4);
}

size_t roce_seal(const UdpEndpoints &ep, uint8_t *pkt, size_t hdr_len, uint32_t paylen)
{
	const uint32_t pad = pad_of(paylen);
	memset(pkt + hdr_len + paylen, 0, pad);
	set_pad(pkt, pad);
	const size_t roce_len = hdr_len + paylen + pad;
	store_icrc(pkt + roce_len, icrc(ep, pkt, roce_len));
	return roce_len + kIcrcBytes;
}

uint32_t roce_seal_split(const UdpEndpoints &ep, uint8_t *pkt, size_t hdr_len,
			 const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc)
{
	const uint32_t pad = pad_of(paylen);
	set_pad(pkt, pad);
	const size_t roce_len = hdr_len + paylen + pad;
	// The headers, then the payload where it lies (or its CRC, known).
	const uint32_t head = icrc_head(ep, pkt, hdr_len, roce_len);
	uint32_t crc;
	if (tail_crc) {
		crc = icrc_finish(head, *tail_crc, paylen + pad);
	} else {
		crc = crc32_update(head, payload, paylen);
		crc = ~(pad ? crc32_shift(crc, pad) : crc);
	}
	uint8_t *trailer = pkt + hdr_len;
	memset(trailer, 0, pad);
	store_icrc(trailer + pad, crc);
	return pad + uint32_t(kIcrcBytes);
}

CollError coll_check_icrc(const UdpEndpoints &ep, const uint8_t *pkt, size_t n, size_t *len,
			  uint32_t *tail_crc)
{
	if (n < kBthBytes + kIcrcBytes)
		return n ? CollError::truncated : CollError::empty;
	const size_t l = n - kIcrcBytes;
	// In two parts: a result's payload is passed on, and the packet that
	// carries it on reuses the payload's part of this CRC
	// (crc(head || tail) = shift(head, |tail|) ^ crc(0, tail)).
	const size_t split = l < kBthBytes + kCethBytes ? l : kBthBytes + kCethBytes;
	const uint32_t head = icrc_head(ep, pkt, split, l);
	const uint32_t whole = crc32_update(head, pkt + split, l - split);
	if (~whole != load_icrc(pkt + l))
		return CollError::bad_icrc;
	*len = l;
	*tail_crc = pkt[0] == kCollResult ? whole ^ crc32_shift(head, l - split) : 0;
	return CollError::ok;
}

CollError coll_decode(const UdpEndpoints &ep, const uint8_t *pkt, size_t n, CollRx *out)
{
	if (n < kBthBytes + kCethBytes + kIcrcBytes)
		return n ? CollError::truncated : CollError::empty;
	size_t len;
	uint32_t tail;
	CollError e = coll_check_icrc(ep, pkt, n, &len, &tail);
	if (e != CollError::ok)
		return e;
	e = coll_parse(pkt, len, out);
	out->tail_crc = tail;
	return e;
}

} // namespace ibv_coll::emu::wire
