// The NCCL plugin's point-to-point net, driven as NCCL's net transport
// drives it: the plugin is dlopen()ed and its ncclNetPlugin_v10/v11/v12
// table looked up by name; N forked processes each init, listen and
// publish their handle, connect to the next rank and accept from the
// previous one (calling both again until each gives a comm), register
// memory, keep several sends and receives in flight and test() them,
// check every byte received against a pattern computed here, fill the
// request window (NCCL_NET_MAX_REQUESTS) and close.  Bad arguments must
// give NCCL's error codes with one WARN each.  It links neither the
// plugin nor libibv_coll: it loads the plugin as NCCL does.
#include "nccl_abi.h"
#include "rank_check.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 4;
constexpr int kInFlight = 8;
constexpr size_t kSizes[] = {0, 1, 4096, 65536 + 7, 1 << 20};
constexpr size_t kSlot = (1 << 20) + 4096; // a message and room past it
constexpr size_t kSlack = 100;		   // odd receives offer this much more
constexpr int kWindow = NCCL_NET_MAX_REQUESTS;
constexpr auto kChildLimit = std::chrono::seconds(50);
constexpr auto kParentLimit = std::chrono::seconds(60);

// The rendezvous NCCL's bootstrap provides: handles all-gathered, barriers.
struct Shared {
	std::atomic<int> arrived[3];
	char handles[kMaxRanks][NCCL_NET_HANDLE_MAXSIZE];
};

int g_rank;
int g_warns; // WARN lines the plugin logged in this process
Clock::time_point g_deadline;

void logger(ncclDebugLogLevel level, unsigned long, const char *, int, const char *fmt, ...)
{
	if (level != NCCL_LOG_WARN)
		return;
	g_warns++;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[rank %d] WARN %s\n", g_rank, line); // one write: ranks interleave
}

// The byte at off of message index of size bytes that rank sends.
uint8_t pattern(int rank, size_t size, int index, size_t off)
{
	uint64_t x = (uint64_t(rank) + 1) * 0x9e3779b97f4a7c15ull ^ uint64_t(size) * 0xff51afd7ull ^
		     uint64_t(index) * 0xc4ceb9fe1ull ^ uint64_t(off) * 0x2545f491ull;
	x ^= x >> 29;
	return uint8_t(x ^ (x >> 11) ^ (x >> 37));
}

bool late()
{
	return Clock::now() > g_deadline;
}

bool barrier(Shared *sh, int phase, int n)
{
	sh->arrived[phase]++;
	while (sh->arrived[phase].load() < n && !late())
		usleep(1000);
	return sh->arrived[phase].load() >= n;
}


template <typename Net> struct PropsOf;
template <> struct PropsOf<ncclNet_v10_t> {
	using type = ncclNetProperties_v10_t;
};
template <> struct PropsOf<ncclNet_v11_t> {
	using type = ncclNetProperties_v11_t;
};
template <> struct PropsOf<ncclNet_v12_t> {
	using type = ncclNetProperties_v12_t;
};

// One rank's connections and memory, as NCCL's net transport keeps them.
template <typename Net> struct Rank {
	const Net *net = nullptr;
	int rank = 0, n = 0;
	void *ctx = nullptr, *lc = nullptr, *sc = nullptr, *rc = nullptr;
	void *smh = nullptr, *rmh = nullptr;
	std::vector<uint8_t> sbuf, rbuf;
	size_t max_p2p = 0;

	uint8_t *sslot(int i) { return sbuf.data() + size_t(i) * kSlot; }
	uint8_t *rslot(int i) { return rbuf.data() + size_t(i) * kSlot; }
};

