// Entry points for queue pairs: creation, the IBTA state machine, query,
// and posting.
#include "core.h"

#include <span>

using namespace ibv_coll;
using namespace ibv_coll::core;

namespace ibv_coll::core {

int check_qp_transition(ibv_coll_qp_type type, ibv_qp_state cur, ibv_qp_state next, int mask)
{
	// Required and optional attributes of each legal RC transition.
	struct Rule {
		ibv_qp_state from, to;
		int req, opt;
	};
	const int S = IBV_COLL_QP_STATE;
	static const Rule rules[] = {
		{IBV_QPS_RESET, IBV_QPS_INIT, S | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS,
		 IBV_COLL_QP_PKEY_INDEX},
		{IBV_QPS_INIT, IBV_QPS_INIT, S,
		 IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_PKEY_INDEX},
		{IBV_QPS_INIT, IBV_QPS_RTR,
		 S | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU | IBV_COLL_QP_DEST_QPN |
			 IBV_COLL_QP_RQ_PSN | IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
			 IBV_COLL_QP_MIN_RNR_TIMER,
		 IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_PKEY_INDEX},
		{IBV_QPS_RTR, IBV_QPS_RTS,
		 S | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT |
			 IBV_COLL_QP_RNR_RETRY | IBV_COLL_QP_MAX_QP_RD_ATOMIC,
		 IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_MIN_RNR_TIMER},
		{IBV_QPS_RTS, IBV_QPS_RTS, S,
		 IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_MIN_RNR_TIMER | IBV_COLL_QP_TIMEOUT |
			 IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY},
	};
	// A collective QP has no single peer: the job replaces the path.
	static const Rule coll_rules[] = {
		{IBV_QPS_RESET, IBV_QPS_INIT, S | IBV_COLL_QP_PORT,
		 IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_PKEY_INDEX},
		{IBV_QPS_INIT, IBV_QPS_INIT, S, IBV_COLL_QP_PORT},
		{IBV_QPS_INIT, IBV_QPS_RTR, S | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU, 0},
		{IBV_QPS_RTR, IBV_QPS_RTS, S, IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT},
		{IBV_QPS_RTS, IBV_QPS_RTS, S, 0},
	};
	if (mask &
	    ~(S | IBV_COLL_QP_CUR_STATE | IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_PKEY_INDEX |
	      IBV_COLL_QP_PORT | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU | IBV_COLL_QP_TIMEOUT |
	      IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY | IBV_COLL_QP_RQ_PSN |
	      IBV_COLL_QP_MAX_QP_RD_ATOMIC | IBV_COLL_QP_MIN_RNR_TIMER | IBV_COLL_QP_SQ_PSN |
	      IBV_COLL_QP_MAX_DEST_RD_ATOMIC | IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_JOB))
		return EINVAL;
	mask &= ~IBV_COLL_QP_CUR_STATE;
	if (!(mask & S))
		next = cur;
	// Any state may go to RESET or ERROR with no other attribute.
	if ((next == IBV_QPS_RESET || next == IBV_QPS_ERR) && (mask & S))
		return (mask & ~S) ? EINVAL : 0;
	if (!(mask & S)) {
		// Attributes alone: allowed where a same-state rule allows them.
		mask |= S;
	}
	for (const Rule &r : type == IBV_COLL_QPT_COLL ? std::span<const Rule>(coll_rules)
						       : std::span<const Rule>(rules)) {
		if (r.from != cur || r.to != next)
			continue;
		if ((mask & r.req) != r.req || (mask & ~(r.req | r.opt)))
			return EINVAL;
		return 0;
	}
	return EINVAL;
}

} // namespace ibv_coll::core

IBV_COLL_EXPORT ibv_coll_qp *ibv_create_coll_qp(ibv_coll_pd *pd, ibv_coll_qp_init_attr *attr)
{
	return guard_ptr<ibv_coll_qp>("ibv_create_coll_qp", [&]() -> ibv_coll_qp * {
		if (!pd || !attr || !attr->send_cq || !attr->recv_cq ||
		    attr->send_cq->context != pd->context ||
		    attr->recv_cq->context != pd->context || attr->comp_mask) {
			errno = EINVAL;
			return nullptr;
		}
		Qp *qp = pd->context->device->ops->create_qp(to_core(pd), attr);
		if (!qp)
			return nullptr;
		ibv_coll_qp &q = qp->pub;
		q.context = pd->context;
		q.qp_context = attr->qp_context;
		q.pd = pd;
		q.send_cq = attr->send_cq;
		q.recv_cq = attr->recv_cq;
		q.state = IBV_QPS_RESET;
		q.qp_type = attr->qp_type;
		to_core(pd)->children++;
		to_core(attr->send_cq)->users++;
		to_core(attr->recv_cq)->users++;
		return &q;
	});
}

