/* ibv_coll_rc_pingpong: the verbs objects, posting, waiting for completions. */
#define _XOPEN_SOURCE 700

#include "pingpong.h"
/* ------------------------------------------------------------------ */
/* Verbs resources                                                     */
/* ------------------------------------------------------------------ */

struct ibv_coll_device *pick_device(struct ibv_coll_device **list, int num, const char *name)
{
	if (name) {
		for (int i = 0; i < num; i++) {
			const char *n = ibv_get_coll_device_name(list[i]);

			if (n && strcmp(n, name) == 0)
				return list[i];
		}
		return NULL;
	}
	for (int i = 0; i < num; i++) {
		const char *n = ibv_get_coll_device_name(list[i]);

		if (n && strcmp(n, "crxe_lo") == 0)
			return list[i];
	}
	return num > 0 ? list[0] : NULL;
}

void drain_events(struct pingpong *pp)
{
	for (;;) {
		struct ibv_coll_cq *ev_cq;
		void *ev_ctx;
		int err = ibv_get_coll_cq_event(pp->channel, &ev_cq, &ev_ctx);

		if (err == EINTR)
			continue;
		if (err) {
			if (err != EAGAIN)
				fail("ibv_get_coll_cq_event: %s", strerror(err));
			return;
		}
		ibv_ack_coll_cq_events(ev_cq, 1);
	}
}

/* Teardown in the reverse order of creation; 0 or -1 when a step failed. */
int pp_close(struct pingpong *pp)
{
	int ret = 0, err;

	if (pp->qp && (err = ibv_destroy_coll_qp(pp->qp))) {
		fail("ibv_destroy_coll_qp: %s", strerror(err));
		ret = -1;
	}
	/* With the QP gone no completion can come; read and acknowledge any
	 * event still waiting in the channel (one raised by a completion that
	 * was polled before its event was read), or the CQ stays busy. */
	if (pp->channel && pp->cq)
		drain_events(pp);
	if (pp->mr && (err = ibv_dereg_coll_mr(pp->mr))) {
		fail("ibv_dereg_coll_mr: %s", strerror(err));
		ret = -1;
	}
	if (pp->cq && (err = ibv_destroy_coll_cq(pp->cq))) {
		fail("ibv_destroy_coll_cq: %s", strerror(err));
		ret = -1;
	}
	if (pp->channel && (err = ibv_destroy_coll_comp_channel(pp->channel))) {
		fail("ibv_destroy_coll_comp_channel: %s", strerror(err));
		ret = -1;
	}
	if (pp->pd && (err = ibv_dealloc_coll_pd(pp->pd))) {
		fail("ibv_dealloc_coll_pd: %s", strerror(err));
		ret = -1;
	}
	if (pp->ctx && (err = ibv_close_coll_device(pp->ctx))) {
		fail("ibv_close_coll_device: %s", strerror(err));
		ret = -1;
	}
	free(pp->buf);
	if (pp->sock >= 0)
		close(pp->sock);
	memset(pp, 0, sizeof(*pp));
	pp->sock = -1;
	return ret;
}

int post_recvs(struct pingpong *pp, unsigned int size, int n)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)pp->rbuf,
		.length = size,
		.lkey = pp->mr->lkey,
	};
	struct ibv_coll_recv_wr wr = {
		.wr_id = WRID_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ibv_coll_recv_wr *bad;

	for (int i = 0; i < n; i++) {
		int err = ibv_post_coll_recv(pp->qp, &wr, &bad);

		if (err) {
			fail("ibv_post_coll_recv: %s", strerror(err));
			return -1;
		}
		pp->routs++;
	}
	return 0;
}

int post_send(struct pingpong *pp, unsigned int size)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)pp->sbuf,
		.length = size,
		.lkey = pp->mr->lkey,
	};
	struct ibv_coll_send_wr wr = {
		.wr_id = WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_COLL_WR_SEND,
		.send_flags = IBV_COLL_SEND_SIGNALED,
	};
	struct ibv_coll_send_wr *bad;
	int err = ibv_post_coll_send(pp->qp, &wr, &bad);

	if (err) {
		fail("ibv_post_coll_send: %s", strerror(err));
		return -1;
	}
	return 0;
}