template <typename Net> bool open_net(Rank<Net> &r, Shared *sh)
{
	const Net *net = r.net;
	constexpr bool v10 = std::is_same_v<Net, ncclNet_v10_t>;
	if constexpr (v10) {
		CHECK(net->init(logger, nullptr) == ncclSuccess, "init");
	} else {
		ncclNetCommConfig_v10_t cfg{-1};
		CHECK(net->init(&r.ctx, 0x1234, &cfg, logger, nullptr) == ncclSuccess, "init");
	}
	int ndev = 0;
	CHECK(net->devices(&ndev) == ncclSuccess && ndev == 1, "ndev %d", ndev);
	typename PropsOf<Net>::type p;
	memset(&p, 0x5a, sizeof(p));
	CHECK(net->getProperties(0, &p) == ncclSuccess, "getProperties");
	CHECK(p.name != nullptr, "no name");
	CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport %#x", p.ptrSupport);
	CHECK(p.maxRecvs == 1, "maxRecvs %d", p.maxRecvs);
	CHECK(p.maxP2pBytes >= (1 << 20), "maxP2pBytes %zu", p.maxP2pBytes);
	if constexpr (!v10)
		CHECK(p.maxMultiRequestSize == 1, "maxMultiRequestSize %d", p.maxMultiRequestSize);
	if constexpr (std::is_same_v<Net, ncclNet_v12_t>)
		CHECK(p.railId == 0 && p.planeId == 0, "rail %d plane %d", p.railId, p.planeId);
	r.max_p2p = p.maxP2pBytes;
	char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
	if constexpr (v10)
		CHECK(net->listen(0, handle, &r.lc) == ncclSuccess && r.lc, "listen");
	else
		CHECK(net->listen(r.ctx, 0, handle, &r.lc) == ncclSuccess && r.lc, "listen");
	memcpy(sh->handles[r.rank], handle, sizeof(handle));
	CHECK(barrier(sh, 0, r.n), "not every rank published its handle");
	return true;
}

// Connect to the next rank and accept from the previous one, calling both
// again until each gives a comm, as NCCL's proxy does.
template <typename Net> bool connect_ring(Rank<Net> &r, Shared *sh)
{
	const Net *net = r.net;
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	memcpy(handle, sh->handles[(r.rank + 1) % r.n], sizeof(handle));
	ncclNetDeviceHandle_t *sdev = nullptr, *rdev = nullptr;
	while ((!r.sc || !r.rc) && !late()) {
		if (!r.sc) {
			ncclResult_t res;
			if constexpr (std::is_same_v<Net, ncclNet_v10_t>) {
				ncclNetCommConfig_v10_t cfg{-1};
				res = net->connect(0, &cfg, handle, &r.sc, &sdev);
			} else {
				res = net->connect(r.ctx, 0, handle, &r.sc, &sdev);
			}
			CHECK(res == ncclSuccess, "connect: %d", res);
		}
		if (!r.rc)
			CHECK(net->accept(r.lc, &r.rc, &rdev) == ncclSuccess, "accept");
		usleep(100);
	}
	CHECK(r.sc && r.rc, "connect %p accept %p in time", r.sc, r.rc);
	CHECK(!sdev && !rdev, "a device handle from a host net");
	return true;
}

// Call test() on every request until all are done; sizes[i] gets each size.
template <typename Net> bool wait_all(Rank<Net> &r, std::vector<void *> &reqs, int *sizes)
{
	for (size_t left = reqs.size(); left && !late();) {
		for (size_t i = 0; i < reqs.size(); i++) {
			if (!reqs[i])
				continue;
			int done = 0;
			ncclResult_t res = r.net->test(reqs[i], &done, &sizes[i]);
			CHECK(res == ncclSuccess, "test of request %zu: %d", i, res);
			if (done) {
				reqs[i] = nullptr;
				left--;
			}
		}
		sched_yield();
	}
	for (void *q : reqs)
		CHECK(!q, "requests not done in time");
	return true;
}

template <typename Net> bool post_recv(Rank<Net> &r, void *data, size_t size, void **req)
{
	int tag = 0;
	void *phandle = nullptr;
	while (!*req && !late())
		CHECK(r.net->irecv(r.rc, 1, &data, &size, &tag, &r.rmh, &phandle, req) ==
			      ncclSuccess,
		      "irecv");
	CHECK(*req, "irecv gave no request in time");
	return true;
}

template <typename Net> bool post_send(Rank<Net> &r, void *data, size_t size, void **req)
{
	while (!*req && !late())
		CHECK(r.net->isend(r.sc, data, size, 0, r.smh, nullptr, req) == ncclSuccess,
		      "isend");
	CHECK(*req, "isend gave no request in time");
	return true;
}

