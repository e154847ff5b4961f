/*
 * ibv_coll_rc_pingpong - bounce a SEND between two RC queue pairs, in the
 * manner of ibv_rc_pingpong, and report latency and bandwidth.
 *
 *   server:  ibv_coll_rc_pingpong [options]
 *   client:  ibv_coll_rc_pingpong [options] SERVERNAME
 *
 * The two sides meet over TCP (default port 18515) and swap one line each:
 *
 *   QPN:PSN:UDPPORT:GID size=N iters=N mtu=N chk=0|1
 *
 * QPN and PSN in hex (six digits), the UDP port in decimal and the GID in
 * inet_ntop() form (an IPv4 address appears IPv4-mapped, ::ffff:a.b.c.d).
 * The connection stays open while the test runs, so that either side
 * notices when the other goes away, and the two sides swap "done" at the
 * end before they tear down.
 */
#define _XOPEN_SOURCE 700

#include <ibv_coll/ibv_coll.h>
#include "ibvc_version.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TCP_PORT 18515
#define DEFAULT_SIZE 4096
#define DEFAULT_RX_DEPTH 500
#define DEFAULT_ITERS 1000
/* No completion, no answer from the peer, for this long: give up. */
#define TIMEOUT_MS 10000
/* How often a busy-polling side looks at the TCP connection. */
#define PEER_CHECK_NS 50000000ll
#define MAX_WC 16
#define LINE_MAX_LEN 256

/* QP settings the brief of this example fixes. */
#define QP_TIMEOUT 14
#define QP_RETRY_CNT 7
#define QP_RNR_RETRY 7
#define QP_MIN_RNR_TIMER 12

enum wr_kind {
	WRID_RECV = 1,
	WRID_SEND = 2,
};

static const char *prog = "ibv_coll_rc_pingpong";

struct options {
	const char *servername; /* NULL: this side is the server */
	const char *ib_devname;
	unsigned int tcp_port;
	int ib_port;
	unsigned int size;
	unsigned int mtu; /* bytes; 0: the port's active MTU */
	int rx_depth;
	int iters;
	int gid_idx;
	int use_event;
	int chk;
};

/* What one side tells the other. */
struct dest {
	uint32_t qpn;
	uint32_t psn;
	unsigned int udp_port;
	union ibv_gid gid;
	unsigned int size;
	int iters;
	unsigned int mtu;
	int chk;
};