/* The device's and the port's attributes, and the options checked against
 * them (a zero MTU becomes the port's active one).  0, or -1 with a
 * message printed. */
static int pp_query(struct pingpong *pp, const char *name, struct options *o)
{
	int err;

	if ((err = ibv_query_coll_device(pp->ctx, &pp->dev_attr))) {
		fail("ibv_query_coll_device: %s", strerror(err));
		return -1;
	}
	if ((err = ibv_query_coll_port(pp->ctx, (uint8_t)o->ib_port, &pp->port_attr))) {
		fail("ibv_query_coll_port(%d): %s", o->ib_port, strerror(err));
		return -1;
	}
	if (pp->port_attr.state != IBV_PORT_ACTIVE) {
		fail("port %d of %s is not active (state %d)", o->ib_port, name,
		     (int)pp->port_attr.state);
		return -1;
	}
	if (o->mtu == 0) {
		o->mtu = mtu_from_enum(pp->port_attr.active_mtu);
		if (!o->mtu) {
			fail("the port reports an invalid active MTU %d",
			     (int)pp->port_attr.active_mtu);
			return -1;
		}
	} else if (o->mtu > mtu_from_enum(pp->port_attr.active_mtu)) {
		fail("MTU %u is larger than the active MTU %u of %s port %d", o->mtu,
		     mtu_from_enum(pp->port_attr.active_mtu), name, o->ib_port);
		return -1;
	}
	if (o->size > pp->dev_attr.max_msg_sz) {
		fail("size %u is larger than the device's max_msg_sz %" PRIu32, o->size,
		     pp->dev_attr.max_msg_sz);
		return -1;
	}
	if ((uint32_t)o->rx_depth + 1 > pp->dev_attr.max_qp_wr ||
	    (uint32_t)o->rx_depth + 1 > pp->dev_attr.max_cqe) {
		fail("rx-depth %d is too large for %s (max_qp_wr %" PRIu32 ", max_cqe %" PRIu32 ")",
		     o->rx_depth, name, pp->dev_attr.max_qp_wr, pp->dev_attr.max_cqe);
		return -1;
	}
	if (o->gid_idx >= pp->port_attr.gid_tbl_len) {
		fail("gid index %d is out of range: %s port %d has %d GIDs", o->gid_idx, name,
		     o->ib_port, pp->port_attr.gid_tbl_len);
		return -1;
	}
	if ((err = ibv_query_coll_gid(pp->ctx, (uint8_t)o->ib_port, o->gid_idx, &pp->gid))) {
		fail("ibv_query_coll_gid(%d): %s", o->gid_idx, strerror(err));
		return -1;
	}
	return 0;
}

/* Open the device and create everything up to a QP in INIT with its
 * receives posted.  0, or -1 with a message printed. */
