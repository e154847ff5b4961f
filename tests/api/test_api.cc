// The C ABI through the real library on the loopback device: the device
// list and queries, every class of bad argument (documented errno, no
// change), EBUSY on destroying a parent, the QP state machine, completion
// channels with poll(2), strings and the configuration printout.
#include "rc_endpoint.h"

#include <ibv_coll/ibv_coll.h>

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ibvc_test;

namespace {

// A context on the test device with a PD and a CQ.
struct Ctx {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	Ctx()
	{
		int n;
		ibv_coll_device **l = ibv_get_coll_device_list(&n);
		for (int i = 0; l && i < n && !ctx; i++)
			if (test_device_name() == ibv_get_coll_device_name(l[i]))
				ctx = ibv_open_coll_device(l[i]);
		ibv_free_coll_device_list(l);
		if (ctx) {
			pd = ibv_alloc_coll_pd(ctx);
			cq = ibv_create_coll_cq(ctx, 16, nullptr, nullptr, 0);
		}
	}
	~Ctx()
	{
		if (cq)
			ibv_destroy_coll_cq(cq);
		if (pd)
			ibv_dealloc_coll_pd(pd);
		if (ctx)
			ibv_close_coll_device(ctx);
	}
	ibv_coll_qp *qp(uint32_t wr = 4)
	{
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = IBV_COLL_QPT_RC;
		ia.cap.max_send_wr = wr;
		ia.cap.max_recv_wr = wr;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		return ibv_create_coll_qp(pd, &ia);
	}
};

// Store an out-of-range value in an enum field, as a C caller may; C++
// code must not even form such an enum value.
template <class E> void set_raw(E &field, int v)
{
	static_assert(sizeof(E) == sizeof(int));
	memcpy(&field, &v, sizeof(v));
}

ibv_qp_state state_of(ibv_coll_qp *qp)
{
	ibv_coll_qp_attr a{};
	ibv_coll_qp_init_attr ia{};
	EXPECT_EQ(ibv_query_coll_qp(qp, &a, IBV_COLL_QP_STATE, &ia), 0);
	return a.qp_state;
}

int to_init(ibv_coll_qp *qp)
{
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_coll_qp(qp, &a,
				  IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS);
}

const int kRtrMask = IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
		     IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN | IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
		     IBV_COLL_QP_MIN_RNR_TIMER;
const int kRtsMask = IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT |
		     IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY | IBV_COLL_QP_MAX_QP_RD_ATOMIC;

ibv_coll_qp_attr rtr_attr(ibv_coll_context *ctx)
{
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = 0x11;
	ibv_query_coll_gid(ctx, 1, 0, &a.ah_attr.dgid);
	a.ah_attr.udp_port = 9;
	return a;
}

} // namespace

TEST(Devices, ListOpenQuery)
{
	int n = -1;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	ASSERT_NE(l, nullptr);
	ASSERT_GT(n, 0);
	EXPECT_EQ(l[n], nullptr);
	bool found = false;
	for (int i = 0; i < n; i++)
		found |= test_device_name() == ibv_get_coll_device_name(l[i]);
	EXPECT_TRUE(found) << test_device_name() << " not listed";
	ibv_free_coll_device_list(l);

	Ctx c;
	ASSERT_NE(c.ctx, nullptr);
	ibv_coll_device_attr da;
	ASSERT_EQ(ibv_query_coll_device(c.ctx, &da), 0);
	EXPECT_EQ(da.phys_port_cnt, 1);
	EXPECT_GE(da.max_qp_wr, 1024u);
	EXPECT_GE(da.max_sge, 4u);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(c.ctx, 1, &pa), 0);
	EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
	EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
	EXPECT_NE(pa.udp_port, 0);
	EXPECT_GE(pa.gid_tbl_len, 1);
	EXPECT_GE(pa.active_mtu, IBV_MTU_256);
	ibv_gid gid;
	ASSERT_EQ(ibv_query_coll_gid(c.ctx, 1, 0, &gid), 0);
	if (test_device_name() == "crxe_lo") {
		const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
		EXPECT_EQ(memcmp(gid.raw, lo, 16), 0) << "gid 0 of lo is ::ffff:127.0.0.1";
		EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
		EXPECT_STREQ(pa.netdev, "lo");
	}
}

