// RC responder: carries out requests in PSN order, places SEND data in
// posted receives and RDMA WRITE data in registered memory after the R_Key
// check, answers RDMA READs (paced over engine passes), and acknowledges
// with coalesced ACKs, sequence NAKs, RNR NAKs and error NAKs.
// Requests that arrive past a gap are kept (up to IBV_COLL_EMU_RC_OOO) and
// carried out in order once the gap fills, so that a requester that sends
// again only the missing packet (selective repeat) need not send the rest;
// a go-back-N requester's resends of them are duplicates, acknowledged.
#include "nic/engine.h"

#include "util/log.h"

#include <algorithm>
#include <cerrno>

namespace ibv_coll::emu {

using namespace wire;

void Engine::send_ack(Qp &qp, uint8_t syndrome, uint32_t psn)
{
	Bth bth;
	bth.opcode = kAck;
	bth.psn = psn;
	uint8_t *ext;
	uint8_t *pkt = tx_begin(qp, bth, kAethBytes, &ext);
	Aeth{syndrome, qp.msn}.store(ext);
	tx_finish(qp, pkt, kBthBytes + kAethBytes, 0);
	ctr.acks_sent++;
}

namespace {

enum : uint8_t { kMsgNone = 0, kMsgSend = 1, kMsgWrite = 2 };

bool recv_sges_ok(Engine &e, const Qp &qp, const RecvWqe *r)
{
	for (uint32_t i = 0; i < r->num_sge; i++) {
		const Sge &s = r->sges()[i];
		if (s.length &&
		    e.mrs.check(s.lkey, qp.pdn, s.addr, s.length, kAccLocalWrite) != DmaErr::ok)
			return false;
	}
	return true;
}

} // namespace

// Refuse the request at epsn with a NAK and stop the QP (IBTA class C/D
// responder errors).  Returns false: the request was not carried out.
static bool resp_fatal(Engine &e, Qp &qp, uint8_t syndrome, const char *why)
{
	e.send_ack(qp, syndrome, qp.epsn);
	e.qp_to_error(qp, why);
	qp.ooo.clear();
	return false;
}

// The QP's owner is gone (another process's memory, ESRCH: killed before
// the shared device destroyed its objects): stop the QP without a NAK, as
// a NIC whose QP the kernel is tearing down.  The requester sees silence
// and runs out of retries, as it would once the QP is destroyed.
static bool resp_owner_gone(Engine &e, Qp &qp)
{
	e.qp_to_error(qp, "the process that owns the QP is gone");
	qp.ooo.clear();
	return false;
}

static bool resp_rnr(Engine &e, Qp &qp)
{
	e.send_ack(qp, kSynRnrNak | (qp.attr.min_rnr_timer & 31), qp.epsn);
	e.ctr.rnr_naks_sent++;
	return false;
}

// Ask for the request at epsn, once per gap.  The NAK acknowledges all
// before it, so a coalesced ACK due goes with it.
static void resp_nak_gap(Engine &e, Qp &qp)
{
	if (qp.nak_sent)
		return;
	qp.nak_sent = true;
	qp.ack_due = false;
	e.send_ack(qp, kSynNakSeqErr, qp.epsn);
	e.ctr.seq_naks_sent++;
}

// A request d PSNs past epsn: kept in the reorder buffer when it fits
// (IBV_COLL_EMU_RC_OOO), dropped otherwise as a standard responder does;
// the gap is NAKed either way.
static void resp_keep(Engine &e, Qp &qp, const InPacket &p, int32_t d)
{
	const uint32_t cap = e.params.cfg.rc_ooo;
	if (uint32_t(d) <= cap) {
		if (qp.ooo.size() >= cap) // drop what the gap's filling passed by
			std::erase_if(qp.ooo, [&](const auto &kv) {
				return psn_diff(kv.first, qp.epsn) < 0;
			});
		auto [it, fresh] = qp.ooo.try_emplace(p.bth.psn);
		if (!fresh) {
			e.ctr.rx_dup++;
		} else if (qp.ooo.size() > cap) {
			qp.ooo.erase(it);
		} else {
			OooPacket &k = it->second;
			k.bytes.assign(p.data, p.data + p.len);
			k.bth = p.bth;
			k.flags = p.flags;
			k.ext_off = uint32_t(p.ext - p.data);
			k.pay_off = uint32_t(p.payload - p.data);
			k.paylen = p.paylen;
		}
	}
	resp_nak_gap(e, qp);
}

// A request before epsn: its ACK was lost, or a go-back resent it.
static void resp_duplicate(Engine &e, Qp &qp, const InPacket &p)
{
	const uint32_t mtu = qp.mtu();
	e.ctr.rx_dup++;
	if (!(p.flags & kRead)) {
		qp.ack_due = true;
		return;
	}
	// A repeated read: answer it again from the PSN it names.
	Reth r = Reth::load(p.ext);
	if (r.len && (!(qp.attr.access & kAccRemoteRead) ||
		      e.mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteRead) != DmaErr::ok))
		return;
	uint32_t n = (uint32_t)std::max<uint64_t>(1, (uint64_t(r.len) + mtu - 1) / mtu);
	std::erase_if(qp.reads, [&](const ReadJob &j) {
		return psn_diff(j.psn, p.bth.psn) >= 0 &&
		       psn_diff(j.psn, psn_add(p.bth.psn, n)) < 0;
	});
	qp.reads.push_back(ReadJob{r.va, r.len, p.bth.psn, p.bth.psn, 0, r.rkey});
}

