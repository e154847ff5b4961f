// The port's socket errors (IP_RECVERR): an ICMP error about a datagram
// sent to a peer that is gone is read off the socket and counted, never
// reported as a receive error, and never leaves the socket's poll ready
// (an unread error queue keeps POLLERR up, and an engine that sleeps in
// epoll would spin on it); the port goes on sending and receiving.
#include "net/udp_port.h"
#include "util/clock.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

using namespace ibv_coll::emu;
using ibv_coll::util::now_ns;

namespace {

const IpAddr kLo = IpAddr::from_v4(htonl(INADDR_LOOPBACK));

// A loopback UDP port that nothing listens on: bound, read, closed.
uint16_t closed_port()
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a));
	socklen_t l = sizeof(a);
	getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
	close(fd);
	return ntohs(a.sin_port);
}

void send_n(UdpPort &p, const Endpoint &dst, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t *b = p.tx_buf();
		memset(b, 0x5a, 200);
		memcpy(b, &i, sizeof(i));
		p.tx_commit(200, dst, kLo);
		p.tx_flush(); // one datagram a send: one ICMP error each
	}
}

short revents(int fd)
{
	pollfd pf{fd, POLLIN, 0};
	return poll(&pf, 1, 0) > 0 ? pf.revents : 0;
}

} // namespace

TEST(UdpPort, IcmpErrorsOfAGonePeerAreReadAndCounted)
{
	UdpPort a, b;
	ASSERT_EQ(a.open(0, false, Impairment{}, 1 << 20), 0);
	ASSERT_EQ(b.open(0, false, Impairment{}, 1 << 20), 0);
	send_n(a, Endpoint{kLo, closed_port()}, 8);
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	// The errors came back (the kernel answers a closed loopback port
	// with ICMP port unreachable) and make the socket's poll ready.
	RxPacket pk[Transport::kBatch];
	for (int i = 0; i < 50 && (revents(a.fd()) & POLLERR); i++)
		EXPECT_EQ(a.rx_batch(pk), 0u);
	EXPECT_EQ(revents(a.fd()) & POLLERR, 0) << "the socket's error queue was left unread";
	EXPECT_GE(a.counters().icmp_errors, 1u);
	EXPECT_EQ(a.counters().rx_errors, 0u);
	EXPECT_EQ(a.counters().tx_errors, 0u);
	// The port still works both ways.
	send_n(a, Endpoint{kLo, b.port()}, 4);
	send_n(b, Endpoint{kLo, a.port()}, 4);
	unsigned got_a = 0, got_b = 0;
	for (uint64_t end = now_ns() + 2000000000ull; (got_a < 4 || got_b < 4) && now_ns() < end;) {
		got_a += a.rx_batch(pk);
		got_b += b.rx_batch(pk);
		std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
	EXPECT_EQ(got_a, 4u);
	EXPECT_EQ(got_b, 4u);
	EXPECT_EQ(a.counters().rx_errors, 0u);
}
