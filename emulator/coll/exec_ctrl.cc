// Execution control: configures a collective QP's job, consumes its WQEs
// in order (answering QUERY at once), validates each message against the
// device's own tables before it runs, and hands it to the algorithm.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "wire/swproto.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/swproto.h"

#include <algorithm>

namespace ibv_coll::emu {

void CollJobDelete::operator()(CollJob *job) const
{
	delete job;
}

std::unique_ptr<CollService> make_coll_service(CollHost &host, uint32_t seg_units,
					       uint32_t seg_bytes)
{
	return std::make_unique<CollEngine>(host, seg_units, seg_bytes);
}

CollCore::CollCore(CollHost &e, uint32_t seg_units, uint32_t seg_bytes)
	: e_(e), segs_(seg_units, seg_bytes)
{
}

CollEngine::CollEngine(CollHost &e, uint32_t seg_units, uint32_t seg_bytes)
	: CollCore(e, seg_units, seg_bytes)
{
}

// A job's Seg units go back when its QP is reset or destroyed, with any
// blocks that arrived early for messages that will now never run.
bool CollEngine::leaving(Qp &qp, uint64_t now)
{
	if (!qp.job || qp.job->lead || qp.state != QpState::rts)
		return false;
	const bool waits = xchg_.leaving(*qp.job, now);
	e_.tx_flush();
	return waits;
}

void CollEngine::release(Qp &qp)
{
	if (!qp.job)
		return;
	if (qp.job->lead) {
		part_leaves(qp, true);
		qp.job.reset();
		return;
	}
	if (leads(qp))
		lead_leaves(qp, true);
	const JobConfig &c = qp.job->cfg;
	const CollJob &job = *qp.job;
	sw_.release(*qp.job);
	// Its peers hear now what they would have on a timer that goes with
	// the job (coll/xchg_ack.cc): none of them waits for this node.
	xchg_.flush_owed(*qp.job, e_.now());
	// Now: the QP's context may be closed next, and its engine thread
	// with it, before another progress pass would send the batch.
	e_.tx_flush();
	segs_.unreserve(job.run_base, job.run_count, job.owner);
	for (uint32_t i = c.seg_base; i < c.seg_base + c.seg_count; i++)
		if (segs_.unit(i).busy && segs_.unit(i).jid == c.jid)
			segs_.release(i);
	for (uint32_t i = job.run_base; i < job.run_base + job.run_count; i++)
		if (segs_.unit(i).busy && segs_.unit(i).jid == c.jid)
			segs_.release(i);
	qp.job.reset();
}

int CollEngine::configure(Qp &qp, const JobConfig &in)
{
	JobConfig c = in;
	const char *why = nullptr;
	auto gid = e_.params.gids.end();
	if (check_job(c, &why) == 0) {
		// What depends on this device: its units, and that our own
		// entry names it (and this QP unless it joins the one it
		// names, coll/join.cc), with addresses it can reach.
		const JobMember &me = c.members[c.node];
		gid = std::find(e_.params.gids.begin(), e_.params.gids.end(), me.ep.ip);
		if (uint64_t(c.seg_base) + c.seg_count > segs_.size())
			why = "seg_base + seg_count: beyond the device's Seg units";
		else if (c.block_len > segs_.unit_bytes())
			why = "block_len: larger than a Seg unit";
		else if (gid == e_.params.gids.end() || me.ep.port != e_.udp_port())
			why = "this node's member entry: not this device's address and port";
		if (!why && (!c.shape->family || (c.shape->family == 6 && !e_.ipv6())))
			why = "members: IPv4 and IPv6 mixed, or IPv6 on a device without it";
	}
	if (why) {
		IBVC_WARN("coll", "{}: QP {:#x}: job {} refused: {}", e_.params.name, qp.qpn,
			  in.jid, why);
		return EINVAL;
	}
	const bool joins = c.members[c.node].qpn != qp.qpn;
	CollJobPtr job(new CollJob());
	job->cfg = std::move(c);
	job->src_ip = *gid;
	job->pdn = qp.pdn;
	job->qpn = qp.qpn;
	job->owner = next_owner_++;
	if (int err = joins ? configure_part(qp, *job) : check_parts(qp, job->cfg))
		return err;
	// Every member counts the times its QP was given the job (RESET ->
	// INIT -> RTR with the job, once per cycle), so after a failure the
	// members, reset at their own pace, agree on the new incarnation and
	// tell its packets from the old one's.
	job->inc = ++qp.coll_inc;
	qp.job = std::move(job);
	return 0;
}

void CollEngine::answer_query(Qp &qp, CollJob &job, uint32_t idx)
{
	const CollWqe *w = qp.sq->at<CollWqe>(idx);
	Cqe c{};
	c.wr_id = w->wr_id;
	c.qpn = qp.qpn;
	c.opcode = uint8_t(CollOp::query);
	c.jid = job.cfg.jid;
	c.mid = w->mid;
	c.msg_state = uint8_t(MsgState::unknown);
	if (const Message *m = job.running(w->mid)) {
		c.msg_state = uint8_t(MsgState::active);
		c.blocks_done = m->finals;
		c.blocks_total = m->nblocks;
	} else {
		for (const MsgRecord &r : job.history) {
			if (r.mid == w->mid) {
				c.msg_state = uint8_t(r.state);
				c.blocks_done = c.blocks_total = r.blocks;
			}
		}
		// Posted but not started: still in the queue.
		const uint32_t mask = qp.sq->slots() - 1;
		for (uint32_t i = qp.sq->cons(); i != qp.sq->prod(); i++) {
			const CollWqe *o = qp.sq->at<CollWqe>(i);
			if (o->opcode != uint8_t(CollOp::query) && o->mid == w->mid &&
			    !qp.meta[i & mask].started)
				c.msg_state = uint8_t(MsgState::queued);
		}
	}
	qp.meta[idx & (qp.sq->slots() - 1)].done = true;
	retire(qp); // room before the completion, as complete()
	e_.push_cqe(qp.scq, c);
}

// The ranks [first, first + count) of the node: buffers from w, in
// protection domain pdn.
void CollEngine::take_ranks(Message &m, const CollWqe &w, uint16_t first, uint16_t count,
			    uint32_t pdn)
{
	const DmaSpace space = e_.pd_space(pdn);
	for (uint16_t r = 0; r < count && r < w.num_sge && first + r < m.rank.size(); r++) {
		m.rank[first + r].src = w.srcs()[r];
		m.rank[first + r].dst = w.dsts()[r];
		m.rank[first + r].pdn = pdn;
		m.rank[first + r].space = space;
		m.remote |= space != kLocalSpace;
	}
}

// The root rank's node and its index there: the last node whose first
// rank is not above it (first ranks ascend, check_job), in O(log N).
static void find_root(const JobConfig &c, Message &m)
{
	auto after = std::upper_bound(
		c.members.begin(), c.members.end(), m.root,
		[](uint32_t r, const JobMember &mb) { return r < mb.first_rank; });
	if (after == c.members.begin())
		return;
	const JobMember &mb = *(after - 1);
	if (m.root < mb.first_rank + mb.ranks) {
		m.root_node = uint16_t(after - 1 - c.members.begin());
		m.root_local = uint16_t(m.root - mb.first_rank);
	}
}

// What this node finishes and must be able to send again, when no local
// destination keeps it: room for it.
static void stage_own(const JobConfig &c, Message &m)
{
	for (const ChunkRole &r : m.chunks) {
		if (r.fin == c.node && r.rs &&
		    (m.coll == CollOp::barrier ||
		     (m.coll == CollOp::reduce && m.root_node != c.node))) {
			m.staging.assign((r.vend - r.vbegin) * m.es, 0);
			m.staging_voff = r.vbegin;
		}
	}
}

void CollEngine::activate(Qp &qp, CollJob &job, uint32_t idx, uint64_t now,
			  const std::vector<Joined> *js)
{
	const CollWqe *w = qp.sq->at<CollWqe>(idx);
	qp.meta[idx & (qp.sq->slots() - 1)].started = true;
	auto mp = std::make_unique<Message>();
	Message &m = *mp;
	const JobConfig &c = job.cfg;
	m.idx = idx;
	m.wr_id = w->wr_id;
	m.coll = CollOp(w->opcode);
	m.op = RedOp(w->op);
	m.dtype = Dtype(w->dtype);
	m.count = w->count;
	m.root = w->root;
	m.mid = w->mid;
	m.signaled = qp.sig_all || (w->flags & kWqeSignaled);
	m.ranks = c.members[c.node].ranks;
	m.rank.resize(m.ranks);
	if (m.coll == CollOp::barrier) {
		m.op = RedOp::max;
		m.dtype = Dtype::uint8;
		m.count = 0;
		m.zeros.assign(c.nodes(), 0);
	}
	m.es = uint32_t(dtype_size(m.dtype));
	take_ranks(m, *w, c.local_first, c.my_count(), job.pdn);
	bool same = true;
	for (size_t j = 0; js && j < js->size(); j++)
		same &= join_wqe(m, *(*js)[j].qp, (*js)[j].idx, *w);
	uint64_t slo = UINT64_MAX, shi = 0, dlo = UINT64_MAX, dhi = 0;
	for (uint16_t r = 0; r < m.ranks; r++) {
		slo = std::min(slo, m.rank[r].src.addr);
		shi = std::max(shi, m.rank[r].src.addr + m.rank[r].src.length);
		dlo = std::min(dlo, m.rank[r].dst.addr);
		dhi = std::max(dhi, m.rank[r].dst.addr + m.rank[r].dst.length);
	}
	m.inplace = dlo < shi && slo < dhi; // the spans overlap (perhaps only the spans)
	find_root(c, m);
	m.last_progress = now;
	// A message posted while others run starts beside them (progress()
	// said it may): the newest in flight.
	const bool beside = job.active != nullptr;
	if (beside) {
		job.flight.push_back(std::move(mp));
		ctr.beside++;
	} else {
		job.active = std::move(mp);
		job.run_count = 0; // no units held yet (hold_units)
	}
	IBVC_DEBUG("coll", "{}: job {} message {} starts ({} opcode {:#x}{})", e_.params.name,
		   c.jid, m.mid, m.count, w->opcode, beside ? ", beside others" : "");
	// The driver checked the WR when it was posted; the device checks
	// again what it can only know now.
	const char *bad = nullptr;
	if (w->num_sge != c.my_count() && m.coll != CollOp::barrier)
		bad = "wrong number of buffers";
	else if (!same)
		bad = "the QPs of this node posted different collectives";
	if (bad) {
		// Every QP of the node fails it with LOCAL_ERR: those whose WQE
		// joined the message with it (finish_parts), and those whose WQE
		// differs on their own, rather than flushed behind it.
		for (size_t j = 0; js && j < js->size(); j++) {
			Qp &p = *(*js)[j].qp;
			if (!p.meta[(*js)[j].idx & (p.sq->slots() - 1)].started)
				fail_wqe(p, (*js)[j].idx, CollStatus::local_err);
		}
		return fail(qp, job, CollStatus::local_err, true, bad);
	}
	if (job.aborted_mid == m.mid)
		return fail(qp, job, job.abort_status, false,
			    "a member aborted it before it started");
	if (job.superseded)
		return fail(qp, job, CollStatus::remote_abort, true,
			    "the job was given again to another member (a later incarnation)");
	// The exchange keeps no block in Seg units (coll/xchg.cc), nor does
	// the switch path at the NIC (a message that turns to the ring later
	// is checked there: RingPath::pump).
	job.xchg.piece = xchg_piece_of(qp);
	const bool small = exchanges(job, m);
	const bool ring = !job.cfg.sw.on || job.cfg.topology == Topology::ring;
	if (!small && ring && !window(job))
		return fail(qp, job, CollStatus::buffer_err, true,
			    "the job's Seg range cannot hold a block from every other node");
	// The block length may not exceed the path MTU or a Seg unit.
	uint32_t mtu = std::min(qp.attr.path_mtu, segs_.unit_bytes());
	if (w->block_len && w->block_len < mtu)
		mtu = w->block_len;
	// One node sends nothing: its blocks need not fit a packet, and larger
	// ones cost fewer copies (one per rank and block when the ranks are in
	// other processes) and checks.
	if (c.nodes() == 1 && !w->block_len && !c.block_len)
		mtu = kLocalBlockBytes;
	if (small)
		one_block(job, m);
	else
		build_chain(job.cfg, m, mtu);
	if (m.remote)
		m.bounce = std::move(job.spare_bounce);
	if (!beside && !hold_units(job, m))
		return fail(qp, job, CollStatus::buffer_err, true,
			    "no Seg units free for it: other jobs' collectives hold them");
	m.final_.assign(m.nblocks, 0);
	m.o_pending.init(m.nblocks);
	m.f_pending.init(m.nblocks);
	if (m.inplace)
		m.src_lent.assign(m.nblocks, 0);
	stage_own(c, m);
	if (sw_.wanted(job)) {
		m.path = &sw_;
		if (beside) // those that run go through the switch too
			return sw_.start(qp, job, m, now);
		sw_.start(qp, job, now);
		settle(qp, job, now);
	} else if (beside && small) {
		m.path = &xchg_;
		m.ran = 0;
		xchg_.start(qp, job, m, now);
	} else {
		start_ring(qp, job, m, now, small);
	}
}

// The next WQE w may start while the messages that run now are not done:
// the job runs them all as the exchange (coll/xchg.cc), or all round the
// ring (coll/ring.cc), fewer than IBV_COLL_EMU_COLL_DEPTH of them, and so
// would it (members decide alike: a job with no switch), or all through a
// switch that granted the job for good (SwitchPath::beside_ok: the blocks
// of all its messages are numbered in one sequence, whichever started
// beside another at a member, so members need not decide alike); it is not fenced
// (IBV_COLL_SEND_FENCE); and it neither reads nor writes what one of them
// writes (it would see, or be overwritten by,
// a result it must follow), unless it repeats that message exactly (the
// same collective and operands into the same buffers: the same result,
// in whichever order they finish).  Every WQE that passes starts
// (activate), and they complete in order of MID.
bool CollEngine::may_start_beside(const CollJob &job, const CollWqe &w) const
{
	const JobConfig &c = job.cfg;
	if (!job.active || job.parted() || 1 + job.flight.size() >= e_.params.cfg.coll_depth ||
	    (w.flags & kWqeFence) || c.nodes() < 2 || w.num_sge != c.my_count())
		return false;
	const CollOp coll = CollOp(w.opcode);
	if (job.active->path == &sw_) {
		if (!sw_.beside_ok(job))
			return false;
	} else {
		const uint32_t es = uint32_t(dtype_size(Dtype(w.dtype)));
		const uint32_t most = xchg_most(job);
		if (sw_.wanted(job) || (c.sw.on && c.topology != Topology::ring))
			return false;
		// The way it would run (exchanges()): all that run at once run
		// one way.
		const bool small = most && (coll == CollOp::barrier ||
					    ((coll == CollOp::allreduce || coll == CollOp::bcast) &&
					     xchg_fits(job, w.count, es)));
		if (job.active->path != (small ? static_cast<const CollPath *>(&xchg_) : &ring_) ||
		    (!small && !window(job)))
			return false;
	}
	if (coll == CollOp::barrier)
		return true;
	for (size_t i = 0; i < job.runs(); i++) {
		const Message &o = job.run(i);
		if (o.coll == CollOp::barrier)
			continue;
		bool same = o.coll == coll && o.op == RedOp(w.op) && o.dtype == Dtype(w.dtype) &&
			    o.count == w.count && o.root == w.root && o.ranks == w.num_sge;
		bool reads = false, writes = false;
		for (uint16_t r = 0; r < w.num_sge && r < o.ranks; r++) {
			const Sge &s = w.srcs()[r], &d = w.dsts()[r];
			same &= s.addr == o.rank[r].src.addr && d.addr == o.rank[r].dst.addr;
			for (uint16_t q = 0; q < o.ranks; q++) {
				const Sge &od = o.rank[q].dst;
				reads |= s.addr < od.addr + od.length &&
					 od.addr < s.addr + s.length;
				writes |= d.addr < od.addr + od.length &&
					  od.addr < d.addr + d.length;
			}
		}
		if (reads || (writes && !same))
			return false;
	}
	return true;
}

// The exchange's most bytes per rank: IBV_COLL_EMU_XCHG_BYTES, or,
// unless that is set, 65536 (the most) for a job whose members all have
// one address: on one host a step costs a hand-off between processes (two
// cores, a dozen threads), not the wire, and the exchange's log2(N) steps
// beat the ring's 2(N - 1) to larger sizes (4 processes, 32 KiB: about
// 1.5x; 64 KiB: 1.14x, 2 and 3 processes 1.3x, 8 about even), where on
// slow links its 2 S on the wire against the ring's 1.5 S lose from 16
// KiB.  The member list is the same on every member, so every member
// decides alike.
uint32_t CollEngine::xchg_most(const CollJob &job) const
{
	const JobConfig &c = job.cfg;
	for (size_t i = 1; i < c.members.size(); i++)
		if (!(c.members[i].ep.ip == c.members[0].ep.ip))
			return e_.params.cfg.coll_xchg_bytes;
	return e_.params.cfg.coll_xchg_bytes_host;
}

// A message that runs as a pairwise exchange or a broadcast tree
// (coll/xchg.cc): an allreduce or a broadcast of at most xchg_most()
// bytes per rank, or a barrier, of a job of
// several nodes that runs round the ring (not AUTO's fallback, whose
// members agree on the ring's packets).  Every member decides alike.
bool CollEngine::exchanges(const CollJob &job, const Message &m) const
{
	const JobConfig &c = job.cfg;
	const uint32_t most = xchg_most(job);
	if (c.nodes() < 2 || !most || sw_.wanted(job) || (c.sw.on && c.topology != Topology::ring))
		return false;
	return m.coll == CollOp::barrier ||
	       ((m.coll == CollOp::allreduce || m.coll == CollOp::bcast) &&
		xchg_fits(job, m.count, m.es));
}

// count elements of es bytes are at most xchg_most() and at most the
// exchange's pieces (the job's path MTU each).
bool CollEngine::xchg_fits(const CollJob &job, uint64_t count, uint32_t es) const
{
	const uint32_t most = xchg_most(job);
	return es && count <= most / es && count * es <= uint64_t(kXchgPiecesMost) * job.xchg.piece;
}

// Message m goes round the ring (the running message, or one that starts
// beside it: may_start_beside).  Why it does is execution
// control's to say (the ring knows nothing of switches): AUTO with no
// switch that served it, the switch refusing the job, or (time division)
// this message.
void CollEngine::start_ring(Qp &qp, CollJob &job, Message &m, uint64_t now, bool small)
{
	const JobConfig &c = job.cfg;
	m.path = small ? static_cast<CollPath *>(&xchg_) : &ring_;
	m.ran = 0;
	if (c.topology == Topology::autosel && c.nodes() > 1)
		m.ran |= kRanFallback;
	if (job.sw.phase == CollJob::SwPhase::fallback)
		m.ran |= job.sw.why;
	if (m.sw.admit_why)
		m.ran |= kRanFallback | m.sw.admit_why;
	if (&m == job.active.get())
		m.path->start(qp, job, now);
	else
		ring_.start(qp, job, m, now); // beside those that run round the ring
}

// The units a message holds while it runs: one per data block, at most
// the job's range, from the job's seg_base.  Each job picks its range
// alone, and on a shared device jobs of several processes (or a job whose
// process is gone and not yet cleaned up) may have picked overlapping
// ones: when another job's running collective holds some of the units, as
// many free ones elsewhere serve instead.  Only a device with no such
// stretch free refuses the message.  (Blocks kept for a message not
// started yet use the job's own range, where free: RingPath::early.)
bool CollEngine::hold_units(CollJob &job, const Message &m)
{
	const JobConfig &c = job.cfg;
	const uint32_t need = std::clamp<uint32_t>(m.nblocks, 1, c.seg_count);
	uint32_t base = c.seg_base;
	if (!segs_.reserve(base, need, job.owner)) {
		base = segs_.find_free(need, job.owner);
		if (base == segs_.size() || !segs_.reserve(base, need, job.owner))
			return false;
		IBVC_DEBUG("coll",
			   "{}: job {} message {}: units {}..{} are another job's, {}..{} "
			   "serve",
			   e_.params.name, c.jid, m.mid, c.seg_base, c.seg_base + need - 1, base,
			   base + need - 1);
	}
	job.run_base = base;
	job.run_count = need;
	return true;
}

// AUTO: the switch path gave the message up (no switch answered, or it
// refused the job) and cleared Message::sw.on; it runs round the ring.
void CollEngine::settle(Qp &qp, CollJob &job, uint64_t now)
{
	if (job.active && qp.state == QpState::rts && job.active->path == &sw_ &&
	    !job.active->sw.on && !job.active->sw.waiting)
		start_ring(qp, job, *job.active, now);
}

bool CollEngine::progress(Qp &qp, uint64_t now)
{
	if (!qp.job)
		return false;
	CollJob &job = *qp.job;
	if (job.lead)
		return answer_queries(qp);
	bool did = false;
	const uint32_t mask = qp.sq->slots() - 1;
	const uint32_t prod = qp.sq->prod();
	bool blocked = false; // an earlier collective is not done
	uint32_t head = 0;    // a parted job's next WQE, when has_head
	bool has_head = false;
	for (uint32_t i = qp.sq->cons(); i != prod && qp.state == QpState::rts; i++) {
		WqeMeta &meta = qp.meta[i & mask];
		if (meta.done)
			continue;
		const CollWqe *w = qp.sq->at<CollWqe>(i);
		if (w->opcode == uint8_t(CollOp::query)) {
			answer_query(qp, job, i);
			did = true;
			continue;
		}
		if (meta.started)
			continue; // it runs (the active message, or one beside it)
		if (!blocked && !job.active) {
			if (job.parted()) {
				head = i;
				has_head = true;
			} else {
				activate(qp, job, i, now);
				did = true;
				continue; // those after it may start beside it
			}
		} else if (!blocked && may_start_beside(job, *w)) {
			activate(qp, job, i, now);
			did = true;
			continue;
		}
		blocked = true;
	}
	if (job.parted() && !job.active && qp.state == QpState::rts)
		did |= start_joined(qp, job, has_head ? &head : nullptr, now);
	if (job.active && qp.state == QpState::rts) {
		size_t before = e_.tx_packets();
		job.active->path->on_timer(qp, job, now);
		settle(qp, job, now);
		watchdog(qp, job, now);
		// The messages in flight beside it finish in turn (complete()).
		while (job.active && qp.state == QpState::rts && job.active->path->done(job)) {
			if (flush_results(*job.active)) {
				complete(qp, job, CollStatus::success);
			} else {
				job.active->dma_error = true;
				fail(qp, job, CollStatus::local_err, false,
				     "a local buffer is not accessible");
			}
			did = true;
		}
		did |= e_.tx_packets() != before;
	}
	// The exchange's acknowledgements and the partials it keeps sending
	// after their messages completed here (coll/xchg_ack.cc).
	if (qp.state == QpState::rts)
		did |= xchg_.tend(job, now);
	if (const uint64_t keep = sw_.keep_due(job);
	    keep && now >= keep && qp.state == QpState::rts) {
		sw_.send_config(job, now, true);
		did = true;
	}
	retire(qp);
	return did;
}

// The liveness guarantee (ibv_coll(7), LIVENESS): a message that has
// completed no block for the job's timeout fails here, whatever its
// strategy is doing or waiting for (a grant, an admission, the window, a
// member that has not posted).  Only blocks completed count as progress
// (Message::last_progress): repeats, ASKs, NAKs, probes and keepalives
// never do, so a peer that keeps talking without ever delivering cannot
// keep a collective alive.  The strategies fail earlier with a reason of
// their own where they know one; this is the bound they all share.
void CollEngine::watchdog(Qp &qp, CollJob &job, uint64_t now)
{
	if (!job.active || qp.state != QpState::rts)
		return;
	uint64_t last = job.active->last_progress;
	for (const auto &f : job.flight)
		last = std::min(last, f->last_progress);
	if (now <= last || now - last <= coll_timeout_ns(job))
		return;
	ctr.timeouts++;
	fail(qp, job, CollStatus::timeout, true, "no block completed within the job's timeout");
}

// Retire finished WQEs in order.
void CollEngine::retire(Qp &qp)
{
	const uint32_t mask = qp.sq->slots() - 1;
	while (qp.sq->cons() != qp.sq->prod() && qp.meta[qp.sq->cons() & mask].done) {
		qp.meta[qp.sq->cons() & mask] = WqeMeta{};
		qp.sq->consume(qp.sq->cons() + 1);
	}
}

uint64_t CollEngine::next_deadline(const Qp &qp) const
{
	if (!qp.job || qp.job->lead)
		return 0;
	// The switch keepalive belongs to the job, the rest to its message's path.
	uint64_t keep = sw_.keep_due(*qp.job);
	if (qp.job->join_wait) {
		const uint64_t j = qp.job->join_wait + coll_timeout_ns(*qp.job);
		keep = keep && keep < j ? keep : j;
	}
	if (const uint64_t x = xchg_.due(*qp.job); x && (!keep || x < keep))
		keep = x;
	if (!qp.job->active)
		return keep;
	const Message &m = *qp.job->active;
	uint64_t last = m.last_progress;
	for (const auto &f : qp.job->flight)
		last = std::min(last, f->last_progress);
	const uint64_t d = std::min(m.path->next_deadline(*qp.job),
				    last + coll_timeout_ns(*qp.job) + 1);
	return keep && keep < d ? keep : d;
}

uint64_t CollCore::probe_ns() const
{
	return uint64_t(e_.params.cfg.coll_probe_us) * util::kNsPerUs;
}

// The retransmission timeout: srtt + 4 rttvar, at least the configured
// floor (IBV_COLL_EMU_COLL_RTO_US: on a loaded machine a node may not run
// for several milliseconds, and a premature repeat only adds load) and at
// most a second.
uint64_t CollCore::rto_ns(const CollJob &job) const
{
	const uint64_t lo = uint64_t(e_.params.cfg.coll_rto_us) * util::kNsPerUs;
	const uint64_t hi = std::max<uint64_t>(lo, 1000 * util::kNsPerMs);
	return std::clamp(job.srtt + 4 * job.rttvar, lo, hi);
}

// A collective fails after this long without progress: the job's
// timeout_ms, or IBV_COLL_EMU_COLL_TIMEOUT_MS.
uint64_t CollCore::coll_timeout_ns(const CollJob &job) const
{
	const uint32_t ms = job.cfg.timeout_ms ? job.cfg.timeout_ms : e_.params.cfg.coll_timeout_ms;
	return uint64_t(ms) * util::kNsPerMs;
}

uint64_t CollCore::backoff_most(const CollJob &job) const
{
	return std::max<uint64_t>(coll_timeout_ns(job) / 8, 1);
}

uint64_t CollCore::answered_wait(const CollJob &job, uint64_t least, uint64_t waited) const
{
	return std::min(std::max(least, waited / 8), backoff_most(job));
}

void CollCore::rtt_sample(CollJob &job, uint64_t rtt, Holding h)
{
	if (h.known() && h.held < rtt) {
		const uint64_t q = rtt - (h.held - std::min(h.queued, h.held));
		if (!job.qmin || q < job.qmin)
			job.qmin = q;
		job.qlast = q;
		if (!job.qrtt) {
			job.qrtt = q;
			job.qrttvar = q / 2;
		} else {
			const uint64_t dev = q > job.qrtt ? q - job.qrtt : job.qrtt - q;
			job.qrttvar = (3 * job.qrttvar + dev) / 4;
			job.qrtt = (7 * job.qrtt + q) / 8;
		}
	}
	if (!job.srtt) {
		job.srtt = rtt;
		job.rttvar = rtt / 2;
		return;
	}
	uint64_t dev = rtt > job.srtt ? rtt - job.srtt : job.srtt - rtt;
	job.rttvar = (3 * job.rttvar + dev) / 4;
	job.srtt = (7 * job.srtt + rtt) / 8;
}

// (Re)start a block's retransmission timer.  A repeat waits twice the
// timeout, and while the message makes no progress at all each further
// repeat of the block waits twice as long again, up to a second (or the
// timeout, if longer) and at most an eighth of the job's timeout (so that
// a block goes several times before the job gives up on it, RingPath::
// tail_wait), as TCP backs off: a member that is late rather
// than losing packets (it has not started the message, or its CPU is
// busy) gets a few repeats, not a stream of them.  Any progress brings the
// wait back to twice the timeout, so loss elsewhere does not slow
// recovery.
void CollCore::arm(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now,
		   bool again)
{
	const uint64_t rto = rto_ns(job);
	if (!pend.find(sid)) {
		PendingSet::Entry &p = pend.add(sid);
		p.deadline = now + rto;
		p.sent = now;
		p.again = again;
		pend.timer_set(p.deadline);
		return;
	}
	PendingSet::Entry &p = *pend.find(sid);
	uint64_t wait = rto;
	if (again) {
		if (p.progress_mark != m.last_progress) {
			p.progress_mark = m.last_progress;
			p.repeats = 0;
		}
		if (p.repeats < 16)
			p.repeats++;
		const uint64_t cap = std::min(std::max<uint64_t>(2 * rto, 1000 * util::kNsPerMs),
					      backoff_most(job));
		wait = std::min(rto << p.repeats, cap);
	}
	p.deadline = now + wait;
	p.sent = now;
	p.again |= again;
	pend.timer_set(p.deadline);
}

// Blocks one node keeps in flight.  A node that has not started a message
// yet keeps what every other node sent it of that message in Seg units, so
// the job's range must hold a window from each of them.
uint32_t CollCore::window(const CollJob &job) const
{
	uint32_t others = std::max<uint32_t>(1, job.cfg.nodes() - 1u);
	return std::min(job.cfg.seg_count / others, e_.params.cfg.coll_window);
}

} // namespace ibv_coll::emu
