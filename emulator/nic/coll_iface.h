// The two interfaces between the NIC and its collective unit (coll/), so
// that neither needs the other's insides and each can be driven by a fake
// of the other in a unit test:
//   CollHost    what the collective unit asks of its NIC: post a CQE,
//               transmit, look up a QP, fail a QP, check a DMA access, clock;
//   CollService what the NIC asks of its collective unit: configure a job,
//               run its messages (progress, timers), deliver a packet,
//               flush a QP in error, release a job.
// The NIC holds a collective QP's job as an opaque CollJobPtr.
#pragma once

#include "nic/cc.h"
#include "nic/mr_table.h"
#include "nic/packet.h"
#include "net/transport.h"
#include "nic/wqe.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ibv_coll::emu {

struct Cq;
struct Qp;
struct JobConfig;
struct NicParams;
struct CollJob;

constexpr uint32_t kSegUnitBytes = 4096; // the largest data block (path MTU)

struct CollCounters {
	uint64_t tx_data = 0, tx_result = 0, rx_data = 0, rx_result = 0;
	uint64_t tx_bytes = 0, rx_bytes = 0;
	uint64_t retrans_data = 0, retrans_result = 0;
	// Of retrans_data, the exchange's partials sent again at once because
	// a later one to the same peer came first (coll/xchg_ack.cc).
	uint64_t fast_repeats = 0;
	uint64_t dup_dropped = 0, early_stored = 0, early_dropped = 0, stale_dropped = 0;
	uint64_t bad_key = 0, bad_job = 0, bad_block = 0, bad_node = 0, malformed = 0;
	uint64_t seg_busy = 0, aborts_sent = 0, aborts_rcvd = 0, timeouts = 0;
	uint64_t reductions = 0;
	// Loss recovery before the timeout: gaps NAKed to the member that
	// sends the blocks again (ring), NAKs taken, and tail-loss probes.
	uint64_t naks_sent = 0, naks_rcvd = 0, probes = 0;
	// Sending interrupted on the switch path: how often a member had blocks
	// left to send and a full window (their results, or node 0's ACKs, not
	// back yet: the interruption that seed 001's result as acknowledgement
	// shortens), and for how long in all.
	uint64_t win_holds = 0, win_held_ns = 0;
	// Collective WRs finished (failed: not with success), their blocks,
	// and those that ran round the ring because no switch served them.
	uint64_t messages = 0, failed = 0, blocks = 0, fallbacks = 0;
	// Collective WRs started while others of the job ran (beside them,
	// IBV_COLL_EMU_COLL_DEPTH).
	uint64_t beside = 0;
	// Every collective packet handed to the unit is counted once: rx_packets
	// = delivered + dup_dropped + stale_dropped + early_stored +
	// early_dropped + bad_key + bad_job + bad_block + bad_node + malformed +
	// the host's no-QP and bad-state drops of collective packets
	// (host_dropped).  delivered: acted on by execution control or a
	// strategy (data reduced or written, passed on, answered, an ACK,
	// ABORT or grant taken).
	uint64_t rx_packets = 0, delivered = 0, host_dropped = 0;
};

// A collective QP's job belongs to the collective unit, which frees it.
struct CollJobDelete {
	void operator()(CollJob *job) const;
};
using CollJobPtr = std::unique_ptr<CollJob, CollJobDelete>;

// What the collective unit needs of the NIC that hosts it.
class CollHost {
public:
	explicit CollHost(const NicParams &p) : params(p) {}
	virtual ~CollHost() = default;
	CollHost(const CollHost &) = delete;
	CollHost &operator=(const CollHost &) = delete;

	const NicParams &params; // the device's name (for log lines), gids, configuration

