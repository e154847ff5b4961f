// The NCCL plugin's CollNet, driven as NCCL's CollNet setup and proxy drive
// it: the plugin is dlopen()ed and its ncclCollNetPlugin_v10/v11/v12 table
// looked up by name, N forked processes each init, listen and publish their
// handle, connect with every rank's handle, register memory, keep many
// requests in flight and test() them, run windowed allgathers and
// reduce-scatters with NCCL's SGE and window arguments, and close.  Results
// are checked against tests/common/coll_ref (allreduce) and scalar loops
// written here (the windows); bad arguments must give NCCL's error codes.
// It links neither the plugin nor libibv_coll: it loads the plugin as NCCL
// does.  The same calls on GPU memory run against tests/nccl/fake_cuda.cc,
// a CUDA driver without a GPU.
#include "coll_ref.h"
#include "collnet_driver.h"
#include "rank_check.h"
#include "switchd_proc.h"

#include <gtest/gtest.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace ibvc_nccl;

// NCCL's types in ibv_coll's numbering, for the reference (written here
// from nccl_abi.h and ibv_coll.h, independently of the plugin's table).
int ref_dtype(int nccl)
{
	static const int m[] = {IBV_COLL_DTYPE_INT8,	IBV_COLL_DTYPE_UINT8,
				IBV_COLL_DTYPE_INT32,	IBV_COLL_DTYPE_UINT32,
				IBV_COLL_DTYPE_INT64,	IBV_COLL_DTYPE_UINT64,
				IBV_COLL_DTYPE_FLOAT16, IBV_COLL_DTYPE_FLOAT32,
				IBV_COLL_DTYPE_FLOAT64, IBV_COLL_DTYPE_BFLOAT16};
	return m[nccl];
}
int ref_op(int nccl)
{
	static const int m[] = {IBV_COLL_OP_SUM, IBV_COLL_OP_PROD, IBV_COLL_OP_MAX,
				IBV_COLL_OP_MIN};
	return m[nccl];
}


struct Ctx {
	const Api *a;
	void *cc;
	bool tree;
};

// The fake CUDA driver's allocation and synchronous copies (which the
// plugin does not use: the test fills and reads GPU memory with them).
struct FakeCuda {
	int (*alloc)(unsigned long long *, size_t);
	int (*alloc_vmm)(unsigned long long *, size_t); // of no context
	void (*set_current)(int on);
	int (*release)(unsigned long long);
	int (*htod)(unsigned long long, const void *, size_t);
	int (*dtoh)(void *, unsigned long long, size_t);
	long (*outstanding)();
};
const FakeCuda *g_cuda; // the ranks' buffers are GPU memory

// A buffer the plugin is given: host memory, or GPU memory of the fake
// driver (no host access: filled and read through its copies).
struct Mem {
	size_t n;
	std::vector<uint8_t> host;
	unsigned long long dev = 0;
	explicit Mem(size_t len, bool vmm = false) : n(len)
	{
		if (!g_cuda || (vmm ? g_cuda->alloc_vmm : g_cuda->alloc)(&dev, n))
			host.resize(n);
	}
	~Mem()
	{
		if (dev)
			g_cuda->release(dev);
	}
	Mem(const Mem &) = delete;
	Mem &operator=(const Mem &) = delete;
	char *ptr()
	{
		return dev ? reinterpret_cast<char *>(uintptr_t(dev))
			   : reinterpret_cast<char *>(host.data());
	}
	int type() const { return dev ? NCCL_PTR_CUDA : NCCL_PTR_HOST; }
	void put(const void *p)
	{
		if (dev)
			g_cuda->htod(dev, p, n);
		else
			memcpy(host.data(), p, n);
	}
	void get(void *p)
	{
		if (dev)
			g_cuda->dtoh(p, dev, n);
		else
			memcpy(p, host.data(), n);
	}
};

// Wait for every request, as NCCL's proxy does: test() until done.
bool wait_all(const Ctx &x, std::vector<void *> &reqs)
{
	for (void *&r : reqs) {
		int done = 0, size = 0;
		for (int spin = 0; !done; spin++) {
			CHECK(x.a->test(r, &done, &size) == ncclSuccess, "test failed");
			CHECK(spin < 20000000, "a request never completed");
			if (!done && spin > 1000)
				usleep(20);
		}
	}
	reqs.clear();
	return true;
}

