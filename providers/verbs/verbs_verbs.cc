// verbs: protection domains, memory regions and completion queues, each
// over its libibverbs object; ibv_wc is translated into ibv_coll_wc.
#include "verbs.h"

#include "drv.h"

#include "util/log.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace ibv_coll::verbs {

core::Pd *alloc_pd(core::Context *c)
{
	auto pd = std::make_unique<Pd>();
	if (!(pd->vpd = ibv_alloc_pd(to_verbs(c)->vctx))) {
		errno = verr(-1);
		return nullptr;
	}
	pd->pub.handle = pd->vpd->handle;
	if (int err = engine_pd(to_verbs(c), pd.get())) {
		ibv_dealloc_pd(pd->vpd);
		errno = err;
		return nullptr;
	}
	return pd.release();
}

int dealloc_pd(core::Pd *p)
{
	Pd *pd = to_verbs(p);
	if (int err = ibv_dealloc_pd(pd->vpd))
		return verr(err);
	engine_pd_free(pd);
	delete pd;
	return 0;
}

core::Mr *reg_mr(core::Pd *p, void *addr, size_t len, int access)
{
	// The access bits are libibverbs' own (the core allows LOCAL_WRITE,
	// REMOTE_WRITE and REMOTE_READ).
	auto mr = std::make_unique<Mr>();
	if (!(mr->vmr = ibv_reg_mr(to_verbs(p)->vpd, addr, len, access))) {
		int err = verr(-1);
		IBVC_DEBUG("verbs", "reg_mr {} bytes: {}", len, util::errstr(err));
		errno = err;
		return nullptr;
	}
	mr->pub.lkey = mr->vmr->lkey;
	mr->pub.rkey = mr->vmr->rkey;
	mr->pub.handle = mr->vmr->handle;
	mr->access = access;
	if (int err = engine_mr(to_verbs(p), mr.get(), addr, len, access)) {
		IBVC_WARN("verbs", "reg_mr: the collective engine's table: {}", util::errstr(err));
		ibv_dereg_mr(mr->vmr);
		errno = err;
		return nullptr;
	}
	return mr.release();
}

int dereg_mr(core::Mr *m)
{
	Mr *mr = to_verbs(m);
	// The engine forgets the key first: it must never reach memory the
	// device no longer pins.
	engine_mr_free(mr);
	if (int err = ibv_dereg_mr(mr->vmr)) {
		engine_mr(to_verbs(core::to_core(mr->pub.pd)), mr, mr->pub.addr, mr->pub.length,
			  mr->access);
		return verr(err);
	}
	delete mr;
	return 0;
}

core::Cq *create_cq(core::Context *c, int cqe, core::CompChannel *ch)
{
	Context *ctx = to_verbs(c);
	auto cq = std::make_unique<Cq>();
	// A CQ with a channel reports to the context's one real channel; the
	// event names our CQ through the CQ context.
	cq->vcq = ibv_create_cq(ctx->vctx, cqe, static_cast<core::Cq *>(cq.get()),
				ch ? ctx->vch : nullptr, 0);
	if (!cq->vcq) {
		errno = verr(-1);
		return nullptr;
	}
	cq->pub.handle = cq->vcq->handle;
	cq->pub.cqe = cq->vcq->cqe; // what the device allocated, as in libibverbs
	if (int err = engine_cq(ctx, cq.get(), cqe)) {
		ibv_destroy_cq(cq->vcq);
		errno = err;
		return nullptr;
	}
	return cq.release();
}

int destroy_cq(core::Cq *c)
{
	Cq *cq = to_verbs(c);
	Context *ctx = ctx_of(cq->pub.context);
	// The event thread is not between a real event and ours; one that came
	// after the core looked is unacknowledged, so the CQ stays.
	std::lock_guard lk(ctx->ev_mu);
	if (cq->events_written.load() > cq->events_acked.load())
		return EBUSY;
	if (int err = ibv_destroy_cq(cq->vcq))
		return verr(err);
	engine_cq_free(cq);
	delete cq;
	return 0;
}

namespace {

static_assert(int(IBV_COLL_WC_SEND) == int(IBV_WC_SEND) &&
	      int(IBV_COLL_WC_RDMA_WRITE) == int(IBV_WC_RDMA_WRITE) &&
	      int(IBV_COLL_WC_RDMA_READ) == int(IBV_WC_RDMA_READ) &&
	      int(IBV_COLL_WC_RECV) == int(IBV_WC_RECV) &&
	      int(IBV_COLL_WC_RECV_RDMA_WITH_IMM) == int(IBV_WC_RECV_RDMA_WITH_IMM) &&
	      int(IBV_COLL_WC_WITH_IMM) == int(IBV_WC_WITH_IMM));

void to_wc(const ibv_wc &v, ibv_coll_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = v.wr_id;
	// Copied as integers: a device leaves the opcode of an error
	// completion undefined, and C++ must not load it as an enum.
	int status = core::raw_enum(v.status), opcode = core::raw_enum(v.opcode);
	memcpy(&wc->status, &status, sizeof(status));
	memcpy(&wc->opcode, &opcode, sizeof(opcode));
	wc->vendor_err = v.vendor_err;
	wc->byte_len = v.byte_len;
	if (v.wc_flags & IBV_WC_WITH_IMM) {
		wc->wc_flags |= IBV_COLL_WC_WITH_IMM;
		wc->imm_data = v.imm_data; // network order in both
	}
	wc->qp_num = v.qp_num;
	if (opcode & IBV_WC_RECV)
		wc->src_qp = v.src_qp;
}

} // namespace

int poll_cq(core::Cq *c, int n, ibv_coll_wc *wc)
{
	Cq *cq = to_verbs(c);
	ibv_wc v[16];
	int done = 0;
	// Collective completions first (the engine's ring), then the device's.
	if (cq->ecq) {
		done = drv::poll_cq(cq->ecq, n, wc);
		if (done < 0)
			return done;
	}
	while (done < n) {
		int want = std::min(n - done, int(std::size(v)));
		int got = ibv_poll_cq(cq->vcq, want, v);
		if (got < 0) {
			IBVC_ERR("verbs", "cq {}: poll failed ({})", cq->pub.handle, got);
			return done ? done : -EIO;
		}
		for (int i = 0; i < got; i++)
			to_wc(v[i], &wc[done + i]);
		done += got;
		if (got < want)
			break;
	}
	return done;
}

int req_notify_cq(core::Cq *c, int solicited_only)
{
	Cq *cq = to_verbs(c);
	if (int err = ibv_req_notify_cq(cq->vcq, solicited_only))
		return verr(err);
	if (cq->ecq)
		return drv::req_notify_cq(cq->ecq, solicited_only);
	return 0;
}

} // namespace ibv_coll::verbs