// kInFlight messages of each size to the next rank, as many from the
// previous one; every byte checked, and the one past each message.
template <typename Net> bool exchange(Rank<Net> &r)
{
	const int prev = (r.rank + r.n - 1) % r.n;
	for (size_t size : kSizes) {
		std::vector<void *> reqs(2 * kInFlight);
		std::vector<int> sizes(reqs.size(), -1);
		memset(r.rbuf.data(), 0xee, r.rbuf.size());
		for (int i = 0; i < kInFlight; i++) {
			size_t offer = size + (i % 2 ? kSlack : 0);
			CHECK(post_recv(r, r.rslot(i), offer, &reqs[i]), "size %zu", size);
		}
		for (int i = 0; i < kInFlight; i++) {
			for (size_t o = 0; o < size; o++)
				r.sslot(i)[o] = pattern(r.rank, size, i, o);
			CHECK(post_send(r, r.sslot(i), size, &reqs[kInFlight + i]), "size %zu",
			      size);
		}
		CHECK(wait_all(r, reqs, sizes.data()), "size %zu", size);
		for (int i = 0; i < kInFlight; i++) {
			CHECK(sizes[i] == int(size), "received %d of %zu", sizes[i], size);
			CHECK(sizes[kInFlight + i] == int(size), "sent %d of %zu",
			      sizes[kInFlight + i], size);
			const uint8_t *got = r.rslot(i);
			for (size_t o = 0; o < size; o++)
				CHECK(got[o] == pattern(prev, size, i, o),
				      "message %d of %zu bytes: byte %zu is %#x", i, size, o,
				      got[o]);
			CHECK(got[size] == 0xee, "message %d of %zu bytes: written past", i, size);
		}
	}
	return true;
}

// NCCL_NET_MAX_REQUESTS in flight each way, and one more is refused with
// a NULL request, which is no error.
template <typename Net> bool window(Rank<Net> &r)
{
	const int prev = (r.rank + r.n - 1) % r.n;
	const size_t size = 3;
	std::vector<void *> reqs(2 * kWindow);
	std::vector<int> sizes(reqs.size(), -1);
	memset(r.rbuf.data(), 0xee, r.rbuf.size());
	for (int i = 0; i < kWindow; i++)
		CHECK(post_recv(r, r.rbuf.data() + 8 * i, size, &reqs[i]), "window");
	for (int i = 0; i < kWindow; i++) {
		for (size_t o = 0; o < size; o++)
			r.sbuf[8 * i + o] = pattern(r.rank, size, 100 + i, o);
		CHECK(post_send(r, r.sbuf.data() + 8 * i, size, &reqs[kWindow + i]), "window");
	}
	void *extra = nullptr, *data = r.rbuf.data() + 8 * kWindow, *ph = nullptr;
	size_t sz = size;
	int tag = 0;
	CHECK(r.net->irecv(r.rc, 1, &data, &sz, &tag, &r.rmh, &ph, &extra) == ncclSuccess && !extra,
	      "a receive past the window");
	CHECK(r.net->isend(r.sc, r.sbuf.data(), size, 0, r.smh, nullptr, &extra) == ncclSuccess &&
		      !extra,
	      "a send past the window");
	CHECK(wait_all(r, reqs, sizes.data()), "window");
	for (int i = 0; i < kWindow; i++) {
		CHECK(sizes[i] == int(size) && sizes[kWindow + i] == int(size), "window sizes");
		for (size_t o = 0; o < size; o++)
			CHECK(r.rbuf[8 * i + o] == pattern(prev, size, 100 + i, o),
			      "window message %d byte %zu", i, o);
	}
	return true;
}

