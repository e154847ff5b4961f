// The driver layer: queue pairs.  Posting writes WQEs into the QP's rings and rings
// the doorbell; modify and query go through the NIC's command interface.
#include "drv.h"

#include "util/log.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::drv {

core::Qp *create_qp(core::Pd *p, ibv_coll_qp_init_attr *ia)
{
	Pd *pd = to_drv(p);
	ibv_coll_qp_cap &cap = ia->cap;
	const int type = core::raw_enum(ia->qp_type);
	const bool coll = type == IBV_COLL_QPT_COLL;
	// A collective QP's SGEs are its local ranks' buffers (one source and
	// one destination each); it has no receive queue.
	if ((type != IBV_COLL_QPT_RC && !coll) || !cap.max_send_wr || cap.max_send_wr > kMaxQpWr ||
	    cap.max_recv_wr > kMaxQpWr ||
	    cap.max_send_sge > (coll ? emu::kMaxCollRanks : kMaxSge) ||
	    cap.max_recv_sge > kMaxSge || cap.max_inline_data ||
	    (coll && (cap.max_recv_wr || cap.max_recv_sge || !cap.max_send_sge))) {
		errno = EINVAL;
		return nullptr;
	}
	auto qp = std::make_unique<Qp>();
	int err = pd->nic->make_ring(cap.max_send_wr,
				     coll ? emu::coll_wqe_stride(cap.max_send_sge)
					  : emu::send_wqe_stride(std::max(cap.max_send_sge, 1u)),
				     &qp->sq);
	if (!err)
		err = pd->nic->make_ring(std::max(cap.max_recv_wr, 1u),
					 emu::recv_wqe_stride(std::max(cap.max_recv_sge, 1u)),
					 &qp->rq);
	if (err) {
		errno = err;
		return nullptr;
	}
	// Report what was really allocated, as libibverbs does.
	cap.max_send_wr = qp->sq->slots();
	cap.max_recv_wr = cap.max_recv_wr ? qp->rq->slots() : 0;
	cap.max_send_sge = std::max(cap.max_send_sge, 1u);
	if (!coll)
		cap.max_recv_sge = std::max(cap.max_recv_sge, 1u);

	emu::QpCreate c;
	c.pdn = pd->pdn;
	c.sq = qp->sq.get();
	c.rq = qp->rq.get();
	c.send_cq = to_drv(core::to_core(ia->send_cq))->hw;
	c.recv_cq = to_drv(core::to_core(ia->recv_cq))->hw;
	c.sig_all = ia->sq_sig_all != 0;
	c.coll = coll;
	qp->nic = pd->nic;
	qp->pdn = pd->pdn;
	err = pd->nic->create_qp(c, &qp->hw, &qp->pub.qp_num);
	if (err) {
		errno = err;
		return nullptr;
	}
	qp->init = *ia;
	qp->cap = cap;
	qp->pub.handle = qp->pub.qp_num;
	return qp.release();
}

int destroy_qp(core::Qp *q)
{
	Qp *qp = to_drv(q);
	int err = qp->nic->destroy_qp(qp->hw);
	if (!err)
		delete qp;
	return err;
}

