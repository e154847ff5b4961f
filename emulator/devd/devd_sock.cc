// The daemon/client channel: abstract SOCK_SEQPACKET sockets, peer
// credentials and descriptor passing.
#include "devd/devd_sock.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace ibv_coll::devd {

std::string socket_name(const std::string &dev)
{
	return "ibv_coll_devd/" + dev;
}

static int make_addr(const std::string &dev, sockaddr_un *a, socklen_t *alen)
{
	std::string n = socket_name(dev);
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (dev.empty() || n.size() + 1 > sizeof(a->sun_path))
		return EINVAL;
	memcpy(a->sun_path + 1, n.data(), n.size()); // sun_path[0] = 0: abstract
	*alen = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n.size());
	return 0;
}

int listen_dev(const std::string &dev, util::UniqueFd *out)
{
	sockaddr_un a;
	socklen_t alen;
	if (int err = make_addr(dev, &a, &alen))
		return err;
	util::UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	if (!fd)
		return errno;
	if (bind(fd.get(), reinterpret_cast<sockaddr *>(&a), alen) || listen(fd.get(), 64))
		return errno;
	*out = std::move(fd);
	return 0;
}

int connect_dev(const std::string &dev, util::UniqueFd *out)
{
	sockaddr_un a;
	socklen_t alen;
	if (int err = make_addr(dev, &a, &alen))
		return err;
	util::UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
	if (!fd)
		return errno;
	while (connect(fd.get(), reinterpret_cast<sockaddr *>(&a), alen)) {
		if (errno != EINTR)
			return errno;
	}
	*out = std::move(fd);
	return 0;
}

int accept_client(int lfd, util::UniqueFd *out)
{
	int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return errno == EWOULDBLOCK ? EAGAIN : errno;
	out->reset(fd);
	return 0;
}

int peer_of(int fd, Peer *out)
{
	ucred c{};
	socklen_t len = sizeof(c);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len))
		return errno;
	if (c.pid <= 0)
		return ESRCH; // a peer in another pid namespace shows as 0
	out->pid = c.pid;
	out->uid = c.uid;
	out->gid = c.gid;
	return 0;
}

bool peer_allowed(const Peer &p, uid_t self)
{
	return p.uid == self || p.uid == 0;
}

int send_msg(int fd, const void *buf, size_t len, const int *fds, size_t nfds)
{
	if (nfds > kMaxFds || len > kMaxMsgBytes)
		return EINVAL;
	iovec iov{const_cast<void *>(buf), len};
	alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
	msghdr m{};
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	if (nfds) {
		m.msg_control = cbuf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (n >= 0)
			return size_t(n) == len ? 0 : EMSGSIZE;
		if (errno != EINTR)
			return errno;
	}
}

int recv_msg(int fd, void *buf, size_t cap, size_t *len, util::UniqueFd *fds, size_t *nfds)
{
	iovec iov{buf, cap};
	alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
	msghdr m{};
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = cbuf;
	m.msg_controllen = sizeof(cbuf);
	ssize_t n;
	do
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno;
	size_t got = 0;
	for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int d;
			memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (got < kMaxFds)
				fds[got++].reset(d);
			else
				::close(d);
		}
	}
	*nfds = got;
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (size_t i = 0; i < got; i++)
			fds[i].reset();
		*nfds = 0;
		return EMSGSIZE;
	}
	if (n == 0 && !got)
		return ECONNRESET; // SEQPACKET: 0 bytes is the other end closing
	*len = size_t(n);
	return 0;
}

} // namespace ibv_coll::devd
