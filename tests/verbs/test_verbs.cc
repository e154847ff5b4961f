// The verbs provider through the public API: every device libibverbs
// lists appears as verbs_<name> beside crxe's (on a host without RDMA
// devices: crxe's alone), its variables, and, on a libibverbs device,
// queries checked against libibverbs itself, RC loopback with every
// opcode, completion events through a channel fd, errors, and the
// collective engine on the device (refused where it has no UD).  ctest runs this binary twice: against the
// system's libibverbs (device tests skip without a device), and against
// tests/verbs/fake_ibverbs.cc, which offers one device, fake0.
#include "pattern.h"
#include "rc_endpoint.h"

#include <ibv_coll/ibv_coll.h>

#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace ibvc_test;

namespace {

// Sets a variable for one scope, then puts back what was there.
class ScopedEnv {
public:
	ScopedEnv(const char *name, const char *value) : name_(name)
	{
		if (const char *old = getenv(name))
			old_ = old;
		setenv(name, value, 1);
	}
	~ScopedEnv()
	{
		if (old_)
			setenv(name_, old_->c_str(), 1);
		else
			unsetenv(name_);
	}

private:
	const char *name_;
	std::optional<std::string> old_;
};

bool starts_with(const std::string &s, const char *p)
{
	return s.rfind(p, 0) == 0;
}

std::vector<std::string> coll_names()
{
	int n = -1;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	EXPECT_NE(l, nullptr);
	std::vector<std::string> out;
	for (int i = 0; l && i < n; i++)
		out.push_back(ibv_get_coll_device_name(l[i]));
	ibv_free_coll_device_list(l);
	std::sort(out.begin(), out.end());
	return out;
}

// The reference: what libibverbs itself lists.
std::vector<std::string> libibverbs_names()
{
	int n = 0;
	ibv_device **l = ibv_get_device_list(&n);
	std::vector<std::string> out;
	for (int i = 0; l && i < n; i++)
		out.push_back(ibv_get_device_name(l[i]));
	if (l)
		ibv_free_device_list(l);
	std::sort(out.begin(), out.end());
	return out;
}

std::vector<std::string> with_prefix(const std::vector<std::string> &v, const char *p)
{
	std::vector<std::string> out;
	for (const auto &s : v)
		if (starts_with(s, p))
			out.push_back(s);
	return out;
}

// The verbs device to test: $IBV_COLL_TEST_DEV when it is one, else the
// first listed; empty when there is none.
std::string verbs_device()
{
	std::string t = test_device_name();
	if (starts_with(t, "verbs_"))
		return t;
	auto v = with_prefix(coll_names(), "verbs_");
	return v.empty() ? "" : v.front();
}

#define REQUIRE_VERBS_DEVICE(dev)                                                    \
	std::string dev = verbs_device();                                            \
	if (dev.empty())                                                             \
	GTEST_SKIP() << "libibverbs lists no device here; in a VM, create one with " \
			"`rdma link add rxe0 type rxe netdev eth0`"

// The libibverbs context of the same device, for reference values.
struct RealCtx {
	ibv_context *ctx = nullptr;
	explicit RealCtx(const std::string &coll_name)
	{
		int n = 0;
		ibv_device **l = ibv_get_device_list(&n);
		for (int i = 0; l && i < n && !ctx; i++)
			if (coll_name == std::string("verbs_") + ibv_get_device_name(l[i]))
				ctx = ibv_open_device(l[i]);
		if (l)
			ibv_free_device_list(l);
	}
	~RealCtx()
	{
		if (ctx)
			ibv_close_device(ctx);
	}
};

ibv_coll_context *open_coll(const std::string &name)
{
	int n;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	ibv_coll_context *c = nullptr;
	for (int i = 0; l && i < n && !c; i++)
		if (name == ibv_get_coll_device_name(l[i]))
			c = ibv_open_coll_device(l[i]);
	ibv_free_coll_device_list(l);
	return c;
}

RcOptions verbs_opts(const std::string &dev, size_t size = 1 << 20)
{
	RcOptions o;
	o.dev = dev;
	o.buf_size = size;
	o.max_wr = 64;
	return o;
}

// Two endpoints on the device, connected to each other.
struct Pair {
	RcEndpoint a, b;
	int open(const std::string &dev, size_t size = 1 << 20)
	{
		if (int e = a.open(verbs_opts(dev, size)))
			return e;
		if (int e = b.open(verbs_opts(dev, size)))
			return e;
		if (int e = a.connect(b.info()))
			return e;
		return b.connect(a.info());
	}
};

} // namespace

TEST(VerbsList, EveryLibibverbsDeviceAsVerbsName)
{
	std::vector<std::string> want;
	for (const auto &n : libibverbs_names())
		want.push_back("verbs_" + n);
	auto all = coll_names();
	EXPECT_EQ(with_prefix(all, "verbs_"), want);
	for (const auto &n : all)
		EXPECT_TRUE(starts_with(n, "crxe_") || starts_with(n, "verbs_")) << n;
	EXPECT_TRUE(std::find(all.begin(), all.end(), "crxe_lo") != all.end());
}

