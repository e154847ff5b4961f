// The driver layer: protection domains, memory regions and completion queues.
#include "drv.h"

#include "util/log.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace ibv_coll::drv {

Pd *alloc_engine_pd(emu::Device *nic)
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

int dealloc_pd(core::Pd *p)
{
	Pd *pd = to_drv(p);
	int err = pd->nic->dealloc_pd(pd->pdn);
	if (!err)
		delete pd;
	return err;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

// Fault the region's pages in now, as a NIC's registration pins them
// (writable when the device may write them): the device's engine thread,
// which moves the data, then takes no page fault (a first touch of 16 MiB
// under transparent huge pages can stall it for tens of milliseconds,
// longer than a 4 ms transport timer).  Best effort: a kernel before 5.14
// (EINVAL), a range the application cannot touch this way, or one larger
// than a quarter of the machine's memory (a sparse reservation, which
// filling would exhaust memory) leaves the pages to fault on first use.
static void populate(void *addr, size_t len, int access)
{
	static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
	static const long phys = sysconf(_SC_PHYS_PAGES); // a syscall: once
	if (!len || (phys > 0 && len / page > uint64_t(phys) / 4))
		return;
	const uintptr_t lo = uintptr_t(addr) & ~(page - 1);
	const uintptr_t hi = (uintptr_t(addr) + len + page - 1) & ~(page - 1);
	const bool wr = access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	const int saved = errno;
	(void)madvise(reinterpret_cast<void *>(lo), hi - lo,
		      wr ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
	errno = saved;
}

core::Mr *reg_mr(core::Pd *p, void *addr, size_t len, int access)
{
	Pd *pd = to_drv(p);
	auto mr = std::make_unique<Mr>();
	mr->nic = pd->nic;
	uint32_t key;
	int err = pd->nic->reg_mr(pd->pdn, addr, len, uint32_t(access), &key);
	if (err) {
		errno = err;
		return nullptr;
	}
	mr->pub.lkey = mr->pub.rkey = mr->pub.handle = key;
	populate(addr, len, access);
	return mr.release();
}

int dereg_mr(core::Mr *m)
{
	Mr *mr = to_drv(m);
	int err = mr->nic->dereg_mr(mr->pub.lkey);
	if (!err)
		delete mr;
	return err;
}

static void cq_event_fn(void *arg)
{
	core::cq_event(static_cast<core::Cq *>(arg));
}

Cq *create_engine_cq(emu::Device *nic, int cqe, core::Cq *event_to)
{
	if (cqe < 1 || uint32_t(cqe) > kMaxCqe) {
		errno = EINVAL;
		return nullptr;
	}
	auto cq = std::make_unique<Cq>();
	cq->nic = nic;
	int err = nic->make_ring(uint32_t(cqe), uint32_t(sizeof(emu::Cqe)), &cq->ring);
	if (err) {
		errno = err;
		return nullptr;
	}
	err = nic->create_cq(cq->ring.get(), cq_event_fn,
			     event_to ? event_to : static_cast<core::Cq *>(cq.get()), &cq->hw,
			     &cq->pub.handle);
	if (err) {
		errno = err;
		return nullptr;
	}
	cq->pub.cqe = int(cq->ring->slots());
	return cq.release();
}

int destroy_cq(core::Cq *c)
{
	Cq *cq = to_drv(c);
	int err = cq->nic->destroy_cq(cq->hw);
	if (!err)
		delete cq;
	return err;
}

// The NIC's CQE fields carry the public values: the translation below is a
// copy, and these say so (a renumbering on either side fails to compile).
static_assert(uint8_t(emu::WcStatus::success) == IBV_WC_SUCCESS &&
	      uint8_t(emu::WcStatus::loc_len_err) == IBV_WC_LOC_LEN_ERR &&
	      uint8_t(emu::WcStatus::loc_qp_op_err) == IBV_WC_LOC_QP_OP_ERR &&
	      uint8_t(emu::WcStatus::loc_prot_err) == IBV_WC_LOC_PROT_ERR &&
	      uint8_t(emu::WcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR &&
	      uint8_t(emu::WcStatus::bad_resp_err) == IBV_WC_BAD_RESP_ERR &&
	      uint8_t(emu::WcStatus::loc_access_err) == IBV_WC_LOC_ACCESS_ERR &&
	      uint8_t(emu::WcStatus::rem_inv_req_err) == IBV_WC_REM_INV_REQ_ERR &&
	      uint8_t(emu::WcStatus::rem_access_err) == IBV_WC_REM_ACCESS_ERR &&
	      uint8_t(emu::WcStatus::rem_op_err) == IBV_WC_REM_OP_ERR &&
	      uint8_t(emu::WcStatus::retry_exc_err) == IBV_WC_RETRY_EXC_ERR &&
	      uint8_t(emu::WcStatus::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR &&
	      uint8_t(emu::WcStatus::rem_abort_err) == IBV_WC_REM_ABORT_ERR &&
	      uint8_t(emu::WcStatus::fatal_err) == IBV_WC_FATAL_ERR &&
	      uint8_t(emu::WcStatus::resp_timeout_err) == IBV_WC_RESP_TIMEOUT_ERR &&
	      uint8_t(emu::WcStatus::general_err) == IBV_WC_GENERAL_ERR);
static_assert(uint8_t(emu::WcOpcode::send) == IBV_COLL_WC_SEND &&
	      uint8_t(emu::WcOpcode::rdma_write) == IBV_COLL_WC_RDMA_WRITE &&
	      uint8_t(emu::WcOpcode::rdma_read) == IBV_COLL_WC_RDMA_READ &&
	      uint8_t(emu::WcOpcode::recv) == IBV_COLL_WC_RECV &&
	      uint8_t(emu::WcOpcode::recv_rdma_imm) == IBV_COLL_WC_RECV_RDMA_WITH_IMM);
static_assert(uint8_t(emu::CollOp::allreduce) == IBV_COLL_WC_ALLREDUCE &&
	      uint8_t(emu::CollOp::reduce) == IBV_COLL_WC_REDUCE &&
	      uint8_t(emu::CollOp::bcast) == IBV_COLL_WC_BCAST &&
	      uint8_t(emu::CollOp::allgather) == IBV_COLL_WC_ALLGATHER &&
	      uint8_t(emu::CollOp::reduce_scatter) == IBV_COLL_WC_REDUCE_SCATTER &&
	      uint8_t(emu::CollOp::barrier) == IBV_COLL_WC_BARRIER &&
	      uint8_t(emu::CollOp::query) == IBV_COLL_WC_QUERY &&
	      uint8_t(emu::CollOp::allreduce) == IBV_COLL_WR_ALLREDUCE &&
	      uint8_t(emu::CollOp::query) == IBV_COLL_WR_QUERY);
static_assert(uint8_t(emu::CollStatus::success) == IBV_COLL_STATUS_SUCCESS &&
	      uint8_t(emu::CollStatus::buffer_err) == IBV_COLL_STATUS_BUFFER_ERR &&
	      uint8_t(emu::CollStatus::timeout) == IBV_COLL_STATUS_TIMEOUT &&
	      uint8_t(emu::CollStatus::remote_abort) == IBV_COLL_STATUS_REMOTE_ABORT &&
	      uint8_t(emu::CollStatus::denied) == IBV_COLL_STATUS_DENIED &&
	      uint8_t(emu::CollStatus::local_err) == IBV_COLL_STATUS_LOCAL_ERR &&
	      uint8_t(emu::CollStatus::flushed) == IBV_COLL_STATUS_FLUSHED);
static_assert(uint8_t(emu::MsgState::unknown) == IBV_COLL_MSG_UNKNOWN &&
	      uint8_t(emu::MsgState::queued) == IBV_COLL_MSG_QUEUED &&
	      uint8_t(emu::MsgState::active) == IBV_COLL_MSG_ACTIVE &&
	      uint8_t(emu::MsgState::done) == IBV_COLL_MSG_DONE &&
	      uint8_t(emu::MsgState::failed) == IBV_COLL_MSG_FAILED);
static_assert(unsigned(emu::kRanLocal) << 8 == IBV_COLL_WC_LOCAL &&
	      unsigned(emu::kRanRing) << 8 == IBV_COLL_WC_RING &&
	      unsigned(emu::kRanSwitch) << 8 == IBV_COLL_WC_SWITCH &&
	      unsigned(emu::kRanHierarchy) << 8 == IBV_COLL_WC_HIERARCHY &&
	      unsigned(emu::kRanFallback) << 8 == IBV_COLL_WC_FALLBACK &&
	      unsigned(emu::kCqeWithImm) == IBV_COLL_WC_WITH_IMM);
static_assert(uint8_t(emu::WrOpcode::rdma_write) == IBV_COLL_WR_RDMA_WRITE &&
	      uint8_t(emu::WrOpcode::rdma_write_imm) == IBV_COLL_WR_RDMA_WRITE_WITH_IMM &&
	      uint8_t(emu::WrOpcode::send) == IBV_COLL_WR_SEND &&
	      uint8_t(emu::WrOpcode::send_imm) == IBV_COLL_WR_SEND_WITH_IMM &&
	      uint8_t(emu::WrOpcode::rdma_read) == IBV_COLL_WR_RDMA_READ);

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
	Cq *cq = to_drv(c);
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
	Cq *cq = to_drv(c);
	cq->nic->cq_arm(cq->hw, solicited_only != 0);
	return 0;
}

} // namespace ibv_coll::drv
