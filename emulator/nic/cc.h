// Congestion control of one flow of the emulated NIC: the ring's blocks
// from this node, an RC QP's packets.  One window (in the flow's units:
// blocks, packets) that three signals move:
//  - delay (Swift-like): each acknowledgement's round trip against the
//    least seen plus a target queueing delay per queue the round trip
//    crosses; below it the window grows by one unit per round trip (by
//    one per unit acknowledged until the first cut: slow start),
//    above it shrinks in proportion to the excess, at most once a round
//    trip and by at most max_mdf;
//  - loss: a block or packet sent again on a timeout cuts the window by
//    max_mdf, one found missing (a NAK, a gap) by a quarter of that, at
//    most once a round trip;
//  - ECN (DCQCN-style): a CNP cuts the window to (1 - alpha/2) of itself
//    and remembers where it was (the target); alpha grows with each CNP
//    and decays every alpha period without one; recovery then runs in
//    DCQCN's stages, one each recovery period or recovery-bytes acknowledged:
//    five of fast recovery (halfway back to the target), then additive
//    increase (the target grows by one unit, the window halfway to it).
// The delay compared is the standing round trip (the least over the last
// half round trip, as Copa takes it), so that a node descheduled for a
// moment on a shared processor does not count as a queue.
// The window may be fractional below one: the flow then sends one unit
// every srtt / window (pacing), as Swift does.  Between one and the cap
// the flow is clocked by its acknowledgements; next_send_time() also
// spreads each window over half the round trip when pacing is on.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ibv_coll::emu {

// RoCEv2's Congestion Notification Packet (IBA Annex A17): BTH with
// opcode 0x81, BECN set and DestQP the notified flow's sender QP, then 16
// reserved bytes, then the ICRC.
constexpr uint8_t kOpCnp = 0x81;
constexpr size_t kCnpRsvdBytes = 16;
constexpr uint8_t kBthBecn = 0x40; // BTH byte 4

struct CcParams {
	bool on = true;
	uint32_t target_us = 1000;   // queueing delay allowed per queue crossed
	uint32_t max_mdf_pct = 50;   // largest cut, percent of the window
	uint32_t alpha_us = 55;	     // DCQCN: alpha decays each period without a CNP
	uint32_t recover_us = 300;   // DCQCN: rate-increase timer
	uint32_t recover_units = 64; // DCQCN: ... or this many units acknowledged
	uint32_t dcqcn_g_shift = 4;  // alpha gain g = 1/2^shift
	bool pace = false; // spread a window over half the round trip (below one unit: always)
};

struct CcCounters {
	uint64_t rate_cuts = 0; // window cuts, whatever the signal
	uint64_t delay_cuts = 0, loss_cuts = 0, cnp_cuts = 0;
	uint64_t cnp_rcvd = 0, cnp_sent = 0;
	uint64_t fast_retrans = 0;  // sent again on a gap, before the timeout
	uint64_t retrans_bytes = 0; // payload bytes sent again (ring, switch path, RC)
};

class CongestionCtl {
public:
	// max_win: the flow's own cap (its credit, its Seg units); init: the
	// window to start with; hops: queues one round trip crosses.
	void init(const CcParams *p, CcCounters *ctr, double init_win, double max_win,
		  uint32_t hops);
	bool enabled() const { return p_ && p_->on; }
	bool ready() const { return p_ != nullptr; }

	// An acknowledgement of a unit sent once: its round trip.
	void on_rtt_sample(uint64_t rtt_ns, uint64_t now);
	// Units acknowledged (any, repeats included): DCQCN's byte counter.
	void on_ack(uint32_t units, uint64_t now);
	// A unit was lost (sent again): on its timeout (timeout: cut by
	// max_mdf), or found missing while later ones came through (a quarter
	// of that: random loss is no sign of a full queue).
	void on_loss(uint64_t now, bool timeout = true);
	// A CNP arrived for this flow.
	void on_cnp(uint64_t now);
	// A unit left now.
	void on_send(uint64_t now);

	// May a unit leave with inflight units outstanding?
	bool may_send(uint32_t inflight, uint64_t now) const;
	// When the next unit may leave (0: now, or when an acknowledgement
	// opens the window).
	uint64_t next_send_time() const { return enabled() ? next_tx_ : 0; }
	// Units the flow may have outstanding (at least 1).
	uint32_t window() const;
	double cwnd() const { return cwnd_; }
	uint64_t srtt() const { return srtt_; }
	uint64_t min_rtt() const { return min_rtt_; }
	// Units per second the window and round trip allow (0: no sample yet).
	double rate() const;

private:
	void cut(double factor, uint64_t now);
	void recover_step(uint64_t now);

	const CcParams *p_ = nullptr;
	CcCounters *ctr_ = nullptr;
	double cwnd_ = 1, max_ = 1;
	uint32_t hops_ = 1;
	uint64_t srtt_ = 0, min_rtt_ = 0;
	uint64_t standing_ = 0, win_min_ = 0, win_start_ = 0; // see on_rtt_sample
	bool below_ = true;	 // the last round trip was below the target
	bool slow_start_ = true; // no cut yet
	uint64_t last_cut_ = 0;
	uint64_t next_tx_ = 0;
	// DCQCN.
	double alpha_ = 1, target_ = 0;
	uint64_t last_cnp_ = 0, alpha_at_ = 0, recover_at_ = 0;
	uint32_t acked_ = 0, stage_ = 0;
	bool recovering_ = false;
};

} // namespace ibv_coll::emu
