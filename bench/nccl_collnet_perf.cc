// CollNet allreduce bandwidth through the NCCL plugin, driven as NCCL's
// CollNet proxy drives it: each allreduce cut into steps of the proxy's
// chunk (NCCL_BUFFSIZE / NCCL_STEPS, 512 KiB by default) with up to
// NCCL_STEPS (8) requests in flight, ranks forked on this host, the plugin
// dlopen()ed.  scripts/bench-nccl.sh prints it beside ibv_coll_perf (the
// same allreduces as whole collective WRs); the target is the
// plugin within 10 % of it.  fp32 sums of small integers, every rank's
// result checked once per size.
#include "collnet_driver.h"

#include <getopt.h>
#include <sched.h>
#include <time.h>

#include <cinttypes>
#include <cstdlib>
#include <cstring>

using namespace ibvc_nccl;

namespace {

struct Opts {
	int ranks = 4, version = 12, iters = 20, warmup = 5, inflight = 8;
	size_t min = 8, max = 16 << 20, chunk = 512 << 10;
	double factor = 4;
	const char *plugin = nullptr;
};

double now_s()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

bool wait_one(const Api &a, void *r)
{
	// As NCCL's proxy thread: test, and yield the processor while idle.
	int done = 0, size = 0;
	while (!done) {
		if (a.test(r, &done, &size) != ncclSuccess)
			return false;
		if (!done)
			sched_yield();
	}
	return true;
}

// iters allreduces of `bytes`, in chunks, at most o.inflight in flight.
bool run_size(const Api &a, void *cc, const Opts &o, float *src, float *dst, void *smh, void *dmh,
	      size_t bytes, int iters)
{
	std::vector<void *> fifo;
	size_t head = 0;
	for (int it = 0; it < iters; it++)
		for (size_t off = 0; off < bytes; off += o.chunk) {
			size_t n = std::min(o.chunk, bytes - off);
			if (fifo.size() - head == size_t(o.inflight) && !wait_one(a, fifo[head++]))
				return false;
			void *r = nullptr;
			if (a.iallreduce(cc, reinterpret_cast<char *>(src) + off,
					 reinterpret_cast<char *>(dst) + off, n / 4, ncclFloat32,
					 ncclSum, smh, dmh, &r) != ncclSuccess ||
			    !r)
				return false;
			fifo.push_back(r);
		}
	while (head < fifo.size())
		if (!wait_one(a, fifo[head++]))
			return false;
	return true;
}

bool rank_main(const Api &a, const Opts &o)
{
	void *ctx = nullptr, *cc, *smh, *dmh;
	if (a.init(&ctx) || !(cc = connect_comm(a, ctx, 0, 0)))
		return false;
	std::vector<float> src(o.max / 4 + 1), dst(o.max / 4 + 1);
	for (size_t i = 0; i < src.size(); i++)
		src[i] = float((i * 7 + size_t(g_rank) * 3) % 17);
	if (a.regMr(cc, src.data(), src.size() * 4, NCCL_PTR_HOST, &smh) ||
	    a.regMr(cc, dst.data(), dst.size() * 4, NCCL_PTR_HOST, &dmh))
		return false;
	if (g_rank == 0)
		printf("# ibv_coll CollNet plugin v%d: %d ranks, chunk %zu, %d in flight, fp32 sum\n"
		       "#%11s %12s %10s %9s %9s %6s\n",
		       o.version, g_n, o.chunk, o.inflight, "size", "count", "time(us)", "algbw",
		       "busbw", "#wrong");
	int phase = 1;
	for (size_t bytes = o.min; bytes <= o.max; bytes = size_t(double(bytes) * o.factor)) {
		bytes &= ~size_t(3);
		if (!run_size(a, cc, o, src.data(), dst.data(), smh, dmh, bytes, o.warmup) ||
		    !barrier(phase++ % 64))
			return false;
		double t0 = now_s();
		if (!run_size(a, cc, o, src.data(), dst.data(), smh, dmh, bytes, o.iters))
			return false;
		double us = (now_s() - t0) * 1e6 / o.iters;
		long wrong = 0;
		for (size_t i = 0; i < bytes / 4; i++) {
			float want = 0;
			for (int r = 0; r < g_n; r++)
				want += float((i * 7 + size_t(r) * 3) % 17);
			wrong += dst[i] != want;
		}
		double alg = double(bytes) / us / 1e3, bus = alg * 2 * (g_n - 1) / g_n;
		if (g_rank == 0)
			printf(" %11zu %12zu %10.1f %9.3f %9.3f %6ld\n", bytes, bytes / 4, us, alg,
			       bus, wrong);
		fflush(stdout);
		if (wrong || !barrier(phase++ % 64))
			return false;
		if (o.factor <= 1)
			break;
	}
	barrier(63);
	a.deregMr(cc, smh);
	a.deregMr(cc, dmh);
	return !a.closeColl(cc) && !a.finalize(ctx);
}

void usage()
{
	fprintf(stderr,
		"usage: nccl_collnet_perf [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] "
		"[-w WARMUP] [-c CHUNK] [-k INFLIGHT] [-v 10|11|12] [-p PLUGIN]\n");
	exit(2);
}

size_t size_arg(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	double m = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1;
	if (end == s || v < 0)
		usage();
	return size_t(v * m);
}

} // namespace

int main(int argc, char **argv)
{
	Opts o;
	for (int c; (c = getopt(argc, argv, "n:b:e:f:i:w:c:k:v:p:h")) != -1;)
		switch (c) {
		case 'n': o.ranks = atoi(optarg); break;
		case 'b': o.min = size_arg(optarg); break;
		case 'e': o.max = size_arg(optarg); break;
		case 'f': o.factor = atof(optarg); break;
		case 'i': o.iters = atoi(optarg); break;
		case 'w': o.warmup = atoi(optarg); break;
		case 'c': o.chunk = size_arg(optarg); break;
		case 'k': o.inflight = atoi(optarg); break;
		case 'v': o.version = atoi(optarg); break;
		case 'p': o.plugin = optarg; break;
		default: usage();
		}
	if (o.ranks < 2 || o.ranks > kMaxRanks || o.min < 4 || o.min > o.max || o.iters < 1 ||
	    o.warmup < 0 || o.chunk < 4 || o.inflight < 1 || o.inflight > NCCL_NET_MAX_REQUESTS ||
	    o.version < 10 || o.version > 12)
		usage();
	o.chunk &= ~size_t(3);
	const char *path = o.plugin ? o.plugin : getenv("IBVC_NCCL_PLUGIN");
	if (!path)
		path = NCCL_PLUGIN_PATH;
	void *lib;
	Api a;
	std::string err;
	if (!load(path, o.version, &lib, &a, &err)) {
		fprintf(stderr, "nccl_collnet_perf: %s\n", err.c_str());
		return 1;
	}
	std::vector<int> st = run_ranks(o.ranks, 600, o.version > 10,
					[&] { return rank_main(a, o); });
	int bad = 0;
	for (size_t r = 0; r < st.size(); r++)
		if (st[r]) {
			fprintf(stderr, "nccl_collnet_perf: rank %zu %s\n", r,
				st[r] < 0 ? "hung" : "failed");
			bad = 1;
		}
	return bad;
}