// Every type and op: reduceSupport says yes exactly for the device's set,
// and each supported pair's allreduce matches the reference.  Eight
// requests in flight at a time (four ops, two buffers each).
bool allreduces(const Ctx &x)
{
	for (int dt = 0; dt < ncclNumTypes; dt++)
		for (int op = 0; op < ncclNumOps; op++) {
			int sup = -1;
			CHECK(x.a->reduceSupport(ncclDataType_t(dt), ncclRedOp_t(op), &sup) ==
				      ncclSuccess,
			      "reduceSupport");
			CHECK(sup == (dt <= ncclBfloat16 && op <= ncclMin), "type %d op %d: %d", dt,
			      op, sup);
		}
	const uint64_t counts[2] = {1021, 3};
	for (int dt = 0; dt <= ncclBfloat16; dt++) {
		ibvc_test::CollSpec s[8];
		std::vector<uint8_t> in[8], out[8];
		void *mh[8][2];
		std::vector<void *> reqs;
		for (int k = 0; k < 8; k++) {
			s[k].coll = IBV_COLL_WR_ALLREDUCE;
			s[k].op = ref_op(k % 4);
			s[k].dtype = ref_dtype(dt);
			s[k].count = counts[k / 4];
			s[k].ranks.assign(size_t(g_n), 1);
			s[k].tree = x.tree;
			in[k] = ibvc_test::make_input(s[k], 7 + k, uint32_t(g_rank),
						      ibvc_test::kInputNormal);
			out[k].assign(in[k].size(), 0xa5);
			CHECK(x.a->regMr(x.cc, in[k].data(), in[k].size(), NCCL_PTR_HOST,
					 &mh[k][0]) == ncclSuccess &&
				      x.a->regMr(x.cc, out[k].data(), out[k].size(), NCCL_PTR_HOST,
						 &mh[k][1]) == ncclSuccess,
			      "regMr");
			void *r = nullptr;
			CHECK(x.a->iallreduce(x.cc, in[k].data(), out[k].data(), s[k].count,
					      ncclDataType_t(dt), ncclRedOp_t(k % 4), mh[k][0],
					      mh[k][1], &r) == ncclSuccess &&
				      r,
			      "iallreduce type %d op %d", dt, k % 4);
			reqs.push_back(r);
		}
		if (!wait_all(x, reqs))
			return false;
		for (int k = 0; k < 8; k++) {
			auto want = ibvc_test::expected_output(s[k], 7 + k, uint32_t(g_rank),
							       ibvc_test::kInputNormal);
			int64_t bad = ibvc_test::first_mismatch(s[k], out[k].data(), want.data(),
								s[k].count);
			CHECK(bad < 0,
			      "allreduce type %d op %d count %lu: element %ld is %s, want %s", dt,
			      k % 4, (unsigned long)s[k].count, (long)bad,
			      ibvc_test::format_elem(s[k].dtype, out[k].data(), uint64_t(bad))
				      .c_str(),
			      ibvc_test::format_elem(s[k].dtype, want.data(), uint64_t(bad))
				      .c_str());
			x.a->deregMr(x.cc, mh[k][0]);
			x.a->deregMr(x.cc, mh[k][1]);
		}
	}
	return true;
}

uint8_t pattern(int rank, size_t i)
{
	return uint8_t(rank * 37 + i * 11 + (i >> 8));
}

// Allgathers as NCCL's proxy posts them: the whole collective at once,
// then in windows that cut across the ranks' shares, each window's
// destination in two parts and this rank's source the share of the window
// that is its own.
bool allgathers(const Ctx &x)
{
	const size_t per = 1000, all = per * size_t(g_n);
	std::vector<uint8_t> src(per), dst(all), want(all);
	for (size_t i = 0; i < per; i++)
		src[i] = pattern(g_rank, i);
	for (int r = 0; r < g_n; r++)
		for (size_t i = 0; i < per; i++)
			want[size_t(r) * per + i] = pattern(r, i);
	Mem ms(per), md(all);
	ms.put(src.data());
	void *smh, *dmh;
	CHECK(x.a->regMr(x.cc, ms.ptr(), per, ms.type(), &smh) == ncclSuccess &&
		      x.a->regMr(x.cc, md.ptr(), all, md.type(), &dmh) == ncclSuccess,
	      "regMr");
	// (window, parts): whole; across shares; inside one share (a
	// broadcast from its rank when in one part); windows of both kinds.
	const std::pair<size_t, int> windows[] = {{all, 1}, {384, 2}, {384, 1}, {1000, 1},
						  {250, 1}, {77, 2},  {77, 1}};
	for (auto [win, np] : windows) {
		std::fill(dst.begin(), dst.end(), 0);
		md.put(dst.data());
		std::vector<void *> reqs;
		for (size_t off = 0; off < all; off += win) {
			size_t len = std::min(win, all - off);
			size_t lo = std::max(off, size_t(g_rank) * per);
			ncclNetSGE_v10_t parts[2] = {
				{dmh, md.ptr() + off, len / 2},
				{dmh, md.ptr() + off + len / 2, len - len / 2}};
			int nparts = np;
			if (nparts == 1)
				parts[0].size = len;
			void *r = nullptr;
			CHECK(x.a->iallgather(x.cc, ms.ptr() + (lo - size_t(g_rank) * per) % per,
					      nparts, parts, per, off, len, smh,
					      &r) == ncclSuccess &&
				      r,
			      "iallgather window %zu at %zu", len, off);
			reqs.push_back(r);
			if (reqs.size() == 8 && !wait_all(x, reqs))
				return false;
		}
		if (!wait_all(x, reqs))
			return false;
		md.get(dst.data());
		for (size_t i = 0; i < all; i++)
			CHECK(dst[i] == want[i],
			      "allgather in windows of %zu: byte %zu is %u, want %u", win, i,
			      dst[i], want[i]);
	}
	x.a->deregMr(x.cc, smh);
	x.a->deregMr(x.cc, dmh);
	return true;
}