TEST(VerbsList, NoLibibverbsDevicesMeansOnlyCrxe)
{
	auto ib = libibverbs_names();
	if (!ib.empty())
		GTEST_SKIP() << "libibverbs lists " << ib.size() << " device(s) here, " << ib[0]
			     << " first";
	auto all = coll_names();
	ASSERT_FALSE(all.empty());
	for (const auto &n : all)
		EXPECT_TRUE(starts_with(n, "crxe_")) << n;
}

TEST(VerbsList, DisableHidesEveryVerbsDevice)
{
	auto crxe = with_prefix(coll_names(), "crxe_");
	for (const char *v : {"1", "y", "yes", "on"}) {
		ScopedEnv e("IBV_COLL_VERBS_DISABLE", v);
		auto all = coll_names();
		EXPECT_TRUE(with_prefix(all, "verbs_").empty()) << "IBV_COLL_VERBS_DISABLE=" << v;
		EXPECT_EQ(with_prefix(all, "crxe_"), crxe);
	}
	ScopedEnv e("IBV_COLL_VERBS_DISABLE", "0");
	EXPECT_EQ(with_prefix(coll_names(), "verbs_").size(), libibverbs_names().size());
}

TEST(VerbsList, BadDisableValueListsNoVerbsDevice)
{
	auto crxe = with_prefix(coll_names(), "crxe_");
	ScopedEnv e("IBV_COLL_VERBS_DISABLE", "perhaps");
	auto all = coll_names();
	EXPECT_TRUE(with_prefix(all, "verbs_").empty());
	EXPECT_EQ(with_prefix(all, "crxe_"), crxe) << "crxe does not depend on it";
}

TEST(VerbsList, DeviceFilterVariable)
{
	{
		ScopedEnv e("IBV_COLL_VERBS_DEVICES", "no_such_device");
		EXPECT_TRUE(with_prefix(coll_names(), "verbs_").empty());
	}
	auto ib = libibverbs_names();
	if (ib.empty())
		GTEST_SKIP() << "libibverbs lists no device to select";
	for (const std::string &f : {ib[0], "nothing," + ib[0], "verbs_" + ib[0]}) {
		ScopedEnv e("IBV_COLL_VERBS_DEVICES", f.c_str());
		EXPECT_EQ(with_prefix(coll_names(), "verbs_"),
			  std::vector<std::string>{"verbs_" + ib[0]})
			<< "IBV_COLL_VERBS_DEVICES=" << f;
	}
}

TEST(VerbsConfig, PrintConfigListsVerbsVariables)
{
	char *text = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	ASSERT_EQ(ibv_coll_print_config(f), 0);
	fclose(f);
	std::string s(text, len);
	free(text);
	for (const char *v :
	     {"IBV_COLL_VERBS_DEVICES=", "IBV_COLL_VERBS_DISABLE=n", "IBV_COLL_CRXE_DEVICES="})
		EXPECT_NE(s.find(v), std::string::npos) << v;
}

TEST(VerbsDevice, QueriesMatchLibibverbs)
{
	REQUIRE_VERBS_DEVICE(dev);
	RealCtx real(dev);
	ASSERT_NE(real.ctx, nullptr);
	ibv_coll_context *c = open_coll(dev);
	ASSERT_NE(c, nullptr);
	EXPECT_EQ(c->num_comp_vectors, 1);

	ibv_device_attr rd;
	ASSERT_EQ(ibv_query_device(real.ctx, &rd), 0);
	ibv_coll_device_attr da;
	ASSERT_EQ(ibv_query_coll_device(c, &da), 0);
	EXPECT_STREQ(da.fw_ver, rd.fw_ver);
	EXPECT_EQ(da.node_guid, be64toh(rd.node_guid));
	EXPECT_EQ(da.vendor_id, rd.vendor_id);
	EXPECT_EQ(da.vendor_part_id, rd.vendor_part_id);
	EXPECT_EQ(da.hw_ver, rd.hw_ver);
	EXPECT_EQ(da.phys_port_cnt, rd.phys_port_cnt);
	EXPECT_EQ(da.max_mr_size, rd.max_mr_size);
	EXPECT_EQ(int(da.max_qp_wr), rd.max_qp_wr);
	EXPECT_EQ(int(da.max_sge), rd.max_sge);
	EXPECT_EQ(int(da.max_cqe), rd.max_cqe);
	EXPECT_EQ(int(da.max_qp_rd_atom), rd.max_qp_rd_atom);

	ibv_port_attr rp;
	ASSERT_EQ(ibv_query_port(real.ctx, 1, &rp), 0);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(c, 1, &pa), 0);
	EXPECT_EQ(pa.state, rp.state);
	EXPECT_EQ(pa.max_mtu, rp.max_mtu);
	EXPECT_EQ(pa.active_mtu, rp.active_mtu);
	EXPECT_EQ(pa.gid_tbl_len, rp.gid_tbl_len);
	EXPECT_EQ(pa.max_msg_sz, rp.max_msg_sz);
	EXPECT_EQ(da.max_msg_sz, rp.max_msg_sz);
	EXPECT_EQ(pa.link_layer, rp.link_layer);
	if (rp.link_layer == IBV_LINK_LAYER_ETHERNET) {
		EXPECT_EQ(pa.udp_port, IBV_COLL_ROCE_UDP_PORT);
		EXPECT_NE(pa.netdev[0], '\0') << "a RoCE port has a netdev";
		EXPECT_GT(pa.netdev_mtu, 0u);
	}
	EXPECT_EQ(ibv_query_coll_port(c, uint8_t(rd.phys_port_cnt + 1), &pa), EINVAL);
	EXPECT_EQ(ibv_query_coll_port(c, 0, &pa), EINVAL);

	// The GID table index for index, empty slots included.
	for (int i = 0; i < std::min(rp.gid_tbl_len, 16); i++) {
		ibv_gid want, got;
		ASSERT_EQ(ibv_query_gid(real.ctx, 1, i, &want), 0);
		ASSERT_EQ(ibv_query_coll_gid(c, 1, i, &got), 0) << "index " << i;
		EXPECT_EQ(memcmp(want.raw, got.raw, 16), 0) << "index " << i;
	}
	ibv_gid g;
	EXPECT_EQ(ibv_query_coll_gid(c, 1, -1, &g), EINVAL);
	EXPECT_EQ(ibv_query_coll_gid(c, 1, rp.gid_tbl_len, &g), EINVAL);
	EXPECT_EQ(ibv_close_coll_device(c), 0);
}

