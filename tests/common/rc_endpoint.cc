// One side of an RC connection for tests, through the public API only.
#include "rc_endpoint.h"

#include <sched.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace ibvc_test {

std::string test_device_name()
{
	const char *e = getenv("IBV_COLL_TEST_DEV");
	return e && *e ? e : "crxe_lo";
}

bool test_device_is_emulated()
{
	return test_device_name().rfind("crxe_", 0) == 0;
}

ibv_coll_context *open_test_device()
{
	int n = 0;
	ibv_coll_context *ctx = nullptr;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	for (int i = 0; l && i < n && !ctx; i++)
		if (test_device_name() == ibv_get_coll_device_name(l[i]))
			ctx = ibv_open_coll_device(l[i]);
	ibv_free_coll_device_list(l);
	return ctx;
}

int test_gid_index()
{
	const char *e = getenv("IBV_COLL_TEST_GID");
	return e && *e ? atoi(e) : 0;
}

RcEndpoint::~RcEndpoint()
{
	if (qp)
		ibv_destroy_coll_qp(qp);
	if (mr)
		ibv_dereg_coll_mr(mr);
	if (cq)
		ibv_destroy_coll_cq(cq);
	if (pd)
		ibv_dealloc_coll_pd(pd);
	if (ctx)
		ibv_close_coll_device(ctx);
	if (buf)
		munmap(buf, size);
}

int RcEndpoint::open(const RcOptions &o)
{
	opt = o;
	std::string name = o.dev.empty() ? test_device_name() : o.dev;
	int n = 0;
	ibv_coll_device **list = ibv_get_coll_device_list(&n);
	if (!list)
		return errno;
	for (int i = 0; i < n && !ctx; i++)
		if (name == ibv_get_coll_device_name(list[i]))
			ctx = ibv_open_coll_device(list[i]);
	int err = ctx ? 0 : (n ? errno : ENODEV);
	ibv_free_coll_device_list(list);
	if (!ctx)
		return err ? err : ENODEV;
	size = o.buf_size ? o.buf_size : 4096;
	void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return errno;
	buf = static_cast<uint8_t *>(p);
	if (!(pd = ibv_alloc_coll_pd(ctx)))
		return errno;
	if (!(cq = ibv_create_coll_cq(ctx, int(o.max_wr * 2), nullptr, nullptr, 0)))
		return errno;
	if (!(mr = ibv_reg_coll_mr(pd, buf, size, o.access)))
		return errno;
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_COLL_QPT_RC;
	ia.cap.max_send_wr = o.max_wr;
	ia.cap.max_recv_wr = o.max_wr;
	ia.cap.max_send_sge = 4;
	ia.cap.max_recv_sge = 4;
	if (!(qp = ibv_create_coll_qp(pd, &ia)))
		return errno;
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = unsigned(o.access);
	return ibv_modify_coll_qp(qp, &a,
				  IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS);
}

PeerInfo RcEndpoint::info() const
{
	PeerInfo pi{};
	ibv_gid gid;
	ibv_query_coll_gid(ctx, 1, opt.gid_index, &gid);
	memcpy(pi.gid, gid.raw, 16);
	ibv_coll_port_attr pa;
	ibv_query_coll_port(ctx, 1, &pa);
	pi.udp_port = pa.udp_port;
	pi.qpn = qp->qp_num;
	pi.psn = opt.psn;
	pi.rkey = mr->rkey;
	pi.addr = reinterpret_cast<uint64_t>(buf);
	pi.size = size;
	return pi;
}

int RcEndpoint::connect(const PeerInfo &r)
{
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = opt.mtu;
	a.dest_qp_num = r.qpn;
	a.rq_psn = r.psn;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = opt.min_rnr_timer;
	memcpy(a.ah_attr.dgid.raw, r.gid, 16);
	a.ah_attr.udp_port = r.udp_port;
	a.ah_attr.sgid_index = uint8_t(opt.gid_index);
	int err = ibv_modify_coll_qp(qp, &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
					     IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN |
					     IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
					     IBV_COLL_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = opt.psn;
	a.timeout = opt.timeout;
	a.retry_cnt = opt.retry_cnt;
	a.rnr_retry = opt.rnr_retry;
	a.max_rd_atomic = 16;
	return ibv_modify_coll_qp(qp, &a,
				  IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT |
					  IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY |
					  IBV_COLL_QP_MAX_QP_RD_ATOMIC);
}

int RcEndpoint::post_send(ibv_coll_wr_opcode op, uint64_t off, uint32_t len, uint64_t raddr,
			  uint32_t rkey, uint64_t wr_id, uint32_t imm, bool signaled)
{
	ibv_sge sge{reinterpret_cast<uint64_t>(buf) + off, len, mr->lkey};
	ibv_coll_send_wr wr{};
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = signaled ? IBV_COLL_SEND_SIGNALED : 0;
	wr.imm_data = imm;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	ibv_coll_send_wr *bad;
	return ibv_post_coll_send(qp, &wr, &bad);
}

int RcEndpoint::post_recv(uint64_t off, uint32_t len, uint64_t wr_id)
{
	ibv_sge sge{reinterpret_cast<uint64_t>(buf) + off, len, mr->lkey};
	ibv_coll_recv_wr wr{};
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	ibv_coll_recv_wr *bad;
	return ibv_post_coll_recv(qp, &wr, &bad);
}

int RcEndpoint::wait(ibv_coll_wc *wc, int timeout_ms)
{
	auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
	for (unsigned spins = 0;; spins++) {
		int n = ibv_poll_coll_cq(cq, 1, wc);
		if (n < 0)
			return -n;
		if (n == 1)
			return 0;
		if (std::chrono::steady_clock::now() > end)
			return ETIMEDOUT;
		// Two cores host both processes and their engines: stop hogging
		// one after a short spin.
		if (spins > 200)
			sched_yield();
	}
}

} // namespace ibvc_test