int modify_qp(core::Qp *q, ibv_coll_qp_attr *a, int mask)
{
	Qp *qp = to_drv(q);
	emu::QpAttr e;
	if (mask & IBV_COLL_QP_PORT && a->port_num != 1)
		return EINVAL;
	if (mask & IBV_COLL_QP_PKEY_INDEX && a->pkey_index != 0)
		return EINVAL;
	if (mask & IBV_COLL_QP_ACCESS_FLAGS) {
		if (a->qp_access_flags &
		    ~unsigned(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ))
			return EINVAL;
		e.access = a->qp_access_flags;
	}
	if (mask & IBV_COLL_QP_PATH_MTU) {
		int m = core::raw_enum(a->path_mtu);
		if (m < IBV_MTU_256 || m > IBV_MTU_4096)
			return EINVAL;
		e.path_mtu = 128u << m;
	}
	if (mask & IBV_COLL_QP_AV) {
		memcpy(e.remote.ip.b, a->ah_attr.dgid.raw, 16);
		e.remote.port = a->ah_attr.udp_port ? a->ah_attr.udp_port : IBV_COLL_ROCE_UDP_PORT;
		e.sgid_index = a->ah_attr.sgid_index;
	}
	if (mask & IBV_COLL_QP_TIMEOUT) {
		if (a->timeout > 31)
			return EINVAL;
		e.timeout = a->timeout;
	}
	if ((mask & IBV_COLL_QP_RETRY_CNT && a->retry_cnt > 7) ||
	    (mask & IBV_COLL_QP_RNR_RETRY && a->rnr_retry > 7) ||
	    (mask & IBV_COLL_QP_MIN_RNR_TIMER && a->min_rnr_timer > 31))
		return EINVAL;
	e.retry_cnt = a->retry_cnt;
	e.rnr_retry = a->rnr_retry;
	e.min_rnr_timer = a->min_rnr_timer;
	e.dest_qpn = a->dest_qp_num;
	e.rq_psn = a->rq_psn;
	e.sq_psn = a->sq_psn;
	e.max_rd_atomic = a->max_rd_atomic;
	e.max_dest_rd_atomic = a->max_dest_rd_atomic;
	if ((mask & IBV_COLL_QP_MAX_QP_RD_ATOMIC && a->max_rd_atomic > 128) ||
	    (mask & IBV_COLL_QP_MAX_DEST_RD_ATOMIC && a->max_dest_rd_atomic > 128))
		return EINVAL;
	e.state = emu::QpState(mask & IBV_COLL_QP_STATE ? a->qp_state : qp->pub.state);
	emu::JobConfig job;
	if (mask & IBV_COLL_QP_JOB) {
		if (qp->pub.qp_type != IBV_COLL_QPT_COLL)
			return EINVAL;
		int err = coll_job_from_attr(qp, a->job, &job);
		if (err)
			return err;
		e.job = &job;
	}

	// Posting and the engine must not see a half-changed QP.
	std::scoped_lock lk(qp->sq_mu, qp->rq_mu);
	int err = qp->nic->modify_qp(qp->hw, e, uint32_t(mask));
	if (err)
		return err;
	if (mask & IBV_COLL_QP_STATE)
		qp->pub.state = a->qp_state;
	if (mask & IBV_COLL_QP_JOB) {
		qp->path_mtu = e.path_mtu;
		qp->local_ranks = job.my_count();
		// As emu::check_job numbered them, which the engine does too.
		qp->total_ranks = job.total_ranks;
		qp->first_rank = job.members[job.node].first_rank + job.local_first;
		qp->last_mid = 0;
		qp->have_job = true;
	}
	if ((mask & IBV_COLL_QP_STATE) && a->qp_state == IBV_QPS_RESET)
		qp->have_job = false;
	return 0;
}

