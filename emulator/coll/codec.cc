// Parse & encapsulate: the CETH of a message's blocks, and parsing and
// classifying arriving packets before the strategies see them (sending is
// data transmission's, xmit.cc).  Forged or damaged packets (wrong job key or job, unknown member,
// bad lengths) stop here, counted, and are never reduced.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/log.h"
#include "wire/coll_codec.h"
#include "wire/swproto.h"

#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

// The structure of a packet the NIC checked the ICRC of (wire/coll_codec.h).
bool CollEngine::parse(const InPacket &p, CollPacket *out)
{
	CollRx c;
	if (coll_parse(p.data, p.len, &c) != CollError::ok)
		return false;
	out->kind = c.bth.opcode;
	out->h = c.h;
	out->payload = c.payload;
	out->paylen = c.paylen;
	out->src = p.src;
	out->crc = out->kind == kCollResult ? &p.tail_crc : nullptr;
	out->rx_ns = p.rx_ns;
	return true;
}

Ceth CollCore::header(const CollJob &job, const Message &m, uint32_t sid) const
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

// The drop reasons a packet may be counted under (CollCounters).
static uint64_t dropped(const CollCounters &c)
{
	return c.dup_dropped + c.stale_dropped + c.early_stored + c.early_dropped + c.bad_key +
	       c.bad_job + c.bad_block + c.bad_node + c.malformed + c.host_dropped;
}

// Each packet ends in exactly one verdict: one drop reason (counted where
// it is found, by classify() or the strategy), or delivered, counted here
// when no reason moved.
void CollEngine::on_packet(const InPacket &ip)
{
	ctr.rx_packets++;
	const uint64_t before = dropped(ctr);
	classify(ip);
	if (dropped(ctr) == before)
		ctr.delivered++;
}

// A packet from one of the job's switches, or forged as one.
void CollEngine::from_switch(Qp &qp, CollJob &job, const CollPacket &p)
{
	// A node only hears its own leaf of each plane (wire/swproto.h): not
	// a walk of the job's leaves, thousands in a three-level tree.  A job
	// without a switch (a ring) has no leaf: any such packet is forged.
	bool known = false;
	for (uint32_t pl = 0; job.cfg.sw.on && pl < job.cfg.sw.planes && !known; pl++)
		known = sw_.leaf(job, pl) == p.src;
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
	const uint64_t now = e_.now();
	sw_.on_packet(qp, job, p, now);
	settle(qp, job, now);
}

void CollEngine::classify(const InPacket &ip)
{
	CollPacket p;
	if (!parse(ip, &p)) {
		ctr.malformed++;
		return;
	}
	Qp *qpp = e_.find_qp(ip.bth.dqpn);
	if (!qpp || !qpp->job) {
		e_.count_no_qp();
		ctr.host_dropped++;
		return;
	}
	if (qpp->job->lead) { // a QP that joined another: no member sends to it
		ctr.bad_job++;
		return;
	}
	Qp &qp = *qpp;
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
	if (p.h.src_node == sw::kNodeSwitch)
		return from_switch(qp, job, p);
	if (p.h.src_node >= job.cfg.nodes() || !(job.cfg.members[p.h.src_node].ep == p.src) ||
	    p.h.src_node == job.cfg.node) {
		ctr.bad_node++;
		return;
	}
	if (qp.state != QpState::rts) {
		e_.count_bad_state();
		ctr.host_dropped++;
		IBVC_TRACE("coll", "{}: qp {:#x} in state {}: packet {:#x} mid {} sid {} dropped",
			   e_.params.name, qp.qpn, int(qp.state), p.kind, p.h.mid, p.h.sid);
		return;
	}
	if (p.h.inc != job.inc) {
		ctr.stale_dropped++;
		other_incarnation(qp, job, p);
		return;
	}
	// One clock read a packet (a system call's worth on some VMs, and
	// every part of the handling takes the packet's time from it).
	const uint64_t now = e_.now();
	// Congestion on the way here: tell the sender (nic/cc.h).
	if ((ip.ecn & kEcnMask) == kEcnCe) {
		if (job.cnp_at.size() != job.cfg.nodes())
			job.cnp_at.assign(job.cfg.nodes(), 0);
		e_.send_cnp(p.src, job.src_ip, job.cfg.members[p.h.src_node].qpn,
			    &job.cnp_at[p.h.src_node], now);
	}
	ctr.rx_bytes += p.paylen;
	// The ring's packets of a message this node runs as the pairwise
	// exchange (members do not run a message two ways): forged.
	if ((p.kind == kCollData || p.kind == kCollResult ||
	     (p.kind == kCollAck && (p.h.flags & (kCethNak | kCethHop)))) &&
	    job.running(p.h.mid) && job.running(p.h.mid)->path == &xchg_) {
		ctr.malformed++;
		return;
	}
	switch (p.kind) {
	case kCollData:
	case kCollResult:
		if (p.kind == kCollData)
			ctr.rx_data++;
		else
			ctr.rx_result++;
		// AUTO: the sender runs round the ring a message this node has
		// on the switch path (coll/swadmit.cc).
		if (sw_.on_member_ring(qp, job, p, now))
			break;
		settle(qp, job, now);
		ring_.on_packet(qp, job, p, now);
		break;
	case kCollAck:
		// A NAK or a chunk's ACK between ring members (ring_loss.cc),
		// else an end-to-end ACK of the switch path.
		if (p.h.flags & (kCethNak | kCethHop))
			ring_.on_packet(qp, job, p, now);
		else
			sw_.on_packet(qp, job, p, now);
		break;
	case kCollXchg: // a small message's exchange (coll/xchg.cc)
		xchg_.on_packet(qp, job, p, now);
		break;
	case kCollConfigAck: // AUTO: the sender heard no switch (coll/swadmit.cc)
		sw_.on_member_fallback(qp, job, p, now);
		settle(qp, job, now);
		break;
	case kCollAbort:
		ctr.aborts_rcvd++;
		if (p.h.flags & kCethSuperseded) {
			// Our incarnation is over: another member runs the next.
			superseded(qp, job);
			break;
		}
		if (job.running(p.h.mid)) {
			fail(qp, job, CollStatus::remote_abort, false,
			     "a member aborted the collective");
		} else if (job.ahead(p.h.mid)) {
			job.aborted_mid = p.h.mid;
			job.abort_status = CollStatus::remote_abort;
		}
		break;
	default: ctr.malformed++; break;
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

// A CNP from a member: the job's flows between members slow down
// (nic/cc.h).  It may come before any of them ran (a job on the switch
// path, a job with no message yet): then it only counts.
bool CollEngine::on_cnp(Qp &qp, const Endpoint &src, uint64_t now)
{
	bool member = false;
	if (!qp.job || qp.job->lead)
		return false; // a joined QP sends nothing
	for (const JobMember &m : qp.job->cfg.members)
		member |= m.ep == src;
	if (!member)
		return false;
	e_.cc_counters().cnp_rcvd++;
	qp.job->cc.on_cnp(now);
	return true;
}

} // namespace ibv_coll::emu
