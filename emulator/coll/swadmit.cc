// Whether a message runs through the switch, as every member must agree:
// the time-division admission (ibv_coll_switchd(8) --policy tdm), a
// member's side, per message; and AUTO's agreement when a member hears no
// switch (coll/coll_path.h, SwitchPath; the rest of the path is in
// swpath.cc).
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/clock.h"
#include "util/log.h"
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
	h.node_map = my_bit(job);
	h.job_key = job.cfg.key;
	if (m.sw.admit)
		h.flags |= kCethRetrans;
	u_.send_ep(job, leaf(job, 0), leaf(job, 0).qpn, kCollConfig, h, nullptr, 0, {});
	m.sw.admit = 1;
	m.sw.admit_sent = now;
	if (!m.last_progress)
		m.last_progress = now;
}

// The switch's reasons are the completion's ran-on bits.
static_assert(unsigned(kRanBusy) == sw::kAdmitBusy && unsigned(kRanScored) == sw::kAdmitScored &&
	      unsigned(kRanRefused) == sw::kAdmitRefused);

void SwitchPath::on_admit(Qp &qp, CollJob &job, const CollPacket &p)
{
	const uint64_t now = u_.host().now();
	if (!job.active || !job.active->sw.on || !job.active->sw.waiting ||
	    job.active->sw.admit != 1 || p.h.mid != job.active->mid || !(leaf(job, 0) == p.src)) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *job.active;
	m.last_progress = now;
	if (!p.h.status) {
		m.sw.admit = 2;
		return launch(qp, job, now);
	}
	// Refused: execution control moves it to the ring (CollEngine::settle),
	// which flags it FALLBACK, and why.
	m.sw.waiting = false;
	m.sw.on = false;
	m.sw.admit_why = p.h.phase & (kRanBusy | kRanScored | kRanRefused);
}

void SwitchPath::admit_timers(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	if (now > m.last_progress && now - m.last_progress > u_.coll_timeout_ns(job)) {
		u_.ctr.timeouts++;
		return u_.fail(qp, job, CollStatus::timeout, true,
			       "no admission decision from the switch within the timeout");
	}
	if (now - m.sw.admit_sent > u_.rto_ns(job))
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
	h.node_map = my_bit(job);
	h.job_key = job.cfg.key;
	for (int i = 0; i < 2; i++)
		u_.send_ep(job, leaf(job, 0), leaf(job, 0).qpn, kCollRelease, h, nullptr, 0, {});
}

// AUTO: every member of a job runs a message the same way.  The switch
// decides for those it answers (a grant, a refusal: the same to every
// member, repeated to any that asks again), but a member that hears
// nothing from it within IBVC_COLL_EMU_SW_CONFIG_MS decides alone, and
// the others may have heard "wait" (the switch never heard this member:
// they would wait for it until their timeout) or even the grant (only the
// answers to this member are lost: they run the message through the
// switch, which waits for its partial).  So it tells them, as it starts
// the ring: CONFIG_ACK from a member, CETH status TIMEOUT, mid the
// message (three copies, as an ABORT goes; ibv_coll_wire(7)).  A member
// that has sent nothing of the message to a switch (waiting for the grant
// or a tdm decision, or not started, or running it round the ring as tdm
// refused it) follows it round the ring, for the rest of the job.  A
// member that was granted and runs the message through the switch (the
// switch heard the deaf member, which did not hear the grant) cannot take
// its partials back: it fails the message and aborts it everywhere (the
// members reset the job, as after any failure).  Either the whole job
// runs the ring, or every member fails the message within a round trip.
void SwitchPath::tell_fallback(const CollJob &job)
{
	if (!job.active)
		return;
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = job.active->mid;
	h.status = uint8_t(CollStatus::timeout); // no switch answered
	h.node_map = my_bit(job);
	h.job_key = job.cfg.key;
	for (int copy = 0; copy < 3; copy++)
		for (uint16_t n = 0; n < job.cfg.nodes(); n++)
			if (n != job.cfg.node)
				u_.send(job, n, kCollConfigAck, h);
}

// Nothing of the message went to a switch: the job runs the ring from now
// on, as the member that heard no switch does; a message waiting for the
// switch leaves its path (CollEngine::settle starts it round the ring).
void SwitchPath::follow(Qp &qp, CollJob &job, const char *why, uint64_t now)
{
	IBVC_WARN("coll", "{}: job {}: {}: using the ring", u_.host().params.name, job.cfg.jid,
		  why);
	job.sw.phase = CollJob::SwPhase::fallback;
	if (job.active && job.active->sw.waiting)
		launch(qp, job, now);
}

// The switch answered while a member's ring packet of the waiting message
// was here (on_member_ring).  "Heard, wait": the switch has not heard
// every member, so none was granted and the sender gave up on the switch:
// follow it.  A grant with time division: the message waits for the
// switch's decision, which it took for every member (a refusal: the ring,
// with the packets kept).  A grant without: the sender gave up on a
// switch that granted the job; nothing of the message went to the switch
// from here, so follow it (the members that run it there fail it).
// Returns whether it followed.
bool SwitchPath::ring_seen_answer(Qp &qp, CollJob &job, bool pending, uint64_t now)
{
	const Message *m = job.active.get();
	if (!job.sw.ring_mid || !m || m->mid != job.sw.ring_mid || !m->sw.waiting)
		return false;
	if (!pending && (job.sw.phase != CollJob::SwPhase::ready || job.sw.tdm))
		return false;
	follow(qp, job, "a member runs the message round the ring", now);
	return true;
}

void SwitchPath::on_member_fallback(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (job.cfg.topology != Topology::autosel || !job.cfg.sw.on ||
	    p.h.status != uint8_t(CollStatus::timeout) || p.paylen) {
		u_.ctr.malformed++;
		return;
	}
	if (job.sw.phase == CollJob::SwPhase::fallback) {
		u_.ctr.dup_dropped++; // a repeat, or we gave up on the switch too
		return;
	}
	const Message *m = job.running(p.h.mid);
	if (m && m->path == this && m->sw.on && !m->sw.waiting)
		return u_.fail(qp, job, CollStatus::remote_abort, true,
			       "a member heard no switch and runs the ring, this node runs the "
			       "switch");
	follow(qp, job, "a member heard no switch", now);
}

// Ring DATA or RESULT of the message this node has on the switch path:
// its sender runs it round the ring.  Waiting for the job's grant, that
// is either a member that gave up on the switch (its notice lost), or a
// member granted the job whose message the switch refused (tdm) while
// our grant was lost: the ring keeps the packet, and CONFIG goes again at
// once; the switch's answer tells which (SwitchPath::ring_seen_answer).
// Waiting for a tdm decision: the switch decides this message for every
// member, the ring keeps the packet for when it says so.  Running through
// the switch: the members disagree, fail it everywhere now rather than
// at the timeout (the ring must not take the packet into a message it
// does not run).
bool SwitchPath::on_member_ring(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	Message *m = job.running(p.h.mid);
	if (!m || m->path != this || !m->sw.on || job.cfg.topology != Topology::autosel)
		return false;
	if (job.sw.phase == CollJob::SwPhase::configuring) {
		if (job.sw.ring_mid != m->mid) {
			job.sw.ring_mid = m->mid;
			send_config(job, now);
		}
		return false;
	}
	if (m->sw.waiting)
		return false;
	u_.ctr.stale_dropped++;
	u_.fail(qp, job, CollStatus::remote_abort, true,
		"a member runs the message round the ring, this node runs the switch");
	return true;
}

} // namespace ibv_coll::emu
