// Entry points for protection domains, memory regions, completion
// channels and CQs: the checks common to every provider, then the op.
#include "core.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <vector>

using namespace ibv_coll;
using namespace ibv_coll::core;

IBV_COLL_EXPORT ibv_coll_pd *ibv_alloc_coll_pd(ibv_coll_context *context)
{
	return guard_ptr<ibv_coll_pd>("ibv_alloc_coll_pd", [&]() -> ibv_coll_pd * {
		if (!context) {
			errno = EINVAL;
			return nullptr;
		}
		Pd *pd = context->device->ops->alloc_pd(to_core(context));
		if (!pd)
			return nullptr;
		pd->pub.context = context;
		to_core(context)->children++;
		return &pd->pub;
	});
}

IBV_COLL_EXPORT int ibv_dealloc_coll_pd(ibv_coll_pd *pd)
{
	return guard_int("ibv_dealloc_coll_pd", [&] {
		if (!pd)
			return EINVAL;
		if (to_core(pd)->children.load())
			return EBUSY;
		Context *ctx = to_core(pd->context);
		int err = pd->context->device->ops->dealloc_pd(to_core(pd));
		if (!err)
			ctx->children--;
		return err;
	});
}

IBV_COLL_EXPORT ibv_coll_mr *ibv_reg_coll_mr(ibv_coll_pd *pd, void *addr, size_t length, int access)
{
	return guard_ptr<ibv_coll_mr>("ibv_reg_coll_mr", [&]() -> ibv_coll_mr * {
		const int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ;
		// Remote write needs local write, as in the IBTA's rules.
		if (!pd || (!addr && length) || (access & ~known) ||
		    ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) ||
		    uintptr_t(addr) + length < uintptr_t(addr)) {
			errno = EINVAL;
			return nullptr;
		}
		Mr *mr = pd->context->device->ops->reg_mr(to_core(pd), addr, length, access);
		if (!mr)
			return nullptr;
		mr->pub.context = pd->context;
		mr->pub.pd = pd;
		mr->pub.addr = addr;
		mr->pub.length = length;
		to_core(pd)->children++;
		return &mr->pub;
	});
}

IBV_COLL_EXPORT int ibv_dereg_coll_mr(ibv_coll_mr *mr)
{
	return guard_int("ibv_dereg_coll_mr", [&] {
		if (!mr)
			return EINVAL;
		Pd *pd = to_core(mr->pd);
		int err = mr->context->device->ops->dereg_mr(to_core(mr));
		if (!err)
			pd->children--;
		return err;
	});
}

IBV_COLL_EXPORT ibv_coll_comp_channel *ibv_create_coll_comp_channel(ibv_coll_context *context)
{
	return guard_ptr<ibv_coll_comp_channel>(
		"ibv_create_coll_comp_channel", [&]() -> ibv_coll_comp_channel * {
			if (!context) {
				errno = EINVAL;
				return nullptr;
			}
			int fds[2];
			if (pipe2(fds, O_CLOEXEC))
				return nullptr;
			// The write end never blocks the device; the read end blocks
			// until the application sets O_NONBLOCK on it.
			fcntl(fds[1], F_SETFL, O_NONBLOCK);
			auto *ch = new CompChannel();
			ch->pub.context = context;
			ch->pub.fd = fds[0];
			ch->wfd = fds[1];
			to_core(context)->children++;
			return &ch->pub;
		});
}

IBV_COLL_EXPORT int ibv_destroy_coll_comp_channel(ibv_coll_comp_channel *channel)
{
	return guard_int("ibv_destroy_coll_comp_channel", [&] {
		if (!channel)
			return EINVAL;
		CompChannel *ch = to_core(channel);
		if (ch->users.load())
			return EBUSY;
		to_core(channel->context)->children--;
		close(channel->fd);
		close(ch->wfd);
		delete ch;
		return 0;
	});
}

namespace ibv_coll::core {

void cq_event(Cq *cq)
{
	ibv_coll_comp_channel *chp = cq->pub.channel;
	if (!chp)
		return;
	CompChannel *ch = to_core(chp);
	ibv_coll_cq *p = &cq->pub;
	cq->events_written++;
	if (write(ch->wfd, &p, sizeof(p)) != sizeof(p)) {
		cq->events_written--;
		IBVC_ERR("core", "completion channel fd {} is full; event for cq {} lost", chp->fd,
			 cq->pub.handle);
	}
}

} // namespace ibv_coll::core

