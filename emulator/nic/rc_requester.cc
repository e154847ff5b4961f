// RC requester and completer: turns send WQEs into packets (segmented to
// the path MTU), keeps a window of PSNs in flight, and retires WQEs as
// ACKs and read responses arrive.
// Loss: selective repeat first.  On a sequence NAK (or a timeout) only the
// missing packet goes again, with AckReq; a responder that kept what
// followed the gap (ours, IBV_COLL_EMU_RC_OOO) answers with an ACK past it
// or a NAK of the next gap, and only that goes again.  A standard
// responder dropped what followed and answers with an ACK of exactly the
// packet sent again: then the requester goes back N from there.  Read
// responses that arrive past a gap, and RNR NAKs, go back N.
#include "nic/engine.h"

#include "util/clock.h"
#include "util/log.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

namespace {

uint32_t npkts_of(uint64_t len, uint32_t mtu)
{
	uint64_t n = (len + mtu - 1) / mtu;
	return n ? uint32_t(n) : 1;
}

bool is_read(const SendWqe *w)
{
	return WrOpcode(w->opcode) == WrOpcode::rdma_read;
}

bool has_imm(const SendWqe *w)
{
	return WrOpcode(w->opcode) == WrOpcode::send_imm ||
	       WrOpcode(w->opcode) == WrOpcode::rdma_write_imm;
}

bool is_send(const SendWqe *w)
{
	return WrOpcode(w->opcode) == WrOpcode::send || WrOpcode(w->opcode) == WrOpcode::send_imm;
}

// Whether psn lies in [first, first + n).
bool psn_in(uint32_t psn, uint32_t first, uint32_t n)
{
	int32_t d = psn_diff(psn, first);
	return d >= 0 && uint32_t(d) < n;
}

} // namespace

// The DMA check of a WQE's local buffers, repeated before every packet so
// that a region deregistered mid-message is never touched.
static bool local_sges_ok(Engine &e, const Qp &qp, const SendWqe *w, uint32_t need)
{
	for (uint32_t i = 0; i < w->num_sge; i++) {
		const Sge &s = w->sges()[i];
		if (s.length && e.mrs.check(s.lkey, qp.pdn, s.addr, s.length, need) != DmaErr::ok)
			return false;
	}
	return true;
}

static unsigned reads_in_flight(const Qp &qp)
{
	unsigned n = 0;
	uint32_t mask = qp.sq->slots() - 1;
	for (uint32_t i = qp.sq->cons(); i != qp.req_idx; i++) {
		const WqeMeta &m = qp.meta[i & mask];
		if (m.started && !m.done && is_read(qp.sq->at<SendWqe>(i)))
			n++;
	}
	return n;
}

// One packet at a time is timed for the congestion window: one that asks
// for its ACK at once (the responder coalesces the others), never one
// sent again (Karn).
static void cc_time(Qp &qp, const Bth &bth, uint64_t now)
{
	if (bth.ack_req && !qp.cc_sent && bth.psn == qp.sent_psn) {
		qp.cc_psn = bth.psn;
		qp.cc_sent = now;
	}
}

// The probe timer: while packets are outstanding and the oldest makes no
// progress for 8 round trips (2 ms at least: a loaded host may not run the
// peer for that long), doubling with each probe, the oldest goes again
// alone (a tail loss, a lost NAK or ACK, a resend lost in turn), long
// before the transport timeout.  No round trip measured yet, or a wait
// beyond the timeout: no probe.
static void arm_probe(Qp &qp, uint64_t now)
{
	const uint64_t wait = std::max<uint64_t>(8 * qp.srtt, 2 * util::kNsPerMs)
			      << std::min<uint32_t>(qp.sr_probes, 8);
	qp.sr_deadline = qp.srtt && wait < qp.rto_ns ? now + wait : 0;
}

