// Driving the NCCL plugin's CollNet as NCCL does, for the harness
// (test_nccl_coll.cc) and the benchmark (nccl_collnet_perf.cc): the table
// of a version looked up by name in the dlopen()ed plugin, behind one set
// of calls; ranks as forked processes; the rendezvous NCCL's bootstrap
// would give them (handles all-gathered, barriers) in shared memory.
#pragma once

#include "nccl_abi.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ibvc_nccl {

inline constexpr int kMaxRanks = 8;

// The rendezvous NCCL's bootstrap provides: handles all-gathered, and
// barriers.
struct Shared {
	std::atomic<int> arrived[64];
	char handles[2][kMaxRanks][NCCL_NET_HANDLE_MAXSIZE]; // two communicators
};

inline Shared *g_sh;
inline int g_n, g_rank;
inline int g_warns; // WARN lines the plugin logged in this process

inline void logger(ncclDebugLogLevel level, unsigned long, const char *, int, const char *fmt, ...)
{
	if (level != NCCL_LOG_WARN)
		return;
	g_warns++;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[rank %d] WARN ", g_rank);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

inline bool barrier(int phase)
{
	g_sh->arrived[phase]++;
	for (int i = 0; i < 60000 && g_sh->arrived[phase].load() < g_n; i++)
		usleep(1000);
	return g_sh->arrived[phase].load() >= g_n;
}

// The calls every version shares, from the version's table.
struct Api {
	ncclResult_t (*init)(void **ctx);
	ncclResult_t (*devices)(int *);
	ncclResult_t (*props)(int *ptr_support, size_t *max_coll, int *max_multi);
	ncclResult_t (*listen)(void *ctx, void *handle, void **lc);
	ncclResult_t (*finalize)(void *ctx);
	ncclResult_t (*connect)(void **, int, int, void *, void **);
	ncclResult_t (*reduceSupport)(ncclDataType_t, ncclRedOp_t, int *);
	ncclResult_t (*regMr)(void *, void *, size_t, int, void **);
	ncclResult_t (*regMrDmaBuf)(void *, void *, size_t, int, uint64_t, int, void **);
	ncclResult_t (*deregMr)(void *, void *);
	ncclResult_t (*iallreduce)(void *, void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
				   void *, void *, void **);
	ncclResult_t (*iallgather)(void *, void *, int, ncclNetSGE_v10_t *, size_t, size_t, size_t,
				   void *, void **);
	ncclResult_t (*ireducescatter)(void *, int, ncclNetSGE_v10_t *, void *, size_t, size_t,
				       size_t, ncclDataType_t, ncclRedOp_t, void *, void **);
	ncclResult_t (*iflush)(void *, void *, int, void *, void **);
	ncclResult_t (*test)(void *, int *, int *);
	ncclResult_t (*closeColl)(void *);
	ncclResult_t (*closeListen)(void *);
};

template <typename T> inline const T *g_tab;

template <typename T, typename Props> Api api_of(void *sym)
{
	g_tab<T> = static_cast<const T *>(sym);
	const T *t = g_tab<T>;
	Api a{};
	if constexpr (std::is_same_v<T, ncclCollNet_v10_t>) {
		a.init = [](void **) { return g_tab<T>->init(logger); };
		a.listen = [](void *, void *h, void **lc) { return g_tab<T>->listen(0, h, lc); };
		a.finalize = [](void *) { return ncclSuccess; };
	} else {
		a.init = [](void **ctx) { return g_tab<T>->init(ctx, 0x5eedull, logger); };
		a.listen = [](void *ctx, void *h, void **lc) {
			return g_tab<T>->listen(ctx, 0, h, lc);
		};
		a.finalize = [](void *ctx) { return g_tab<T>->finalize(ctx); };
	}
	a.props = [](int *ptr, size_t *most, int *multi) {
		Props p{};
		ncclResult_t r = g_tab<T>->getProperties(0, &p);
		*ptr = p.ptrSupport;
		*most = p.maxCollBytes;
		*multi = 1;
		if constexpr (!std::is_same_v<T, ncclCollNet_v10_t>)
			*multi = p.maxMultiRequestSize;
		return r;
	};
	a.devices = t->devices;
	a.connect = t->connect;
	a.reduceSupport = t->reduceSupport;
	a.regMr = t->regMr;
	a.regMrDmaBuf = t->regMrDmaBuf;
	a.deregMr = t->deregMr;
	a.iallreduce = t->iallreduce;
	a.iallgather = t->iallgather;
	a.ireducescatter = t->ireducescatter;
	a.iflush = t->iflush;
	a.test = t->test;
	a.closeColl = t->closeColl;
	a.closeListen = t->closeListen;
	return a;
}

// A CollNet communicator of every rank, as NCCL's setup makes one:
// listen, all-gather the handles (slot 0 or 1 of the shared table,
// barrier `phase`), connect, close the listen comm.  NULL on failure.
inline void *connect_comm(const Api &a, void *ctx, int slot, int phase)
{
	void *lc = nullptr, *cc = nullptr;
	if (a.listen(ctx, g_sh->handles[slot][g_rank], &lc) != ncclSuccess || !lc)
		return nullptr;
	bool all = barrier(phase);
	void *handles[kMaxRanks];
	for (int r = 0; r < g_n; r++)
		handles[r] = g_sh->handles[slot][r];
	if (!all || a.connect(handles, g_n, g_rank, lc, &cc) != ncclSuccess)
		cc = nullptr;
	return a.closeListen(lc) == ncclSuccess ? cc : nullptr;
}

// The plugin's CollNet table of `version` (10, 11, 12), or false with *err.
inline bool load(const char *path, int version, void **lib, Api *a, std::string *err)
{
	*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!*lib) {
		*err = dlerror();
		return false;
	}
	std::string sym = "ncclCollNetPlugin_v" + std::to_string(version);
	void *tab = dlsym(*lib, sym.c_str());
	if (!tab) {
		*err = sym + ": not in the plugin";
		return false;
	}
	*a = version == 10   ? api_of<ncclCollNet_v10_t, ncclNetProperties_v10_t>(tab)
	     : version == 11 ? api_of<ncclCollNet_v11_t, ncclNetProperties_v11_t>(tab)
			     : api_of<ncclCollNet_v12_t, ncclNetProperties_v12_t>(tab);
	return true;
}

