// The switch's packet codec: a datagram in (parse), a packet out
// (send_to), and the CRC of a unit's result that packets carrying it reuse.
#include "switch/switch.h"

#include "util/log.h"
#include "wire/icrc.h"
#include "wire/roce.h"

#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

// One datagram into an In: its ICRC checked, its BTH and CETH read.  False
// (and the drop counted) when it is not a packet of ours.
bool Switch::parse(const RxPacket &rx, In &p)
{
	if (rx.len < kBthBytes + kCethBytes + kIcrcBytes) {
		if (rx.len)
			gone_.drop_short++;
		else
			gone_.drop_empty++;
		return false;
	}
	size_t len = rx.len - kIcrcBytes;
	UdpEndpoints ep;
	memcpy(ep.src, rx.src.ip.b, 16);
	memcpy(ep.dst, rx.dst.b, 16);
	ep.sport = rx.src.port;
	ep.dport = port_->port();
	// In two parts: a result relayed down the tree reuses its payload's.
	const size_t split = kBthBytes + kCethBytes;
	const uint32_t head = icrc_head(ep, rx.data, split, len);
	const uint32_t whole = crc32_update(head, rx.data + split, len - split);
	if (~whole != load_icrc(rx.data + len)) {
		gone_.drop_icrc++;
		IBVC_DEBUG("switch", "{}: bad icrc from {}:{}", p_.name, rx.src.ip.str(),
			   rx.src.port);
		return false;
	}
	Bth bth = Bth::load(rx.data);
	if (!is_coll_opcode(bth.opcode) || bth.opcode > kCollKindLast) {
		gone_.drop_kind++;
		return false;
	}
	if (Bth::tver(rx.data) != 0 || bth.pkey != kDefaultPkey ||
	    len < kBthBytes + kCethBytes + bth.pad) {
		gone_.drop_malformed++;
		return false;
	}
	p.kind = bth.opcode;
	p.h = Ceth::load(rx.data + kBthBytes);
	p.payload = rx.data + kBthBytes + kCethBytes;
	p.paylen = uint32_t(len - kBthBytes - kCethBytes - bth.pad);
	p.src = rx.src;
	p.dst = rx.dst;
	p.tail_crc = rx.data[0] == kCollResult ? whole ^ crc32_shift(head, len - split) : 0;
	if (p.paylen != p.h.len) {
		gone_.drop_malformed++;
		return false;
	}
	return true;
}

void Switch::send_to(Job &j, const Endpoint &dst, const IpAddr &src, uint32_t qpn, uint8_t kind,
		     const Ceth &h0, const void *task, const void *payload, uint32_t len,
		     const uint32_t *lend_crc)
{
	j.ctr.tx_packets++;
	j.ctr.tx_bytes += len;
	uint8_t *buf = port_->tx_buf();
	Bth bth;
	bth.opcode = kind;
	bth.dqpn = qpn;
	bth.psn = h0.sid & kPsnMask;
	bth.store(buf);
	Ceth h = h0;
	size_t off = kBthBytes + kCethBytes;
	uint32_t tlen = task ? uint32_t(sw::kTaskBytes) : 0;
	h.len = uint16_t(len + tlen);
	// Every packet carries the incarnation the switch serves, but the
	// ABORT that tells a member of an older one so, which carries its.
	if (!(h.flags & kCethSuperseded) || kind != kCollAbort)
		h.inc = j.inc;
	h.store(buf + kBthBytes);
	if (task)
		memcpy(buf + off, task, tlen);
	const bool lend = lend_crc && len;
	if (len && !lend)
		memcpy(buf + off + tlen, payload, len);
	// The task's length is a multiple of 4: the pad is the payload's.
	uint32_t paylen = len + tlen;
	uint32_t pad = (4 - (paylen & 3)) & 3;
	buf[1] = uint8_t((buf[1] & ~0x30) | pad << 4);
	size_t roce_len = off + paylen + pad;
	UdpEndpoints ep;
	memcpy(ep.src, src.b, 16);
	memcpy(ep.dst, dst.ip.b, 16);
	ep.sport = port_->port();
	ep.dport = dst.port;
	if (lend) {
		size_t hdr = off + tlen;
		uint8_t *trailer = buf + hdr;
		memset(trailer, 0, pad);
		store_icrc(trailer + pad,
			   icrc_finish(icrc_head(ep, buf, hdr, roce_len), *lend_crc, len + pad));
		port_->tx_commit_split(hdr, static_cast<const uint8_t *>(payload), len,
				       pad + kIcrcBytes, dst, src);
		return;
	}
	memset(buf + off + paylen, 0, pad);
	store_icrc(buf + roce_len, icrc(ep, buf, roce_len));
	port_->tx_commit(roce_len + kIcrcBytes, dst, src);
}

void Switch::seal(SegUnit &u)
{
	const uint32_t pad = (4 - (u.len & 3)) & 3;
	u.crc = crc32_update(0, u.data, u.len);
	if (pad)
		u.crc = crc32_shift(u.crc, pad);
}

} // namespace ibv_coll::emu