// Reduce-scatters of int32 sums (exact in any order): whole, then in
// windows; this rank's destination gets the reduced part of its share
// that each window holds.
bool reduce_scatters(const Ctx &x)
{
	const size_t per_el = 250, per = per_el * 4, all = per * size_t(g_n);
	std::vector<int32_t> src(per_el * size_t(g_n)), dst(per_el), want(per_el, 0);
	for (size_t i = 0; i < src.size(); i++)
		src[i] = int32_t(pattern(g_rank, i)) * (g_rank + 1) - 300;
	for (int r = 0; r < g_n; r++)
		for (size_t i = 0; i < per_el; i++) {
			size_t j = size_t(g_rank) * per_el + i;
			want[i] = int32_t(uint32_t(want[i]) +
					  uint32_t(int32_t(pattern(r, j)) * (r + 1) - 300));
		}
	Mem ms(all), md(per);
	ms.put(src.data());
	void *smh, *dmh;
	CHECK(x.a->regMr(x.cc, ms.ptr(), all, ms.type(), &smh) == ncclSuccess &&
		      x.a->regMr(x.cc, md.ptr(), per, md.type(), &dmh) == ncclSuccess,
	      "regMr");
	// (window, parts): whole; across shares; inside one share (a reduce
	// to its rank); windows of both kinds.
	const std::pair<size_t, int> windows[] = {{all, 1}, {640, 2}, {640, 1}, {1000, 1},
						  {200, 1}, {36, 2},  {36, 1}};
	for (auto [win, np] : windows) {
		std::fill(dst.begin(), dst.end(), 0);
		md.put(dst.data());
		std::vector<void *> reqs;
		for (size_t off = 0; off < all; off += win) {
			size_t len = std::min(win, all - off);
			size_t mine = size_t(g_rank) * per, lo = std::max(off, mine);
			char *base = ms.ptr() + off;
			ncclNetSGE_v10_t parts[2] = {{smh, base, len / 8 * 4},
						     {smh, base + len / 8 * 4, len - len / 8 * 4}};
			int nparts = np;
			if (nparts == 1)
				parts[0].size = len;
			char *to = md.ptr() + (lo - mine) % per;
			void *r = nullptr;
			CHECK(x.a->ireducescatter(x.cc, nparts, parts, to, per, off, len, ncclInt32,
						  ncclSum, dmh, &r) == ncclSuccess &&
				      r,
			      "ireducescatter window %zu at %zu", len, off);
			reqs.push_back(r);
			if (reqs.size() == 8 && !wait_all(x, reqs))
				return false;
		}
		if (!wait_all(x, reqs))
			return false;
		md.get(dst.data());
		for (size_t i = 0; i < per_el; i++)
			CHECK(dst[i] == want[i],
			      "reduce-scatter in windows of %zu: element %zu is %d, "
			      "want %d",
			      win, i, dst[i], want[i]);
	}
	x.a->deregMr(x.cc, smh);
	x.a->deregMr(x.cc, dmh);
	return true;
}

// Bad arguments give NCCL's error codes, with a WARN line each, and leave
// the communicator working; then NCCL's request limit.
bool bad_arguments(const Ctx &x)
{
	std::vector<float> a(64, 1.0f), b(64);
	void *amh, *bmh, *r = nullptr, *m = nullptr;
	CHECK(x.a->regMr(x.cc, a.data(), 256, NCCL_PTR_HOST, &amh) == ncclSuccess &&
		      x.a->regMr(x.cc, b.data(), 256, NCCL_PTR_HOST, &bmh) == ncclSuccess,
	      "regMr");
	int w = g_warns;
	CHECK(x.a->regMr(x.cc, a.data(), 256, NCCL_PTR_CUDA, &m) == ncclInvalidArgument && !m,
	      "regMr of CUDA memory");
	CHECK(x.a->regMrDmaBuf(x.cc, a.data(), 256, NCCL_PTR_CUDA, 0, 3, &m) == ncclInvalidArgument,
	      "regMrDmaBuf");
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclFloat8e4m3, ncclSum, amh, bmh,
			      &r) == ncclInvalidArgument &&
		      !r,
	      "fp8");
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclFloat32, ncclAvg, amh, bmh, &r) ==
		      ncclInvalidArgument,
	      "avg");
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclDataType_t(42), ncclSum, amh, bmh,
			      &r) == ncclInvalidArgument,
	      "unknown type");
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclFloat32, ncclSum, nullptr, bmh,
			      &r) == ncclInvalidArgument,
	      "no memory handle");
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 65, ncclFloat32, ncclSum, amh, bmh, &r) ==
		      ncclInvalidArgument,
	      "beyond the registration");
	CHECK(x.a->iallreduce(x.cc, b.data(), a.data(), 64, ncclFloat32, ncclSum, amh, bmh, &r) ==
		      ncclInvalidArgument,
	      "another buffer's registration");
	CHECK(g_warns - w == 8, "%d WARN lines for 8 bad calls", g_warns - w);
	std::vector<void *> reqs;
	for (int k = 0; k < NCCL_NET_MAX_REQUESTS; k++) {
		CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclFloat32, ncclSum, amh, bmh,
				      &r) == ncclSuccess &&
			      r,
		      "request %d of %d", k, NCCL_NET_MAX_REQUESTS);
		reqs.push_back(r);
	}
	r = nullptr;
	CHECK(x.a->iallreduce(x.cc, a.data(), b.data(), 64, ncclFloat32, ncclSum, amh, bmh, &r) ==
			      ncclInternalError &&
		      !r,
	      "a request beyond NCCL_NET_MAX_REQUESTS");
	if (!wait_all(x, reqs))
		return false;
	for (float v : b)
		CHECK(v == float(g_n), "allreduce after the bad calls: %g, want %d", v, g_n);
	CHECK(x.a->iflush(x.cc, b.data(), 256, bmh, &r) == ncclSuccess && !r, "iflush");
	x.a->deregMr(x.cc, amh);
	x.a->deregMr(x.cc, bmh);
	return true;
}

