/* ibv_coll_rc_bw: helpers, the check pattern, the TCP side channel and the
 * device and its queue pairs. */
#define _XOPEN_SOURCE 700

#include "rc_bw.h"
int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, PROG ": ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* The bytes of slot `slot` of QP `q` at message size `size`: every slot and
 * every size differ, so a message landing in the wrong place or a stale
 * one is caught. */
uint64_t pat_word(size_t size, unsigned q, size_t slot, size_t i)
{
	uint64_t z = (uint64_t)size * 0x9e3779b97f4a7c15ull ^ ((uint64_t)q << 56) ^
		     (uint64_t)slot * 0xbf58476d1ce4e5b9ull ^ (i + 1) * 0x94d049bb133111ebull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint8_t *slot_at(struct bw *b, unsigned q, size_t s)
{
	return b->buf + ((size_t)q * b->nslots + s) * b->slot_len;
}

void pat_fill(uint8_t *p, size_t size, unsigned q, size_t slot)
{
	for (size_t i = 0; i < size; i += 8) {
		uint64_t w = pat_word(size, q, slot, i / 8);
		memcpy(p + i, &w, size - i < 8 ? size - i : 8);
	}
}

int pat_ok(const uint8_t *p, size_t size, unsigned q, size_t slot)
{
	for (size_t i = 0; i < size; i += 8) {
		uint64_t w = pat_word(size, q, slot, i / 8);
		if (memcmp(p + i, &w, size - i < 8 ? size - i : 8))
			return 0;
	}
	return 1;
}

/* ---- the TCP side channel ------------------------------------------- */

int say(int fd, const char *fmt, ...)
{
	char line[LINE];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	for (int off = 0; off < n;) {
		ssize_t w = write(fd, line + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fail("the peer went away (%s)", strerror(w < 0 ? errno : EPIPE));
			return -1;
		}
		off += (int)w;
	}
	return 0;
}

/* One line, without its newline; timeout_ms < 0 waits for ever, 0 only
 * looks.  1 for a line, 0 when none came in time, -1 when the peer went. */
int hear(int fd, char *line, int timeout_ms)
{
	size_t n = 0;
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, n ? 10000 : timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && !n)
			return 0;
		ssize_t got = r > 0 ? read(fd, line + n, 1) : -1;
		if (got <= 0 || n == LINE - 1) {
			fail("the peer went away or sent garbage");
			return -1;
		}
		if (line[n] == '\n') {
			line[n] = 0;
			return 1;
		}
		n++;
	}
}

int tcp_open(const char *host, unsigned port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = host ? 0 : AI_PASSIVE};
	struct addrinfo *res, *ai;
	char svc[16];
	snprintf(svc, sizeof(svc), "%u", port);
	int r = getaddrinfo(host, svc, &hints, &res);
	if (r) {
		fail("%s:%u: %s", host ? host : "*", port, gai_strerror(r));
		return -1;
	}
	int fd = -1, err = 0;
	int64_t until = now_ns() + STALL_NS;
	do {
		for (ai = res; ai && fd < 0; ai = ai->ai_next) {
			fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			int one = 1;
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (fd >= 0 &&
			    (host ? connect(fd, ai->ai_addr, ai->ai_addrlen)
				  : bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1))) {
				err = errno;
				close(fd);
				fd = -1;
			}
		}
		/* The server may not listen yet. */
		if (fd < 0 && host && err == ECONNREFUSED)
			nanosleep(&(struct timespec){0, 100000000}, NULL);
	} while (fd < 0 && host && err == ECONNREFUSED && now_ns() < until);
	freeaddrinfo(res);
	if (fd < 0) {
		fail("%s TCP port %u: %s", host ? "cannot connect to" : "cannot listen on", port,
		     strerror(err));
		return -1;
	}
	if (!host) {
		int c = accept(fd, NULL, NULL);
		close(fd);
		if (c < 0)
			fail("accept: %s", strerror(errno));
		fd = c;
	}
	return fd;
}

/* ---- the device ------------------------------------------------------ */

unsigned mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

