// libFuzzer target: what an application hands the library, through the
// public API on a real crxe device (crxe_lo): job attributes
// (ibv_modify_coll_qp to RTR with a fuzzed ibv_coll_job_attr, switch
// attributes included), then chains of fuzzed work requests posted on the
// collective QP and on an RC QP connected to itself over loopback, with
// receive WRs, and the CQ polled.  Every call must return 0 or an errno
// and leave the device usable; a failed post must name a WR of the chain.
#include <ibv_coll/ibv_coll.h>

#include <fuzzer/FuzzedDataProvider.h>

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBuf = 1 << 16;

struct Dev {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_mr *mr = nullptr;
	ibv_coll_cq *cq = nullptr;
	uint16_t port = 0;
	alignas(64) uint8_t buf[kBuf];

	Dev()
	{
		int n = 0;
		ibv_coll_device **l = ibv_get_coll_device_list(&n);
		for (int i = 0; l && i < n && !ctx; i++)
			if (!strcmp(ibv_get_coll_device_name(l[i]), "crxe_lo"))
				ctx = ibv_open_coll_device(l[i]);
		ibv_free_coll_device_list(l);
		if (!ctx)
			abort();
		pd = ibv_alloc_coll_pd(ctx);
		mr = ibv_reg_coll_mr(pd, buf, kBuf,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_REMOTE_READ);
		cq = ibv_create_coll_cq(ctx, 256, nullptr, nullptr, 0);
		ibv_coll_port_attr pa;
		if (!pd || !mr || !cq || ibv_query_coll_port(ctx, 1, &pa))
			abort();
		port = pa.udp_port;
	}
};

Dev &dev()
{
	static Dev *d = new Dev; // lives to the end: the fuzzer exits without teardown
	return *d;
}

void gid_lo(union ibv_gid *g, uint8_t last)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	g->raw[12] = 127;
	g->raw[15] = last;
}

// An SGE: mostly inside the registered buffer, sometimes anywhere.
ibv_sge sge(FuzzedDataProvider &f, Dev &d)
{
	ibv_sge s;
	if (f.ConsumeBool()) {
		uint32_t off = f.ConsumeIntegralInRange<uint32_t>(0, kBuf);
		s.addr = uint64_t(uintptr_t(d.buf + off));
		s.length = f.ConsumeIntegralInRange<uint32_t>(0, uint32_t(kBuf - off));
		s.lkey = f.ConsumeBool() ? d.mr->lkey : f.ConsumeIntegral<uint32_t>();
	} else {
		s.addr = f.ConsumeIntegral<uint64_t>();
		s.length = f.ConsumeIntegral<uint32_t>();
		s.lkey = f.ConsumeBool() ? d.mr->lkey : f.ConsumeIntegral<uint32_t>();
	}
	return s;
}

int drive(ibv_coll_qp *qp, ibv_coll_qp_attr &a, int mask)
{
	int err = ibv_modify_coll_qp(qp, &a, mask);
	if (err < 0 || err > 4095)
		abort(); // an int-returning verb returns 0 or a positive errno
	return err;
}

