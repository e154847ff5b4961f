// The shared device's channel (emulator/devd/devd_sock.h): abstract names
// per device, one server per name, the peer's credentials as the kernel
// gives them, and rings and doorbells passed as descriptors to another
// process, which uses them.
#include "devd/devd_sock.h"
#include "nic/queue.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

using namespace ibv_coll;
using namespace ibv_coll::devd;

namespace {

std::string unique_dev(const char *what)
{
	return std::string("test_") + what + "_" + std::to_string(getpid());
}

int exit_status(pid_t pid)
{
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(DevdSock, NamesAndOneServerPerDevice)
{
	EXPECT_EQ(socket_name("crxe_eth0"), "ibv_coll_devd/crxe_eth0");
	util::UniqueFd l, l2, c;
	EXPECT_EQ(listen_dev(std::string(200, 'x'), &l), EINVAL);
	EXPECT_EQ(listen_dev("", &l), EINVAL);
	const std::string dev = unique_dev("one");
	EXPECT_EQ(connect_dev(dev, &c), ECONNREFUSED);
	ASSERT_EQ(listen_dev(dev, &l), 0);
	EXPECT_EQ(listen_dev(dev, &l2), EADDRINUSE);
	util::UniqueFd a;
	EXPECT_EQ(accept_client(l.get(), &a), EAGAIN);
	ASSERT_EQ(connect_dev(dev, &c), 0);
	ASSERT_EQ(accept_client(l.get(), &a), 0);
	Peer p;
	ASSERT_EQ(peer_of(a.get(), &p), 0);
	EXPECT_EQ(p.pid, getpid());
	EXPECT_EQ(p.uid, getuid());
	// Closing the server frees the name.
	a.reset();
	l.reset();
	EXPECT_EQ(listen_dev(dev, &l2), 0);
}

TEST(DevdSock, PeerPolicy)
{
	EXPECT_TRUE(peer_allowed(Peer{1, 1000, 1000}, 1000));
	EXPECT_TRUE(peer_allowed(Peer{1, 0, 0}, 1000));
	EXPECT_FALSE(peer_allowed(Peer{1, 1001, 1000}, 1000));
	EXPECT_FALSE(peer_allowed(Peer{1, 65534, 65534}, 0));
}

// The client is a child: it passes a memfd holding a completion ring and
// an eventfd; the server (here) writes an entry into the ring and rings
// the eventfd; the child reads the entry and exits 0 only if it is right.
TEST(DevdSock, RingAndDoorbellToAnotherProcess)
{
	const std::string dev = unique_dev("ring");
	util::UniqueFd l;
	ASSERT_EQ(listen_dev(dev, &l), 0);
	const size_t bytes = emu::Queue::region_bytes(16, 64);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		util::UniqueFd c;
		if (connect_dev(dev, &c))
			_exit(2);
		int mfd = memfd_create("cq", MFD_CLOEXEC);
		int efd = eventfd(0, EFD_CLOEXEC);
		if (mfd < 0 || efd < 0 || ftruncate(mfd, off_t(bytes)))
			_exit(3);
		void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		if (m == MAP_FAILED)
			_exit(4);
		emu::Queue q(16, 64, m, true);
		const char hello[] = "create_cq";
		int fds[2] = {mfd, efd};
		if (send_msg(c.get(), hello, sizeof(hello), fds, 2))
			_exit(5);
		uint64_t ev;
		if (read(efd, &ev, sizeof(ev)) != sizeof(ev) || ev != 1)
			_exit(6);
		if (q.prod() != 1 || strcmp(reinterpret_cast<char *>(q.slot(0)), "cqe 0") != 0)
			_exit(7);
		// And the daemon sees us go: EOF on the socket.
		_exit(0);
	}
	util::UniqueFd a;
	for (int i = 0; i < 5000 && accept_client(l.get(), &a) == EAGAIN; i++)
		usleep(1000);
	ASSERT_TRUE(a);
	Peer p;
	ASSERT_EQ(peer_of(a.get(), &p), 0);
	EXPECT_EQ(p.pid, pid);
	EXPECT_TRUE(peer_allowed(p, getuid()));
	int fl = fcntl(a.get(), F_GETFL);
	ASSERT_EQ(fcntl(a.get(), F_SETFL, fl & ~O_NONBLOCK), 0);
	char buf[64];
	size_t len = 0, nfds = 0;
	util::UniqueFd fds[kMaxFds];
	ASSERT_EQ(recv_msg(a.get(), buf, sizeof(buf), &len, fds, &nfds), 0);
	EXPECT_EQ(len, sizeof("create_cq"));
	EXPECT_STREQ(buf, "create_cq");
	ASSERT_EQ(nfds, 2u);
	EXPECT_NE(fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC, 0);
	void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
	ASSERT_NE(m, MAP_FAILED);
	emu::Queue q(16, 64, m, false); // formatted by the client
	strcpy(reinterpret_cast<char *>(q.slot(q.prod_relaxed())), "cqe 0");
	q.publish(q.prod_relaxed() + 1);
	uint64_t one = 1;
	ASSERT_EQ(write(fds[1].get(), &one, sizeof(one)), ssize_t(sizeof(one)));
	EXPECT_EQ(exit_status(pid), 0);
	EXPECT_EQ(recv_msg(a.get(), buf, sizeof(buf), &len, fds, &nfds), ECONNRESET);
	munmap(m, bytes);
}

// A message larger than the buffer is an error, and the descriptors that
// came with it are not leaked into the receiver.
TEST(DevdSock, CutMessageIsAnError)
{
	int sv[2];
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	util::UniqueFd s0(sv[0]), s1(sv[1]);
	int efd = eventfd(0, EFD_CLOEXEC);
	ASSERT_GE(efd, 0);
	char big[100] = {};
	ASSERT_EQ(send_msg(s0.get(), big, sizeof(big), &efd, 1), 0);
	close(efd);
	char small[10];
	size_t len = 0, nfds = 9;
	util::UniqueFd fds[kMaxFds];
	EXPECT_EQ(recv_msg(s1.get(), small, sizeof(small), &len, fds, &nfds), EMSGSIZE);
	EXPECT_EQ(nfds, 0u);
	EXPECT_FALSE(fds[0]);
	int too_many[kMaxFds + 1] = {0, 0, 0, 0, 0};
	EXPECT_EQ(send_msg(s0.get(), big, 1, too_many, kMaxFds + 1), EINVAL);
}

// The credentials are the kernel's: a client that changed its uid is seen
// with the new one, and refused by a daemon of another user.
TEST(DevdSock, PeerUidIsTheKernels)
{
	if (getuid() != 0)
		GTEST_SKIP() << "needs root to become another user";
	const std::string dev = unique_dev("uid");
	util::UniqueFd l;
	ASSERT_EQ(listen_dev(dev, &l), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
			_exit(2);
		util::UniqueFd c;
		if (connect_dev(dev, &c))
			_exit(3);
		char x;
		(void)read(c.get(), &x, 1); // until the server closes
		_exit(0);
	}
	util::UniqueFd a;
	for (int i = 0; i < 5000 && accept_client(l.get(), &a) == EAGAIN; i++)
		usleep(1000);
	ASSERT_TRUE(a);
	Peer p;
	ASSERT_EQ(peer_of(a.get(), &p), 0);
	EXPECT_EQ(p.pid, pid);
	EXPECT_EQ(p.uid, 65534u);
	EXPECT_FALSE(peer_allowed(p, 0));
	a.reset();
	EXPECT_EQ(exit_status(pid), 0);
}

} // namespace
