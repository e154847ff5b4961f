// Allocation failure at every site: this binary replaces the global
// operator new, and while a countdown is armed the k-th allocation (of any
// thread) throws std::bad_alloc (the nothrow forms return null).  A
// scenario through the public API (open the device, PD, CQ, MRs, a
// collective QP, the job, one allreduce, its completion, everything torn
// down) runs for k = 1, 2, ... until a run passes without reaching k.
//
// What must hold for every k:
//  * a call that fails says so (NULL/errno ENOMEM or EAGAIN, or an error
//    CQE) and changes nothing: the same call made again without the
//    failure succeeds and the scenario completes with the right result;
//  * a failure in the device's own threads (the engine) fails the
//    collective or the device (an error CQE, IBV_EVENT_DEVICE_FATAL)
//    within a bound, never the process, and teardown still works;
//  * nothing hangs: every wait is bounded.
// One node of two local ranks (the NIC's local path), a two-node ring (two
// devices in this process, over the loopback) and the same two nodes
// through an ibv_coll_switchd (IBV_COLL_TEST_SWITCHD names the program)
// started by the test.
#include "coll_qp.h"
#include "switchd_proc.h"

#include <ibv_coll/ibv_coll.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

// The replaced operators below pair operator new with malloc and operator
// delete with free, by design; GCC, seeing both inlined, would call it a
// mismatch.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

// <0: off.  Otherwise decremented by every allocation; the one that takes
// it from 0 fails.
std::atomic<long> g_countdown{-1};
std::atomic<long> g_fired{0};
std::atomic<bool> g_fired_elsewhere{false}; // in a thread other than the test's
std::thread::id g_test_thread;
// The test's own allocations (its vectors, strings, gtest) do not count:
// in the test's thread only those inside a library call do.
thread_local bool t_in_call = false;
std::atomic<bool> g_only_device{false}; // count the device's threads' allocations only
thread_local const char *t_call = nullptr;
std::atomic<const char *> g_fired_in{nullptr}; // the call it fired in, in the test's thread

bool inject()
{
	if (g_countdown.load(std::memory_order_relaxed) < 0)
		return false;
	if ((!t_in_call || g_only_device) && std::this_thread::get_id() == g_test_thread)
		return false;
	if (g_countdown.fetch_sub(1, std::memory_order_relaxed) != 0)
		return false;
	g_fired++;
	if (std::this_thread::get_id() != g_test_thread)
		g_fired_elsewhere = true;
	else
		g_fired_in = t_call;
	return true;
}

void *alloc(size_t n, size_t align)
{
	if (inject())
		return nullptr;
	if (n == 0)
		n = 1;
	if (align <= alignof(std::max_align_t))
		return std::malloc(n);
	return std::aligned_alloc(align, (n + align - 1) / align * align);
}

} // namespace

void *operator new(size_t n)
{
	if (void *p = alloc(n, 0))
		return p;
	throw std::bad_alloc();
}
void *operator new[](size_t n)
{
	return operator new(n);
}
void *operator new(size_t n, std::align_val_t a)
{
	if (void *p = alloc(n, size_t(a)))
		return p;
	throw std::bad_alloc();
}
void *operator new[](size_t n, std::align_val_t a)
{
	return operator new(n, a);
}
void *operator new(size_t n, const std::nothrow_t &) noexcept
{
	return alloc(n, 0);
}
void *operator new[](size_t n, const std::nothrow_t &) noexcept
{
	return alloc(n, 0);
}
void *operator new(size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc(n, size_t(a));
}
void *operator new[](size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc(n, size_t(a));
}
void operator delete(void *p) noexcept
{
	std::free(p);
}
void operator delete[](void *p) noexcept
{
	std::free(p);
}
void operator delete(void *p, size_t) noexcept
{
	std::free(p);
}
void operator delete[](void *p, size_t) noexcept
{
	std::free(p);
}
void operator delete(void *p, std::align_val_t) noexcept
{
	std::free(p);
}
void operator delete[](void *p, std::align_val_t) noexcept
{
	std::free(p);
}
void operator delete(void *p, size_t, std::align_val_t) noexcept
{
	std::free(p);
}
void operator delete[](void *p, size_t, std::align_val_t) noexcept
{
	std::free(p);
}

using namespace ibvc_test;