void coll_qp(FuzzedDataProvider &f, Dev &d)
{
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = d.cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = f.ConsumeIntegralInRange<uint32_t>(1, 16);
	ia.cap.max_send_sge = f.ConsumeIntegralInRange<uint32_t>(1, 4);
	ibv_coll_qp *qp = ibv_create_coll_qp(d.pd, &ia);
	if (!qp)
		abort();
	// The job: members on loopback (this device first or not), a topology,
	// Seg range, block length, switch attributes, all from the input.
	std::vector<ibv_coll_member> m(f.ConsumeIntegralInRange<uint32_t>(0, 66));
	for (size_t i = 0; i < m.size(); i++) {
		gid_lo(&m[i].gid, f.ConsumeIntegralInRange<uint8_t>(1, 3));
		m[i].udp_port = i == 0 ? d.port : f.ConsumeIntegral<uint16_t>();
		m[i].num_ranks = f.ConsumeIntegralInRange<uint16_t>(0, 66);
		m[i].qp_num = i == 0 ? qp->qp_num : f.ConsumeIntegral<uint32_t>();
	}
	ibv_coll_switch_addr sw_addr[4]{};
	for (auto &s : sw_addr) {
		gid_lo(&s.gid, 9);
		s.udp_port = f.ConsumeIntegral<uint16_t>();
	}
	uint8_t member_leaf[66] = {};
	ibv_coll_switch_attr sw{};
	sw.num_planes = f.ConsumeIntegralInRange<uint32_t>(0, 9);
	sw.num_leaves = f.ConsumeIntegralInRange<uint32_t>(0, 3);
	sw.leaves = sw.num_planes * sw.num_leaves <= 4 ? sw_addr : nullptr;
	sw.spines = f.ConsumeBool() ? sw_addr : nullptr;
	sw.member_leaf = f.ConsumeBool() ? member_leaf : nullptr;
	sw.window = f.ConsumeIntegral<uint8_t>();
	sw.flags = f.ConsumeIntegralInRange<uint32_t>(0, 4);
	ibv_coll_job_attr job{};
	job.comp_mask = f.ConsumeIntegralInRange<uint64_t>(0, 2);
	job.jid = f.ConsumeIntegral<uint32_t>();
	job.node_index = f.ConsumeIntegralInRange<uint32_t>(0, 2);
	job.num_nodes = f.ConsumeBool() ? uint32_t(m.size()) : f.ConsumeIntegral<uint32_t>() % 70;
	if (job.num_nodes > m.size())
		job.num_nodes = uint32_t(m.size());
	job.members = m.empty() ? nullptr : m.data();
	job.topology = ibv_coll_topology(f.ConsumeIntegralInRange<int>(-1, 5));
	job.seg_base = f.ConsumeIntegral<uint16_t>();
	job.seg_count = f.ConsumeIntegral<uint16_t>();
	job.block_len = f.ConsumeIntegral<uint16_t>();
	job.job_key = f.ConsumeIntegral<uint64_t>();
	job.timeout_ms = f.ConsumeIntegralInRange<uint32_t>(0, 50);
	job.flags = f.ConsumeIntegralInRange<uint32_t>(0, 1);
	job.sw = f.ConsumeBool() ? &sw : nullptr;

	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	bool rts = !drive(qp, a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = ibv_mtu(f.ConsumeIntegralInRange<int>(0, 6));
	a.job = &job;
	rts = rts && !drive(qp, a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU);
	a.qp_state = IBV_QPS_RTS;
	rts = rts && !drive(qp, a, IBV_COLL_QP_STATE);

	// A chain of collective WRs, whatever the QP's state.
	const size_t n = f.ConsumeIntegralInRange<size_t>(1, 8);
	std::vector<ibv_coll_send_wr> wr(n);
	std::vector<std::vector<ibv_sge>> src(n), dst(n);
	for (size_t i = 0; i < n; i++) {
		ibv_coll_send_wr &w = wr[i];
		w = {};
		w.wr_id = i;
		w.next = i + 1 < n ? &wr[i + 1] : nullptr;
		w.opcode = ibv_coll_wr_opcode(f.ConsumeIntegralInRange<int>(-1, 0x48));
		w.send_flags = f.ConsumeIntegralInRange<unsigned>(0, 15);
		w.num_sge = f.ConsumeIntegralInRange<int>(-1, 5);
		src[i].resize(5);
		dst[i].resize(5);
		for (int k = 0; k < 5; k++) {
			src[i][size_t(k)] = sge(f, d);
			dst[i][size_t(k)] = sge(f, d);
		}
		w.sg_list = f.ConsumeBool() ? src[i].data() : nullptr;
		w.wr.coll.dst_list = f.ConsumeBool() ? dst[i].data() : nullptr;
		w.wr.coll.count = f.ConsumeBool() ? f.ConsumeIntegralInRange<uint64_t>(0, 4096)
						  : f.ConsumeIntegral<uint64_t>();
		w.wr.coll.op = ibv_coll_op(f.ConsumeIntegralInRange<int>(-1, 9));
		w.wr.coll.dtype = ibv_coll_dtype(f.ConsumeIntegralInRange<int>(-1, 13));
		w.wr.coll.root = f.ConsumeIntegralInRange<uint32_t>(0, 70);
		w.wr.coll.mid = f.ConsumeIntegralInRange<uint32_t>(0, 3);
		w.wr.coll.block_len = f.ConsumeIntegralInRange<uint32_t>(0, 5000);
	}
	ibv_coll_send_wr *bad = nullptr;
	int err = ibv_post_coll_send(qp, wr.data(), &bad);
	if (err && (!bad || bad < wr.data() || bad >= wr.data() + n))
		abort(); // bad_wr names the first WR not posted
	ibv_coll_wc wc[16];
	for (int i = 0; i < 4; i++)
		if (ibv_poll_coll_cq(d.cq, 16, wc) < 0)
			abort();
	(void)rts;
	if (ibv_destroy_coll_qp(qp))
		abort();
	while (ibv_poll_coll_cq(d.cq, 16, wc) > 0) // flushed completions
		;
}

void rc_qp(FuzzedDataProvider &f, Dev &d)
{
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = d.cq;
	ia.qp_type = IBV_COLL_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	ibv_coll_qp *qp = ibv_create_coll_qp(d.pd, &ia);
	if (!qp)
		abort();
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;
	drive(qp, a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	gid_lo(&a.ah_attr.dgid, 1);
	a.ah_attr.udp_port = d.port;
	a.dest_qp_num = qp->qp_num; // itself, over loopback
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	drive(qp, a,
	      IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU | IBV_COLL_QP_DEST_QPN |
		      IBV_COLL_QP_RQ_PSN | IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
		      IBV_COLL_QP_MIN_RNR_TIMER);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 1;
	a.retry_cnt = 1;
	a.rnr_retry = 1;
	a.max_rd_atomic = 1;
	drive(qp, a,
	      IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT |
		      IBV_COLL_QP_RNR_RETRY | IBV_COLL_QP_MAX_QP_RD_ATOMIC);

	ibv_sge rs[4][2];
	ibv_coll_recv_wr rw[4];
	const size_t nr = f.ConsumeIntegralInRange<size_t>(0, 4);
	for (size_t i = 0; i < nr; i++) {
		rs[i][0] = sge(f, d);
		rs[i][1] = sge(f, d);
		rw[i] = {};
		rw[i].wr_id = 100 + i;
		rw[i].next = i + 1 < nr ? &rw[i + 1] : nullptr;
		rw[i].sg_list = rs[i];
		rw[i].num_sge = f.ConsumeIntegralInRange<int>(-1, 3);
	}
	ibv_coll_recv_wr *rbad = nullptr;
	if (nr && ibv_post_coll_recv(qp, rw, &rbad) && (!rbad || rbad < rw || rbad >= rw + nr))
		abort();
	const size_t n = f.ConsumeIntegralInRange<size_t>(1, 6);
	ibv_coll_send_wr wr[6];
	ibv_sge ss[6][3];
	for (size_t i = 0; i < n; i++) {
		ibv_coll_send_wr &w = wr[i];
		w = {};
		w.wr_id = i;
		w.next = i + 1 < n ? &wr[i + 1] : nullptr;
		w.opcode = ibv_coll_wr_opcode(f.ConsumeIntegralInRange<int>(-1, 6));
		w.send_flags = f.ConsumeIntegralInRange<unsigned>(0, 15);
		for (auto &s : ss[i])
			s = sge(f, d);
		w.sg_list = ss[i];
		w.num_sge = f.ConsumeIntegralInRange<int>(-1, 3);
		w.imm_data = f.ConsumeIntegral<uint32_t>();
		if (f.ConsumeBool()) {
			uint32_t off = f.ConsumeIntegralInRange<uint32_t>(0, kBuf);
			w.wr.rdma.remote_addr = uint64_t(uintptr_t(d.buf + off));
		} else {
			w.wr.rdma.remote_addr = f.ConsumeIntegral<uint64_t>();
		}
		w.wr.rdma.rkey = f.ConsumeBool() ? d.mr->rkey : f.ConsumeIntegral<uint32_t>();
	}
	ibv_coll_send_wr *bad = nullptr;
	if (ibv_post_coll_send(qp, wr, &bad) && (!bad || bad < wr || bad >= wr + n))
		abort();
	ibv_coll_wc wc[16];
	for (int i = 0; i < 20; i++)
		if (ibv_poll_coll_cq(d.cq, 16, wc) < 0)
			abort();
	if (ibv_destroy_coll_qp(qp))
		abort();
	while (ibv_poll_coll_cq(d.cq, 16, wc) > 0)
		;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FuzzedDataProvider f(data, size);
	Dev &d = dev();
	if (f.ConsumeBool())
		coll_qp(f, d);
	else
		rc_qp(f, d);
	return 0;
}
