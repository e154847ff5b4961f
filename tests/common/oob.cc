// Out-of-band channel for multi-process tests.
#include "oob.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace ibvc_test {

Oob::~Oob()
{
	if (fd_ >= 0)
		close(fd_);
	if (lfd_ >= 0) {
		close(lfd_);
		unlink(path_.c_str());
	}
}

static sockaddr_un addr_of(const std::string &path)
{
	sockaddr_un a{};
	a.sun_family = AF_UNIX;
	strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
	return a;
}

int Oob::listen(const std::string &path)
{
	unlink(path.c_str());
	lfd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sockaddr_un a = addr_of(path);
	if (lfd_ < 0 || bind(lfd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)) ||
	    ::listen(lfd_, 1))
		return errno;
	path_ = path;
	return 0;
}

int Oob::accept(int timeout_ms)
{
	pollfd p{lfd_, POLLIN, 0};
	int r = poll(&p, 1, timeout_ms);
	if (r <= 0)
		return r == 0 ? ETIMEDOUT : errno;
	fd_ = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
	return fd_ < 0 ? errno : 0;
}

int Oob::connect(const std::string &path, int timeout_ms)
{
	sockaddr_un a = addr_of(path);
	for (int waited = 0;; waited += 10) {
		fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd_ < 0)
			return errno;
		if (!::connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a)))
			return 0;
		int err = errno;
		close(fd_);
		fd_ = -1;
		if (waited >= timeout_ms)
			return err;
		usleep(10000);
	}
}

int Oob::send(const void *p, size_t n)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n) {
		ssize_t r = ::send(fd_, b, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		b += r;
		n -= size_t(r);
	}
	return 0;
}

int Oob::recv(void *p, size_t n, int timeout_ms)
{
	auto *b = static_cast<uint8_t *>(p);
	while (n) {
		pollfd pf{fd_, POLLIN, 0};
		int r = poll(&pf, 1, timeout_ms);
		if (r == 0)
			return ETIMEDOUT;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		ssize_t k = ::recv(fd_, b, n, 0);
		if (k == 0)
			return EPIPE;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		b += k;
		n -= size_t(k);
	}
	return 0;
}

} // namespace ibvc_test
