// The switch path's messages in flight (swpath.cc has the protocol): a
// message posted while others of the job run through the switch starts
// beside them (CollEngine::may_start_beside), as SHARP's low-latency
// trees keep several transactions outstanding.  The job numbers the
// blocks of all its messages in one sequence (CETH seq, SwitchMsg::gs0),
// so to the switch the messages are one stream of blocks: the Seg unit a
// block takes is its number's, and the span keeps any two blocks in
// flight out of one unit across messages as within one.  A message's
// blocks go once the older ones' have all gone, all inside the job's one
// window and congestion window; each message keeps its own timers,
// probes and repeats, and they complete in MID order.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/clock.h"

#include <algorithm>

namespace ibv_coll::emu {

// m runs through the switch now (not waiting for a grant or a decision).
static bool launched(const SwitchPath *sw, const Message &m)
{
	return m.path == sw && m.sw.on && !m.sw.waiting;
}

// A WQE may start beside the messages that run: they run through the
// switch, which granted the job for good (not one message at a time:
// time division), and the results need no member's acknowledgement.
bool SwitchPath::beside_ok(const CollJob &job) const
{
	return wanted(job) && job.sw.phase == CollJob::SwPhase::ready && !job.sw.tdm &&
	       !job.cfg.sw.e2e_ack && job.active && launched(this, *job.active);
}

// m (the newest in CollJob::flight) starts beside the messages that run.
void SwitchPath::start(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	m.sw.on = true;
	go(qp, job, m, now);
}

// The job's number of the next block to go (messages send in MID order):
// next_gs when every block of every message went.
uint64_t SwitchPath::next_out(const CollJob &job) const
{
	for (size_t i = 0; i < job.runs(); i++) {
		const Message &m = job.run(i);
		if (launched(this, m) && m.sw.next < m.nblocks)
			return m.sw.gs0 + m.sw.next;
	}
	return job.sw.next_gs;
}

// The oldest message with a block whose result is not here (null: none).
Message *SwitchPath::oldest_open(const CollJob &job) const
{
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (launched(this, m) && m.sw.base < m.nblocks)
			return &m;
	}
	return nullptr;
}

// The first block the units cannot take yet: span past the oldest block
// without its result (UINT64_MAX: none is without).
uint64_t SwitchPath::span_end(const CollJob &job) const
{
	const Message *o = oldest_open(job);
	return o ? o->sw.gs0 + o->sw.base + job.sw.span : UINT64_MAX;
}

// Blocks sent whose results are not here, of all the messages.
uint32_t SwitchPath::in_flight(const CollJob &job) const
{
	size_t n = 0;
	for (size_t i = 0; i < job.runs(); i++)
		if (launched(this, job.run(i)))
			n += job.run(i).o_pending.size();
	return uint32_t(n);
}

// The message whose blocks the job's number gs is of, and the block
// (null: none that runs here).
Message *SwitchPath::message_of(const CollJob &job, uint64_t gs, uint32_t *sid) const
{
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (launched(this, m) && gs >= m.sw.gs0 && gs - m.sw.gs0 < m.nblocks) {
			*sid = uint32_t(gs - m.sw.gs0);
			return &m;
		}
	}
	return nullptr;
}

// Message `later` has every result here: the blocks of the messages
// before it still without theirs are lost (a result, or an ASK or its
// answer), or wait for another member's repeat.  A member held at its
// depth gets no later result to show such a gap, and only the ASK of
// each message's oldest block follows from the results that come
// (find_gaps).  So each is asked for a round trip after it last went,
// twice as long after each ASK unanswered, as RACK marks a packet lost
// once a later one is delivered, rather than after the probe time (500
// us by default: 12 hosts at 5 % loss, 8 B allreduces four in flight,
// took 1.3x the time of one at a time before this, 0.6x after).
void SwitchPath::overtaken(CollJob &job, const Message &later, uint64_t now)
{
	const uint64_t rtt = round_trip(job);
	for (size_t i = 0; i < job.runs() && &job.run(i) != &later; i++) {
		Message &o = job.run(i);
		for (uint32_t g = o.sw.base; launched(this, o) && g < o.sw.next; g++) {
			PendingSet::Entry *e = o.o_pending.find(g);
			if (!e || o.final_[g])
				continue;
			const uint64_t at = e->sent + (rtt << std::min<uint32_t>(e->asks, 6));
			if (now >= at && !late_within_window(job, *e, now)) {
				send_block(job, o, g, now, true, true);
			} else if (at < e->deadline) {
				e->deadline = std::max(at, now + 1);
				o.o_pending.timer_set(e->deadline);
			}
		}
	}
}