// Run body(rank) in n forked ranks; each rank's exit status (0: body said
// true), or -1 for a rank killed after timeout_s.  With `closed` (body
// called finalize, which closes the device) a rank ends with exit(), so
// that LeakSanitizer checks it; else with _exit(): the device's engine
// thread still runs, and LeakSanitizer's stop-the-world fails now and
// then beside it.
inline std::vector<int> run_ranks(int n, int timeout_s, bool closed,
				  const std::function<bool()> &body)
{
	std::vector<int> status(size_t(n), -1);
	void *mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return status;
	g_sh = new (mem) Shared{};
	g_n = n;
	std::vector<pid_t> kids;
	for (int r = 0; r < n; r++) {
		pid_t p = fork();
		if (p == 0) {
			g_rank = r;
			int code = body() ? 0 : 1;
			fflush(stdout);
			fflush(stderr);
			if (closed)
				exit(code);
			_exit(code);
		}
		kids.push_back(p);
	}
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
	for (size_t i = 0; i < kids.size(); i++) {
		int st = 0;
		pid_t got;
		while ((got = waitpid(kids[i], &st, WNOHANG)) == 0 &&
		       std::chrono::steady_clock::now() < end)
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
		if (got == 0) {
			for (pid_t k : kids)
				kill(k, SIGKILL);
			waitpid(kids[i], &st, 0);
			continue; // -1: hung
		}
		status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
	munmap(mem, sizeof(Shared));
	return status;
}

} // namespace ibvc_nccl