struct pingpong {
	struct ibv_coll_context *ctx;
	struct ibv_coll_comp_channel *channel;
	struct ibv_coll_pd *pd;
	struct ibv_coll_mr *mr;
	struct ibv_coll_cq *cq;
	struct ibv_coll_qp *qp;
	void *buf;
	size_t buf_len;
	uint8_t *sbuf; /* what this side sends */
	uint8_t *rbuf; /* where every receive lands */
	struct ibv_coll_port_attr port_attr;
	struct ibv_coll_device_attr dev_attr;
	union ibv_gid gid;
	uint32_t psn;
	int sock;      /* the TCP connection to the peer, or -1 */
	int watch_sock; /* look for the peer going away while the test runs */
	int routs;     /* receives posted and not yet completed */
};

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Milliseconds left until deadline, at least 0, at most INT_MAX. */
static int ms_left(int64_t deadline)
{
	int64_t left = deadline - now_ns();

	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

static enum ibv_mtu mtu_to_enum(unsigned int bytes)
{
	switch (bytes) {
	case 256:
		return IBV_MTU_256;
	case 512:
		return IBV_MTU_512;
	case 1024:
		return IBV_MTU_1024;
	case 2048:
		return IBV_MTU_2048;
	case 4096:
		return IBV_MTU_4096;
	default:
		return (enum ibv_mtu)0;
	}
}

static unsigned int mtu_from_enum(enum ibv_mtu m)
{
	if (m < IBV_MTU_256 || m > IBV_MTU_4096)
		return 0;
	return 128u << m;
}

static int gid_is_v4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

static void gid_to_str(const union ibv_gid *gid, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* ------------------------------------------------------------------ */
/* The check pattern (-c)                                              */
/* ------------------------------------------------------------------ */

/* One 64-bit word of message `seed`: a mixing function of the seed and
 * the word's index, so that every message and every offset differ. */
static uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	uint64_t z = seed * 0x100000001b3ull + (index + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Message number n sent by the client (1) or the server (0). */
static uint64_t pattern_seed(int n, int from_client)
{
	return ((uint64_t)(unsigned int)n << 1) | (from_client ? 1u : 0u);
}

static void pattern_fill(uint8_t *buf, size_t len, uint64_t seed)
{
	size_t words = len / 8, i;

	for (i = 0; i < words; i++) {
		uint64_t w = pattern_word(seed, i);

		memcpy(buf + i * 8, &w, 8);
	}
	if (len % 8) {
		uint64_t w = pattern_word(seed, words);

		memcpy(buf + words * 8, &w, len % 8);
	}
}

/* Offset of the first byte that differs from the pattern, or len. */
static size_t pattern_check(const uint8_t *buf, size_t len, uint64_t seed)
{
	for (size_t off = 0; off < len; off += 8) {
		uint64_t w = pattern_word(seed, off / 8);
		size_t n = len - off < 8 ? len - off : 8;
		uint8_t want[8];

		memcpy(want, &w, 8);
		if (memcmp(buf + off, want, n) != 0) {
			for (size_t k = 0; k < n; k++)
				if (buf[off + k] != want[k])
					return off + k;
		}
	}
	return len;
}

/* ------------------------------------------------------------------ */
/* The TCP side channel                                                */
/* ------------------------------------------------------------------ */

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read one line (without its newline) within timeout_ms.  0, or -1 with
 * a message printed. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms, const char *what)
{
	int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000ll;
	size_t len = 0;

	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		char c;
		ssize_t n;
		int r = poll(&pfd, 1, ms_left(deadline));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail("waiting for the peer's %s: poll: %s", what, strerror(errno));
			return -1;
		}
		if (r == 0) {
			fail("no %s from the peer within %d s", what, timeout_ms / 1000);
			return -1;
		}
		n = recv(fd, &c, 1, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fail("reading the peer's %s: %s", what, strerror(errno));
			return -1;
		}
		if (n == 0) {
			fail("the peer closed the connection before sending its %s", what);
			return -1;
		}
		if (c == '\n') {
			buf[len] = '\0';
			return 0;
		}
		if (len + 1 >= cap) {
			fail("the peer's %s is too long", what);
			return -1;
		}
		buf[len++] = c;
	}
}

/* Connect to host:port within TIMEOUT_MS, retrying while the server is
 * not listening yet.  A socket, or -1 with a message printed. */
static int tcp_connect(const char *host, unsigned int port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL, *ai;
	char service[16];
	int64_t deadline = now_ns() + (int64_t)TIMEOUT_MS * 1000000ll;
	int last_err = 0;

	snprintf(service, sizeof(service), "%u", port);
	int r = getaddrinfo(host, service, &hints, &res);

	if (r) {
		fail("cannot resolve %s:%u: %s", host, port, gai_strerror(r));
		return -1;
	}
	for (;;) {
		int refused = 0;

		for (ai = res; ai; ai = ai->ai_next) {
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);

			if (fd < 0) {
				last_err = errno;
				continue;
			}
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
				last_err = errno;
			} else {
				struct pollfd pfd = {.fd = fd, .events = POLLOUT};
				int soerr = 0;
				socklen_t sl = sizeof(soerr);

				do
					r = poll(&pfd, 1, ms_left(deadline));
				while (r < 0 && errno == EINTR);
				if (r == 0)
					last_err = ETIMEDOUT;
				else if (r < 0)
					last_err = errno;
				else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
					last_err = errno;
				else if (soerr)
					last_err = soerr;
				else {
					fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
					freeaddrinfo(res);
					return fd;
				}
			}
			if (last_err == ECONNREFUSED)
				refused = 1;
			close(fd);
		}
		if (!refused || ms_left(deadline) == 0)
			break;
		/* The server may still be starting: try again shortly. */
		nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
	}
	freeaddrinfo(res);
	fail("cannot connect to %s:%u: %s", host, port, strerror(last_err ? last_err : EIO));
	return -1;
}

