// What the device's engine and the switch send and receive packets
// through.  A packet is a whole RoCEv2 packet from the BTH to the ICRC; the
// transport moves it to an endpoint and hands received ones back with
// their source and destination addresses.  Two implementations: UdpPort
// (RoCEv2 over a UDP socket, the emulated NIC's own Ethernet port) and
// UdTransport (each packet in a UD datagram of a libibverbs device, so the
// engine runs over kernel Soft-RoCE or a real RDMA NIC).
#pragma once

#include "net/impairment.h"
#include "wire/icrc.h"

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

namespace ibv_coll::emu {

// An IP address as 16 bytes, IPv4 mapped (::ffff:a.b.c.d), and a port.
// A RoCEv2 GID has the same form.
struct IpAddr {
	uint8_t b[16] = {};
	// Inline: every packet the switch takes in is matched to its child by
	// address.
	bool operator==(const IpAddr &o) const { return memcmp(b, o.b, 16) == 0; }
	bool v4() const;
	std::string str() const;
	static IpAddr from_v4(uint32_t be_addr);
};

// Where a packet goes: an address and a UDP port.  qpn is, for a switch on
// a verbs device, the UD QP it serves on (ibv_coll_switch_addr.qp_num): the
// destination QP that packets to it carry in their BTH.  Two endpoints are
// the same place when address and port are.
struct Endpoint {
	IpAddr ip;
	uint16_t port = 0;
	uint32_t qpn = 0;
	bool operator==(const Endpoint &o) const { return ip == o.ip && port == o.port; }
};

// The addresses and ports a packet's ICRC covers (wire/icrc.h): from src
// at sport to dst; a received packet's from its source to this port.
inline wire::UdpEndpoints udp_endpoints(const IpAddr &src, uint16_t sport, const Endpoint &dst)
{
	wire::UdpEndpoints ep;
	memcpy(ep.src, src.b, 16);
	memcpy(ep.dst, dst.ip.b, 16);
	ep.sport = sport;
	ep.dport = dst.port;
	return ep;
}

inline wire::UdpEndpoints udp_endpoints(const Endpoint &src, const IpAddr &dst, uint16_t dport)
{
	wire::UdpEndpoints ep;
	memcpy(ep.src, src.ip.b, 16);
	memcpy(ep.dst, dst.b, 16);
	ep.sport = src.port;
	ep.dport = dport;
	return ep;
}

struct PortCounters {
	uint64_t tx_packets = 0, tx_bytes = 0, rx_packets = 0, rx_bytes = 0;
	uint64_t tx_errors = 0, rx_errors = 0;
	uint64_t tx_syscalls = 0, rx_syscalls = 0; // sendmmsg/recvmmsg (or post/poll) calls
	// Receive calls that returned datagrams, and the datagrams (a GRO
	// super-packet is one): the batches a receiver really gets.
	uint64_t rx_busy_syscalls = 0, rx_datagrams = 0;
	uint64_t tx_gso = 0, rx_gro = 0; // super-packets sent/received
	uint64_t impair_dropped = 0, impair_duplicated = 0, impair_reordered = 0;
	uint64_t impair_delayed = 0, impair_delay_overflow = 0, impair_ce = 0;
	uint64_t rx_ce = 0; // packets received with ECN CE, for congestion control
	// Sends that found the interface's queue full and waited for room,
	// and the time they waited; ICMP errors read off the socket.
	uint64_t tx_full_waits = 0, tx_full_wait_us = 0, icmp_errors = 0;
};

// ECN codepoints (RFC 3168) in the low two bits of TOS / traffic class.
constexpr uint8_t kEcnMask = 3, kEcnEct0 = 2, kEcnCe = 3;

struct RxPacket {
	uint8_t *data; // BTH
	size_t len;    // to the end of the ICRC
	Endpoint src;
	IpAddr dst;
	uint8_t ecn = 0; // the IP header's ECN bits, where the transport sees them
	// When the packet reached this host (the socket's receive timestamp),
	// on util::now_ns()'s clock: what it waited from then until it is
	// handled is this endpoint's delay, not the network's (nic/cc.h).
	// 0: not known (handled as now).
	uint64_t rx_ns = 0;
};

class Transport {
public:
	static constexpr unsigned kBatch = 64; // packets queued or returned at once
	static constexpr size_t kMaxPacket = 4096 +
					     512; // room in tx_buf(), whatever the wire takes

	virtual ~Transport() = default;
	// Readable (poll/epoll) when rx_batch may have packets.  A transport
	// whose readiness must be re-armed does so inside rx_batch when it
	// returns fewer than kBatch.
	virtual int fd() const = 0;
	// The UDP port packets to us carry (4791 for UdTransport).
	virtual uint16_t port() const = 0;
	// Whether IPv6 destinations can be reached.
	virtual bool ipv6() const = 0;

	// Build a packet in place in tx_buf() (room for kMaxPacket bytes),
	// queue it with tx_commit(); queued packets leave at tx_flush() or
	// when the batch is full.  A packet larger than the transport carries
	// is dropped and counted as a transmit error.
	virtual uint8_t *tx_buf() = 0;
	virtual void tx_commit(size_t len, const Endpoint &dst, const IpAddr &src) = 0;
	virtual void tx_flush() = 0;
	// A packet whose payload is sent from where it is: tx_buf() holds the
	// headers (hdr_len bytes) followed by the trailer (pad and ICRC,
	// trailer_len bytes); on the wire the payload goes between them.  The
	// payload must stay as it is until the memory is reclaimed (below).
	// This implementation copies it into place and commits.
	virtual void tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
				     size_t trailer_len, const Endpoint &dst, const IpAddr &src);
	// Memory lent to the packets queued so far is free again once
	// tx_reclaim(tx_lend_mark()) has returned (it flushes if they are
	// still queued).  A transport that copies lends nothing.
	virtual uint64_t tx_lend_mark() const { return 0; }
	virtual void tx_reclaim(uint64_t /*mark*/) {}
	// Up to kBatch received packets, without blocking; the buffers stay
	// valid until the next call.
	virtual unsigned rx_batch(RxPacket *out) = 0;
	// When packets the transport holds back (a delay impairment) are due
	// to leave, on util::now_ns()'s clock; 0 when it holds none.  Whoever
	// sleeps wakes by then and calls tx_flush(), which sends what is due.
	virtual uint64_t tx_next_due() const { return 0; }
	// Whether a send that finds the interface's queue full waits for room
	// (a NIC's port, the default) or loses the packet (a switch's port:
	// a lossy network's switch drops at a full port and goes on with the
	// others).  Transports without such a queue ignore it.
	virtual void set_port_wait(bool /*wait*/) {}

	// Collective QPs: a transport that addresses queue pairs (UdTransport)
	// gives each its own number, which the engine then uses as the QP's;
	// 0 with *qpn untouched lets the engine number the QP itself.
	virtual int bind_qpn(uint32_t * /*qpn*/) { return 0; }
	virtual void unbind_qpn(uint32_t /*qpn*/) {}

	virtual const PortCounters &counters() const = 0;
	virtual const char *kind() const = 0;
};

// Opens a transport for the engine or the switch.
using TransportFactory = std::function<int(std::unique_ptr<Transport> *out)>;

// The transport `factory` opens, or, when it is empty, a UdpPort opened
// with the other arguments (as UdpPort::open takes them).
int open_transport(const TransportFactory &factory, std::unique_ptr<Transport> *out, uint16_t port,
		   bool fallback, const Impairment &imp, unsigned sockbuf, bool gso);

} // namespace ibv_coll::emu
