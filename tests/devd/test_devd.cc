// The shared device (issue 14): contexts of crxe_lo opened with
// IBV_COLL_CRXE_SHARED=1 reach one emulated NIC in ibv_coll_devd.  The data
// every test moves is checked against a pattern made here, not read back
// through the code under test.
#include "devd/devd_proto.h"
#include "devd/devd_sock.h"
#include "rc_endpoint.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

using namespace ibvc_test;
using namespace ibv_coll;

namespace {

void pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff);
}

bool has_pattern(const uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != uint8_t((i * 131 + seed * 7 + (i >> 8)) & 0xff))
			return false;
	return true;
}

// Whether a daemon answers for crxe_lo.
bool daemon_up()
{
	util::UniqueFd fd;
	return devd::connect_dev("crxe_lo", &fd) == 0;
}

bool wait_for(bool up, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (daemon_up() == up)
			return true;
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	return daemon_up() == up;
}

std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream ss;
	ss << f.rdbuf();
	return ss.str();
}

class Devd : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_FALSE(daemon_up()) << "a daemon serves crxe_lo already";
		setenv("IBV_COLL_CRXE_SHARED", "1", 1);
		setenv("IBV_COLL_CRXE_DEVD", "", 1); // start none: the test does
	}
	void TearDown() override
	{
		stop_daemon();
		unsetenv("IBV_COLL_CRXE_SHARED");
		unsetenv("IBV_COLL_CRXE_DEVD");
	}
	void start_daemon()
	{
		log_ = "/tmp/test_devd." + std::to_string(getpid()) + ".log";
		pid_ = fork();
		ASSERT_GE(pid_, 0);
		if (pid_ == 0) {
			FILE *f = freopen(log_.c_str(), "w", stderr);
			(void)f;
			setenv("IBV_COLL_LOG_LEVEL", "info", 1);
			execl(DEVD_PATH, DEVD_PATH, "lo", (char *)nullptr);
			_exit(127);
		}
		ASSERT_TRUE(wait_for(true, 5000)) << "ibv_coll_devd did not come up";
	}
	void stop_daemon()
	{
		if (pid_ <= 0)
			return;
		kill(pid_, SIGTERM);
		int st;
		waitpid(pid_, &st, 0);
		pid_ = -1;
		unlink(log_.c_str());
	}
	pid_t pid_ = -1;
	std::string log_;
};

void connect_pair(RcEndpoint &a, RcEndpoint &b)
{
	ASSERT_EQ(a.open(RcOptions{}), 0);
	ASSERT_EQ(b.open(RcOptions{}), 0);
	ASSERT_EQ(a.connect(b.info()), 0);
	ASSERT_EQ(b.connect(a.info()), 0);
}

} // namespace

// Without a daemon, and told to start none, a shared open fails: the
// provider never falls back to a NIC of its own behind the caller's back.
TEST_F(Devd, NoDaemonIsAnErrorNotAFallback)
{
	RcEndpoint ep;
	EXPECT_EQ(ep.open(RcOptions{}), ECONNREFUSED);
}

// Two contexts, one NIC: the same UDP port (two in-process NICs would bind
// two), and RDMA WRITE, SEND/RECV and READ between them move the right
// bytes, read and written in the clients' memory by the daemon.
TEST_F(Devd, TwoContextsShareOneNicAndMoveData)
{
	start_daemon();
	RcEndpoint a, b;
	connect_pair(a, b);
	ibv_coll_port_attr pa{}, pb{};
	ASSERT_EQ(ibv_query_coll_port(a.ctx, 1, &pa), 0);
	ASSERT_EQ(ibv_query_coll_port(b.ctx, 1, &pb), 0);
	EXPECT_EQ(pa.udp_port, pb.udp_port);

	constexpr uint32_t kLen = 200000; // many packets
	pattern(a.buf, kLen, 1);
	memset(b.buf, 0, kLen);
	ibv_coll_wc wc{};
	ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE, 0, kLen, uintptr_t(b.buf), b.mr->rkey, 1), 0);
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_TRUE(has_pattern(b.buf, kLen, 1));

	pattern(b.buf + kLen, 5000, 2);
	ASSERT_EQ(a.post_recv(kLen, 8192, 7), 0);
	ASSERT_EQ(b.post_send(IBV_COLL_WR_SEND, kLen, 5000, 0, 0, 8), 0);
	ASSERT_EQ(b.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(wc.wr_id, 7u);
	EXPECT_EQ(wc.byte_len, 5000u);
	EXPECT_TRUE(has_pattern(a.buf + kLen, 5000, 2));

	pattern(b.buf + 2 * kLen, 70000, 3);
	ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_READ, 2 * kLen, 70000, uintptr_t(b.buf + 2 * kLen),
			      b.mr->rkey, 9),
		  0);
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_TRUE(has_pattern(a.buf + 2 * kLen, 70000, 3));
}

