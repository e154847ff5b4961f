// The emulated NIC's command interface and doorbells.
#include "nic/nic.h"

#include "nic/engine.h"
#include "util/clock.h"
#include "util/log.h"

#include <algorithm>
#include <cerrno>
#include <unistd.h>

namespace ibv_coll::emu {

Nic::Nic() = default;
Nic::~Nic() = default;

int Nic::create(const NicParams &p, std::unique_ptr<Nic> *out)
{
	std::unique_ptr<Nic> n(new Nic());
	n->e_ = std::make_unique<Engine>(p);
	int err = n->e_->start();
	if (err)
		return err;
	IBVC_INFO("emu", "{}: nic up", n->e_->params.name);
	*out = std::move(n);
	return 0;
}

bool Nic::fatal() const
{
	return e_->dead.load();
}

uint16_t Nic::udp_port() const
{
	return e_->port->port();
}

const NicParams &Nic::params() const
{
	return e_->params;
}

uint32_t Nic::active_mtu() const
{
	return e_->params.active_mtu;
}

int Nic::make_ring(uint32_t slots, uint32_t stride, std::unique_ptr<Ring> *out)
{
	// The engine runs in this process: the driver's own memory will do.
	*out = std::make_unique<Ring>(slots, stride);
	return 0;
}

int Nic::alloc_pd(uint32_t *pdn)
{
	return alloc_pd_in(kLocalSpace, pdn);
}

int Nic::alloc_pd_in(DmaSpace space, uint32_t *pdn)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	if (space < 0)
		return EINVAL;
	std::lock_guard lk(e_->mu);
	if (e_->pds.size() >= kMaxPds)
		return ENOMEM;
	uint32_t n = e_->next_pdn++;
	e_->pds.insert(n);
	if (space != kLocalSpace)
		e_->pd_spaces[n] = space;
	*pdn = n;
	return 0;
}

int Nic::dealloc_pd(uint32_t pdn)
{
	std::lock_guard lk(e_->mu);
	e_->pd_spaces.erase(pdn);
	return e_->pds.erase(pdn) ? 0 : EINVAL;
}

DmaSpace Nic::pd_space(uint32_t pdn) const
{
	std::lock_guard lk(e_->mu);
	return e_->pd_space(pdn);
}

int Nic::reg_mr(uint32_t pdn, const void *addr, uint64_t len, uint32_t access, uint32_t *key)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	std::lock_guard lk(e_->mu);
	if (!e_->pds.count(pdn))
		return EINVAL;
	return e_->mrs.add(pdn, reinterpret_cast<uint64_t>(addr), len, access, key);
}

int Nic::reg_mr_keyed(uint32_t pdn, const void *addr, uint64_t len, uint32_t access, uint32_t key)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	std::lock_guard lk(e_->mu);
	if (!e_->pds.count(pdn))
		return EINVAL;
	return e_->mrs.add_keyed(pdn, reinterpret_cast<uint64_t>(addr), len, access, key);
}

int Nic::dereg_mr(uint32_t key)
{
	std::lock_guard lk(e_->mu);
	return e_->mrs.remove(key);
}

int Nic::create_cq(Queue *ring, CqEventFn fn, void *arg, Cq **out, uint32_t *cqn)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	std::lock_guard lk(e_->mu);
	if (e_->cqs.size() >= kMaxCqs)
		return ENOMEM;
	auto cq = std::make_unique<Cq>();
	cq->ring = ring;
	cq->fn = fn;
	cq->arg = arg;
	cq->cqn = e_->next_cqn;
	Cq *c = cq.get();
	// Both tables or neither (an allocation may fail): the engine's
	// passes walk cqs.
	e_->cqs.push_back(c);
	try {
		e_->cqs_owner.insert(std::move(cq));
	} catch (...) {
		e_->cqs.pop_back();
		throw;
	}
	e_->next_cqn++;
	*out = c;
	*cqn = c->cqn;
	return 0;
}

int Nic::destroy_cq(Cq *cq)
{
	std::lock_guard lk(e_->mu);
	if (cq->users)
		return EBUSY;
	e_->cqs.erase(std::find(e_->cqs.begin(), e_->cqs.end(), cq));
	for (auto it = e_->cqs_owner.begin(); it != e_->cqs_owner.end(); ++it) {
		if (it->get() == cq) {
			e_->cqs_owner.erase(it);
			break;
		}
	}
	return 0;
}

