// The host's shared device (ibv_coll_devd): contexts of crxe_lo opened with
// IBV_COLL_CRXE_SHARED=1 reach one emulated NIC in ibv_coll_devd.  The data
// every test moves is checked against a pattern made here, not read back
// through the code under test.
#include "devd/devd_proto.h"
#include "devd/devd_sock.h"
#include "devd/devd_spawn.h"
#include "rc_endpoint.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
	// The daemon dies by sig with RC and collective work in flight.
	void kill_mid_work(int sig);
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


// One member (one rank) of a collective job, on a context of its own,
// its CQ on a completion channel.
struct CollNode {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_comp_channel *ch = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	ibv_coll_mr *mr = nullptr;
	std::vector<int32_t> buf = std::vector<int32_t>(2048);
	ibv_coll_member me{};

	int open()
	{
		if (!(ctx = open_test_device()) || !(pd = ibv_alloc_coll_pd(ctx)) ||
		    !(ch = ibv_create_coll_comp_channel(ctx)) ||
		    !(cq = ibv_create_coll_cq(ctx, 64, nullptr, ch, 0)) ||
		    !(mr = ibv_reg_coll_mr(pd, buf.data(), buf.size() * 4, IBV_ACCESS_LOCAL_WRITE)))
			return errno;
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap.max_send_wr = 8;
		ia.cap.max_send_sge = 1;
		if (!(qp = ibv_create_coll_qp(pd, &ia)))
			return errno;
		ibv_coll_port_attr pa{};
		if (int err = ibv_query_coll_port(ctx, 1, &pa))
			return err;
		if (int err = ibv_query_coll_gid(ctx, 1, test_gid_index(), &me.gid))
			return err;
		me.udp_port = pa.udp_port;
		me.num_ranks = 1;
		me.qp_num = qp->qp_num;
		return 0;
	}
	int up(const ibv_coll_member *members, uint32_t n, uint32_t index)
	{
		ibv_coll_job_attr j{};
		j.jid = 9;
		j.node_index = index;
		j.num_nodes = n;
		j.members = members;
		j.seg_count = 16;
		j.job_key = 0x5eed;
		j.timeout_ms = 60000; // the daemon dies long before
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		if (int err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))
			return err;
		a = ibv_coll_qp_attr{};
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.job = &j;
		if (int err = ibv_modify_coll_qp(
			    qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU))
			return err;
		a = ibv_coll_qp_attr{};
		a.qp_state = IBV_QPS_RTS;
		return ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE);
	}
	int post(ibv_coll_wr_opcode op, uint64_t wr_id, uint32_t mid)
	{
		ibv_sge s{uintptr_t(buf.data()), uint32_t(buf.size() * 4), mr->lkey};
		ibv_coll_send_wr w{}, *bad = nullptr;
		w.wr_id = wr_id;
		w.opcode = op;
		w.send_flags = IBV_COLL_SEND_SIGNALED;
		w.wr.coll.mid = mid;
		if (op == IBV_COLL_WR_ALLREDUCE) {
			w.sg_list = &s;
			w.num_sge = 1;
			w.wr.coll.dst_list = &s;
			w.wr.coll.count = buf.size();
			w.wr.coll.op = IBV_COLL_OP_SUM;
			w.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
		}
		return ibv_post_coll_send(qp, &w, &bad);
	}
	~CollNode()
	{
		EXPECT_EQ(qp ? ibv_destroy_coll_qp(qp) : 0, 0);
		EXPECT_EQ(mr ? ibv_dereg_coll_mr(mr) : 0, 0);
		EXPECT_EQ(cq ? ibv_destroy_coll_cq(cq) : 0, 0);
		EXPECT_EQ(ch ? ibv_destroy_coll_comp_channel(ch) : 0, 0);
		EXPECT_EQ(pd ? ibv_dealloc_coll_pd(pd) : 0, 0);
		EXPECT_EQ(ctx ? ibv_close_coll_device(ctx) : 0, 0);
	}
};

