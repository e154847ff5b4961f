// RC responder: accepts requests in PSN order, places SEND data in posted
// receives and RDMA WRITE data in registered memory after the R_Key check,
// answers RDMA READs (paced over engine passes), and acknowledges with
// coalesced ACKs, sequence NAKs, RNR NAKs and error NAKs.
#include "nic/engine.h"

#include "util/log.h"

#include <algorithm>

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
// responder errors).
static void resp_fatal(Engine &e, Qp &qp, uint8_t syndrome, const char *why)
{
	e.send_ack(qp, syndrome, qp.epsn);
	e.qp_to_error(qp, why);
}

void Engine::resp_on_request(Qp &qp, const InPacket &p)
{
	const int32_t d = psn_diff(p.bth.psn, qp.epsn);
	const uint16_t f = p.flags;
	const uint32_t mtu = qp.mtu();
	if (d > 0) {
		// A gap: ask for it once; later packets of the gap are dropped.
		if (!qp.nak_sent) {
			qp.nak_sent = true;
			send_ack(qp, kSynNakSeqErr, qp.epsn);
			ctr.seq_naks_sent++;
		}
		return;
	}
	if (d < 0) {
		ctr.rx_dup++;
		if (f & kRead) {
			// A repeated read: answer it again from the PSN it names.
			Reth r = Reth::load(p.ext);
			if (r.len &&
			    (!(qp.attr.access & kAccRemoteRead) ||
			     mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteRead) != DmaErr::ok))
				return;
			uint32_t n = (uint32_t)std::max<uint64_t>(1, (uint64_t(r.len) + mtu - 1) /
									     mtu);
			std::erase_if(qp.reads, [&](const ReadJob &j) {
				return psn_diff(j.psn, p.bth.psn) >= 0 &&
				       psn_diff(j.psn, psn_add(p.bth.psn, n)) < 0;
			});
			qp.reads.push_back(ReadJob{r.va, r.len, p.bth.psn, p.bth.psn, 0, r.rkey});
		} else {
			qp.ack_due = true;
		}
		return;
	}

	if (f & (kSend | kWrite)) {
		const bool first = f & kFirst, last = f & kLast;
		const uint8_t cls = f & kSend ? kMsgSend : kMsgWrite;
		if (qp.in_msg ? (first || qp.in_msg != cls) : !first)
			return resp_fatal(*this, qp, kSynNakInvReq, "opcode out of sequence");
		if (p.paylen > mtu || (!last && p.paylen != mtu))
			return resp_fatal(*this, qp, kSynNakInvReq, "payload does not fit the mtu");
	} else if (qp.in_msg) {
		return resp_fatal(*this, qp, kSynNakInvReq, "read inside a message");
	}

	const uint8_t *ext = p.ext;
	if (f & kSend) {
		if (qp.rq->cons() == qp.rq->prod()) {
			send_ack(qp, kSynRnrNak | (qp.attr.min_rnr_timer & 31), qp.epsn);
			ctr.rnr_naks_sent++;
			return;
		}
		RecvWqe *r = qp.rq->at<RecvWqe>(qp.rq->cons());
		if (f & kFirst)
			qp.msg_off = 0;
		if (qp.msg_off + p.paylen > r->length) {
			complete_recv(qp, WcStatus::loc_len_err, WcOpcode::recv, qp.msg_off, 0, 0);
			return resp_fatal(*this, qp, kSynNakInvReq, "send longer than the receive");
		}
		if (!recv_sges_ok(*this, qp, r)) {
			complete_recv(qp, WcStatus::loc_prot_err, WcOpcode::recv, qp.msg_off, 0, 0);
			return resp_fatal(*this, qp, kSynNakRemOpErr,
					  "receive buffer not accessible");
		}
		SgeCursor c{r->sges(), r->num_sge, qp.space};
		c.seek(qp.msg_off);
		if (!c.scatter(p.payload, p.paylen)) {
			complete_recv(qp, WcStatus::loc_prot_err, WcOpcode::recv, qp.msg_off, 0, 0);
			return resp_fatal(*this, qp, kSynNakRemOpErr,
					  "receive buffer not writable");
		}
		qp.msg_off += p.paylen;
		if (f & kLast) {
			uint32_t imm = 0;
			uint8_t flags = p.bth.se ? kCqeSolicited : 0;
			if (f & kHasImm) {
				memcpy(&imm, ext, 4);
				flags |= kCqeWithImm;
			}
			complete_recv(qp, WcStatus::success, WcOpcode::recv, qp.msg_off, imm,
				      flags);
			qp.msn = psn_add(qp.msn, 1);
			qp.in_msg = kMsgNone;
		} else {
			qp.in_msg = kMsgSend;
		}
	} else if (f & kWrite) {
		if (f & kFirst) {
			Reth r = Reth::load(ext);
			ext += kRethBytes;
			if (r.len && (!(qp.attr.access & kAccRemoteWrite) ||
				      mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteWrite) !=
					      DmaErr::ok)) {
				IBVC_WARN("emu",
					  "{}: qp {:#x}: rdma write to {:#x}+{} rkey {:#x} refused",
					  params.name, qp.qpn, r.va, r.len, r.rkey);
				return resp_fatal(*this, qp, kSynNakRemAccess,
						  "remote access error");
			}
			qp.wr_va = r.va;
			qp.wr_len = r.len;
			qp.wr_rkey = r.rkey;
			qp.msg_off = 0;
		}
		if (qp.msg_off + p.paylen > qp.wr_len ||
		    ((f & kLast) && qp.msg_off + p.paylen != qp.wr_len))
			return resp_fatal(*this, qp, kSynNakInvReq,
					  "write length differs from its reth");
		if ((f & kHasImm) && qp.rq->cons() == qp.rq->prod()) {
			send_ack(qp, kSynRnrNak | (qp.attr.min_rnr_timer & 31), qp.epsn);
			ctr.rnr_naks_sent++;
			return;
		}
		if (p.paylen) {
			// Re-checked per packet: the region may have gone since the first.
			if (mrs.check(qp.wr_rkey, qp.pdn, qp.wr_va + qp.msg_off, p.paylen,
				      kAccRemoteWrite) != DmaErr::ok)
				return resp_fatal(*this, qp, kSynNakRemAccess,
						  "remote access error");
			if (!dma_write(qp.space, qp.wr_va + qp.msg_off, p.payload, p.paylen))
				return resp_fatal(*this, qp, kSynNakRemAccess,
						  "remote access error (memory went away)");
		}
		qp.msg_off += p.paylen;
		if (f & kLast) {
			if (f & kHasImm) {
				uint32_t imm;
				memcpy(&imm, ext, 4);
				uint8_t flags = kCqeWithImm | (p.bth.se ? kCqeSolicited : 0);
				complete_recv(qp, WcStatus::success, WcOpcode::recv_rdma_imm,
					      qp.wr_len, imm, flags);
			}
			qp.msn = psn_add(qp.msn, 1);
			qp.in_msg = kMsgNone;
		} else {
			qp.in_msg = kMsgWrite;
		}
	} else if (f & kRead) {
		Reth r = Reth::load(ext);
		if (r.len &&
		    (!(qp.attr.access & kAccRemoteRead) ||
		     mrs.check(r.rkey, qp.pdn, r.va, r.len, kAccRemoteRead) != DmaErr::ok)) {
			IBVC_WARN("emu", "{}: qp {:#x}: rdma read of {:#x}+{} rkey {:#x} refused",
				  params.name, qp.qpn, r.va, r.len, r.rkey);
			return resp_fatal(*this, qp, kSynNakRemAccess, "remote access error");
		}
		uint32_t n = (uint32_t)std::max<uint64_t>(1, (uint64_t(r.len) + mtu - 1) / mtu);
		qp.reads.push_back(ReadJob{r.va, r.len, qp.epsn, qp.epsn, 0, r.rkey});
		qp.epsn = psn_add(qp.epsn, n);
		qp.msn = psn_add(qp.msn, 1);
		qp.nak_sent = false;
		return;
	}
	qp.epsn = psn_add(qp.epsn, 1);
	qp.nak_sent = false;
	if (p.bth.ack_req)
		qp.ack_due = true;
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