// Send the packet at the cursor (req_idx, req_off, req_psn) and move the
// cursor past it; false if the WQE's local buffers fail their check (the
// WQE completes in error once it is the oldest).  force_ack: ask for the
// ACK at once (a packet sent again alone).
static bool send_one(Engine &e, Qp &qp, uint64_t now, bool force_ack)
{
	SendWqe *w = qp.sq->at<SendWqe>(qp.req_idx);
	WqeMeta &m = qp.meta[qp.req_idx & (qp.sq->slots() - 1)];
	const uint32_t mtu = qp.mtu();
	if (!local_sges_ok(e, qp, w, is_read(w) ? uint32_t(kAccLocalWrite) : 0u)) {
		IBVC_WARN("emu", "{}: qp {:#x} wr_id {:#x}: local protection error", e.params.name,
			  qp.qpn, w->wr_id);
		// Everything before this WQE must still complete normally, so
		// the error waits until it is the oldest.
		if (qp.sq->cons() == qp.req_idx) {
			e.complete_send(qp, qp.req_idx, WcStatus::loc_prot_err, true);
			e.qp_to_error(qp, "local protection error");
		}
		return false;
	}
	// A PSN below the highest sent goes again: counted as such, and
	// never timed (Karn).
	const bool again = psn_diff(qp.req_psn, qp.sent_psn) < 0;
	uint8_t *ext;
	Bth bth;
	bth.psn = qp.req_psn;
	if (is_read(w)) {
		bth.opcode = kReadRequest;
		bth.ack_req = true;
		cc_time(qp, bth, now);
		uint8_t *pkt = e.tx_begin(qp, bth, kRethBytes, &ext);
		Reth r{w->remote_addr + qp.req_off, w->rkey, uint32_t(w->length - qp.req_off)};
		r.store(ext);
		e.tx_finish(qp, pkt, kBthBytes + kRethBytes, 0);
		qp.req_psn = psn_add(m.first_psn, m.npkts);
		qp.req_idx++;
		qp.req_off = 0;
		qp.pkts_since_ackreq = 0;
		if (again)
			e.ctr.tx_retransmits++;
		return true;
	}
	uint64_t left = w->length - qp.req_off;
	uint32_t plen = uint32_t(std::min<uint64_t>(left, mtu));
	bool first = qp.req_off == 0, last = plen == left;
	bool write = !is_send(w), imm = last && has_imm(w);
	if (write)
		bth.opcode = first && last ? (imm ? kWriteOnlyImm : kWriteOnly)
			     : first	   ? kWriteFirst
			     : last	   ? (imm ? kWriteLastImm : kWriteLast)
					   : kWriteMiddle;
	else
		bth.opcode = first && last ? (imm ? kSendOnlyImm : kSendOnly)
			     : first	   ? kSendFirst
			     : last	   ? (imm ? kSendLastImm : kSendLast)
					   : kSendMiddle;
	bth.se = last && (w->flags & kWqeSolicited) &&
		 (!write || WrOpcode(w->opcode) == WrOpcode::rdma_write_imm);
	// The packet that fills the congestion window asks too: the window
	// opens only with an ACK.
	bth.ack_req = force_ack || last || ++qp.pkts_since_ackreq >= e.params.cfg.ack_req_every ||
		      psn_diff(qp.req_psn, qp.una) + 1 >= int32_t(qp.cc.window());
	if (bth.ack_req)
		qp.pkts_since_ackreq = 0;
	cc_time(qp, bth, now);
	size_t ext_len = (write && first ? kRethBytes : 0) + (imm ? kImmBytes : 0);
	uint8_t *pkt = e.tx_begin(qp, bth, ext_len, &ext);
	if (write && first) {
		Reth r{w->remote_addr, w->rkey, w->length};
		r.store(ext);
		ext += kRethBytes;
	}
	if (imm) {
		memcpy(ext, &w->imm, 4); // already network order
		ext += kImmBytes;
	}
	SgeCursor c{w->sges(), w->num_sge, qp.space};
	c.seek(qp.req_off);
	if (!c.gather(ext, plen)) { // another process's memory went away
		if (qp.sq->cons() == qp.req_idx)
			e.complete_send(qp, qp.req_idx, WcStatus::loc_prot_err, true);
		e.qp_to_error(qp, "local memory not readable");
		return false;
	}
	e.tx_finish(qp, pkt, kBthBytes + ext_len, plen);
	qp.req_psn = psn_add(qp.req_psn, 1);
	qp.req_off += plen;
	if (last) {
		qp.req_idx++;
		qp.req_off = 0;
	}
	if (again) {
		e.ctr.tx_retransmits++;
		e.ctr.cc.retrans_bytes += plen;
	}
	return true;
}

