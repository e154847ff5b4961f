// One node's ranks from several processes on the host's shared device:
// ibv_coll_devd serves crxe_lo; three forked processes are node 0 (the
// lead with local ranks 0..1, two others with ranks 2 and 3, each joining
// it), and this process is node 1 (2 ranks) on a NIC of its own.  Every
// collective, and allreduce of every (op, type), is checked by each process
// for its own ranks against the scalar reference; then a process of node 0
// is killed mid-collective: the others fail within a bound, and the device
// goes on serving.
#include "coll_qp.h"
#include "devd/devd_sock.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using namespace ibvc_test;
using namespace ibv_coll;

namespace {

constexpr int kProcs = 3; // node 0's processes
const uint32_t kFirst[kProcs] = {0, 2, 3}, kCount[kProcs] = {2, 1, 1};
const std::vector<uint16_t> kRanks = {4, 2};

std::vector<CollSpec> specs()
{
	std::vector<CollSpec> v = {
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 20000, 0,
			kRanks),
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, 3, 0, kRanks),
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_MIN, IBV_COLL_DTYPE_FLOAT64, 900, 0,
			kRanks),
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT16, 1000, 0,
			kRanks),
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_BAND, IBV_COLL_DTYPE_UINT64, 333, 0,
			kRanks),
		spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_PROD, IBV_COLL_DTYPE_INT8, 4097, 0,
			kRanks),
		spec_of(IBV_COLL_WR_REDUCE, IBV_COLL_OP_MAX, IBV_COLL_DTYPE_BFLOAT16, 700, 3,
			kRanks),
		spec_of(IBV_COLL_WR_REDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_UINT16, 700, 5, kRanks),
		spec_of(IBV_COLL_WR_BCAST, 0, IBV_COLL_DTYPE_INT64, 1200, 2, kRanks),
		spec_of(IBV_COLL_WR_ALLGATHER, 0, IBV_COLL_DTYPE_UINT8, 999, 0, kRanks),
		spec_of(IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_OP_BOR, IBV_COLL_DTYPE_UINT32, 500, 0,
			kRanks),
		spec_of(IBV_COLL_WR_BARRIER, 0, IBV_COLL_DTYPE_UINT8, 0, 0, kRanks),
	};
	// Then allreduce of every (op, type): the bitwise ops on integers only.
	for (int t = IBV_COLL_DTYPE_INT8; t <= IBV_COLL_DTYPE_FLOAT64; t++)
		for (int o = IBV_COLL_OP_SUM; o <= IBV_COLL_OP_BXOR; o++)
			if (o < IBV_COLL_OP_BAND || t <= IBV_COLL_DTYPE_UINT64)
				v.push_back(spec_of(IBV_COLL_WR_ALLREDUCE, o, t, 777, 0, kRanks));
	return v;
}

bool daemon_up()
{
	util::UniqueFd fd;
	return devd::connect_dev("crxe_lo", &fd) == 0;
}

// ibv_coll_devd for crxe_lo, its log in `log`, with IBV_COLL_EMU_POLL_US
// set to poll_us (nullptr: the default); its pid once it answers, or -1.
pid_t start_devd(const std::string &log, const char *poll_us)
{
	pid_t pid = fork();
	if (pid == 0) {
		FILE *f = freopen(log.c_str(), "w", stderr);
		(void)f;
		setenv("IBV_COLL_LOG_LEVEL", "info", 1);
		if (poll_us)
			setenv("IBV_COLL_EMU_POLL_US", poll_us, 1);
		execl(DEVD_PATH, DEVD_PATH, "lo", (char *)nullptr);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 500 && !daemon_up(); i++)
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	return pid > 0 && daemon_up() ? pid : -1;
}