// The opcode sequence and payload length of the request at epsn.
static bool resp_opcode_ok(Engine &e, Qp &qp, const InPacket &p)
{
	const uint16_t f = p.flags;
	if (f & (kSend | kWrite)) {
		const bool first = f & kFirst, last = f & kLast;
		const uint8_t cls = f & kSend ? kMsgSend : kMsgWrite;
		if (qp.in_msg ? (first || qp.in_msg != cls) : !first)
			return resp_fatal(e, qp, kSynNakInvReq, "opcode out of sequence");
		if (p.paylen > qp.mtu() || (!last && p.paylen != qp.mtu()))
			return resp_fatal(e, qp, kSynNakInvReq, "payload does not fit the mtu");
	} else if (qp.in_msg) {
		return resp_fatal(e, qp, kSynNakInvReq, "read inside a message");
	}
	return true;
}

// A SEND packet at epsn into the oldest posted receive.
static bool resp_send(Engine &e, Qp &qp, const InPacket &p)
{
	const uint16_t f = p.flags;
	if (qp.rq->cons() == qp.rq->prod())
		return resp_rnr(e, qp);
	RecvWqe *r = qp.rq->at<RecvWqe>(qp.rq->cons());
	if (f & kFirst)
		qp.msg_off = 0;
	if (qp.msg_off + p.paylen > r->length) {
		e.complete_recv(qp, WcStatus::loc_len_err, WcOpcode::recv, qp.msg_off, 0, 0);
		return resp_fatal(e, qp, kSynNakInvReq, "send longer than the receive");
	}
	if (!recv_sges_ok(e, qp, r)) {
		e.complete_recv(qp, WcStatus::loc_prot_err, WcOpcode::recv, qp.msg_off, 0, 0);
		return resp_fatal(e, qp, kSynNakRemOpErr, "receive buffer not accessible");
	}
	SgeCursor c{r->sges(), r->num_sge, qp.space};
	c.seek(qp.msg_off);
	if (!c.scatter(p.payload, p.paylen)) {
		if (errno == ESRCH)
			return resp_owner_gone(e, qp);
		e.complete_recv(qp, WcStatus::loc_prot_err, WcOpcode::recv, qp.msg_off, 0, 0);
		return resp_fatal(e, qp, kSynNakRemOpErr, "receive buffer not writable");
	}
	qp.msg_off += p.paylen;
	if (!(f & kLast)) {
		qp.in_msg = kMsgSend;
		return true;
	}
	uint32_t imm = 0;
	uint8_t flags = p.bth.se ? kCqeSolicited : 0;
	if (f & kHasImm) {
		memcpy(&imm, p.ext, 4);
		flags |= kCqeWithImm;
	}
	e.complete_recv(qp, WcStatus::success, WcOpcode::recv, qp.msg_off, imm, flags);
	qp.msn = psn_add(qp.msn, 1);
	qp.in_msg = kMsgNone;
	return true;
}