// The collective engine needs UD QPs and a shared receive queue: the fake
// device has neither and refuses collectives cleanly; a real device (rxe in
// the VM) runs a one-node, two-rank allreduce through the engine and its UD
// transport, checked against sums computed here.
TEST(VerbsDevice, CollectiveQps)
{
	REQUIRE_VERBS_DEVICE(dev);
	ibv_coll_context *c = open_coll(dev);
	ASSERT_NE(c, nullptr);
	ibv_coll_pd *pd = ibv_alloc_coll_pd(c);
	ASSERT_NE(pd, nullptr);
	ibv_coll_cq *cq = ibv_create_coll_cq(c, 8, nullptr, nullptr, 0);
	ASSERT_NE(cq, nullptr);
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = 4;
	ia.cap.max_send_sge = 2;
	ibv_coll_caps caps;
	ibv_coll_counters cnt{};
	if (dev == "verbs_fake0") {
		EXPECT_EQ(ibv_query_coll_caps(c, &caps), EOPNOTSUPP);
		EXPECT_EQ(ibv_query_coll_counters(c, &cnt), EOPNOTSUPP);
		errno = 0;
		EXPECT_EQ(ibv_create_coll_qp(pd, &ia), nullptr);
		EXPECT_EQ(errno, EOPNOTSUPP);
		// Nothing was taken: the parents go.
		EXPECT_EQ(ibv_destroy_coll_cq(cq), 0);
		EXPECT_EQ(ibv_dealloc_coll_pd(pd), 0);
		EXPECT_EQ(ibv_close_coll_device(c), 0);
		return;
	}
	ASSERT_EQ(ibv_query_coll_caps(c, &caps), 0);
	EXPECT_TRUE(caps.topologies & (1u << IBV_COLL_TOPO_RING));
	EXPECT_FALSE(caps.topologies & (1u << IBV_COLL_TOPO_HIERARCHY));
	EXPECT_GE(caps.max_block_len, 256u);
	ibv_coll_qp *qp = ibv_create_coll_qp(pd, &ia);
	ASSERT_NE(qp, nullptr) << strerror(errno);
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT), 0);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(c, 1, &pa), 0);
	ibv_coll_member me{};
	ASSERT_EQ(ibv_query_coll_gid(c, 1, test_gid_index(), &me.gid), 0);
	me.udp_port = pa.udp_port;
	me.num_ranks = 2;
	me.qp_num = qp->qp_num;
	ibv_coll_job_attr job{};
	job.jid = 7;
	job.num_nodes = 1;
	job.members = &me;
	job.topology = IBV_COLL_TOPO_RING;
	job.seg_count = 16;
	job.job_key = 0xfeed;
	a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096; // lowered to what a UD datagram carries
	a.job = &job;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU),
		  0);
	a.qp_state = IBV_QPS_RTS;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE), 0);
	ibv_coll_qp_attr qa;
	ibv_coll_qp_init_attr qi;
	ASSERT_EQ(ibv_query_coll_qp(qp, &qa, IBV_COLL_QP_STATE, &qi), 0);
	EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
	EXPECT_LE(128u << qa.path_mtu, caps.max_block_len);
	EXPECT_EQ(qi.send_cq, cq) << "query gives back our CQ, not the engine's";

	const uint64_t n = 3000; // several blocks
	std::vector<int32_t> src(2 * n), dst(2 * n, -1);
	for (uint64_t i = 0; i < 2 * n; i++)
		src[i] = int32_t(i * 7 % 1001) - 300;
	ibv_coll_mr *ms = ibv_reg_coll_mr(pd, src.data(), src.size() * 4, 0);
	ibv_coll_mr *md = ibv_reg_coll_mr(pd, dst.data(), dst.size() * 4, IBV_ACCESS_LOCAL_WRITE);
	ASSERT_TRUE(ms && md);
	ibv_sge s[2], d[2];
	for (int r = 0; r < 2; r++) {
		s[r] = {uint64_t(uintptr_t(&src[size_t(r) * n])), uint32_t(n * 4), ms->lkey};
		d[r] = {uint64_t(uintptr_t(&dst[size_t(r) * n])), uint32_t(n * 4), md->lkey};
	}
	ibv_coll_send_wr wr{}, *bad = nullptr;
	wr.wr_id = 99;
	wr.opcode = IBV_COLL_WR_ALLREDUCE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = s;
	wr.num_sge = 2;
	wr.wr.coll.dst_list = d;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	wr.wr.coll.count = n;
	ASSERT_EQ(ibv_post_coll_send(qp, &wr, &bad), 0);
	ibv_coll_wc wc{};
	int got = 0;
	for (int i = 0; i < 20000 && !got; i++) {
		got = ibv_poll_coll_cq(cq, 1, &wc);
		if (!got)
			poll(nullptr, 0, 1);
	}
	ASSERT_EQ(got, 1) << "no completion";
	EXPECT_EQ(wc.wr_id, 99u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.coll_status, IBV_COLL_STATUS_SUCCESS);
	for (uint64_t i = 0; i < n; i++) {
		int32_t want = src[i] + src[n + i];
		ASSERT_EQ(dst[i], want) << "rank 0 element " << i;
		ASSERT_EQ(dst[n + i], want) << "rank 1 element " << i;
	}
	ASSERT_EQ(ibv_query_coll_counters(c, &cnt), 0);
	// A bad key is refused at posting, as crxe does.
	s[0].lkey ^= 0x5a5a00;
	EXPECT_EQ(ibv_post_coll_send(qp, &wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr);

	EXPECT_EQ(ibv_destroy_coll_cq(cq), EBUSY);
	EXPECT_EQ(ibv_destroy_coll_qp(qp), 0);
	EXPECT_EQ(ibv_dereg_coll_mr(ms), 0);
	EXPECT_EQ(ibv_dereg_coll_mr(md), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(cq), 0);
	EXPECT_EQ(ibv_dealloc_coll_pd(pd), 0);
	EXPECT_EQ(ibv_close_coll_device(c), 0);
}