// A daemon of start_devd(): stopped, its log removed and the clients'
// environment undone when it goes (or stop()).
struct DevdProc {
	pid_t pid = -1;
	std::string log;
	void stop()
	{
		if (pid > 0) {
			kill(pid, SIGTERM);
			int st;
			waitpid(pid, &st, 0);
			unlink(log.c_str());
		}
		pid = -1;
		unsetenv("IBV_COLL_CRXE_SHARED");
		unsetenv("IBV_COLL_CRXE_DEVD");
	}
	~DevdProc() { stop(); }
};

// What travels between this process and node 0's: fixed-size records.
struct JoinHello {
	uint32_t qpn;
	ibv_coll_member me;
};
struct JoinCmd {
	int32_t op; // >= 0: run specs()[op]; -1: up; -2: post a long allreduce, no wait; -3: exit
	ibv_coll_member m[2];
};
struct JoinReply {
	int32_t status; // IBV_WC_* of the completion, or -1
	char why[200];
};

template <class T> bool put(int fd, const T &v)
{
	return write(fd, &v, sizeof(v)) == ssize_t(sizeof(v));
}
template <class T> bool get(int fd, T *v)
{
	size_t got = 0;
	while (got < sizeof(T)) {
		ssize_t n = read(fd, reinterpret_cast<char *>(v) + got, sizeof(T) - got);
		if (n <= 0)
			return false;
		got += size_t(n);
	}
	return true;
}

ibv_coll_job_attr job_of(const ibv_coll_member *m, uint32_t node)
{
	ibv_coll_job_attr j{};
	j.jid = 9;
	j.node_index = node;
	j.num_nodes = 2;
	j.members = m;
	j.seg_count = 64;
	j.job_key = 0xfeed;
	j.timeout_ms = 4000;
	return j;
}

// A process of node 0: local ranks [kFirst[i], +kCount[i]) on the shared
// device, driven by commands from the test.
[[noreturn]] void node0_proc(int i, int in, int out)
{
	ibv_coll_context *ctx = open_test_device();
	if (!ctx)
		_exit(2);
	JQp q(ctx, kFirst[i], kCount[i], true);
	JoinHello h{};
	h.qpn = q.qp ? q.qp->qp_num : 0;
	ibv_coll_port_attr pa;
	ibv_query_coll_port(ctx, 1, &pa);
	ibv_query_coll_gid(ctx, 1, 0, &h.me.gid);
	h.me.udp_port = pa.udp_port;
	if (!put(out, h))
		_exit(3);
	std::vector<CollSpec> all = specs();
	RankBufs long_op;
	JoinCmd c;
	while (get(in, &c) && c.op != -3) {
		JoinReply r{};
		r.status = -1;
		if (c.op == -1) {
			ibv_coll_job_attr j = job_of(c.m, 0);
			int err = q.modify(IBV_QPS_INIT);
			err = err ? err : q.rtr(j);
			err = err ? err : q.modify(IBV_QPS_RTS);
			r.status = err;
			snprintf(r.why, sizeof(r.why), "bring-up: %s", strerror(err));
		} else if (c.op == -2) {
			CollSpec s = spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM,
					     IBV_COLL_DTYPE_INT32, 1 << 20, 0, kRanks);
			r.status = long_op.make(q, s, 1, kFirst[i]) ? long_op.post(q, 7) : -1;
			if (r.status == 0) { // then wait for its end
				put(out, r);
				ibv_coll_wc wc{};
				r.status = q.wait(&wc, 20000) ? int(wc.status) : -1;
				snprintf(r.why, sizeof(r.why), "%s",
					 ibv_coll_status_str(wc.coll_status));
			}
		} else {
			RankBufs b;
			ibv_coll_wc wc{};
			if (!b.make(q, all[size_t(c.op)], uint64_t(c.op) + 11, kFirst[i]) ||
			    b.post(q, uint64_t(c.op))) {
				snprintf(r.why, sizeof(r.why), "post failed");
			} else if (!q.wait(&wc)) {
				snprintf(r.why, sizeof(r.why), "no completion");
			} else {
				r.status = int(wc.status);
				snprintf(r.why, sizeof(r.why), "%s",
					 b.check(uint64_t(c.op) + 11).c_str());
			}
			for (ibv_coll_mr *m : q.mrs)
				ibv_dereg_coll_mr(m);
			q.mrs.clear();
		}
		if (!put(out, r))
			break;
	}
	_exit(0);
}

