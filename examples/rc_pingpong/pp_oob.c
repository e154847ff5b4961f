/* ibv_coll_rc_pingpong: the out-of-band TCP exchange with the peer. */
#define _XOPEN_SOURCE 700

#include "pingpong.h"
/* ------------------------------------------------------------------ */
/* The TCP side channel                                                */
/* ------------------------------------------------------------------ */

int write_all(int fd, const char *buf, size_t len)
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
int read_line(int fd, char *buf, size_t cap, int timeout_ms, const char *what)
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
int tcp_connect(const char *host, unsigned int port)
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
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
					ai->ai_protocol);

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
int tcp_listen(unsigned int port)
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
			int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
					ai->ai_protocol);

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

int tcp_accept(int lfd, unsigned int port)
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

int send_dest(int fd, const struct dest *d)
{
	char gid[INET6_ADDRSTRLEN], line[LINE_MAX_LEN];
	int n;

	gid_to_str(&d->gid, gid, sizeof(gid));
	n = snprintf(line, sizeof(line), "%06x:%06x:%u:%s size=%u iters=%d mtu=%u chk=%d\n", d->qpn,
		     d->psn, d->udp_port, gid, d->size, d->iters, d->mtu, d->chk);
	if (n < 0 || (size_t)n >= sizeof(line) || write_all(fd, line, (size_t)n)) {
		fail("sending the connection details to the peer: %s",
		     n < 0 || (size_t)n >= sizeof(line) ? "line too long" : strerror(errno));
		return -1;
	}
	return 0;
}

int recv_dest(int fd, struct dest *d)
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
	if (sscanf(line, "%x:%x:%u:%255s size=%u iters=%d mtu=%u chk=%d", &qpn, &psn, &d->udp_port,
		   gid, &d->size, &d->iters, &d->mtu, &d->chk) != 8 ||
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

void refuse(int fd, const char *fmt, ...)
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
int check_peer(struct pingpong *pp)
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