TEST(Devices, TwoContextsGetTwoPorts)
{
	Ctx a, b;
	ASSERT_TRUE(a.ctx && b.ctx);
	ibv_coll_port_attr pa, pb;
	ASSERT_EQ(ibv_query_coll_port(a.ctx, 1, &pa), 0);
	ASSERT_EQ(ibv_query_coll_port(b.ctx, 1, &pb), 0);
	EXPECT_NE(pa.udp_port, pb.udp_port);
}

TEST(Devices, BusyPortWithoutFallbackFails)
{
	Ctx a;
	ASSERT_TRUE(a.ctx);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(a.ctx, 1, &pa), 0);
	setenv("IBV_COLL_CRXE_UDP_PORT", std::to_string(pa.udp_port).c_str(), 1);
	setenv("IBV_COLL_CRXE_PORT_FALLBACK", "n", 1);
	Ctx b;
	int err = errno;
	unsetenv("IBV_COLL_CRXE_UDP_PORT");
	unsetenv("IBV_COLL_CRXE_PORT_FALLBACK");
	EXPECT_EQ(b.ctx, nullptr);
	EXPECT_EQ(err, EADDRINUSE);
}

TEST(Devices, DeviceFilterVariable)
{
	setenv("IBV_COLL_CRXE_DEVICES", "lo", 1);
	int n;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	unsetenv("IBV_COLL_CRXE_DEVICES");
	ASSERT_NE(l, nullptr);
	ASSERT_EQ(n, 1);
	EXPECT_STREQ(ibv_get_coll_device_name(l[0]), "crxe_lo");
	ibv_free_coll_device_list(l);
}

TEST(BadArgs, NullsAndRanges)
{
	Ctx c;
	ASSERT_TRUE(c.ctx && c.pd && c.cq);
	EXPECT_EQ(ibv_open_coll_device(nullptr), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_get_coll_device_name(nullptr), nullptr);
	EXPECT_EQ(ibv_close_coll_device(nullptr), EINVAL);
	ibv_coll_port_attr pa;
	EXPECT_EQ(ibv_query_coll_port(c.ctx, 2, &pa), EINVAL);
	EXPECT_EQ(ibv_query_coll_port(c.ctx, 0, &pa), EINVAL);
	EXPECT_EQ(ibv_query_coll_port(c.ctx, 1, nullptr), EINVAL);
	ibv_gid g;
	EXPECT_EQ(ibv_query_coll_gid(c.ctx, 1, -1, &g), EINVAL);
	EXPECT_EQ(ibv_query_coll_gid(c.ctx, 1, 1000, &g), EINVAL);
	EXPECT_EQ(ibv_alloc_coll_pd(nullptr), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_dealloc_coll_pd(nullptr), EINVAL);

	char buf[64];
	EXPECT_EQ(ibv_reg_coll_mr(c.pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), nullptr)
		<< "remote write needs local write";
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_reg_coll_mr(c.pd, buf, sizeof(buf), 1 << 12), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_reg_coll_mr(c.pd, nullptr, 10, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_reg_coll_mr(c.pd, reinterpret_cast<void *>(~uintptr_t(0) - 4), 100, 0),
		  nullptr)
		<< "address wraps";
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_dereg_coll_mr(nullptr), EINVAL);

	EXPECT_EQ(ibv_create_coll_cq(c.ctx, 0, nullptr, nullptr, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_create_coll_cq(c.ctx, 1 << 20, nullptr, nullptr, 0), nullptr);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_create_coll_cq(c.ctx, 4, nullptr, nullptr, 1), nullptr) << "comp_vector";
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(ibv_poll_coll_cq(nullptr, 1, nullptr), -EINVAL);
	ibv_coll_wc wc;
	EXPECT_EQ(ibv_poll_coll_cq(c.cq, -1, &wc), -EINVAL);
	EXPECT_EQ(ibv_poll_coll_cq(c.cq, 1, nullptr), -EINVAL);
	EXPECT_EQ(ibv_req_notify_coll_cq(nullptr, 0), EINVAL);

	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = c.cq;
	ia.qp_type = IBV_COLL_QPT_RC;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	auto bad_qp = [&](ibv_coll_qp_init_attr a) {
		ibv_coll_qp *q = ibv_create_coll_qp(c.pd, &a);
		int e = errno;
		if (q)
			ibv_destroy_coll_qp(q);
		return q ? 0 : e;
	};
	ibv_coll_qp_init_attr a = ia;
	set_raw(a.qp_type, 3);
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.cap.max_send_wr = 0;
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.cap.max_send_wr = 1 << 20;
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.cap.max_send_sge = 1000;
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.cap.max_inline_data = 64;
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.send_cq = nullptr;
	EXPECT_EQ(bad_qp(a), EINVAL);
	a = ia;
	a.comp_mask = 1;
	EXPECT_EQ(bad_qp(a), EINVAL);
	Ctx other;
	a = ia;
	a.recv_cq = other.cq;
	EXPECT_EQ(bad_qp(a), EINVAL) << "a CQ of another context";
	EXPECT_EQ(bad_qp(ia), 0);
}