static ibv_mtu mtu_enum(uint32_t bytes)
{
	for (int m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
		if (bytes == 128u << m)
			return ibv_mtu(m);
	return ibv_mtu(0);
}

int query_qp(core::Qp *q, ibv_coll_qp_attr *a, int, ibv_coll_qp_init_attr *init)
{
	// The device holds the truth (it may have moved the QP to ERROR).
	Qp *qp = to_drv(q);
	emu::QpAttr e;
	int err = qp->nic->query_qp(qp->hw, &e);
	if (err)
		return err;
	memset(a, 0, sizeof(*a));
	a->qp_state = ibv_qp_state(e.state);
	a->cur_qp_state = a->qp_state;
	a->path_mtu = mtu_enum(e.path_mtu);
	a->rq_psn = e.rq_psn;
	a->sq_psn = e.sq_psn;
	a->dest_qp_num = e.dest_qpn;
	a->qp_access_flags = e.access;
	a->cap = qp->cap;
	memcpy(a->ah_attr.dgid.raw, e.remote.ip.b, 16);
	a->ah_attr.udp_port = e.remote.port;
	a->ah_attr.sgid_index = e.sgid_index;
	a->max_rd_atomic = e.max_rd_atomic;
	a->max_dest_rd_atomic = e.max_dest_rd_atomic;
	a->min_rnr_timer = e.min_rnr_timer;
	a->port_num = 1;
	a->timeout = e.timeout;
	a->retry_cnt = e.retry_cnt;
	a->rnr_retry = e.rnr_retry;
	*init = qp->init;
	init->cap = qp->cap;
	return 0;
}

int check_send_wr(const ibv_coll_send_wr *wr, uint32_t max_send_sge)
{
	switch (core::raw_enum(wr->opcode)) {
	case IBV_COLL_WR_RDMA_WRITE:
	case IBV_COLL_WR_RDMA_WRITE_WITH_IMM:
	case IBV_COLL_WR_SEND:
	case IBV_COLL_WR_SEND_WITH_IMM:
	case IBV_COLL_WR_RDMA_READ: break;
	default: return EINVAL;
	}
	if (wr->num_sge < 0 || uint32_t(wr->num_sge) > max_send_sge ||
	    (wr->num_sge && !wr->sg_list))
		return EINVAL;
	if (wr->send_flags &
	    ~unsigned(IBV_COLL_SEND_FENCE | IBV_COLL_SEND_SIGNALED | IBV_COLL_SEND_SOLICITED))
		return EINVAL;
	uint64_t len = 0;
	for (int i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > kMaxMsg)
		return EINVAL;
	return 0;
}

int post_send(core::Qp *q, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad)
{
	Qp *qp = to_drv(q);
	if (qp->pub.qp_type == IBV_COLL_QPT_COLL)
		return post_coll(qp, wr, bad);
	if (qp->nic->fatal()) {
		*bad = wr;
		return EIO;
	}
	std::unique_lock lk(qp->sq_mu);
	ibv_qp_state st = qp->pub.state;
	if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) {
		*bad = wr;
		return EINVAL;
	}
	// Check the whole chain first, so that a bad WR posts nothing.
	emu::Queue &sq = *qp->sq;
	uint32_t free = sq.free_slots(), n = 0;
	for (ibv_coll_send_wr *w = wr; w; w = w->next, n++) {
		int err = check_send_wr(w, qp->cap.max_send_sge);
		if (!err && n >= free)
			err = ENOMEM;
		if (err) {
			*bad = w;
			return err;
		}
	}
	uint32_t prod = sq.prod_relaxed();
	for (ibv_coll_send_wr *w = wr; w; w = w->next, prod++) {
		auto *e = sq.at<emu::SendWqe>(prod);
		e->wr_id = w->wr_id;
		e->opcode = uint8_t(w->opcode);
		e->flags = uint8_t(w->send_flags);
		e->num_sge = uint16_t(w->num_sge);
		e->imm = w->imm_data;
		e->remote_addr = w->wr.rdma.remote_addr;
		e->rkey = w->wr.rdma.rkey;
		uint64_t len = 0;
		for (int i = 0; i < w->num_sge; i++) {
			const ibv_sge &s = w->sg_list[i];
			e->sges()[i] = emu::Sge{s.addr, s.length, s.lkey};
			len += s.length;
		}
		e->length = uint32_t(len);
	}
	sq.publish(prod);
	lk.unlock();
	qp->nic->sq_doorbell(qp->hw);
	return 0;
}

int post_recv(core::Qp *q, ibv_coll_recv_wr *wr, ibv_coll_recv_wr **bad)
{
	Qp *qp = to_drv(q);
	if (qp->nic->fatal()) {
		*bad = wr;
		return EIO;
	}
	std::unique_lock lk(qp->rq_mu);
	if (qp->pub.state == IBV_QPS_RESET || qp->pub.qp_type == IBV_COLL_QPT_COLL) {
		*bad = wr;
		return EINVAL;
	}
	emu::Queue &rq = *qp->rq;
	uint32_t free = qp->cap.max_recv_wr ? rq.free_slots() : 0, n = 0;
	for (ibv_coll_recv_wr *w = wr; w; w = w->next, n++) {
		int err = 0;
		if (w->num_sge < 0 || uint32_t(w->num_sge) > qp->cap.max_recv_sge ||
		    (w->num_sge && !w->sg_list))
			err = EINVAL;
		else if (n >= free)
			err = ENOMEM;
		if (err) {
			*bad = w;
			return err;
		}
	}
	uint32_t prod = rq.prod_relaxed();
	for (ibv_coll_recv_wr *w = wr; w; w = w->next, prod++) {
		auto *e = rq.at<emu::RecvWqe>(prod);
		e->wr_id = w->wr_id;
		e->num_sge = uint16_t(w->num_sge);
		uint64_t len = 0;
		for (int i = 0; i < w->num_sge; i++) {
			const ibv_sge &s = w->sg_list[i];
			e->sges()[i] = emu::Sge{s.addr, s.length, s.lkey};
			len += s.length;
		}
		e->length = uint32_t(std::min<uint64_t>(len, UINT32_MAX));
	}
	rq.publish(prod);
	lk.unlock();
	qp->nic->rq_doorbell(qp->hw);
	return 0;
}

} // namespace ibv_coll::drv
