// One member of a collective job under faults (tests/multihost/chaos.sh):
// seeded random collectives, every result checked against the independent
// reference (tests/common/coll_ref), and after each one the members agree
// out of band (ibvc_boot, a Unix socket: the faults hit the fabric, not
// it), as an MPI library's fault-tolerant layer would, on whether every
// member succeeded.  When one did not, all recover and run the same
// collective again:
//  - a failed completion (TIMEOUT, REMOTE_ABORT, ...): each member gives
//    its QP the job again (RESET .. RTS, a new incarnation), as
//    ibv_modify_coll_qp(3) tells applications to;
//  - a device that died (the host's ibv_coll_devd went: FLUSHED
//    completions, IBV_EVENT_DEVICE_FATAL, EIO): every member closes its
//    device and opens it again (the new daemon), new QPs under a new job
//    ID (new QPs count their incarnations from 1 again).
// Checked here: a completion, good or bad, comes within the job's timeout
// plus a margin (never a hang); a successful one is right, whatever
// happened to the others; every collective succeeds within a few
// attempts; descriptors are the same after the last recovery as before
// the first fault.  One line per attempt and a summary for chaos.sh.
#include "coll_ref.h"
#include "ibvc_boot.h"

#include <ibv_coll/ibv_coll.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <getopt.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace ibvc_test;
using Clock = std::chrono::steady_clock;

namespace {

struct Opts {
	std::string boot, dev = "crxe_eth0";
	std::string settled; // the last case waits for this file: the faults are over
	int node = 0, nodes = 0, topology = 0, timeout_ms = 3000, cases = 12, pause_ms = 100;
	int attempts = 8;
	uint32_t jid = 1;
	uint64_t seed = 1;
	std::vector<std::string> leaves, spines;
	std::vector<uint16_t> member_leaf;
};

[[noreturn]] void die(const Opts &o, const char *what, int err)
{
	fprintf(stderr, "chaos_node %d: %s: %s\n", o.node, what, strerror(err));
	exit(2);
}

std::vector<std::string> split(const std::string &s)
{
	std::vector<std::string> v;
	std::stringstream ss(s);
	for (std::string w; std::getline(ss, w, ',');)
		v.push_back(w);
	return v;
}

// "IPV4:PORT": a switch's address.
ibv_coll_switch_addr switch_addr(const Opts &o, const std::string &w)
{
	ibv_coll_switch_addr sa{};
	size_t colon = w.rfind(':');
	in_addr a4;
	if (colon == std::string::npos || inet_pton(AF_INET, w.substr(0, colon).c_str(), &a4) != 1)
		die(o, "switch address (IPV4:PORT)", EINVAL);
	sa.gid.raw[10] = sa.gid.raw[11] = 0xff;
	memcpy(sa.gid.raw + 12, &a4, 4);
	sa.udp_port = uint16_t(atoi(w.c_str() + colon + 1));
	return sa;
}

int count_fds()
{
	int n = 0;
	if (DIR *d = opendir("/proc/self/fd")) {
		while (readdir(d))
			n++;
		closedir(d);
	}
	return n - 3; // ., .. and the directory's own descriptor
}

long rss_kib()
{
	long kib = 0;
	if (FILE *f = fopen("/proc/self/status", "r")) {
		char line[256];
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "VmRSS: %ld", &kib) == 1)
				break;
		fclose(f);
	}
	return kib;
}

struct Case {
	int coll, op, dtype;
	uint64_t count;
	uint32_t root;
};


// The same list on every member: kinds, ops, types, counts and roots from
// the seed; mostly small, sometimes a few hundred blocks.
std::vector<Case> make_cases(const Opts &o, uint32_t K)
{
	static const int colls[] = {IBV_COLL_WR_ALLREDUCE,	IBV_COLL_WR_REDUCE,
				    IBV_COLL_WR_BCAST,		IBV_COLL_WR_ALLGATHER,
				    IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_WR_BARRIER};
	std::mt19937_64 g(o.seed);
	std::vector<Case> v;
	for (int i = 0; i < o.cases; i++) {
		int c = colls[g() % 6], d = int(g() % 12), op = int(g() % 8);
		if (!op_valid(op, d))
			op = IBV_COLL_OP_SUM;
		uint64_t count = g() % 4 ? 1 + g() % 3000 : 1 + g() % 100000;
		v.push_back({c, op, d, count, uint32_t(g() % K)});
	}
	return v;
}

