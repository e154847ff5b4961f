// Status update: the completion of a collective WR (success or failure),
// aborts sent to the other members, and flushing a failed job's queue.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/log.h"

#include <algorithm>

namespace ibv_coll::emu {

static WcStatus wc_status_of(CollStatus st)
{
	switch (st) {
	case CollStatus::success: return WcStatus::success;
	case CollStatus::buffer_err: return WcStatus::loc_len_err;
	case CollStatus::timeout: return WcStatus::resp_timeout_err;
	case CollStatus::remote_abort: return WcStatus::rem_abort_err;
	case CollStatus::denied: return WcStatus::rem_access_err;
	case CollStatus::local_err: return WcStatus::loc_prot_err;
	case CollStatus::flushed: return WcStatus::wr_flush_err;
	}
	return WcStatus::general_err;
}

static void remember(CollJob &job, uint32_t mid, MsgState st, uint32_t blocks)
{
	job.history.push_back(MsgRecord{mid, st, blocks});
	if (job.history.size() > 64)
		job.history.pop_front();
}

Cqe CollEngine::message_cqe(const CollJob &job, const Message &m, uint32_t qpn, uint64_t wr_id,
			    CollStatus st) const
{
	Cqe c{};
	c.wr_id = wr_id;
	c.byte_len = m.coll == CollOp::barrier ? 0 : m.count * m.es;
	c.qpn = qpn;
	c.status = uint8_t(wc_status_of(st));
	c.opcode = uint8_t(m.coll);
	c.coll_status = uint8_t(st);
	c.coll_flags = m.ran;
	c.msg_state = uint8_t(st == CollStatus::success ? MsgState::done : MsgState::failed);
	c.jid = job.cfg.jid;
	c.mid = m.mid;
	c.blocks_done = m.finals;
	c.blocks_total = m.nblocks;
	return c;
}

// A WQE that never became a message fails on its own.
void CollEngine::fail_wqe(Qp &qp, uint32_t idx, CollStatus st)
{
	const CollWqe *w = qp.sq->at<CollWqe>(idx);
	Cqe c{};
	c.wr_id = w->wr_id;
	c.qpn = qp.qpn;
	c.status = uint8_t(wc_status_of(st));
	c.opcode = w->opcode;
	c.coll_status = uint8_t(st);
	c.msg_state = uint8_t(MsgState::failed);
	c.jid = qp.job ? qp.job->cfg.jid : 0;
	c.mid = w->mid;
	qp.meta[idx & (qp.sq->slots() - 1)].done = true;
	retire(qp);
	e_.push_cqe(qp.scq, c);
}

void CollEngine::complete(Qp &qp, CollJob &job, CollStatus st)
{
	// Packets still queued may be sent from the buffers the completion
	// hands back, or from the message's staging.
	reclaim();
	Message &m = *job.active;
	// Retire the WQE (and any finished before it) first: its slot must be
	// free by the time the application sees the completion and reposts.
	qp.meta[m.idx & (qp.sq->slots() - 1)].done = true;
	retire(qp);
	ctr.messages++;
	ctr.failed += st != CollStatus::success;
	ctr.blocks += m.finals;
	ctr.fallbacks += (m.ran & kRanFallback) != 0;
	// The exchange completes on its result, before its peers acknowledge
	// what it sent (coll/xchg_ack.cc): that much is on the wire before the
	// application hears, so a process that exits right after still leaves
	// no peer without its partial (the pass's batch would go after).
	if (m.path == &xchg_)
		e_.tx_flush();
	if (m.signaled || st != CollStatus::success)
		e_.push_cqe(qp.scq, message_cqe(job, m, qp.qpn, m.wr_id, st));
	finish_parts(job, m, st);
	// The units stay held for the next message round the ring, which
	// already runs beside this one and uses them (seg_of).
	if (job.flight.empty() || job.flight.front()->path != &ring_) {
		segs_.unreserve(job.run_base, job.run_count, job.owner);
		job.run_count = 0;
	}
	remember(job, m.mid, st == CollStatus::success ? MsgState::done : MsgState::failed,
		 m.nblocks);
	job.last_mid = m.mid;
	if (!m.bounce.empty())
		job.spare_bounce = std::move(m.bounce);
	if (m.ring.kept_at.capacity() && // it ran round the ring
	    job.spare_rings.size() < std::max<uint32_t>(e_.params.cfg.coll_depth, 1))
		job.spare_rings.push_back(std::move(m.ring));
	IBVC_DEBUG("coll", "{}: job {} message {} done ({}), {} Seg units in use", e_.params.name,
		   job.cfg.jid, m.mid, int(st), segs_.in_use());
	// The oldest message in flight beside it (it started before this
	// completed) is the active one now.
	job.active.reset();
	if (!job.flight.empty()) {
		job.active = std::move(job.flight.front());
		job.flight.pop_front();
	}
}

// An ABORT is never acknowledged, so it goes three times: a member that
// lost a single copy would only learn of the failure at its timeout, and,
// when the job is then given again, be that much later into the new
// incarnation than the others (who may give up on it meanwhile).  Repeats
// are harmless: the first ends the collective, the others meet a QP in
// error, or record the same abort again.
void CollEngine::send_abort(const CollJob &job, uint32_t mid, CollStatus st)
{
	wire::Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = mid;
	h.status = uint8_t(st);
	h.job_key = job.cfg.key;
	for (int copy = 0; copy < 3; copy++) {
		for (uint16_t n = 0; n < job.cfg.nodes(); n++) {
			if (n == job.cfg.node)
				continue;
			send(job, n, wire::kCollAbort, h);
			ctr.aborts_sent++;
		}
	}
}

// Whether a rank of the message lives in a process that is gone.
static bool rank_process_gone(const Message &m)
{
	for (uint16_t r = 0; r < m.ranks; r++)
		if (m.rank[r].space != kLocalSpace && dma_space_gone(m.rank[r].space))
			return true;
	return false;
}

void CollEngine::fail(Qp &qp, CollJob &job, CollStatus st, bool tell_others, const char *why)
{
	// A rank's buffer out of reach because its process died (before the
	// shared device destroyed that process's QP, which then fails the
	// message as part_leaves() does) is that QP leaving the job, not a
	// local buffer error: REMOTE_ABORT, as ibv_modify_coll_qp(3) says.
	if (st == CollStatus::local_err && job.active && job.active->dma_error &&
	    rank_process_gone(*job.active)) {
		st = CollStatus::remote_abort;
		why = "the process of a QP serving some of this node's ranks is gone";
	}
	IBVC_WARN("coll", "{}: job {} message {} failed: {}{}", e_.params.name, job.cfg.jid,
		  job.active ? job.active->mid : 0, why,
		  job.flight.empty() ? "" : " (with the messages in flight beside it)");
	// Those in flight beside it are flushed, in MID order, as an RC QP
	// that fails completes its first WR in error and flushes the others
	// (ibv_coll(7)); their members learn it as they learn of this one.
	for (CollStatus each = st; job.active; each = CollStatus::flushed) {
		if (tell_others)
			send_abort(job, job.active->mid, st);
		complete(qp, job, each);
	}
	// The job's members no longer agree on where they are: stop the QP
	// (and the node's QPs that joined it); what is queued behind
	// completes with a flush error.
	e_.qp_to_error(qp, why);
	if (!job.lead)
		parts_to_error(qp, why);
}

bool CollEngine::flush(Qp &qp)
{
	reclaim();
	if (qp.job && qp.job->lead)
		part_leaves(qp, false);
	else if (qp.job && leads(qp))
		lead_leaves(qp, false);
	bool did = false;
	const uint32_t mask = qp.sq->slots() - 1;
	uint32_t prod = qp.sq->prod();
	for (uint32_t i = qp.sq->cons(); i != prod; i++) {
		WqeMeta &meta = qp.meta[i & mask];
		const bool flushed = !meta.done;
		Cqe c{};
		if (flushed) {
			const CollWqe *w = qp.sq->at<CollWqe>(i);
			c.wr_id = w->wr_id;
			c.qpn = qp.qpn;
			c.status = uint8_t(WcStatus::wr_flush_err);
			c.opcode = w->opcode;
			c.coll_status = uint8_t(CollStatus::flushed);
			c.jid = qp.job ? qp.job->cfg.jid : 0;
			c.mid = w->mid;
		}
		// The slot is free before its completion is visible, as in
		// complete().
		meta = WqeMeta{};
		qp.sq->consume(i + 1);
		if (flushed) {
			e_.push_cqe(qp.scq, c);
			did = true;
		}
	}
	qp.req_idx = prod;
	if (qp.job && qp.job->active) {
		segs_.unreserve(qp.job->run_base, qp.job->run_count, qp.job->owner);
		qp.job->run_count = 0;
		qp.job->active.reset();
	}
	if (qp.job)
		qp.job->flight.clear();
	return did;
}

} // namespace ibv_coll::emu