TEST(BadArgs, DestroyingAParentIsBusyAndChangesNothing)
{
	Ctx c;
	ASSERT_TRUE(c.ctx);
	char buf[64];
	ibv_coll_mr *mr = ibv_reg_coll_mr(c.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	ASSERT_NE(mr, nullptr);
	EXPECT_EQ(ibv_dealloc_coll_pd(c.pd), EBUSY);
	EXPECT_EQ(ibv_close_coll_device(c.ctx), EBUSY);
	ibv_coll_qp *qp = c.qp();
	ASSERT_NE(qp, nullptr);
	EXPECT_EQ(ibv_destroy_coll_cq(c.cq), EBUSY);
	// Everything still works after the refusals.
	ibv_coll_mr *mr2 = ibv_reg_coll_mr(c.pd, buf, 8, 0);
	ASSERT_NE(mr2, nullptr);
	EXPECT_EQ(ibv_dereg_coll_mr(mr2), 0);
	EXPECT_EQ(ibv_destroy_coll_qp(qp), 0);
	EXPECT_EQ(ibv_dereg_coll_mr(mr), 0);

	ibv_coll_comp_channel *ch = ibv_create_coll_comp_channel(c.ctx);
	ASSERT_NE(ch, nullptr);
	ibv_coll_cq *cq2 = ibv_create_coll_cq(c.ctx, 4, nullptr, ch, 0);
	ASSERT_NE(cq2, nullptr);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(ch), EBUSY);
	EXPECT_EQ(ibv_destroy_coll_cq(cq2), 0);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(ch), 0);
	EXPECT_EQ(ibv_destroy_coll_qp(nullptr), EINVAL);
	EXPECT_EQ(ibv_destroy_coll_cq(nullptr), EINVAL);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(nullptr), EINVAL);
}

// A registration pins (faults in) the region's pages, as a NIC's does: the
// device's thread that moves the data then takes no page fault.  Checked
// with mincore(2), not through the library.
TEST(Registration, FaultsThePagesIn)
{
	const size_t page = size_t(sysconf(_SC_PAGESIZE)), len = 2048 * page;
	void *probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			   0);
	ASSERT_NE(probe, MAP_FAILED);
	const bool populate = madvise(probe, page, 23 /* MADV_POPULATE_WRITE */) == 0;
	munmap(probe, page);
	if (!populate)
		GTEST_SKIP() << "the kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
	Ctx c;
	ASSERT_TRUE(c.ctx);
	void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(p, MAP_FAILED);
	auto resident = [&] {
		std::vector<unsigned char> v(len / page);
		EXPECT_EQ(mincore(p, len, v.data()), 0);
		size_t n = 0;
		for (unsigned char b : v)
			n += b & 1;
		return n;
	};
	ASSERT_EQ(resident(), 0u) << "fresh anonymous memory is not resident";
	// An unaligned start and length: every page the range touches.
	ibv_coll_mr *mr = ibv_reg_coll_mr(c.pd, static_cast<char *>(p) + 100, len - 200,
					  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	ASSERT_NE(mr, nullptr);
	EXPECT_EQ(resident(), len / page);
	EXPECT_EQ(ibv_dereg_coll_mr(mr), 0);
	munmap(p, len);
}