// An RDMA WRITE packet at epsn: the R_Key checked on the first, the
// region again on every packet (it may have gone since the first).
static bool resp_write(Engine &e, Qp &qp, const InPacket &p)
{
	const uint16_t f = p.flags;
	const uint8_t *ext = p.ext;
	if (f & kFirst) {
		Reth r = Reth::load(ext);
		ext += kRethBytes;
		if (r.len &&
		    (!(qp.attr.access & kAccRemoteWrite) ||
		     e.mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteWrite) != DmaErr::ok)) {
			IBVC_WARN("emu", "{}: qp {:#x}: rdma write to {:#x}+{} rkey {:#x} refused",
				  e.params.name, qp.qpn, r.va, r.len, r.rkey);
			return resp_fatal(e, qp, kSynNakRemAccess, "remote access error");
		}
		qp.wr_va = r.va;
		qp.wr_len = r.len;
		qp.wr_rkey = r.rkey;
		qp.msg_off = 0;
	}
	if (qp.msg_off + p.paylen > qp.wr_len ||
	    ((f & kLast) && qp.msg_off + p.paylen != qp.wr_len))
		return resp_fatal(e, qp, kSynNakInvReq, "write length differs from its reth");
	if ((f & kHasImm) && qp.rq->cons() == qp.rq->prod())
		return resp_rnr(e, qp);
	if (p.paylen) {
		if (e.mrs.check(qp.wr_rkey, qp.pdn, qp.wr_va + qp.msg_off, p.paylen,
				kAccRemoteWrite) != DmaErr::ok)
			return resp_fatal(e, qp, kSynNakRemAccess, "remote access error");
		if (!dma_write(qp.space, qp.wr_va + qp.msg_off, p.payload, p.paylen))
			return errno == ESRCH
				       ? resp_owner_gone(e, qp)
				       : resp_fatal(e, qp, kSynNakRemAccess,
						    "remote access error (memory went away)");
	}
	qp.msg_off += p.paylen;
	if (!(f & kLast)) {
		qp.in_msg = kMsgWrite;
		return true;
	}
	if (f & kHasImm) {
		uint32_t imm;
		memcpy(&imm, ext, 4);
		uint8_t flags = kCqeWithImm | (p.bth.se ? kCqeSolicited : 0);
		e.complete_recv(qp, WcStatus::success, WcOpcode::recv_rdma_imm, qp.wr_len, imm,
				flags);
	}
	qp.msn = psn_add(qp.msn, 1);
	qp.in_msg = kMsgNone;
	return true;
}

// An RDMA READ request at epsn: queued for resp_progress; it uses one PSN
// per response packet.
static bool resp_read(Engine &e, Qp &qp, const InPacket &p)
{
	Reth r = Reth::load(p.ext);
	if (r.len && (!(qp.attr.access & kAccRemoteRead) ||
		      e.mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteRead) != DmaErr::ok)) {
		IBVC_WARN("emu", "{}: qp {:#x}: rdma read of {:#x}+{} rkey {:#x} refused",
			  e.params.name, qp.qpn, r.va, r.len, r.rkey);
		return resp_fatal(e, qp, kSynNakRemAccess, "remote access error");
	}
	const uint32_t mtu = qp.mtu();
	uint32_t n = (uint32_t)std::max<uint64_t>(1, (uint64_t(r.len) + mtu - 1) / mtu);
	qp.reads.push_back(ReadJob{r.va, r.len, qp.epsn, qp.epsn, 0, r.rkey});
	qp.epsn = psn_add(qp.epsn, n);
	qp.msn = psn_add(qp.msn, 1);
	qp.nak_sent = false;
	return true;
}