void SwitchPath::pump(Qp &qp, CollJob &job, uint64_t now)
{
	CongestionCtl &cc = job.sw.cc;
	if (!cc.ready()) {
		// Blocks in flight (sent, no result) are the flow's units; the
		// round trip crosses the way up and the way down at each level.
		const uint32_t w = job.sw.window;
		cc.init(&u_.host().params.cfg.cc, &u_.host().cc_counters(), std::max(1u, w / 4), w,
			job.cfg.sw.pods > 1	? 6
			: job.cfg.sw.leaves > 1 ? 4
						: 2);
	}
	// With nothing in flight a block goes whatever the window says: below
	// one block the window paces, and a paced member holds up every
	// block's result, so the others' round trips take in its pause, they
	// cut and pace in turn, and the job crawls at a block every eight
	// round trips (the rxe.vm coll_switch timeout).  The result that every
	// member gets at once clocks them all, in step.  With the port's rate
	// known a block waits for the port too (CollCore::port_ready).
	uint32_t flying = in_flight(job);
	const uint64_t end = span_end(job); // results come only between passes
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (!launched(this, m))
			return;
		if (m.sw.next == m.nblocks)
			continue;
		m.sw.port_wait = false;
		const uint32_t first = m.sw.next;
		while (m.sw.next < m.nblocks && m.sw.gs0 + m.sw.next < end &&
		       flying < job.sw.window && !m.dma_error) {
			if (cc.enabled() && !cc.may_send(flying, now))
				break;
			if ((m.sw.port_wait = !u_.port_ready(now)))
				break;
			send_block(job, m, m.sw.next++, now, false);
			flying++;
			cc.on_send(now);
		}
		note_held(job, m, m.sw.next != first, flying, now);
		if (m.dma_error)
			return u_.fail(qp, job, CollStatus::local_err, true,
				       "a local buffer is not accessible");
		if (m.sw.next < m.nblocks)
			return; // held: the later messages wait behind it
	}
}

// Sending interruptions (CollCounters::win_holds): blocks left, and the
// window (the grant's, the congestion window, or the span the units
// allow) full of blocks whose results are not back.  One is timed from
// when the wire is idle (a window full while the port still sends costs
// nothing) to when a block goes, and counts when it is longer than a full
// block's time on the wire (1 us when the port's rate is not known): a
// window just the bandwidth-delay product waits a moment for each result,
// which no sender would call an interruption.  A pause for the port or
// for pacing's time is not one.  m is the message whose blocks go next.
void SwitchPath::note_held(const CollJob &job, Message &m, bool sent, uint32_t flying, uint64_t now)
{
	if (sent && m.sw.held_since) {
		const uint64_t rate = u_.host().params.cfg.port_rate_bps;
		const uint64_t block_ns = rate ? kBlockWireBytes * 8 * 1000000000ull / rate : 1000;
		if (now > m.sw.held_since + block_ns) {
			u_.ctr.win_holds++;
			u_.ctr.win_held_ns += now - m.sw.held_since;
		}
		m.sw.held_since = 0;
	}
	const CongestionCtl &cc = job.sw.cc;
	const uint32_t w = cc.enabled() ? std::min(job.sw.window, cc.window()) : job.sw.window;
	if (!m.sw.held_since && m.sw.next < m.nblocks && !m.dma_error && !m.sw.port_wait &&
	    (m.sw.gs0 + m.sw.next >= span_end(job) || flying >= w))
		m.sw.held_since = std::max<uint64_t>({now, u_.port_idle_at(), 1});
}