TEST(VerbsDevice, QpAttributesPassThrough)
{
	REQUIRE_VERBS_DEVICE(dev);
	RcEndpoint a, b;
	ASSERT_EQ(a.open(verbs_opts(dev, 4096)), 0);
	ASSERT_EQ(b.open(verbs_opts(dev, 4096)), 0);
	ibv_coll_qp_attr q{};
	ibv_coll_qp_init_attr qi{};
	ASSERT_EQ(ibv_query_coll_qp(a.qp, &q, IBV_COLL_QP_STATE, &qi), 0);
	EXPECT_EQ(q.qp_state, IBV_QPS_INIT);
	EXPECT_EQ(q.port_num, 1);
	EXPECT_EQ(qi.qp_type, IBV_COLL_QPT_RC);
	EXPECT_EQ(qi.send_cq, a.cq);
	EXPECT_GE(qi.cap.max_send_wr, 64u) << "what the device allocated";
	EXPECT_GE(qi.cap.max_send_sge, 4u);

	ibv_gid sgid;
	ASSERT_EQ(ibv_query_coll_gid(a.ctx, 1, a.opt.gid_index, &sgid), 0);
	ibv_coll_qp_attr r{};
	r.qp_state = IBV_QPS_RTR;
	r.path_mtu = IBV_MTU_512;
	r.dest_qp_num = b.qp->qp_num;
	r.rq_psn = 0xabcde;
	r.max_dest_rd_atomic = 4;
	r.min_rnr_timer = 12;
	r.ah_attr.dgid = sgid;
	r.ah_attr.sgid_index = uint8_t(a.opt.gid_index);
	r.ah_attr.udp_port = 12345; // no meaning on a real device
	const int rtr = IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
			IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN | IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
			IBV_COLL_QP_MIN_RNR_TIMER;
	ASSERT_EQ(ibv_modify_coll_qp(a.qp, &r, rtr), 0);
	ibv_coll_qp_attr s{};
	s.qp_state = IBV_QPS_RTS;
	s.sq_psn = 0x12345;
	s.timeout = 0; // ours: the device default; libibverbs' 0 would be "forever"
	s.retry_cnt = 5;
	s.rnr_retry = 6;
	s.max_rd_atomic = 2;
	ASSERT_EQ(ibv_modify_coll_qp(a.qp, &s,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT |
					     IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY |
					     IBV_COLL_QP_MAX_QP_RD_ATOMIC),
		  0);
	EXPECT_EQ(a.qp->state, IBV_QPS_RTS);
	ASSERT_EQ(ibv_query_coll_qp(a.qp, &q, IBV_COLL_QP_STATE, &qi), 0);
	EXPECT_EQ(q.qp_state, IBV_QPS_RTS);
	EXPECT_EQ(q.path_mtu, IBV_MTU_512);
	EXPECT_EQ(q.dest_qp_num, b.qp->qp_num);
	EXPECT_EQ(q.rq_psn, 0xabcdeu);
	EXPECT_EQ(q.sq_psn, 0x12345u);
	EXPECT_EQ(memcmp(q.ah_attr.dgid.raw, sgid.raw, 16), 0);
	EXPECT_EQ(q.ah_attr.sgid_index, a.opt.gid_index);
	EXPECT_EQ(q.ah_attr.udp_port, IBV_COLL_ROCE_UDP_PORT) << "the port RoCE really uses";
	EXPECT_EQ(q.min_rnr_timer, 12);
	EXPECT_EQ(q.timeout, 14) << "timeout 0 became the documented default";
	EXPECT_EQ(q.retry_cnt, 5);
	EXPECT_EQ(q.rnr_retry, 6);
	EXPECT_GE(q.max_dest_rd_atomic, 4);
	EXPECT_EQ(q.qp_access_flags, unsigned(a.opt.access));

	// Out of the IBTA's field widths, and the collective job bit.
	s = {};
	s.timeout = 32;
	EXPECT_EQ(ibv_modify_coll_qp(a.qp, &s, IBV_COLL_QP_TIMEOUT), EINVAL);
	s.timeout = 10;
	s.retry_cnt = 8;
	EXPECT_EQ(ibv_modify_coll_qp(a.qp, &s, IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT),
		  EINVAL);
	EXPECT_EQ(ibv_modify_coll_qp(a.qp, &s, IBV_COLL_QP_JOB), EINVAL);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(b.ctx, 1, &pa), 0);
	r.ah_attr.sgid_index = uint8_t(std::min(pa.gid_tbl_len, 255));
	if (pa.gid_tbl_len < 256) {
		EXPECT_EQ(ibv_modify_coll_qp(b.qp, &r, rtr), EINVAL) << "sgid_index past the table";
	}
	ASSERT_EQ(ibv_query_coll_qp(a.qp, &q, IBV_COLL_QP_STATE, &qi), 0);
	EXPECT_EQ(q.retry_cnt, 5) << "a refused modify changed nothing";
}

