// The port's impairment layer and ECN: the IBV_COLL_EMU_IMPAIR parser, a
// one-way delay that holds packets without blocking and releases them when
// due, CE marks at the configured fraction, and ECT(0) on the wire, read
// by a plain socket (not the port's own receive path).
#include "net/udp_port.h"
#include "util/clock.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

using namespace ibv_coll::emu;
using ibv_coll::util::now_ns;

namespace {

const IpAddr kLo = IpAddr::from_v4(htonl(INADDR_LOOPBACK));

Impairment imp(const char *spec)
{
	Impairment i;
	std::string why;
	EXPECT_EQ(Impairment::parse(spec, &i, &why), 0) << spec << ": " << why;
	return i;
}

// Send n packets of len bytes, byte 0..3 the sequence number.
void send_n(UdpPort &p, const Endpoint &dst, unsigned n, size_t len = 256)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t *b = p.tx_buf();
		memset(b, 0x5a, len);
		memcpy(b, &i, sizeof(i));
		p.tx_commit(len, dst, kLo);
		if (i % 32 == 31)
			p.tx_flush();
	}
	p.tx_flush();
}

// Receive what arrives within ms milliseconds (stops early at want).
std::vector<uint32_t> drain(UdpPort &p, unsigned want, int ms)
{
	std::vector<uint32_t> seqs;
	RxPacket pk[Transport::kBatch];
	const uint64_t end = now_ns() + uint64_t(ms) * 1000000;
	while (seqs.size() < want && now_ns() < end) {
		unsigned n = p.rx_batch(pk);
		for (unsigned i = 0; i < n; i++) {
			uint32_t s;
			memcpy(&s, pk[i].data, sizeof(s));
			seqs.push_back(s);
		}
		if (!n)
			std::this_thread::sleep_for(std::chrono::microseconds(200));
	}
	return seqs;
}

// A plain IPv4 UDP socket on 127.0.0.1 that reports each datagram's TOS.
struct TosSocket {
	int fd = -1;
	uint16_t port = 0;
	TosSocket()
	{
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int on = 1, sz = 4 << 20;
		setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on));
		setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz));
		bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		socklen_t l = sizeof(a);
		getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l);
		port = ntohs(a.sin_port);
	}
	~TosSocket() { close(fd); }
	// The TOS byte of the next datagram, or -1 when none is queued.
	int next_tos()
	{
		uint8_t buf[70000];
		alignas(cmsghdr) uint8_t cb[256];
		iovec iov{buf, sizeof(buf)};
		msghdr m{};
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = cb;
		m.msg_controllen = sizeof(cb);
		if (recvmsg(fd, &m, 0) < 0)
			return -1;
		for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
				return *CMSG_DATA(c);
		return -2; // a datagram without its TOS
	}
};

} // namespace

TEST(Impair, ParserTakesEveryKeyAndRefusesNonsense)
{
	Impairment i = imp("drop=0.01,dup=0.02,reorder=0.03,delay=5ms,jitter=250us,ce=0.5,seed=9");
	EXPECT_DOUBLE_EQ(i.drop, 0.01);
	EXPECT_DOUBLE_EQ(i.dup, 0.02);
	EXPECT_DOUBLE_EQ(i.reorder, 0.03);
	EXPECT_EQ(i.delay_ns, 5000000u);
	EXPECT_EQ(i.jitter_ns, 250000u);
	EXPECT_DOUBLE_EQ(i.ce, 0.5);
	EXPECT_EQ(i.seed, 9u);
	EXPECT_TRUE(i.active());
	EXPECT_EQ(imp("delay=0.002s").delay_ns, 2000000u);
	EXPECT_EQ(imp("delay=1500ns").delay_ns, 1500u);
	EXPECT_FALSE(imp("delay=0").active());
	EXPECT_TRUE(imp("ce=0.1").active());
	Impairment b = imp("dup=0.5,after=2s,for=250ms");
	EXPECT_EQ(b.after_ns, 2000000000u);
	EXPECT_EQ(b.for_ns, 250000000u);
	EXPECT_FALSE(b.in_burst(1999999999));
	EXPECT_TRUE(b.in_burst(2000000000));
	EXPECT_TRUE(b.in_burst(2249999999));
	EXPECT_FALSE(b.in_burst(2250000000));
	EXPECT_TRUE(imp("drop=1,after=1ms").in_burst(3600000000000));

	for (const char *bad :
	     {"delay=5", "delay=5xs", "delay=-1ms", "delay=4000s", "ce=1.5", "ce=x", "jitter=2ms",
	      "delay=1ms,jitter=2ms", "latency=1ms", "delay", "seed=-3", "after=2", "for=-1s"}) {
		Impairment out;
		std::string why;
		EXPECT_EQ(Impairment::parse(bad, &out, &why), EINVAL) << bad;
		EXPECT_FALSE(why.empty()) << bad;
	}
}

