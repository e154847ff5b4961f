// Congestion control of one flow: see cc.h.
#include "nic/cc.h"

#include "util/clock.h"

#include <algorithm>
#include <cmath>

namespace ibv_coll::emu {

namespace {

constexpr double kMinWin = 0.125; // paced at one unit each 8 round trips
constexpr double kBeta = 0.8;	  // Swift's multiplicative decrease per excess delay
constexpr uint32_t kFastRecovery = 5;
constexpr uint64_t kMinCutGapNs = 50 * util::kNsPerUs; // DCQCN's rate-reduce period

} // namespace

void CongestionCtl::init(const CcParams *p, CcCounters *ctr, double init_win, double max_win,
			 uint32_t hops)
{
	p_ = p;
	ctr_ = ctr;
	max_ = std::max(1.0, max_win);
	cwnd_ = std::clamp(init_win, 1.0, max_);
	hops_ = std::max(1u, hops);
	srtt_ = min_rtt_ = last_cut_ = next_tx_ = 0;
	standing_ = win_min_ = win_start_ = 0;
	below_ = slow_start_ = true;
	alpha_ = 1;
	target_ = 0;
	last_cnp_ = alpha_at_ = recover_at_ = 0;
	acked_ = stage_ = 0;
	recovering_ = false;
}

// Cuts come at most once a round trip (the window then has had time to
// show its effect), and at least 50 us apart.
void CongestionCtl::cut(double factor, uint64_t now)
{
	cwnd_ = std::max(kMinWin, cwnd_ * factor);
	last_cut_ = now;
	slow_start_ = false;
	ctr_->rate_cuts++;
}

void CongestionCtl::on_rtt_sample(uint64_t rtt, uint64_t now)
{
	if (!enabled() || !rtt)
		return;
	if (!min_rtt_ || rtt < min_rtt_)
		min_rtt_ = rtt;
	srtt_ = srtt_ ? (7 * srtt_ + rtt) / 8 : rtt;
	// The standing round trip: the least over the last half round trip.
	// A queue raises every sample; a node that did not run for a while
	// (the processor is shared) raises some, and is not a reason to cut.
	if (!win_start_ || now - win_start_ >= srtt_ / 2) {
		standing_ = win_min_ ? win_min_ : rtt;
		win_min_ = rtt;
		win_start_ = now;
	} else {
		win_min_ = std::min(win_min_, rtt);
	}
	const uint64_t target = min_rtt_ + uint64_t(hops_) * p_->target_us * util::kNsPerUs;
	below_ = rtt <= target;
	if (below_ || win_min_ <= target || standing_ <= target)
		return;
	if (now - last_cut_ < std::max(srtt_, kMinCutGapNs))
		return;
	const uint64_t q = std::min(standing_, win_min_);
	const double excess = double(q - target) / double(q);
	const double mdf = p_->max_mdf_pct / 100.0;
	cut(std::max(1 - kBeta * excess, 1 - mdf), now);
	ctr_->delay_cuts++;
}

void CongestionCtl::on_loss(uint64_t now, bool timeout)
{
	if (!enabled())
		return;
	if (last_cut_ && now - last_cut_ < std::max(srtt_, kMinCutGapNs))
		return;
	cut(1 - p_->max_mdf_pct / (timeout ? 100.0 : 400.0), now);
	ctr_->loss_cuts++;
}

void CongestionCtl::on_cnp(uint64_t now)
{
	ctr_->cnp_rcvd++;
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
	if (last_cut_ && now - last_cut_ < std::max(srtt_, kMinCutGapNs))
		return;
	target_ = cwnd_;
	cut(1 - alpha_ / 2, now);
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
	// unit acknowledged until the first cut (slow start, so that a long
	// round trip fills soon), then one per window (additive increase).
	if (below_) {
		cwnd_ += slow_start_ ? double(units) : double(units) / std::max(cwnd_, 1.0);
		cwnd_ = std::min(cwnd_, max_);
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
	if (!enabled() || !srtt_ || (cwnd_ >= 1 && !p_->pace))
		return;
	// Below one unit the window is a rate: one unit each srtt / cwnd.
	// Above, the acknowledgements clock the flow and pacing (when on)
	// only spreads a window's burst over half the round trip.
	const double gap = cwnd_ >= 1 ? double(srtt_) / (2 * cwnd_) : double(srtt_) / cwnd_;
	next_tx_ = std::max(next_tx_, now - std::min<uint64_t>(now, srtt_ / 4)) + uint64_t(gap);
}

uint32_t CongestionCtl::window() const
{
	return cwnd_ >= 1 ? uint32_t(cwnd_) : 1;
}

bool CongestionCtl::may_send(uint32_t inflight, uint64_t now) const
{
	if (!enabled())
		return true;
	if (inflight >= window())
		return false;
	return now >= next_tx_;
}

double CongestionCtl::rate() const
{
	return srtt_ ? cwnd_ * 1e9 / double(srtt_) : 0;
}

} // namespace ibv_coll::emu