// Carry out the request at epsn; false if it was not (RNR, an error).
static bool resp_execute(Engine &e, Qp &qp, const InPacket &p)
{
	if (!resp_opcode_ok(e, qp, p))
		return false;
	if (p.flags & kRead)
		return resp_read(e, qp, p);
	if (!(p.flags & kSend ? resp_send(e, qp, p) : resp_write(e, qp, p)))
		return false;
	qp.epsn = psn_add(qp.epsn, 1);
	qp.nak_sent = false;
	if (p.bth.ack_req)
		qp.ack_due = true;
	return true;
}

// After the request at epsn: carry out the kept ones that now follow in
// order; at the next gap, NAK it at once.  The coalesced ACK then covers
// everything carried out.
static void resp_drain(Engine &e, Qp &qp)
{
	while (!qp.ooo.empty() && qp.state != QpState::err) {
		auto it = qp.ooo.find(qp.epsn);
		if (it == qp.ooo.end()) {
			resp_nak_gap(e, qp);
			return;
		}
		OooPacket k = std::move(it->second);
		qp.ooo.erase(it);
		InPacket q{};
		q.data = k.bytes.data();
		q.len = k.bytes.size();
		q.src = qp.attr.remote;
		q.bth = k.bth;
		q.flags = k.flags;
		q.ext = q.data + k.ext_off;
		q.payload = q.data + k.pay_off;
		q.paylen = k.paylen;
		if (!resp_execute(e, qp, q))
			return;
	}
}

void Engine::resp_on_request(Qp &qp, const InPacket &p)
{
	const int32_t d = psn_diff(p.bth.psn, qp.epsn);
	if (d > 0)
		resp_keep(*this, qp, p, d);
	else if (d < 0)
		resp_duplicate(*this, qp, p);
	else if (resp_execute(*this, qp, p))
		resp_drain(*this, qp);
}

bool Engine::resp_progress(Qp &qp)
{
	bool did = false;
	const uint32_t mtu = qp.mtu();
	uint32_t budget = params.cfg.read_burst;
	while (!qp.reads.empty() && budget && qp.state != QpState::err) {
		ReadJob &j = qp.reads.front();
		uint32_t plen = uint32_t(std::min<uint64_t>(j.len - j.off, mtu));
		bool first = j.off == 0, last = j.off + plen == j.len;
		if (plen &&
		    mrs.check(j.rkey, qp.pdn, j.va + j.off, plen, kAccRemoteRead) != DmaErr::ok) {
			qp.reads.pop_front();
			resp_fatal(*this, qp, kSynNakRemAccess, "read region went away");
			return true;
		}
		Bth bth;
		bth.opcode = first && last ? kReadRespOnly
			     : first	   ? kReadRespFirst
			     : last	   ? kReadRespLast
					   : kReadRespMiddle;
		bth.psn = j.psn;
		bool aeth = first || last;
		uint8_t *ext;
		uint8_t *pkt = tx_begin(qp, bth, aeth ? kAethBytes : 0, &ext);
		if (aeth) {
			Aeth{kSynAckNoCredit, qp.msn}.store(ext);
			ext += kAethBytes;
		}
		// A zero-length READ may name any address, NULL included.
		if (plen && !dma_read(qp.space, ext, j.va + j.off, plen)) {
			qp.reads.pop_front(); // the packet begun is not sent
			if (errno == ESRCH)
				resp_owner_gone(*this, qp);
			else
				resp_fatal(*this, qp, kSynNakRemAccess, "read region not readable");
			return true;
		}
		tx_finish(qp, pkt, kBthBytes + (aeth ? kAethBytes : 0), plen);
		j.off += plen;
		j.psn = psn_add(j.psn, 1);
		budget--;
		did = true;
		if (last)
			qp.reads.pop_front();
	}
	if (qp.reads.empty() && qp.ack_due && qp.state != QpState::err) {
		qp.ack_due = false;
		send_ack(qp, kSynAckNoCredit, psn_add(qp.epsn, kPsnMask)); // epsn - 1
		did = true;
	}
	return did;
}

} // namespace ibv_coll::emu
