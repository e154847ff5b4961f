// The device's Ethernet port: one UDP socket carrying RoCEv2, batched
// sends (sendmmsg, with UDP segmentation offload for runs of equal-sized
// packets to one peer) and receives (recvmmsg, with UDP GRO), and the
// test-only impairment hook that drops, duplicates, reorders, delays and
// CE-marks outgoing packets.  Every packet leaves ECN-capable (ECT(0)), as
// a RoCEv2 NIC's do, and received CE marks are counted.
#pragma once

#include "net/impairment.h"
#include "net/transport.h"
#include "util/fd.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ibv_coll::emu {

class UdpPort final : public Transport {
public:
	static constexpr unsigned kRxMsgs = 32; // datagrams per recvmmsg
	static constexpr size_t kRxBuf = 65536; // room for one GRO super-packet
	// Bytes in one GSO send: an IP datagram holds 65535 with its headers,
	// so fifteen 4 KiB packets (4160 bytes with theirs) fit, not sixteen.
	static constexpr size_t kGsoMax = 65000;

	UdpPort();
	~UdpPort() override;
	// Bind the port on every local address (IPv6 dual-stack when the host
	// has IPv6).  port 0 picks a free one; with fallback, a busy port falls
	// back to a free one instead of failing.  With reuseport, other sockets
	// of this user may bind it too (SO_REUSEPORT): a switch's workers.
	int open(uint16_t port, bool fallback, const Impairment &imp, unsigned sockbuf,
		 bool gso = true, bool reuseport = false);
	int fd() const override { return fd_.get(); }
	uint16_t port() const override { return port_; }
	bool ipv6() const override { return v6_; }
	const char *kind() const override { return "udp"; }

	// Build a packet in place: tx_buf() gives room for kMaxPacket bytes,
	// tx_commit() queues it.  Queued packets leave at tx_flush() or when
	// the batch is full.
	uint8_t *tx_buf() override;
	void tx_commit(size_t len, const Endpoint &dst, const IpAddr &src) override;
	void tx_flush() override;
	// The payload is sent from the caller's memory (sendmmsg gathers it),
	// not copied; a payload in this port's receive buffers is safe too:
	// the next receive flushes first.
	void tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
			     size_t trailer_len, const Endpoint &dst, const IpAddr &src) override;
	uint64_t tx_lend_mark() const override { return flushes_ + 1; }
	void tx_reclaim(uint64_t mark) override;

	// Receive up to kBatch packets without blocking; the buffers stay valid
	// until the next call.  Returns the count.
	unsigned rx_batch(RxPacket *out) override;
	// Whether segmentation offload is in use (IBV_COLL_EMU_GSO, and the
	// kernel accepted it).
	bool gso() const { return gso_; }

	const PortCounters &counters() const override { return ctr_; }
	void set_port_wait(bool wait) override { waits_ = wait; }
	uint64_t tx_next_due() const override;

	// Slots in the delay line: packets a delay impairment holds.  Beyond
	// it, packets are dropped and counted, as a full queue would.
	size_t delay_capacity() const { return dl_.size(); }

private:
	struct Slot;
	// A packet on the delay line; its bytes are in dl_buf_.
	struct Delayed {
		uint64_t due;
		uint32_t len;
		bool ce;
		Endpoint dst;
		IpAddr src;
	};
	static size_t build_ctl(const Slot &s, size_t gso_seg, uint8_t *cbuf);
	void emit(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src);
	void delay_push(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src);
	void delay_release();
	// A datagram the interface's queue refused: since when, and how much
	// this socket had queued below it then (SIOCOUTQ); stuck: a wait in
	// this flush gave up, and the rest of it does not wait.
	struct Backlog {
		uint64_t since = 0;
		int queued = -1;
		bool stuck = false;
	};
	static constexpr uint64_t kWaitStepNs = 20000, kStuckNs = 5000000;
	void ask_errors();
	static bool icmp_errno(int err);
	bool wait_room(Backlog &b);
	int below() const;
	void send_singly(const msghdr &m, unsigned a, unsigned b, Backlog &full);
	void shorten_runs(unsigned a, unsigned b);
	void drain_errors();
	void send_queued();
	unsigned rx_fill();
	void rx_prepare();
	void alloc_buffers();
	void group_by_peer();
	void queue(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src,
		   bool ce = false);
	Slot &new_slot(const Endpoint &dst, const IpAddr &src, bool ce = false);
	uint8_t *cur_buf() { return tx_arena_.data() + size_t(tx_cur_) * kMaxPacket; }
	bool roll(double p);

	util::UniqueFd fd_;
	uint16_t port_ = 0;
	bool v6_ = false;
	Impairment imp_;
	uint64_t opened_ns_ = 0; // when open() ran: the origin of a burst's after=
	std::mt19937_64 rng_;
	// kBatch + 1 packet buffers used round: the one being built
	// (tx_cur_) is never one a queued packet uses, so a flush between
	// tx_buf() and the commit loses nothing.
	std::vector<uint8_t> tx_arena_, rx_arena_;
	std::unique_ptr<Slot[]> tx_, tx_tmp_, rx_;
	unsigned tx_n_ = 0, tx_cur_ = 0;
	uint64_t flushes_ = 0; // flushes that sent something
	bool rx_lent_ = false; // a queued packet's payload is in rx_arena_
	bool gso_ = false;
	bool recverr_ = false;	   // IP_RECVERR: ENOBUFS and ICMP errors reported
	bool waits_ = true;	   // a full interface queue: wait (not drop)
	size_t gso_max_ = kGsoMax; // bytes in one GSO run (shorter for a small queue)
	// recvmmsg's headers, into rx_; the first rx_dirty_ are to be set up
	// again (for the GRO setting rx_gso_).
	std::unique_ptr<struct mmsghdr[]> rx_msgs_;
	unsigned rx_dirty_ = 0;
	bool rx_gso_ = false;
	// Packets of the last recvmmsg not yet handed out.
	std::vector<RxPacket> rx_pending_;
	size_t rx_next_ = 0;
	// A packet held back by the reorder impairment, sent after the next one.
	std::vector<uint8_t> held_;
	Endpoint held_dst_;
	IpAddr held_src_;
	bool have_held_ = false;
	// The delay line: a ring of kMaxPacket slots (dl_buf_) with their
	// headers (dl_), allocated when a delay is configured; due times never
	// decrease, so the head is always the next to leave.
	std::vector<Delayed> dl_;
	std::vector<uint8_t> dl_buf_;
	size_t dl_head_ = 0, dl_n_ = 0;
	uint64_t dl_last_due_ = 0;
	PortCounters ctr_;
};

} // namespace ibv_coll::emu