int pp_init(struct pingpong *pp, struct ibv_coll_device *dev, struct options *o)
{
	const char *name = ibv_get_coll_device_name(dev);
	long page = sysconf(_SC_PAGESIZE);
	size_t half;
	int err;

	if (page <= 0)
		page = 4096;
	pp->ctx = ibv_open_coll_device(dev);
	if (!pp->ctx) {
		fail("cannot open device %s: %s", name, strerror(errno));
		return -1;
	}
	if (pp_query(pp, name, o))
		return -1;

	/* One buffer to send from and one to receive into, page-aligned. */
	half = ((size_t)(o->size ? o->size : 1) + (size_t)page - 1) / (size_t)page * (size_t)page;
	pp->buf_len = 2 * half;
	if ((err = posix_memalign(&pp->buf, (size_t)page, pp->buf_len))) {
		fail("cannot allocate %zu bytes: %s", pp->buf_len, strerror(err));
		pp->buf = NULL;
		return -1;
	}
	memset(pp->buf, 0x7b, pp->buf_len);
	pp->sbuf = pp->buf;
	pp->rbuf = (uint8_t *)pp->buf + half;

	if (o->use_event) {
		pp->channel = ibv_create_coll_comp_channel(pp->ctx);
		if (!pp->channel) {
			fail("ibv_create_coll_comp_channel: %s", strerror(errno));
			return -1;
		}
		int fl = fcntl(pp->channel->fd, F_GETFL);

		if (fl < 0 || fcntl(pp->channel->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			fail("making the completion channel non-blocking: %s", strerror(errno));
			return -1;
		}
	}
	pp->pd = ibv_alloc_coll_pd(pp->ctx);
	if (!pp->pd) {
		fail("ibv_alloc_coll_pd: %s", strerror(errno));
		return -1;
	}
	pp->mr = ibv_reg_coll_mr(pp->pd, pp->buf, pp->buf_len, IBV_ACCESS_LOCAL_WRITE);
	if (!pp->mr) {
		fail("ibv_reg_coll_mr(%zu bytes): %s", pp->buf_len, strerror(errno));
		return -1;
	}
	pp->cq = ibv_create_coll_cq(pp->ctx, o->rx_depth + 1, pp, pp->channel, 0);
	if (!pp->cq) {
		fail("ibv_create_coll_cq(%d): %s", o->rx_depth + 1, strerror(errno));
		return -1;
	}

	struct ibv_coll_qp_init_attr ia = {
		.send_cq = pp->cq,
		.recv_cq = pp->cq,
		.cap =
			{
				.max_send_wr = 1,
				.max_recv_wr = (uint32_t)o->rx_depth,
				.max_send_sge = 1,
				.max_recv_sge = 1,
			},
		.qp_type = IBV_COLL_QPT_RC,
	};
	pp->qp = ibv_create_coll_qp(pp->pd, &ia);
	if (!pp->qp) {
		fail("ibv_create_coll_qp: %s", strerror(errno));
		return -1;
	}

	struct ibv_coll_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = (uint8_t)o->ib_port,
		.qp_access_flags = 0,
	};
	err = ibv_modify_coll_qp(pp->qp, &attr,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_PKEY_INDEX | IBV_COLL_QP_PORT |
					 IBV_COLL_QP_ACCESS_FLAGS);
	if (err) {
		fail("modifying the QP to INIT: %s", strerror(err));
		return -1;
	}
	if (post_recvs(pp, o->size, o->rx_depth))
		return -1;
	if (o->use_event && (err = ibv_req_notify_coll_cq(pp->cq, 0))) {
		fail("ibv_req_notify_coll_cq: %s", strerror(err));
		return -1;
	}
	pp->psn = (uint32_t)lrand48() & 0xffffff;
	return 0;
}

