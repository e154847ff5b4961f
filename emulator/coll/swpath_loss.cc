// The switch path's loss recovery (swpath.cc has the protocol): a NAK
// from the switch sends a partial again (on_nak), unless the path
// reorders and the partial may still be on its way (spurious() learns
// that); results that show a gap ASK for the blocks before them
// (find_gaps); a message without results for a while probes its oldest
// blocks (probe), before their timeout (SwitchPath::timers), which stays
// the last resort.
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/clock.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

// Block sid was sent again (with its partial, or as an ASK unless
// partial) less than a round trip ago: a NAK or a gap seen now may
// predate that repeat, which then answers it already.
bool SwitchPath::recently_sent(const CollJob &job, Message &m, uint32_t sid, uint64_t now,
			       bool partial)
{
	// A NAK that left the switch after our repeat reached it comes three
	// quarters of a round trip after the repeat at the earliest (the way
	// there, and back).
	const PendingSet::Entry *e = m.o_pending.find(sid);
	const uint64_t rtt = round_trip(job);
	return e && e->again && !(partial && e->asks) && now - e->sent < 3 * rtt / 4;
}

// No result for two round trips (a lost block at the end of the message,
// where no later result shows the gap, or a window stalled behind one):
// probe, as TCP's tail loss probe does, before the timeout.  Without
// progress each probe waits twice as long as the last.  The round trip
// takes in the hosts' delays (a member descheduled, the slowest member's
// partial), so a busy machine probes later, not in vain; an ASK carries
// no payload, and a probe that was not needed costs its answer.  No
// sooner than IBV_COLL_EMU_COLL_PROBE_US (0: never).
uint64_t SwitchPath::probe_due(const CollJob &job, const Message &m) const
{
	const uint64_t floor = u_.probe_ns();
	if (!floor)
		return UINT64_MAX;
	const uint64_t t = job.probe_time(floor, m.sw.next == m.nblocks);
	const uint64_t base = t ? t : unsampled(job);
	// Due when no result came for that long (TCP's TLP): a block whose
	// result is late while later ones come is found by the gaps it
	// leaves (find_gaps) and the NAKs other members' ASKs bring, not by
	// its age, which on a link with a queue grows with the queue (an ASK
	// for a result on its way makes the switch send it twice).
	if (m.o_pending.empty())
		return UINT64_MAX;
	if (m.last_progress >= m.sw.probe_at)
		return m.last_progress + base;
	// Backed off to an eighth of the job's timeout at most: several probes
	// go before the job gives up (RingPath::tail_wait).  Once the switch
	// answered this message the path works, and a probe without an answer
	// since was lost, or its answer was, or the switch still waits for
	// another member (and NAKs it: Switch::on_ask): eight times the first
	// wait, or an eighth of the wait since the last result, whichever is
	// longer (CollCore::answered_wait), not doubling on (8 hosts, 20 %
	// loss, seed 7: five answers lost in a row doubled a member's probes
	// to 1 s apart).  Not a fixed time apart either: every member waiting
	// for one descheduled for long asks, and each ASK has the switch NAK
	// that one (8 hosts, one stalled 500 ms: 910 ASKs and 946 NAKs to it,
	// 574 and 610 when the probes doubled on).
	if (m.sw.answered)
		return m.sw.probe_at + u_.answered_wait(job,
							base << std::min<uint32_t>(m.sw.probes, 3),
							m.sw.probe_at - m.last_progress);
	return m.sw.probe_at +
	       std::min(base << std::min<uint32_t>(m.sw.probes, 10), u_.backoff_most(job));
}

// ASK for the oldest blocks without a result (one round trip's worth of
// them per plane at most): the switch answers with the result, or NAKs
// the missing partial.  A block sent (or asked for) less than a round
// trip ago is not asked: its answer cannot be here yet, and an ASK right
// after a block's first copy would cost its round trip sample (Karn).
void SwitchPath::probe(CollJob &job, Message &m, uint64_t now)
{
	m.sw.probes = m.last_progress >= m.sw.probe_at ? 0 : m.sw.probes + 1;
	m.sw.probe_at = now;
	uint32_t n = 0;
	const uint64_t rtt = round_trip(job);
	for (uint32_t sid = m.sw.base; sid < m.sw.next && n < 2 * job.cfg.sw.planes; sid++) {
		const PendingSet::Entry *e = m.o_pending.find(sid);
		if (m.final_[sid] || !e)
			continue;
		n++;
		if (now - e->sent >= rtt)
			send_block(job, m, sid, now, true, true);
	}
}

// The least time an answer takes: the least round trip seen, or before
// any a quarter of the timeout (as the probes take).
uint64_t SwitchPath::least_answer(const CollJob &job) const
{
	return job.qmin ? job.qmin : unsampled(job);
}