// The member's device and its objects; opened again when the device dies.
struct Member {
	const Opts &o;
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	ibv_coll_mr *mr = nullptr;
	uint8_t *arena;
	size_t arena_len;
	std::vector<ibv_coll_member> members;
	ibv_coll_job_attr job{};
	std::vector<ibv_coll_switch_addr> leaf_addrs, spine_addrs;
	std::vector<uint8_t> member_leaf;
	ibv_coll_switch_attr swa{};

	Member(const Opts &opts, size_t len) : o(opts), arena_len(len)
	{
		arena = static_cast<uint8_t *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
						    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
		if (arena == MAP_FAILED)
			die(o, "mmap", errno);
		for (const std::string &w : o.leaves)
			leaf_addrs.push_back(switch_addr(o, w));
		for (const std::string &w : o.spines)
			spine_addrs.push_back(switch_addr(o, w));
		member_leaf.assign(o.member_leaf.begin(), o.member_leaf.end());
	}

	void close()
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
		ctx = nullptr, pd = nullptr, cq = nullptr, qp = nullptr, mr = nullptr;
	}

	// Device to a QP in INIT with the arena registered; 0 or an errno.
	int open()
	{
		int n = 0;
		ibv_coll_device **list = ibv_get_coll_device_list(&n);
		for (int i = 0; list && i < n && !ctx; i++)
			if (o.dev == ibv_get_coll_device_name(list[i]))
				ctx = ibv_open_coll_device(list[i]);
		const int err = errno ? errno : ENODEV;
		ibv_free_coll_device_list(list);
		if (!ctx)
			return err;
		pd = ibv_alloc_coll_pd(ctx);
		cq = pd ? ibv_create_coll_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
		mr = cq ? ibv_reg_coll_mr(pd, arena, arena_len, IBV_ACCESS_LOCAL_WRITE) : nullptr;
		if (mr) {
			ibv_coll_qp_init_attr ia{};
			ia.send_cq = ia.recv_cq = cq;
			ia.qp_type = IBV_COLL_QPT_COLL;
			ia.cap.max_send_wr = 4;
			ia.cap.max_send_sge = 1;
			qp = ibv_create_coll_qp(pd, &ia);
		}
		if (!qp) {
			const int e = errno ? errno : EIO;
			close();
			return e;
		}
		return 0;
	}

	// The device again, for as long as the host's daemon takes to return.
	void open_retrying()
	{
		int err = 0;
		for (int t = 0; t < 300; t++) {
			if (!(err = open()))
				return;
			usleep(50000);
		}
		die(o, "open the device again", err);
	}

	// RESET, INIT, then the job (RTR) and RTS.
	int install()
	{
		ibv_coll_qp_attr a{};
		a.qp_state = IBV_QPS_RESET;
		if (int err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE))
			return err;
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		if (int err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))
			return err;
		a = {};
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_4096;
		a.job = &job;
		if (int err = ibv_modify_coll_qp(
			    qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU))
			return err;
		a.qp_state = IBV_QPS_RTS;
		return ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE);
	}

	// Meet the others with this device's address and install job jid.
	void join(ibvc_boot *boot, uint32_t jid)
	{
		ibv_coll_member me{};
		ibv_coll_port_attr pa;
		if (int err = ibv_query_coll_port(ctx, 1, &pa))
			die(o, "query port", err);
		if (int err = ibv_query_coll_gid(ctx, 1, 0, &me.gid))
			die(o, "gid", err);
		me.udp_port = pa.udp_port;
		me.num_ranks = 1;
		me.qp_num = qp->qp_num;
		members.assign(size_t(o.nodes), {});
		if (int err = ibvc_boot_allgather(boot, &me, sizeof(me), members.data()))
			die(o, "exchange", err);
		job = {};
		job.jid = jid;
		job.node_index = uint32_t(o.node);
		job.num_nodes = uint32_t(o.nodes);
		job.members = members.data();
		job.topology = ibv_coll_topology(o.topology);
		job.seg_count = 64;
		job.job_key = 0xc4a05000 ^ o.seed;
		job.timeout_ms = uint32_t(o.timeout_ms);
		if (!leaf_addrs.empty()) {
			swa = {};
			swa.num_planes = 1;
			swa.num_leaves = uint32_t(leaf_addrs.size());
			swa.leaves = leaf_addrs.data();
			swa.spines = spine_addrs.empty() ? nullptr : spine_addrs.data();
			swa.member_leaf = member_leaf.empty() ? nullptr : member_leaf.data();
			job.comp_mask = IBV_COLL_JOB_ATTR_SWITCH;
			job.sw = &swa;
		}
		if (int err = install())
			die(o, "install the job", err);
		if (int err = ibvc_boot_barrier(boot))
			die(o, "barrier", err);
	}
};

