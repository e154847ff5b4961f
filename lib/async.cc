// Asynchronous events (as libibverbs' ibv_get_async_event): each context
// has a queue the provider fills and an eventfd the application may poll.
#include "core.h"

#include <sys/eventfd.h>
#include <unistd.h>

using namespace ibv_coll;
using namespace ibv_coll::core;

namespace ibv_coll::core {

AsyncQueue::~AsyncQueue()
{
	if (fd >= 0)
		close(fd);
}

void async_event(Context *ctx, const ibv_coll_async_event &ev)
{
	if (ev.event_type == IBV_EVENT_DEVICE_FATAL)
		ctx->fatal = true;
	AsyncQueue &q = ctx->async;
	std::lock_guard lk(q.mu);
	if (q.tail - q.head == AsyncQueue::kDepth) {
		IBVC_ERR("core", "async event queue full; event {} lost", int(ev.event_type));
		return;
	}
	q.ev[q.tail++ % AsyncQueue::kDepth] = ev;
	// The count cannot reach the eventfd's limit (kDepth at most).
	uint64_t one = 1;
	if (q.fd >= 0 && write(q.fd, &one, sizeof(one)) != sizeof(one))
		IBVC_ERR("core", "async event fd: {}", util::errstr(errno));
}

// At open, once the provider made the context: the fd, counting what the
// provider queued already.  0 or errno.
int async_open(Context *ctx)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (fd < 0)
		return errno;
	AsyncQueue &q = ctx->async;
	std::lock_guard lk(q.mu);
	uint64_t n = q.tail - q.head;
	if (n && write(fd, &n, sizeof(n)) != sizeof(n)) {
		int err = errno;
		close(fd);
		return err;
	}
	q.fd = fd;
	ctx->pub.async_fd = fd;
	return 0;
}

} // namespace ibv_coll::core

IBV_COLL_EXPORT int ibv_get_coll_async_event(ibv_coll_context *context, ibv_coll_async_event *ev)
{
	if (!context || !ev)
		return EINVAL;
	AsyncQueue &q = to_core(context)->async;
	// A semaphore eventfd: each read takes one event's count, blocking
	// (or EAGAIN, non-blocking) while there is none.
	uint64_t v;
	ssize_t r;
	do
		r = read(context->async_fd, &v, sizeof(v));
	while (r < 0 && errno == EINTR);
	if (r != sizeof(v))
		return r < 0 ? errno : EIO;
	std::lock_guard lk(q.mu);
	if (q.head == q.tail)
		return EIO; // cannot happen: the count follows the queue
	*ev = q.ev[q.head++ % AsyncQueue::kDepth];
	return 0;
}

IBV_COLL_EXPORT void ibv_ack_coll_async_event(ibv_coll_async_event *ev)
{
	// The events delivered name a device or a port, whose destruction
	// waits for nothing: as libibverbs' acknowledgement of those, this
	// releases nothing.  Applications call it for every event (the
	// libibverbs pattern), which keeps them right if events naming a CQ
	// or QP are delivered later.
	(void)ev;
}