	virtual uint64_t now() const = 0; // ns, monotonic
	// The QP a packet addresses (nullptr: none).
	virtual Qp *find_qp(uint32_t qpn) = 0;
	// Write a completion (false: the CQ overran, counted by the NIC).
	virtual bool push_cqe(Cq *cq, const Cqe &c) = 0;
	// Move a QP to the error state (its WQEs are then flushed through
	// CollService::flush).
	virtual void qp_to_error(Qp &qp, const char *why) = 0;
	// Whether [addr, addr + len) lies in MR lkey of protection domain pdn
	// with `need` access (the DMA engine's check).
	virtual bool dma_ok(uint32_t lkey, uint32_t pdn, uint64_t addr, uint64_t len,
			    uint32_t need) = 0;
	// The address space of protection domain pdn's memory: the copies
	// after dma_ok() go through dma_read()/dma_write() when it is not
	// kLocalSpace (the default, for hosts that have no other).
	virtual DmaSpace pd_space(uint32_t pdn) const
	{
		(void)pdn;
		return kLocalSpace;
	}

	// The port.
	virtual uint16_t udp_port() const = 0;
	virtual bool ipv6() const = 0;
	// Build the next packet here (BTH onwards), then send it with tx_to()
	// (payload built after the headers) or tx_split() (payload sent from
	// where it is; tail_crc, when known, is crc32_update(0, payload || pad)).
	// Both pad the payload, add the ICRC and queue the packet.
	virtual uint8_t *tx_buf() = 0;
	virtual void tx_to(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
			   uint32_t paylen) = 0;
	virtual void tx_split(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
			      const uint8_t *payload, uint32_t paylen,
			      const uint32_t *tail_crc) = 0;
	// Memory lent to queued packets (Transport::tx_lend_mark, tx_reclaim).
	virtual uint64_t tx_lend_mark() const = 0;
	virtual void tx_reclaim(uint64_t mark) = 0;
	virtual void tx_flush() = 0;
	virtual uint64_t tx_packets() const = 0; // sent so far, to tell whether a pass did work

	// Drops the NIC counts as its own (no such QP, QP in the wrong state).
	virtual void count_no_qp() = 0;
	virtual void count_bad_state() = 0;

	// Congestion (nic/cc.h): a CNP to the sender of a CE-marked packet,
	// at most one per flow per IBV_COLL_EMU_CNP_INTERVAL_US (*last: the
	// flow's last one), and the device's congestion counters.
	virtual void send_cnp(const Endpoint &dst, const IpAddr &src, uint32_t dqpn, uint64_t *last,
			      uint64_t now) = 0;
	virtual CcCounters &cc_counters() = 0;
};

// What the NIC needs of its collective unit.
class CollService {
public:
	virtual ~CollService() = default;
	// Give a collective QP its job (0, or an errno value).
	virtual int configure(Qp &qp, const JobConfig &cfg) = 0;
	// Run the QP's work queue and its running message (a QP in RTS);
	// true if anything happened.
	virtual bool progress(Qp &qp, uint64_t now) = 0;
	// The QP's next timer (0: none).
	virtual uint64_t next_deadline(const Qp &qp) const = 0;
	// Complete what the QP (in error) has queued with a flush error.
	virtual bool flush(Qp &qp) = 0;
	// A packet with a collective BTH opcode (ICRC checked).
	virtual void on_packet(const InPacket &p) = 0;
	// The job leaves the QP (reset or destroyed): its switches are told,
	// its Seg units and early blocks freed, qp.job reset.
	virtual void release(Qp &qp) = 0;
	// The job is about to leave the QP: what its peers are owed goes now;
	// true while they have not acknowledged all it sent them.
	virtual bool leaving(Qp &qp, uint64_t now) = 0;
	// A CNP for the QP's job from src: its flows cut their window (false:
	// src is not a member of the job, nothing changes).
	virtual bool on_cnp(Qp &qp, const Endpoint &src, uint64_t now) = 0;

	virtual CollCounters counters() const = 0;
	virtual uint32_t seg_units() const = 0;
	virtual uint32_t seg_unit_bytes() const = 0;
	virtual uint32_t seg_in_use() const = 0;
	virtual uint32_t seg_high_water() const = 0;
};

// The collective unit (coll/): seg_units Seg units of seg_bytes each.
std::unique_ptr<CollService> make_coll_service(CollHost &host, uint32_t seg_units,
					       uint32_t seg_bytes);

} // namespace ibv_coll::emu