bool Engine::req_progress(Qp &qp, uint64_t now)
{
	if (qp.rnr_deadline)
		return false;
	bool did = false;
	const uint32_t mask = qp.sq->slots() - 1;
	const uint32_t prod = qp.sq->prod();
	// The congestion window (nic/cc.h) in packets: from 16 up to the
	// QP's window; a round trip crosses the queue each way.
	if (!qp.cc.ready())
		qp.cc.init(&params.cfg.cc, &ctr.cc, 16, params.cfg.rc_window, 2);
	while (qp.req_idx != prod && qp.state == QpState::rts) {
		const int32_t inflight = psn_diff(qp.req_psn, qp.una);
		if (inflight >= int32_t(params.cfg.rc_window) ||
		    !qp.cc.may_send(uint32_t(std::max(inflight, 0)), now))
			break;
		SendWqe *w = qp.sq->at<SendWqe>(qp.req_idx);
		WqeMeta &m = qp.meta[qp.req_idx & mask];
		if (!m.started) {
			if ((w->flags & kWqeFence) && reads_in_flight(qp))
				break;
			if (is_read(w) && reads_in_flight(qp) >= qp.attr.max_rd_atomic)
				break;
			m.first_psn = qp.npsn;
			m.npkts = npkts_of(w->length, qp.mtu());
			m.read_rcvd = 0;
			m.started = true;
			m.done = false;
			qp.npsn = psn_add(qp.npsn, m.npkts);
			qp.req_off = 0;
			qp.req_psn = m.first_psn;
		}
		qp.cc.on_send(now);
		if (!send_one(*this, qp, now, false))
			break;
		if (psn_diff(qp.req_psn, qp.sent_psn) > 0)
			qp.sent_psn = qp.req_psn;
		if (!qp.rto_deadline)
			qp.rto_deadline = now + qp.rto_ns;
		if (!qp.sr_deadline)
			arm_probe(qp, now);
		did = true;
	}
	return did;
}

// Retire, in order, every WQE that is fully acknowledged (or, for a read,
// fully placed).
static void complete_acked(Engine &e, Qp &qp)
{
	const uint32_t mask = qp.sq->slots() - 1;
	while (qp.sq->cons() != qp.sq->prod()) {
		uint32_t idx = qp.sq->cons();
		WqeMeta &m = qp.meta[idx & mask];
		if (!m.started)
			break;
		const SendWqe *w = qp.sq->at<SendWqe>(idx);
		if (is_read(w)) {
			if (m.read_rcvd < m.npkts)
				break;
		} else if (psn_diff(psn_add(m.first_psn, m.npkts - 1), qp.una) >= 0) {
			break;
		}
		e.complete_send(qp, idx, WcStatus::success, false);
	}
}

// The PSN to go back to: the first byte the responder has not confirmed.
static uint32_t retry_point(const Qp &qp)
{
	const uint32_t mask = qp.sq->slots() - 1;
	uint32_t idx = qp.sq->cons();
	if (idx != qp.sq->prod()) {
		const WqeMeta &m = qp.meta[idx & mask];
		if (m.started && is_read(qp.sq->at<SendWqe>(idx)))
			return psn_add(m.first_psn, m.read_rcvd);
	}
	return qp.una;
}

// held: how long the acknowledgement waited at this host before now (the
// socket's timestamp): not the network's delay.
static void advance_una(Engine &e, Qp &qp, uint32_t una, uint64_t now, uint64_t held = 0)
{
	if (psn_diff(una, qp.una) > 0) {
		if (qp.cc_sent && psn_diff(una, qp.cc_psn) > 0) {
			const uint64_t rtt = now - qp.cc_sent;
			qp.cc.on_rtt_sample(rtt, Holding{held, held}, now);
			qp.srtt = qp.srtt ? (7 * qp.srtt + rtt) / 8 : rtt;
			qp.cc_sent = 0;
		}
		qp.cc.on_ack(uint32_t(psn_diff(una, qp.una)), now);
		qp.una = una;
		qp.retries_left = qp.attr.retry_cnt;
		qp.rnr_left = qp.attr.rnr_retry;
		qp.rto_deadline = now + qp.rto_ns;
		qp.sr_probes = 0;
		if (una == qp.sent_psn)
			qp.sr_deadline = 0;
		else
			arm_probe(qp, now);
		// An acknowledgement beyond the resend point: skip what it covers.
		if (psn_diff(qp.una, qp.req_psn) > 0 && psn_diff(qp.una, qp.npsn) <= 0)
			e.req_retry_from(qp, qp.una);
	}
	complete_acked(e, qp);
	if (qp.sq->cons() == qp.sq->prod() ||
	    (qp.una == qp.sent_psn && !reads_in_flight(qp) && qp.sq->cons() == qp.req_idx))
		qp.rto_deadline = 0;
}