TEST(VerbsDevice, EveryOpcodeLoopback)
{
	REQUIRE_VERBS_DEVICE(dev);
	Pair p;
	ASSERT_EQ(p.open(dev), 0);
	RcEndpoint &a = p.a, &b = p.b;
	ibv_coll_wc wc;
	const uint64_t base_b = reinterpret_cast<uint64_t>(b.buf);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(a.ctx, 1, &pa), 0);
	uint32_t big = std::min<uint32_t>(pa.max_msg_sz, 300000);

	for (uint32_t len : {0u, 1u, 4097u, big}) {
		SCOPED_TRACE("size " + std::to_string(len));
		// SEND
		ASSERT_EQ(b.post_recv(0, len, 10), 0);
		fill_pattern(a.buf, len, len + 1);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_SEND, 0, len, 0, 0, 1), 0);
		ASSERT_EQ(a.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_SEND);
		EXPECT_EQ(wc.wr_id, 1u);
		EXPECT_EQ(wc.qp_num, a.qp->qp_num);
		ASSERT_EQ(b.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RECV);
		EXPECT_EQ(wc.wr_id, 10u);
		EXPECT_EQ(wc.byte_len, len);
		EXPECT_EQ(wc.wc_flags & IBV_COLL_WC_WITH_IMM, 0u);
		EXPECT_EQ(wc.qp_num, b.qp->qp_num);
		EXPECT_EQ(check_pattern(b.buf, len, len + 1), SIZE_MAX);

		// SEND_WITH_IMM
		ASSERT_EQ(b.post_recv(0, len, 11), 0);
		fill_pattern(a.buf, len, len + 2);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_SEND_WITH_IMM, 0, len, 0, 0, 2,
				      htobe32(0xfeed0000 | len)),
			  0);
		ASSERT_EQ(a.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_SEND);
		ASSERT_EQ(b.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RECV);
		EXPECT_TRUE(wc.wc_flags & IBV_COLL_WC_WITH_IMM);
		EXPECT_EQ(wc.imm_data, htobe32(0xfeed0000 | len)) << "network order, as sent";
		EXPECT_EQ(check_pattern(b.buf, len, len + 2), SIZE_MAX);

		// RDMA_WRITE, unsignaled then signaled
		fill_pattern(a.buf, len, len + 3);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE, 0, len, base_b, b.mr->rkey, 3, 0,
				      false),
			  0);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 0, base_b, b.mr->rkey, 4), 0);
		ASSERT_EQ(a.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RDMA_WRITE);
		EXPECT_EQ(wc.wr_id, 4u) << "the unsignaled write gave no completion";
		EXPECT_EQ(check_pattern(b.buf, len, len + 3), SIZE_MAX);

		// RDMA_WRITE_WITH_IMM: the data goes by rkey, a receive is consumed
		ASSERT_EQ(b.post_recv(0, 0, 12), 0);
		fill_pattern(a.buf, len, len + 4);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE_WITH_IMM, 0, len, base_b + 8,
				      b.mr->rkey, 5, htobe32(77)),
			  0);
		ASSERT_EQ(a.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RDMA_WRITE);
		ASSERT_EQ(b.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RECV_RDMA_WITH_IMM);
		EXPECT_EQ(wc.wr_id, 12u);
		EXPECT_EQ(wc.byte_len, len);
		EXPECT_EQ(wc.imm_data, htobe32(77));
		EXPECT_EQ(check_pattern(b.buf + 8, len, len + 4), SIZE_MAX);

		// RDMA_READ
		fill_pattern(b.buf, len, len + 5);
		memset(a.buf, 0, len);
		ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_READ, 0, len, base_b, b.mr->rkey, 6), 0);
		ASSERT_EQ(a.wait(&wc, 10000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_RDMA_READ);
		EXPECT_EQ(check_pattern(a.buf, len, len + 5), SIZE_MAX);
	}

	// Three SGEs gathered into one SEND, scattered into three receives'
	// worth of SGEs on the other side.
	fill_pattern(a.buf, 9000, 99);
	const uint64_t abuf = reinterpret_cast<uint64_t>(a.buf);
	ibv_sge gat[3] = {{abuf, 1000, a.mr->lkey},
			  {abuf + 1000, 3000, a.mr->lkey},
			  {abuf + 4000, 5000, a.mr->lkey}};
	ibv_sge sca[3] = {{base_b + 50000, 7000, b.mr->lkey},
			  {base_b, 1000, b.mr->lkey},
			  {base_b + 20000, 1000, b.mr->lkey}};
	ibv_coll_recv_wr rwr{}, *rbad;
	rwr.wr_id = 20;
	rwr.sg_list = sca;
	rwr.num_sge = 3;
	ASSERT_EQ(ibv_post_coll_recv(b.qp, &rwr, &rbad), 0);
	ibv_coll_send_wr swr[2]{}, *sbad;
	swr[0].wr_id = 21;
	swr[0].sg_list = gat;
	swr[0].num_sge = 3;
	swr[0].opcode = IBV_COLL_WR_SEND;
	swr[0].send_flags = IBV_COLL_SEND_SIGNALED;
	swr[0].next = &swr[1];
	swr[1] = swr[0];
	swr[1].wr_id = 22;
	swr[1].opcode = IBV_COLL_WR_RDMA_READ;
	swr[1].num_sge = 1;
	swr[1].wr.rdma.remote_addr = base_b + 50000;
	swr[1].wr.rdma.rkey = b.mr->rkey;
	swr[1].next = nullptr;
	ibv_sge back{abuf + 100000, 7000, a.mr->lkey};
	swr[1].sg_list = &back;
	ASSERT_EQ(ibv_post_coll_send(a.qp, swr, &sbad), 0) << "a chain of two";
	ASSERT_EQ(a.wait(&wc, 10000), 0);
	EXPECT_EQ(wc.wr_id, 21u);
	ASSERT_EQ(a.wait(&wc, 10000), 0);
	EXPECT_EQ(wc.wr_id, 22u);
	EXPECT_EQ(wc.opcode, IBV_COLL_WC_RDMA_READ);
	ASSERT_EQ(b.wait(&wc, 10000), 0);
	EXPECT_EQ(wc.wr_id, 20u);
	EXPECT_EQ(wc.byte_len, 9000u);
	EXPECT_EQ(check_pattern(a.buf + 100000, 7000, 99), SIZE_MAX);
	EXPECT_EQ(memcmp(b.buf, a.buf + 7000, 1000), 0);
	EXPECT_EQ(memcmp(b.buf + 20000, a.buf + 8000, 1000), 0);
	EXPECT_EQ(ibv_poll_coll_cq(a.cq, 1, &wc), 0);
	EXPECT_EQ(ibv_poll_coll_cq(b.cq, 1, &wc), 0);
}

