// crxe: protection domains, memory regions and completion queues.
#include "crxe.h"

#include "util/log.h"

#include <cstring>

namespace ibv_coll::crxe {

Pd *alloc_engine_pd(emu::Nic *nic)
{
	auto pd = std::make_unique<Pd>();
	pd->nic = nic;
	int err = nic->alloc_pd(&pd->pdn);
	if (err) {
		errno = err;
		return nullptr;
	}
	pd->pub.handle = pd->pdn;
	return pd.release();
}

core::Pd *alloc_pd(core::Context *c)
{
	return alloc_engine_pd(to_crxe(c)->nic.get());
}

int dealloc_pd(core::Pd *p)
{
	Pd *pd = to_crxe(p);
	int err = pd->nic->dealloc_pd(pd->pdn);
	if (!err)
		delete pd;
	return err;
}

core::Mr *reg_mr(core::Pd *p, void *addr, size_t len, int access)
{
	Pd *pd = to_crxe(p);
	auto mr = std::make_unique<Mr>();
	mr->nic = pd->nic;
	uint32_t key;
	int err = pd->nic->reg_mr(pd->pdn, addr, len, uint32_t(access), &key);
	if (err) {
		errno = err;
		return nullptr;
	}
	mr->pub.lkey = mr->pub.rkey = mr->pub.handle = key;
	return mr.release();
}

int dereg_mr(core::Mr *m)
{
	Mr *mr = to_crxe(m);
	int err = mr->nic->dereg_mr(mr->pub.lkey);
	if (!err)
		delete mr;
	return err;
}

static void cq_event_fn(void *arg)
{
	core::cq_event(static_cast<core::Cq *>(arg));
}

Cq *create_engine_cq(emu::Nic *nic, int cqe, core::Cq *event_to)
{
	if (cqe < 1 || uint32_t(cqe) > kMaxCqe) {
		errno = EINVAL;
		return nullptr;
	}
	auto cq = std::make_unique<Cq>();
	cq->nic = nic;
	cq->ring = std::make_unique<emu::Queue>(uint32_t(cqe), uint32_t(sizeof(emu::Cqe)));
	int err = nic->create_cq(cq->ring.get(), cq_event_fn,
				 event_to ? event_to : static_cast<core::Cq *>(cq.get()), &cq->hw,
				 &cq->pub.handle);
	if (err) {
		errno = err;
		return nullptr;
	}
	cq->pub.cqe = int(cq->ring->slots());
	return cq.release();
}

core::Cq *create_cq(core::Context *c, int cqe, core::CompChannel *)
{
	return create_engine_cq(to_crxe(c)->nic.get(), cqe, nullptr);
}

int destroy_cq(core::Cq *c)
{
	Cq *cq = to_crxe(c);
	int err = cq->nic->destroy_cq(cq->hw);
	if (!err)
		delete cq;
	return err;
}

static void to_wc(const emu::Cqe &c, ibv_coll_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = c.wr_id;
	wc->status = ibv_wc_status(c.status);
	wc->opcode = ibv_coll_wc_opcode(c.opcode);
	wc->vendor_err = c.vendor_err;
	wc->byte_len = uint32_t(c.byte_len);
	wc->imm_data = c.imm;
	wc->qp_num = c.qpn;
	wc->src_qp = c.src_qp;
	wc->wc_flags = (c.flags & emu::kCqeWithImm ? IBV_COLL_WC_WITH_IMM : 0) |
		       unsigned(c.coll_flags) << 8;
	wc->jid = c.jid;
	wc->mid = c.mid;
	wc->coll_status = ibv_coll_status(c.coll_status);
	wc->msg_state = ibv_coll_msg_state(c.msg_state);
	wc->blocks_done = c.blocks_done;
	wc->blocks_total = c.blocks_total;
}

int poll_cq(core::Cq *c, int n, ibv_coll_wc *wc)
{
	Cq *cq = to_crxe(c);
	std::lock_guard lk(cq->mu);
	emu::Queue &q = *cq->ring;
	uint32_t cons = q.cons(), prod = q.prod();
	if (cons == prod) {
		// Nothing yet: lend this thread to the device, then look again.
		cq->nic->progress(cq->hw);
		prod = q.prod();
	}
	int k = 0;
	while (k < n && cons != prod) {
		to_wc(*q.at<emu::Cqe>(cons), &wc[k]);
		cons++;
		k++;
	}
	q.consume(cons);
	return k;
}

int req_notify_cq(core::Cq *c, int solicited_only)
{
	Cq *cq = to_crxe(c);
	cq->nic->cq_arm(cq->hw, solicited_only != 0);
	return 0;
}

} // namespace ibv_coll::crxe