IBV_COLL_EXPORT ibv_coll_cq *ibv_create_coll_cq(ibv_coll_context *context, int cqe,
						void *cq_context, ibv_coll_comp_channel *channel,
						int comp_vector)
{
	return guard_ptr<ibv_coll_cq>("ibv_create_coll_cq", [&]() -> ibv_coll_cq * {
		if (!context || cqe < 1 || (channel && channel->context != context) ||
		    comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
			errno = EINVAL;
			return nullptr;
		}
		Cq *cq = context->device->ops->create_cq(to_core(context), cqe,
							 channel ? to_core(channel) : nullptr);
		if (!cq)
			return nullptr;
		cq->pub.context = context;
		cq->pub.channel = channel;
		cq->pub.cq_context = cq_context;
		if (channel)
			to_core(channel)->users++;
		to_core(context)->children++;
		return &cq->pub;
	});
}

// The events of CQ c still unread in channel ch go (they would name a CQ
// that is gone), the other CQs' go back in: what the kernel does with a
// destroyed CQ's pending events under libibverbs.  Never blocks.
static void discard_unread(CompChannel *ch, Cq *c)
{
	std::vector<ibv_coll_cq *> others;
	for (;;) {
		pollfd pf{ch->pub.fd, POLLIN, 0};
		ibv_coll_cq *p;
		if (poll(&pf, 1, 0) != 1 || read(ch->pub.fd, &p, sizeof(p)) != sizeof(p))
			break;
		if (p == &c->pub)
			c->events_acked++;
		else
			others.push_back(p);
	}
	for (ibv_coll_cq *p : others)
		if (write(ch->wfd, &p, sizeof(p)) != sizeof(p))
			IBVC_ERR("core", "completion channel fd {}: an event for cq {} lost",
				 ch->pub.fd, p->handle);
}

IBV_COLL_EXPORT int ibv_destroy_coll_cq(ibv_coll_cq *cq)
{
	return guard_int("ibv_destroy_coll_cq", [&] {
		if (!cq)
			return EINVAL;
		Cq *c = to_core(cq);
		if (c->users.load())
			return EBUSY; // QPs still report here
		if (cq->channel && c->events_written.load() > c->events_acked.load())
			discard_unread(to_core(cq->channel), c);
		// An event read and not acknowledged.
		if (c->events_written.load() > c->events_acked.load())
			return EBUSY;
		ibv_coll_comp_channel *ch = cq->channel;
		Context *ctx = to_core(cq->context);
		int err = cq->context->device->ops->destroy_cq(c);
		if (err)
			return err;
		if (ch)
			to_core(ch)->users--;
		ctx->children--;
		return 0;
	});
}

IBV_COLL_EXPORT int ibv_poll_coll_cq(ibv_coll_cq *cq, int num_entries, ibv_coll_wc *wc)
{
	try {
		if (!cq || num_entries < 0 || (num_entries && !wc))
			return -EINVAL;
		int n = cq->context->device->ops->poll_cq(to_core(cq), num_entries, wc);
		return n;
	} catch (...) {
		IBVC_ERR("core", "ibv_poll_coll_cq: unexpected exception");
		return -EIO;
	}
}

IBV_COLL_EXPORT int ibv_req_notify_coll_cq(ibv_coll_cq *cq, int solicited_only)
{
	return guard_int("ibv_req_notify_coll_cq", [&] {
		if (!cq)
			return EINVAL;
		return cq->context->device->ops->req_notify_cq(to_core(cq), solicited_only);
	});
}

IBV_COLL_EXPORT int ibv_get_coll_cq_event(ibv_coll_comp_channel *channel, ibv_coll_cq **cq,
					  void **cq_context)
{
	if (!channel || !cq || !cq_context)
		return EINVAL;
	ibv_coll_cq *p;
	ssize_t r;
	do
		r = read(channel->fd, &p, sizeof(p));
	while (r < 0 && errno == EINTR);
	if (r != sizeof(p))
		return r < 0 ? errno : EIO; // EAGAIN: non-blocking and no event
	*cq = p;
	*cq_context = p->cq_context;
	return 0;
}

IBV_COLL_EXPORT void ibv_ack_coll_cq_events(ibv_coll_cq *cq, unsigned int nevents)
{
	if (cq)
		to_core(cq)->events_acked += nevents;
}
