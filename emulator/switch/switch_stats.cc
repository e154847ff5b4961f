// The switch's answer to STATS (coll/swproto.h): its counters, for
// ibv_coll_stat(8), in a reply no longer than the request.
#include "switch/switch.h"

#include "util/log.h"
#include "wire/icrc.h"
#include "wire/roce.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

void Switch::on_stats(const In &p)
{
	// Room for the name at least; the reply's headers are the request's.
	if (p.paylen < sw::kStatsNameBytes) {
		gone_.drop_malformed++;
		return;
	}
	gone_.delivered++;
	const std::vector<NamedCounter> recs = stat_records();
	const size_t fit = (p.paylen - sw::kStatsNameBytes) / sw::kStatsRecordBytes;
	const size_t first = std::min<size_t>(p.h.sid, recs.size());
	const size_t n = std::min(fit, recs.size() - first);
	const uint32_t paylen = uint32_t(sw::kStatsNameBytes + n * sw::kStatsRecordBytes);

	uint8_t *buf = port_->tx_buf();
	Bth bth;
	bth.opcode = kCollStatsReply;
	bth.dqpn = 0; // an asker is a UDP socket, not a QP
	bth.psn = p.h.mid & kPsnMask;
	bth.store(buf);
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.mid = p.h.mid;
	h.sid = p.h.sid;
	h.seg = uint16_t(std::min<size_t>(recs.size(), UINT16_MAX));
	h.len = uint16_t(paylen);
	h.store(buf + kBthBytes);
	uint8_t *out = buf + kBthBytes + kCethBytes;
	memset(out, 0, paylen);
	memcpy(out, p_.name.data(), std::min(p_.name.size(), sw::kStatsNameBytes - 1));
	for (size_t i = 0; i < n; i++) {
		uint8_t *r = out + sw::kStatsNameBytes + i * sw::kStatsRecordBytes;
		const char *key = recs[first + i].first;
		memcpy(r, key, std::min(strlen(key), sw::kStatsKeyBytes - 1));
		store_be64(r + sw::kStatsKeyBytes, recs[first + i].second);
	}
	// Whole records only, so the length is a multiple of 4: no pad.
	const size_t roce_len = kBthBytes + kCethBytes + paylen;
	UdpEndpoints ep;
	memcpy(ep.src, p.dst.b, 16);
	memcpy(ep.dst, p.src.ip.b, 16);
	ep.sport = port_->port();
	ep.dport = p.src.port;
	store_icrc(buf + roce_len, icrc(ep, buf, roce_len));
	port_->tx_commit(roce_len + kIcrcBytes, p.src, p.dst);
	IBVC_DEBUG("switch", "{}: stats to {}:{}, records {}..{} of {}", p_.name, p.src.ip.str(),
		   p.src.port, first, first + n, recs.size());
}

} // namespace ibv_coll::emu