// Each message's repeats, probes and timeout, oldest first.  A message
// whose blocks wait behind an older one's has made the older one's
// progress (it is not stalled while they move).
void SwitchPath::timers(Qp &qp, CollJob &job, uint64_t now)
{
	if (job.sw.phase == CollJob::SwPhase::configuring)
		return config_timers(qp, job, now);
	if (job.active && job.active->sw.waiting && job.active->sw.admit == 1)
		return admit_timers(qp, job, now);
	bool lost = false;
	for (size_t i = 0; i < job.runs() && qp.state == QpState::rts; i++) {
		Message &m = job.run(i);
		if (!launched(this, m))
			break;
		if (i)
			m.last_progress = std::max(m.last_progress, job.run(i - 1).last_progress);
		lost |= repeat_due(job, m, now);
		if (m.dma_error)
			return u_.fail(qp, job, CollStatus::local_err, true,
				       "a local buffer is not accessible");
		if (now > m.last_progress && now - m.last_progress > u_.coll_timeout_ns(job)) {
			u_.ctr.timeouts++;
			return u_.fail(qp, job, CollStatus::timeout, true,
				       "no result from the switch within the timeout");
		}
	}
	if (lost)
		job.sw.cc.on_loss(now);
}

// Message m's blocks whose timers are due: ASKed, or sent again; its
// probe; and its oldest block when it holds up the next to go.  True
// when a partial went again as lost.
bool SwitchPath::repeat_due(CollJob &job, Message &m, uint64_t now)
{
	bool lost = false;
	m.o_pending.for_due(now, [&](uint32_t sid) {
		const PendingSet::Entry &e = *m.o_pending.find(sid);
		if (!m.final_[sid] && e.held && sid >= m.sw.base + 2 * job.cfg.sw.planes) {
			// The switch has our partial and waits for others': the
			// oldest blocks' ASKs find a lost result, these need none.
			u_.arm(job, m, m.o_pending, sid, now, true);
		} else if (!m.final_[sid]) {
			// Ask (a lost result, or another member's lost partial,
			// costs no payload); the partial itself after two ASKs
			// unanswered, unless the switch said it holds it.  Only
			// that is a loss for the window: a late result most
			// often waits for a slower member (on_nak cuts when the
			// ASK finds our partial lost).
			const bool ask = e.held || e.asks < 2;
			lost |= !ask;
			send_block(job, m, sid, now, true, ask);
		} else {
			// End-to-end mode: the result is here, node 0's ACK is not.
			send_ack(job, m.mid, sid, 0, true);
			u_.arm(job, m, m.o_pending, sid, now, true);
		}
	});
	if (!m.o_pending.empty() && now >= probe_due(job, m))
		probe(job, m, now);
	if (now >= blocked_due(job, m, false))
		send_block(job, m, m.sw.base, now, true, true);
	return lost;
}

uint64_t SwitchPath::next_deadline(const CollJob &job) const
{
	const Message &a = *job.active;
	if (a.sw.waiting) {
		const uint64_t d = a.last_progress + u_.coll_timeout_ns(job);
		if (a.sw.admit == 1) // tdm: the switch's decision
			return std::min(d, a.sw.admit_sent + u_.rto_ns(job));
		return std::min(d, job.sw.cfg_sent + config_interval(job));
	}
	uint64_t d = UINT64_MAX;
	for (size_t i = 0; i < job.runs(); i++) {
		const Message &m = job.run(i);
		if (!launched(this, m))
			break;
		d = std::min({d, m.last_progress + u_.coll_timeout_ns(job), m.o_pending.next(),
			      m.f_pending.next()});
		if (!m.o_pending.empty())
			d = std::min({d, probe_due(job, m), blocked_due(job, m, false)});
		// ... or for the port, which was busy at the last pump.
		if (m.sw.port_wait)
			d = std::min(d, u_.port_ready_at());
	}
	// Pacing: the next block when the window has room and waits for time.
	const uint64_t out = next_out(job);
	if (job.sw.cc.enabled() && out < job.sw.next_gs && out < span_end(job) &&
	    in_flight(job) < std::min(job.sw.window, job.sw.cc.window())) {
		if (const uint64_t t = job.sw.cc.next_send_time())
			d = std::min(d, t);
	}
	return d;
}

} // namespace ibv_coll::emu
