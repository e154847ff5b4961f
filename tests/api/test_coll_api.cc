// Collective QPs through the C API in one process: capabilities, the job
// attribute's checks, the collective state machine, every class of bad
// collective WR (errno at post time, nothing posted), a one-node job's
// results against a scalar loop, QUERY, and the counters.
#include "coll_qp.h"

#include <ibv_coll/ibv_coll.h>

#include <gtest/gtest.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

using namespace ibvc_test;

namespace {

// One node, k local ranks, on the test device.
struct OneNode {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	ibv_coll_member me{};
	uint16_t k;
	explicit OneNode(uint16_t ranks, uint32_t max_send_sge = 0) : k(ranks)
	{
		if (!(ctx = open_test_device()))
			return;
		pd = ibv_alloc_coll_pd(ctx);
		cq = ibv_create_coll_cq(ctx, 64, nullptr, nullptr, 0);
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap.max_send_wr = 4;
		ia.cap.max_send_sge = max_send_sge ? max_send_sge : ranks;
		qp = ibv_create_coll_qp(pd, &ia);
		ibv_coll_port_attr pa;
		ibv_query_coll_port(ctx, 1, &pa);
		ibv_query_coll_gid(ctx, 1, 0, &me.gid);
		me.udp_port = pa.udp_port;
		me.num_ranks = ranks;
		me.qp_num = qp ? qp->qp_num : 0;
	}
	~OneNode()
	{
		if (qp)
			ibv_destroy_coll_qp(qp);
		if (cq)
			ibv_destroy_coll_cq(cq);
		if (pd)
			ibv_dealloc_coll_pd(pd);
		if (ctx)
			ibv_close_coll_device(ctx);
	}
	ibv_coll_job_attr job() const
	{
		ibv_coll_job_attr j{};
		j.jid = 5;
		j.num_nodes = 1;
		j.members = &me;
		j.seg_count = 16;
		j.job_key = 77;
		return j;
	}
	int init()
	{
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		return ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT);
	}
	int rtr(const ibv_coll_job_attr &j)
	{
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.job = &j;
		return ibv_modify_coll_qp(
			qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU);
	}
	int rts()
	{
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_RTS;
		return ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE);
	}
	int up()
	{
		ibv_coll_job_attr j = job();
		int err = init();
		return err ? err : (err = rtr(j)) ? err : rts();
	}
	ibv_coll_wc wait()
	{
		ibv_coll_wc wc{};
		for (int i = 0; i < 50000000 && ibv_poll_coll_cq(cq, 1, &wc) == 0; i++)
			;
		return wc;
	}
};

} // namespace

// flags took the padding the first layout had before max_count_bytes:
// programs built against it have room for it, and every offset stays.
static_assert(offsetof(ibv_coll_caps, max_block_len) == 40);
static_assert(offsetof(ibv_coll_caps, flags) == 44);
static_assert(offsetof(ibv_coll_caps, max_count_bytes) == 48);
static_assert(sizeof(ibv_coll_caps) == 56);

TEST(CollApi, Capabilities)
{
	OneNode n(1);
	ASSERT_TRUE(n.ctx);
	ibv_coll_caps c;
	ASSERT_EQ(ibv_query_coll_caps(n.ctx, &c), 0);
	EXPECT_EQ(c.opcodes, 0x7fu);
	EXPECT_EQ(c.ops, 0x1fffu);
	EXPECT_EQ(c.dtypes, 0x1ffffu);
	EXPECT_TRUE(c.topologies & (1u << IBV_COLL_TOPO_RING));
	EXPECT_GE(c.max_seg_units, 16u);
	EXPECT_EQ(c.max_local_ranks, 64u);
	EXPECT_EQ(c.max_nodes, 65535u);
	EXPECT_GE(c.max_count_bytes, 1ull << 30);
	// A context of its own NIC: the flags are valid and say it is not the
	// host's shared device (tests/devd checks the other way).
	if (!getenv("IBV_COLL_CRXE_SHARED")) {
		EXPECT_TRUE(c.comp_mask & IBV_COLL_CAPS_FLAGS);
		EXPECT_FALSE(c.flags & IBV_COLL_CAPS_SHARED_DEVICE);
	}
	EXPECT_EQ(ibv_query_coll_caps(nullptr, &c), EINVAL);
	EXPECT_EQ(ibv_query_coll_caps(n.ctx, nullptr), EINVAL);
}

