// The port's waits for room in the interface's queue, and the socket's
// error queue (IP_RECVERR): the sending side's answers to what the
// kernel says about datagrams it could not take or deliver.
#include "net/udp_port.h"

#include "net/net_config.h"

#include "util/clock.h"
#include "util/log.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <ctime>

namespace ibv_coll::emu {

// A full queue below the socket (the interface's qdisc) refuses a
// datagram with ENOBUFS, which the kernel reports only with IP_RECVERR:
// the port then waits for room, as a NIC's transmit ring does, rather
// than dropping its own packets (send_queued).  The option also queues
// ICMP errors on the socket (drain_errors).  IBV_COLL_EMU_PORT_WAIT=0
// leaves it off: such packets are lost, as they were before.
void UdpPort::ask_errors()
{
	const int on = 1, fd = fd_.get();
	recverr_ = false;
	if (!net_port_wait())
		return;
	recverr_ = setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof(on)) == 0;
	if (v6_)
		recverr_ = setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof(on)) == 0 &&
			   recverr_;
	if (!recverr_)
		IBVC_INFO("port", "no IP_RECVERR ({}): a full interface queue drops packets",
			  util::errstr(errno));
}

// What IP_RECVERR reports for an ICMP error about a datagram sent.
bool UdpPort::icmp_errno(int err)
{
	switch (err) {
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
	case EPROTO:
	case EMSGSIZE:
	case EACCES:
	case ENOPROTOOPT: return true;
	default: return false;
	}
}

// The interface's queue had no room for a datagram (ENOBUFS): wait a
// little for it to drain, and say whether to try again.  A NIC does not
// drop its own packets for want of room in its transmit queue; the wait
// delays this flow's packets, which its congestion control sees.  The
// queue below the socket (SIOCOUTQ: what it has handed down and not yet
// seen leave) must shrink: one that stays as it is for kStuckNs (a link
// that is down, an interface that holds its packets) is given up on, and
// the datagram is lost as before.
bool UdpPort::wait_room(Backlog &b)
{
	if (b.stuck || !waits_)
		return false; // not again in this flush: one wait at most
	const uint64_t now = util::now_ns();
	const int q = below();
	if (!b.since) { // a send refused anew: counted once, however long it waits
		if (!ctr_.tx_full_waits++)
			IBVC_INFO("port", "the interface's queue is full: sends wait for room");
	}
	if (!b.since || q < b.queued) {
		b.since = now;
		b.queued = q;
	} else if (now - b.since >= kStuckNs) {
		IBVC_DEBUG("port", "the interface's queue did not drain for {} us: dropping",
			   kStuckNs / util::kNsPerUs);
		b.stuck = true;
		return false;
	}
	timespec ts{0, long(kWaitStepNs)};
	nanosleep(&ts, nullptr);
	ctr_.tx_full_wait_us += (util::now_ns() - now) / util::kNsPerUs;
	return true;
}

// What this socket has handed to the interface and not yet seen leave
// (SIOCOUTQ), in bytes; -1 when the kernel does not say.
int UdpPort::below() const
{
	int q = -1;
	return ioctl(fd_.get(), SIOCOUTQ, &q) == 0 ? q : -1;
}

// Read and drop the socket's queued errors (IP_RECVERR): ICMP messages
// about earlier datagrams, which would otherwise keep its poll readable.
// A peer that went away shows up as lost packets, as it would on a wire.
void UdpPort::drain_errors()
{
	alignas(cmsghdr) uint8_t cbuf[512];
	uint8_t data[64];
	for (;;) { // all of it: what is left keeps POLLERR up
		iovec iov{data, sizeof(data)};
		msghdr m{};
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		if (recvmsg(fd_.get(), &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
		ctr_.icmp_errors++;
	}
}

} // namespace ibv_coll::emu
