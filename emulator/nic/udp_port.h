// The device's Ethernet port: one UDP socket carrying RoCEv2, batched
// sends (sendmmsg, with UDP segmentation offload for runs of equal-sized
// packets to one peer) and receives (recvmmsg, with UDP GRO), and the
// test-only impairment hook that drops, duplicates and reorders outgoing
// packets.
#pragma once

#include "util/fd.h"

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ibv_coll::emu {

// An IP address as 16 bytes, IPv4 mapped (::ffff:a.b.c.d), and a port.
struct IpAddr {
	uint8_t b[16] = {};
	bool operator==(const IpAddr &o) const;
	bool v4() const;
	std::string str() const;
	static IpAddr from_v4(uint32_t be_addr);
};

struct Endpoint {
	IpAddr ip;
	uint16_t port = 0;
	bool operator==(const Endpoint &o) const { return ip == o.ip && port == o.port; }
};

// Test-only impairment of the transmit path, from IBV_COLL_EMU_IMPAIR
// ("drop=0.05,dup=0.01,reorder=0.01,seed=7").
struct Impairment {
	double drop = 0, dup = 0, reorder = 0;
	uint64_t seed = 1;
	bool active() const { return drop > 0 || dup > 0 || reorder > 0; }
	static int parse(const std::string &spec, Impairment *out);
};

struct PortCounters {
	uint64_t tx_packets = 0, tx_bytes = 0, rx_packets = 0, rx_bytes = 0;
	uint64_t tx_errors = 0, rx_errors = 0;
	uint64_t tx_syscalls = 0, rx_syscalls = 0; // sendmmsg/recvmmsg calls
	uint64_t tx_gso = 0, rx_gro = 0;	    // super-packets sent/received
	uint64_t impair_dropped = 0, impair_duplicated = 0, impair_reordered = 0;
};

struct RxPacket {
	uint8_t *data;
	size_t len;
	Endpoint src;
	IpAddr dst;
};

class UdpPort {
public:
	static constexpr size_t kMaxPacket = 4096 + 512;
	static constexpr unsigned kBatch = 64;	 // packets queued or returned at once
	static constexpr unsigned kRxMsgs = 32;	 // datagrams per recvmmsg
	static constexpr size_t kRxBuf = 65536;	 // room for one GRO super-packet
	static constexpr size_t kGsoMax = 60000; // bytes in one GSO send

	UdpPort();
	~UdpPort();
	// Bind the port on every local address (IPv6 dual-stack when the host
	// has IPv6).  port 0 picks a free one; with fallback, a busy port falls
	// back to a free one instead of failing.
	int open(uint16_t port, bool fallback, const Impairment &imp, unsigned sockbuf,
		 bool gso = true);
	int fd() const { return fd_.get(); }
	uint16_t port() const { return port_; }
	bool ipv6() const { return v6_; }

	// Build a packet in place: tx_buf() gives room for kMaxPacket bytes,
	// tx_commit() queues it.  Queued packets leave at tx_flush() or when
	// the batch is full.
	uint8_t *tx_buf();
	void tx_commit(size_t len, const Endpoint &dst, const IpAddr &src);
	void tx_flush();

	// Receive up to kBatch packets without blocking; the buffers stay valid
	// until the next call.  Returns the count.
	unsigned rx_batch(RxPacket *out);
	// Whether segmentation offload is in use (IBV_COLL_EMU_GSO, and the
	// kernel accepted it).
	bool gso() const { return gso_; }

	const PortCounters &counters() const { return ctr_; }

private:
	struct Slot;
	unsigned rx_fill();
	void group_by_peer();
	void queue(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src);
	bool roll(double p);

	util::UniqueFd fd_;
	uint16_t port_ = 0;
	bool v6_ = false;
	Impairment imp_;
	std::mt19937_64 rng_;
	std::vector<uint8_t> tx_arena_, rx_arena_;
	std::unique_ptr<Slot[]> tx_, tx_tmp_, rx_;
	unsigned tx_n_ = 0;
	bool gso_ = false;
	// Packets of the last recvmmsg not yet handed out.
	std::vector<RxPacket> rx_pending_;
	size_t rx_next_ = 0;
	// A packet held back by the reorder impairment, sent after the next one.
	std::vector<uint8_t> held_;
	Endpoint held_dst_;
	IpAddr held_src_;
	bool have_held_ = false;
	PortCounters ctr_;
};

} // namespace ibv_coll::emu
