// Congestion control of one flow: see cc.h.
#include "nic/cc.h"

#include "util/clock.h"
#include "util/log.h"

#include <algorithm>
#include <cmath>

namespace ibv_coll::emu {

namespace {

constexpr double kMinWin = 1; // one unit in flight, always (liveness)
constexpr double kBeta = 0.8; // Swift's multiplicative decrease per excess delay
constexpr uint32_t kFastRecovery = 5;
constexpr uint64_t kMinCutGapNs = 50 * util::kNsPerUs; // DCQCN's rate-reduce period
// The least fabric delay is taken over this epoch and the last: a path
// that became longer is learnt within two epochs, not never.
constexpr uint64_t kBaseEpochNs = 10000 * util::kNsPerMs;
// Delay cuts in a row that do not lower the delay, before the base moves.
constexpr uint32_t kFutileCuts = 3;
// The target allows this many times the jitter of the fabric delay.
constexpr uint64_t kNoiseMult = 2;

} // namespace

void CongestionCtl::init(const CcParams *p, CcCounters *ctr, double init_win, double max_win,
			 uint32_t hops)
{
	p_ = p;
	ctr_ = ctr;
	max_ = std::max(kMinWin, max_win);
	cwnd_ = std::clamp(init_win, kMinWin, max_);
	efloor_ = std::max(kMinWin, std::floor(max_ / 8));
	ecwnd_ = std::max(cwnd_, efloor_);
	e_standing_ = e_win_min_ = e_last_cut_ = 0;
	e_below_ = e_slow_start_ = true;
	w_max_ = 0;
	grew_ = true;
	hops_ = std::max(1u, hops);
	srtt_ = last_cut_ = next_tx_ = 0;
	base_cur_ = base_prev_ = epoch_at_ = jitter_ = 0;
	cut_delay_ = rebased_from_ = no_rebase_until_ = 0;
	futile_ = cut_win_ = 0;
	standing_ = win_min_ = win_start_ = win_sum_ = 0;
	win_n_ = 0;
	below_ = slow_start_ = true;
	alpha_ = 1;
	target_ = 0;
	last_cnp_ = alpha_at_ = recover_at_ = 0;
	acked_ = stage_ = 0;
	recovering_ = false;
}

uint64_t CongestionCtl::base_delay() const
{
	if (!base_prev_)
		return base_cur_;
	if (!base_cur_)
		return base_prev_;
	return std::min(base_cur_, base_prev_);
}

uint64_t CongestionCtl::target_delay() const
{
	const uint64_t t = uint64_t(hops_) * (p_ ? p_->target_us : 0) * util::kNsPerUs;
	return std::max(t, kNoiseMult * jitter_);
}

// Half the target above the base: a queue builds before it overflows, so
// a loss that comes with one is a full queue's, one without it is not.
bool CongestionCtl::queued() const
{
	const uint64_t base = base_delay();
	return base && standing_ > base + target_delay() / 2;
}

// Cuts come at most once a round trip (the window then has had time to
// show its effect), and at least 50 us apart.
bool CongestionCtl::may_cut(uint64_t now) const
{
	return !last_cut_ || now - last_cut_ >= std::max(srtt_, kMinCutGapNs);
}

void CongestionCtl::cut(double factor, uint64_t now, const char *why)
{
	IBVC_DEBUG(
		"cc",
		"{}: {} cut x{:.2f}: window {:.1f}, delay {} us over a base of {} us (target {} us)",
		static_cast<const void *>(this), why, factor, cwnd_,
		std::min(standing_, win_min_) / util::kNsPerUs, base_delay() / util::kNsPerUs,
		target_delay() / util::kNsPerUs);
	// The first cut of a run (no growth between them) remembers where
	// the window was: growth below half of it is fast (see on_ack).
	if (grew_ || !w_max_)
		w_max_ = cwnd_;
	grew_ = false;
	cwnd_ = std::max(kMinWin, cwnd_ * factor);
	last_cut_ = now;
	slow_start_ = false;
	ctr_->rate_cuts++;
}

void CongestionCtl::on_rtt_sample(uint64_t rtt, Holding h, uint64_t now)
{
	if (!enabled() || !rtt)
		return;
	srtt_ = srtt_ ? (7 * srtt_ + rtt) / 8 : rtt;
	if (!h.known() || h.held >= rtt)
		return; // held longer than the round trip: no measure of the fabric
	if (h.held) {
		ctr_->host_delay_samples++;
		ctr_->host_delay_us += h.held / util::kNsPerUs;
	}
	const uint64_t f = rtt - h.held;
	const uint64_t endpoint = std::min(h.queued, h.held);
	host_sample(endpoint, now);
	if (!epoch_at_ || now - epoch_at_ >= kBaseEpochNs) {
		base_prev_ = base_cur_;
		base_cur_ = 0;
		epoch_at_ = now;
	}
	if (!base_cur_ || f < base_cur_)
		base_cur_ = f;
	// The standing delay: the least over the last half round trip.  A
	// queue raises every sample; noise the timestamps did not take out
	// raises some: how far a window's samples lie above its least, on
	// average, is the jitter the target allows for.  It is learnt while
	// the window holds still (not while it doubles, when the samples
	// spread because the queue grows within the window).
	if (!win_start_ || now - win_start_ >= srtt_ / 2) {
		const uint64_t s = win_min_ ? win_min_ : f;
		if (win_n_ > 1) {
			spread_ = win_sum_ / win_n_ - s;
			if (!slow_start_ && cwnd_ >= w_max_ / 2)
				jitter_ = jitter_ ? (15 * jitter_ + spread_) / 16 : spread_;
		}
		standing_ = s;
		win_min_ = f;
		win_sum_ = f;
		win_n_ = 1;
		win_start_ = now;
		e_standing_ = e_win_min_;
		e_win_min_ = endpoint;
	} else {
		win_min_ = std::min(win_min_, f);
		win_sum_ += f;
		win_n_++;
	}
	// Above the target only when the sample, this half round trip's least
	// and the last one's all are: one late sample (jitter) neither cuts
	// nor stops the growth.
	const uint64_t target = base_delay() + target_delay();
	below_ = f <= target || win_min_ <= target || standing_ <= target;
	if (below_ || !may_cut(now))
		return;
	const uint64_t q = std::min(standing_, win_min_);
	// Cuts that do not bring the delay down were not cutting a queue of
	// ours: a path whose delay varies (jitter in its order-keeping
	// queues) or that became longer, measured against the least it ever
	// showed.  After three in a row the least seen is no longer the
	// base: the delay now is, less half the target.  A fall within the
	// noise the target allows for is no fall: on a path that holds
	// packets for milliseconds at random (a busy host) the delay after
	// each cut lay lower or higher by chance, the count never reached
	// three, and one member's window sank to a fifth while the others
	// waited for it (6 nodes, 2 +- 2 ms on every packet: 102 cuts, 2.4 s
	// for what took 0.5 s).
	// A window at its floor has no queue of its own to cut: every round
	// trip there above the target is futile, whatever its delay does
	// (with one unit in flight and a noisy path, one sample a round trip
	// is all there is, and it never settles).
	// A cut that left the whole units in flight as they were could not
	// lower it either, and says nothing; nor does a window that grew since.
	const uint32_t w = uint32_t(cwnd_);
	const bool floor = w < 2;
	if (floor)
		futile_++;
	else if (!cut_delay_ || w < cut_win_)
		futile_ = cut_delay_ && q + q / 16 + kNoiseMult * std::max(jitter_, spread_) >=
						  cut_delay_
				  ? futile_ + 1
				  : 0;
	else if (w > cut_win_)
		futile_ = 0;
	cut_delay_ = q;
	cut_win_ = w;
	// Not after a loss undid a move this epoch: a queue that others fill
	// as fast as we drain it (a bottleneck shared with other flows) did
	// look like a longer path, until it overflowed.  Except at the floor:
	// a flow with one unit in flight fills no one's queue, and waiting
	// there for the epoch (10 s) is a stall (a spurious timeout on a path
	// with jitter undid a move and held a ring at one block a round trip).
	if (futile_ >= kFutileCuts && (floor || !no_rebase_until_ || now >= no_rebase_until_)) {
		if (!rebased_from_)
			rebased_from_ = base_delay();
		base_cur_ = base_prev_ = q - target_delay() / 2;
		epoch_at_ = now;
		futile_ = 0;
		cut_delay_ = 0;
		ctr_->rebases++;
		IBVC_DEBUG("cc", "{}: the base moves up to {} us (window {:.1f})",
			   static_cast<const void *>(this), base_cur_ / util::kNsPerUs, cwnd_);
		return;
	}
	const double excess = double(q - target) / double(q);
	const double mdf = p_->max_mdf_pct / 100.0;
	cut(std::max(1 - kBeta * excess, 1 - mdf), now, "delay");
	ctr_->delay_cuts++;
}

// The endpoint window's delay signal: e, the round trip's holding at the
// hosts it crossed (one sample in the same half round trips as the
// fabric's; the window rolls in on_rtt_sample).
void CongestionCtl::host_sample(uint64_t e, uint64_t now)
{
	if (!e_win_min_ || e < e_win_min_)
		e_win_min_ = e;
	if (!p_->host_target_us)
		return;
	const uint64_t target = uint64_t(hops_) * p_->host_target_us * util::kNsPerUs;
	e_below_ = e <= target || e_win_min_ <= target || e_standing_ <= target;
	if (e_below_)
		return;
	if (e_last_cut_ && now - e_last_cut_ < std::max(srtt_, kMinCutGapNs))
		return;
	const uint64_t q = std::min(e_standing_, e_win_min_);
	const double excess = double(q - target) / double(q);
	ecwnd_ = std::max(efloor_,
			  ecwnd_ * std::max(1 - kBeta * excess, 1 - p_->max_mdf_pct / 100.0));
	e_last_cut_ = now;
	e_slow_start_ = false;
	ctr_->host_cuts++;
}

void CongestionCtl::on_loss(uint64_t now, bool timeout)
{
	if (!enabled())
		return;
	// A loss after the base moved up, with the delay above the moved base:
	// it was a queue after all (one that other flows kept full), and this
	// one overflowed.  Back to the least delay seen, and no move for an
	// epoch.  With the delay at the moved base the loss is the path's (a
	// repeat on a timeout that jitter made spurious; a queue that
	// overflows fills first) and keeps the move.
	if (rebased_from_ && queued()) {
		IBVC_DEBUG("cc", "{}: a loss moves the base back to {} us",
			   static_cast<const void *>(this), rebased_from_ / util::kNsPerUs);
		base_cur_ = base_prev_ = rebased_from_;
		epoch_at_ = now;
		rebased_from_ = 0;
		no_rebase_until_ = now + kBaseEpochNs;
	}
	if (!queued()) {
		ctr_->loss_no_queue++;
		return;
	}
	if (!may_cut(now))
		return;
	cut(1 - p_->max_mdf_pct / (timeout ? 100.0 : 400.0), now, timeout ? "timeout" : "loss");
	ctr_->loss_cuts++;
}

void CongestionCtl::on_cnp(uint64_t now)
{
	if (!enabled())
		return;
	const double g = 1.0 / double(1u << p_->dcqcn_g_shift);
	// alpha decayed by (1 - g) for each whole period without a CNP.
	if (last_cnp_ && p_->alpha_us) {
		const uint64_t periods = (now - last_cnp_) /
					 (uint64_t(p_->alpha_us) * util::kNsPerUs);
		if (periods)
			alpha_ *= std::pow(1 - g, double(std::min<uint64_t>(periods, 100000)));
	}
	alpha_ = (1 - g) * alpha_ + g;
	last_cnp_ = now;
	if (!may_cut(now))
		return;
	target_ = cwnd_;
	cut(1 - alpha_ / 2, now, "cnp");
	ctr_->cnp_cuts++;
	recovering_ = true;
	stage_ = 0;
	acked_ = 0;
	recover_at_ = now + uint64_t(p_->recover_us) * util::kNsPerUs;
}

// One DCQCN increase event: fast recovery halfway back to the target,
// then additive increase of the target.
void CongestionCtl::recover_step(uint64_t)
{
	if (++stage_ > kFastRecovery)
		target_ = std::min(max_, target_ + 1);
	cwnd_ = std::min(max_, (cwnd_ + target_) / 2);
	if (stage_ > kFastRecovery && target_ >= max_)
		recovering_ = false;
}

void CongestionCtl::on_ack(uint32_t units, uint64_t now)
{
	if (!enabled())
		return;
	// Growth while the last round trip was below the target: one unit per
	// unit acknowledged (doubling each round trip) until the first cut,
	// and after cuts while below half the window they began at; one per
	// window (additive increase) otherwise.
	if (below_) {
		const bool fast = slow_start_ || cwnd_ < w_max_ / 2;
		cwnd_ += fast ? double(units) : double(units) / std::max(cwnd_, 1.0);
		cwnd_ = std::min(cwnd_, max_);
		grew_ = true;
	}
	if (e_below_) {
		ecwnd_ += e_slow_start_ ? double(units) : double(units) / std::max(ecwnd_, 1.0);
		ecwnd_ = std::min(ecwnd_, max_);
	}
	if (!recovering_)
		return;
	acked_ += units;
	while (recovering_ && p_->recover_units && acked_ >= p_->recover_units) {
		acked_ -= p_->recover_units;
		recover_step(now);
	}
	if (recovering_ && now >= recover_at_) {
		recover_step(now);
		recover_at_ = now + uint64_t(p_->recover_us) * util::kNsPerUs;
	}
}

void CongestionCtl::on_send(uint64_t now)
{
	if (!enabled() || !srtt_ || !p_->pace)
		return;
	// The acknowledgements clock the flow; pacing only spreads a window's
	// burst over half the round trip.
	const double gap = double(srtt_) / (2 * std::min(cwnd_, ecwnd_));
	next_tx_ = std::max(next_tx_, now - std::min<uint64_t>(now, srtt_ / 4)) + uint64_t(gap);
}

uint32_t CongestionCtl::window() const
{
	return std::max(1u, uint32_t(std::min(cwnd_, ecwnd_)));
}

bool CongestionCtl::may_send(uint32_t inflight, uint64_t now) const
{
	if (!enabled() || !inflight)
		return true; // nothing in flight: one unit goes, whatever the pacing
	if (inflight >= window())
		return false;
	return !p_->pace || now >= next_tx_;
}

double CongestionCtl::rate() const
{
	return srtt_ ? std::min(cwnd_, ecwnd_) * 1e9 / double(srtt_) : 0;
}

} // namespace ibv_coll::emu