/* A listening socket on every address (IPv6 with IPv4 mapped when the
 * host has IPv6), or -1 with a message printed. */
static int tcp_listen(unsigned int port)
{
	static const int families[] = {AF_INET6, AF_INET};
	char service[16];
	int last_err = 0;

	snprintf(service, sizeof(service), "%u", port);
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
		struct addrinfo hints = {.ai_family = families[f],
					 .ai_socktype = SOCK_STREAM,
					 .ai_flags = AI_PASSIVE};
		struct addrinfo *res = NULL, *ai;

		if (getaddrinfo(NULL, service, &hints, &res))
			continue;
		for (ai = res; ai; ai = ai->ai_next) {
			int one = 1, zero = 0;
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);

			if (fd < 0) {
				last_err = errno;
				continue;
			}
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (ai->ai_family == AF_INET6)
				setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0) {
				freeaddrinfo(res);
				return fd;
			}
			last_err = errno;
			close(fd);
		}
		freeaddrinfo(res);
	}
	fail("cannot listen on TCP port %u: %s", port, strerror(last_err ? last_err : EIO));
	return -1;
}

static int tcp_accept(int lfd, unsigned int port)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);

		if (fd >= 0) {
			fcntl(fd, F_SETFD, FD_CLOEXEC);
			return fd;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		fail("accept on TCP port %u: %s", port, strerror(errno));
		return -1;
	}
}

static int send_dest(int fd, const struct dest *d)
{
	char gid[INET6_ADDRSTRLEN], line[LINE_MAX_LEN];
	int n;

	gid_to_str(&d->gid, gid, sizeof(gid));
	n = snprintf(line, sizeof(line), "%06x:%06x:%u:%s size=%u iters=%d mtu=%u chk=%d\n",
		     d->qpn, d->psn, d->udp_port, gid, d->size, d->iters, d->mtu, d->chk);
	if (n < 0 || (size_t)n >= sizeof(line) || write_all(fd, line, (size_t)n)) {
		fail("sending the connection details to the peer: %s",
		     n < 0 || (size_t)n >= sizeof(line) ? "line too long" : strerror(errno));
		return -1;
	}
	return 0;
}

static int recv_dest(int fd, struct dest *d)
{
	char line[LINE_MAX_LEN], gid[LINE_MAX_LEN];
	unsigned int qpn, psn;

	if (read_line(fd, line, sizeof(line), TIMEOUT_MS, "connection details"))
		return -1;
	if (strncmp(line, "error ", 6) == 0) {
		fail("the peer refused the connection: %s", line + 6);
		return -1;
	}
	memset(d, 0, sizeof(*d));
	if (sscanf(line, "%x:%x:%u:%255s size=%u iters=%d mtu=%u chk=%d", &qpn, &psn,
		   &d->udp_port, gid, &d->size, &d->iters, &d->mtu, &d->chk) != 8 ||
	    qpn > 0xffffff || psn > 0xffffff || d->udp_port == 0 || d->udp_port > 65535 ||
	    inet_pton(AF_INET6, gid, d->gid.raw) != 1) {
		fail("cannot parse the peer's connection details \"%s\"", line);
		return -1;
	}
	d->qpn = qpn;
	d->psn = psn;
	return 0;
}

/* Tell the peer why this side gives up during the connection setup (best
 * effort), and print the same reason here. */