bool rank_main(const Api &a, bool tree)
{
	void *ctx = nullptr, *cc = nullptr;
	int ndev = 0, ptr = 0, multi = 0;
	size_t most = 0;
	CHECK(a.init(&ctx) == ncclSuccess, "init");
	CHECK(a.devices(&ndev) == ncclSuccess && ndev == 1, "devices: %d", ndev);
	// NCCL_PTR_CUDA too where this host has a CUDA driver and a GPU.
	CHECK(a.props(&ptr, &most, &multi) == ncclSuccess &&
		      (ptr & ~NCCL_PTR_CUDA) == NCCL_PTR_HOST && most >= (1u << 20) && multi == 1,
	      "getProperties: ptrSupport %d, maxCollBytes %zu", ptr, most);
	CHECK((cc = connect_comm(a, ctx, 0, 0)), "listen, connect, closeListen");
	Ctx x{&a, cc, tree};
	bool ok = allreduces(x) && allgathers(x) && reduce_scatters(x) && bad_arguments(x);
	// Everyone done before any QP goes: a peer may still need a repeat.
	CHECK(barrier(1), "not every rank finished");
	CHECK(a.closeColl(cc) == ncclSuccess, "closeColl");
	CHECK(a.finalize(ctx) == ncclSuccess, "finalize");
	return ok;
}

// Two CollNet communicators of the same ranks at once (two NCCL
// communicators, or process groups): two jobs on each device.  Each
// rank posts to them in its own order (odd ranks the second first); each
// communicator's requests are in the same order on every rank, as NCCL
// keeps them.
bool two_comms_main(const Api &a)
{
	void *ctx = nullptr, *cc[2];
	CHECK(a.init(&ctx) == ncclSuccess, "init");
	CHECK((cc[0] = connect_comm(a, ctx, 0, 0)) && (cc[1] = connect_comm(a, ctx, 1, 1)),
	      "two communicators");
	constexpr int kEach = 6;
	constexpr size_t kCount = 4099;
	std::vector<int32_t> in[2][kEach], out[2][kEach];
	void *mh[2][kEach][2], *reqs[2][kEach];
	for (int k = 0; k < 2 * kEach; k++) {
		int c = (k + g_rank) % 2, i = k / 2;
		in[c][i].assign(kCount, 0);
		for (size_t e = 0; e < kCount; e++)
			in[c][i][e] = int32_t(e * 3 + size_t(g_rank) * 1000 + size_t(c) * 77 +
					      size_t(i));
		out[c][i].assign(kCount, -1);
		CHECK(a.regMr(cc[c], in[c][i].data(), kCount * 4, NCCL_PTR_HOST, &mh[c][i][0]) ==
				      ncclSuccess &&
			      a.regMr(cc[c], out[c][i].data(), kCount * 4, NCCL_PTR_HOST,
				      &mh[c][i][1]) == ncclSuccess,
		      "regMr");
		CHECK(a.iallreduce(cc[c], in[c][i].data(), out[c][i].data(), kCount, ncclInt32,
				   ncclSum, mh[c][i][0], mh[c][i][1], &reqs[c][i]) == ncclSuccess &&
			      reqs[c][i],
		      "iallreduce on communicator %d", c);
	}
	for (int c = 0; c < 2; c++) {
		std::vector<void *> r(reqs[c], reqs[c] + kEach);
		CHECK(wait_all(Ctx{&a, cc[c], false}, r), "communicator %d", c);
		for (int i = 0; i < kEach; i++) {
			for (size_t e = 0; e < kCount; e++) {
				int32_t want = 0;
				for (int q = 0; q < g_n; q++)
					want += int32_t(e * 3 + size_t(q) * 1000 + size_t(c) * 77 +
							size_t(i));
				CHECK(out[c][i][e] == want,
				      "communicator %d request %d element %zu: %d, want %d", c, i,
				      e, out[c][i][e], want);
			}
			a.deregMr(cc[c], mh[c][i][0]);
			a.deregMr(cc[c], mh[c][i][1]);
		}
	}
	CHECK(barrier(2), "not every rank finished");
	CHECK(a.closeColl(cc[0]) == ncclSuccess && a.closeColl(cc[1]) == ncclSuccess, "closeColl");
	CHECK(a.finalize(ctx) == ncclSuccess, "finalize");
	return true;
}

// The v12 table, and body in n forked ranks on the loopback device round
// the ring: every rank must return true.
void ring_ranks(int n, int timeout_s, const std::function<bool(const Api &)> &body)
{
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, 12, &lib, &a, &err)) << err;
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	std::vector<int> st = ibvc_nccl::run_ranks(n, timeout_s, true, [&] { return body(a); });
	for (int r = 0; r < n; r++)
		EXPECT_EQ(st[size_t(r)], 0) << "rank " << r;
	dlclose(lib);
}

TEST(CollNetTwo, TwoCommunicatorsOfTheSameRanksAtOnce)
{
	ring_ranks(4, 120, two_comms_main);
}