// When the oldest block without its result is next asked for because it
// holds this node up (UINT64_MAX: it does not).  The next block waits for
// the span (the units it would take may still hold the oldest block's
// result for someone): every other member's blocks beyond then wait for
// this node's partials, so no result comes and the probes would back
// off while the whole job stands (64 hosts at 5 % loss: a lost result
// held a node, and so the job, for 115 us of a 350 us message).  It is
// asked for again every twice the least round trip seen (the probe
// floor at least), without backing off; urged (another member's NAK of
// a block not yet sent here: the switch waits for it), once the least
// round trip has passed.  While no later block has its result the oldest
// is as likely queued behind this node's own window as lost, and the
// wait counts from the last result: from when it went, a window of
// 2,048 blocks asked for blocks still in its own queue (claim 001 at
// 8 hosts: 4,608 needless repeats, 0.85 of the bound instead of 0.97).
uint64_t SwitchPath::blocked_due(const CollJob &job, const Message &m, bool urged) const
{
	// m holds the oldest block without its result, and a block of it or
	// of a later message waits for the span.
	const uint64_t out = next_out(job);
	if (out >= job.sw.next_gs || m.sw.base >= m.nblocks ||
	    out < m.sw.gs0 + m.sw.base + job.sw.span || oldest_open(job) != &m)
		return UINT64_MAX;
	const PendingSet::Entry *e = m.o_pending.find(m.sw.base);
	const uint64_t floor = u_.probe_ns();
	if (!e || m.final_[m.sw.base] || !floor)
		return UINT64_MAX;
	if (urged) // no sooner than an answer can come (a NAK comes from each asker)
		return e->sent + least_answer(job);
	const uint64_t t = job.probe_time(floor, true);
	const bool gap = m.sw.high > m.sw.base + 1;
	const uint64_t from = gap ? e->sent : std::max(e->sent, m.last_progress);
	return from + (t ? t : unsampled(job));
}

// A sure NAK names (rank_map, plus 1) the block of ours that showed the
// loss (the job's number: perhaps of an older message).  When that
// block's first copy went before our last copy of this
// one (a repeat, then on its way), the NAK crossed that repeat and says
// nothing of it: the switch NAKs each lacking member again as each later
// block completes.  Taken as lost, the repeat that answered it came back
// as a result the switch held since before it went, and spurious() took
// the path to reorder (64 hosts at 5 % loss: 26 such windows, 1,675 NAKs
// then waited out; 1.78x the loss-free time, 1.53x without them).
bool SwitchPath::crossed(const Message &m, const PendingSet::Entry &e, uint32_t sid,
			 uint64_t shown) const
{
	if (!shown || !e.again)
		return false;
	const uint32_t by = uint32_t(shown - 1);
	return by != uint32_t(m.sw.gs0 + sid) && int32_t(by - e.next_at_data) < 0;
}

// The switch lacks our partial of the block (wire/swproto.h, Loss): it
// goes again now, the only copy that does.  A NAK that does not name us
// answers our ASK: the switch holds our partial and waits for others'.
// A NAK that names us in answer to the ASK of a timed-out block is that
// timeout's loss, and cuts the window.
void SwitchPath::on_nak(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	const uint32_t sid = p.h.sid;
	PendingSet::Entry *e = m.o_pending.find(sid);
	if (e && !(p.h.node_map & my_bit(job))) {
		// The answer to our ASK: the switch holds our partial and waits
		// for others'.  With one ASK out it answers that one, at once: a
		// round trip nothing waited in.  Before any block gave a sample
		// (every one went again: a member joined late) it is the first,
		// as TCP takes its first from the handshake; else the probes
		// wait a quarter of the retransmission timeout (5 ms).
		if (e->asks == 1 && now > e->sent)
			first_sample(job, now - e->sent);
		e->held = true;
		return;
	}
	// Our first copy too may still be on its way (another member's probe
	// had the switch NAK us): the same wait before it counts as lost.
	const uint64_t rtt = job.probe_rtt();
	// A NAK of a block not sent yet: the switch waits for it, and this
	// node may be what holds the job up (its oldest block, perhaps of an
	// older message).
	if (Message *o = oldest_open(job);
	    !e && sid >= m.sw.next && o && now >= blocked_due(job, *o, true))
		send_block(job, *o, o->sw.base, now, true, true);
	// A NAK that names (rank_map, plus 1) the later block or ASK of ours
	// that came before this partial is sure: on a path that keeps its
	// order (no reordering seen: spurious() would have opened the
	// window) the partial was lost.  One without (the switch NAKs every
	// member another's ASK found missing) may find ours still queued on
	// the way: its repeat, needless, says nothing of reordering.
	const bool sure = p.h.rank_map != 0;
	const bool gap = sure && !job.sw.reo_wnd;
	if (!e || crossed(m, *e, sid, p.h.rank_map) || recently_sent(job, m, sid, now, true) ||
	    (!gap && !e->again && rtt && now - e->sent < 3 * rtt / 4)) {
		u_.ctr.dup_dropped++;
		return;
	}
	// On a path that reorders, the partial may still be on its way (behind
	// the ASK that the NAK answers, or behind our later partials that
	// completed later blocks): within the reordering window it goes
	// again only when a later NAK says so (the next ASK's: a later
	// result, a probe, the timer).
	if (!gap && now - e->data_sent < job.sw.reo_wnd) {
		u_.host().cc_counters().reorder_waits++;
		return;
	}
	if (e->asks)
		job.sw.cc.on_loss(now);
	const uint64_t lead = now - e->data_sent;
	job.sw.naks++;
	send_block(job, m, sid, now, true);
	m.o_pending.find(sid)->nak_lead = sure ? uint32_t(std::clamp<uint64_t>(lead, 1, UINT32_MAX))
					       : 0;
	// Otherwise no cut: a partial lost alone is no sign of a full queue
	// (the round trip is; a timeout cuts).
	u_.host().cc_counters().fast_retrans++;
}

