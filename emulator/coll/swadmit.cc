// The switch path's time-division admission (ibv_coll_switchd(8)
// --policy tdm): a member's side, per message (coll/coll_path.h,
// SwitchPath; the rest of the path is in swpath.cc).
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/clock.h"
#include "wire/swproto.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

// Time division (ibv_coll_switchd(8) --policy tdm): before each message
// the member asks the switch for the pool (CONFIG flagged ADMIT, with the
// message's bytes and the job's timeout) and waits for the decision, which
// the switch takes once per (JID, MID) and repeats to every member that
// asks: all members run the message the same way.  Refused, it runs the
// ring at once, flagged FALLBACK and why.
void SwitchPath::admit_ask(CollJob &job, Message &m, uint64_t now)
{
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = m.mid;
	h.flags = kCethAdmit;
	h.seq = uint32_t(std::min<uint64_t>(u_.coll_timeout_ns(job) / util::kNsPerMs, UINT32_MAX));
	h.rank_map = m.count * m.es;
	h.node_map = 1ull << job.cfg.node;
	h.job_key = job.cfg.key;
	if (m.admit)
		h.flags |= kCethRetrans;
	u_.send_ep(job, leaf(job, 0), leaf(job, 0).qpn, kCollConfig, h, nullptr, 0, {});
	m.admit = 1;
	m.admit_sent = now;
	if (!m.last_progress)
		m.last_progress = now;
}

// The switch's reasons are the completion's ran-on bits.
static_assert(unsigned(kRanBusy) == sw::kAdmitBusy && unsigned(kRanScored) == sw::kAdmitScored &&
	      unsigned(kRanRefused) == sw::kAdmitRefused);

void SwitchPath::on_admit(Qp &qp, CollJob &job, const CollPacket &p)
{
	const uint64_t now = u_.e_.now();
	if (!job.active || !job.active->sw || !job.active->waiting || job.active->admit != 1 ||
	    p.h.mid != job.active->mid || !(leaf(job, 0) == p.src)) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *job.active;
	m.last_progress = now;
	if (!p.h.status) {
		m.admit = 2;
		return launch(qp, job, now);
	}
	// Refused: execution control moves it to the ring (CollEngine::settle),
	// which flags it FALLBACK, and why.
	m.waiting = false;
	m.sw = false;
	m.admit_why = p.h.phase & (kRanBusy | kRanScored | kRanRefused);
}

void SwitchPath::admit_timers(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	if (now > m.last_progress && now - m.last_progress > u_.coll_timeout_ns(job)) {
		u_.ctr.timeouts++;
		return u_.fail(qp, job, CollStatus::timeout, true,
			       "no admission decision from the switch within the timeout");
	}
	if (now - m.admit_sent > u_.rto_ns(job))
		admit_ask(job, m, now);
}

// Every result of the message is here: tell the switch (twice, against a
// loss; the switch also frees the pool when the job falls silent).
void SwitchPath::admit_done(const CollJob &job, const Message &m)
{
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = m.mid;
	h.flags = kCethAdmit;
	h.node_map = 1ull << job.cfg.node;
	h.job_key = job.cfg.key;
	for (int i = 0; i < 2; i++)
		u_.send_ep(job, leaf(job, 0), leaf(job, 0).qpn, kCollRelease, h, nullptr, 0, {});
}

} // namespace ibv_coll::emu
