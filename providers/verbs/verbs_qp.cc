// verbs: RC queue pairs over libibverbs QPs.  Our attributes carry the
// libibverbs fields and mask bits; the address vector becomes a GRH (the
// GID, as RoCE routes by it), and our udp_port, which a kernel or NIC
// RoCE stack does not let a QP choose, is ignored.  Work requests are
// checked whole, then translated and posted as one chain.
#include "verbs.h"

#include "drv.h"

#include "util/log.h"

#include <cstring>
#include <memory>
#include <vector>

namespace ibv_coll::verbs {
namespace {

// Our mask bits, opcodes and flags are libibverbs' values.
constexpr bool same(int ours, int theirs)
{
	return ours == theirs;
}
static_assert(same(IBV_COLL_QP_STATE, IBV_QP_STATE) &&
	      same(IBV_COLL_QP_CUR_STATE, IBV_QP_CUR_STATE) &&
	      same(IBV_COLL_QP_ACCESS_FLAGS, IBV_QP_ACCESS_FLAGS) &&
	      same(IBV_COLL_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX) &&
	      same(IBV_COLL_QP_PORT, IBV_QP_PORT) && same(IBV_COLL_QP_AV, IBV_QP_AV) &&
	      same(IBV_COLL_QP_PATH_MTU, IBV_QP_PATH_MTU) &&
	      same(IBV_COLL_QP_TIMEOUT, IBV_QP_TIMEOUT) &&
	      same(IBV_COLL_QP_RETRY_CNT, IBV_QP_RETRY_CNT) &&
	      same(IBV_COLL_QP_RNR_RETRY, IBV_QP_RNR_RETRY) &&
	      same(IBV_COLL_QP_RQ_PSN, IBV_QP_RQ_PSN) &&
	      same(IBV_COLL_QP_MAX_QP_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC) &&
	      same(IBV_COLL_QP_MIN_RNR_TIMER, IBV_QP_MIN_RNR_TIMER) &&
	      same(IBV_COLL_QP_SQ_PSN, IBV_QP_SQ_PSN) &&
	      same(IBV_COLL_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_DEST_RD_ATOMIC) &&
	      same(IBV_COLL_QP_DEST_QPN, IBV_QP_DEST_QPN));
static_assert(same(IBV_COLL_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE) &&
	      same(IBV_COLL_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM) &&
	      same(IBV_COLL_WR_SEND, IBV_WR_SEND) &&
	      same(IBV_COLL_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM) &&
	      same(IBV_COLL_WR_RDMA_READ, IBV_WR_RDMA_READ));
static_assert(same(IBV_COLL_SEND_FENCE, IBV_SEND_FENCE) &&
	      same(IBV_COLL_SEND_SIGNALED, IBV_SEND_SIGNALED) &&
	      same(IBV_COLL_SEND_SOLICITED, IBV_SEND_SOLICITED));
static_assert(same(IBV_COLL_QPT_RC, IBV_QPT_RC));

// Every RC attribute bit: all but IBV_COLL_QP_JOB.
constexpr int kRcMask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
			IBV_QP_PORT | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
			IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN;

ibv_qp_cap to_vcap(const ibv_coll_qp_cap &c)
{
	return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

ibv_coll_qp_cap from_vcap(const ibv_qp_cap &c)
{
	return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

} // namespace

int query_caps(core::Context *c, ibv_coll_caps *caps)
{
	return coll_caps(to_verbs(c), caps);
}

int query_counters(core::Context *c, ibv_coll_counters *cnt)
{
	return coll_counters(to_verbs(c), cnt);
}

core::Qp *create_qp(core::Pd *p, ibv_coll_qp_init_attr *ia)
{
	Pd *pd = to_verbs(p);
	Context *ctx = ctx_of(pd->pub.context);
	const int type = core::raw_enum(ia->qp_type);
	if (type == IBV_COLL_QPT_COLL)
		return create_coll_qp(pd, ia);
	if (type != IBV_COLL_QPT_RC) {
		errno = EINVAL;
		return nullptr;
	}
	auto qp = std::make_unique<Qp>();
	ibv_qp_init_attr vi{};
	vi.send_cq = to_verbs(core::to_core(ia->send_cq))->vcq;
	vi.recv_cq = to_verbs(core::to_core(ia->recv_cq))->vcq;
	vi.cap = to_vcap(ia->cap);
	vi.qp_type = IBV_QPT_RC;
	vi.sq_sig_all = ia->sq_sig_all;
	if (!(qp->vqp = ibv_create_qp(pd->vpd, &vi))) {
		int err = verr(-1);
		IBVC_DEBUG("verbs", "{}: create_qp: {}", ctx->dev->name, util::errstr(err));
		errno = err;
		return nullptr;
	}
	// Report what was really allocated, as libibverbs does.
	ia->cap = from_vcap(vi.cap);
	qp->init = *ia;
	qp->pub.qp_num = qp->vqp->qp_num;
	qp->pub.handle = qp->vqp->handle;
	return qp.release();
}

// A collective QP is crxe's, made on the engine (verbs_coll.cc).
static bool is_coll(const core::Qp *q)
{
	return core::raw_enum(q->pub.qp_type) == IBV_COLL_QPT_COLL;
}

int destroy_qp(core::Qp *q)
{
	if (is_coll(q))
		return drv::destroy_qp(q);
	Qp *qp = to_verbs(q);
	if (int err = ibv_destroy_qp(qp->vqp))
		return verr(err);
	delete qp;
	return 0;
}

int modify_qp(core::Qp *q, ibv_coll_qp_attr *a, int mask)
{
	if (is_coll(q))
		return modify_coll_qp(q, a, mask);
	Qp *qp = to_verbs(q);
	Context *ctx = ctx_of(qp->pub.context);
	if (mask & ~kRcMask)
		return EINVAL;
	const uint8_t port = mask & IBV_COLL_QP_PORT ? a->port_num : qp->port;
	if (port < 1 || port > ctx->ports.size())
		return EINVAL;
	// The IBTA's field widths (5, 3, 3 and 5 bits): a wider value would be
	// cut silently by some drivers.
	if ((mask & IBV_QP_TIMEOUT && a->timeout > 31) ||
	    (mask & IBV_QP_RETRY_CNT && a->retry_cnt > 7) ||
	    (mask & IBV_QP_RNR_RETRY && a->rnr_retry > 7) ||
	    (mask & IBV_QP_MIN_RNR_TIMER && a->min_rnr_timer > 31))
		return EINVAL;
	ibv_qp_attr v{};
	// Only the fields the mask names are read, as libibverbs does.
	if (mask & IBV_QP_STATE)
		v.qp_state = a->qp_state; // the core checked the range
	if (mask & IBV_QP_CUR_STATE)
		v.cur_qp_state = a->cur_qp_state;
	if (mask & IBV_QP_PATH_MTU) {
		int m = core::raw_enum(a->path_mtu);
		if (m < IBV_MTU_256 || m > IBV_MTU_4096)
			return EINVAL;
		v.path_mtu = ibv_mtu(m);
	}
	if (mask & IBV_QP_ACCESS_FLAGS)
		v.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		v.pkey_index = a->pkey_index;
	// Our RESET -> INIT takes the P_Key index as optional (index 0, the
	// default partition); libibverbs devices require it.
	if ((mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_INIT &&
	    qp->pub.state == IBV_QPS_RESET && !(mask & IBV_QP_PKEY_INDEX)) {
		mask |= IBV_QP_PKEY_INDEX;
		v.pkey_index = 0;
	}
	if (mask & IBV_QP_PORT)
		v.port_num = a->port_num;
	if (mask & IBV_QP_AV) {
		// RoCE addresses by GID; InfiniBand needs a LID we cannot carry.
		if (ctx->ports[port - 1].link_layer != IBV_LINK_LAYER_ETHERNET) {
			IBVC_WARN("verbs",
				  "{}: qp {:#x}: port {} is not Ethernet (RoCE); "
				  "InfiniBand addressing is not supported",
				  ctx->dev->name, qp->pub.qp_num, int(port));
			return EOPNOTSUPP;
		}
		if (a->ah_attr.sgid_index >= ctx->ports[port - 1].gid_tbl_len)
			return EINVAL;
		v.ah_attr.is_global = 1;
		memcpy(v.ah_attr.grh.dgid.raw, a->ah_attr.dgid.raw, 16);
		v.ah_attr.grh.sgid_index = a->ah_attr.sgid_index;
		v.ah_attr.grh.hop_limit = kHopLimit;
		v.ah_attr.port_num = port;
		// a->ah_attr.udp_port is ignored: the RoCE stack owns port 4791.
	}
	if (mask & IBV_QP_TIMEOUT)
		v.timeout = a->timeout ? a->timeout : kDefaultTimeout;
	if (mask & IBV_QP_RETRY_CNT)
		v.retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		v.rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_RQ_PSN)
		v.rq_psn = a->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		v.sq_psn = a->sq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		v.max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		v.max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		v.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_DEST_QPN)
		v.dest_qp_num = a->dest_qp_num;
	if (int err = ibv_modify_qp(qp->vqp, &v, mask)) {
		err = verr(err);
		IBVC_DEBUG("verbs", "{}: qp {:#x}: modify (mask {:#x}) refused: {}", ctx->dev->name,
			   qp->pub.qp_num, mask, util::errstr(err));
		return err;
	}
	if (mask & IBV_QP_PORT)
		qp->port = port;
	if (mask & IBV_QP_STATE)
		qp->pub.state = a->qp_state;
	return 0;
}

int query_qp(core::Qp *q, ibv_coll_qp_attr *a, int mask, ibv_coll_qp_init_attr *init)
{
	if (is_coll(q))
		return query_coll_qp(q, a, mask, init);
	// The device holds the truth (it may have moved the QP to ERROR).
	Qp *qp = to_verbs(q);
	Context *ctx = ctx_of(qp->pub.context);
	ibv_qp_attr v{};
	ibv_qp_init_attr vi{};
	if (int err = ibv_query_qp(qp->vqp, &v, kRcMask | IBV_QP_CAP, &vi))
		return verr(err);
	memset(a, 0, sizeof(*a));
	a->qp_state = v.qp_state;
	a->cur_qp_state = v.cur_qp_state;
	a->path_mtu = v.path_mtu;
	a->rq_psn = v.rq_psn;
	a->sq_psn = v.sq_psn;
	a->dest_qp_num = v.dest_qp_num;
	a->qp_access_flags = v.qp_access_flags;
	a->cap = from_vcap(vi.cap);
	memcpy(a->ah_attr.dgid.raw, v.ah_attr.grh.dgid.raw, 16);
	a->ah_attr.sgid_index = v.ah_attr.grh.sgid_index;
	a->ah_attr.udp_port = ctx->ports[qp->port - 1].link_layer == IBV_LINK_LAYER_ETHERNET
				      ? kRoceUdpPort
				      : 0;
	a->pkey_index = v.pkey_index;
	a->max_rd_atomic = v.max_rd_atomic;
	a->max_dest_rd_atomic = v.max_dest_rd_atomic;
	a->min_rnr_timer = v.min_rnr_timer;
	a->port_num = v.port_num ? v.port_num : qp->port;
	a->timeout = v.timeout;
	a->retry_cnt = v.retry_cnt;
	a->rnr_retry = v.rnr_retry;
	*init = qp->init;
	init->cap = a->cap;
	return 0;
}

namespace {

// A chain of up to this many WRs is translated on the stack.
constexpr size_t kStackWrs = 16;

} // namespace

int post_send(core::Qp *q, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad)
{
	if (is_coll(q))
		return drv::post_send(q, wr, bad);
	Qp *qp = to_verbs(q);
	ibv_qp_state st = qp->pub.state;
	if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) {
		*bad = wr;
		return EINVAL;
	}
	size_t n = 0;
	for (ibv_coll_send_wr *w = wr; w; w = w->next, n++) {
		if (int err = drv::check_send_wr(w, qp->init.cap.max_send_sge)) {
			*bad = w;
			return err;
		}
	}
	ibv_send_wr stack[kStackWrs];
	std::vector<ibv_send_wr> heap;
	ibv_send_wr *v = stack;
	if (n > kStackWrs) {
		heap.resize(n);
		v = heap.data();
	}
	size_t i = 0;
	for (ibv_coll_send_wr *w = wr; w; w = w->next, i++) {
		ibv_send_wr &x = v[i];
		x = {};
		x.wr_id = w->wr_id;
		x.next = i + 1 < n ? &v[i + 1] : nullptr;
		x.sg_list = w->sg_list; // struct ibv_sge is shared
		x.num_sge = w->num_sge;
		x.opcode = ibv_wr_opcode(core::raw_enum(w->opcode));
		x.send_flags = w->send_flags;
		x.imm_data = w->imm_data;
		x.wr.rdma.remote_addr = w->wr.rdma.remote_addr;
		x.wr.rdma.rkey = w->wr.rdma.rkey;
	}
	ibv_send_wr *vbad = nullptr;
	int err = ibv_post_send(qp->vqp, v, &vbad);
	if (!err)
		return 0;
	// Name the caller's WR that the device refused.
	*bad = wr;
	if (vbad)
		for (ibv_send_wr *x = v; x && x != vbad; x = x->next)
			*bad = (*bad)->next;
	return verr(err);
}

int post_recv(core::Qp *q, ibv_coll_recv_wr *wr, ibv_coll_recv_wr **bad)
{
	if (is_coll(q))
		return drv::post_recv(q, wr, bad);
	Qp *qp = to_verbs(q);
	if (qp->pub.state == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	size_t n = 0;
	for (ibv_coll_recv_wr *w = wr; w; w = w->next, n++) {
		if (w->num_sge < 0 || uint32_t(w->num_sge) > qp->init.cap.max_recv_sge ||
		    (w->num_sge && !w->sg_list)) {
			*bad = w;
			return EINVAL;
		}
	}
	ibv_recv_wr stack[kStackWrs];
	std::vector<ibv_recv_wr> heap;
	ibv_recv_wr *v = stack;
	if (n > kStackWrs) {
		heap.resize(n);
		v = heap.data();
	}
	size_t i = 0;
	for (ibv_coll_recv_wr *w = wr; w; w = w->next, i++)
		v[i] = {w->wr_id, i + 1 < n ? &v[i + 1] : nullptr, w->sg_list, w->num_sge};
	ibv_recv_wr *vbad = nullptr;
	int err = ibv_post_recv(qp->vqp, v, &vbad);
	if (!err)
		return 0;
	*bad = wr;
	if (vbad)
		for (ibv_recv_wr *x = v; x && x != vbad; x = x->next)
			*bad = (*bad)->next;
	return verr(err);
}

} // namespace ibv_coll::verbs