TEST(CollApi, QpCreationAndJobChecks)
{
	OneNode n(2);
	ASSERT_TRUE(n.ctx && n.qp);
	auto bad_qp = [&](ibv_coll_qp_cap cap) {
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = n.cq;
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap = cap;
		ibv_coll_qp *q = ibv_create_coll_qp(n.pd, &ia);
		int e = errno;
		if (q)
			ibv_destroy_coll_qp(q);
		return q ? 0 : e;
	};
	EXPECT_EQ(bad_qp({4, 1, 2, 0, 0}), EINVAL) << "a receive queue";
	EXPECT_EQ(bad_qp({4, 0, 0, 0, 0}), EINVAL) << "no ranks";
	EXPECT_EQ(bad_qp({4, 0, 65, 0, 0}), EINVAL) << "65 ranks";
	EXPECT_EQ(bad_qp({4, 0, 64, 0, 0}), 0);

	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	EXPECT_EQ(ibv_modify_coll_qp(n.qp, &a, IBV_COLL_QP_STATE), EINVAL) << "no port";
	ASSERT_EQ(n.init(), 0);
	a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	EXPECT_EQ(ibv_modify_coll_qp(n.qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PATH_MTU), EINVAL)
		<< "no job";
	ibv_coll_job_attr j = n.job();
	ibv_coll_member m = n.me;
	auto rtr_with = [&](ibv_coll_job_attr jj) { return n.rtr(jj); };
	j = n.job();
	j.node_index = 1;
	EXPECT_EQ(rtr_with(j), EINVAL) << "node index past the members";
	j = n.job();
	j.members = nullptr;
	EXPECT_EQ(rtr_with(j), EINVAL);
	j = n.job();
	j.comp_mask = 1;
	EXPECT_EQ(rtr_with(j), EINVAL);
	j = n.job();
	j.seg_count = 0;
	EXPECT_EQ(rtr_with(j), EINVAL) << "no Seg units";
	j = n.job();
	j.seg_base = 1u << 30;
	EXPECT_EQ(rtr_with(j), EINVAL) << "Seg range past the pool";
	j = n.job();
	j.block_len = 12;
	EXPECT_EQ(rtr_with(j), EINVAL) << "block length not a multiple of 8";
	j = n.job();
	set_raw(j.topology, 9);
	EXPECT_EQ(rtr_with(j), EINVAL);
	j = n.job();
	j.topology = IBV_COLL_TOPO_SWITCH;
	EXPECT_EQ(rtr_with(j), EINVAL) << "SWITCH without switches";
	j.topology = IBV_COLL_TOPO_HIERARCHY;
	EXPECT_EQ(rtr_with(j), EINVAL) << "HIERARCHY without switches";
	{
		ibv_coll_switch_addr sw[4] = {};
		for (auto &x : sw) {
			x.gid = n.me.gid;
			x.udp_port = 4999;
		}
		uint8_t leaf_of[1] = {0};
		ibv_coll_switch_attr sa{};
		sa.num_planes = 1;
		sa.num_leaves = 1;
		sa.leaves = sw;
		j = n.job();
		j.topology = IBV_COLL_TOPO_SWITCH;
		j.comp_mask = IBV_COLL_JOB_ATTR_SWITCH;
		j.sw = nullptr;
		EXPECT_EQ(rtr_with(j), EINVAL) << "switch mask without the attribute";
		j.sw = &sa;
		sa.num_planes = 0;
		EXPECT_EQ(rtr_with(j), EINVAL) << "no planes";
		sa.num_planes = 9;
		EXPECT_EQ(rtr_with(j), EINVAL) << "9 planes";
		sa.num_planes = 1;
		sa.flags = 1u << 7;
		EXPECT_EQ(rtr_with(j), EINVAL) << "unknown switch flag";
		sa.flags = 0;
		sa.num_leaves = 2;
		EXPECT_EQ(rtr_with(j), EINVAL) << "two leaves and no spine";
		sa.spines = &sw[3];
		sa.member_leaf = leaf_of;
		EXPECT_EQ(rtr_with(j), EINVAL) << "SWITCH with two leaves";
		j.topology = IBV_COLL_TOPO_HIERARCHY;
		leaf_of[0] = 2;
		EXPECT_EQ(rtr_with(j), EINVAL) << "a member on a leaf that does not exist";
		sa.num_leaves = 1;
		EXPECT_EQ(rtr_with(j), EINVAL) << "HIERARCHY with one leaf";
		j.topology = IBV_COLL_TOPO_SWITCH;
		j.seg_count = 1;
		EXPECT_EQ(rtr_with(j), EINVAL) << "one Seg unit cannot hold a window";
		// Three levels (a good one runs in coll.*n4k2_switch_pods).
		uint8_t pod_of[2] = {0, 1};
		uint16_t leaf16[1] = {1};
		ibv_coll_pods_attr pa{};
		pa.num_pods = 2;
		pa.leaf_pod = pod_of;
		pa.cores = &sw[3];
		sa.num_leaves = 2;
		sa.spines = &sw[2]; // sw[2], sw[3]: a spine per pod
		leaf_of[0] = 0;
		j = n.job();
		j.topology = IBV_COLL_TOPO_HIERARCHY;
		j.comp_mask = IBV_COLL_JOB_ATTR_PODS;
		j.sw = &sa;
		j.pods = &pa;
		EXPECT_EQ(rtr_with(j), EINVAL) << "pods without switches";
		j.comp_mask |= IBV_COLL_JOB_ATTR_SWITCH;
		j.pods = nullptr;
		EXPECT_EQ(rtr_with(j), EINVAL) << "pods mask without the attribute";
		j.pods = &pa;
		for (uint32_t k : {1u, 65u}) {
			pa.num_pods = k;
			EXPECT_EQ(rtr_with(j), EINVAL) << k << " pods";
		}
		pa.num_pods = 2;
		pa.reserved = 1;
		EXPECT_EQ(rtr_with(j), EINVAL) << "reserved not 0";
		pa.reserved = 0;
		pa.leaf_pod = nullptr;
		EXPECT_EQ(rtr_with(j), EINVAL) << "no leaf's pod";
		pa.leaf_pod = pod_of;
		pa.cores = nullptr;
		EXPECT_EQ(rtr_with(j), EINVAL) << "no core";
		pa.cores = &sw[3];
		pod_of[1] = 2;
		EXPECT_EQ(rtr_with(j), EINVAL) << "a leaf in a pod the job does not have";
		pod_of[1] = 1;
		pa.member_leaf = leaf16;
		leaf16[0] = 2;
		EXPECT_EQ(rtr_with(j), EINVAL)
			<< "a member on a leaf that does not exist (16 bits)";
		sa.num_leaves = 65;
		pa.member_leaf = nullptr;
		j.comp_mask &= ~uint64_t(IBV_COLL_JOB_ATTR_PODS);
		EXPECT_EQ(rtr_with(j), EINVAL) << "65 leaves without pods";
	}
	m = n.me;
	m.qp_num ^= 1;
	j = n.job();
	j.members = &m;
	EXPECT_EQ(rtr_with(j), EINVAL) << "our entry names another QP";
	m = n.me;
	m.num_ranks = 3;
	EXPECT_EQ(rtr_with(j), EINVAL) << "more ranks than the QP was made for";
	m = n.me;
	m.num_ranks = 0;
	EXPECT_EQ(rtr_with(j), EINVAL);
	m = n.me;
	m.udp_port ^= 1;
	EXPECT_EQ(rtr_with(j), EINVAL) << "our entry names another port";
	// The refusals changed nothing: the QP is still in INIT and takes a good job.
	EXPECT_EQ(n.qp->state, IBV_QPS_INIT);
	EXPECT_EQ(n.rtr(n.job()), 0);
	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	EXPECT_EQ(ibv_modify_coll_qp(n.qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN), EINVAL)
		<< "an RC attribute";
	EXPECT_EQ(n.rts(), 0);
	// An RC QP takes no job.
	RcEndpoint rc;
	ASSERT_EQ(rc.open(RcOptions{}), 0);
	ibv_coll_qp_attr ra{};
	ra.qp_state = IBV_QPS_RTR;
	ra.job = &j;
	EXPECT_EQ(ibv_modify_coll_qp(rc.qp, &ra, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB), EINVAL);
}

