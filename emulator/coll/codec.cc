// Parse & encapsulate: building collective packets (BTH + CETH + block),
// and parsing and classifying arriving ones before the algorithm sees
// them.  Forged or damaged packets (wrong job key or job, unknown member,
// bad lengths) stop here, counted, and are never reduced.
#include "coll/coll_engine.h"

#include "nic/engine.h"
#include "util/log.h"
#include "wire/roce.h"
#include "wire/swproto.h"

#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

bool CollEngine::parse(const InPacket &p, CollPacket *out)
{
	if (p.bth.opcode < kCollData || p.bth.opcode > kCollKindLast ||
	    p.len < kBthBytes + kCethBytes + p.bth.pad)
		return false;
	out->kind = p.bth.opcode;
	out->h = Ceth::load(p.data + kBthBytes);
	out->payload = p.data + kBthBytes + kCethBytes;
	out->paylen = uint32_t(p.len - kBthBytes - kCethBytes - p.bth.pad);
	out->src = p.src;
	out->crc = out->kind == kCollResult ? &p.tail_crc : nullptr;
	return out->paylen == out->h.len;
}

Ceth CollEngine::header(const CollJob &job, const Message &m, uint32_t sid) const
{
	Ceth h;
	h.coll = uint8_t(m.coll);
	h.op = uint8_t(m.op);
	h.dtype = uint8_t(m.dtype);
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = m.mid;
	h.sid = sid;
	h.seg = uint16_t(seg_of(job, sid));
	h.job_key = job.cfg.key;
	return h;
}

void CollEngine::send(const CollJob &job, uint16_t to, uint8_t kind, const Ceth &h,
		      const Payload &pl, bool other_inc)
{
	const JobMember &dst = job.cfg.members[to];
	send_ep(job, dst.ep, dst.qpn, kind, h, nullptr, 0, pl, other_inc);
}

static_assert(sw::kTaskBytes % 4 == 0, "the pad depends on the payload alone");

void CollEngine::reclaim()
{
	e_.port->tx_reclaim(lent_);
}

uint8_t *CollEngine::tx_payload(uint32_t ext_len)
{
	return e_.port->tx_buf() + kBthBytes + kCethBytes + ext_len;
}

// ext (the task information, to a switch) goes between the CETH and the
// payload.
void CollEngine::send_ep(const CollJob &job, const Endpoint &to, uint32_t qpn, uint8_t kind,
			 const Ceth &h0, const void *ext, uint32_t ext_len, const Payload &pl,
			 bool other_inc)
{
	uint8_t *buf = e_.port->tx_buf();
	Bth bth;
	bth.opcode = kind;
	bth.dqpn = qpn;
	bth.psn = h0.sid & kPsnMask;
	bth.store(buf);
	Ceth h = h0;
	h.len = uint16_t(ext_len + pl.len);
	if (!other_inc)
		h.inc = job.inc;
	h.store(buf + kBthBytes);
	const size_t hdr = kBthBytes + kCethBytes + ext_len;
	if (ext_len)
		memcpy(buf + kBthBytes + kCethBytes, ext, ext_len);
	if (pl.len && pl.lend && pl.data != buf + hdr) {
		e_.tx_split(to, job.src_ip, buf, hdr, pl.data, pl.len, pl.crc);
		lent_ = e_.port->tx_lend_mark();
	} else {
		if (pl.len && pl.data != buf + hdr) // else built in place
			memcpy(buf + hdr, pl.data, pl.len);
		e_.tx_to(to, job.src_ip, buf, hdr, pl.len);
	}
	if (kind == kCollData)
		ctr.tx_data++;
	else if (kind == kCollResult)
		ctr.tx_result++;
	ctr.tx_bytes += pl.len;
}