int Nic::create_qp(const QpCreate &c, Qp **out, uint32_t *qpn)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	std::lock_guard lk(e_->mu);
	if (!e_->pds.count(c.pdn) || !c.sq || !c.rq || !c.send_cq || !c.recv_cq)
		return EINVAL;
	if (e_->qps.size() >= kMaxQps)
		return ENOMEM;
	auto qp = std::make_unique<Qp>();
	// QP numbers are 24 bits; 0 and 1 are the IBTA's special QPs.
	// A transport that addresses queue pairs numbers collective QPs.
	uint32_t n = 0;
	if (c.coll) {
		if (int err = e_->port->bind_qpn(&n))
			return err;
		if (n && e_->qps.count(n)) {
			e_->port->unbind_qpn(n);
			return EEXIST;
		}
	}
	const bool bound = n != 0;
	if (!n) {
		n = e_->next_qpn;
		while (e_->qps.count(n) || n < 2)
			n = (n + 1) & wire::kQpnMask;
	}
	qp->qpn = n;
	qp->pdn = c.pdn;
	qp->space = e_->pd_space(c.pdn);
	qp->sq = c.sq;
	qp->rq = c.rq;
	qp->scq = c.send_cq;
	qp->rcq = c.recv_cq;
	qp->sig_all = c.sig_all;
	qp->coll = c.coll;
	Qp *q = qp.get();
	// What can fail (allocation) comes before anything is changed: a
	// call that fails changes nothing (the port's QPN given back).
	try {
		qp->meta.assign(c.sq->slots(), WqeMeta{});
		e_->qps.emplace(n, std::move(qp));
	} catch (...) {
		if (bound)
			e_->port->unbind_qpn(n);
		throw;
	}
	if (!bound)
		e_->next_qpn = (n + 1) & wire::kQpnMask;
	c.send_cq->users++;
	c.recv_cq->users++;
	*out = q;
	*qpn = n;
	return 0;
}

int Nic::modify_qp(Qp *qp, const QpAttr &a, uint32_t mask)
{
	if (fatal())
		return EIO; // the device failed: only destroying goes on
	std::lock_guard lk(e_->mu);
	Engine &e = *e_;
	// Check everything before changing anything.
	IpAddr src;
	if (mask & kQpAv) {
		if (a.sgid_index >= e.params.gids.size())
			return EINVAL;
		src = e.params.gids[a.sgid_index];
		// Both ends must use one address family (the ICRC covers the IP
		// header the packet really travels with), and IPv6 needs a socket
		// that has it.
		if (src.v4() != a.remote.ip.v4() || (!e.port->ipv6() && !a.remote.ip.v4()))
			return EINVAL;
	}
	if ((mask & kQpPathMtu) && (!a.path_mtu || a.path_mtu > e.params.active_mtu))
		return EINVAL;
	// Only RESET and ERROR are reachable from ERROR, whatever the driver
	// believed the state to be.
	if (qp->state == QpState::err && (mask & kQpState) && a.state != QpState::reset &&
	    a.state != QpState::err)
		return EINVAL;
	if (mask & kQpJob) {
		if (!qp->coll || !a.job)
			return EINVAL;
		int err = e.coll->configure(*qp, *a.job); // the last check: it installs the job
		if (err)
			return err;
	}

	QpAttr &t = qp->attr;
	if (mask & kQpAv) {
		t.remote = a.remote;
		t.sgid_index = a.sgid_index;
		qp->src_ip = src;
	}
	if (mask & kQpPathMtu)
		t.path_mtu = a.path_mtu;
	if (mask & kQpAccess)
		t.access = a.access;
	if (mask & kQpDestQpn)
		t.dest_qpn = a.dest_qpn & wire::kQpnMask;
	if (mask & kQpRqPsn)
		t.rq_psn = a.rq_psn & wire::kPsnMask;
	if (mask & kQpSqPsn)
		t.sq_psn = a.sq_psn & wire::kPsnMask;
	if (mask & kQpTimeout)
		t.timeout = a.timeout;
	if (mask & kQpRetryCnt)
		t.retry_cnt = a.retry_cnt;
	if (mask & kQpRnrRetry)
		t.rnr_retry = a.rnr_retry;
	if (mask & kQpMinRnrTimer)
		t.min_rnr_timer = a.min_rnr_timer;
	if (mask & kQpMaxRdAtomic)
		t.max_rd_atomic = std::max<uint8_t>(a.max_rd_atomic, 1);
	if (mask & kQpMaxDestRdAtomic)
		t.max_dest_rd_atomic = a.max_dest_rd_atomic;

	if (mask & kQpState) {
		QpState from = qp->state;
		switch (a.state) {
		case QpState::reset: e.qp_reset(*qp); break;
		case QpState::rtr:
			if (from == QpState::init) {
				qp->epsn = t.rq_psn;
				qp->nak_sent = qp->ack_due = false;
			}
			qp->state = QpState::rtr;
			break;
		case QpState::rts:
			if (from == QpState::rtr) {
				qp->req_psn = qp->sent_psn = qp->una = qp->npsn = t.sq_psn;
				qp->req_idx = qp->sq->cons();
				qp->retries_left = t.retry_cnt;
				qp->rnr_left = t.rnr_retry;
			}
			qp->state = QpState::rts;
			break;
		case QpState::err: e.qp_to_error(*qp, "moved by the application"); break;
		default: qp->state = a.state; break;
		}
	}
	// Timer settings take effect at once, in RTS as at the transition.
	if (mask & (kQpTimeout | kQpState)) {
		uint8_t te = t.timeout ? t.timeout : e.params.cfg.rc_timeout;
		qp->rto_ns = 4096ull << te;
	}
	if (mask & kQpRetryCnt)
		qp->retries_left = t.retry_cnt;
	if (mask & kQpRnrRetry)
		qp->rnr_left = t.rnr_retry;
	return 0;
}