// More CollNet communicators, each with a 1 MiB allreduce in flight, than
// the NIC's Seg units hold at once if they shared ranges (the 17th failed
// when communicators took 512-unit ranges in turn): each keeps a range
// of its own from connect to closeColl.
bool many_comms_main(const Api &a)
{
	constexpr int kComms = 20;
	constexpr size_t kCount = 1 << 18; // 1 MiB of int32
	void *ctx = nullptr, *cc[kComms];
	CHECK(a.init(&ctx) == ncclSuccess, "init");
	for (int k = 0; k < kComms; k++)
		CHECK((cc[k] = connect_comm(a, ctx, k % 2, 2 + k)), "communicator %d", k);
	std::vector<int32_t> in(kCount), out(kCount * kComms, -1);
	for (size_t e = 0; e < kCount; e++)
		in[e] = int32_t(e % 1009) + g_rank * 7;
	void *mh[kComms][2], *reqs[kComms];
	for (int k = 0; k < kComms; k++) {
		int32_t *o = &out[size_t(k) * kCount];
		CHECK(a.regMr(cc[k], in.data(), kCount * 4, NCCL_PTR_HOST, &mh[k][0]) ==
				      ncclSuccess &&
			      a.regMr(cc[k], o, kCount * 4, NCCL_PTR_HOST, &mh[k][1]) ==
				      ncclSuccess,
		      "regMr");
		CHECK(a.iallreduce(cc[k], in.data(), o, kCount, ncclInt32, ncclSum, mh[k][0],
				   mh[k][1], &reqs[k]) == ncclSuccess &&
			      reqs[k],
		      "iallreduce on communicator %d", k);
	}
	for (int k = 0; k < kComms; k++) {
		std::vector<void *> r{reqs[k]};
		CHECK(wait_all(Ctx{&a, cc[k], false}, r), "communicator %d", k);
		const int32_t *o = &out[size_t(k) * kCount];
		for (size_t e = 0; e < kCount; e++) {
			const int32_t want = g_n * int32_t(e % 1009) + 7 * g_n * (g_n - 1) / 2;
			CHECK(o[e] == want, "communicator %d element %zu: %d, want %d", k, e, o[e],
			      want);
		}
		a.deregMr(cc[k], mh[k][0]);
		a.deregMr(cc[k], mh[k][1]);
	}
	CHECK(barrier(2 + kComms), "not every rank finished");
	for (void *c : cc)
		CHECK(a.closeColl(c) == ncclSuccess, "closeColl");
	CHECK(a.finalize(ctx) == ncclSuccess, "finalize");
	return true;
}

TEST(CollNetTwo, TwentyCommunicatorsEachWithOneMegabyteInFlight)
{
	ring_ranks(3, 120, many_comms_main);
}

// Room for two communicators' Seg units (2048 of the device's 4096
// each): the third is refused at connect on every rank, with one WARN, and
// one made after the first is closed gets its units back.
bool refused_main(const Api &a)
{
	void *ctx = nullptr, *cc[3];
	CHECK(a.init(&ctx) == ncclSuccess, "init");
	CHECK((cc[0] = connect_comm(a, ctx, 0, 0)) && (cc[1] = connect_comm(a, ctx, 1, 1)),
	      "two communicators");
	CHECK(!connect_comm(a, ctx, 0, 2) && g_warns == 1, "a third: refused, one WARN (%d)",
	      g_warns);
	CHECK(barrier(3) && a.closeColl(cc[0]) == ncclSuccess, "closeColl");
	CHECK((cc[2] = connect_comm(a, ctx, 1, 4)), "one after the first is closed");
	int32_t x = g_rank + 1, y = 0;
	void *mh[2], *req = nullptr;
	CHECK(a.regMr(cc[2], &x, 4, NCCL_PTR_HOST, &mh[0]) == ncclSuccess &&
		      a.regMr(cc[2], &y, 4, NCCL_PTR_HOST, &mh[1]) == ncclSuccess &&
		      a.iallreduce(cc[2], &x, &y, 1, ncclInt32, ncclSum, mh[0], mh[1], &req) ==
			      ncclSuccess,
	      "iallreduce");
	std::vector<void *> r{req};
	CHECK(wait_all(Ctx{&a, cc[2], false}, r) && y == g_n * (g_n + 1) / 2, "sum %d", y);
	a.deregMr(cc[2], mh[0]);
	a.deregMr(cc[2], mh[1]);
	CHECK(barrier(5), "not every rank finished");
	CHECK(a.closeColl(cc[1]) == ncclSuccess && a.closeColl(cc[2]) == ncclSuccess, "closeColl");
	CHECK(a.finalize(ctx) == ncclSuccess, "finalize");
	return true;
}

TEST(CollNetTwo, ACommunicatorBeyondTheSegUnitsIsRefusedAtConnect)
{
	setenv("IBV_COLL_NCCL_SEG_UNITS", "2048", 1);
	ring_ranks(2, 120, refused_main);
	unsetenv("IBV_COLL_NCCL_SEG_UNITS");
}

// A rank whose plugin writes another handle layout (the one before the
// Seg ranges carried seg_base and seg_count under magic 0x69626363) is
// refused at connect with one WARN, not misread.
TEST(CollNetTwo, AHandleOfAnotherVersionIsRefused)
{
	ring_ranks(1, 30, [](const Api &a) {
		void *ctx = nullptr, *lc = nullptr, *cc = nullptr;
		char h[NCCL_NET_HANDLE_MAXSIZE] = {};
		CHECK(a.init(&ctx) == ncclSuccess && a.listen(ctx, h, &lc) == ncclSuccess,
		      "listen");
		const uint32_t old = 0x69626363;
		memcpy(h, &old, sizeof(old));
		void *hs[1] = {h};
		CHECK(a.connect(hs, 1, 0, lc, &cc) == ncclInvalidArgument && !cc && g_warns == 1,
		      "connect: %d WARN lines", g_warns);
		CHECK(a.closeListen(lc) == ncclSuccess && a.finalize(ctx) == ncclSuccess, "close");
		return true;
	});
}