TEST(QpStateMachine, LegalPathAndIllegalTransitions)
{
	Ctx c;
	ASSERT_TRUE(c.ctx);
	ibv_coll_qp *qp = c.qp();
	ASSERT_NE(qp, nullptr);
	EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
	ibv_coll_qp_attr a{};

	// Skipping a state, or leaving out a required attribute, is refused
	// and leaves the state as it was.
	a = rtr_attr(c.ctx);
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask), EINVAL) << "RESET -> RTR";
	a.qp_state = IBV_QPS_RTS;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), EINVAL) << "RESET -> RTS";
	a = {};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT), EINVAL)
		<< "INIT needs access flags";
	a.qp_access_flags = 0;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_PORT |
					     IBV_COLL_QP_ACCESS_FLAGS | IBV_COLL_QP_SQ_PSN),
		  EINVAL)
		<< "SQ_PSN is not allowed at RESET -> INIT";
	a.port_num = 2;
	EXPECT_EQ(ibv_modify_coll_qp(
			  qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS),
		  EINVAL)
		<< "port 2";
	EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
	ASSERT_EQ(to_init(qp), 0);
	EXPECT_EQ(state_of(qp), IBV_QPS_INIT);

	a = rtr_attr(c.ctx);
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask & ~IBV_COLL_QP_AV), EINVAL) << "no AV";
	a.qp_state = IBV_QPS_RTS;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), EINVAL) << "INIT -> RTS";
	a = rtr_attr(c.ctx);
	set_raw(a.path_mtu, 9);
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask), EINVAL) << "bad mtu";
	a = rtr_attr(c.ctx);
	a.ah_attr.sgid_index = 200;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask), EINVAL) << "bad sgid index";
	a = rtr_attr(c.ctx);
	a.min_rnr_timer = 32;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask), EINVAL) << "bad rnr timer";
	a = rtr_attr(c.ctx);
	a.cur_qp_state = IBV_QPS_RTS;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask | IBV_COLL_QP_CUR_STATE), EINVAL)
		<< "cur_qp_state mismatch";
	EXPECT_EQ(state_of(qp), IBV_QPS_INIT);
	a = rtr_attr(c.ctx);
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, kRtrMask), 0);
	EXPECT_EQ(state_of(qp), IBV_QPS_RTR);

	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.retry_cnt = 8;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), EINVAL) << "retry_cnt 8";
	a.retry_cnt = 7;
	a.timeout = 40;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), EINVAL) << "timeout 40";
	a.timeout = 14;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask & ~IBV_COLL_QP_SQ_PSN), EINVAL);
	EXPECT_EQ(state_of(qp), IBV_QPS_RTR);
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), 0);
	EXPECT_EQ(state_of(qp), IBV_QPS_RTS);
	// RTS -> RTS may change the timeout but not the path.
	a.timeout = 12;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_TIMEOUT), 0);
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_AV), EINVAL);
	a.qp_state = IBV_QPS_INIT;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE), EINVAL) << "RTS -> INIT";

	// Any state may go to ERROR and to RESET; RESET starts over.
	a = {};
	a.qp_state = IBV_QPS_ERR;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE), 0);
	EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
	a.qp_state = IBV_QPS_RTS;
	EXPECT_EQ(ibv_modify_coll_qp(qp, &a, kRtsMask), EINVAL) << "ERR -> RTS";
	a = {};
	a.qp_state = IBV_QPS_RESET;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE), 0);
	EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
	EXPECT_EQ(to_init(qp), 0);
	EXPECT_EQ(ibv_destroy_coll_qp(qp), 0);
}