TEST(VerbsDevice, MalformedWrsPostNothing)
{
	REQUIRE_VERBS_DEVICE(dev);
	Pair p;
	ASSERT_EQ(p.open(dev, 4096), 0);
	ibv_sge sge{reinterpret_cast<uint64_t>(p.a.buf), 16, p.a.mr->lkey};
	ibv_coll_send_wr wr[3]{}, *bad = nullptr;
	for (int i = 0; i < 3; i++) {
		wr[i].wr_id = uint64_t(i);
		wr[i].sg_list = &sge;
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_COLL_WR_SEND;
		wr[i].send_flags = IBV_COLL_SEND_SIGNALED;
		wr[i].next = i < 2 ? &wr[i + 1] : nullptr;
	}
	wr[2].opcode = IBV_COLL_WR_ALLREDUCE;
	EXPECT_EQ(ibv_post_coll_send(p.a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[2]);
	wr[2].opcode = IBV_COLL_WR_SEND;
	wr[1].num_sge = 1000;
	EXPECT_EQ(ibv_post_coll_send(p.a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[1]);
	wr[1].num_sge = 1;
	wr[0].send_flags |= 1u << 3; // IBV_SEND_INLINE is not ours
	EXPECT_EQ(ibv_post_coll_send(p.a.qp, wr, &bad), EINVAL);
	EXPECT_EQ(bad, &wr[0]);
	ibv_coll_wc wc;
	ASSERT_EQ(p.b.post_recv(0, 64, 1), 0);
	EXPECT_EQ(p.b.wait(&wc, 100), ETIMEDOUT) << "nothing was sent";
	EXPECT_EQ(ibv_poll_coll_cq(p.a.cq, 1, &wc), 0);
	// A QP in RESET takes no receive.
	ibv_coll_qp_attr r{};
	r.qp_state = IBV_QPS_RESET;
	ASSERT_EQ(ibv_modify_coll_qp(p.b.qp, &r, IBV_COLL_QP_STATE), 0);
	ibv_coll_recv_wr rwr{}, *rbad = nullptr;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	EXPECT_EQ(ibv_post_coll_recv(p.b.qp, &rwr, &rbad), EINVAL);
	EXPECT_EQ(rbad, &rwr);
}

TEST(VerbsDevice, RemoteAccessErrorThenFlush)
{
	REQUIRE_VERBS_DEVICE(dev);
	Pair p;
	ASSERT_EQ(p.open(dev, 1 << 16), 0);
	fill_pattern(p.b.buf, 1 << 16, 5);
	// Ends 100 bytes past b's region.
	ASSERT_EQ(p.a.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 8192,
				reinterpret_cast<uint64_t>(p.b.buf) + (1 << 16) - 8092,
				p.b.mr->rkey, 7),
		  0);
	ibv_coll_wc wc;
	ASSERT_EQ(p.a.wait(&wc, 10000), 0);
	EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.wr_id, 7u);
	EXPECT_EQ(check_pattern(p.b.buf, 1 << 16, 5), SIZE_MAX) << "remote memory changed";
	ASSERT_EQ(p.a.post_send(IBV_COLL_WR_SEND, 0, 10, 0, 0, 8), 0);
	ASSERT_EQ(p.a.wait(&wc, 10000), 0);
	EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
	EXPECT_EQ(wc.wr_id, 8u);
	// The device moved the QP to ERROR; the core sees it through query.
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_RTS;
	EXPECT_EQ(ibv_modify_coll_qp(p.a.qp, &a, IBV_COLL_QP_STATE), EINVAL);
	EXPECT_EQ(p.a.qp->state, IBV_QPS_ERR);
	// The endpoints' teardown destroys the responder's QP, whose access
	// error the event thread has acknowledged.
}

