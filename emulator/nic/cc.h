// Congestion control of one flow of the emulated NIC: the ring's blocks
// from this node, the switch path's blocks, an RC QP's packets.  One
// window (in the flow's units: blocks, packets) that three signals move:
//  - delay (Swift-like): each acknowledgement's *fabric* delay, the round
//    trip less the time the unit was held at endpoints (the peers' holding
//    times, which collective packets carry in the CETH's hold, and this
//    host's own, from the socket's receive timestamp to now), against the
//    least fabric delay seen lately plus a target queueing delay per queue
//    the round trip crosses; the target grows to twice the jitter (how
//    far samples lie above the least of their half round trip, on
//    average), so that noise is not a queue.  Below it the window grows by one unit per round trip (by one
//    per unit acknowledged until the first cut, and again while it is
//    below half of where the last cuts began: a collapsed window is back
//    at half its size in log2(W) round trips); above it shrinks in
//    proportion to the excess, at most once a round trip and by at most
//    max_mdf;
//  - loss: a unit sent again on a timeout cuts the window by max_mdf, one
//    found missing (a NAK, a gap) by a quarter of that (the caller may
//    count it as a timeout: a ring hop's NAK on a path that keeps its
//    order), at most once a round trip, when the fabric delay shows a
//    queue (half the target):
//    a loss with the fabric at its base delay is random loss or a peer's
//    trouble, not a full queue, and costs only its repeat;
//  - ECN (DCQCN-style): a CNP cuts the window to (1 - alpha/2) of itself
//    and remembers where it was (the target); alpha grows with each CNP
//    and decays every alpha period without one; recovery then runs in
//    DCQCN's stages, one each recovery period or recovery-bytes acknowledged:
//    five of fast recovery (halfway back to the target), then additive
//    increase (the target grows by one unit, the window halfway to it).
// The delay compared is the standing fabric delay (the least over the last
// half round trip, as Copa takes it).  Three delay cuts in a row that do
// not lower it were not cutting a queue of this flow's (a path whose
// delay varies, or that became longer): the base moves up to the delay
// now, less half the target; a loss with the delay above the moved base
// then moves it back (it was a queue other flows kept full) for an epoch.
// At the window's floor every round trip above the target counts as such
// a cut, and the epoch does not hold: one unit in flight queues nothing,
// and the floor never traps.
// A second window, the endpoint window (Swift's; off unless host_target_us
// is set, IBV_COLL_EMU_CC_HOST_TARGET_US), follows the endpoint delay the
// same way against its own target (host_target_us per host the round trip
// crosses): packets queued at a host that cannot keep up
// with the flow (on this machine: the processes sharing its cores) wait
// less when fewer are in flight.  It never goes below an eighth of the
// flow's cap: a host descheduled for a while holds every packet whatever
// the window, and below that the flow would only starve its own
// pipeline.  The flow's window is the smaller of the two.
// The window never goes below one unit: a flow with something to send
// always has one unit in flight, clocked by its acknowledgement (the
// liveness rule of ibv_coll(7)); its rate is at least a unit per round
// trip.  With pacing on, next_send_time() spreads each window over half
// the round trip.
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

// What a round trip spent at endpoints rather than in the fabric: held,
// all of it (the fabric's delay is the rest), and of that queued, the time
// it waited to be processed and was processed (the endpoints' congestion,
// which the endpoint window follows), as against waiting for an
// application or for other members.  held of UINT64_MAX: not known.
struct Holding {
	uint64_t held = 0, queued = 0;
	static Holding unknown() { return Holding{UINT64_MAX, 0}; }
	bool known() const { return held != UINT64_MAX; }
};

struct CcParams {
	bool on = true;
	uint32_t target_us = 1000;   // queueing delay allowed per queue crossed
	uint32_t host_target_us = 0; // endpoint delay allowed per host crossed (0: no limit)
	uint32_t max_mdf_pct = 50;   // largest cut, percent of the window
	uint32_t alpha_us = 55;	     // DCQCN: alpha decays each period without a CNP
	uint32_t recover_us = 300;   // DCQCN: rate-increase timer
	uint32_t recover_units = 64; // DCQCN: ... or this many units acknowledged
	uint32_t dcqcn_g_shift = 4;  // alpha gain g = 1/2^shift
	bool pace = false;	     // spread a window over half the round trip
};