IBV_COLL_EXPORT int ibv_destroy_coll_qp(ibv_coll_qp *qp)
{
	return guard_int("ibv_destroy_coll_qp", [&] {
		if (!qp)
			return EINVAL;
		Pd *pd = to_core(qp->pd);
		Cq *scq = to_core(qp->send_cq), *rcq = to_core(qp->recv_cq);
		int err = qp->context->device->ops->destroy_qp(to_core(qp));
		if (err)
			return err;
		pd->children--;
		scq->users--;
		rcq->users--;
		return 0;
	});
}

IBV_COLL_EXPORT int ibv_modify_coll_qp(ibv_coll_qp *qp, ibv_coll_qp_attr *attr, int attr_mask)
{
	return guard_int("ibv_modify_coll_qp", [&] {
		if (!qp || !attr)
			return EINVAL;
		// The device may have moved the QP to ERROR on its own: check the
		// transition from the state it is really in.
		ibv_coll_qp_attr now{};
		ibv_coll_qp_init_attr init{};
		int qerr = qp->context->device->ops->query_qp(to_core(qp), &now, IBV_COLL_QP_STATE,
							      &init);
		if (qerr)
			return qerr;
		ibv_qp_state cur = now.qp_state;
		qp->state = cur;
		if ((attr_mask & IBV_COLL_QP_CUR_STATE) && attr->cur_qp_state != cur)
			return EINVAL;
		if ((attr_mask & IBV_COLL_QP_STATE) && (raw_enum(attr->qp_state) < IBV_QPS_RESET ||
							raw_enum(attr->qp_state) > IBV_QPS_ERR))
			return EINVAL;
		if ((attr_mask & IBV_COLL_QP_CUR_STATE) &&
		    (raw_enum(attr->cur_qp_state) < IBV_QPS_RESET ||
		     raw_enum(attr->cur_qp_state) > IBV_QPS_ERR))
			return EINVAL;
		int err = check_qp_transition(qp->qp_type, cur, attr->qp_state, attr_mask);
		if (err) {
			IBVC_DEBUG("core", "qp {:#x}: transition {} -> {} with mask {:#x} refused",
				   qp->qp_num, int(cur), int(attr->qp_state), attr_mask);
			return err;
		}
		err = qp->context->device->ops->modify_qp(to_core(qp), attr, attr_mask);
		if (!err && (attr_mask & IBV_COLL_QP_STATE))
			qp->state = attr->qp_state;
		return err;
	});
}

IBV_COLL_EXPORT int ibv_query_coll_qp(ibv_coll_qp *qp, ibv_coll_qp_attr *attr, int attr_mask,
				      ibv_coll_qp_init_attr *init_attr)
{
	return guard_int("ibv_query_coll_qp", [&] {
		if (!qp || !attr || !init_attr)
			return EINVAL;
		return qp->context->device->ops->query_qp(to_core(qp), attr, attr_mask, init_attr);
	});
}

IBV_COLL_EXPORT int ibv_post_coll_send(ibv_coll_qp *qp, ibv_coll_send_wr *wr,
				       ibv_coll_send_wr **bad_wr)
{
	return guard_int("ibv_post_coll_send", [&] {
		if (!qp || !wr || !bad_wr) {
			if (bad_wr)
				*bad_wr = wr;
			return EINVAL;
		}
		if (to_core(qp->context)->fatal) {
			*bad_wr = wr; // the device is gone (IBV_EVENT_DEVICE_FATAL)
			return EIO;
		}
		return qp->context->device->ops->post_send(to_core(qp), wr, bad_wr);
	});
}

IBV_COLL_EXPORT int ibv_post_coll_recv(ibv_coll_qp *qp, ibv_coll_recv_wr *wr,
				       ibv_coll_recv_wr **bad_wr)
{
	return guard_int("ibv_post_coll_recv", [&] {
		if (!qp || !wr || !bad_wr) {
			if (bad_wr)
				*bad_wr = wr;
			return EINVAL;
		}
		if (to_core(qp->context)->fatal) {
			*bad_wr = wr; // the device is gone (IBV_EVENT_DEVICE_FATAL)
			return EIO;
		}
		return qp->context->device->ops->post_recv(to_core(qp), wr, bad_wr);
	});
}