TEST(BadArgs, PostingChecksEveryWrAndPostsNothingOnError)
{
	RcEndpoint a, b;
	RcOptions o;
	o.max_wr = 4;
	o.buf_size = 4096;
	ASSERT_EQ(a.open(o), 0);
	ASSERT_EQ(b.open(o), 0);
	ibv_sge sge{reinterpret_cast<uint64_t>(a.buf), 16, a.mr->lkey};
	ibv_coll_send_wr wr[3]{}, *bad = nullptr;
	for (int i = 0; i < 3; i++) {
		wr[i].wr_id = uint64_t(i);
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_COLL_WR_SEND;
		wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
	}
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, &bad), EINVAL) << "QP in INIT";
	EXPECT_EQ(bad, wr);
	ASSERT_EQ(a.connect(b.info()), 0);
	ASSERT_EQ(b.connect(a.info()), 0);

	set_raw(wr[1].opcode, 77);
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[1]);
	wr[1].opcode = IBV_COLL_WR_SEND;
	wr[2].num_sge = 99;
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[2]);
	wr[2].num_sge = 1;
	wr[2].send_flags = 1u << 9;
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[2]);
	wr[2].send_flags = 0;
	wr[0].sg_list = nullptr;
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[0]);
	wr[0].sg_list = &sge;
	EXPECT_EQ(ibv_post_coll_send(a.qp, nullptr, &bad), EINVAL);
	EXPECT_EQ(ibv_post_coll_send(nullptr, wr, &bad), EINVAL);
	EXPECT_EQ(ibv_post_coll_send(a.qp, wr, nullptr), EINVAL);

	// Nothing reached the wire: b received nothing.
	ASSERT_EQ(b.post_recv(0, 64, 1), 0);
	ibv_coll_wc wc;
	EXPECT_EQ(b.wait(&wc, 100), ETIMEDOUT);
	// A chain longer than the free slots is refused whole (ENOMEM).
	ibv_coll_send_wr many[5]{};
	for (int i = 0; i < 5; i++) {
		many[i] = wr[0];
		many[i].next = i < 4 ? &many[i + 1] : nullptr;
	}
	EXPECT_EQ(ibv_post_coll_send(a.qp, many, &bad), ENOMEM);
	EXPECT_EQ(bad, &many[4]);
	EXPECT_EQ(b.wait(&wc, 100), ETIMEDOUT);
	// The four free slots are all still there.
	for (int i = 0; i < 3; i++) // one receive is already posted
		ASSERT_EQ(b.post_recv(0, 64, 10 + i), 0);
	many[3].next = nullptr;
	many[3].send_flags = IBV_COLL_SEND_SIGNALED;
	ASSERT_EQ(ibv_post_coll_send(a.qp, many, &bad), 0);
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

	ibv_coll_recv_wr rwr{}, *rbad;
	rwr.num_sge = 5;
	rwr.sg_list = &sge;
	EXPECT_EQ(ibv_post_coll_recv(a.qp, &rwr, &rbad), EINVAL);
	EXPECT_EQ(rbad, &rwr);
}

// a's RC QP connected to a QP on b whose CQ reports to a completion
// channel.
struct ChannelPair {
	RcEndpoint a, b;
	ibv_coll_comp_channel *ch = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	int tag = 5;

