// The switch's side of the collective packet codec (wire/coll_codec.h): a
// datagram in (parse), a packet out (send_to), and the CRC of a unit's
// result that packets carrying it reuse.
#include "switch/switch.h"

#include "util/clock.h"

#include "util/log.h"
#include "wire/coll_codec.h"

#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

// One datagram into an In: its ICRC checked, its BTH and CETH read
// (wire/coll_codec.h).  False (and the drop counted) when it is not a
// packet of ours.
bool Switch::parse(const RxPacket &rx, In &p)
{
	const UdpEndpoints ep = udp_endpoints(rx.src, rx.dst, tx().port());
	CollRx c;
	switch (coll_decode(ep, rx.data, rx.len, &c)) {
	case CollError::ok: break;
	case CollError::empty: gone().drop_empty++; return false;
	case CollError::truncated: gone().drop_short++; return false;
	case CollError::bad_icrc:
		gone().drop_icrc++;
		IBVC_DEBUG("switch", "{}: bad icrc from {}:{}", p_.name, rx.src.ip.str(),
			   rx.src.port);
		return false;
	case CollError::bad_kind: gone().drop_kind++; return false;
	case CollError::bad_header:
	case CollError::bad_length: gone().drop_malformed++; return false;
	}
	p.kind = c.bth.opcode;
	p.h = c.h;
	p.payload = c.payload;
	p.paylen = c.paylen;
	p.src = rx.src;
	p.dst = rx.dst;
	p.tail_crc = c.tail_crc;
	p.rx_ns = rx.rx_ns ? rx.rx_ns : now();
	return true;
}

void Switch::send_to(Job &j, const Endpoint &dst, const IpAddr &src, uint32_t qpn, uint8_t kind,
		     const Ceth &h0, const void *task, const void *payload, uint32_t len,
		     const uint32_t *lend_crc)
{
	ctr(j).tx_packets++;
	ctr(j).tx_bytes += len;
	uint8_t *buf = tx().tx_buf();
	Ceth h = h0;
	// Every packet carries the incarnation the switch serves, but the
	// ABORT that tells a member of an older one so, which carries its.
	if (!(h.flags & kCethSuperseded) || kind != kCollAbort)
		h.inc = j.inc;
	const uint32_t tlen = task ? uint32_t(sw::kTaskBytes) : 0;
	const size_t hdr = coll_encode(buf, kind, qpn, h.sid, h, task, tlen, len);
	const UdpEndpoints ep = udp_endpoints(src, tx().port(), dst);
	if (lend_crc && len) {
		const uint32_t trailer = roce_seal_split(
			ep, buf, hdr, static_cast<const uint8_t *>(payload), len, lend_crc);
		// Lent while one worker sends from the unit; copied when
		// another may take the unit before this one's queue leaves.
		if (multi())
			tx().Transport::tx_commit_split(hdr, static_cast<const uint8_t *>(payload),
							len, trailer, dst, src);
		else
			tx().tx_commit_split(hdr, static_cast<const uint8_t *>(payload), len,
					     trailer, dst, src);
		return;
	}
	if (len)
		memcpy(buf + hdr, payload, len);
	tx().tx_commit(roce_seal(ep, buf, hdr, len), dst, src);
}

void Switch::seal(SegUnit &u)
{
	u.crc = payload_crc(u.data, u.len);
}

} // namespace ibv_coll::emu
