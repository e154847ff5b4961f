// A CUDA driver for the tests without a GPU: the calls of
// nccl/cuda_api.h, plus cuMemAlloc/cuMemFree and the synchronous copies
// the tests fill and read "GPU memory" with.  The plugin opens it with
// IBV_COLL_NCCL_CUDA_LIB, as it would open libcuda.so.1.
//
// It is strict where a mistake in the plugin would pass unseen on a real
// GPU only by luck:
//   - GPU memory is a memfd mapped twice: the address handed out has no
//     access at all (the host touching it, or the device reading it
//     directly, faults), and the copies go through a second, private
//     mapping;
//   - asynchronous copies only happen when their stream is synchronised
//     or an event recorded after them is queried, and the first query of
//     an event says "not ready": a result read before its event is done is
//     the old memory;
//   - every call that works on a context needs the context current
//     (pushed), as the driver does;
//   - memory from fake_cuda_alloc_vmm belongs to no context, as memory
//     of cuMemCreate/cuMemMap (NCCL's default) does: the plugin must use
//     the thread's current one (fake_cuda_set_current sets it);
//   - what is allocated and not freed is counted (fake_cuda_outstanding).
#include "cuda_api.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

using ibv_coll::nccl::cuda::CuDevPtr;
using ibv_coll::nccl::cuda::CUresult;