TEST(CollApi, BadWrsFailAtPostAndPostNothing)
{
	const uint16_t k = 2;
	OneNode n(k);
	ASSERT_TRUE(n.qp);
	std::vector<int32_t> buf(4096);
	std::vector<int32_t> ro(1024);
	ibv_coll_mr *mr = ibv_reg_coll_mr(n.pd, buf.data(), buf.size() * 4, IBV_ACCESS_LOCAL_WRITE);
	ibv_coll_mr *mr_ro = ibv_reg_coll_mr(n.pd, ro.data(), ro.size() * 4, 0);
	ASSERT_TRUE(mr && mr_ro);
	ibv_sge src[k], dst[k];
	for (int r = 0; r < k; r++) {
		src[r] = {reinterpret_cast<uint64_t>(&buf[size_t(r) * 1024]), 4096, mr->lkey};
		dst[r] = {reinterpret_cast<uint64_t>(&buf[size_t(2 + r) * 1024]), 4096, mr->lkey};
	}
	auto good = [&] {
		ibv_coll_send_wr w{};
		w.wr_id = 1;
		w.opcode = IBV_COLL_WR_ALLREDUCE;
		w.send_flags = IBV_COLL_SEND_SIGNALED;
		w.sg_list = src;
		w.num_sge = k;
		w.wr.coll.dst_list = dst;
		w.wr.coll.count = 1024;
		w.wr.coll.op = IBV_COLL_OP_SUM;
		w.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
		return w;
	};
	ibv_coll_send_wr w = good(), *bad = nullptr;
	EXPECT_EQ(ibv_post_coll_send(n.qp, &w, &bad), EINVAL) << "QP in RESET";
	ASSERT_EQ(n.up(), 0);

	struct Bad {
		const char *what;
		void (*mutate)(ibv_coll_send_wr &, ibv_sge *, ibv_sge *, uint32_t);
	};
	const Bad bads[] = {
		{"unknown opcode", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
				      uint32_t) { set_raw(w.opcode, 0x47); }},
		{"RC opcode on a collective QP", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
						    uint32_t) { w.opcode = IBV_COLL_WR_SEND; }},
		{"bitwise op on floats",
		 [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *, uint32_t) {
			 w.wr.coll.op = IBV_COLL_OP_BXOR;
			 w.wr.coll.dtype = IBV_COLL_DTYPE_FLOAT32;
		 }},
		{"unknown op", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
				  uint32_t) { set_raw(w.wr.coll.op, 8); }},
		{"unknown dtype", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
				     uint32_t) { set_raw(w.wr.coll.dtype, 12); }},
		{"count overflow", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
				      uint32_t) { w.wr.coll.count = UINT64_MAX / 2; }},
		{"source shorter than count",
		 [](ibv_coll_send_wr &w, ibv_sge *s, ibv_sge *, uint32_t) {
			 w.wr.coll.count = 1025;
			 (void)s;
		 }},
		{"lkey not covering the source",
		 [](ibv_coll_send_wr &, ibv_sge *s, ibv_sge *, uint32_t) {
			 s[1].addr += 12000; // ends past the region
		 }},
		{"wrong lkey",
		 [](ibv_coll_send_wr &, ibv_sge *s, ibv_sge *, uint32_t) { s[0].lkey ^= 0x100; }},
		{"destination not writable",
		 [](ibv_coll_send_wr &, ibv_sge *, ibv_sge *d, uint32_t ro) { d[1].lkey = ro; }},
		{"SGE count is not the local ranks",
		 [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *, uint32_t) { w.num_sge = 1; }},
		{"no destinations", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
				       uint32_t) { w.wr.coll.dst_list = nullptr; }},
		{"root out of range",
		 [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *, uint32_t) {
			 w.opcode = IBV_COLL_WR_REDUCE;
			 w.wr.coll.root = 2;
		 }},
		{"block length not a multiple of the element",
		 [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *, uint32_t) {
			 w.wr.coll.block_len = 6;
		 }},
		{"block length above the path MTU", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
						       uint32_t) { w.wr.coll.block_len = 2048; }},
		{"unknown send flag", [](ibv_coll_send_wr &w, ibv_sge *, ibv_sge *,
					 uint32_t) { w.send_flags |= 1u << 7; }},
	};
	for (const Bad &b : bads) {
		ibv_sge s[k], d[k];
		memcpy(s, src, sizeof(s));
		memcpy(d, dst, sizeof(d));
		ibv_coll_send_wr x = good();
		x.sg_list = s;
		x.wr.coll.dst_list = d;
		b.mutate(x, s, d, mr_ro->lkey);
		bad = nullptr;
		EXPECT_EQ(ibv_post_coll_send(n.qp, &x, &bad), EINVAL) << b.what;
		EXPECT_EQ(bad, &x) << b.what;
	}
	// A chain whose second WR is bad posts nothing at all.
	ibv_coll_send_wr c1 = good(), c2 = good();
	c1.next = &c2;
	c2.num_sge = 1;
	EXPECT_EQ(ibv_post_coll_send(n.qp, &c1, &bad), EINVAL);
	EXPECT_EQ(bad, &c2);
	// Explicit message ids must increase.
	c1 = good();
	c1.wr.coll.mid = 10;
	c2 = good();
	c2.wr.coll.mid = 10;
	c1.next = &c2;
	EXPECT_EQ(ibv_post_coll_send(n.qp, &c1, &bad), EINVAL);
	EXPECT_EQ(bad, &c2);

	ibv_coll_wc wc;
	EXPECT_EQ(ibv_poll_coll_cq(n.cq, 1, &wc), 0) << "something completed";
	// Nothing was posted: the next WR gets the first message id.
	for (int r = 0; r < k; r++)
		for (int e = 0; e < 1024; e++)
			buf[size_t(r) * 1024 + size_t(e)] = e * (r + 1);
	w = good();
	ASSERT_EQ(ibv_post_coll_send(n.qp, &w, &bad), 0);
	wc = n.wait();
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.mid, 1u);
	EXPECT_EQ(wc.opcode, IBV_COLL_WC_ALLREDUCE);
	EXPECT_TRUE(wc.wc_flags & IBV_COLL_WC_LOCAL);
	EXPECT_EQ(wc.byte_len, 4096u);
	for (int r = 0; r < k; r++)
		for (int e = 0; e < 1024; e++)
			ASSERT_EQ(buf[size_t(2 + r) * 1024 + size_t(e)], e + 2 * e)
				<< r << " " << e;
	ibv_dereg_coll_mr(mr);
	ibv_dereg_coll_mr(mr_ro);
}

