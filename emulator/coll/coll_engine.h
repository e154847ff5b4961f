// The collective offload unit of the emulated NIC ("CollEngine", to tell it
// from the NIC's own engine, nic/Engine; the two meet only through
// nic/coll_iface.h), in five modules:
// execution control (exec_ctrl.cc: WQEs, validation, the job table, the
// choice of strategy per message), parse & encapsulate (codec.cc: the
// classification of CETH packets decoded by wire/coll_codec.h; xmit.cc
// sends them through the same codec), data cache & compute
// (seg_pool.cc), data transmission (xmit.cc: the block chain and the DMA
// from and to the local ranks) and status update (status.cc: CQEs).  The
// strategies (coll/coll_path.h: the ring in ring.cc, the switch path in
// swpath.cc) run messages on top of these shared services, which they see
// as CollCore: the engine derives from it privately, and its execution
// control (jobs, joined QPs, the choice of strategy) is not theirs to call.
#pragma once

#include "coll/coll_job.h"
#include "coll/coll_path.h"
#include "nic/coll_iface.h"
#include "nic/packet.h"
#include "seg/seg_pool.h"
#include "wire/ceth.h"

#include <cstdint>

namespace ibv_coll::emu {

struct Qp;

// The block of a one-node job, which never leaves the device.
constexpr uint32_t kLocalBlockBytes = 64 * 1024;
// A full block's packet on the wire, with its headers (about): the unit
// of how far ahead of the port blocks may go, and of the shortest pause
// counted as a sending interruption (SwitchPath::note_held).
constexpr uint32_t kBlockWireBytes = kSegUnitBytes + 128;

// A parsed collective packet.
struct CollPacket {
	uint8_t kind;
	wire::Ceth h;
	const uint8_t *payload;
	uint32_t paylen;
	Endpoint src;
	// crc32_update(0, payload || pad) when known (0 = unknown), so that
	// a packet passing the payload on need not read it again.
	const uint32_t *crc;
	uint64_t rx_ns = 0; // when it reached this host (InPacket::rx_ns; 0: not known)
	// From when its wait here is queueing (CETH queue): rx_ns, but for a
	// block kept early, when its message started here (0: rx_ns).
	uint64_t q_ns = 0;

	// How long it has waited here by now, and queued.
	uint64_t held(uint64_t now) const { return rx_ns && rx_ns < now ? now - rx_ns : 0; }
	uint64_t queued(uint64_t now) const
	{
		const uint64_t from = q_ns ? q_ns : rx_ns;
		return from && from < now ? now - from : 0;
	}
	// The CETH hold and queue of its block passed on at now: what it
	// carried, and its wait here.
	uint32_t hold_on(uint64_t now) const { return wire::hold_add(h.hold, held(now)); }
	uint32_t queue_on(uint64_t now) const { return wire::hold_add(h.queue, queued(now)); }
	// The endpoints' part of a round trip that it ends (nic/cc.h): the
	// peers' and ours; not known when a peer could not say.
	Holding holding(uint64_t now) const
	{
		if (h.hold == wire::kHoldUnknown)
			return Holding::unknown();
		return Holding{h.hold + held(now), uint64_t(h.queue) + queued(now)};
	}
};

// What a collective packet carries, and how it gets onto the wire.
struct Payload {
	const uint8_t *data = nullptr;
	uint32_t len = 0;
	// data stays as it is until the engine reclaims what it lent (the
	// application's buffers until the completion, a message's staging, a
	// received packet until the next receive): it is sent from where it
	// is.  Otherwise (scratch space, Seg units) it is copied into the
	// transmit buffer, unless it was built there.
	bool lend = false;
	const uint32_t *crc = nullptr; // crc32_update(0, data || pad), when known
	static Payload lent(const uint8_t *d, uint32_t n, const uint32_t *crc = nullptr)
	{
		return Payload{d, n, true, crc};
	}
	static Payload copied(const uint8_t *d, uint32_t n)
	{
		return Payload{d, n, false, nullptr};
	}
};

// What a strategy (coll/coll_path.h) may use of the engine: the device it
// runs on, the Seg units, the counters, and the services the ring and the
// switch path share (sending, timers and windows, the DMA from and to the
// local ranks, failing the message).  Execution control, the job table and
// the joined QPs are CollEngine's own: a strategy reaches them only
// through the CollPath calls execution control makes.
class CollCore {
public:
	CollCounters ctr;
	CollHost &host() const { return e_; }
	SegPool &segs() { return segs_; }
	const SegPool &segs() const { return segs_; }
	// Two blocks' worth (or more, as the ring grows it) of scratch space,
	// made at its first use: a NIC whose jobs run through switches without
	// an average never needs it (8 KiB a host of a simulated fabric).
	std::vector<uint8_t> &scratch()
	{
		if (scratch_.size() < 2 * size_t(segs_.unit_bytes()))
			scratch_.resize(2 * size_t(segs_.unit_bytes()));
		return scratch_;
	}