struct Param {
	int version, ranks;
};

class CollNet : public ::testing::TestWithParam<Param> {};

void run_ranks(int version, int n, bool tree)
{
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, version, &lib, &a, &err)) << err;
	std::vector<int> st = ibvc_nccl::run_ranks(n, 120, version > 10,
						   [&] { return rank_main(a, tree); });
	for (int r = 0; r < n; r++)
		EXPECT_EQ(st[size_t(r)], 0)
			<< "rank " << r << (st[size_t(r)] < 0 ? " hung: killed" : " failed");
	dlclose(lib);
}

TEST_P(CollNet, EveryCallAsNcclMakesIt)
{
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	run_ranks(GetParam().version, GetParam().ranks, false);
}

// A peer that dies after connect: the survivor's request fails within the
// communicator's timeout (IBV_COLL_NCCL_TIMEOUT_MS), with NCCL's
// ncclRemoteError and a WARN, and does not hang; closeColl still works.
// The peer dies between collectives, 20 ms after connect's barrier: one
// that dies at once, without destroying its QP, may take with it a
// partial of that barrier its survivor never got (a member completes a
// small collective on its result, and sends again what was lost only
// while it lives: ibv_coll_wire(7)), and the survivor's connect fails
// instead, with a timeout (1 run in 3 on a 2-core machine).
bool dead_peer_main(const Api &a)
{
	void *ctx = nullptr, *cc;
	CHECK(a.init(&ctx) == ncclSuccess && (cc = connect_comm(a, ctx, 0, 0)), "connect");
	if (g_rank == 1) {
		usleep(20000);
		_exit(0); // dies without a word
	}
	std::vector<float> v(1024, 1.0f), w(1024);
	void *vm, *wm, *r = nullptr;
	CHECK(a.regMr(cc, v.data(), 4096, NCCL_PTR_HOST, &vm) == ncclSuccess &&
		      a.regMr(cc, w.data(), 4096, NCCL_PTR_HOST, &wm) == ncclSuccess,
	      "regMr");
	usleep(100000); // rank 1 is gone
	CHECK(a.iallreduce(cc, v.data(), w.data(), 1024, ncclFloat32, ncclSum, vm, wm, &r) ==
			      ncclSuccess &&
		      r,
	      "iallreduce");
	int done = 0, size = 0, warns = g_warns;
	ncclResult_t res = ncclSuccess;
	auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (!done && std::chrono::steady_clock::now() < end) {
		res = a.test(r, &done, &size);
		usleep(1000);
	}
	CHECK(done, "the request to a dead peer never completed");
	CHECK(res == ncclRemoteError || res == ncclSystemError, "test gave %d", int(res));
	CHECK(g_warns == warns + 1, "%d WARN lines", g_warns - warns);
	a.deregMr(cc, vm);
	a.deregMr(cc, wm);
	CHECK(a.closeColl(cc) == ncclSuccess, "closeColl");
	return a.finalize(ctx) == ncclSuccess;
}

TEST(CollNetPeer, ADeadPeerFailsTheRequestWithoutAHang)
{
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, 12, &lib, &a, &err)) << err;
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	setenv("IBV_COLL_NCCL_TIMEOUT_MS", "2000", 1);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	std::vector<int> st = ibvc_nccl::run_ranks(2, 60, true, [&] { return dead_peer_main(a); });
	EXPECT_EQ(st[0], 0) << "the survivor";
	unsetenv("IBV_COLL_NCCL_TIMEOUT_MS");
	dlclose(lib);
}

// A rank that comes late (a checkpoint, a stalled data loader) by 2.5
// times the device's own timeout, here 1 s: the other's request waits for
// it and completes right, as NCCL's own transports do (the plugin's
// timeout, IBV_COLL_NCCL_TIMEOUT_MS, is an hour unless set).
bool late_peer_main(const Api &a)
{
	void *ctx = nullptr, *cc;
	CHECK(a.init(&ctx) == ncclSuccess && (cc = connect_comm(a, ctx, 0, 0)), "connect");
	std::vector<float> v(1024, float(g_rank + 1)), w(1024, 0.0f);
	void *vm, *wm, *r = nullptr;
	CHECK(a.regMr(cc, v.data(), 4096, NCCL_PTR_HOST, &vm) == ncclSuccess &&
		      a.regMr(cc, w.data(), 4096, NCCL_PTR_HOST, &wm) == ncclSuccess,
	      "regMr");
	if (g_rank == 1)
		usleep(2500 * 1000);
	CHECK(a.iallreduce(cc, v.data(), w.data(), 1024, ncclFloat32, ncclSum, vm, wm, &r) ==
			      ncclSuccess &&
		      r,
	      "iallreduce");
	int done = 0, size = 0;
	ncclResult_t res = ncclSuccess;
	while (!done && res == ncclSuccess) {
		res = a.test(r, &done, &size);
		usleep(1000);
	}
	CHECK(res == ncclSuccess, "test gave %d", int(res));
	for (float f : w)
		CHECK(f == 3.0f, "result %g, want 3", double(f));
	a.deregMr(cc, vm);
	a.deregMr(cc, wm);
	CHECK(a.closeColl(cc) == ncclSuccess, "closeColl");
	return a.finalize(ctx) == ncclSuccess;
}