TEST(CollApi, OneNodeInPlaceAvgAndQuery)
{
	const uint16_t k = 4;
	OneNode n(k);
	ASSERT_TRUE(n.qp);
	ASSERT_EQ(n.up(), 0);
	std::vector<int16_t> buf(size_t(k) * 1001);
	ibv_coll_mr *mr = ibv_reg_coll_mr(n.pd, buf.data(), buf.size() * 2, IBV_ACCESS_LOCAL_WRITE);
	ibv_sge s[k];
	for (int r = 0; r < k; r++) {
		s[r] = {reinterpret_cast<uint64_t>(&buf[size_t(r) * 1001]), 2002, mr->lkey};
		for (int e = 0; e < 1001; e++)
			buf[size_t(r) * 1001 + size_t(e)] = int16_t((e % 7) - 3 - r * 1000);
	}
	// In place (destination = source), AVG: truncating division of the sum.
	ibv_coll_send_wr w{}, *bad;
	w.opcode = IBV_COLL_WR_ALLREDUCE;
	w.send_flags = IBV_COLL_SEND_SIGNALED;
	w.sg_list = s;
	w.num_sge = k;
	w.wr.coll.dst_list = s;
	w.wr.coll.count = 1001;
	w.wr.coll.op = IBV_COLL_OP_AVG;
	w.wr.coll.dtype = IBV_COLL_DTYPE_INT16;
	ASSERT_EQ(ibv_post_coll_send(n.qp, &w, &bad), 0);
	ibv_coll_wc wc = n.wait();
	ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
	for (int r = 0; r < k; r++) {
		for (int e = 0; e < 1001; e++) {
			int sum = 0;
			for (int q = 0; q < k; q++)
				sum += (e % 7) - 3 - q * 1000;
			ASSERT_EQ(buf[size_t(r) * 1001 + size_t(e)], int16_t(sum / k)) << e;
		}
	}
	// QUERY: the message just done, and one never posted.
	ibv_coll_send_wr q{};
	q.opcode = IBV_COLL_WR_QUERY;
	q.wr_id = 7;
	q.wr.coll.mid = wc.mid;
	ASSERT_EQ(ibv_post_coll_send(n.qp, &q, &bad), 0);
	wc = n.wait();
	EXPECT_EQ(wc.opcode, IBV_COLL_WC_QUERY);
	EXPECT_EQ(wc.wr_id, 7u);
	EXPECT_EQ(wc.msg_state, IBV_COLL_MSG_DONE);
	EXPECT_EQ(wc.blocks_done, wc.blocks_total);
	EXPECT_GT(wc.blocks_total, 0u);
	q.wr.coll.mid = 12345;
	ASSERT_EQ(ibv_post_coll_send(n.qp, &q, &bad), 0);
	wc = n.wait();
	EXPECT_EQ(wc.msg_state, IBV_COLL_MSG_UNKNOWN);
	// A barrier of one node completes at once; counters answer.
	ibv_coll_send_wr b{};
	b.opcode = IBV_COLL_WR_BARRIER;
	b.send_flags = IBV_COLL_SEND_SIGNALED;
	ASSERT_EQ(ibv_post_coll_send(n.qp, &b, &bad), 0);
	wc = n.wait();
	EXPECT_EQ(wc.opcode, IBV_COLL_WC_BARRIER);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	ibv_coll_counters cn{};
	ASSERT_EQ(ibv_query_coll_counters(n.ctx, &cn), 0);
	EXPECT_GT(cn.seg_units, 0u);
	EXPECT_EQ(cn.seg_in_use, 0u);
	EXPECT_EQ(cn.comp_mask, 0u);
	EXPECT_EQ(ibv_query_coll_counters(n.ctx, nullptr), EINVAL);
	// The fields after seg_high_water only when asked for: the AVG and the
	// barrier (QUERY is not a message), finished well, no switch asked for
	// (no fallback), no RC traffic.
	ibv_coll_counters ext;
	memset(&ext, 0xa5, sizeof(ext));
	ext.comp_mask = IBV_COLL_COUNTERS_EXT;
	ASSERT_EQ(ibv_query_coll_counters(n.ctx, &ext), 0);
	EXPECT_EQ(ext.comp_mask, uint64_t(IBV_COLL_COUNTERS_EXT));
	EXPECT_EQ(ext.coll_messages, 2u);
	EXPECT_EQ(ext.coll_failed, 0u);
	EXPECT_EQ(ext.coll_fallbacks, 0u);
	EXPECT_EQ(ext.rc_tx_packets, 0u);
	EXPECT_EQ(ext.rc_acks_sent, 0u);
	// A caller of the first layout: nothing written past seg_high_water.
	memset(&ext, 0xa5, sizeof(ext));
	ext.comp_mask = 0;
	ASSERT_EQ(ibv_query_coll_counters(n.ctx, &ext), 0);
	EXPECT_EQ(ext.coll_messages, 0xa5a5a5a5a5a5a5a5u);
	// EXT alone: nothing written past coll_fallbacks.
	memset(&ext, 0xa5, sizeof(ext));
	ext.comp_mask = IBV_COLL_COUNTERS_EXT;
	ASSERT_EQ(ibv_query_coll_counters(n.ctx, &ext), 0);
	EXPECT_EQ(ext.coll_messages, 2u);
	EXPECT_EQ(ext.coll_rx_packets, 0xa5a5a5a5a5a5a5a5u);
	// EXT2: every member.  One node: no collective packet, no congestion.
	memset(&ext, 0xa5, sizeof(ext));
	ext.comp_mask = IBV_COLL_COUNTERS_EXT2;
	ASSERT_EQ(ibv_query_coll_counters(n.ctx, &ext), 0);
	EXPECT_EQ(ext.comp_mask, uint64_t(IBV_COLL_COUNTERS_EXT2));
	EXPECT_EQ(ext.coll_messages, 2u);
	EXPECT_EQ(ext.coll_rx_packets, 0u);
	EXPECT_EQ(ext.coll_delivered, 0u);
	EXPECT_EQ(ext.coll_host_dropped, 0u);
	EXPECT_EQ(ext.cc_cnp_sent, 0u);
	EXPECT_EQ(ext.cc_retrans_bytes, 0u);
	ext.comp_mask = 1u << 7;
	EXPECT_EQ(ibv_query_coll_counters(n.ctx, &ext), EINVAL);
	EXPECT_STREQ(ibv_coll_status_str(IBV_COLL_STATUS_REMOTE_ABORT), "aborted by a member");
	EXPECT_STREQ(ibv_coll_wc_opcode_str(IBV_COLL_WC_REDUCE_SCATTER), "REDUCE_SCATTER");
	ibv_dereg_coll_mr(mr);
}