enum ibv_mtu mtu_enum(unsigned bytes)
{
	for (enum ibv_mtu m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
		if (mtu_bytes(m) == bytes)
			return m;
	return (enum ibv_mtu)0;
}

int bw_open(struct bw *b, const struct opts *o)
{
	int n;
	struct ibv_coll_device **list = ibv_get_coll_device_list(&n);
	struct ibv_coll_device *dev = NULL;
	for (int i = 0; list && i < n && !dev; i++)
		if (!o->dev || !strcmp(ibv_get_coll_device_name(list[i]), o->dev))
			dev = list[i];
	if (!dev) {
		fail(o->dev ? "no device %s (ibv_coll_devinfo lists them)" : "no device%s",
		     o->dev ? o->dev : "");
		if (list)
			ibv_free_coll_device_list(list);
		return -1;
	}
	b->ctx = ibv_open_coll_device(dev);
	ibv_free_coll_device_list(list);
	if (!b->ctx) {
		fail("cannot open %s: %s", o->dev ? o->dev : "the device", strerror(errno));
		return -1;
	}
	int err = ibv_query_coll_port(b->ctx, (uint8_t)o->ib_port, &b->port);
	if (!err && o->gid_idx >= (unsigned)b->port.gid_tbl_len)
		err = EINVAL;
	if (!err)
		err = ibv_query_coll_gid(b->ctx, (uint8_t)o->ib_port, (int)o->gid_idx, &b->gid);
	if (err) {
		fail("port %u, gid index %u: %s", o->ib_port, o->gid_idx, strerror(err));
		return -1;
	}
	return 0;
}

/* Buffer, PD, MR, CQ and the QPs in INIT.  max_size: the largest message. */
int bw_setup(struct bw *b, const struct opts *o, size_t max_size)
{
	struct ibv_coll_device_attr da;
	int err = ibv_query_coll_device(b->ctx, &da);
	if (err || max_size > da.max_msg_sz || o->depth > da.max_qp_wr ||
	    (uint64_t)o->qps * o->depth * 2 + 16 > da.max_cqe) {
		fail("size %zu, tx depth %u x %u QPs: beyond the device (max_msg_sz %u, max_qp_wr %u, "
		     "max_cqe %u)",
		     max_size, o->depth, o->qps, da.max_msg_sz, da.max_qp_wr, da.max_cqe);
		return -1;
	}
	b->slot_len = max_size ? (max_size + 63) / 64 * 64 : 64;
	b->nslots = BUF_CAP / (b->slot_len * o->qps);
	b->nslots = b->nslots < 1 ? 1 : b->nslots > o->depth ? o->depth : b->nslots;
	size_t len = b->slot_len * b->nslots * o->qps;
	if (posix_memalign((void **)&b->buf, 4096, len)) {
		fail("cannot allocate %zu bytes", len);
		return -1;
	}
	memset(b->buf, 0, len);
	b->pd = ibv_alloc_coll_pd(b->ctx);
	b->mr = b->pd ? ibv_reg_coll_mr(b->pd, b->buf, len,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
		      : NULL;
	b->cq = b->mr ? ibv_create_coll_cq(b->ctx, (int)(o->qps * o->depth * 2 + 16), NULL, NULL, 0)
		      : NULL;
	if (!b->cq) {
		fail("creating PD, MR (%zu bytes) or CQ: %s", len, strerror(errno));
		return -1;
	}
	for (unsigned q = 0; q < o->qps; q++) {
		struct ibv_coll_qp_init_attr ia = {
			.send_cq = b->cq,
			.recv_cq = b->cq,
			.qp_type = IBV_COLL_QPT_RC,
			.cap = {.max_send_wr = o->depth,
				.max_recv_wr = o->depth,
				.max_send_sge = 1,
				.max_recv_sge = 1},
		};
		struct ibv_coll_qp_attr a = {.qp_state = IBV_QPS_INIT,
					     .port_num = (uint8_t)o->ib_port,
					     .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
		b->qp[q] = ibv_create_coll_qp(b->pd, &ia);
		if (!b->qp[q]) {
			fail("ibv_create_coll_qp: %s", strerror(errno));
			return -1;
		}
		if ((err = ibv_modify_coll_qp(b->qp[q], &a,
					      IBV_COLL_QP_STATE | IBV_COLL_QP_PKEY_INDEX |
						      IBV_COLL_QP_PORT |
						      IBV_COLL_QP_ACCESS_FLAGS))) {
			fail("QP to INIT: %s", strerror(err));
			return -1;
		}
		b->psn[q] = (uint32_t)lrand48() & 0xffffff;
	}
	return 0;
}

int bw_connect(struct bw *b, const struct opts *o, unsigned q)
{
	const struct remote *r = &b->rem[q];
	struct ibv_coll_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu_enum(o->mtu),
		.dest_qp_num = r->qpn,
		.rq_psn = r->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {.dgid = r->gid,
			    .udp_port = r->udp_port,
			    .sgid_index = (uint8_t)o->gid_idx},
	};
	int err = ibv_modify_coll_qp(b->qp[q], &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
					     IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN |
					     IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
					     IBV_COLL_QP_MIN_RNR_TIMER);
	if (!err) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = b->psn[q];
		a.max_rd_atomic = 1;
		err = ibv_modify_coll_qp(b->qp[q], &a,
					 IBV_COLL_QP_STATE | IBV_COLL_QP_TIMEOUT |
						 IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY |
						 IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_MAX_QP_RD_ATOMIC);
	}
	if (err)
		fail("connecting QP %u: %s", q, strerror(err));
	return err ? -1 : 0;
}

void bw_close(struct bw *b, unsigned qps)
{
	for (unsigned q = 0; q < qps; q++)
		if (b->qp[q])
			ibv_destroy_coll_qp(b->qp[q]);
	if (b->cq)
		ibv_destroy_coll_cq(b->cq);
	if (b->mr)
		ibv_dereg_coll_mr(b->mr);
	if (b->pd)
		ibv_dealloc_coll_pd(b->pd);
	if (b->ctx)
		ibv_close_coll_device(b->ctx);
	free(b->buf);
	if (b->sock >= 0)
		close(b->sock);
}

/* Tell the peer our QPs and learn theirs. */
int swap_qps(struct bw *b, const struct opts *o)
{
	char line[LINE], gid[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, b->gid.raw, gid, sizeof(gid));
	for (unsigned q = 0; q < o->qps; q++)
		if (say(b->sock, "qp %06x %06x %u %s %" PRIx64 " %x\n", b->qp[q]->qp_num, b->psn[q],
			b->port.udp_port, gid, (uint64_t)(uintptr_t)b->buf, b->mr->rkey))
			return -1;
	for (unsigned q = 0; q < o->qps; q++) {
		struct remote *r = &b->rem[q];
		unsigned udp;
		if (hear(b->sock, line, 10000) != 1 ||
		    sscanf(line, "qp %x %x %u %45s %" SCNx64 " %x", &r->qpn, &r->psn, &udp, gid,
			   &r->addr, &r->rkey) != 6 ||
		    inet_pton(AF_INET6, gid, r->gid.raw) != 1 || udp > 65535) {
			fail("bad QP line from the peer: %s", line);
			return -1;
		}
		r->udp_port = (uint16_t)udp;
		if (bw_connect(b, o, q))
			return -1;
	}
	return 0;
}