void Engine::req_retry_from(Qp &qp, uint32_t psn)
{
	const uint32_t mask = qp.sq->slots() - 1;
	uint32_t idx = qp.sq->cons();
	for (; idx != qp.sq->prod(); idx++) {
		const WqeMeta &m = qp.meta[idx & mask];
		if (!m.started)
			break;
		if (psn_in(psn, m.first_psn, m.npkts)) {
			qp.req_idx = idx;
			qp.req_off = uint64_t(psn_diff(psn, m.first_psn)) * qp.mtu();
			qp.req_psn = psn;
			qp.pkts_since_ackreq = 0;
			qp.gbn_psn = psn;
			qp.sr_active = false;
			qp.sr_deadline = 0;
			// What goes again is no round-trip sample (Karn);
			// send_one counts each packet sent again.
			qp.cc_sent = 0;
			return;
		}
	}
	// psn is where the next new WQE starts: nothing to resend.
	qp.req_idx = idx;
	qp.req_off = 0;
	qp.req_psn = qp.npsn;
}

// Whether the cursor is going back over PSNs already sent.
static bool going_back(const Qp &qp)
{
	return psn_diff(qp.req_psn, qp.sent_psn) < 0;
}

// The packet at psn was lost (a sequence NAK names it, or the timer ran
// out on it): send it again alone, asking for its ACK, and keep sending
// new packets after sent_psn.  What the answer says decides the rest
// (sr_answer).  Going back over a read's responses, or while a go-back is
// under way, stays go-back-N.
void Engine::req_resend(Qp &qp, uint32_t psn, uint64_t now)
{
	const uint32_t mask = qp.sq->slots() - 1;
	uint32_t idx = qp.sq->cons();
	for (; idx != qp.sq->prod() && qp.meta[idx & mask].started; idx++) {
		const WqeMeta &m = qp.meta[idx & mask];
		if (psn_in(psn, m.first_psn, m.npkts))
			break;
	}
	if (going_back(qp) || idx == qp.sq->prod() || !qp.meta[idx & mask].started ||
	    is_read(qp.sq->at<SendWqe>(idx))) {
		req_retry_from(qp, psn);
		return;
	}
	const uint32_t save_idx = qp.req_idx, save_psn = qp.req_psn,
		       save_ack = qp.pkts_since_ackreq;
	const uint64_t save_off = qp.req_off;
	qp.req_idx = idx;
	qp.req_off = uint64_t(psn_diff(psn, qp.meta[idx & mask].first_psn)) * qp.mtu();
	qp.req_psn = psn;
	qp.cc_sent = 0; // Karn
	const bool sent = send_one(*this, qp, now, true);
	if (qp.state != QpState::rts)
		return;
	qp.req_idx = save_idx;
	qp.req_off = save_off;
	qp.req_psn = save_psn;
	qp.pkts_since_ackreq = save_ack;
	if (!sent)
		return;
	qp.sr_active = true;
	qp.sr_psn = psn;
	ctr.cc.fast_retrans++;
	// Its answer is due within the round trip: if none comes, the probe
	// timer sends it again, waiting twice as long.
	arm_probe(qp, now);
	qp.sr_probes++;
}

// An acknowledgement that covers the PSN sent again alone: if it is an
// ACK of exactly that PSN while more are outstanding, the responder kept
// none of them (a standard responder drops what follows a gap): go back.
// An ACK beyond it, or a NAK of a later gap, means the responder kept
// them; only the next gap goes again.
static void sr_answer(Engine &e, Qp &qp, bool ack)
{
	if (!qp.sr_active || psn_diff(qp.una, qp.sr_psn) <= 0)
		return;
	qp.sr_active = false;
	if (ack && qp.una == psn_add(qp.sr_psn, 1) && psn_diff(qp.sent_psn, qp.una) > 0 &&
	    !going_back(qp))
		e.req_retry_from(qp, qp.una);
}