class DevdJoin : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_FALSE(daemon_up()) << "a daemon serves crxe_lo already";
		// This process's own device first (node 1), then the daemon.
		unsetenv("IBV_COLL_CRXE_SHARED");
		ctx_ = open_test_device();
		ASSERT_TRUE(ctx_);
		mine_ = std::make_unique<JQp>(ctx_, 0, 2, false);
		ASSERT_TRUE(mine_->qp);
		devd_.log = "/tmp/test_devd_join." + std::to_string(getpid()) + ".log";
		devd_.pid = start_devd(devd_.log, nullptr);
		ASSERT_GT(devd_.pid, 0);
		setenv("IBV_COLL_CRXE_SHARED", "1", 1);
		setenv("IBV_COLL_CRXE_DEVD", "", 1);
		for (int i = 0; i < kProcs; i++) {
			int down[2], up[2];
			ASSERT_EQ(pipe(down), 0);
			ASSERT_EQ(pipe(up), 0);
			pid_[i] = fork();
			ASSERT_GE(pid_[i], 0);
			if (pid_[i] == 0) {
				close(down[1]);
				close(up[0]);
				node0_proc(i, down[0], up[1]);
			}
			close(down[0]);
			close(up[1]);
			to_[i] = down[1];
			from_[i] = up[0];
		}
		JoinHello h[kProcs];
		for (int i = 0; i < kProcs; i++)
			ASSERT_TRUE(get(from_[i], &h[i])) << "process " << i << " did not start";
		m_[0] = h[0].me;
		m_[0].num_ranks = 4;
		m_[0].qp_num = h[0].qpn;
		ibv_coll_port_attr pa;
		ibv_query_coll_port(ctx_, 1, &pa);
		ibv_query_coll_gid(ctx_, 1, 0, &m_[1].gid);
		m_[1].udp_port = pa.udp_port;
		m_[1].num_ranks = 2;
		m_[1].qp_num = mine_->qp->qp_num;
		// The joining processes first, then the lead.
		for (int i : {1, 2, 0}) {
			JoinCmd c{};
			c.op = -1;
			memcpy(c.m, m_, sizeof(m_));
			JoinReply r;
			ASSERT_TRUE(put(to_[i], c) && get(from_[i], &r));
			ASSERT_EQ(r.status, 0) << "process " << i << " " << r.why;
		}
		ASSERT_EQ(mine_->modify(IBV_QPS_INIT), 0);
		ASSERT_EQ(mine_->rtr(job_of(m_, 1)), 0);
		ASSERT_EQ(mine_->modify(IBV_QPS_RTS), 0);
	}
	void TearDown() override
	{
		for (int i = 0; i < kProcs; i++) {
			if (pid_[i] <= 0)
				continue;
			JoinCmd c{};
			c.op = -3;
			put(to_[i], c);
			close(to_[i]);
			close(from_[i]);
			int st;
			waitpid(pid_[i], &st, 0);
		}
		mine_.reset();
		if (ctx_)
			ibv_close_coll_device(ctx_);
		devd_.stop();
	}
	ibv_coll_context *ctx_ = nullptr;
	std::unique_ptr<JQp> mine_;
	ibv_coll_member m_[2]{};
	DevdProc devd_;
	pid_t pid_[kProcs] = {};
	int to_[kProcs] = {}, from_[kProcs] = {};
};

} // namespace