namespace {

constexpr CUresult kInvalidValue = 1, kInvalidContext = 201, kNotReady = 600;

struct Alloc {
	char *dev;  // no access
	char *view; // read-write, the same pages
	size_t len;
	bool vmm; // no context of its own
};

struct Op {
	char *to;
	const char *from;
	size_t len;
};

struct Stream {
	std::deque<Op> ops;
	uint64_t queued = 0, done = 0; // ops ever queued, and run
};

struct Event {
	Stream *s = nullptr;
	uint64_t at = 0; // ops queued before the record
	bool asked = false;
};

std::mutex g_mu;
std::vector<Alloc> g_allocs;
long g_host_allocs, g_streams, g_events;
int g_ctx; // the one context: its address
thread_local std::vector<void *> t_ctx;

bool in_ctx()
{
	return !t_ctx.empty() && t_ctx.back() == &g_ctx;
}

const Alloc *alloc_of(CuDevPtr p)
{
	auto *c = reinterpret_cast<char *>(uintptr_t(p));
	for (const Alloc &a : g_allocs)
		if (c >= a.dev && c < a.dev + a.len)
			return &a;
	return nullptr;
}

// The read-write view of [p, p + n) of GPU memory, or nullptr.
char *view_of(CuDevPtr p, size_t n)
{
	auto *c = reinterpret_cast<char *>(uintptr_t(p));
	const Alloc *a = alloc_of(p);
	return a && n <= size_t(a->dev + a->len - c) ? a->view + (c - a->dev) : nullptr;
}

CUresult alloc(CuDevPtr *p, size_t n, bool vmm)
{
	size_t len = (n + 4095) & ~size_t(4095);
	int fd = memfd_create("fake_cuda", 0);
	if (fd < 0 || ftruncate(fd, off_t(len)))
		return 2; // out of memory
	void *dev = mmap(nullptr, len, PROT_NONE, MAP_SHARED, fd, 0);
	void *view = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (dev == MAP_FAILED || view == MAP_FAILED)
		return 2;
	std::lock_guard<std::mutex> g(g_mu);
	g_allocs.push_back({static_cast<char *>(dev), static_cast<char *>(view), len, vmm});
	*p = CuDevPtr(uintptr_t(dev));
	return 0;
}

void run(Stream *s, uint64_t upto)
{
	while (s->done < upto && !s->ops.empty()) {
		Op o = s->ops.front();
		s->ops.pop_front();
		memcpy(o.to, o.from, o.len);
		s->done++;
	}
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) long fake_cuda_outstanding()
{
	std::lock_guard<std::mutex> g(g_mu);
	return long(g_allocs.size()) + g_host_allocs + g_streams + g_events;
}

__attribute__((visibility("default"))) CUresult cuInit(unsigned)
{
	return 0;
}

__attribute__((visibility("default"))) CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuPointerGetAttribute(void *data, int attr,
								      CuDevPtr p)
{
	std::lock_guard<std::mutex> g(g_mu);
	const Alloc *a = alloc_of(p);
	if (!a)
		return kInvalidValue; // as the driver says of plain host memory
	if (attr == ibv_coll::nccl::cuda::kCuPointerAttrMemoryType)
		*static_cast<unsigned *>(data) = ibv_coll::nccl::cuda::kCuMemoryTypeDevice;
	else if (attr == ibv_coll::nccl::cuda::kCuPointerAttrContext)
		*static_cast<void **>(data) = a->vmm ? nullptr : &g_ctx;
	else
		return kInvalidValue;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuCtxPushCurrent_v2(void *ctx)
{
	if (ctx != &g_ctx)
		return kInvalidContext;
	t_ctx.push_back(ctx);
	return 0;
}

__attribute__((visibility("default"))) CUresult cuCtxPopCurrent_v2(void **ctx)
{
	if (t_ctx.empty())
		return kInvalidContext;
	if (ctx)
		*ctx = t_ctx.back();
	t_ctx.pop_back();
	return 0;
}

__attribute__((visibility("default"))) CUresult cuCtxGetCurrent(void **ctx)
{
	*ctx = t_ctx.empty() ? nullptr : t_ctx.back();
	return 0;
}

// The calling thread's current context (as cuCtxSetCurrent), or none.
__attribute__((visibility("default"))) void fake_cuda_set_current(int on)
{
	t_ctx.clear();
	if (on)
		t_ctx.push_back(&g_ctx);
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CuDevPtr *p, size_t n)
{
	return alloc(p, n, false);
}

// GPU memory of no context, as cuMemCreate and cuMemMap make it.
__attribute__((visibility("default"))) CUresult fake_cuda_alloc_vmm(CuDevPtr *p, size_t n)
{
	return alloc(p, n, true);
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CuDevPtr p)
{
	std::lock_guard<std::mutex> g(g_mu);
	for (size_t i = 0; i < g_allocs.size(); i++)
		if (g_allocs[i].dev == reinterpret_cast<char *>(uintptr_t(p))) {
			munmap(g_allocs[i].dev, g_allocs[i].len);
			munmap(g_allocs[i].view, g_allocs[i].len);
			g_allocs.erase(g_allocs.begin() + long(i));
			return 0;
		}
	return kInvalidValue;
}

__attribute__((visibility("default"))) CUresult cuMemcpyHtoD_v2(CuDevPtr dst, const void *src,
								size_t n)
{
	std::lock_guard<std::mutex> g(g_mu);
	char *v = view_of(dst, n);
	if (!v)
		return kInvalidValue;
	memcpy(v, src, n);
	return 0;
}

__attribute__((visibility("default"))) CUresult cuMemcpyDtoH_v2(void *dst, CuDevPtr src, size_t n)
{
	std::lock_guard<std::mutex> g(g_mu);
	char *v = view_of(src, n);
	if (!v)
		return kInvalidValue;
	memcpy(dst, v, n);
	return 0;
}

__attribute__((visibility("default"))) CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	if (!in_ctx())
		return kInvalidContext;
	*p = aligned_alloc(4096, (n + 4095) & ~size_t(4095));
	std::lock_guard<std::mutex> g(g_mu);
	g_host_allocs++;
	return *p ? 0 : 2;
}

__attribute__((visibility("default"))) CUresult cuMemFreeHost(void *p)
{
	if (!in_ctx())
		return kInvalidContext;
	free(p);
	std::lock_guard<std::mutex> g(g_mu);
	g_host_allocs--;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuStreamCreate(void **s, unsigned)
{
	if (!in_ctx())
		return kInvalidContext;
	*s = new Stream;
	std::lock_guard<std::mutex> g(g_mu);
	g_streams++;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuStreamDestroy_v2(void *s)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	auto *st = static_cast<Stream *>(s);
	run(st, st->queued);
	delete st;
	g_streams--;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuStreamSynchronize(void *s)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	auto *st = static_cast<Stream *>(s);
	run(st, st->queued);
	return 0;
}

__attribute__((visibility("default"))) CUresult cuMemcpyDtoHAsync_v2(void *dst, CuDevPtr src,
								     size_t n, void *s)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	const char *v = view_of(src, n);
	if (!v)
		return kInvalidValue;
	auto *st = static_cast<Stream *>(s);
	st->ops.push_back({static_cast<char *>(dst), v, n});
	st->queued++;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuMemcpyHtoDAsync_v2(CuDevPtr dst, const void *src,
								     size_t n, void *s)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	char *v = view_of(dst, n);
	if (!v)
		return kInvalidValue;
	auto *st = static_cast<Stream *>(s);
	st->ops.push_back({v, static_cast<const char *>(src), n});
	st->queued++;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuEventCreate(void **e, unsigned)
{
	if (!in_ctx())
		return kInvalidContext;
	*e = new Event;
	std::lock_guard<std::mutex> g(g_mu);
	g_events++;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuEventRecord(void *e, void *s)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	auto *ev = static_cast<Event *>(e);
	ev->s = static_cast<Stream *>(s);
	ev->at = ev->s->queued;
	ev->asked = false;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuEventQuery(void *e)
{
	if (!in_ctx())
		return kInvalidContext;
	std::lock_guard<std::mutex> g(g_mu);
	auto *ev = static_cast<Event *>(e);
	if (!ev->s || ev->s->done >= ev->at)
		return 0;
	if (!ev->asked) {
		ev->asked = true;
		return kNotReady;
	}
	run(ev->s, ev->at);
	return 0;
}

__attribute__((visibility("default"))) CUresult cuEventDestroy_v2(void *e)
{
	if (!in_ctx())
		return kInvalidContext;
	delete static_cast<Event *>(e);
	std::lock_guard<std::mutex> g(g_mu);
	g_events--;
	return 0;
}

__attribute__((visibility("default"))) CUresult cuGetErrorString(CUresult e, const char **s)
{
	*s = e == kInvalidValue	    ? "invalid argument"
	     : e == kInvalidContext ? "invalid device context"
	     : e == kNotReady	    ? "device not ready"
				    : "fake CUDA error";
	return 0;
}

} // extern "C"
