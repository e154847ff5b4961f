// Execution control, for a node whose ranks come from several collective
// QPs of the device (one process per rank, on the host's shared device).
// The QP the member table names leads: it holds the job, talks to the
// network and runs each message.  The node's other QPs join it with the
// same job and their own range of local ranks; they only queue WQEs.  A
// message starts when the lead and every joined QP have posted it and
// their ranges cover the node; it then reads and writes every rank's
// buffers through that rank's own QP's protection domain, and completes
// on every QP.  A QP that leaves (destroyed, reset, moved to error) fails
// the message it was part of on the whole job, as a member node's failure
// does.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/log.h"

namespace ibv_coll::emu {

namespace {

uint64_t range_mask(uint32_t first, uint32_t count)
{
	const uint64_t ones = count >= 64 ? ~0ull : (1ull << count) - 1;
	return ones << first;
}

uint64_t my_mask(const JobConfig &c)
{
	return range_mask(c.local_first, c.my_count());
}

// Whether a joining QP's job is the lead's: the same job, key and member
// table (0), or which errno says why not.
int same_job(const JobConfig &lead, const JobConfig &c)
{
	if (lead.key != c.key)
		return EPERM; // the job key is what admits a QP to the job
	if (lead.jid != c.jid || lead.node != c.node || lead.nodes() != c.nodes())
		return EINVAL;
	for (uint16_t n = 0; n < c.nodes(); n++) {
		const JobMember &a = lead.members[n], &b = c.members[n];
		if (a.qpn != b.qpn || a.ranks != b.ranks || !(a.ep == b.ep))
			return EINVAL;
	}
	return 0;
}

// The first WQE of q that is neither done nor a QUERY, when it has not
// started yet.
bool head_of(const Qp &q, uint32_t *idx)
{
	const uint32_t mask = q.sq->slots() - 1;
	for (uint32_t i = q.sq->cons(); i != q.sq->prod(); i++) {
		const WqeMeta &meta = q.meta[i & mask];
		if (meta.done || q.sq->at<CollWqe>(i)->opcode == uint8_t(CollOp::query))
			continue;
		if (meta.started)
			return false;
		*idx = i;
		return true;
	}
	return false;
}

} // namespace

bool CollEngine::leads(const Qp &qp) const
{
	return qp.job && !qp.job->lead && (qp.job->parted() || joins_.count(qp.qpn));
}

// A joined QP's own work: QUERY, answered from its lead's messages.  A
// collective posted after its lead left (destroyed, or reset and given
// the job without it) can never run: the QP fails then.
bool CollEngine::answer_queries(Qp &qp)
{
	Qp *l = lead_of(*qp.job);
	CollJob &job = l ? *l->job : *qp.job;
	bool did = false;
	const uint32_t mask = qp.sq->slots() - 1;
	const uint32_t prod = qp.sq->prod();
	for (uint32_t i = qp.sq->cons(); i != prod && qp.state == QpState::rts; i++) {
		if (qp.meta[i & mask].done)
			continue;
		if (qp.sq->at<CollWqe>(i)->opcode == uint8_t(CollOp::query)) {
			answer_query(qp, job, i);
			did = true;
		} else if (!l) {
			e_.qp_to_error(qp, "the QP it joined (its node's lead) left the job");
			return true;
		}
	}
	return did;
}

// The lead of a QP that joined it, while it still counts the QP in
// (nullptr once it left, or was given a job again without it).
Qp *CollEngine::lead_of(const CollJob &part)
{
	Qp *l = part.lead ? e_.find_qp(part.lead) : nullptr;
	if (!l || !l->job || l->job->lead || l->job->cfg.jid != part.cfg.jid ||
	    l->job->cfg.key != part.cfg.key)
		return nullptr;
	auto it = joins_.find(part.lead);
	if (it == joins_.end())
		return nullptr;
	for (uint32_t qpn : it->second) {
		Qp *p = e_.find_qp(qpn);
		if (p && p->job.get() == &part)
			return l;
	}
	return nullptr;
}

// The QPs that joined lead and still serve (not in error or reset).
void CollEngine::parts_of(const Qp &lead, std::vector<Qp *> *out)
{
	out->clear();
	auto it = joins_.find(lead.qpn);
	if (it == joins_.end())
		return;
	for (uint32_t qpn : it->second) {
		Qp *p = e_.find_qp(qpn);
		if (p && p->job && p->job->lead == lead.qpn && p->state != QpState::err &&
		    p->state != QpState::reset)
			out->push_back(p);
	}
}

int CollEngine::configure_part(Qp &qp, CollJob &job)
{
	const JobConfig &c = job.cfg;
	const uint32_t lead_qpn = c.members[c.node].qpn;
	Qp *l = e_.find_qp(lead_qpn);
	if (!c.local_count || !l || !l->coll || l == &qp)
		return EINVAL;
	uint64_t taken = 0;
	if (l->job) {
		if (l->job->lead)
			return EINVAL; // it joined another itself
		if (int err = same_job(l->job->cfg, c))
			return err;
		taken = my_mask(l->job->cfg);
	}
	std::vector<Qp *> others;
	parts_of(*l, &others);
	for (Qp *p : others)
		if (p != &qp)
			taken |= my_mask(p->job->cfg);
	if (taken & my_mask(c))
		return EBUSY; // another QP of the node serves one of these ranks
	job.lead = lead_qpn;
	std::vector<uint32_t> &list = joins_[lead_qpn];
	if (std::find(list.begin(), list.end(), qp.qpn) == list.end())
		list.push_back(qp.qpn);
	return 0;
}

// The lead's configure: the QPs that joined before it must agree.
int CollEngine::check_parts(Qp &lead, const JobConfig &c)
{
	std::vector<Qp *> parts;
	parts_of(lead, &parts);
	uint64_t taken = my_mask(c);
	for (Qp *p : parts) {
		if (same_job(c, p->job->cfg)) {
			e_.qp_to_error(*p, "its job differs from the job of the QP it joined");
			continue;
		}
		if (taken & my_mask(p->job->cfg))
			return EBUSY;
		taken |= my_mask(p->job->cfg);
	}
	return 0;
}

bool CollEngine::start_joined(Qp &qp, CollJob &job, const uint32_t *head, uint64_t now)
{
	// Every pass of an idle lead comes here: scratch vectors of the engine,
	// not allocations.
	std::vector<Qp *> &parts = join_parts_;
	std::vector<Joined> &js = join_js_;
	parts_of(qp, &parts);
	js.clear();
	uint64_t have = my_mask(job.cfg);
	bool all = head != nullptr, any = head != nullptr;
	for (Qp *p : parts) {
		have |= my_mask(p->job->cfg);
		uint32_t i;
		if (p->state == QpState::rts && head_of(*p, &i)) {
			js.push_back(Joined{p, i});
			any = true;
		} else {
			all = false;
		}
	}
	if (!any) {
		job.join_wait = 0;
		return false;
	}
	if (all && have == range_mask(0, job.cfg.members[job.cfg.node].ranks)) {
		job.join_wait = 0;
		activate(qp, job, *head, now, &js);
		return true;
	}
	if (!job.join_wait)
		job.join_wait = now;
	if (now - job.join_wait < coll_timeout_ns(job))
		return false;
	// Some QP of the node never posted it (or never joined): the members
	// wait as long for a node as for a packet, then fail the collective.
	const char *why = "not every QP of the node posted the collective within the timeout";
	uint32_t mid = head ? qp.sq->at<CollWqe>(*head)->mid
			    : js[0].qp->sq->at<CollWqe>(js[0].idx)->mid;
	IBVC_WARN("coll", "{}: job {} message {} failed: {}", e_.params.name, job.cfg.jid, mid,
		  why);
	ctr.timeouts++;
	send_abort(job, mid, CollStatus::timeout);
	if (head)
		fail_wqe(qp, *head, CollStatus::timeout);
	for (const Joined &j : js)
		fail_wqe(*j.qp, j.idx, CollStatus::timeout);
	job.join_wait = 0;
	e_.qp_to_error(qp, why);
	parts_to_error(qp, why);
	return true;
}

// One more QP's WQE into the message activate() builds: its ranks, its
// PD.  False when it is not the same collective.
bool CollEngine::join_wqe(Message &m, Qp &p, uint32_t idx, const CollWqe &lead)
{
	const CollWqe *w = p.sq->at<CollWqe>(idx);
	const JobConfig &c = p.job->cfg;
	if (w->opcode != lead.opcode || w->mid != lead.mid || w->op != lead.op ||
	    w->dtype != lead.dtype || w->count != lead.count || w->root != lead.root ||
	    w->block_len != lead.block_len ||
	    (w->num_sge != c.local_count && w->opcode != uint8_t(CollOp::barrier)))
		return false;
	take_ranks(m, *w, c.local_first, c.local_count, p.pdn);
	p.meta[idx & (p.sq->slots() - 1)].started = true;
	m.parts.push_back(
		Message::PartWqe{p.qpn, idx, w->wr_id, p.sig_all || (w->flags & kWqeSignaled)});
	return true;
}

// The message completed (or failed): so do the joined QPs' WQEs.
void CollEngine::finish_parts(const CollJob &job, const Message &m, CollStatus st)
{
	for (const Message::PartWqe &pw : m.parts) {
		Qp *p = e_.find_qp(pw.qpn);
		if (!p || !p->job || p->job->lead != job.qpn)
			continue;
		p->meta[pw.idx & (p->sq->slots() - 1)].done = true;
		retire(*p);
		if (pw.signaled || st != CollStatus::success)
			e_.push_cqe(p->scq, message_cqe(job, m, p->qpn, pw.wr_id, st));
	}
}

void CollEngine::parts_to_error(const Qp &lead, const char *why)
{
	std::vector<Qp *> parts;
	parts_of(lead, &parts);
	for (Qp *p : parts)
		e_.qp_to_error(*p, why);
}

// A joined QP leaves (destroyed or reset) or stops (in error): the message
// of its lead that holds one of its WQEs fails on the whole job, and the
// part's WQEs are forgotten by it.
void CollEngine::part_leaves(Qp &qp, bool unregister)
{
	CollJob &job = *qp.job;
	Qp *l = lead_of(job);
	bool involved = false;
	if (l && l->job->active) {
		std::vector<Message::PartWqe> &v = l->job->active->parts;
		auto it = std::find_if(v.begin(), v.end(), [&](const Message::PartWqe &pw) {
			return pw.qpn == qp.qpn;
		});
		if ((involved = it != v.end()))
			v.erase(it);
	}
	if (unregister) {
		auto it = joins_.find(job.lead);
		if (it != joins_.end()) {
			auto &v = it->second;
			v.erase(std::remove(v.begin(), v.end(), qp.qpn), v.end());
			if (v.empty())
				joins_.erase(it);
		}
	}
	if (involved)
		fail(*l, *l->job, CollStatus::remote_abort, true,
		     "a QP of this node that served some of its ranks left the job");
}

// The lead stops (in error) or leaves (destroyed or reset): the message
// it ran fails on the QPs that joined it, which stop too.  A lead that
// leaves between messages, as every process does at the end of a job,
// only forgets them: one that posts again then fails (answer_queries).
void CollEngine::lead_leaves(Qp &qp, bool unregister)
{
	CollJob &job = *qp.job;
	const bool failing = job.active || !unregister;
	if (job.active) {
		send_abort(job, job.active->mid, CollStatus::remote_abort);
		finish_parts(job, *job.active, CollStatus::remote_abort);
		job.active->parts.clear();
	}
	if (failing)
		parts_to_error(qp, "the QP it joined (its node's lead) stopped");
	if (unregister)
		joins_.erase(qp.qpn);
}

} // namespace ibv_coll::emu