// Every completion a CQ holds now: wr_id -> completion.
std::map<uint64_t, ibv_coll_wc> drain(ibv_coll_cq *cq)
{
	std::map<uint64_t, ibv_coll_wc> got;
	ibv_coll_wc wc[16];
	int n;
	while ((n = ibv_poll_coll_cq(cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			EXPECT_TRUE(got.emplace(wc[i].wr_id, wc[i]).second)
				<< "wr_id " << wc[i].wr_id << " completed twice";
	EXPECT_EQ(n, 0);
	return got;
}

// Milliseconds until fd polls readable, or -1 past timeout_ms.
double ms_until_readable(int fd, std::chrono::steady_clock::time_point since, int timeout_ms)
{
	pollfd p{fd, POLLIN, 0};
	if (poll(&p, 1, timeout_ms) != 1 || !(p.revents & POLLIN))
		return -1;
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
		.count();
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

// The context says which NIC it reached: the host's shared device with
// IBV_COLL_CRXE_SHARED=1, the in-process one without; the MPI library and
// ibv_coll_perf group a host's processes by this flag, reading no variable.
TEST_F(Devd, CapsSayTheDeviceIsTheSharedOne)
{
	start_daemon();
	RcEndpoint a;
	ASSERT_EQ(a.open(RcOptions{}), 0);
	ibv_coll_caps caps;
	memset(&caps, 0xa5, sizeof(caps)); // whatever a caller's stack held
	ASSERT_EQ(ibv_query_coll_caps(a.ctx, &caps), 0);
	EXPECT_EQ(caps.comp_mask, uint64_t(IBV_COLL_CAPS_FLAGS));
	EXPECT_EQ(caps.flags, uint32_t(IBV_COLL_CAPS_SHARED_DEVICE));

	unsetenv("IBV_COLL_CRXE_SHARED");
	RcEndpoint own;
	ASSERT_EQ(own.open(RcOptions{}), 0);
	memset(&caps, 0xa5, sizeof(caps));
	ASSERT_EQ(ibv_query_coll_caps(own.ctx, &caps), 0);
	EXPECT_EQ(caps.comp_mask, uint64_t(IBV_COLL_CAPS_FLAGS));
	EXPECT_EQ(caps.flags, 0u);
}

// A value that is not a boolean fails the open with EINVAL, and the device
// list has no crxe device, as ibv_open_coll_device(3) and ibv_coll(7)
// document for every IBV_COLL_CRXE_* variable; it used to open the
// in-process NIC, so that processes meant to share one device each ran
// their own without a word to the program.
TEST_F(Devd, MisspeltSharedValueFailsTheOpen)
{
	int n = 0;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	ibv_coll_device *dev = nullptr;
	for (int i = 0; l && i < n; i++)
		if (test_device_name() == ibv_get_coll_device_name(l[i]))
			dev = l[i];
	ASSERT_TRUE(dev) << test_device_name() << " not found";
	for (const char *bad : {"maybe", "2", "", "yes please"}) {
		setenv("IBV_COLL_CRXE_SHARED", bad, 1);
		errno = 0;
		ibv_coll_context *ctx = ibv_open_coll_device(dev);
		int err = errno;
		EXPECT_EQ(ctx, nullptr) << '"' << bad << '"';
		EXPECT_EQ(err, EINVAL) << '"' << bad << '"';
		if (ctx)
			ibv_close_coll_device(ctx);
		int m = 0;
		ibv_coll_device **bad_list = ibv_get_coll_device_list(&m);
		for (int i = 0; bad_list && i < m; i++)
			EXPECT_NE(strncmp(ibv_get_coll_device_name(bad_list[i]), "crxe_", 5), 0)
				<< ibv_get_coll_device_name(bad_list[i]) << " listed with \"" << bad
				<< '"';
		ibv_free_coll_device_list(bad_list);
	}
	ibv_free_coll_device_list(l);
	EXPECT_FALSE(daemon_up()) << "a bad value started a daemon";
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

// This process's children (from /proc: pid and state), threads left out.
std::map<pid_t, char> children()
{
	std::map<pid_t, char> out;
	DIR *d = opendir("/proc");
	if (!d)
		return out;
	while (dirent *e = readdir(d)) {
		pid_t pid = atoi(e->d_name);
		if (pid <= 0)
			continue;
		std::string st = slurp("/proc/" + std::to_string(pid) + "/stat");
		size_t paren = st.rfind(')');
		if (paren == std::string::npos)
			continue;
		char state = 0;
		int ppid = 0;
		if (sscanf(st.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 &&
		    ppid == getpid())
			out[pid] = state;
	}
	closedir(d);
	return out;
}

// The application as PID 1 of a container is, or a subreaper: whatever
// its children leave running is reparented to it, and what it adopts and
// does not wait for stays a zombie.  So that the test sees what a start
// leaves behind (init elsewhere reaps it unseen), it makes itself one.
class DevdSpawn : public Devd {
protected:
	void SetUp() override
	{
		Devd::SetUp();
		ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	}
	void TearDown() override
	{
		Devd::TearDown();
		prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	}
};

// A daemon started while another serves loses the race (status 3): its
// starter reaps it, and nothing is left to the application, which then
// reaps what it expects only.  A daemon that cannot run, or fails, the
// same, with what went wrong.
TEST_F(DevdSpawn, AStartThatDoesNotServeLeavesNoProcess)
{
	start_daemon();
	// One of the application's own children, exited: still its to reap.
	pid_t mine = fork();
	ASSERT_GE(mine, 0);
	if (mine == 0)
		_exit(7);
	devd::SpawnResult r;
	ASSERT_EQ(devd::spawn_daemon("lo", DEVD_PATH, &r), 0);
	EXPECT_EQ(r.exec_err, 0);
	EXPECT_EQ(r.status, 3) << "it did not lose the race to the daemon that serves";
	devd::SpawnResult bad;
	ASSERT_EQ(devd::spawn_daemon("lo", "/nonexistent/ibv_coll_devd", &bad), 0);
	EXPECT_EQ(bad.exec_err, ENOENT);
	devd::SpawnResult fails;
	ASSERT_EQ(devd::spawn_daemon("lo", "/bin/false", &fails), 0);
	EXPECT_EQ(fails.exec_err, 0);
	EXPECT_EQ(fails.status, 1);
	// Left: the serving daemon, and this test's own child, unreaped.
	std::map<pid_t, char> left = children();
	left.erase(pid_);
	ASSERT_EQ(left.size(), 1u) << "a start left a process to the application";
	EXPECT_EQ(left.begin()->first, mine);
	int st = 0;
	ASSERT_EQ(waitpid(mine, &st, 0), mine);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 7);
}

// Several first opens at once each start a daemon: one serves them all
// (they hold their devices open until all have opened), the others lose
// the race to it.  Only the one that served may be left, and it is reaped
// by whoever adopted it when it leaves (here the test, after the last
// client has gone): no start leaves a zombie.
TEST_F(DevdSpawn, RacingFirstOpensLeaveOnlyTheDaemonThatServes)
{
	setenv("IBV_COLL_CRXE_DEVD", DEVD_PATH, 1);
	constexpr int kOpeners = 4;
	std::vector<pid_t> openers;
	int go[2], opened[2], hold[2];
	ASSERT_EQ(pipe(go), 0);
	ASSERT_EQ(pipe(opened), 0);
	ASSERT_EQ(pipe(hold), 0);
	for (int i = 0; i < kOpeners; i++) {
		pid_t p = fork();
		ASSERT_GE(p, 0);
		if (p == 0) {
			char c;
			close(go[1]);
			close(opened[0]);
			close(hold[1]);
			if (read(go[0], &c, 1) < 0) // all at once
				_exit(2);
			RcEndpoint ep;
			int ok = ep.open(RcOptions{}) == 0;
			if (write(opened[1], "x", 1) != 1 || read(hold[0], &c, 1) < 0)
				_exit(2);
			_exit(ok ? 0 : 1);
		}
		openers.push_back(p);
	}
	close(go[0]);
	close(opened[1]);
	close(hold[0]);
	close(go[1]); // EOF: go
	char c;
	for (int i = 0; i < kOpeners; i++)
		ASSERT_EQ(read(opened[0], &c, 1), 1);
	close(opened[0]);
	close(hold[1]); // EOF: close and leave
	for (pid_t p : openers) {
		int st = 0;
		ASSERT_EQ(waitpid(p, &st, 0), p);
		EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "an open failed";
	}
	// Every opener has gone, so the daemon leaves (--exit-idle); what
	// the starts left to this process is its now, reaped here.
	EXPECT_TRUE(wait_for(false, 5000)) << "the daemon stayed after its last client";
	int adopted = 0;
	for (int i = 0; i < 100; i++) {
		std::map<pid_t, char> now = children();
		for (auto &[pid, state] : now) {
			std::string comm = slurp("/proc/" + std::to_string(pid) + "/comm");
			if (comm.rfind("ibv_coll_devd", 0) == 0 && state == 'Z' &&
			    waitpid(pid, nullptr, WNOHANG) == pid)
				adopted++;
		}
		if (now.empty())
			break;
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	EXPECT_EQ(adopted, 1) << "daemons left to the application: one served, the others "
				 "lost the race and their starters should have reaped them";
	EXPECT_TRUE(children().empty());
}

// The last job's daemon leaving (--exit-idle) as the next job's first
// process opens: it takes the connection, then closes it.  The open looks
// again, finds none, and starts one; it failed with EIO ("lost the device
// daemon") before.
TEST_F(Devd, AnOpenMeetingALeavingDaemonStartsAnother)
{
	setenv("IBV_COLL_CRXE_DEVD", DEVD_PATH, 1);
	util::UniqueFd lfd;
	ASSERT_EQ(devd::listen_dev("crxe_lo", &lfd), 0);
	std::thread leaving([&lfd] {
		pollfd p{lfd.get(), POLLIN, 0};
		if (poll(&p, 1, 5000) != 1)
			return;
		util::UniqueFd c;
		devd::accept_client(lfd.get(), &c);
		lfd.reset(); // gone: the next connect is refused
	});
	RcEndpoint ep;
	int err = ep.open(RcOptions{});
	leaving.join();
	ASSERT_EQ(err, 0) << strerror(err);
	ASSERT_EQ(ep.connect(ep.info()), 0);
	pattern(ep.buf, 1000, 6);
	ibv_coll_wc wc{};
	ASSERT_EQ(ep.post_send(IBV_COLL_WR_RDMA_WRITE, 0, 1000, uintptr_t(ep.buf + 8192),
			       ep.mr->rkey, 1),
		  0);
	ASSERT_EQ(ep.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_TRUE(has_pattern(ep.buf + 8192, 1000, 6));
}

// A daemon started for a client (--exit-idle) that never comes leaves
// after 10 s rather than serve nobody for good.
TEST_F(Devd, AnIdleStartedDaemonWithoutClientsLeaves)
{
	pid_t d = fork();
	ASSERT_GE(d, 0);
	if (d == 0) {
		execl(DEVD_PATH, DEVD_PATH, "--exit-idle", "lo", (char *)nullptr);
		_exit(127);
	}
	// Up: its socket listed by the kernel (a connection would be a client,
	// whose leaving makes it leave at once).
	bool up = false;
	for (int i = 0; i < 500 && !up; i++) {
		up = slurp("/proc/net/unix").find("@ibv_coll_devd/crxe_lo") != std::string::npos;
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	ASSERT_TRUE(up) << "it did not come up";
	int st = 0;
	pid_t got = 0;
	for (int i = 0; i < 150 && got == 0; i++) {
		got = waitpid(d, &st, WNOHANG);
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
	}
	if (got == 0) {
		kill(d, SIGKILL);
		waitpid(d, &st, 0);
	}
	EXPECT_EQ(got, d) << "it still runs after 15 s without a client";
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

// The daemon killed under a client: the posted receive completes with
// IBV_WC_WR_FLUSH_ERR instead of waiting forever, posts and commands fail
// with EIO, and the objects can still be destroyed.
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
	EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(wc.qp_num, ep.qp->qp_num);
	EXPECT_EQ(ibv_poll_coll_cq(ep.cq, 1, &wc), 0) << "one receive, one completion";
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

// The daemon dying (SIGKILL, or SIGTERM below) while a client has RC work
// in flight and a collective running: every context gets one IBV_EVENT_DEVICE_FATAL on
// its async fd, within a bound; every WR posted and not completed
// completes once with IBV_WC_WR_FLUSH_ERR (unsignaled ones too), and a
// QUERY the device answered does not complete again; a thread asleep on an
// armed CQ's channel wakes; posts fail with EIO and nothing hangs.
void Devd::kill_mid_work(int sig)
{
	start_daemon();
	RcEndpoint a, b;
	connect_pair(a, b);
	CollNode n0, n1;
	ASSERT_EQ(n0.open(), 0);
	ASSERT_EQ(n1.open(), 0);
	const ibv_coll_member members[2] = {n0.me, n1.me};
	ASSERT_EQ(n0.up(members, 2, 0), 0);
	ASSERT_EQ(n1.up(members, 2, 1), 0);

	// RC: b posts no receive, so a's SEND waits on RNR NAKs (rnr_retry 7:
	// for ever) and the WRs behind it wait too; a's receives wait for a
	// sender that never comes.
	ASSERT_EQ(a.post_recv(0, 64, 10), 0);
	ASSERT_EQ(a.post_recv(64, 64, 11), 0);
	ASSERT_EQ(a.post_send(IBV_COLL_WR_SEND, 4096, 64, 0, 0, 1), 0);
	ASSERT_EQ(a.post_send(IBV_COLL_WR_SEND, 4096, 64, 0, 0, 2, 0, false), 0);
	ASSERT_EQ(a.post_send(IBV_COLL_WR_RDMA_WRITE, 4096, 64, uintptr_t(b.buf), b.mr->rkey, 3),
		  0);
	// A collective of two members whose other member never posts runs
	// until the job's timeout; the QUERY behind it is answered at once,
	// the barrier behind that waits its turn.
	ASSERT_EQ(n0.post(IBV_COLL_WR_ALLREDUCE, 100, 1), 0);
	ASSERT_EQ(n0.post(IBV_COLL_WR_QUERY, 101, 1), 0);
	ASSERT_EQ(n0.post(IBV_COLL_WR_BARRIER, 102, 2), 0);
	ibv_coll_wc wc{};
	auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	int got = 0;
	while (got == 0 && std::chrono::steady_clock::now() < until)
		got = ibv_poll_coll_cq(n0.cq, 1, &wc);
	ASSERT_EQ(got, 1) << "the QUERY was not answered";
	ASSERT_EQ(wc.wr_id, 101u);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(wc.msg_state, IBV_COLL_MSG_ACTIVE);
	std::this_thread::sleep_for(std::chrono::milliseconds(50)); // RNR NAKs, blocks
	EXPECT_EQ(ibv_poll_coll_cq(a.cq, 1, &wc), 0) << "nothing completes while the peer waits";
	EXPECT_EQ(ibv_poll_coll_cq(n0.cq, 1, &wc), 0);

	// A thread asleep on n0's channel.
	ASSERT_EQ(ibv_req_notify_coll_cq(n0.cq, 0), 0);
	auto sleeper = std::async(std::launch::async, [&] {
		ibv_coll_cq *cq = nullptr;
		void *cq_ctx = nullptr;
		int err = ibv_get_coll_cq_event(n0.ch, &cq, &cq_ctx);
		return err ? nullptr : cq;
	});

	const auto t0 = std::chrono::steady_clock::now();
	kill(pid_, sig);
	int st;
	waitpid(pid_, &st, 0);
	pid_ = -1;

	// One DEVICE_FATAL per context, soon.
	for (ibv_coll_context *ctx : {a.ctx, b.ctx, n0.ctx, n1.ctx}) {
		double ms = ms_until_readable(ctx->async_fd, t0, 5000);
		ASSERT_GE(ms, 0) << "no async event 5 s after the daemon died";
		EXPECT_LT(ms, 1000);
		printf("async event after %.2f ms\n", ms);
		ibv_coll_async_event ev{};
		ASSERT_EQ(ibv_get_coll_async_event(ctx, &ev), 0);
		EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
		ibv_ack_coll_async_event(&ev);
		ASSERT_EQ(fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
		EXPECT_EQ(ibv_get_coll_async_event(ctx, &ev), EAGAIN) << "one event only";
	}
	ASSERT_EQ(sleeper.wait_for(std::chrono::seconds(5)), std::future_status::ready)
		<< "the channel's sleeper was not woken";
	EXPECT_EQ(sleeper.get(), n0.cq);
	ibv_ack_coll_cq_events(n0.cq, 1);

	// The flush completions are in place before the event: a's five WRs
	// (the unsignaled SEND too), each once, flushed.
	auto ra = drain(a.cq);
	ASSERT_EQ(ra.size(), 5u);
	for (uint64_t id : {1, 2, 3, 10, 11}) {
		ASSERT_EQ(ra.count(id), 1u) << id;
		const ibv_coll_wc &w = ra[id];
		EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR) << id;
		EXPECT_EQ(w.qp_num, a.qp->qp_num);
	}
	EXPECT_EQ(ra[1].opcode, IBV_COLL_WC_SEND);
	EXPECT_EQ(ra[3].opcode, IBV_COLL_WC_RDMA_WRITE);
	EXPECT_TRUE(ra[10].opcode & IBV_COLL_WC_RECV);
	EXPECT_TRUE(drain(b.cq).empty());
	// The collective and the barrier, flushed; the QUERY not again.
	auto rn = drain(n0.cq);
	ASSERT_EQ(rn.size(), 2u);
	ASSERT_EQ(rn.count(100), 1u);
	ASSERT_EQ(rn.count(102), 1u);
	EXPECT_EQ(rn[100].status, IBV_WC_WR_FLUSH_ERR);
	EXPECT_EQ(rn[100].opcode, IBV_COLL_WC_ALLREDUCE);
	EXPECT_EQ(rn[100].coll_status, IBV_COLL_STATUS_FLUSHED);
	EXPECT_EQ(rn[100].jid, 9u);
	EXPECT_EQ(rn[100].mid, 1u);
	EXPECT_EQ(rn[102].status, IBV_WC_WR_FLUSH_ERR);
	EXPECT_EQ(rn[102].opcode, IBV_COLL_WC_BARRIER);
	EXPECT_EQ(rn[102].mid, 2u);
	EXPECT_EQ(rn[100].qp_num, n0.qp->qp_num);
	EXPECT_TRUE(drain(n1.cq).empty());

	// Posts fail; arming answers at once (nobody sleeps for ever).
	EXPECT_EQ(a.post_send(IBV_COLL_WR_SEND, 0, 64, 0, 0, 20), EIO);
	EXPECT_EQ(a.post_recv(0, 64, 21), EIO);
	EXPECT_EQ(n0.post(IBV_COLL_WR_BARRIER, 22, 3), EIO);
	ASSERT_EQ(ibv_req_notify_coll_cq(n0.cq, 0), 0);
	auto late = std::async(std::launch::async, [&] {
		ibv_coll_cq *cq = nullptr;
		void *cq_ctx = nullptr;
		return ibv_get_coll_cq_event(n0.ch, &cq, &cq_ctx) ? nullptr : cq;
	});
	ASSERT_EQ(late.wait_for(std::chrono::seconds(5)), std::future_status::ready)
		<< "arming a dead device's CQ left the sleeper asleep";
	EXPECT_EQ(late.get(), n0.cq);
	ibv_ack_coll_cq_events(n0.cq, 1);
	EXPECT_TRUE(drain(n0.cq).empty());
	ibv_coll_qp_attr qa{};
	ibv_coll_qp_init_attr ia{};
	EXPECT_EQ(ibv_query_coll_qp(n0.qp, &qa, IBV_COLL_QP_STATE, &ia), EIO);
	// The destructors check that every object is destroyed.
}

TEST_F(Devd, DaemonKilledMidWorkFlushesEveryWrAndIsAFatalAsyncEvent)
{
	kill_mid_work(SIGKILL);
}

// Stopped (SIGTERM), the daemon destroys its clients' objects on its way
// out: the result must be the same, every WR completed once.
TEST_F(Devd, DaemonStoppedMidWorkFlushesEveryWrAndIsAFatalAsyncEvent)
{
	kill_mid_work(SIGTERM);
}

// A process that exits, contexts open, while the daemon dies: the
// client's event thread is stopped before the logger it writes to is
// destroyed, and the process exits 0.  Without that, under ASan, the
// thread's "lost the device daemon" hit the logger freed by
// __cxa_finalize (heap-use-after-free) in about one round of ten; when
// the report beat _exit the child died of SIGABRT.
TEST_F(Devd, ExitWhileTheDaemonDiesIsClean)
{
	constexpr int kRounds = 20;
	start_daemon();
	for (int round = 0; round < kRounds; round++) {
		pid_t child = fork();
		ASSERT_GE(child, 0);
		if (child == 0) {
			static pid_t daemon;
			daemon = pid_;
			static RcEndpoint *ep = new RcEndpoint; // never closed
			if (ep->open(RcOptions{}) || ep->connect(ep->info()) ||
			    ep->post_recv(0, 64, 1))
				_exit(3);
			// Runs first at exit, before the library's static
			// objects go: the event thread notices the death
			// while exit proceeds.
			atexit([] { kill(daemon, SIGKILL); });
			exit(0);
		}
		int st = 0;
		ASSERT_EQ(waitpid(child, &st, 0), child);
		EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
			<< "round " << round << ": status " << st;
		waitpid(pid_, &st, 0);
		pid_ = -1;
		if (round < kRounds - 1)
			start_daemon();
	}
}

// A context of the in-process device has an async fd too: it polls quiet
// (nothing of that device can die apart from the process), a non-blocking
// read says EAGAIN, and bad arguments are refused.
TEST(AsyncEvent, InProcessDeviceFdIsThereAndQuiet)
{
	unsetenv("IBV_COLL_CRXE_SHARED");
	ibv_coll_context *ctx = open_test_device();
	ASSERT_TRUE(ctx);
	ASSERT_GE(ctx->async_fd, 0);
	EXPECT_EQ(ms_until_readable(ctx->async_fd, std::chrono::steady_clock::now(), 100), -1);
	ASSERT_EQ(fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
	ibv_coll_async_event ev{};
	EXPECT_EQ(ibv_get_coll_async_event(ctx, &ev), EAGAIN);
	EXPECT_EQ(ibv_get_coll_async_event(ctx, nullptr), EINVAL);
	EXPECT_EQ(ibv_get_coll_async_event(nullptr, &ev), EINVAL);
	ibv_ack_coll_async_event(nullptr);
	// Posting still works: the context is not taken for dead.
	ibv_coll_pd *pd = ibv_alloc_coll_pd(ctx);
	ASSERT_TRUE(pd);
	EXPECT_EQ(ibv_dealloc_coll_pd(pd), 0);
	EXPECT_EQ(ibv_close_coll_device(ctx), 0);
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
	j.sw.leaf.mut()[1].port = 9999;
	j.sw.spine.resize(1);
	j.sw.spine.mut()[0].port = 8888;
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
	EXPECT_EQ(o.sw.member_leaf, (std::vector<uint16_t>{0, 1, 1}));
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
	// The shape is checked as the provider and the engine check it.
	j.node = 2;
	j.members.mut()[1].ranks = 0;
	devd::pack_job(j, &b);
	EXPECT_EQ(devd::unpack_job(b.data(), b.size(), &o), EINVAL);
	j.members.mut()[1].ranks = 2;
	j.sw.member_leaf = {0, 1, 2}; // a leaf the job does not have
	devd::pack_job(j, &b);
	EXPECT_EQ(devd::unpack_job(b.data(), b.size(), &o), EINVAL);
}