static void refuse(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(int fd, const char *fmt, ...)
{
	char msg[LINE_MAX_LEN - 16], line[LINE_MAX_LEN];
	va_list ap;
	int n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fail("%s", msg);
	n = snprintf(line, sizeof(line), "error %s\n", msg);
	if (fd >= 0 && n > 0 && (size_t)n < sizeof(line))
		(void)write_all(fd, line, (size_t)n);
}

/* Whether the peer is still there: 0, or -1 with a message printed once
 * it has closed the connection.  Data from the peer (its "done") stops
 * the watch; it is read at the end. */
static int check_peer(struct pingpong *pp)
{
	char c;
	ssize_t n;

	if (!pp->watch_sock || pp->sock < 0)
		return 0;
	n = recv(pp->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		pp->watch_sock = 0;
		return 0;
	}
	if (n == 0) {
		fail("the peer closed the TCP connection during the test");
		return -1;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	fail("the TCP connection to the peer failed: %s", strerror(errno));
	return -1;
}

/* ------------------------------------------------------------------ */
/* Verbs resources                                                     */
/* ------------------------------------------------------------------ */

static struct ibv_coll_device *pick_device(struct ibv_coll_device **list, int num,
					   const char *name)
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

static void drain_events(struct pingpong *pp)
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
static int pp_close(struct pingpong *pp)
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

static int post_recvs(struct pingpong *pp, unsigned int size, int n)
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

static int post_send(struct pingpong *pp, unsigned int size)
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

/* Open the device and create everything up to a QP in INIT with its
 * receives posted.  0, or -1 with a message printed. */
static int pp_init(struct pingpong *pp, struct ibv_coll_device *dev, struct options *o)
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
		.cap = {
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
static int pp_connect(struct pingpong *pp, const struct options *o, const struct dest *rem,
		      unsigned int mtu)
{
	struct ibv_coll_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu_to_enum(mtu),
		.dest_qp_num = rem->qpn,
		.rq_psn = rem->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = QP_MIN_RNR_TIMER,
		.ah_attr = {
			.dgid = rem->gid,
			.udp_port = (uint16_t)rem->udp_port,
			.sgid_index = (uint8_t)o->gid_idx,
		},
	};
	int err;

	if (gid_is_v4(&pp->gid) != gid_is_v4(&rem->gid)) {
		const char *mine = gid_is_v4(&pp->gid) ? "IPv4" : "IPv6";
		const char *theirs = gid_is_v4(&rem->gid) ? "IPv4" : "IPv6";

		refuse(pp->sock, "the client's GID is %s, the server's %s: choose GIDs of one "
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

static void timeout_message(void)
{
	fail("no completion for %d s: the peer stopped answering", TIMEOUT_MS / 1000);
}

/* Busy-poll until at least one completion, or the deadline.  The count,
 * or -1 with a message printed. */
static int wait_poll(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline)
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
static int wait_event(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline)
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

/* ------------------------------------------------------------------ */
/* The test                                                            */
/* ------------------------------------------------------------------ */

/* The ping-pong itself.  0, or -1 with a message printed. */
static int run(struct pingpong *pp, const struct options *o, int peer_chk)
{
	const int is_client = o->servername != NULL;
	const int fill = o->chk || peer_chk;
	int scnt = 0, rcnt = 0;
	int send_busy = 0;
	int may_send = is_client; /* the client starts; afterwards each receive allows a send */
	int64_t deadline = now_ns() + (int64_t)TIMEOUT_MS * 1000000ll;

	pp->watch_sock = 1;
	while (scnt < o->iters || rcnt < o->iters) {
		struct ibv_coll_wc wc[MAX_WC];
		int n;

		if (may_send && !send_busy && scnt < o->iters) {
			if (fill)
				pattern_fill(pp->sbuf, o->size, pattern_seed(scnt, is_client));
			if (post_send(pp, o->size))
				return -1;
			send_busy = 1;
			may_send = 0;
		}
		n = o->use_event ? wait_event(pp, wc, deadline) : wait_poll(pp, wc, deadline);
		if (n < 0)
			return -1;
		deadline = now_ns() + (int64_t)TIMEOUT_MS * 1000000ll;

		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fail("completion with status \"%s\" (%d) for %s wr_id %" PRIu64
				     " (vendor error %#x)",
				     ibv_coll_wc_status_str(wc[i].status), (int)wc[i].status,
				     wc[i].wr_id == WRID_SEND ? "send" : "receive", wc[i].wr_id,
				     wc[i].vendor_err);
				return -1;
			}
			switch (wc[i].wr_id) {
			case WRID_SEND:
				if (!send_busy) {
					fail("unexpected send completion");
					return -1;
				}
				send_busy = 0;
				scnt++;
				break;
			case WRID_RECV:
				if (!(wc[i].opcode & IBV_COLL_WC_RECV)) {
					fail("receive completion with opcode %s",
					     ibv_coll_wc_opcode_str(wc[i].opcode));
					return -1;
				}
				if (rcnt >= o->iters) {
					fail("more messages than --iters=%d arrived", o->iters);
					return -1;
				}
				if (wc[i].byte_len != o->size) {
					fail("message %d has %" PRIu32 " bytes, expected %u", rcnt,
					     wc[i].byte_len, o->size);
					return -1;
				}
				if (o->chk) {
					size_t bad = pattern_check(pp->rbuf, o->size,
								   pattern_seed(rcnt, !is_client));

					if (bad != o->size) {
						fail("message %d: byte %zu of %u differs from the "
						     "pattern",
						     rcnt, bad, o->size);
						return -1;
					}
				}
				pp->routs--;
				rcnt++;
				/* Keep rx_depth receives posted. */
				if (post_recvs(pp, o->size, 1))
					return -1;
				may_send = 1;
				break;
			default:
				fail("completion with unknown wr_id %" PRIu64, wc[i].wr_id);
				return -1;
			}
		}
	}
	return 0;
}

/* Swap "done" with the peer, so that neither tears down while the other
 * still needs its acknowledgements.  0, or -1 with a message printed. */
static int finish_barrier(struct pingpong *pp)
{
	static const char done[] = "done\n";
	char line[LINE_MAX_LEN];

	if (write_all(pp->sock, done, sizeof(done) - 1)) {
		fail("telling the peer the test is done: %s", strerror(errno));
		return -1;
	}
	if (read_line(pp->sock, line, sizeof(line), TIMEOUT_MS, "end-of-test message"))
		return -1;
	if (strcmp(line, "done") != 0) {
		fail("unexpected end-of-test message \"%s\" from the peer", line);
		return -1;
	}
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage:\n"
		"  %s [options]              start a server and wait for a connection\n"
		"  %s [options] SERVERNAME   connect to the server at SERVERNAME\n"
		"\n"
		"Options:\n"
		"  -p, --port=PORT       TCP port of the connection setup (default %d)\n"
		"  -d, --ib-dev=DEV      use device DEV (default: crxe_lo if present, else the "
		"first)\n"
		"  -i, --ib-port=PORT    device port (default 1, the only one)\n"
		"  -s, --size=SIZE       bytes per message (default %d; 0 allowed)\n"
		"  -m, --mtu=MTU         path MTU: 256, 512, 1024, 2048 or 4096 (default: the "
		"port's active MTU)\n"
		"  -r, --rx-depth=DEPTH  receives to keep posted (default %d)\n"
		"  -n, --iters=ITERS     round trips (default %d)\n"
		"  -g, --gid-idx=INDEX   local GID index (default 0)\n"
		"  -e, --events          sleep on a completion channel instead of busy polling\n"
		"  -c, --chk             fill each message with a pattern and check what arrives\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            print this help and exit\n",
		prog, prog, DEFAULT_TCP_PORT, DEFAULT_SIZE, DEFAULT_RX_DEPTH, DEFAULT_ITERS);
}

/* Parse the command line into o; 0, 1 for --help, 2 for --version, -1 on a bad option
 * (usage wanted), -2 on a bad value (message printed). */
static int parse_args(int argc, char *argv[], struct options *o)
{
	static const struct option longopts[] = {
		{"port", required_argument, NULL, 'p'},
		{"ib-dev", required_argument, NULL, 'd'},
		{"ib-port", required_argument, NULL, 'i'},
		{"size", required_argument, NULL, 's'},
		{"mtu", required_argument, NULL, 'm'},
		{"rx-depth", required_argument, NULL, 'r'},
		{"iters", required_argument, NULL, 'n'},
		{"gid-idx", required_argument, NULL, 'g'},
		{"events", no_argument, NULL, 'e'},
		{"chk", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	unsigned long v;

	for (;;) {
		int c = getopt_long(argc, argv, "p:d:i:s:m:r:n:g:echV", longopts, NULL);

		if (c == -1)
			break;
		switch (c) {
		case 'p':
			if (parse_uint(optarg, 65535, &v) || v == 0) {
				fail("invalid TCP port '%s' (1..65535)", optarg);
				return -2;
			}
			o->tcp_port = (unsigned int)v;
			break;
		case 'd':
			o->ib_devname = optarg;
			break;
		case 'i':
			if (parse_uint(optarg, INT_MAX, &v) || v != 1) {
				fail("invalid device port '%s': crxe devices have port 1 only", optarg);
				return -2;
			}
			o->ib_port = (int)v;
			break;
		case 's':
			if (parse_uint(optarg, UINT32_MAX, &v)) {
				fail("invalid size '%s'", optarg);
				return -2;
			}
			o->size = (unsigned int)v;
			break;
		case 'm':
			if (parse_uint(optarg, 4096, &v) || !mtu_to_enum((unsigned int)v)) {
				fail("invalid MTU '%s' (256, 512, 1024, 2048 or 4096)", optarg);
				return -2;
			}
			o->mtu = (unsigned int)v;
			break;
		case 'r':
			if (parse_uint(optarg, INT_MAX - 1, &v) || v == 0) {
				fail("invalid rx-depth '%s' (at least 1)", optarg);
				return -2;
			}
			o->rx_depth = (int)v;
			break;
		case 'n':
			if (parse_uint(optarg, INT_MAX, &v) || v == 0) {
				fail("invalid iteration count '%s' (at least 1)", optarg);
				return -2;
			}
			o->iters = (int)v;
			break;
		case 'g':
			if (parse_uint(optarg, 255, &v)) {
				fail("invalid GID index '%s' (0..255)", optarg);
				return -2;
			}
			o->gid_idx = (int)v;
			break;
		case 'e':
			o->use_event = 1;
			break;
		case 'c':
			o->chk = 1;
			break;
		case 'h':
			return 1;
		case 'V':
			return 2;
		default:
			return -1;
		}
	}
	if (optind == argc - 1) {
		o->servername = argv[optind];
	} else if (optind < argc) {
		fail("too many arguments (expected at most one SERVERNAME)");
		return -1;
	}
	return 0;
}

int main(int argc, char *argv[])
{
	struct options o = {
		.tcp_port = DEFAULT_TCP_PORT,
		.ib_port = 1,
		.size = DEFAULT_SIZE,
		.rx_depth = DEFAULT_RX_DEPTH,
		.iters = DEFAULT_ITERS,
	};
	struct pingpong pp;
	struct ibv_coll_device **list = NULL;
	struct ibv_coll_device *dev;
	struct dest local, remote;
	char lgid[INET6_ADDRSTRLEN], rgid[INET6_ADDRSTRLEN];
	int num = 0, ret = 1, lfd = -1, r;
	unsigned int mtu;
	int64_t start, end;

	memset(&pp, 0, sizeof(pp));
	pp.sock = -1;

	r = parse_args(argc, argv, &o);
	if (r == 1) {
		usage(stdout);
		return 0;
	}
	if (r == 2)
		return ibvc_print_version(prog, ibv_coll_version());
	if (r == -1)
		usage(stderr);
	if (r)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	srand48((long)getpid() * 1000003L ^ (long)time(NULL));

	/* A server listens first, so that a client started right after it
	 * finds the port open sooner. */
	if (!o.servername && (lfd = tcp_listen(o.tcp_port)) < 0)
		return 1;

	errno = 0;
	list = ibv_get_coll_device_list(&num);
	if (!list) {
		fail("ibv_get_coll_device_list: %s", strerror(errno ? errno : EIO));
		goto out;
	}
	if (num == 0) {
		fail("no ibv_coll devices found");
		goto out;
	}
	dev = pick_device(list, num, o.ib_devname);
	if (!dev) {
		fail("device %s not found", o.ib_devname);
		goto out;
	}
	if (pp_init(&pp, dev, &o))
		goto out;

	local.qpn = pp.qp->qp_num;
	local.psn = pp.psn;
	local.udp_port = pp.port_attr.udp_port;
	local.gid = pp.gid;
	local.size = o.size;
	local.iters = o.iters;
	local.mtu = o.mtu;
	local.chk = o.chk;
	gid_to_str(&local.gid, lgid, sizeof(lgid));
	printf("  local address:  QPN 0x%06x, PSN 0x%06x, UDP port %u, GID %s\n", local.qpn,
	       local.psn, local.udp_port, lgid);
	fflush(stdout);

	if (o.servername) {
		pp.sock = tcp_connect(o.servername, o.tcp_port);
		if (pp.sock < 0 || send_dest(pp.sock, &local) || recv_dest(pp.sock, &remote))
			goto out;
	} else {
		pp.sock = tcp_accept(lfd, o.tcp_port);
		close(lfd);
		lfd = -1;
		if (pp.sock < 0 || recv_dest(pp.sock, &remote))
			goto out;
	}
	gid_to_str(&remote.gid, rgid, sizeof(rgid));
	printf("  remote address: QPN 0x%06x, PSN 0x%06x, UDP port %u, GID %s\n", remote.qpn,
	       remote.psn, remote.udp_port, rgid);
	fflush(stdout);

	if (remote.size != o.size) {
		refuse(pp.sock, "the client uses --size=%u, the server --size=%u: use the same size",
		       o.servername ? o.size : remote.size, o.servername ? remote.size : o.size);
		goto out;
	}
	if (remote.iters != o.iters) {
		refuse(pp.sock, "the client uses --iters=%d, the server --iters=%d: use the same count",
		       o.servername ? o.iters : remote.iters, o.servername ? remote.iters : o.iters);
		goto out;
	}
	/* Each side may ask for a smaller MTU; the path uses the smaller. */
	mtu = remote.mtu < o.mtu && mtu_to_enum(remote.mtu) ? remote.mtu : o.mtu;
	if (pp_connect(&pp, &o, &remote, mtu))
		goto out;
	/* The server answers once its QP is ready to receive. */
	if (!o.servername && send_dest(pp.sock, &local))
		goto out;

	start = now_ns();
	if (run(&pp, &o, remote.chk))
		goto out;
	end = now_ns();
	if (finish_barrier(&pp))
		goto out;

	{
		double usec = (double)(end - start) / 1000.0;
		long bytes = (long)o.size * o.iters * 2;
		double mbit = usec > 0 ? (double)bytes * 8.0 / usec : 0.0;
		double per_iter = usec / o.iters;

		printf("%ld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000.0,
		       mbit);
		printf("%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec / 1000000.0,
		       per_iter);
		printf("pingpong: size=%u iters=%d usec_per_iter=%.2f mbit_per_sec=%.2f\n", o.size,
		       o.iters, per_iter, mbit);
		fflush(stdout);
	}
	ret = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (pp_close(&pp))
		ret = 1;
	if (list)
		ibv_free_coll_device_list(list);
	return ret;
}