TEST(Impair, PacketsLeaveEct0)
{
	TosSocket rx;
	UdpPort tx;
	ASSERT_EQ(tx.open(0, false, Impairment{}, 1 << 20), 0);
	send_n(tx, Endpoint{kLo, rx.port}, 40);
	std::this_thread::sleep_for(std::chrono::milliseconds(20));
	int got = 0;
	for (int t; (t = rx.next_tos()) != -1; got++)
		ASSERT_EQ(t & 3, 2) << "ECN bits of datagram " << got << " (TOS " << t << ")";
	EXPECT_EQ(got, 40);
}

// Marks at the configured fraction: a binomial count within 5 sigma, seen
// the same on the wire (a plain socket's TOS) and by the port's counter.
TEST(Impair, CeMarksAtTheConfiguredFractionAreCounted)
{
	constexpr unsigned kN = 4000;
	constexpr double kP = 0.25;
	const double bound = 5 * std::sqrt(kN * kP * (1 - kP));

	UdpPort rx, tx;
	ASSERT_EQ(rx.open(0, false, Impairment{}, 8 << 20), 0);
	ASSERT_EQ(tx.open(0, false, imp("ce=0.25,seed=3"), 8 << 20), 0);
	unsigned got = 0;
	for (unsigned sent = 0; sent < kN; sent += 200) {
		send_n(tx, Endpoint{kLo, rx.port()}, 200, 1024);
		got += unsigned(drain(rx, 200, 2000).size());
	}
	ASSERT_EQ(got, kN) << "loopback lost packets";
	const PortCounters &rc = rx.counters(), &tc = tx.counters();
	EXPECT_EQ(rc.rx_ce, tc.impair_ce) << "marks sent and marks counted differ";
	EXPECT_NEAR(double(rc.rx_ce), kN * kP, bound);

	TosSocket raw;
	UdpPort tx2;
	ASSERT_EQ(tx2.open(0, false, imp("ce=0.25,seed=4"), 8 << 20), 0);
	unsigned ce = 0, ect = 0, other = 0;
	for (unsigned sent = 0; sent < kN; sent += 200) {
		send_n(tx2, Endpoint{kLo, raw.port}, 200, 1024);
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
		for (int t; (t = raw.next_tos()) != -1;)
			((t & 3) == 3 ? ce : (t & 3) == 2 ? ect : other)++;
	}
	EXPECT_EQ(ce + ect + other, kN);
	EXPECT_EQ(other, 0u) << "datagrams neither ECT(0) nor CE";
	EXPECT_EQ(ce, tx2.counters().impair_ce);
	EXPECT_NEAR(double(ce), kN * kP, bound);
}

// A burst (after=, for=): every packet is dropped inside the window, none
// before or after it.  Times are measured, and a phase the machine made
// late (a stalled test runner) is skipped rather than misjudged.
TEST(Impair, BurstDropsOnlyInItsWindow)
{
	UdpPort rx, tx;
	ASSERT_EQ(rx.open(0, false, Impairment{}, 1 << 20), 0);
	ASSERT_EQ(tx.open(0, false, imp("drop=1,after=1s,for=1s"), 1 << 20), 0);
	const uint64_t t0 = now_ns();
	const Endpoint dst{kLo, rx.port()};
	auto phase = [&](uint64_t from_ms, uint64_t to_ms) {
		while (now_ns() - t0 < from_ms * 1000000)
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		send_n(tx, dst, 20);
		if (now_ns() - t0 >= to_ms * 1000000)
			return -1; // late: it may have straddled an edge
		return int(drain(rx, 20, 300).size());
	};
	const int before = phase(0, 900), inside = phase(1300, 1800), after = phase(2300, 3000);
	if (before >= 0) {
		EXPECT_EQ(before, 20);
	}
	if (inside >= 0) {
		EXPECT_EQ(inside, 0);
	}
	if (after >= 0) {
		EXPECT_EQ(after, 20);
	}
	EXPECT_EQ(tx.counters().impair_dropped, inside >= 0 ? 20u : tx.counters().impair_dropped);
}