// A CQ whose event is still unread in its channel can be destroyed: the
// event goes with it (libibverbs' kernel drops a destroyed CQ's pending
// events), and another CQ's event on the same channel stays.
TEST(CollApi, DestroyingACqDropsItsUnreadEventsOnly)
{
	OneNode a(1);
	ASSERT_TRUE(a.qp);
	ibv_coll_comp_channel *ch = ibv_create_coll_comp_channel(a.ctx);
	ASSERT_TRUE(ch);
	// Two one-node jobs of the device, each QP completing on its own CQ
	// of the one channel.
	ibv_coll_cq *cq[2];
	ibv_coll_qp *qp[2];
	ibv_destroy_coll_qp(a.qp);
	a.qp = nullptr;
	for (int i = 0; i < 2; i++) {
		cq[i] = ibv_create_coll_cq(a.ctx, 8, nullptr, ch, 0);
		ASSERT_TRUE(cq[i]);
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq[i];
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap.max_send_wr = 4;
		ia.cap.max_send_sge = 1;
		a.qp = qp[i] = ibv_create_coll_qp(a.pd, &ia);
		ASSERT_TRUE(qp[i]);
		a.me.qp_num = qp[i]->qp_num;
		ibv_coll_job_attr j = a.job();
		j.jid = 50 + i;
		j.seg_base = 16 * i;
		ASSERT_EQ(a.init(), 0);
		ASSERT_EQ(a.rtr(j), 0);
		ASSERT_EQ(a.rts(), 0);
		ASSERT_EQ(ibv_req_notify_coll_cq(cq[i], 0), 0);
		ibv_coll_send_wr w{}, *bad;
		w.opcode = IBV_COLL_WR_BARRIER;
		w.send_flags = IBV_COLL_SEND_SIGNALED;
		ASSERT_EQ(ibv_post_coll_send(qp[i], &w, &bad), 0);
		ibv_coll_wc wc{};
		for (int k = 0; k < 50000000 && ibv_poll_coll_cq(cq[i], 1, &wc) == 0; k++)
			;
		ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
	}
	a.qp = nullptr;
	// Both events are in the pipe (the CQs were armed), neither read.
	for (int i = 0; i < 500; i++) {
		int avail = 0;
		ioctl(ch->fd, FIONREAD, &avail);
		if (avail >= int(2 * sizeof(void *)))
			break;
		usleep(2000);
	}
	ASSERT_EQ(ibv_destroy_coll_qp(qp[0]), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(cq[0]), 0) << "its unread event held it";
	ibv_coll_cq *got = nullptr;
	void *ctx;
	ASSERT_EQ(ibv_get_coll_cq_event(ch, &got, &ctx), 0);
	EXPECT_EQ(got, cq[1]);
	ASSERT_EQ(ibv_destroy_coll_qp(qp[1]), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(cq[1]), EBUSY) << "read, not acknowledged";
	ibv_ack_coll_cq_events(cq[1], 1);
	EXPECT_EQ(ibv_destroy_coll_cq(cq[1]), 0);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(ch), 0);
}