// Each bad call gives NCCL's error code and exactly one WARN line.
template <typename Net> bool bad_arguments(Rank<Net> &r)
{
	const Net *net = r.net;
	void *mh = nullptr, *req = nullptr, *ph = nullptr,
	     *data[2] = {r.rbuf.data(), r.rbuf.data()};
	size_t sizes[2] = {8, 8};
	int tags[2] = {0, 0};
	void *mhs[2] = {r.rmh, r.rmh}, *phs[2] = {nullptr, nullptr};
	int warns = g_warns;
	CHECK(net->regMr(r.sc, r.sbuf.data(), 4096, NCCL_PTR_CUDA, &mh) == ncclInvalidArgument,
	      "regMr of cuda memory");
	CHECK(g_warns == ++warns, "regMr cuda: %d warns", g_warns - warns + 1);
	CHECK(net->regMrDmaBuf(r.sc, r.sbuf.data(), 4096, NCCL_PTR_DMABUF, 0, 0, &mh) ==
		      ncclInvalidArgument,
	      "regMrDmaBuf");
	CHECK(g_warns == ++warns, "regMrDmaBuf warns");
	CHECK(net->irecv(r.rc, 2, data, sizes, tags, mhs, phs, &req) == ncclInvalidArgument && !req,
	      "irecv of two");
	CHECK(g_warns == ++warns, "irecv n=2 warns");
	CHECK(net->isend(r.sc, r.sbuf.data(), 16, 0, nullptr, nullptr, &req) ==
			      ncclInvalidArgument &&
		      !req,
	      "isend without a memory handle");
	CHECK(g_warns == ++warns, "isend null mhandle warns");
	CHECK(net->isend(r.sc, r.sbuf.data(), r.max_p2p + 1, 0, r.smh, nullptr, &req) ==
			      ncclInvalidArgument &&
		      !req,
	      "isend over maxP2pBytes");
	CHECK(g_warns == ++warns, "isend too big warns");
	int isz = 8;
	CHECK(net->iflush(r.rc, 1, data, &isz, mhs, &req) == ncclSuccess && !req, "iflush");
	CHECK(net->getDeviceMr(r.rc, r.rmh, &ph) == ncclInternalError, "getDeviceMr");
	CHECK(net->irecvConsumed(r.rc, 1, nullptr) == ncclSuccess, "irecvConsumed");
	decltype(typename PropsOf<Net>::type{}.vProps) vp{};
	vp.ndevs = 1;
	int d = -1;
	CHECK(net->makeVDevice(&d, &vp) == ncclInvalidUsage, "makeVDevice");
	CHECK(g_warns == warns, "warnings for calls that are no error");
	return true;
}

// A message longer than the receive posted for it fails on both sides:
// test() reports an error, with one WARN per connection.
template <typename Net> bool overrun(Rank<Net> &r)
{
	std::vector<void *> reqs(2);
	int sizes[2];
	int warns = g_warns;
	CHECK(post_recv(r, r.rbuf.data(), 10, &reqs[0]), "overrun");
	CHECK(post_send(r, r.sbuf.data(), 100, &reqs[1]), "overrun");
	ncclResult_t res[2] = {ncclSuccess, ncclSuccess};
	for (int left = 2; left && !late(); sched_yield())
		for (int i = 0; i < 2; i++) {
			int done = 0;
			if (reqs[i] &&
			    (res[i] = r.net->test(reqs[i], &done, &sizes[i])) != ncclSuccess)
				done = 1;
			if (reqs[i] && done) {
				reqs[i] = nullptr;
				left--;
			}
		}
	CHECK(!reqs[0] && !reqs[1], "overrun requests not done in time");
	CHECK(res[0] == ncclSystemError || res[0] == ncclRemoteError, "short receive: %d", res[0]);
	CHECK(res[1] == ncclRemoteError, "send into a short receive: %d", res[1]);
	CHECK(g_warns == warns + 2, "%d warns for two failed connections", g_warns - warns);
	return true;
}

template <typename Net> bool close_net(Rank<Net> &r)
{
	const Net *net = r.net;
	CHECK(net->deregMr(r.sc, r.smh) == ncclSuccess, "deregMr send");
	CHECK(net->deregMr(r.rc, r.rmh) == ncclSuccess, "deregMr recv");
	CHECK(net->closeSend(r.sc) == ncclSuccess, "closeSend");
	CHECK(net->closeRecv(r.rc) == ncclSuccess, "closeRecv");
	CHECK(net->closeListen(r.lc) == ncclSuccess, "closeListen");
	if constexpr (!std::is_same_v<Net, ncclNet_v10_t>) {
		CHECK(net->finalize(r.ctx) == ncclSuccess, "finalize");
		// The last finalize closed the device: no device, no properties.
		int ndev = -1;
		CHECK(net->devices(&ndev) == ncclSuccess && ndev == 0,
		      "devices after the last finalize: %d", ndev);
		typename PropsOf<Net>::type p{};
		CHECK(net->getProperties(0, &p) == ncclInvalidArgument,
		      "getProperties after the last finalize");
	}
	return true;
}

