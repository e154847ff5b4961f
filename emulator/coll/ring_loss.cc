// The NIC ring's end-to-end loss recovery (ring.cc has the protocol,
// ring_hop.cc each hop's, which finds most losses first): a block's
// result is its acknowledgement; a block whose later ones came back first
// (acked), one a node NAKs to its origin or finisher (on_nak), and the
// oldest block waiting longer than a round trip allows (probe) go again
// before their timeout (RingPath::timers), which stays the last resort.
#include "coll/coll_engine.h"
#include "coll/ring_nav.h"

#include "util/clock.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

// A block acknowledged: its round trip is sampled (a block sent once)
// and it leaves the window.  A block still out when later ones came back
// is no loss here: each hop repairs its own (ring_hop.cc), and a repair
// holds its block up by that hop's round trip, not the ring's; sent again
// from its start, as RACK would, it crossed every hop once more (on a
// 4-node ring at 5 % loss, half of all repeats).
void RingPath::acked(CollJob &job, PendingSet &pend, uint32_t sid, uint64_t now, Holding endpoint)
{
	PendingSet::Entry *e = pend.find(sid);
	if (!e)
		return;
	const uint64_t sent = e->sent;
	if (!e->again && endpoint.known()) {
		u_.rtt_sample(job, now - sent, endpoint);
		job.cc.on_rtt_sample(now - sent, endpoint, now);
	}
	pend.erase(sid);
	job.cc.on_ack(1, now);
}

// Block sid of pend goes again now, unless it went less than half a round
// trip ago: a repeat already on its way answers the loss (the NAKs of the
// nodes after the first to see a gap, a probe after a NAK).  A result
// NAKed by node `to` goes to it straight.
void RingPath::again(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now,
		     int32_t to)
{
	const PendingSet::Entry *e = pend.find(sid);
	if (!e || (e->again && now - e->sent < job.probe_rtt() / 2))
		return;
	u_.host().cc_counters().fast_retrans++;
	if (&pend == &m.f_pending && to >= 0 && uint16_t(to) != next_node(job.cfg))
		resend_result(job, m, sid, now, -1, to);
	else if (&pend == &m.o_pending || !m.chunks[m.chain[sid].chunk].rs)
		inject(job, m, sid, now, true);
	else
		resend_result(job, m, sid, now);
}

// A NAK: from the next node, of numbers this node sent it (ring_hop.cc);
// or, relayed by a node that cannot send them again, of blocks of a
// chunk [sid, sid + seq) this node is the origin (partials, phase 0) or
// finisher (results, phase 1) of: they start again.
void RingPath::on_nak(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (!(p.h.flags & kCethNak) || p.paylen || p.h.phase > 1) {
		u_.ctr.malformed++;
		return;
	}
	Message *mp = running(job, p.h.mid);
	if (!mp) {
		u_.ctr.stale_dropped++;
		if ((p.h.flags & kCethHop) && !job.running(p.h.mid) && !job.ahead(p.h.mid))
			send_over(job, p.h.mid, p.h.src_node);
		return;
	}
	Message &m = *mp;
	if (p.h.flags & kCethHop) {
		on_hop_nak(job, m, p, now);
	} else {
		const JobConfig &c = job.cfg;
		const uint32_t sid = p.h.sid, n = p.h.seq;
		if (sid >= m.nblocks || !n || n > m.nblocks - sid) {
			u_.ctr.bad_block++;
			return;
		}
		const ChunkRole &r = m.chunks[m.chain[sid].chunk];
		const bool mine = p.h.phase ? r.fin == c.node : r.rs && r.origin == c.node;
		if (!mine || sid + n > r.first_sid + r.nblocks) {
			u_.ctr.malformed++;
			return;
		}
		u_.ctr.naks_rcvd++;
		PendingSet &pend = p.h.phase ? m.f_pending : m.o_pending;
		for (uint32_t s = sid; s < sid + n && !m.dma_error; s++)
			again(job, m, pend, s, now, p.h.phase ? p.h.src_node : -1);
		job.cc.on_loss(now, false);
	}
	if (m.dma_error)
		u_.fail(qp, job, CollStatus::local_err, true, "a local buffer is not accessible");
}

// Tail-loss probe (TCP's TLP): when no block has completed here for twice
// the round trip (and no less than IBV_COLL_EMU_COLL_PROBE_US), the oldest
// blocks without their answer go again before their timeout; the last
// blocks of a chunk have no later block to show their loss.  Without
// progress each probe waits twice as long as the last.
//
// At the tail (all of this node's blocks out) the probe waits for twice
// the round trip through an empty queue, but no less than the latest
// answer took and a quarter: the answers still out come behind the queue
// the message built on the ring's links (every chunk's results share
// them), and probing sooner sent loss-free blocks again (a 4-node ring on
// a 400 Mbit/s fabric with 256 KB queues put 10-25 % more on the wire).
static uint64_t ring_pto(const CollJob &job, uint64_t floor, bool tail, uint64_t rto)
{
	uint64_t t = job.probe_time(floor, tail);
	if (t && tail)
		t = std::max(t, job.qlast + job.qlast / 4);
	return t ? t : rto;
}