// Complete the WQE holding psn (and anything acknowledged before it) with
// an error reported by the responder, and stop the QP.
static void remote_error(Engine &e, Qp &qp, uint32_t psn, WcStatus st, const char *why)
{
	advance_una(e, qp, psn, e.params.clock->now());
	if (qp.sq->cons() != qp.sq->prod())
		e.complete_send(qp, qp.sq->cons(), st, true);
	e.qp_to_error(qp, why);
}

void Engine::req_on_ack(Qp &qp, const InPacket &p)
{
	const uint32_t psn = p.bth.psn;
	const Aeth a = Aeth::load(p.ext);
	// A response must name a PSN we have sent; anything else is stale or
	// forged.
	if (psn_diff(psn, qp.sent_psn) >= 0 || psn_diff(psn, qp.una) < -1) {
		ctr.rx_dup++;
		qp.stale_answers++;
		return;
	}
	uint64_t now = params.clock->now();
	qp.answered_at = now;
	// The responder is alive: the transport timer restarts.
	if (qp.rto_deadline)
		qp.rto_deadline = now + qp.rto_ns;
	switch (aeth_kind(a.syndrome)) {
	case AethKind::ack:
		advance_una(*this, qp, psn_add(psn, 1), now, p.held(now));
		sr_answer(*this, qp, true);
		break;
	case AethKind::rnr_nak:
		ctr.rnr_naks_rcvd++;
		advance_una(*this, qp, psn, now);
		qp.rnr_psn = psn;
		qp.rnr_deadline = now + uint64_t(rnr_timer_us(a.syndrome & 31)) * util::kNsPerUs;
		qp.rto_deadline = 0; // re-armed when the RNR wait ends
		req_retry_from(qp, psn);
		break;
	case AethKind::nak:
		switch (a.syndrome) {
		case kSynNakSeqErr:
			ctr.seq_naks_rcvd++;
			advance_una(*this, qp, psn, now);
			sr_answer(*this, qp, false);
			// Once per gap; a NAK of where a go-back started was
			// answered by it.
			if (psn != qp.last_nak_psn && !(going_back(qp) && psn == qp.gbn_psn) &&
			    psn_diff(psn, qp.sent_psn) < 0) {
				qp.last_nak_psn = psn;
				qp.cc.on_loss(now, false);
				req_resend(qp, psn, now);
			}
			break;
		case kSynNakInvReq:
			remote_error(*this, qp, psn, WcStatus::rem_inv_req_err,
				     "remote invalid request");
			break;
		case kSynNakRemAccess:
			remote_error(*this, qp, psn, WcStatus::rem_access_err,
				     "remote access error");
			break;
		default:
			remote_error(*this, qp, psn, WcStatus::rem_op_err,
				     "remote operational error");
			break;
		}
		break;
	default: ctr.rx_malformed++; break;
	}
}

void Engine::req_on_read_resp(Qp &qp, const InPacket &p)
{
	const uint32_t psn = p.bth.psn;
	const uint32_t mask = qp.sq->slots() - 1;
	uint32_t idx = qp.sq->cons();
	for (; idx != qp.req_idx; idx++) {
		const WqeMeta &m = qp.meta[idx & mask];
		if (is_read(qp.sq->at<SendWqe>(idx)) && psn_in(psn, m.first_psn, m.npkts))
			break;
	}
	if (idx == qp.req_idx) {
		ctr.rx_dup++;
		qp.stale_answers++;
		return;
	}
	qp.answered_at = params.clock->now();
	WqeMeta &m = qp.meta[idx & mask];
	const SendWqe *w = qp.sq->at<SendWqe>(idx);
	const uint32_t expect = psn_add(m.first_psn, m.read_rcvd);
	if (m.done || psn_diff(psn, expect) < 0) {
		ctr.rx_dup++;
		return;
	}
	if (psn != expect) {
		// A response went missing: ask again from the gap, once per gap.
		if (qp.last_nak_psn != expect) {
			qp.last_nak_psn = expect;
			qp.cc.on_loss(params.clock->now(), false);
			req_retry_from(qp, expect);
		}
		return;
	}
	if ((p.flags & kHasAeth) && aeth_kind(Aeth::load(p.ext).syndrome) != AethKind::ack) {
		remote_error(*this, qp, psn, WcStatus::rem_access_err, "read refused");
		return;
	}
	const uint64_t off = uint64_t(m.read_rcvd) * qp.mtu();
	const uint32_t want = uint32_t(std::min<uint64_t>(w->length - off, qp.mtu()));
	if (p.paylen != want) {
		remote_error(*this, qp, psn, WcStatus::bad_resp_err,
			     "read response of wrong length");
		return;
	}
	if (!local_sges_ok(*this, qp, w, kAccLocalWrite)) {
		advance_una(*this, qp, psn, params.clock->now());
		if (qp.sq->cons() == idx)
			complete_send(qp, idx, WcStatus::loc_prot_err, true);
		qp_to_error(qp, "local protection error on read response");
		return;
	}
	SgeCursor c{w->sges(), w->num_sge, qp.space};
	c.seek(off);
	if (!c.scatter(p.payload, want)) {
		if (qp.sq->cons() == idx)
			complete_send(qp, idx, WcStatus::loc_prot_err, true);
		qp_to_error(qp, "local memory not writable on read response");
		return;
	}
	m.read_rcvd++;
	if (m.read_rcvd == m.npkts)
		m.done = true;
	const uint64_t now = params.clock->now();
	advance_una(*this, qp, psn_add(psn, 1), now, p.held(now));
}