// A delayed packet is held (tx_flush returns at once), announced by
// tx_next_due, and leaves at the first flush after it is due; a port
// without the impairment is not held up meanwhile.
TEST(Impair, DelayHoldsPacketsUntilDueWithoutBlocking)
{
	UdpPort rx, slow, fast;
	ASSERT_EQ(rx.open(0, false, Impairment{}, 1 << 20), 0);
	ASSERT_EQ(slow.open(0, false, imp("delay=40ms"), 1 << 20), 0);
	ASSERT_EQ(fast.open(0, false, Impairment{}, 1 << 20), 0);
	const Endpoint dst{kLo, rx.port()};

	const uint64_t t0 = now_ns();
	send_n(slow, dst, 10);
	const uint64_t flushed = now_ns();
	EXPECT_LT(flushed - t0, 20000000u) << "committing and flushing blocked";
	const uint64_t due = slow.tx_next_due();
	EXPECT_GE(due, t0 + 40000000);
	EXPECT_LE(due, flushed + 40000000);
	EXPECT_EQ(slow.counters().impair_delayed, 10u);

	send_n(fast, dst, 5);
	EXPECT_EQ(drain(rx, 5, 1000).size(), 5u) << "the other port's packets were held up";
	EXPECT_LT(now_ns(), due) << "the machine was too slow to tell";

	slow.tx_flush(); // not due yet: nothing leaves
	EXPECT_TRUE(drain(rx, 1, 5).empty());
	// Each packet is due 40 ms after its own commit: on a slow machine
	// (a sanitizer's build) the ten commits spread wider than a flush
	// comes after the first is due, so flush as each falls due.
	const uint64_t give_up = due + 1000000000ull;
	for (uint64_t next = due; next && now_ns() < give_up; next = slow.tx_next_due()) {
		while (now_ns() < next)
			std::this_thread::sleep_for(std::chrono::microseconds(500));
		slow.tx_flush();
	}
	auto seqs = drain(rx, 10, 1000);
	const uint64_t t1 = now_ns();
	ASSERT_EQ(seqs.size(), 10u);
	for (uint32_t i = 0; i < 10; i++)
		EXPECT_EQ(seqs[i], i);
	EXPECT_GE(t1 - t0, 40000000u);
	EXPECT_EQ(slow.tx_next_due(), 0u);
}

TEST(Impair, JitterSpreadsButKeepsOrder)
{
	UdpPort rx, tx;
	ASSERT_EQ(rx.open(0, false, Impairment{}, 4 << 20), 0);
	ASSERT_EQ(tx.open(0, false, imp("delay=10ms,jitter=5ms,seed=5"), 4 << 20), 0);
	const uint64_t t0 = now_ns();
	send_n(tx, Endpoint{kLo, rx.port()}, 300);
	std::vector<uint32_t> seqs;
	while (seqs.size() < 300 && now_ns() - t0 < 2000000000ull) {
		tx.tx_flush();
		auto s = drain(rx, 300, 1);
		seqs.insert(seqs.end(), s.begin(), s.end());
	}
	ASSERT_EQ(seqs.size(), 300u);
	for (uint32_t i = 0; i < 300; i++)
		ASSERT_EQ(seqs[i], i) << "jitter reordered packets";
	EXPECT_GE(now_ns() - t0, 5000000u);
}

TEST(Impair, FullDelayLineDropsAndCounts)
{
	UdpPort rx, tx;
	ASSERT_EQ(rx.open(0, false, Impairment{}, 1 << 20), 0);
	ASSERT_EQ(tx.open(0, false, imp("delay=1s"), 65536), 0);
	const size_t cap = tx.delay_capacity();
	ASSERT_GT(cap, 0u);
	send_n(tx, Endpoint{kLo, rx.port()}, unsigned(cap + 50));
	EXPECT_EQ(tx.counters().impair_delayed, cap);
	EXPECT_EQ(tx.counters().impair_delay_overflow, 50u);
}