uint64_t RingPath::probe_due(const CollJob &job, const Message &m) const
{
	const uint64_t rto = u_.rto_ns(job);
	const uint64_t floor = u_.probe_ns();
	if (!floor)
		return UINT64_MAX;
	uint64_t pto = ring_pto(job, floor, m.next_inject == m.inject_end, rto);
	// Backed off as the repeats of a block are (CollCore::arm, an eighth
	// of the job's timeout at most): a
	// member late to post its collective holds every block, and each
	// probe without progress only repeats the oldest.
	pto = std::min({pto << std::min<uint32_t>(m.ring.probes, 16),
			std::max<uint64_t>(2 * rto, 1000 * util::kNsPerMs), u_.backoff_most(job)});
	// Due when no block completed here for that long (TCP's TLP), not by
	// the oldest block's age: on a link with a queue that grows with the
	// queue, and a probe of a block on its way only doubles it.  Nor
	// while other chunks' partials still pass through: the ring is
	// draining its queues, and this node's answers come behind them.
	if (m.o_pending.empty() && m.f_pending.empty())
		return UINT64_MAX;
	return std::max({m.last_progress, m.ring.heard, m.ring.probe_at}) + pto;
}

void RingPath::probe(CollJob &job, Message &m, uint64_t now)
{
	const uint64_t pto = ring_pto(job, u_.probe_ns(), m.next_inject == m.inject_end,
				      u_.rto_ns(job));
	m.ring.probes = m.last_progress > m.ring.probe_at ? 0 : m.ring.probes + 1;
	m.ring.probe_at = now;
	// The oldest blocks that have waited a probe's time, a few of each
	// set: at a message's end several may be lost at once (the last of
	// each chunk, the results of the last blocks), and one a probe would
	// drain them a probe's time apart.  A probe after one that brought
	// nothing repeats the oldest alone.
	const uint32_t per_probe = m.ring.probes ? 1 : 8;
	for (PendingSet *pend : {&m.o_pending, &m.f_pending}) {
		uint32_t n = 0;
		pend->for_before(m.nblocks, [&](uint32_t sid, PendingSet::Entry &e) {
			if (n >= per_probe || (n && now - e.sent < pto))
				return;
			n++;
			u_.ctr.probes++;
			if (pend == &m.o_pending || !m.chunks[m.chain[sid].chunk].rs)
				inject(job, m, sid, now, true);
			else
				resend_result(job, m, sid, now);
		});
	}
}

void RingPath::timers(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	hop_timers(job, m, now);
	// The hops repair what they lose, each on its own (ring_hop.cc): while
	// the message's results still come, a block late end to end waits
	// behind repairs and queues, and is not lost.  Its timer waits for
	// the message to stall: sent again around the whole ring on the round
	// trip's timeout, late blocks cost a lap each, and their laps filled
	// the queues (8 hosts, 200 Mbit/s, 256 KiB queues, hosts 0-200 us
	// late: 8,500 of them, 118,785 packets dropped, 0.4 of the bound).
	const uint64_t rto = u_.rto_ns(job);
	const bool progressing = now < m.last_progress + rto;
	bool lost = false;
	m.o_pending.for_due(now, [&](uint32_t sid) {
		if (progressing) {
			m.o_pending.find(sid)->deadline = m.last_progress + rto;
			return;
		}
		inject(job, m, sid, now, true);
		lost = true;
	});
	m.f_pending.for_due(now, [&](uint32_t sid) {
		if (progressing) {
			m.f_pending.find(sid)->deadline = m.last_progress + rto;
			return;
		}
		lost = true;
		if (m.chunks[m.chain[sid].chunk].rs)
			resend_result(job, m, sid, now);
		else
			inject(job, m, sid, now, true);
	});
	if (lost)
		job.cc.on_loss(now);
	if (!m.dma_error && now >= probe_due(job, m))
		probe(job, m, now);
	if (m.dma_error)
		return u_.fail(qp, job, CollStatus::local_err, true,
			       "a local buffer is not accessible");
	if (now > m.last_progress && now - m.last_progress > u_.coll_timeout_ns(job)) {
		u_.ctr.timeouts++;
		u_.fail(qp, job, CollStatus::timeout, true, "no progress within the job's timeout");
	}
}

} // namespace ibv_coll::emu