void Engine::req_timers(Qp &qp, uint64_t now)
{
	if (qp.rnr_deadline && now >= qp.rnr_deadline) {
		qp.rnr_deadline = 0;
		if (qp.attr.rnr_retry != 7) {
			if (!qp.rnr_left) {
				remote_error(*this, qp, qp.rnr_psn, WcStatus::rnr_retry_exc_err,
					     "rnr retries exhausted");
				return;
			}
			qp.rnr_left--;
		}
		req_retry_from(qp, qp.rnr_psn);
		qp.rto_deadline = now + qp.rto_ns;
	}
	if (qp.sr_deadline && now >= qp.sr_deadline) {
		// No progress for several round trips: probe with the oldest
		// packet (not during a go-back or an RNR wait, nor for a read,
		// whose responses the responder paces).
		qp.sr_deadline = 0;
		if (qp.una != qp.sent_psn && !going_back(qp) && !qp.rnr_deadline &&
		    !reads_in_flight(qp) && qp.state == QpState::rts)
			req_resend(qp, qp.una, now);
	}
	if (qp.rto_deadline && now >= qp.rto_deadline) {
		if (qp.sq->cons() == qp.req_idx && qp.una == qp.sent_psn) {
			qp.rto_deadline = 0;
			return;
		}
		ctr.timeouts++;
		if (!qp.retries_left) {
			// Whether the peer went silent or its answers named PSNs
			// not in flight tells a stalled host from a transport bug.
			IBVC_WARN("emu",
				  "{}: qp {:#x}: no answer from {}:{} after {} retries (last "
				  "answer {}, {} dropped as stale; psn {:#x} unacked, "
				  "{} in flight, window {}; this timer {} us late)",
				  params.name, qp.qpn, qp.attr.remote.ip.str(), qp.attr.remote.port,
				  qp.attr.retry_cnt,
				  qp.answered_at ? std::to_string((now - qp.answered_at) /
								  util::kNsPerUs) +
							   " us ago"
						 : std::string("never"),
				  qp.stale_answers, retry_point(qp), psn_diff(qp.sent_psn, qp.una),
				  qp.cc.window(), (now - qp.rto_deadline) / util::kNsPerUs);
			if (qp.sq->cons() != qp.sq->prod())
				complete_send(qp, qp.sq->cons(), WcStatus::retry_exc_err, true);
			qp_to_error(qp, "transport retries exhausted");
			return;
		}
		qp.retries_left--;
		qp.last_nak_psn = 0xffffffff;
		qp.cc.on_loss(now);
		// The oldest packet alone: the answer says whether the
		// responder kept the rest (req_resend falls back to going back
		// for reads and during a go-back).
		const uint32_t from = retry_point(qp);
		if (from == qp.una)
			req_resend(qp, from, now);
		else
			req_retry_from(qp, from);
		qp.rto_deadline = now + qp.rto_ns;
	}
}

} // namespace ibv_coll::emu
