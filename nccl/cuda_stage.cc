// CUDA staging (cuda_stage.h) through the CUDA driver API, opened with
// dlopen.  The driver's C interface is declared here from its reference
// documentation, only the few calls used: every handle an opaque pointer,
// every call returning a CUresult (0 success, 600 "not ready").  The
// versioned names (_v2) are the ones the driver exports for the 64-bit
// interface; when the CUDA headers are found at build time,
// tests/nccl/test_nccl_cuda_abi.cc checks these signatures against them.
#include "cuda_stage.h"

#include "cuda_api.h"
#include "plugin.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

namespace ibv_coll::nccl::cuda {

namespace {

struct Driver {
	bool ok = false;
	CuApi f{};
};

Driver &driver()
{
	static Driver d;
	static std::once_flag once;
	std::call_once(once, [] {
		const std::string &named = config().cuda_lib;
		const char *path = named.empty() ? "libcuda.so.1" : named.c_str();
		void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			// No driver is the usual case of a host without a GPU:
			// INFO, unless the user named one.
			if (!named.empty())
				NCCL_PLUGIN_WARN("IBV_COLL_NCCL_CUDA_LIB=%s: %s; host memory only",
						 path, dlerror());
			else
				NCCL_PLUGIN_INFO(NCCL_INIT | NCCL_NET,
						 "no CUDA driver (%s): host memory only", path);
			return;
		}
		if (!cu_resolve(lib, &d.f)) {
			NCCL_PLUGIN_WARN("%s lacks a call of the CUDA driver API this plugin uses; "
					 "host memory only",
					 path);
			return;
		}
		int n = 0;
		CUresult e = d.f.init(0);
		if (!e)
			e = d.f.device_count(&n);
		if (e || n < 1) {
			NCCL_PLUGIN_INFO(NCCL_INIT | NCCL_NET,
					 "CUDA driver %s: %s; host memory only", path,
					 e ? "cuInit failed" : "no device");
			return;
		}
		d.ok = true;
		NCCL_PLUGIN_INFO(NCCL_INIT | NCCL_NET,
				 "CUDA driver %s, %d device(s): GPU memory staged through pinned "
				 "host memory",
				 path, n);
	});
	return d;
}

const char *err_str(CUresult e)
{
	const char *s = nullptr;
	if (driver().f.error_string(e, &s) || !s)
		return "unknown CUDA error";
	return s;
}

// A call made in ctx (pushed, then popped): its result.
template <typename F> CUresult in_ctx(void *ctx, F f)
{
	const CuApi &a = driver().f;
	if (CUresult e = a.ctx_push(ctx))
		return e;
	CUresult e = f(a);
	void *was;
	a.ctx_pop(&was);
	return e;
}

CuDevPtr dev_ptr(const void *p)
{
	return CuDevPtr(reinterpret_cast<uintptr_t>(p));
}

bool check(CUresult e, const char *what, const char *call)
{
	if (!e)
		return true;
	NCCL_PLUGIN_WARN("%s: %s: %s (CUDA error %d)", what, call, err_str(e), e);
	return false;
}

} // namespace

bool available()
{
	return driver().ok;
}

void *context_of(const void *p)
{
	if (!p || !available())
		return nullptr;
	const CuApi &a = driver().f;
	unsigned type = 0;
	void *ctx = nullptr;
	if (a.pointer_attr(&type, kCuPointerAttrMemoryType, dev_ptr(p)) ||
	    type != kCuMemoryTypeDevice)
		return nullptr;
	// Memory of the virtual memory management calls (cuMemCreate and
	// cuMemMap, NCCL's default since 2.19) belongs to no context: the
	// calling thread's current one (NCCL's proxy thread has its device's)
	// does the copies.
	if (a.pointer_attr(&ctx, kCuPointerAttrContext, dev_ptr(p)) || !ctx)
		if (a.ctx_current(&ctx))
			ctx = nullptr;
	return ctx;
}

void *host_alloc(void *ctx, size_t n)
{
	void *p = nullptr;
	CUresult e = in_ctx(ctx, [&](const CuApi &a) { return a.host_alloc(&p, n); });
	if (e) {
		NCCL_PLUGIN_WARN("regMr: %zu bytes of pinned host memory: %s (CUDA error %d)", n,
				 err_str(e), e);
		return nullptr;
	}
	return p;
}

void host_free(void *ctx, void *p)
{
	if (p)
		check(in_ctx(ctx, [&](const CuApi &a) { return a.host_free(p); }), "deregMr",
		      "cuMemFreeHost");
}

bool stream_create(void *ctx, Stream *s)
{
	void *st = nullptr;
	if (!check(in_ctx(ctx,
			  [&](const CuApi &a) {
				  return a.stream_create(&st, kCuStreamNonBlocking);
			  }),
		   "regMr", "cuStreamCreate"))
		return false;
	*s = {ctx, st};
	return true;
}

void stream_destroy(Stream *s)
{
	if (s->stream)
		check(in_ctx(s->ctx, [&](const CuApi &a) { return a.stream_destroy(s->stream); }),
		      "closeColl", "cuStreamDestroy");
	*s = {};
}

bool copy_in(const Stream &s, void *dst, const void *src, size_t n, const char *what)
{
	return check(in_ctx(s.ctx,
			    [&](const CuApi &a) {
				    return a.dtoh_async(dst, dev_ptr(src), n, s.stream);
			    }),
		     what, "copy from GPU memory");
}

bool finish(const Stream &s, const char *what)
{
	return !s.stream ||
	       check(in_ctx(s.ctx, [&](const CuApi &a) { return a.stream_sync(s.stream); }), what,
		     "cuStreamSynchronize");
}

bool copy_out(const Stream &s, void *dst, const void *src, size_t n, const char *what)
{
	return check(in_ctx(s.ctx,
			    [&](const CuApi &a) {
				    return a.htod_async(dev_ptr(dst), src, n, s.stream);
			    }),
		     what, "copy to GPU memory");
}

bool record(const Stream &s, void **ev, const char *what)
{
	return check(in_ctx(s.ctx,
			    [&](const CuApi &a) {
				    CUresult e = *ev ? 0
						     : a.event_create(ev, kCuEventDisableTiming);
				    return e ? e : a.event_record(*ev, s.stream);
			    }),
		     what, "cuEventRecord");
}

int query(const Stream &s, void *ev, const char *what)
{
	CUresult e = in_ctx(s.ctx, [&](const CuApi &a) { return a.event_query(ev); });
	if (e == kCuNotReady)
		return 0;
	return check(e, what, "cuEventQuery") ? 1 : -1;
}

void event_destroy(const Stream &s, void *ev)
{
	if (ev)
		check(in_ctx(s.ctx, [&](const CuApi &a) { return a.event_destroy(ev); }),
		      "closeColl", "cuEventDestroy");
}

} // namespace ibv_coll::nccl::cuda