struct CcCounters {
	uint64_t rate_cuts = 0; // window cuts, whatever the signal
	uint64_t delay_cuts = 0, loss_cuts = 0, cnp_cuts = 0;
	uint64_t host_cuts = 0; // endpoint window cuts (hosts' delay)
	// The base delay moved up: three delay cuts in a row lowered nothing.
	uint64_t rebases = 0;
	uint64_t cnp_rcvd = 0, cnp_sent = 0;
	uint64_t fast_retrans = 0; // sent again on a gap, before the timeout
	// A NAK of a unit that may still be on its way (the path reorders),
	// waited out; a repeat that was needless (the original arrived).
	uint64_t reorder_waits = 0, spurious_retrans = 0;
	uint64_t retrans_bytes = 0; // payload bytes sent again (ring, switch path, RC)
	// Losses that cut nothing: the fabric showed no queue.
	uint64_t loss_no_queue = 0;
	// Round trips whose endpoint holding (peers' and ours) was taken out
	// of the delay signal, and its sum in microseconds.
	uint64_t host_delay_samples = 0, host_delay_us = 0;
};

class CongestionCtl {
public:
	// max_win: the flow's own cap (its credit, its Seg units); init: the
	// window to start with; hops: queues one round trip crosses.
	void init(const CcParams *p, CcCounters *ctr, double init_win, double max_win,
		  uint32_t hops);
	bool enabled() const { return p_ && p_->on; }
	bool ready() const { return p_ != nullptr; }

	// An acknowledgement of a unit sent once: its round trip, and what of
	// it was spent at endpoints (held >= rtt_ns: not known, and the sample
	// moves neither delay signal).
	void on_rtt_sample(uint64_t rtt_ns, Holding h, uint64_t now);
	// Units acknowledged (any, repeats included): DCQCN's byte counter.
	void on_ack(uint32_t units, uint64_t now);
	// A unit was lost (sent again): on its timeout (timeout: cut by
	// max_mdf), or found missing while later ones came through (a quarter
	// of that: random loss is no sign of a full queue).
	void on_loss(uint64_t now, bool timeout = true);
	// A CNP arrived for this flow (its receiver counts it).  Before init
	// the flow has sent nothing and there is nothing to slow.
	void on_cnp(uint64_t now);
	// A unit left now.
	void on_send(uint64_t now);

	// May a unit leave with inflight units outstanding?
	bool may_send(uint32_t inflight, uint64_t now) const;
	// When the next unit may leave (0: now, or when an acknowledgement
	// opens the window).
	uint64_t next_send_time() const { return enabled() && p_->pace ? next_tx_ : 0; }
	// Units the flow may have outstanding (at least 1).
	uint32_t window() const;
	double cwnd() const { return cwnd_; }
	double endpoint_cwnd() const { return ecwnd_; }
	uint64_t srtt() const { return srtt_; }
	// The least fabric delay seen lately (0: none yet), and the queueing
	// delay the window now allows above it.
	uint64_t base_delay() const;
	uint64_t target_delay() const;
	// Units per second the window and round trip allow (0: no sample yet).
	double rate() const;

private:
	void cut(double factor, uint64_t now, const char *why);
	void recover_step(uint64_t now);
	bool queued() const; // the fabric delay shows a queue
	bool may_cut(uint64_t now) const;

	void host_sample(uint64_t e, uint64_t now);

	const CcParams *p_ = nullptr;
	CcCounters *ctr_ = nullptr;
	double cwnd_ = 1, max_ = 1;
	// The endpoint window, its floor, the endpoint delay's standing value
	// and this half round trip's least, and when it was last cut.
	double ecwnd_ = 1, efloor_ = 1;
	uint64_t e_standing_ = 0, e_win_min_ = 0, e_last_cut_ = 0;
	bool e_below_ = true, e_slow_start_ = true;
	double w_max_ = 0; // the window when the last run of cuts began
	bool grew_ = true; // the window grew since the last cut
	uint32_t hops_ = 1;
	uint64_t srtt_ = 0;
	// Fabric delay: the least of this epoch and the last (a windowed
	// minimum, so that a longer path is learnt), the standing delay, the
	// current half round trip's least, sum and count, and the jitter
	// (see on_rtt_sample).
	uint64_t base_cur_ = 0, base_prev_ = 0, epoch_at_ = 0;
	uint64_t standing_ = 0, win_min_ = 0, win_start_ = 0, win_sum_ = 0;
	uint32_t win_n_ = 0;
	uint64_t jitter_ = 0;
	uint64_t spread_ = 0; // the last half round trip's samples' mean over their least
	// The delay at the last delay cut, and cuts in a row that did not
	// lower it (see on_rtt_sample).
	uint64_t cut_delay_ = 0;
	uint32_t futile_ = 0;
	uint32_t cut_win_ = 0; // whole units of the window at the last delay cut
	// The base before it moved up (0: it has not), and until when it may
	// not move again (a loss undid a move).
	uint64_t rebased_from_ = 0, no_rebase_until_ = 0;
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