// Block sid's result is here after its partial went again on a NAK: if
// the switch had our partial before that repeat left (the result's hold
// says how long ago it came), the first copy was late, not lost, and the
// path reorders by more than we waited.  As RACK's window grows on a
// DSACK, ours grows to twice that NAK's lead over the first copy (the
// lateness seen is not the most there is), at most the retransmission
// timeout; it shrinks by an eighth each message.  Without it a path that
// holds packets for milliseconds at random cost a repeat and a halved
// window for every ASK that overtook its partial (test_sim_gates'
// switch gate: 13x the time with the controller off).
void SwitchPath::spurious(CollJob &job, const PendingSet::Entry &e, Holding h, uint64_t now)
{
	if (!e.nak_lead || !h.known() || h.held < now - e.data_sent)
		return;
	u_.host().cc_counters().spurious_retrans++;
	job.sw.reo_wnd = std::max(job.sw.reo_wnd,
				  std::min(2 * uint64_t(e.nak_lead), u_.rto_ns(job)));
}

// Most of what went (of late) was needless, and not by chance: a few
// such in a lossy run, where most are needed, would widen the window for
// the rest of it.
static bool mostly(uint32_t needless, uint32_t sent)
{
	return needless >= 8 && 2 * needless > sent;
}

// Block sid's result came twice: what we sent last for it was needless.
// After an ASK (the first copy came after it went): the result was late,
// not lost (results of one plane leave a switch of several workers, or a
// port that holds packets, out of block order).  After a partial sent
// again on a NAK: the first copy was late, not lost, and the switch
// answered both (spurious() finds that from the result's hold, which
// cannot tell when our partial was the last the block waited for: the
// hold is then 0).  As RACK's window grows on a DSACK, ours grows: to
// twice how late the result came after the ASK, or twice the NAK's lead
// over the first copy, at most the retransmission timeout; but only while
// most ASKs (or NAKed repeats) are needless: a result late because the
// switch waited for another member's lost partial looks the same, and on
// a lossy path, where most find a loss, a wider window finds ours later
// (16 hosts with 5 % loss: a fifth to a fourth needless; growing on each
// cost 1.07x-1.39x the time).  Without it, 8 hosts through a 4-worker
// switch on 2 cores sent up to 0.5 ASKs a block (CI run 32, coll
// n8k1_traffic_switch, 1.030 S), and 8 hosts whose ports hold packets
// 20 +- 20 us took 1.5x the time without (SimGate.ResultsOutOfOrder...).
void SwitchPath::answered_twice(CollJob &job, const Message &m, uint32_t sid, uint64_t now)
{
	const PendingSet::Entry *e = m.o_pending.last(sid);
	if (e && !e->asks && e->nak_lead) { // a partial sent again on a NAK
		u_.host().cc_counters().spurious_retrans++;
		job.sw.naks_needless++;
		if (mostly(job.sw.naks_needless, job.sw.naks))
			job.sw.reo_wnd = std::max(
				job.sw.reo_wnd,
				std::min(2 * uint64_t(e->nak_lead), u_.rto_ns(job)));
		return;
	}
	if (!e || !e->asks || e->result_at < e->sent || now < e->result_at)
		return;
	u_.host().cc_counters().spurious_retrans++;
	job.sw.asks_needless++;
	if (!mostly(job.sw.asks_needless, job.sw.asks))
		return;
	job.sw.reo_wnd = std::max(job.sw.reo_wnd,
				  std::min(2 * (e->result_at - e->sent), u_.rto_ns(job)));
}