// A client naming another client's lkey in its own SGE gets a local
// protection error: the key is in another PD (of another address space).
TEST_F(Devd, AnotherClientsLkeyIsAProtectionError)
{
	start_daemon();
	RcEndpoint a, b;
	connect_pair(a, b);
	ibv_sge s{uintptr_t(b.buf), 64, b.mr->lkey};
	ibv_coll_send_wr wr{};
	wr.wr_id = 5;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.opcode = IBV_COLL_WR_RDMA_WRITE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = uintptr_t(b.buf) + 4096;
	wr.wr.rdma.rkey = b.mr->rkey;
	ibv_coll_send_wr *bad = nullptr;
	ASSERT_EQ(ibv_post_coll_send(a.qp, &wr, &bad), 0);
	ibv_coll_wc wc{};
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.wr_id, 5u);
	EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << ibv_coll_wc_status_str(wc.status);
}

// A client killed with its objects in place has them destroyed by the
// daemon, which keeps serving the others.
TEST_F(Devd, KilledClientIsCleanedUpAndOthersGoOn)
{
	start_daemon();
	int p[2];
	ASSERT_EQ(pipe(p), 0);
	pid_t child = fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		RcEndpoint ep;
		char c = ep.open(RcOptions{}) == 0 && ep.connect(ep.info()) == 0 &&
					 ep.post_recv(0, 64, 1) == 0
				 ? 'y'
				 : 'n';
		if (write(p[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	char c = 0;
	ASSERT_EQ(read(p[0], &c, 1), 1);
	close(p[0]);
	EXPECT_EQ(c, 'y');
	kill(child, SIGKILL);
	int st;
	waitpid(child, &st, 0);
	bool cleaned = false;
	for (int i = 0; i < 200 && !cleaned; i++) {
		cleaned = slurp(log_).find("gone (1 qps, 1 cqs, 1 mrs released)") !=
			  std::string::npos;
		if (!cleaned)
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	EXPECT_TRUE(cleaned) << slurp(log_);

	RcEndpoint a, b;
	connect_pair(a, b);
	pattern(a.buf, 4096, 4);
	ibv_coll_wc wc{};
	ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 4096, uintptr_t(b.buf), b.mr->rkey, 1), 0);
	ASSERT_EQ(a.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_TRUE(has_pattern(b.buf, 4096, 4));
}

// With IBV_COLL_CRXE_DEVD naming the daemon, the first open starts one
// (--exit-idle), and it leaves when its last client has.
TEST_F(Devd, FirstOpenStartsTheDaemonWhichLeavesWhenIdle)
{
	setenv("IBV_COLL_CRXE_DEVD", DEVD_PATH, 1);
	{
		RcEndpoint ep;
		ASSERT_EQ(ep.open(RcOptions{}), 0);
		ASSERT_EQ(ep.connect(ep.info()), 0);
		EXPECT_TRUE(daemon_up());
		pattern(ep.buf, 1000, 5);
		ibv_coll_wc wc{};
		ASSERT_EQ(ep.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 1000, uintptr_t(ep.buf + 8192),
				       ep.mr->rkey, 1),
			  0);
		ASSERT_EQ(ep.wait(&wc, 5000), 0);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_TRUE(has_pattern(ep.buf + 8192, 1000, 5));
	}
	EXPECT_TRUE(wait_for(false, 5000)) << "the daemon stayed after its last client";
}

// The daemon killed under a client: a poller gets IBV_WC_FATAL_ERR instead
// of waiting forever, posts and commands fail with EIO, and the objects
// can still be destroyed.
TEST_F(Devd, DaemonDeathIsFatalNotAHang)
{
	start_daemon();
	RcEndpoint ep;
	ASSERT_EQ(ep.open(RcOptions{}), 0);
	ASSERT_EQ(ep.connect(ep.info()), 0);
	ASSERT_EQ(ep.post_recv(0, 64, 1), 0);
	kill(pid_, SIGKILL);
	int st;
	waitpid(pid_, &st, 0);
	pid_ = -1;
	ibv_coll_wc wc{};
	ASSERT_EQ(ep.wait(&wc, 5000), 0) << "no completion after the daemon died";
	EXPECT_EQ(wc.status, IBV_WC_FATAL_ERR) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(ep.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 64, uintptr_t(ep.buf), ep.mr->rkey, 2),
		  EIO);
	EXPECT_EQ(ep.post_recv(0, 64, 3), EIO);
	ibv_coll_qp_attr a{};
	ibv_coll_qp_init_attr ia{};
	EXPECT_EQ(ibv_query_coll_qp(ep.qp, &a, IBV_COLL_QP_STATE, &ia), EIO);
	// ~RcEndpoint destroys QP, MR, CQ, PD and closes: each must succeed.
	EXPECT_EQ(ibv_destroy_coll_qp(ep.qp), 0);
	ep.qp = nullptr;
	EXPECT_EQ(ibv_dereg_coll_mr(ep.mr), 0);
	ep.mr = nullptr;
	EXPECT_EQ(ibv_destroy_coll_cq(ep.cq), 0);
	ep.cq = nullptr;
	EXPECT_EQ(ibv_dealloc_coll_pd(ep.pd), 0);
	ep.pd = nullptr;
}

// A job's configuration crosses the channel whole, and the daemon refuses
// bytes that are not one: cut, padded, or naming a node it does not have.
TEST(DevdJob, PackedJobComesBackWholeAndBadBytesAreRefused)
{
	emu::JobConfig j;
	j.jid = 77;
	j.node = 2;
	j.topology = emu::Topology::hierarchy;
	j.seg_base = 5;
	j.seg_count = 9;
	j.block_len = 1024;
	j.key = 0x1122334455667788ull;
	j.timeout_ms = 300;
	j.total_ranks = 6;
	for (uint16_t i = 0; i < 3; i++) {
		emu::JobMember m;
		m.ep.ip.b[15] = uint8_t(i + 1);
		m.ep.port = uint16_t(4791 + i);
		m.qpn = 0x100u + i;
		m.ranks = 2;
		m.first_rank = 2u * i;
		j.members.push_back(m);
	}
	j.sw.on = true;
	j.sw.planes = 1;
	j.sw.leaves = 2;
	j.sw.leaf.resize(2);
	j.sw.leaf[1].port = 9999;
	j.sw.spine.resize(1);
	j.sw.spine[0].port = 8888;
	j.sw.member_leaf = {0, 1, 1};
	j.sw.window = 17;
	j.sw.e2e_ack = true;

	std::vector<uint8_t> b;
	devd::pack_job(j, &b);
	emu::JobConfig o;
	ASSERT_EQ(devd::unpack_job(b.data(), b.size(), &o), 0);
	EXPECT_EQ(o.jid, 77u);
	EXPECT_EQ(o.node, 2);
	EXPECT_EQ(o.topology, emu::Topology::hierarchy);
	EXPECT_EQ(o.seg_base, 5u);
	EXPECT_EQ(o.seg_count, 9u);
	EXPECT_EQ(o.block_len, 1024u);
	EXPECT_EQ(o.key, 0x1122334455667788ull);
	EXPECT_EQ(o.timeout_ms, 300u);
	EXPECT_EQ(o.total_ranks, 6u);
	ASSERT_EQ(o.members.size(), 3u);
	for (uint16_t i = 0; i < 3; i++) {
		EXPECT_EQ(o.members[i].ep.ip.b[15], i + 1);
		EXPECT_EQ(o.members[i].ep.port, 4791 + i);
		EXPECT_EQ(o.members[i].qpn, 0x100u + i);
		EXPECT_EQ(o.members[i].ranks, 2);
		EXPECT_EQ(o.members[i].first_rank, 2u * i);
	}
	EXPECT_TRUE(o.sw.on);
	EXPECT_EQ(o.sw.leaves, 2u);
	ASSERT_EQ(o.sw.leaf.size(), 2u);
	EXPECT_EQ(o.sw.leaf[1].port, 9999);
	ASSERT_EQ(o.sw.spine.size(), 1u);
	EXPECT_EQ(o.sw.spine[0].port, 8888);
	EXPECT_EQ(o.sw.member_leaf, (std::vector<uint8_t>{0, 1, 1}));
	EXPECT_EQ(o.sw.window, 17u);
	EXPECT_TRUE(o.sw.e2e_ack);
	EXPECT_FALSE(o.sw.inline_task);

	EXPECT_EQ(devd::unpack_job(b.data(), b.size() - 1, &o), EPROTO);
	EXPECT_EQ(devd::unpack_job(b.data(), 10, &o), EPROTO);
	std::vector<uint8_t> longer = b;
	longer.push_back(0);
	EXPECT_EQ(devd::unpack_job(longer.data(), longer.size(), &o), EPROTO);
	j.node = 3; // of 3 members
	devd::pack_job(j, &b);
	EXPECT_EQ(devd::unpack_job(b.data(), b.size(), &o), EINVAL);
}