// Two jobs of one device whose Seg ranges overlap, as independent jobs on
// a shared device pick them (or a job whose process is gone and not yet
// cleaned up): job A's collective waits, holding units 0 to 15, for a
// member that never answers; job B's, on units 0 to 15 too, must run
// meanwhile in free units (it failed with BUFFER_ERR, "Seg units
// unavailable").  B's result against a scalar sum.
TEST(CollApi, ACollectiveRunsWhileAnotherJobsHoldsItsSegUnits)
{
	OneNode a(1);
	ASSERT_TRUE(a.qp);
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = a.cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = 4;
	ia.cap.max_send_sge = 2;
	ibv_coll_qp *qb = ibv_create_coll_qp(a.pd, &ia);
	ASSERT_TRUE(qb);
	// A: this QP and a member at a port nobody serves (UDP port 9).
	ibv_coll_member ma[2] = {a.me, a.me};
	ma[1].udp_port = 9;
	ma[1].qp_num = 0x123;
	ibv_coll_job_attr ja = a.job();
	ja.num_nodes = 2;
	ja.members = ma;
	ja.seg_base = 0;
	ja.seg_count = 16;
	ja.timeout_ms = 20000;
	ASSERT_EQ(a.init(), 0);
	ASSERT_EQ(a.rtr(ja), 0);
	ASSERT_EQ(a.rts(), 0);
	// B: one node of two ranks, on QP qb, the same units.
	ibv_coll_member mb = a.me;
	mb.qp_num = qb->qp_num;
	mb.num_ranks = 2;
	ibv_coll_job_attr jb = a.job();
	jb.jid = 6;
	jb.members = &mb;
	jb.seg_base = 0;
	jb.seg_count = 16;
	ibv_coll_qp_attr at{};
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	ASSERT_EQ(ibv_modify_coll_qp(qb, &at, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT), 0);
	at = {};
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.job = &jb;
	ASSERT_EQ(ibv_modify_coll_qp(qb, &at,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU),
		  0);
	at = {};
	at.qp_state = IBV_QPS_RTS;
	ASSERT_EQ(ibv_modify_coll_qp(qb, &at, IBV_COLL_QP_STATE), 0);

	const size_t n = 5000; // 20 KB a rank
	std::vector<int32_t> buf(6 * n);
	ibv_coll_mr *mr = ibv_reg_coll_mr(a.pd, buf.data(), buf.size() * 4, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(mr);
	auto sge = [&](size_t i) {
		return ibv_sge{reinterpret_cast<uint64_t>(&buf[i * n]), uint32_t(n * 4), mr->lkey};
	};
	for (size_t e = 0; e < 3 * n; e++)
		buf[e] = int32_t(e * 7 % 1000) - 300;
	ibv_sge sa = sge(0), da = sge(1), sb[2] = {sge(2), sge(3)}, db[2] = {sge(4), sge(5)};
	ibv_coll_send_wr w{}, *bad;
	w.opcode = IBV_COLL_WR_ALLREDUCE;
	w.send_flags = IBV_COLL_SEND_SIGNALED;
	w.wr.coll.count = n;
	w.wr.coll.op = IBV_COLL_OP_SUM;
	w.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	w.num_sge = 1;
	w.sg_list = &sa;
	w.wr.coll.dst_list = &da;
	w.wr_id = 1;
	ASSERT_EQ(ibv_post_coll_send(a.qp, &w, &bad), 0);
	usleep(50000); // A has started: it holds its units, and waits
	ibv_coll_wc wc{};
	ASSERT_EQ(ibv_poll_coll_cq(a.cq, 1, &wc), 0) << "A completed without its member";
	w.num_sge = 2;
	w.sg_list = sb;
	w.wr.coll.dst_list = db;
	w.wr_id = 2;
	ASSERT_EQ(ibv_post_coll_send(qb, &w, &bad), 0);
	wc = a.wait();
	EXPECT_EQ(wc.wr_id, 2u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status) << " / "
					     << ibv_coll_status_str(wc.coll_status);
	for (size_t e = 0; e < n; e++) {
		const int32_t want = buf[2 * n + e] + buf[3 * n + e];
		ASSERT_EQ(buf[4 * n + e], want) << e;
		ASSERT_EQ(buf[5 * n + e], want) << e;
	}
	ibv_destroy_coll_qp(qb);
	ibv_destroy_coll_qp(a.qp); // A's collective goes with it
	a.qp = nullptr;
	ibv_dereg_coll_mr(mr);
}