	void open()
	{
		RcOptions o;
		o.buf_size = 4096;
		ASSERT_EQ(a.open(o), 0);
		ASSERT_EQ(b.open(o), 0);
		ASSERT_EQ(a.connect(b.info()), 0);
		ASSERT_EQ(b.connect(a.info()), 0);
		// A second CQ on b's context, with a channel, for b's receives
		// is not possible after QP creation; use a fresh QP pair with
		// channel CQs.
		ch = ibv_create_coll_comp_channel(b.ctx);
		ASSERT_NE(ch, nullptr);
		cq = ibv_create_coll_cq(b.ctx, 8, &tag, ch, 0);
		ASSERT_NE(cq, nullptr);
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = IBV_COLL_QPT_RC;
		ia.cap = {4, 4, 1, 1, 0};
		qp = ibv_create_coll_qp(b.pd, &ia);
		ASSERT_NE(qp, nullptr);
		// Reconnect a to the new QP: reset a, then bring both up.
		ibv_coll_qp_attr r{};
		r.qp_state = IBV_QPS_RESET;
		ASSERT_EQ(ibv_modify_coll_qp(a.qp, &r, IBV_COLL_QP_STATE), 0);
		ASSERT_EQ(to_init(a.qp), 0);
		ASSERT_EQ(to_init(qp), 0);
		PeerInfo bi = b.info();
		bi.qpn = qp->qp_num;
		ASSERT_EQ(a.connect(bi), 0);
		ibv_coll_qp_attr x = {};
		x.qp_state = IBV_QPS_RTR;
		x.path_mtu = IBV_MTU_1024;
		x.dest_qp_num = a.qp->qp_num;
		x.rq_psn = a.opt.psn;
		ibv_query_coll_gid(a.ctx, 1, 0, &x.ah_attr.dgid);
		x.ah_attr.udp_port = a.info().udp_port;
		ASSERT_EQ(ibv_modify_coll_qp(qp, &x, kRtrMask), 0);
	}
	void post_recv(uint64_t wr_id)
	{
		ibv_sge sge{reinterpret_cast<uint64_t>(b.buf), 64, b.mr->lkey};
		ibv_coll_recv_wr rwr{}, *rbad;
		rwr.wr_id = wr_id;
		rwr.sg_list = &sge;
		rwr.num_sge = 1;
		ASSERT_EQ(ibv_post_coll_recv(qp, &rwr, &rbad), 0);
	}
	void close()
	{
		EXPECT_EQ(ibv_destroy_coll_qp(qp), 0);
		EXPECT_EQ(ibv_destroy_coll_cq(cq), EBUSY) << "an event is not acknowledged";
		ibv_ack_coll_cq_events(cq, 1);
		EXPECT_EQ(ibv_destroy_coll_cq(cq), 0);
		EXPECT_EQ(ibv_destroy_coll_comp_channel(ch), 0);
	}
};

TEST(CompChannel, EventsWorkWithPoll)
{
	ChannelPair c;
	ASSERT_NO_FATAL_FAILURE(c.open());
	ASSERT_NO_FATAL_FAILURE(c.post_recv(77));
	ASSERT_EQ(ibv_req_notify_coll_cq(c.cq, 0), 0);
	pollfd pf{c.ch->fd, POLLIN, 0};
	EXPECT_EQ(poll(&pf, 1, 0), 0) << "event before any completion";
	ASSERT_EQ(c.a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 1), 0);
	ASSERT_EQ(poll(&pf, 1, 5000), 1) << "no event on the channel fd";
	ibv_coll_cq *ev_cq = nullptr;
	void *ev_ctx = nullptr;
	ASSERT_EQ(ibv_get_coll_cq_event(c.ch, &ev_cq, &ev_ctx), 0);
	EXPECT_EQ(ev_cq, c.cq);
	EXPECT_EQ(ev_ctx, &c.tag);
	ibv_coll_wc wc;
	ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 1);
	EXPECT_EQ(wc.wr_id, 77u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	c.close();
	EXPECT_EQ(ibv_get_coll_cq_event(nullptr, &ev_cq, &ev_ctx), EINVAL);
}

// A thread that polls a CQ keeps the engine thread off the port for
// IBV_COLL_EMU_APP_POLL_US (here longer than the test's patience);
// arming the CQ, and the customary poll after arming, must hand the port
// back at once, or the sleeping application would never be woken.
TEST(CompChannel, ArmingAfterPollingHandsTheDeviceBack)
{
	if (!test_device_is_emulated())
		GTEST_SKIP() << "the hand-off is the emulated device's";
	setenv("IBV_COLL_EMU_APP_POLL_US", "1000000", 1);
	ChannelPair c;
	c.open();
	unsetenv("IBV_COLL_EMU_APP_POLL_US");
	ASSERT_FALSE(HasFatalFailure());
	ASSERT_NO_FATAL_FAILURE(c.post_recv(78));
	ibv_coll_wc wc;
	for (int i = 0; i < 100; i++)
		ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 0);
	ASSERT_EQ(ibv_req_notify_coll_cq(c.cq, 0), 0);
	ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 0);
	ASSERT_EQ(c.a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 1), 0);
	pollfd pf{c.ch->fd, POLLIN, 0};
	ASSERT_EQ(poll(&pf, 1, 500), 1) << "the engine thread did not take the port back";
	ibv_coll_cq *ev_cq = nullptr;
	void *ev_ctx = nullptr;
	ASSERT_EQ(ibv_get_coll_cq_event(c.ch, &ev_cq, &ev_ctx), 0);
	ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 1);
	EXPECT_EQ(wc.wr_id, 78u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	c.close();
}