TEST_F(DevdJoin, EveryCollectiveAndOpTypeAcrossProcessesIsExact)
{
	std::vector<CollSpec> all = specs();
	for (size_t k = 0; k < all.size(); k++) {
		JoinCmd c{};
		c.op = int32_t(k);
		for (int i = 0; i < kProcs; i++)
			ASSERT_TRUE(put(to_[i], c));
		RankBufs b;
		ASSERT_TRUE(b.make(*mine_, all[k], k + 11, 4));
		ASSERT_EQ(b.post(*mine_, k), 0);
		ibv_coll_wc wc{};
		ASSERT_TRUE(mine_->wait(&wc)) << "spec " << k;
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "spec " << k;
		EXPECT_EQ(b.check(k + 11), "") << "spec " << k;
		for (int i = 0; i < kProcs; i++) {
			JoinReply r;
			ASSERT_TRUE(get(from_[i], &r)) << "process " << i;
			EXPECT_EQ(r.status, IBV_WC_SUCCESS) << "spec " << k << " process " << i;
			EXPECT_STREQ(r.why, "") << "spec " << k << " process " << i;
		}
		for (ibv_coll_mr *m : mine_->mrs)
			ibv_dereg_coll_mr(m);
		mine_->mrs.clear();
	}
}

// Node 1 never posts, so node 0's message stays running; one of node 0's
// processes is killed: the other two see the collective fail well within
// the job's timeout, node 1's post fails, and the device serves a new
// client.
TEST_F(DevdJoin, AProcessKilledMidCollectiveFailsItAndTheDeviceGoesOn)
{
	JoinCmd c{};
	c.op = -2;
	for (int i = 0; i < kProcs; i++) {
		JoinReply r;
		ASSERT_TRUE(put(to_[i], c) && get(from_[i], &r));
		ASSERT_EQ(r.status, 0) << "process " << i;
	}
	std::this_thread::sleep_for(std::chrono::milliseconds(100));
	auto t0 = std::chrono::steady_clock::now();
	kill(pid_[2], SIGKILL);
	int st;
	waitpid(pid_[2], &st, 0);
	pid_[2] = -1;
	close(to_[2]);
	close(from_[2]);
	// REMOTE_ABORT, as ibv_modify_coll_qp(3) says of a QP whose process
	// died, however the device learns it: the QP destroyed as the client
	// goes, or the dead process's memory out of reach first (which gave
	// LOCAL_ERR before the failure handling of joined QPs was fixed).
	for (int i = 0; i < 2; i++) {
		JoinReply r;
		ASSERT_TRUE(get(from_[i], &r)) << "process " << i;
		EXPECT_EQ(r.status, IBV_WC_REM_ABORT_ERR) << "process " << i << ": " << r.why;
		EXPECT_STRNE(r.why, "") << "process " << i;
	}
	EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3))
		<< "not before the job's timeout (4 s)";
	// Node 1 learns it from node 0's abort.
	RankBufs b;
	ASSERT_TRUE(b.make(*mine_,
			   spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32,
				   1 << 20, 0, kRanks),
			   1, 4));
	ASSERT_EQ(b.post(*mine_, 1), 0);
	ibv_coll_wc wc{};
	ASSERT_TRUE(mine_->wait(&wc, 6000));
	EXPECT_EQ(wc.status, IBV_WC_REM_ABORT_ERR) << ibv_coll_wc_status_str(wc.status);
	// The device goes on: a new client runs a one-node collective on it.
	ibv_coll_context *ctx = open_test_device();
	ASSERT_TRUE(ctx);
	{
		JQp q(ctx, 0, 2, false);
		ibv_coll_member me{};
		ibv_coll_port_attr pa;
		ibv_query_coll_port(ctx, 1, &pa);
		ibv_query_coll_gid(ctx, 1, 0, &me.gid);
		me.udp_port = pa.udp_port;
		me.num_ranks = 2;
		me.qp_num = q.qp->qp_num;
		ibv_coll_job_attr j = job_of(&me, 0);
		j.num_nodes = 1;
		j.jid = 10;
		ASSERT_EQ(q.modify(IBV_QPS_INIT), 0);
		ASSERT_EQ(q.rtr(j), 0);
		ASSERT_EQ(q.modify(IBV_QPS_RTS), 0);
		CollSpec s = spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32,
				     1000, 0, {2});
		RankBufs one;
		ASSERT_TRUE(one.make(q, s, 3, 0));
		ASSERT_EQ(one.post(q, 1), 0);
		ASSERT_TRUE(q.wait(&wc));
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
		EXPECT_EQ(one.check(3), "");
		for (ibv_coll_mr *m : q.mrs)
			ibv_dereg_coll_mr(m);
		q.mrs.clear();
	}
	ibv_close_coll_device(ctx);
}