// Read the context's async events, waiting up to wait_ms for the first;
// whether one was IBV_EVENT_DEVICE_FATAL.  (A failed collective also
// moves its QP to ERR with an event of its own: read and acknowledged.)
bool device_fatal(ibv_coll_context *ctx, int wait_ms)
{
	bool fatal = false;
	pollfd p{ctx->async_fd, POLLIN, 0};
	while (poll(&p, 1, wait_ms) > 0) {
		ibv_coll_async_event ev;
		if (ibv_get_coll_async_event(ctx, &ev))
			break;
		fatal |= ev.event_type == IBV_EVENT_DEVICE_FATAL;
		ibv_ack_coll_async_event(&ev);
		wait_ms = 0;
	}
	return fatal;
}

// What one attempt of a collective did here.
enum Outcome : int32_t { kOk = 0, kFailed = 1, kDeviceLost = 2 };

} // namespace

int main(int argc, char **argv)
{
	Opts o;
	static const option lo[] = {{"boot", 1, nullptr, 'b'},	   {"node", 1, nullptr, 'i'},
				    {"nodes", 1, nullptr, 'n'},	   {"seed", 1, nullptr, 'S'},
				    {"dev", 1, nullptr, 'd'},	   {"timeout-ms", 1, nullptr, 't'},
				    {"topology", 1, nullptr, 'T'}, {"leaves", 1, nullptr, 'L'},
				    {"spines", 1, nullptr, 'P'},   {"member-leaf", 1, nullptr, 'M'},
				    {"cases", 1, nullptr, 'c'},	   {"pause-ms", 1, nullptr, 'Z'},
				    {"jid", 1, nullptr, 'J'},	   {"attempts", 1, nullptr, 'a'},
				    {"settled", 1, nullptr, 'D'},  {nullptr, 0, nullptr, 0}};
	for (int c; (c = getopt_long(argc, argv, "", lo, nullptr)) != -1;) {
		switch (c) {
		case 'b': o.boot = optarg; break;
		case 'i': o.node = atoi(optarg); break;
		case 'n': o.nodes = atoi(optarg); break;
		case 'S': o.seed = strtoull(optarg, nullptr, 0); break;
		case 'd': o.dev = optarg; break;
		case 't': o.timeout_ms = atoi(optarg); break;
		case 'T': o.topology = atoi(optarg); break;
		case 'L': o.leaves = split(optarg); break;
		case 'P': o.spines = split(optarg); break;
		case 'M':
			for (const std::string &w : split(optarg))
				o.member_leaf.push_back(uint16_t(atoi(w.c_str())));
			break;
		case 'c': o.cases = atoi(optarg); break;
		case 'Z': o.pause_ms = atoi(optarg); break;
		case 'J': o.jid = uint32_t(strtoul(optarg, nullptr, 0)); break;
		case 'a': o.attempts = atoi(optarg); break;
		case 'D': o.settled = optarg; break;
		default: return 2;
		}
	}
	if (o.boot.empty() || o.nodes < 2 || o.node < 0 || o.node >= o.nodes || o.cases < 1) {
		fprintf(stderr,
			"usage: chaos_node --boot ADDR --node I --nodes N [--seed S] "
			"[--topology T --leaves IP:PORT,... --spines ... --member-leaf ...]\n");
		return 2;
	}

	CollSpec spec;
	spec.ranks.assign(size_t(o.nodes), 1);
	spec.leaf_of = o.member_leaf;
	const uint32_t K = spec.total_ranks(), me = uint32_t(o.node);
	std::vector<Case> cases = make_cases(o, K);
	// The last: once the faults are over (--settled) and the job is given
	// again everywhere, an allreduce that must run through the switch when
	// the job has one
	// (AUTO that fell back to the ring returns to it with a new
	// incarnation; a restarted switch serves it).
	cases.push_back({IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT32, 5000, 0});
	uint64_t src_max = 64, dst_max = 64;
	for (const Case &cs : cases) {
		CollSpec s = spec;
		s.coll = cs.coll, s.dtype = cs.dtype, s.count = cs.count;
		src_max = std::max(src_max, src_elems(s) * dtype_size(cs.dtype));
		dst_max = std::max(dst_max, dst_elems(s) * dtype_size(cs.dtype));
	}
	Member m(o, src_max + dst_max);
	uint8_t *src = m.arena, *dst = m.arena + src_max;

	ibvc_boot *boot;
	if (int err = ibvc_boot_open(o.boot.c_str(), o.node, o.nodes, 90000, &boot))
		die(o, "bootstrap", err);
	m.open_retrying();
	uint32_t jid = o.jid;
	m.join(boot, jid);

	int wrong = 0, failed = 0, recoveries = 0, reopens = 0, via_switch = 0, fd0 = -1;
	long rss0 = 0;
	double worst_fail_ms = 0, worst_ok_ms = 0;
	for (size_t ci = 0; ci < cases.size(); ci++) {
		const Case &cs = cases[ci];
		CollSpec s = spec;
		s.coll = cs.coll, s.op = cs.op, s.dtype = cs.dtype, s.count = cs.count;
		s.root = cs.root;
		const size_t es = dtype_size(s.dtype);
		const uint64_t se = src_elems(s), de = dst_elems(s);
		const bool last = ci + 1 == cases.size();
		if (last) {
			// The faults over (chaos.sh says so), every member gives
			// its QP the job again.
			for (int t = 0;
			     !o.settled.empty() && access(o.settled.c_str(), F_OK) && t < 600; t++)
				usleep(100000);
			if (int err = ibvc_boot_barrier(boot))
				die(o, "barrier", err);
			if (int err = m.install())
				die(o, "give the job again", err);
			if (int err = ibvc_boot_barrier(boot))
				die(o, "barrier", err);
		}
		for (int attempt = 1;; attempt++) {
			if (o.pause_ms)
				usleep(useconds_t(o.pause_ms) * 1000);
			fill_input(s, o.seed + ci, me, src, se, kInputNormal);
			memset(dst, 0xa5, de * es);
			ibv_sge ss{reinterpret_cast<uint64_t>(src), uint32_t(se * es), m.mr->lkey};
			ibv_sge ds{reinterpret_cast<uint64_t>(dst), uint32_t(de * es), m.mr->lkey};
			ibv_coll_send_wr wr{}, *bad;
			wr.wr_id = ci;
			wr.opcode = ibv_coll_wr_opcode(s.coll);
			wr.send_flags = IBV_COLL_SEND_SIGNALED;
			wr.sg_list = &ss;
			wr.num_sge = s.coll == IBV_COLL_WR_BARRIER ? 0 : 1;
			wr.wr.coll.dst_list = &ds;
			wr.wr.coll.count = s.count;
			wr.wr.coll.op = ibv_coll_op(s.op);
			wr.wr.coll.dtype = ibv_coll_dtype(s.dtype);
			wr.wr.coll.root = s.root;
			const auto t0 = Clock::now();
			auto ms = [&] {
				return std::chrono::duration<double, std::milli>(Clock::now() - t0)
					.count();
			};
			ibv_coll_wc wc{};
			int32_t outcome = kOk;
			const char *what;
			if (int err = ibv_post_coll_send(m.qp, &wr, &bad)) {
				// EIO: the device died; anything else is a bug here.
				if (err != EIO)
					die(o, "post", err);
				outcome = kDeviceLost;
				what = "post EIO";
			} else {
				for (;;) {
					int got = ibv_poll_coll_cq(m.cq, 1, &wc);
					if (got < 0)
						die(o, "poll", -got);
					if (got)
						break;
					if (ms() > o.timeout_ms + 5000.0) {
						fprintf(stderr,
							"chaos_node %d case %zu attempt %d: no "
							"completion after %.0f ms (timeout %d ms): "
							"HANG\n",
							o.node, ci, attempt, ms(), o.timeout_ms);
						fflush(stderr);
						_exit(3);
					}
					usleep(200);
				}
				what = ibv_coll_status_str(wc.coll_status);
				if (wc.status != IBV_WC_SUCCESS)
					// A collective alone on its QP is flushed only by
					// a device that died: then the event follows.
					outcome = device_fatal(m.ctx,
							       wc.status == IBV_WC_WR_FLUSH_ERR
								       ? 2000
								       : 0)
							  ? kDeviceLost
							  : kFailed;
			}
			const double took = ms();
			const bool sw = outcome == kOk && (wc.wc_flags & IBV_COLL_WC_SWITCH);
			// The wall clock's milliseconds, for chaos.sh to set beside
			// the fault's.
			const long long wall =
				std::chrono::duration_cast<std::chrono::milliseconds>(
					std::chrono::system_clock::now().time_since_epoch())
					.count();
			printf("node %d case %zu attempt %d: %s%s in %.0f ms, done at %lld\n",
			       o.node, ci, attempt, outcome == kOk ? "ok" : what,
			       outcome != kOk ? ""
			       : sw	      ? " via switch"
					      : " via ring",
			       took, wall);
			if (outcome == kOk) {
				via_switch += sw;
				worst_ok_ms = std::max(worst_ok_ms, took);
				s.tree = sw;
				if (!o.leaves.empty() && o.topology != IBV_COLL_TOPO_RING) {
					s.pairwise_max = 0;   // AUTO fell back: the ring,
					s.block_bytes = 4096; // in whole blocks of the MTU
				}
				std::vector<uint8_t> want = expected_output(s, o.seed + ci, me,
									    kInputNormal);
				int64_t at = want.empty() ? -1
							  : first_mismatch(s, dst, want.data(), de);
				if (last && o.topology != IBV_COLL_TOPO_RING && !sw) {
					fprintf(stderr,
						"chaos_node %d: the job given again ran on the ring, "
						"not through its switch\n",
						o.node);
					wrong++;
				}
				if (at >= 0) {
					fprintf(stderr,
						"chaos_node %d case %zu (coll %#x op %d dtype %d count "
						"%lu root %u): element %ld WRONG\n",
						o.node, ci, s.coll, s.op, s.dtype,
						(unsigned long)s.count, s.root, (long)at);
					wrong++;
				}
			} else {
				failed++;
				worst_fail_ms = std::max(worst_fail_ms, took);
				if (outcome == kFailed && took > o.timeout_ms + 3000.0) {
					fprintf(stderr,
						"chaos_node %d case %zu: failure after %.0f ms, past the "
						"timeout (%d ms) and its margin\n",
						o.node, ci, took, o.timeout_ms);
					wrong++;
				}
			}
			fflush(stdout);
			// Agree: every member's outcome.
			std::vector<int32_t> all(size_t(o.nodes));
			if (int err = ibvc_boot_allgather(boot, &outcome, sizeof(outcome),
							  all.data()))
				die(o, "agree", err);
			int32_t worst = kOk;
			for (int32_t x : all)
				worst = std::max(worst, x);
			if (worst == kOk) {
				if (fd0 < 0) { // the baseline: set up, one collective run
					fd0 = count_fds();
					rss0 = rss_kib();
				}
				break;
			}
			if (attempt >= o.attempts) {
				fprintf(stderr,
					"chaos_node %d case %zu: still failing after %d attempts\n",
					o.node, ci, attempt);
				return 1;
			}
			recoveries++;
			if (worst == kDeviceLost) {
				// A member's device went: new devices, new QPs, a new job ID.
				m.close();
				m.open_retrying();
				reopens++;
				jid += 0x10000;
				m.join(boot, jid);
			} else {
				if (int err = m.install())
					die(o, "give the job again", err);
				if (int err = ibvc_boot_barrier(boot))
					die(o, "barrier", err);
			}
		}
	}
	const int fd1 = count_fds();
	const long rss1 = rss_kib();
	printf("node %d: %zu cases, %d wrong, %d failed attempts (slowest failure %.0f ms, "
	       "success %.0f ms), %d recoveries, %d device reopens, %d via switch; descriptors %d -> %d, rss %ld -> %ld "
	       "KiB\n",
	       o.node, cases.size(), wrong, failed, worst_fail_ms, worst_ok_ms, recoveries, reopens,
	       via_switch, fd0, fd1, rss0, rss1);
	if (fd0 >= 0 && fd1 != fd0) {
		fprintf(stderr, "chaos_node %d: descriptors %d -> %d across the faults\n", o.node,
			fd0, fd1);
		wrong++;
	}
	ibvc_boot_barrier(boot);
	ibvc_boot_close(boot);
	m.close();
	return wrong ? 1 : 0;
}
