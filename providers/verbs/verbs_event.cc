// verbs: the context's event thread.  It sleeps in poll(2) on the real
// completion channel and the context's async event fd; each CQ event is
// acknowledged to libibverbs at once and handed to core::cq_event(), which
// puts it on the application's channel exactly as crxe's engine does.
// Async events (a QP gone to error, a port going down) are logged; those
// of the device and its ports are passed to the application's.
#include "verbs.h"

#include "util/log.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace ibv_coll::verbs {
namespace {

int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

void forward_cq_events(Context *ctx)
{
	std::lock_guard lk(ctx->ev_mu);
	// The channel is non-blocking: a CQ destroyed since poll(2) took its
	// events with it, and the read then says EAGAIN instead of blocking.
	for (;;) {
		ibv_cq *vcq;
		void *cq_ctx;
		if (ibv_get_cq_event(ctx->vch, &vcq, &cq_ctx))
			return;
		// Our application acknowledges to the core (ibv_ack_coll_cq_events);
		// libibverbs' count is settled here, so its destroy never waits.
		ibv_ack_cq_events(vcq, 1);
		core::cq_event(static_cast<core::Cq *>(cq_ctx));
	}
}

void log_async(Context *ctx, const ibv_async_event &e)
{
	const char *what = ibv_event_type_str(e.event_type);
	switch (e.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		IBVC_WARN("verbs", "{}: qp {:#x}: {}", ctx->dev->name, e.element.qp->qp_num, what);
		break;
	case IBV_EVENT_CQ_ERR: IBVC_WARN("verbs", "{}: cq: {}", ctx->dev->name, what); break;
	case IBV_EVENT_PORT_ERR:
		IBVC_WARN("verbs", "{}: port {}: {}", ctx->dev->name, e.element.port_num, what);
		break;
	case IBV_EVENT_DEVICE_FATAL: IBVC_ERR("verbs", "{}: {}", ctx->dev->name, what); break;
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		IBVC_DEBUG("verbs", "{}: qp {:#x}: {}", ctx->dev->name, e.element.qp->qp_num, what);
		break;
	default: IBVC_INFO("verbs", "{}: {}", ctx->dev->name, what);
	}
}

// The events that name the device or a port pass to the application
// (ibv_get_coll_async_event).  Those naming a QP, CQ or SRQ are only
// logged: passing them on would make destroying the object wait for the
// application's acknowledgement.
void forward_async(Context *ctx, const ibv_async_event &e)
{
	ibv_coll_async_event ev{};
	ev.event_type = e.event_type;
	switch (e.event_type) {
	case IBV_EVENT_DEVICE_FATAL: ev.element.port_num = 0; break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE: ev.element.port_num = e.element.port_num; break;
	default: return;
	}
	core::async_event(ctx, ev);
}

void drain_async(Context *ctx)
{
	// Acknowledged at once: destroying a QP or CQ waits for its events.
	ibv_async_event e;
	while (ibv_get_async_event(ctx->vctx, &e) == 0) {
		log_async(ctx, e);
		forward_async(ctx, e);
		ibv_ack_async_event(&e);
	}
}

void event_loop(Context *ctx)
{
	pthread_setname_np(pthread_self(), "ibvc-verbs-ev");
	pollfd fds[3] = {
		{ctx->stop_fd, POLLIN, 0},
		{ctx->vch->fd, POLLIN, 0},
		{ctx->vctx->async_fd, POLLIN, 0},
	};
	for (;;) {
		if (poll(fds, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			IBVC_ERR("verbs", "{}: event thread: poll: {}", ctx->dev->name,
				 util::errstr(errno));
			return;
		}
		if (fds[0].revents)
			return;
		if (fds[1].revents & POLLIN)
			forward_cq_events(ctx);
		if (fds[2].revents & POLLIN)
			drain_async(ctx);
		// A descriptor in error (the device was unplugged) is dropped
		// rather than spun on.
		for (int i = 1; i < 3; i++) {
			if (fds[i].fd >= 0 && fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
				IBVC_WARN("verbs", "{}: {} event fd failed; no more {} events",
					  ctx->dev->name, i == 1 ? "completion" : "async",
					  i == 1 ? "completion" : "async");
				fds[i].fd = -1;
			}
		}
	}
}

} // namespace

int start_events(Context *ctx)
{
	if (int err = set_nonblock(ctx->vch->fd))
		return err;
	if (int err = set_nonblock(ctx->vctx->async_fd))
		return err;
	ctx->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ctx->stop_fd < 0)
		return errno;
	ctx->ev_thread = std::thread(event_loop, ctx);
	return 0;
}

void stop_events(Context *ctx)
{
	if (ctx->ev_thread.joinable()) {
		// An eventfd write fails only when its counter is near 2^64.
		uint64_t one = 1;
		if (write(ctx->stop_fd, &one, sizeof(one)) != sizeof(one))
			IBVC_ERR("verbs", "{}: waking the event thread: {}", ctx->dev->name,
				 util::errstr(errno));
		ctx->ev_thread.join();
	}
	if (ctx->stop_fd >= 0)
		close(ctx->stop_fd);
	ctx->stop_fd = -1;
}

} // namespace ibv_coll::verbs
