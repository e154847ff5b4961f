// CUDA device memory for the CollNet side (ibv_coll_nccl(7), Memory): the
// device reads and writes host memory only, so a registration of GPU
// memory gets a shadow of pinned host memory that the device uses; a
// request's GPU sources are copied into it before its WR is posted and
// its GPU destinations out of it before test() says done, all on the
// communicator's stream (no call waits for a copy).  The CUDA
// driver (libcuda.so.1, or IBV_COLL_NCCL_CUDA_LIB) is opened at run time,
// so the plugin needs no CUDA to build or to load; without a driver and a
// device it offers host memory only, as before.
#pragma once

#include <cstddef>

namespace ibv_coll::nccl::cuda {

// Whether GPU memory can be staged: the driver opened, initialised, and
// a device present.  Decided once per process; one INFO line says which.
bool available();
// The CUDA context of device memory at p, or nullptr when p is not
// device memory (host memory, or no driver).
void *context_of(const void *p);
// Pinned host memory of n bytes, or nullptr after a WARN.
void *host_alloc(void *ctx, size_t n);
void host_free(void *ctx, void *p);

// A stream, and an event on it, of one context.  Each call that fails
// says so in one WARN line naming what it did (the request's `what`).
struct Stream {
	void *ctx = nullptr;
	void *stream = nullptr;
};
bool stream_create(void *ctx, Stream *s);
void stream_destroy(Stream *s);
// n bytes of device memory at src into host memory at dst, queued on
// the stream (dst is written once the stream's next event is done).
bool copy_in(const Stream &s, void *dst, const void *src, size_t n, const char *what);
// Wait for everything queued on the stream.
bool finish(const Stream &s, const char *what);
// n bytes of host memory at src into device memory at dst, queued on the
// stream (src must stay until the stream's next event is done).
bool copy_out(const Stream &s, void *dst, const void *src, size_t n, const char *what);
// Record *ev (made on first use) after what the stream has queued.
bool record(const Stream &s, void **ev, const char *what);
// 1 when the event is done, 0 while not, -1 on an error (after a WARN).
int query(const Stream &s, void *ev, const char *what);
void event_destroy(const Stream &s, void *ev);

} // namespace ibv_coll::nccl::cuda