	// codec.cc.  Every packet carries the job's incarnation, unless
	// other_inc (an answer to a member of another incarnation, in its
	// own).
	void send(const CollJob &job, uint16_t to, uint8_t kind, const wire::Ceth &h,
		  const Payload &pl = {}, bool other_inc = false);
	void send_ep(const CollJob &job, const Endpoint &to, uint32_t qpn, uint8_t kind,
		     const wire::Ceth &h, const void *ext, uint32_t ext_len, const Payload &pl,
		     bool other_inc = false);
	// Where send()/send_ep() build the payload of the next packet with
	// ext_len bytes of extension: a producer may write it there.
	uint8_t *tx_payload(uint32_t ext_len = 0);
	// The port (EmuConfig::port_rate_bps): a new block goes only while
	// what was sent before it leaves the port within kPortAheadBytes, so
	// that a repair sent at once is not queued behind a window of new
	// blocks.  Always ready without a rate.
	bool port_ready(uint64_t now) const { return now >= port_ready_at(); }
	uint64_t port_idle_at() const { return port_free_; } // the wire's last bit out (0: no rate)
	uint64_t port_ready_at() const
	{
		return port_free_ > port_ahead_ ? port_free_ - port_ahead_ : 0;
	}
	// Block sid of m's sources was just lent to a packet (see Message::src_lent).
	void note_src_lent(Message &m, uint32_t sid)
	{
		if (m.inplace)
			m.src_lent[sid] = lent_;
	}
	wire::Ceth header(const CollJob &job, const Message &m, uint32_t sid) const;
	// xmit.cc
	bool local_partial(const CollJob &job, Message &m, uint32_t sid, uint8_t *out);
	// The same, read-only: with one local rank *out points into its buffer
	// (no copy), else it is SCRATCH with the ranks' reduction in it.
	bool local_data(const CollJob &job, Message &m, uint32_t sid, uint8_t *scratch,
			const uint8_t **out);
	bool write_result(const CollJob &job, Message &m, uint32_t sid, const uint8_t *data);
	// Where block sid's result may be made in its destination: this
	// node's one rank's, in this process, of an allreduce not in place
	// (its sources stay as they are) that copy_out would copy through
	// the caches; null otherwise.  write_result() given it copies nothing.
	uint8_t *result_in_dst(Message &m, uint32_t sid);
	bool result_source(const CollJob &job, Message &m, uint32_t sid, const uint8_t **out);
	// The result of block sid this node wrote, to pass on again: *out
	// null for a token (reduce-scatter); false where this node keeps
	// none (a reduce or barrier, off the block's finisher and root) or
	// it is not here yet.
	bool written_result(Message &m, uint32_t sid, const uint8_t **out);
	// The results write_result() kept for ranks in other processes, still
	// to be written there: before the message completes.  False: some
	// rank's memory could not be written.
	bool flush_results(Message &m);
	// exec_ctrl.cc: timing and windows, shared by both strategies
	uint64_t rto_ns(const CollJob &job) const;
	uint64_t coll_timeout_ns(const CollJob &job) const;
	// The longest a repeat or probe backs off to: an eighth of the job's
	// timeout, so that several go before the job gives up (exec_ctrl.cc).
	uint64_t backoff_most(const CollJob &job) const;
	// The wait before the next probe of a peer that has answered (the
	// path works: a probe or its answer was lost, or the peer waits for
	// another): least, or an eighth of the time waited if longer, so a
	// lost answer costs an eighth of the wait at most and a wait of W
	// draws some 8 ln(W) probes; backoff_most at most.
	uint64_t answered_wait(const CollJob &job, uint64_t least, uint64_t waited) const;
	// IBV_COLL_EMU_COLL_PROBE_US in ns (0: no probes).
	uint64_t probe_ns() const;
	void rtt_sample(CollJob &job, uint64_t rtt, Holding h);
	void arm(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now,
		 bool again);
	uint32_t window(const CollJob &job) const;
	// The unit of the running message's block sid (CollEngine::hold_units).
	uint32_t seg_of(const CollJob &job, uint32_t sid) const
	{
		return job.run_base + sid % job.cfg.seg_count;
	}
	// status.cc: the message fails (tell_others: ABORT to the members),
	// which is execution control's to carry out.
	virtual void fail(Qp &qp, CollJob &job, CollStatus st, bool tell_others,
			  const char *why) = 0;
	// The port's lend mark of the last packet sent from lent memory, and
	// memory lent up to a mark free again (the exchange's, coll/xchg.cc).
	uint64_t lent_mark() const { return lent_; }
	void reclaim_lent(uint64_t mark) { e_.tx_reclaim(mark); }

protected:
	CollCore(CollHost &e, uint32_t seg_units, uint32_t seg_bytes);
	// xmit.cc: copies from and to other processes in runs of blocks.
	bool read_ahead(Message &m, const BlockDesc &b);
	bool stage_result(Message &m, uint32_t sid, const uint8_t *data);
	~CollCore() = default;
	// Memory lent to queued packets is free again (before a completion
	// hands buffers back, and before results overwrite a lent source).
	void reclaim();