TEST(VerbsDevice, CompletionEventsReachTheChannelFd)
{
	REQUIRE_VERBS_DEVICE(dev);
	Pair p;
	ASSERT_EQ(p.open(dev, 1 << 16), 0);
	RcEndpoint &a = p.a, &b = p.b;
	// Two channels on b's context, each with a CQ, and a QP that sends
	// on one and receives on the other: both real CQs share the context's
	// one real channel, and each event must land on its own channel.
	ibv_coll_comp_channel *ch_s = ibv_create_coll_comp_channel(b.ctx);
	ibv_coll_comp_channel *ch_r = ibv_create_coll_comp_channel(b.ctx);
	ASSERT_TRUE(ch_s && ch_r);
	int tag_s = 1, tag_r = 2;
	ibv_coll_cq *scq = ibv_create_coll_cq(b.ctx, 8, &tag_s, ch_s, 0);
	ibv_coll_cq *rcq = ibv_create_coll_cq(b.ctx, 8, &tag_r, ch_r, 0);
	ASSERT_TRUE(scq && rcq);
	EXPECT_GE(rcq->cqe, 8);
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.qp_type = IBV_COLL_QPT_RC;
	ia.cap = {4, 4, 1, 1, 0};
	ibv_coll_qp *qp = ibv_create_coll_qp(b.pd, &ia);
	ASSERT_NE(qp, nullptr);
	ibv_coll_qp_attr x{};
	x.qp_state = IBV_QPS_RESET;
	ASSERT_EQ(ibv_modify_coll_qp(a.qp, &x, IBV_COLL_QP_STATE), 0);
	x = {};
	x.qp_state = IBV_QPS_INIT;
	x.port_num = 1;
	x.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	const int init = IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS;
	ASSERT_EQ(ibv_modify_coll_qp(a.qp, &x, init), 0);
	ASSERT_EQ(ibv_modify_coll_qp(qp, &x, init), 0);
	PeerInfo bi = b.info();
	bi.qpn = qp->qp_num;
	ASSERT_EQ(a.connect(bi), 0);
	// Connect qp with b's settings.
	ibv_coll_qp *orig = b.qp;
	b.qp = qp;
	int err = b.connect(a.info());
	b.qp = orig;
	ASSERT_EQ(err, 0);

	ibv_sge sge{reinterpret_cast<uint64_t>(b.buf), 64, b.mr->lkey};
	ibv_coll_recv_wr rwr{}, *rbad;
	rwr.wr_id = 77;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	ASSERT_EQ(ibv_post_coll_recv(qp, &rwr, &rbad), 0);
	ASSERT_EQ(ibv_req_notify_coll_cq(rcq, 0), 0);
	ASSERT_EQ(ibv_req_notify_coll_cq(scq, 0), 0);
	pollfd pf[2] = {{ch_s->fd, POLLIN, 0}, {ch_r->fd, POLLIN, 0}};
	EXPECT_EQ(poll(pf, 2, 0), 0) << "an event before any completion";

	// a -> b: the receive completes on rcq, and only ch_r wakes.
	ASSERT_EQ(a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 1), 0);
	ASSERT_EQ(poll(&pf[1], 1, 5000), 1) << "no event on the receive channel's fd";
	EXPECT_EQ(poll(&pf[0], 1, 0), 0) << "event on the send channel";
	ibv_coll_cq *ev_cq = nullptr;
	void *ev_ctx = nullptr;
	ASSERT_EQ(ibv_get_coll_cq_event(ch_r, &ev_cq, &ev_ctx), 0);
	EXPECT_EQ(ev_cq, rcq);
	EXPECT_EQ(ev_ctx, &tag_r);
	ibv_coll_wc wc;
	ASSERT_EQ(ibv_poll_coll_cq(rcq, 1, &wc), 1);
	EXPECT_EQ(wc.wr_id, 77u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(wc.src_qp, a.qp->qp_num);

	// b -> a: the send completes on scq; ch_s wakes.
	ASSERT_EQ(a.post_recv(0, 64, 5), 0);
	ibv_sge ss{reinterpret_cast<uint64_t>(b.buf), 32, b.mr->lkey};
	ibv_coll_send_wr swr{}, *sbad;
	swr.wr_id = 78;
	swr.sg_list = &ss;
	swr.num_sge = 1;
	swr.opcode = IBV_COLL_WR_SEND;
	swr.send_flags = IBV_COLL_SEND_SIGNALED;
	ASSERT_EQ(ibv_post_coll_send(qp, &swr, &sbad), 0);
	ASSERT_EQ(poll(&pf[0], 1, 5000), 1) << "no event on the send channel's fd";
	ASSERT_EQ(ibv_get_coll_cq_event(ch_s, &ev_cq, &ev_ctx), 0);
	EXPECT_EQ(ev_cq, scq);
	EXPECT_EQ(ev_ctx, &tag_s);
	ASSERT_EQ(ibv_poll_coll_cq(scq, 1, &wc), 1);
	EXPECT_EQ(wc.wr_id, 78u);
	ASSERT_EQ(a.wait(&wc, 5000), 0);

	// Not re-armed: a further completion raises no event.
	ASSERT_EQ(ibv_post_coll_send(qp, &swr, &sbad), 0);
	ASSERT_EQ(ibv_post_coll_recv(qp, &rwr, &rbad), 0);
	ASSERT_EQ(a.post_recv(0, 64, 6), 0);
	std::vector<ibv_coll_wc> got;
	for (int i = 0; i < 500 && got.empty(); i++) {
		if (ibv_poll_coll_cq(scq, 1, &wc) == 1)
			got.push_back(wc);
		else
			poll(nullptr, 0, 2);
	}
	ASSERT_EQ(got.size(), 1u);
	EXPECT_EQ(poll(pf, 2, 20), 0) << "an event without arming";

	EXPECT_EQ(ibv_destroy_coll_qp(qp), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(rcq), EBUSY) << "an event is not acknowledged";
	ibv_ack_coll_cq_events(rcq, 1);
	ibv_ack_coll_cq_events(scq, 1);
	EXPECT_EQ(ibv_destroy_coll_cq(rcq), 0);
	EXPECT_EQ(ibv_destroy_coll_cq(scq), 0);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(ch_s), 0);
	EXPECT_EQ(ibv_destroy_coll_comp_channel(ch_r), 0);
}

