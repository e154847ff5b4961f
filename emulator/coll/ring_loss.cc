// The NIC ring's loss recovery (ring.cc has the protocol): a block's
// result is its acknowledgement; a block whose later ones came back first
// (acked), a gap in what the previous node passes on (gaps, NAKed to the
// member that sends the blocks again: on_nak), and the oldest block
// waiting longer than a round trip allows (probe) go again before their
// timeout (RingPath::timers), which stays the last resort.
#include "coll/coll_engine.h"

#include "util/clock.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

// A block acknowledged: blocks of the same set sent before it, at least
// kDupThresh blocks earlier in the chain, and still without their result
// were lost (the ring keeps order), so they go again now instead of at
// their timeout, and count as loss for the window (a lighter cut than a
// timeout's).
void RingPath::acked(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now,
		     Holding endpoint)
{
	constexpr uint32_t kDupThresh = 3;
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
	if (sid < kDupThresh)
		return;
	std::vector<uint32_t> &lost = gap_;
	lost.clear();
	// RACK's guard: only what has been out longer than a round trip and
	// a quarter (blocks kept early and taken in at a message's start come
	// back out of order); a repeat found lost again, twice that (as RACK,
	// by when it was sent: a block sent after it came back, and it did
	// not).
	const uint64_t age = job.srtt + job.srtt / 4;
	pend.for_before(sid - kDupThresh + 1, [&](uint32_t s, PendingSet::Entry &p) {
		if (p.sent < sent && now - p.sent > (p.fast ? 2 * age : age))
			lost.push_back(s);
	});
	if (lost.empty())
		return;
	job.cc.on_loss(now, false);
	for (uint32_t s : lost) {
		pend.find(s)->fast = true;
		u_.host().cc_counters().fast_retrans++;
		if (&pend == &m.o_pending || !m.chunks[m.chain[s].chunk].rs)
			inject(job, m, s, now, true);
		else
			resend_result(job, m, s, now);
	}
}

// A partial (phase 0) or a result (phase 1) of the running message came
// from the previous node, which passes each chunk's blocks on in order:
// the blocks of the chunk between the last it passed on and this one, not
// here, were lost upstream -- or are late, on a path that reorders.  They
// are NAKed to whoever sends them again, the chunk's origin (partials) or
// finisher (results), instead of waiting for its timeout (every node after
// the loss sees the gap and NAKs it: the sender repeats a block once a
// half round trip at most): at once until the path has been seen to
// reorder, then when they are still missing after the reordering window
// (holes_due()).  A block that fills a gap, not a repeat, shows the path
// reorders, and by how much.
void RingPath::gaps(CollJob &job, Message &m, const CollPacket &p, uint8_t phase)
{
	const uint32_t sid = p.h.sid;
	const size_t nc = m.chunks.size();
	if (sid >= m.nblocks || m.ring.next.size() != 2 * nc ||
	    m.ring.hole_at.size() != 2 * size_t(m.nblocks))
		return;
	const uint16_t chunk = m.chain[sid].chunk;
	uint32_t &next = m.ring.next[phase * nc + chunk];
	const uint64_t now = u_.host().now();
	uint64_t &mark = m.ring.hole_at[phase * size_t(m.nblocks) + sid];
	if (sid < next) {
		// A repeat, or a late block: a repeat shows nothing.
		if (mark && !(p.h.flags & kCethRetrans)) {
			job.reo_wnd = std::max(job.reo_wnd, now - mark);
			if (job.srtt)
				job.reo_wnd = std::min(job.reo_wnd, job.srtt);
		}
		mark = 0;
		return;
	}
	const uint32_t first = next;
	next = sid + 1;
	if (first == sid)
		return;
	for (uint32_t k = first; k < sid; k++)
		if (!m.final_[k])
			m.ring.hole_at[phase * size_t(m.nblocks) + k] = now;
	if (job.reo_wnd)
		m.ring.holes.push_back(RingMsg::Hole{first, sid, phase, now});
	else
		nak(job, m, phase, first, sid, now);
}