TEST(CollNetPeer, ALatePeerIsWaitedFor)
{
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, 12, &lib, &a, &err)) << err;
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	setenv("IBV_COLL_EMU_COLL_TIMEOUT_MS", "1000", 1);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	unsetenv("IBV_COLL_NCCL_TIMEOUT_MS");
	std::vector<int> st = ibvc_nccl::run_ranks(2, 60, true, [&] { return late_peer_main(a); });
	EXPECT_EQ(st[0], 0) << "the punctual one";
	EXPECT_EQ(st[1], 0) << "the late one";
	unsetenv("IBV_COLL_EMU_COLL_TIMEOUT_MS");
	dlclose(lib);
}

// A misspelt setting: init fails with ncclInvalidArgument and one WARN
// naming the variable, and opens nothing.
TEST(CollNetConfig, BadValuesFailInitWithOneWarning)
{
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, 12, &lib, &a, &err)) << err;
	const char *cases[][2] = {{"IBV_COLL_NCCL_SWITCH", "10.0.0.1"},
				  {"IBV_COLL_NCCL_SWITCH", "host:4791"},
				  {"IBV_COLL_NCCL_TOPOLOGY", "tree"},
				  {"IBV_COLL_NCCL_TOPOLOGY", "switch"}, // without a switch
				  {"IBV_COLL_NCCL_SEG_UNITS", "-1"}};
	for (auto &c : cases) {
		SCOPED_TRACE(std::string(c[0]) + "=" + c[1]);
		setenv(c[0], c[1], 1);
		std::vector<int> st = ibvc_nccl::run_ranks(1, 30, true, [&] {
			void *ctx = nullptr;
			int ndev = -1;
			return a.init(&ctx) == ncclInvalidArgument && g_warns == 1 &&
			       a.devices(&ndev) == ncclSuccess && ndev == 0;
		});
		EXPECT_EQ(st[0], 0);
		unsetenv(c[0]);
	}
	dlclose(lib);
}

// Through an aggregation switch: the switch folds the ranks' partials in
// rank order (coll_ref's tree).
TEST(CollNetSwitch, FourRanksThroughTheSwitch)
{
	const char *prog = getenv("IBV_COLL_TEST_SWITCHD");
	if (!prog || !*prog)
		GTEST_SKIP() << "IBV_COLL_TEST_SWITCHD names no ibv_coll_switchd";
	ibvc_test::Switchd sw(prog);
	ASSERT_NE(sw.port(), 0) << "the switch did not start";
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	setenv("IBV_COLL_NCCL_SWITCH", ("127.0.0.1:" + std::to_string(sw.port())).c_str(), 1);
	setenv("IBV_COLL_NCCL_TOPOLOGY", "switch", 1);
	run_ranks(12, 4, true);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	unsetenv("IBV_COLL_NCCL_TOPOLOGY");
}

// Allreduces of GPU memory (or host memory without g_cuda): fp32 sums out
// of place and in place, int32 maxima, all in flight at once, against
// scalar loops.  The in-place buffer is memory of no context (NCCL's
// cuMem allocations): registered while the thread has a context current,
// refused while it has none.
bool allreduces_mem(const Ctx &x)
{
	constexpr size_t kCount = 3001;
	std::vector<float> f(kCount), fsum(kCount, 0), got(kCount);
	std::vector<int32_t> v(kCount), vmax(kCount, INT32_MIN), vgot(kCount);
	for (size_t i = 0; i < kCount; i++) {
		f[i] = float((i * 5 + size_t(g_rank) * 11) % 23);
		v[i] = int32_t((i * 7919 + size_t(g_rank) * 104729) % 1000) - 500;
		for (int r = 0; r < g_n; r++) {
			fsum[i] += float((i * 5 + size_t(r) * 11) % 23);
			vmax[i] = std::max(vmax[i],
					   int32_t((i * 7919 + size_t(r) * 104729) % 1000) - 500);
		}
	}
	Mem fs(kCount * 4), fd(kCount * 4), fi(kCount * 4, true), vs(kCount * 4), vd(kCount * 4);
	fs.put(f.data());
	fi.put(f.data());
	vs.put(v.data());
	Mem *mems[] = {&fs, &fd, &fi, &vs, &vd};
	void *mh[5], *r[3] = {};
	if (g_cuda) {
		int w = g_warns;
		CHECK(x.a->regMr(x.cc, fi.ptr(), kCount * 4, fi.type(), &mh[2]) ==
				      ncclInvalidArgument &&
			      g_warns == w + 1,
		      "regMr of memory of no context, none current");
		g_cuda->set_current(1);
	}
	for (int k = 0; k < 5; k++)
		CHECK(x.a->regMr(x.cc, mems[k]->ptr(), kCount * 4, mems[k]->type(), &mh[k]) ==
			      ncclSuccess,
		      "regMr %d", k);
	if (g_cuda)
		g_cuda->set_current(0);
	CHECK(x.a->iallreduce(x.cc, fs.ptr(), fd.ptr(), kCount, ncclFloat32, ncclSum, mh[0], mh[1],
			      &r[0]) == ncclSuccess &&
		      x.a->iallreduce(x.cc, fi.ptr(), fi.ptr(), kCount, ncclFloat32, ncclSum, mh[2],
				      mh[2], &r[1]) == ncclSuccess &&
		      x.a->iallreduce(x.cc, vs.ptr(), vd.ptr(), kCount, ncclInt32, ncclMax, mh[3],
				      mh[4], &r[2]) == ncclSuccess,
	      "iallreduce");
	std::vector<void *> reqs(r, r + 3);
	if (!wait_all(x, reqs))
		return false;
	for (Mem *m : {&fd, &fi}) {
		m->get(got.data());
		for (size_t i = 0; i < kCount; i++)
			CHECK(got[i] == fsum[i], "fp32 sum%s: element %zu is %g, want %g",
			      m == &fi ? " in place" : "", i, double(got[i]), double(fsum[i]));
	}
	vd.get(vgot.data());
	for (size_t i = 0; i < kCount; i++)
		CHECK(vgot[i] == vmax[i], "int32 max: element %zu is %d, want %d", i, vgot[i],
		      vmax[i]);
	for (void *m : mh)
		x.a->deregMr(x.cc, m);
	return true;
}