int Nic::query_qp(Qp *qp, QpAttr *a)
{
	std::lock_guard lk(e_->mu);
	*a = qp->attr;
	a->state = qp->state;
	return 0;
}

// A collective QP's job leaves once its peers have what it sent them (the
// exchange completes a message on its result, before they acknowledge;
// coll/xchg_ack.cc), or after a bound: so a process may destroy its QP and
// leave right after its last collective, as with an RC send.
void Nic::settle_coll(Qp *qp)
{
	const uint64_t end = util::now_ns() + kLeaveWaitMs * util::kNsPerMs;
	for (;;) {
		{
			std::lock_guard lk(e_->mu);
			if (e_->dead.load() || !e_->coll->leaving(*qp, util::now_ns()) ||
			    util::now_ns() > end)
				return;
		}
		e_->kick();
		usleep(50);
	}
}

int Nic::destroy_qp(Qp *qp)
{
	if (qp->coll && e_->coll)
		settle_coll(qp);
	std::lock_guard lk(e_->mu);
	e_->release_job(*qp);
	qp->scq->users--;
	qp->rcq->users--;
	if (qp->coll)
		e_->port->unbind_qpn(qp->qpn);
	e_->qps.erase(qp->qpn);
	return 0;
}

void Nic::share_awake_word(std::atomic<uint32_t> *word)
{
	// 0 until the engine thread next wakes: clients ring until then.
	word->store(0);
	std::lock_guard lk(e_->mu);
	e_->awake_word = word;
}

void Nic::sq_doorbell(Qp *)
{
	e_->kick();
}

void Nic::rq_doorbell(Qp *)
{
	// A posted receive may unblock a sender waiting out an RNR NAK only
	// when its timer fires, as on a wire; nothing to start here, but a
	// blocked responder state is re-examined on the next pass.
	e_->kick();
}

void Nic::cq_arm(Cq *cq, bool solicited_only)
{
	cq->arm.store(solicited_only ? kArmSolicited : kArmAny);
	e_->app_sleeps();
}

void Nic::progress(const Cq *cq)
{
	if (cq->arm.load(std::memory_order_relaxed) == kArmOff)
		e_->app_polled();
	e_->kick(cq);
}

NicCounters Nic::counters()
{
	std::lock_guard lk(e_->mu);
	return e_->snapshot_locked();
}

uint32_t Nic::seg_units() const
{
	return e_->coll->seg_units();
}

uint32_t Nic::seg_unit_bytes() const
{
	return e_->coll->seg_unit_bytes();
}

int Nic::check_local(uint32_t pdn, const Sge *sges, const uint64_t *len, uint32_t n, uint32_t need)
{
	// The MR table's own lock only: a post does not wait for the engine.
	for (uint32_t i = 0; i < n; i++) {
		if (!len[i])
			continue;
		if (sges[i].length < len[i] ||
		    e_->mrs.check(sges[i].lkey, pdn, sges[i].addr, len[i], need) != DmaErr::ok)
			return EINVAL;
	}
	return 0;
}

} // namespace ibv_coll::emu