	CollHost &e_;
	SegPool segs_;
	std::vector<uint8_t> scratch_; // scratch(): a block when the mapped unit is taken
	uint64_t lent_ = 0; // the port's lend mark of the last packet sent from lent memory
	// When what was sent so far has left the port, at its rate; how far
	// ahead of the port new blocks may go (kPortAheadBytes at the rate).
	uint64_t port_free_ = 0, port_ahead_ = 0;
	void port_sent(uint32_t bytes);
};

class CollEngine final : public CollService, private CollCore {
public:
	CollEngine(CollHost &host, uint32_t seg_units, uint32_t seg_bytes);

	// Execution control.
	int configure(Qp &qp, const JobConfig &cfg) override;
	bool progress(Qp &qp, uint64_t now) override;
	uint64_t next_deadline(const Qp &qp) const override;
	bool flush(Qp &qp) override;
	void release(Qp &qp) override;
	bool leaving(Qp &qp, uint64_t now) override;
	bool on_cnp(Qp &qp, const Endpoint &src, uint64_t now) override;

	// Parse & encapsulate: a packet with a collective BTH opcode.
	void on_packet(const InPacket &p) override;

	CollCounters counters() const override { return ctr; }
	uint32_t seg_units() const override { return segs_.size(); }
	uint32_t seg_unit_bytes() const override { return segs_.unit_bytes(); }
	uint32_t seg_in_use() const override { return segs_.in_use(); }
	uint32_t seg_high_water() const override { return uint32_t(segs_.high_water()); }

	using CollCore::ctr;
	using CollCore::segs;

private:
	// A joined QP's WQE that a message of its lead runs.
	struct Joined {
		Qp *qp;
		uint32_t idx;
	};
	// exec_ctrl.cc
	void answer_query(Qp &qp, CollJob &job, uint32_t idx);
	void activate(Qp &qp, CollJob &job, uint32_t idx, uint64_t now,
		      const std::vector<Joined> *js = nullptr);
	void take_ranks(Message &m, const CollWqe &w, uint16_t first, uint16_t count, uint32_t pdn);
	// join.cc: a node's ranks served by several QPs of the device
	bool leads(const Qp &qp) const; // other QPs join (or may join) qp's job
	Qp *lead_of(const CollJob &part);
	void parts_of(const Qp &lead, std::vector<Qp *> *out);
	int configure_part(Qp &qp, CollJob &job);
	int check_parts(Qp &lead, const JobConfig &c);
	bool answer_queries(Qp &qp);
	bool start_joined(Qp &qp, CollJob &job, const uint32_t *head, uint64_t now);
	bool join_wqe(Message &m, Qp &p, uint32_t idx, const CollWqe &lead);
	void finish_parts(const CollJob &job, const Message &m, CollStatus st);
	void parts_to_error(const Qp &lead, const char *why);
	void part_leaves(Qp &qp, bool unregister);
	void lead_leaves(Qp &qp, bool unregister);
	// After a strategy ran: AUTO's fallback moves the message to the ring.
	void settle(Qp &qp, CollJob &job, uint64_t now);
	// small: the message runs as a pairwise exchange (exchanges()).
	void start_ring(Qp &qp, CollJob &job, Message &m, uint64_t now, bool small = false);
	bool exchanges(const CollJob &job, const Message &m) const;
	bool xchg_fits(const CollJob &job, uint64_t count, uint32_t es) const;
	uint32_t xchg_most(const CollJob &job) const;
	bool may_start_beside(const CollJob &job, const CollWqe &w) const;
	// The timeout of no progress every message is bound by.
	void watchdog(Qp &qp, CollJob &job, uint64_t now);
	// codec.cc
	bool parse(const InPacket &p, CollPacket *out);
	void classify(const InPacket &p); // on_packet's checks and dispatch
	void from_switch(Qp &qp, CollJob &job, const CollPacket &p);
	void other_incarnation(Qp &qp, CollJob &job, const CollPacket &p);
	void superseded(Qp &qp, CollJob &job);
	// The exchange's: the whole vector as one block (coll/xchg.cc).
	void one_block(const CollJob &job, Message &m);
	// status.cc
	Cqe message_cqe(const CollJob &job, const Message &m, uint32_t qpn, uint64_t wr_id,
			CollStatus st) const;
	void fail_wqe(Qp &qp, uint32_t idx, CollStatus st);
	void complete(Qp &qp, CollJob &job, CollStatus st);
	void retire(Qp &qp); // consume the finished WQEs at the head of the SQ
	void fail(Qp &qp, CollJob &job, CollStatus st, bool tell_others, const char *why) override;
	void send_abort(const CollJob &job, uint32_t mid, CollStatus st);
	// exec_ctrl.cc: the Seg units the running message holds
	bool hold_units(CollJob &job, const Message &m);

	RingPath ring_{*this};
	SwitchPath sw_{*this};
	XchgPath xchg_{*this};
	uint64_t next_owner_ = 1;
	// Lead QPN -> the QPs that joined its job (coll/join.cc).
	std::unordered_map<uint32_t, std::vector<uint32_t>> joins_;
	std::vector<Qp *> join_parts_; // start_joined()'s scratch
	std::vector<Joined> join_js_;
};

} // namespace ibv_coll::emu