bool cuda_main(const Api &a, const FakeCuda &fake)
{
	g_cuda = &fake;
	void *ctx = nullptr, *cc = nullptr, *m = nullptr;
	int ptr = 0, multi = 0;
	size_t most = 0;
	CHECK(a.init(&ctx) == ncclSuccess, "init");
	CHECK(a.props(&ptr, &most, &multi) == ncclSuccess && ptr == (NCCL_PTR_HOST | NCCL_PTR_CUDA),
	      "getProperties: ptrSupport %d with a CUDA driver", ptr);
	CHECK((cc = connect_comm(a, ctx, 0, 0)), "listen, connect, closeListen");
	Ctx x{&a, cc, false};
	bool ok = allreduces_mem(x) && allgathers(x) && reduce_scatters(x);
	// Host memory said to be GPU memory: refused, one WARN.
	std::vector<float> h(64);
	int w = g_warns;
	CHECK(a.regMr(cc, h.data(), 256, NCCL_PTR_CUDA, &m) == ncclInvalidArgument && !m &&
		      g_warns == w + 1,
	      "regMr of host memory as NCCL_PTR_CUDA");
	CHECK(barrier(1), "not every rank finished");
	CHECK(a.closeColl(cc) == ncclSuccess, "closeColl");
	CHECK(fake.outstanding() == 0, "%ld CUDA allocations, streams or events left",
	      fake.outstanding());
	CHECK(a.finalize(ctx) == ncclSuccess, "finalize");
	return ok;
}

// GPU memory (NCCL_PTR_CUDA) through the plugin's staging, with the fake
// driver: getProperties offers it, every kind of request moves the right
// bytes in and out of memory the host cannot touch, only after the
// copies' events are done, and closeColl gives back every shadow, stream
// and event.
TEST(CollNetCuda, GpuMemoryIsStagedThroughPinnedHostMemory)
{
	void *fl = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(fl, nullptr) << dlerror();
	FakeCuda fake{};
	fake.alloc = reinterpret_cast<int (*)(unsigned long long *, size_t)>(
		dlsym(fl, "cuMemAlloc_v2"));
	fake.alloc_vmm = reinterpret_cast<int (*)(unsigned long long *, size_t)>(
		dlsym(fl, "fake_cuda_alloc_vmm"));
	fake.set_current = reinterpret_cast<void (*)(int)>(dlsym(fl, "fake_cuda_set_current"));
	fake.release = reinterpret_cast<int (*)(unsigned long long)>(dlsym(fl, "cuMemFree_v2"));
	fake.htod = reinterpret_cast<int (*)(unsigned long long, const void *, size_t)>(
		dlsym(fl, "cuMemcpyHtoD_v2"));
	fake.dtoh = reinterpret_cast<int (*)(void *, unsigned long long, size_t)>(
		dlsym(fl, "cuMemcpyDtoH_v2"));
	fake.outstanding = reinterpret_cast<long (*)()>(dlsym(fl, "fake_cuda_outstanding"));
	ASSERT_TRUE(fake.alloc && fake.alloc_vmm && fake.set_current && fake.release && fake.htod &&
		    fake.dtoh && fake.outstanding);
	void *lib = nullptr;
	Api a;
	std::string err;
	ASSERT_TRUE(ibvc_nccl::load(NCCL_PLUGIN_PATH, 12, &lib, &a, &err)) << err;
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	setenv("IBV_COLL_NCCL_CUDA_LIB", FAKE_CUDA_PATH, 1);
	unsetenv("IBV_COLL_NCCL_SWITCH");
	std::vector<int> st = ibvc_nccl::run_ranks(4, 120, true,
						   [&] { return cuda_main(a, fake); });
	for (int r = 0; r < 4; r++)
		EXPECT_EQ(st[size_t(r)], 0)
			<< "rank " << r << (st[size_t(r)] < 0 ? " hung: killed" : " failed");
	unsetenv("IBV_COLL_NCCL_CUDA_LIB");
	dlclose(lib);
	dlclose(fl);
}

INSTANTIATE_TEST_SUITE_P(Versions, CollNet,
			 ::testing::Values(Param{10, 2}, Param{11, 4}, Param{12, 2}, Param{12, 4},
					   Param{12, 8}),
			 [](const ::testing::TestParamInfo<Param> &i) {
				 return "v" + std::to_string(i.param.version) + "_" +
					std::to_string(i.param.ranks) + "ranks";
			 });

} // namespace