namespace {

struct Run {
	std::string failed_call; // the API call that reported the failure, if one did
	int err = 0;
	bool device_failed = false; // the failure hit the device's own work (EIO after)
	std::string problem;	    // what went wrong, if anything did
};

bool is_teardown(const char *what)
{
	for (const char *p : {"ibv_destroy", "ibv_dereg", "ibv_dealloc", "ibv_close"})
		if (strncmp(what, p, strlen(p)) == 0)
			return true;
	return false;
}

// A call that may fail under injection: on failure its errno must be
// ENOMEM or EAGAIN; then the countdown is disarmed and the call made
// again, which must succeed (the failure changed nothing).
// A library call, counted.
template <class F> auto in_call(const char *what, F call) -> decltype(call())
{
	t_in_call = true;
	t_call = what;
	auto v = call();
	t_in_call = false;
	return v;
}

template <class F> auto retry(Run &r, const char *what, F call) -> decltype(call())
{
	if (r.device_failed && !is_teardown(what)) { // it would say EIO: go on to teardown
		errno = EIO;
		if constexpr (std::is_pointer_v<decltype(call())>)
			return nullptr;
		else
			return EIO;
	}
	auto v = in_call(what, call);
	const bool bad = [&] {
		if constexpr (std::is_pointer_v<decltype(v)>)
			return v == nullptr;
		else
			return v != 0;
	}();
	if (!bad)
		return v;
	int e;
	if constexpr (std::is_pointer_v<decltype(v)>)
		e = errno;
	else
		e = int(v);
	// A failure in the device's own work (no call reported it) fails the
	// device: every call but teardown says EIO from then on.
	if (e == EIO && g_fired.load() && r.failed_call.empty() && !is_teardown(what)) {
		r.device_failed = true;
		return v;
	}
	g_countdown = -1;
	if (r.failed_call.empty()) {
		r.failed_call = what;
		r.err = e;
	}
	if (e != ENOMEM && e != EAGAIN && r.problem.empty())
		r.problem = std::string(what) + " failed with " + strerror(e) +
			    " (expected ENOMEM or EAGAIN)";
	v = in_call(what, call);
	if constexpr (std::is_pointer_v<decltype(v)>) {
		if (!v && r.problem.empty())
			r.problem = std::string(what) +
				    " failed again without the failure: " + strerror(errno);
	} else {
		if (v && r.problem.empty())
			r.problem = std::string(what) +
				    " failed again without the failure: " + strerror(int(v));
	}
	return v;
}

// One node's objects for the scenario.
struct Node {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	ibv_coll_mr *mr = nullptr;
	std::vector<int32_t> buf; // [src rank 0 | src rank 1 | dst 0 | dst 1]
	ibv_coll_member me{};
	bool posted = false;
};

constexpr uint32_t kCount = 3000; // elements per rank: several blocks
constexpr uint16_t kRanks = 2;

// The switch of the switch scenario: its UDP port on the loopback (0:
// the ring).
uint16_t g_switch_port = 0;

// The scenario on nodes.size() nodes of kRanks ranks each.
Run scenario(size_t nodes)
{
	Run r;
	std::vector<Node> ns(nodes);
	for (size_t i = 0; i < nodes; i++) {
		Node &n = ns[i];
		n.ctx = retry(r, "ibv_open_coll_device", open_test_device);
		if (!n.ctx) {
			r.problem = "no device";
			return r;
		}
		n.pd = retry(r, "ibv_alloc_coll_pd", [&] { return ibv_alloc_coll_pd(n.ctx); });
		n.cq = retry(r, "ibv_create_coll_cq",
			     [&] { return ibv_create_coll_cq(n.ctx, 16, nullptr, nullptr, 0); });
		n.buf.assign(size_t(kCount) * 2 * kRanks, 0);
		for (uint32_t e = 0; e < kCount * kRanks; e++)
			n.buf[e] = int32_t(e * 7 + i * 1000 + 3);
		n.mr = retry(r, "ibv_reg_coll_mr", [&] {
			return ibv_reg_coll_mr(n.pd, n.buf.data(), n.buf.size() * 4,
					       IBV_ACCESS_LOCAL_WRITE);
		});
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = n.cq;
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap.max_send_wr = 4;
		ia.cap.max_send_sge = kRanks;
		n.qp = retry(r, "ibv_create_coll_qp",
			     [&] { return ibv_create_coll_qp(n.pd, &ia); });
		ibv_coll_port_attr pa{};
		retry(r, "ibv_query_coll_port", [&] { return ibv_query_coll_port(n.ctx, 1, &pa); });
		retry(r, "ibv_query_coll_gid",
		      [&] { return ibv_query_coll_gid(n.ctx, 1, 0, &n.me.gid); });
		n.me.udp_port = pa.udp_port;
		n.me.num_ranks = kRanks;
		n.me.qp_num = n.qp ? n.qp->qp_num : 0;
	}
	if (!r.problem.empty())
		return r;
	std::vector<ibv_coll_member> members;
	for (Node &n : ns)
		members.push_back(n.me);
	for (size_t i = 0; i < nodes; i++) {
		Node &n = ns[i];
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		retry(r, "ibv_modify_coll_qp(INIT)", [&] {
			return ibv_modify_coll_qp(n.qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT);
		});
		ibv_coll_job_attr j{};
		j.jid = 9;
		j.node_index = uint16_t(i);
		j.num_nodes = uint16_t(nodes);
		j.members = members.data();
		j.seg_count = 16;
		j.job_key = 0xa110c;
		j.timeout_ms = 1500;
		j.topology = IBV_COLL_TOPO_RING;
		ibv_coll_switch_addr leaf{};
		ibv_coll_switch_attr sw{};
		if (g_switch_port) {
			leaf.gid.raw[10] = leaf.gid.raw[11] = 0xff; // ::ffff:127.0.0.1
			leaf.gid.raw[12] = 127;
			leaf.gid.raw[15] = 1;
			leaf.udp_port = g_switch_port;
			sw.num_planes = sw.num_leaves = 1;
			sw.leaves = &leaf;
			j.comp_mask = IBV_COLL_JOB_ATTR_SWITCH;
			j.sw = &sw;
			j.topology = IBV_COLL_TOPO_SWITCH;
		}
		ibv_coll_qp_attr b{};
		b.qp_state = IBV_QPS_RTR;
		b.path_mtu = IBV_MTU_1024;
		b.job = &j;
		retry(r, "ibv_modify_coll_qp(RTR)", [&] {
			return ibv_modify_coll_qp(n.qp, &b,
						  IBV_COLL_QP_STATE | IBV_COLL_QP_JOB |
							  IBV_COLL_QP_PATH_MTU);
		});
		ibv_coll_qp_attr c{};
		c.qp_state = IBV_QPS_RTS;
		retry(r, "ibv_modify_coll_qp(RTS)",
		      [&] { return ibv_modify_coll_qp(n.qp, &c, IBV_COLL_QP_STATE); });
	}
	for (Node &n : ns) {
		if (!n.qp || !n.mr)
			continue; // the device failed before they were made
		ibv_sge src[kRanks], dst[kRanks];
		for (uint32_t k = 0; k < kRanks; k++) {
			src[k] = {reinterpret_cast<uint64_t>(&n.buf[size_t(k) * kCount]),
				  kCount * 4, n.mr->lkey};
			dst[k] = {reinterpret_cast<uint64_t>(&n.buf[size_t(kRanks + k) * kCount]),
				  kCount * 4, n.mr->lkey};
		}
		ibv_coll_send_wr w{}, *bad = nullptr;
		w.wr_id = 77;
		w.opcode = IBV_COLL_WR_ALLREDUCE;
		w.send_flags = IBV_COLL_SEND_SIGNALED;
		w.sg_list = src;
		w.num_sge = kRanks;
		w.wr.coll.dst_list = dst;
		w.wr.coll.count = kCount;
		w.wr.coll.op = IBV_COLL_OP_SUM;
		w.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
		w.wr.coll.mid = 1;
		n.posted = retry(r, "ibv_post_coll_send",
				 [&] { return ibv_post_coll_send(n.qp, &w, &bad); }) == 0;
	}
	// Completions, bounded: the job's timeout is 1.5 s.
	bool all_ok = true;
	for (size_t i = 0; i < nodes; i++) {
		ibv_coll_wc wc{};
		int got = 0;
		if (!ns[i].posted) { // the device failed first (EIO): nothing to wait for
			all_ok = false;
			continue;
		}
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(6);
		while (got == 0 && std::chrono::steady_clock::now() < end) {
			got = in_call("ibv_poll_coll_cq",
				      [&] { return ibv_poll_coll_cq(ns[i].cq, 1, &wc); });
			if (got == 0)
				std::this_thread::sleep_for(std::chrono::microseconds(200));
		}
		if (got < 0 && r.problem.empty())
			r.problem = "ibv_poll_coll_cq: " + std::string(strerror(-got));
		if (got == 0 && r.problem.empty())
			r.problem = "node " + std::to_string(i) + ": no completion within 6 s";
		if (got == 1 && wc.status != IBV_WC_SUCCESS)
			all_ok = false;
		if (got == 1 && wc.status == IBV_WC_SUCCESS && g_switch_port &&
		    !(wc.wc_flags & IBV_COLL_WC_SWITCH) && r.problem.empty())
			r.problem = "the collective did not run through the switch";
	}
	// A failure a call reported must not fail the collective.  One in the
	// device's work (its threads, or the engine pass a post or poll runs
	// in the caller's thread, behind a call that succeeded) may, with an
	// error completion (above).
	const bool may_fail = g_fired.load() != 0 && r.failed_call.empty();
	if (!all_ok && !may_fail && r.problem.empty())
		r.problem = "the collective failed though every call that failed said so" +
			    std::string(r.failed_call.empty() ? "" : " (" + r.failed_call + ")");
	if (all_ok && r.problem.empty()) {
		for (Node &n : ns)
			for (uint32_t e = 0; e < kCount * kRanks; e++) {
				int64_t want = 0;
				const uint32_t at = e % kCount;
				for (size_t i = 0; i < nodes; i++)
					for (uint32_t k = 0; k < kRanks; k++)
						want += int64_t((k * kCount + at) * 7 + i * 1000 +
								3);
				if (n.buf[size_t(kRanks) * kCount + e] != int32_t(want)) {
					r.problem = "wrong result at element " + std::to_string(e);
					break;
				}
			}
	}
	for (Node &n : ns) {
		if (n.qp)
			retry(r, "ibv_destroy_coll_qp", [&] { return ibv_destroy_coll_qp(n.qp); });
		if (n.mr)
			retry(r, "ibv_dereg_coll_mr", [&] { return ibv_dereg_coll_mr(n.mr); });
		if (n.cq)
			retry(r, "ibv_destroy_coll_cq", [&] { return ibv_destroy_coll_cq(n.cq); });
		if (n.pd)
			retry(r, "ibv_dealloc_coll_pd", [&] { return ibv_dealloc_coll_pd(n.pd); });
		if (n.ctx)
			retry(r, "ibv_close_coll_device",
			      [&] { return ibv_close_coll_device(n.ctx); });
	}
	return r;
}

void sweep(size_t nodes)
{
	g_test_thread = std::this_thread::get_id();
	// The scenario once without failures: it must pass, and the
	// countdown's reach tells how many allocations it makes.
	g_countdown = -1;
	Run clean = scenario(nodes);
	ASSERT_EQ(clean.problem, "") << "without any failure";
	long k = 0, failed_calls = 0, elsewhere = 0;
	const long step = getenv("IBV_COLL_TEST_ALLOC_STEP")
				  ? atol(getenv("IBV_COLL_TEST_ALLOC_STEP"))
				  : 1;
	for (;; k += step > 0 ? step : 1) {
		g_fired = 0;
		g_fired_in = nullptr;
		g_fired_elsewhere = false;
		g_countdown = k;
		Run r = scenario(nodes);
		const bool fired = g_fired.load() != 0;
		g_countdown = -1;
		const char *in = g_fired_in.load();
		ASSERT_EQ(r.problem, "")
			<< "allocation " << k << " failed"
			<< (g_fired_elsewhere ? " (in a device thread)" : "")
			<< (in ? std::string(" in ") + in : "")
			<< (r.failed_call.empty() ? "" : "; reported by " + r.failed_call);
		if (!fired)
			break;
		failed_calls += !r.failed_call.empty();
		elsewhere += g_fired_elsewhere.load();
	}
	::testing::Test::RecordProperty("allocations", std::to_string(k));
	printf("%zu node(s): failed each of %ld allocations: %ld reported by a call, %ld in a "
	       "device thread\n",
	       nodes, k, failed_calls, elsewhere);
}

TEST(AllocFail, OneNodeEveryAllocation)
{
	sweep(1);
}

TEST(AllocFail, TwoNodeRingEveryAllocation)
{
	sweep(2);
}

// Only the allocations of the device's own threads (the engine's), which
// the sweeps above reach only when the engine thread happens to run: each
// one fails the device, and the rest of the scenario must see EIO,
// flushed or failed work, and a teardown that works.
TEST(AllocFail, TwoNodeRingDeviceThreads)
{
	g_only_device = true;
	sweep(2);
	g_only_device = false;
}

TEST(AllocFail, TwoNodeSwitchEveryAllocation)
{
	const char *prog = getenv("IBV_COLL_TEST_SWITCHD");
	if (!prog || !*prog)
		GTEST_SKIP() << "IBV_COLL_TEST_SWITCHD names no ibv_coll_switchd";
	ibvc_test::Switchd sw(prog);
	ASSERT_NE(sw.port(), 0) << "the switch did not start";
	g_switch_port = sw.port();
	sweep(2);
	g_switch_port = 0;
}

} // namespace