/* INIT -> RTR -> RTS towards the peer.  0, or -1 with a message printed. */
int pp_connect(struct pingpong *pp, const struct options *o, const struct dest *rem,
	       unsigned int mtu)
{
	struct ibv_coll_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu_to_enum(mtu),
		.dest_qp_num = rem->qpn,
		.rq_psn = rem->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = QP_MIN_RNR_TIMER,
		.ah_attr =
			{
				.dgid = rem->gid,
				.udp_port = (uint16_t)rem->udp_port,
				.sgid_index = (uint8_t)o->gid_idx,
			},
	};
	int err;

	if (gid_is_v4(&pp->gid) != gid_is_v4(&rem->gid)) {
		const char *mine = gid_is_v4(&pp->gid) ? "IPv4" : "IPv6";
		const char *theirs = gid_is_v4(&rem->gid) ? "IPv4" : "IPv6";

		refuse(pp->sock,
		       "the client's GID is %s, the server's %s: choose GIDs of one "
		       "address family with --gid-idx",
		       o->servername ? mine : theirs, o->servername ? theirs : mine);
		return -1;
	}
	err = ibv_modify_coll_qp(pp->qp, &attr,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
					 IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN |
					 IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
					 IBV_COLL_QP_MIN_RNR_TIMER);
	if (err) {
		refuse(o->servername ? -1 : pp->sock, "the %s cannot move its QP to RTR: %s",
		       o->servername ? "client" : "server", strerror(err));
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = QP_TIMEOUT;
	attr.retry_cnt = QP_RETRY_CNT;
	attr.rnr_retry = QP_RNR_RETRY;
	attr.sq_psn = pp->psn;
	attr.max_rd_atomic = 1;
	err = ibv_modify_coll_qp(pp->qp, &attr,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT |
					 IBV_COLL_QP_RNR_RETRY | IBV_COLL_QP_SQ_PSN |
					 IBV_COLL_QP_MAX_QP_RD_ATOMIC);
	if (err) {
		refuse(o->servername ? -1 : pp->sock, "the %s cannot move its QP to RTS: %s",
		       o->servername ? "client" : "server", strerror(err));
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Waiting for completions                                             */
/* ------------------------------------------------------------------ */

void timeout_message(void)
{
	fail("no completion for %d s: the peer stopped answering", TIMEOUT_MS / 1000);
}

/* Busy-poll until at least one completion, or the deadline.  The count,
 * or -1 with a message printed. */
int wait_poll(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline)
{
	int64_t next_check = now_ns() + PEER_CHECK_NS;

	for (unsigned int spin = 1;; spin++) {
		int n = ibv_poll_coll_cq(pp->cq, MAX_WC, wc);

		if (n < 0) {
			fail("ibv_poll_coll_cq: %s", strerror(-n));
			return -1;
		}
		if (n > 0)
			return n;
		if (spin % 64)
			continue;
		int64_t now = now_ns();

		if (now >= deadline) {
			timeout_message();
			return -1;
		}
		if (now >= next_check) {
			if (check_peer(pp))
				return -1;
			next_check = now + PEER_CHECK_NS;
		}
	}
}

/* Sleep on the completion channel until at least one completion, or the
 * deadline.  The count, or -1 with a message printed. */
int wait_event(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline)
{
	for (;;) {
		int n = ibv_poll_coll_cq(pp->cq, MAX_WC, wc);

		if (n < 0) {
			fail("ibv_poll_coll_cq: %s", strerror(-n));
			return -1;
		}
		if (n > 0)
			return n;

		/* Empty, and the CQ armed or an event waiting: sleep. */
		struct pollfd pfd[2] = {
			{.fd = pp->channel->fd, .events = POLLIN},
			{.fd = pp->sock, .events = POLLIN},
		};
		nfds_t nfds = pp->watch_sock && pp->sock >= 0 ? 2 : 1;
		int left = ms_left(deadline);

		if (left == 0) {
			timeout_message();
			return -1;
		}
		int r = poll(pfd, nfds, left);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			fail("poll on the completion channel: %s", strerror(errno));
			return -1;
		}
		if (r == 0) {
			timeout_message();
			return -1;
		}
		if (nfds == 2 && pfd[1].revents && check_peer(pp))
			return -1;
		if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			fail("the completion channel failed (revents %#x)",
			     (unsigned int)pfd[0].revents);
			return -1;
		}
		if (!(pfd[0].revents & POLLIN))
			continue;

		struct ibv_coll_cq *ev_cq;
		void *ev_ctx;
		int err = ibv_get_coll_cq_event(pp->channel, &ev_cq, &ev_ctx);

		if (err == EAGAIN)
			continue;
		if (err) {
			fail("ibv_get_coll_cq_event: %s", strerror(err));
			return -1;
		}
		if (ev_cq != pp->cq || ev_ctx != pp) {
			fail("completion event for an unknown CQ %p", (void *)ev_cq);
			return -1;
		}
		ibv_ack_coll_cq_events(ev_cq, 1);
		/* Re-arm before polling, so that nothing arriving after the
		 * poll below goes unannounced. */
		if ((err = ibv_req_notify_coll_cq(pp->cq, 0))) {
			fail("ibv_req_notify_coll_cq: %s", strerror(err));
			return -1;
		}
	}
}