// Collectives queued at once, on a device whose engine thread sleeps as
// soon as it is idle (IBV_COLL_EMU_POLL_US=0): the doorbell's request
// thread runs a pass that completes the first, and the engine thread must
// go on with the rest, since polling a shared device's CQ runs nothing.
TEST(DevdQueue, QueuedCollectivesAllRunWhenTheEngineSleepsAtOnce)
{
	ASSERT_FALSE(daemon_up()) << "a daemon serves crxe_lo already";
	const std::string log = "/tmp/test_devd_queue." + std::to_string(getpid()) + ".log";
	// The context, then the daemon, go however the test ends.
	struct Guard {
		DevdProc d;
		ibv_coll_context *ctx = nullptr;
		~Guard()
		{
			if (ctx)
				ibv_close_coll_device(ctx);
		}
	} g{{start_devd(log, "0"), log}};
	ASSERT_GT(g.d.pid, 0);
	setenv("IBV_COLL_CRXE_SHARED", "1", 1);
	setenv("IBV_COLL_CRXE_DEVD", "", 1);
	ibv_coll_context *ctx = g.ctx = open_test_device();
	ASSERT_TRUE(ctx);
	{
		JQp q(ctx, 0, 1, false);
		ASSERT_TRUE(q.qp);
		ibv_coll_member me{};
		ibv_coll_port_attr pa;
		ibv_query_coll_port(ctx, 1, &pa);
		ibv_query_coll_gid(ctx, 1, 0, &me.gid);
		me.udp_port = pa.udp_port;
		me.num_ranks = 1;
		me.qp_num = q.qp->qp_num;
		ibv_coll_job_attr j = job_of(&me, 0);
		j.num_nodes = 1;
		ASSERT_EQ(q.modify(IBV_QPS_INIT), 0);
		ASSERT_EQ(q.rtr(j), 0);
		ASSERT_EQ(q.modify(IBV_QPS_RTS), 0);
		std::vector<int32_t> buf(64, 3);
		ibv_coll_mr *mr = ibv_reg_coll_mr(q.pd, buf.data(), buf.size() * 4,
						  IBV_ACCESS_LOCAL_WRITE);
		ASSERT_TRUE(mr);
		q.mrs.push_back(mr);
		ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 256, mr->lkey};
		constexpr int kN = 6;
		for (int round = 0; round < 20; round++) {
			ibv_coll_send_wr w[kN]{}, *bad;
			for (int i = 0; i < kN; i++) {
				w[i].wr_id = uint64_t(i);
				w[i].opcode = IBV_COLL_WR_ALLREDUCE;
				w[i].send_flags = IBV_COLL_SEND_SIGNALED;
				w[i].sg_list = &sge;
				w[i].num_sge = 1;
				w[i].wr.coll.dst_list = &sge;
				w[i].wr.coll.count = 64;
				w[i].wr.coll.op = IBV_COLL_OP_SUM;
				w[i].wr.coll.dtype = IBV_COLL_DTYPE_INT32;
				w[i].next = i + 1 < kN ? &w[i + 1] : nullptr;
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(2)); // it sleeps
			ASSERT_EQ(ibv_post_coll_send(q.qp, w, &bad), 0);
			for (int i = 0; i < kN; i++) {
				ibv_coll_wc wc{};
				ASSERT_TRUE(q.wait(&wc, 3000)) << "round " << round << ": " << i
							       << " of " << kN << " completed";
				ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
			}
		}
		EXPECT_EQ(buf[0], 3); // one rank: the sum is itself
	}
}