void CollEngine::on_packet(const InPacket &ip)
{
	CollPacket p;
	if (!parse(ip, &p)) {
		ctr.malformed++;
		return;
	}
	auto it = e_.qps.find(ip.bth.dqpn);
	if (it == e_.qps.end() || !it->second->job) {
		e_.ctr.rx_no_qp++;
		return;
	}
	Qp &qp = *it->second;
	CollJob &job = *qp.job;
	if (p.h.job_key != job.cfg.key) {
		ctr.bad_key++;
		IBVC_DEBUG("coll", "{}: qp {:#x}: packet with a wrong job key from {}:{} dropped",
			   e_.params.name, qp.qpn, p.src.ip.str(), p.src.port);
		return;
	}
	if (p.h.jid != job.cfg.jid) {
		ctr.bad_job++;
		return;
	}
	if (p.h.src_node == sw::kNodeSwitch) {
		// From one of the job's switches, or forged.
		bool known = false;
		for (const Endpoint &e : job.cfg.sw.leaf)
			known |= e == p.src;
		if (!known || qp.state != QpState::rts) {
			ctr.bad_node++;
			return;
		}
		if (p.h.inc != job.inc) {
			ctr.stale_dropped++; // an old incarnation's answer
			return;
		}
		if (p.kind == kCollAbort) {
			// The switch holds a later incarnation of the job.
			ctr.aborts_rcvd++;
			if (p.h.flags & kCethSuperseded)
				superseded(qp, job);
			else
				ctr.malformed++;
			return;
		}
		ctr.rx_bytes += p.paylen;
		sw_on_packet(qp, job, p);
		return;
	}
	if (p.h.src_node >= job.cfg.nodes() || !(job.cfg.members[p.h.src_node].ep == p.src) ||
	    p.h.src_node == job.cfg.node) {
		ctr.bad_node++;
		return;
	}
	if (qp.state != QpState::rts) {
		e_.ctr.rx_bad_state++;
		IBVC_TRACE("coll", "{}: qp {:#x} in state {}: packet {:#x} mid {} sid {} dropped",
			   e_.params.name, qp.qpn, int(qp.state), p.kind, p.h.mid, p.h.sid);
		return;
	}
	if (p.h.inc != job.inc) {
		ctr.stale_dropped++;
		other_incarnation(qp, job, p);
		return;
	}
	ctr.rx_bytes += p.paylen;
	switch (p.kind) {
	case kCollData:
		ctr.rx_data++;
		ring_on_data(qp, job, p);
		break;
	case kCollResult:
		ctr.rx_result++;
		ring_on_result(qp, job, p);
		break;
	case kCollAck:
		sw_on_ack(qp, job, p);
		break;
	case kCollAbort:
		ctr.aborts_rcvd++;
		if (p.h.flags & kCethSuperseded) {
			// Our incarnation is over: another member runs the next.
			superseded(qp, job);
			break;
		}
		if (job.active && job.active->mid == p.h.mid) {
			fail(qp, job, CollStatus::remote_abort, false, "a member aborted the collective");
		} else if (job.ahead(p.h.mid)) {
			job.aborted_mid = p.h.mid;
			job.abort_status = CollStatus::remote_abort;
		}
		break;
	default:
		ctr.malformed++;
		break;
	}
}

// A member's packet of another incarnation of the job, never mixed with
// this one's.  Members reset at their own pace after a failure, so each
// side tells the other at once rather than leave it to its timeout: a
// member still in an older incarnation (its packets arrive here) is sent
// an ABORT of its own incarnation, and a packet of a later one means this
// node's incarnation is over.
void CollEngine::other_incarnation(Qp &qp, CollJob &job, const CollPacket &p)
{
	IBVC_TRACE("coll", "{}: qp {:#x}: incarnation {} packet {:#x} mid {} dropped (ours {})",
		   e_.params.name, qp.qpn, p.h.inc, p.kind, p.h.mid, job.inc);
	if (seq_after(p.h.inc, job.inc)) {
		superseded(qp, job);
		return;
	}
	if (p.kind != kCollData && p.kind != kCollResult && p.kind != kCollAck)
		return; // never answer an ABORT
	wire::Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = p.h.mid;
	h.status = uint8_t(CollStatus::remote_abort);
	h.flags = kCethSuperseded;
	h.job_key = job.cfg.key;
	h.inc = p.h.inc; // the sender's, which it takes
	send(job, p.h.src_node, kCollAbort, h, {}, true);
	ctr.aborts_sent++;
}

// This node's incarnation of the job is over (another member, or the
// switch, has the next): fail the running collective now and tell the
// members still in this incarnation, or the next one when it starts.
void CollEngine::superseded(Qp &qp, CollJob &job)
{
	if (job.superseded)
		return;
	job.superseded = true;
	if (job.active)
		fail(qp, job, CollStatus::remote_abort, true,
		     "the job was given again to another member (a later incarnation)");
}

} // namespace ibv_coll::emu