// The device's own events and its ports' reach the application's async
// fd, in order, each once; after DEVICE_FATAL posts fail with EIO.  Only
// the fake libibverbs can be made to raise them.
TEST(VerbsDevice, DeviceAndPortAsyncEventsPassThrough)
{
	REQUIRE_VERBS_DEVICE(dev);
	using Inject = void (*)(int type, int port);
	auto inject = reinterpret_cast<Inject>(dlsym(RTLD_DEFAULT, "fake_ibverbs_async_event"));
	if (!inject)
		GTEST_SKIP() << "this libibverbs cannot be made to raise events";
	RcEndpoint a;
	ASSERT_EQ(a.open(verbs_opts(dev)), 0);
	inject(IBV_EVENT_PORT_ERR, 1);
	inject(IBV_EVENT_DEVICE_FATAL, 0);
	for (ibv_event_type want : {IBV_EVENT_PORT_ERR, IBV_EVENT_DEVICE_FATAL}) {
		pollfd p{a.ctx->async_fd, POLLIN, 0};
		ASSERT_EQ(poll(&p, 1, 5000), 1) << "no async event";
		ibv_coll_async_event ev{};
		ASSERT_EQ(ibv_get_coll_async_event(a.ctx, &ev), 0);
		EXPECT_EQ(ev.event_type, want);
		EXPECT_EQ(ev.element.port_num, want == IBV_EVENT_PORT_ERR ? 1 : 0);
		ibv_ack_coll_async_event(&ev);
	}
	ASSERT_EQ(fcntl(a.ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
	ibv_coll_async_event ev{};
	EXPECT_EQ(ibv_get_coll_async_event(a.ctx, &ev), EAGAIN);
	EXPECT_EQ(a.post_recv(0, 64, 1), EIO);
	EXPECT_EQ(a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 2), EIO);
}