// The other way the hold ends: the application stops polling without
// arming (it computes, say).  Its device's engine thread must run the
// port again once IBV_COLL_EMU_APP_POLL_US (here 20 ms) has passed since
// the last poll, however many times the hold was renewed before, or the
// peer's send is never acknowledged: a waits for its send completion,
// polling its own device only, and b's receive is there afterwards.
TEST(CompChannel, EngineTakesThePortBackWhenPollingStopsUnsaid)
{
	if (!test_device_is_emulated())
		GTEST_SKIP() << "the hand-off is the emulated device's";
	setenv("IBV_COLL_EMU_APP_POLL_US", "20000", 1);
	ChannelPair c;
	c.open();
	unsetenv("IBV_COLL_EMU_APP_POLL_US");
	ASSERT_FALSE(HasFatalFailure());
	ASSERT_NO_FATAL_FAILURE(c.post_recv(79));
	ibv_coll_wc wc;
	// Polls over 50 ms: the engine thread wakes at least twice at the
	// hold's end and finds it renewed.
	for (int i = 0; i < 50; i++) {
		ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 0);
		usleep(1000);
	}
	ASSERT_EQ(c.a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 2), 0);
	ASSERT_EQ(c.a.wait(&wc, 3000), 0) << "b's engine thread did not take the port back";
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	ASSERT_EQ(ibv_poll_coll_cq(c.cq, 1, &wc), 1);
	EXPECT_EQ(wc.wr_id, 79u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(ibv_destroy_coll_qp(c.qp), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(c.cq), 0);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(c.ch), 0);
}

TEST(Strings, StatusAndOpcodes)
{
	EXPECT_STREQ(ibv_coll_wc_status_str(IBV_WC_SUCCESS), "success");
	EXPECT_STREQ(ibv_coll_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
	EXPECT_STREQ(ibv_coll_wc_status_str(IBV_WC_RETRY_EXC_ERR),
		     "transport retry counter exceeded");
	EXPECT_STREQ(ibv_coll_wr_opcode_str(IBV_COLL_WR_RDMA_READ), "RDMA_READ");
	EXPECT_STREQ(ibv_coll_wc_opcode_str(IBV_COLL_WC_RECV_RDMA_WITH_IMM), "RECV_RDMA_WITH_IMM");
}

TEST(Config, PrintsEveryVariableWithDefault)
{
	char *text = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	ASSERT_EQ(ibv_coll_print_config(f), 0);
	fclose(f);
	std::string s(text, len);
	free(text);
	for (const char *v :
	     {"IBV_COLL_LOG_LEVEL=warn", "IBV_COLL_LOG_FILE=", "IBV_COLL_CRXE_UDP_PORT=4791",
	      "IBV_COLL_CRXE_DEVICES=", "IBV_COLL_CRXE_PORT_FALLBACK=y",
	      "IBV_COLL_EMU_POLL_US=2000", "IBV_COLL_EMU_IMPAIR=", "IBV_COLL_EMU_RC_TIMEOUT=14"})
		EXPECT_NE(s.find(v), std::string::npos) << v;
	EXPECT_EQ(ibv_coll_print_config(nullptr), EINVAL);
}

TEST(Config, BadValueFailsOpenWithEinval)
{
	setenv("IBV_COLL_EMU_RC_WINDOW", "lots", 1);
	Ctx c;
	int err = errno;
	unsetenv("IBV_COLL_EMU_RC_WINDOW");
	EXPECT_EQ(c.ctx, nullptr);
	EXPECT_EQ(err, EINVAL);
}