// The round trip an answer takes; before any sample, what the probes
// wait (half the timeout, as it was, made the first probe, due at a
// quarter, ask for nothing: its block had gone less than that before).
uint64_t SwitchPath::round_trip(const CollJob &job) const
{
	return job.probe_rtt() ? job.probe_rtt() : unsampled(job);
}

uint64_t SwitchPath::unsampled(const CollJob &job) const
{
	return u_.rto_ns(job) / 4;
}

void SwitchPath::first_sample(CollJob &job, uint64_t rtt)
{
	if (!job.srtt)
		u_.rtt_sample(job, rtt, Holding{0, 0});
}

// The result of block sid is here: an older block of its plane two blocks
// back whose result is not is a lost result, or a partial the switch
// will NAK; ask for it (no payload).  Blocks further back (8 and 32) are
// looked at too: an ASK or its answer lost in turn is asked again as
// results go on coming, a round trip apart at least, long before a probe
// or a timeout would.  Not when results chain (a switch of one worker
// names the result it sent before each: chained() finds a lost one
// exactly): there a result two back is late because its block waits for
// another member's repeat, and the ASK only costs its answer; most were
// needless, which opened the reordering window, and this node's own
// repairs then waited it out (16 hosts at 5 % loss: 2.07x the loss-free
// time with them, 1.81x without).
void SwitchPath::find_gaps(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool chain)
{
	for (uint32_t d : {2u, 8u, 32u}) {
		if (chain)
			break;
		const uint32_t lag = d * job.cfg.sw.planes;
		if (sid < lag)
			break;
		const uint32_t g = sid - lag;
		const PendingSet::Entry *pe = m.o_pending.find(g);
		if (g < m.sw.base || m.final_[g] || !pe || recently_sent(job, m, g, now, false) ||
		    late_within_window(job, *pe, now))
			continue;
		send_block(job, m, g, now, true, true);
	}
	// And the oldest block without its result (perhaps of an older
	// message), as RACK does: results come in block order, so one after
	// it here while it waits longer than a round trip allows (ASKed, or
	// sent, once a round trip at most) is a lost result, or a partial
	// lost again somewhere.
	Message *o = oldest_open(job);
	uint32_t g = 0;
	const PendingSet::Entry *e = o ? o->o_pending.lowest(&g) : nullptr;
	// An older message's block: a round trip where results keep block
	// order across messages (they chain); else as a block of this one.
	const uint64_t t = o == &m || !chain ? job.probe_time(u_.probe_ns()) : round_trip(job);
	if (e && (o != &m || g < sid) && !o->final_[g] && t && now - e->sent >= t &&
	    !recently_sent(job, *o, g, now, false) && !late_within_window(job, *e, now))
		send_block(job, *o, g, now, true, true);
}

// A result says (CETH rank_map, plus 1) which block's results the switch
// sent before it, the same way: if that one is not here, it was lost (on
// a path that keeps its order; one seen to reorder waits its window);
// asked for at once, unless asked less than the least round trip ago
// (the answer is on its way).  A result that waited for another
// member's repeat is late, not lost, and no later result names it
// before it went.
void SwitchPath::chained(CollJob &job, uint64_t prev, uint64_t now)
{
	if (!prev)
		return;
	// prev - 1 is the block's number as CETH seq carries it (its low 32
	// bits), of this message or an older one still running.
	const uint64_t gs = job.sw.next_gs -
			    uint32_t(uint32_t(job.sw.next_gs) - uint32_t(prev - 1));
	uint32_t g = 0;
	Message *mp = message_of(job, gs, &g);
	if (!mp)
		return;
	Message &m = *mp;
	const PendingSet::Entry *e = m.o_pending.find(g);
	if (g < m.sw.base || m.final_[g] || !e || (e->asks && now - e->sent < least_answer(job)) ||
	    late_within_window(job, *e, now))
		return;
	send_block(job, m, g, now, true, true);
}

// On a path that reorders (the job's switch reordering window is open),
// a result is missing only once a round trip and the window have passed
// since its partial left, as RACK declares a packet lost: before, it is
// late, and an ASK for it costs a repeated result (the switch answers
// from its shadow copy) or, when the ASK overtakes our own partial, a NAK
// and a halved window.  A path that has not reordered asks at once.
bool SwitchPath::late_within_window(const CollJob &job, const PendingSet::Entry &e,
				    uint64_t now) const
{
	if (!job.sw.reo_wnd)
		return false;
	const uint64_t rtt = round_trip(job);
	return now - e.data_sent < rtt + job.sw.reo_wnd;
}

} // namespace ibv_coll::emu