// NAK the blocks of [s, e) (one chunk's) that are still missing here.
void RingPath::nak(CollJob &job, Message &m, uint8_t phase, uint32_t s, uint32_t e, uint64_t now)
{
	const ChunkRole &r = m.chunks[m.chain[s].chunk];
	const uint16_t to = phase ? r.fin : r.origin;
	const uint64_t *at = m.ring.hole_at.data() + phase * size_t(m.nblocks);
	auto missing = [&](uint32_t k) { return at[k] && !m.final_[k]; };
	while (s < e) {
		while (s < e && !missing(s))
			s++;
		uint32_t t = s;
		while (t < e && missing(t))
			t++;
		if (t == s)
			break;
		if (to == job.cfg.node) {
			// Our own results that did not come home: again now.
			for (uint32_t k = s; k < t; k++)
				again(job, m, m.f_pending, k, now);
		} else {
			Ceth h;
			h.src_node = job.cfg.node;
			h.jid = job.cfg.jid;
			h.mid = m.mid;
			h.sid = s;
			h.seq = t - s;
			h.phase = phase;
			h.flags = kCethNak;
			h.job_key = job.cfg.key;
			u_.send(job, to, kCollAck, h);
			u_.ctr.naks_sent++;
		}
		s = t;
	}
}

// The gaps that waited the reordering window: what is still missing is
// NAKed now.
void RingPath::holes_due(CollJob &job, Message &m, uint64_t now)
{
	while (!m.ring.holes.empty() && now - m.ring.holes.front().at >= job.reo_wnd) {
		const RingMsg::Hole h = m.ring.holes.front();
		m.ring.holes.pop_front();
		nak(job, m, h.phase, h.s, h.e, now);
	}
}

// Block sid of pend goes again now, unless it went less than half a round
// trip ago: a repeat already on its way answers the loss (the NAKs of the
// nodes after the first to see a gap, a probe after a NAK).
void RingPath::again(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now)
{
	const PendingSet::Entry *e = pend.find(sid);
	if (!e || (e->again && now - e->sent < job.probe_rtt() / 2))
		return;
	u_.host().cc_counters().fast_retrans++;
	if (&pend == &m.o_pending || !m.chunks[m.chain[sid].chunk].rs)
		inject(job, m, sid, now, true);
	else
		resend_result(job, m, sid, now);
}

// A member NAKs blocks of a chunk this node sends: its partials (phase 0,
// as origin) or results (phase 1, as finisher) [sid, sid + seq) did not
// reach it.
void RingPath::on_nak(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (!(p.h.flags & kCethNak) || p.paylen || p.h.phase > 1) {
		u_.ctr.malformed++;
		return;
	}
	if (!job.active || p.h.mid != job.active->mid || job.active->sw.waiting ||
	    job.active->path != this) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *job.active;
	const uint32_t sid = p.h.sid, n = p.h.seq;
	if (sid >= m.nblocks || !n || n > m.nblocks - sid) {
		u_.ctr.bad_block++;
		return;
	}
	const ChunkRole &r = m.chunks[m.chain[sid].chunk];
	const bool mine = p.h.phase ? r.fin == job.cfg.node : r.rs && r.origin == job.cfg.node;
	if (!mine || sid + n > r.first_sid + r.nblocks) {
		u_.ctr.malformed++;
		return;
	}
	u_.ctr.naks_rcvd++;
	PendingSet &pend = p.h.phase ? m.f_pending : m.o_pending;
	for (uint32_t s = sid; s < sid + n && !m.dma_error; s++)
		again(job, m, pend, s, now);
	job.cc.on_loss(now, false);
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
	const uint64_t floor = uint64_t(u_.host().params.cfg.coll_probe_us) * util::kNsPerUs;
	if (!floor)
		return UINT64_MAX;
	uint64_t pto = ring_pto(job, floor, m.next_inject == m.inject_end, rto);
	// Backed off as the repeats of a block are (CollEngine::arm): a
	// member late to post its collective holds every block, and each
	// probe without progress only repeats the oldest.
	pto = std::min(pto << std::min<uint32_t>(m.ring.probes, 16),
		       std::max<uint64_t>(2 * rto, 1000 * util::kNsPerMs));
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
	const uint64_t pto = ring_pto(job,
				      uint64_t(u_.host().params.cfg.coll_probe_us) * util::kNsPerUs,
				      m.next_inject == m.inject_end, u_.rto_ns(job));
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

} // namespace ibv_coll::emu