template <typename Net> bool run_rank(const Net *net, int rank, int n, Shared *sh)
{
	Rank<Net> r;
	r.net = net;
	r.rank = rank;
	r.n = n;
	r.sbuf.assign(kInFlight * kSlot, 0);
	r.rbuf.assign(kInFlight * kSlot, 0);
	CHECK(open_net(r, sh), "setup");
	CHECK(connect_ring(r, sh), "connect");
	CHECK(net->regMr(r.sc, r.sbuf.data(), r.sbuf.size(), NCCL_PTR_HOST, &r.smh) ==
			      ncclSuccess &&
		      r.smh,
	      "regMr send");
	CHECK(net->regMr(r.rc, r.rbuf.data(), r.rbuf.size(), NCCL_PTR_HOST, &r.rmh) ==
			      ncclSuccess &&
		      r.rmh,
	      "regMr recv");
	CHECK(exchange(r), "exchange");
	CHECK(window(r), "window");
	CHECK(bad_arguments(r), "bad arguments");
	// Nobody breaks a connection a peer is still using.
	CHECK(barrier(sh, 1, n), "not every rank finished");
	CHECK(overrun(r), "overrun");
	CHECK(barrier(sh, 2, n), "not every rank saw the overrun");
	return close_net(r);
}

int child(int version, const void *table, int rank, int n, Shared *sh)
{
	g_rank = rank;
	g_deadline = Clock::now() + kChildLimit;
	bool ok = false;
	if (version == 10)
		ok = run_rank(static_cast<const ncclNet_v10_t *>(table), rank, n, sh);
	else if (version == 11)
		ok = run_rank(static_cast<const ncclNet_v11_t *>(table), rank, n, sh);
	else
		ok = run_rank(static_cast<const ncclNet_v12_t *>(table), rank, n, sh);
	return ok ? 0 : 1;
}

// The child's end.  v11 and v12 have finalize, which closed the device:
// exit(), so that LeakSanitizer checks the child.  v10 has none and its
// device stays open for the life of the process (as under NCCL): _exit(),
// as LeakSanitizer's stop-the-world fails now and then with the device's
// engine thread running; AddressSanitizer still checks every access.
[[noreturn]] void finish_child(int code, int version)
{
	fflush(stderr);
	if (version > 10)
		exit(code);
	_exit(code);
}

class NetP2p : public testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(NetP2p, Ring)
{
	auto [version, n] = GetParam();
	setenv("IBV_COLL_NCCL_DEVICE", "crxe_lo", 1);
	void *lib = dlopen(NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	std::string sym = "ncclNetPlugin_v" + std::to_string(version);
	const void *table = dlsym(lib, sym.c_str());
	ASSERT_NE(table, nullptr) << sym;
	void *mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(mem, MAP_FAILED);
	auto *sh = new (mem) Shared{};
	fflush(stdout);
	fflush(stderr);
	std::vector<pid_t> pids;
	for (int rank = 0; rank < n; rank++) {
		pid_t pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0)
			finish_child(child(version, table, rank, n, sh), version);
		pids.push_back(pid);
	}
	std::vector<int> status(n, 0);
	std::vector<bool> reaped(n, false);
	auto end = Clock::now() + kParentLimit;
	for (int left = n; left;) {
		for (int i = 0; i < n; i++)
			if (!reaped[i] && waitpid(pids[i], &status[i], WNOHANG) > 0) {
				reaped[i] = true;
				left--;
			}
		if (!left)
			break;
		if (Clock::now() > end) {
			ADD_FAILURE() << "ranks still running after 60 s: killed";
			for (int i = 0; i < n; i++)
				if (!reaped[i]) {
					kill(pids[i], SIGKILL);
					waitpid(pids[i], &status[i], 0);
				}
			break;
		}
		usleep(10000);
	}
	for (int i = 0; i < n; i++)
		EXPECT_TRUE(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0)
			<< "rank " << i << " status " << status[i];
	munmap(mem, sizeof(Shared));
	dlclose(lib);
}

INSTANTIATE_TEST_SUITE_P(Net, NetP2p,
			 testing::Combine(testing::Values(10, 11, 12), testing::Values(2, 4)),
			 [](const testing::TestParamInfo<std::tuple<int, int>> &i) {
				 return "v" + std::to_string(std::get<0>(i.param)) + "_n" +
					std::to_string(std::get<1>(i.param));
			 });

} // namespace
