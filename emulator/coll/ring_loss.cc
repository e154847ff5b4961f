// The NIC ring's loss recovery (ring.cc has the protocol): a block's
// result is its acknowledgement; a block whose later ones came back first
// (acked), a gap in what the previous node passes on (gaps, NAKed to the
// member that sends the blocks again: on_nak), and the oldest block
// waiting longer than a round trip allows (probe) go again before their
// timeout (RingPath::timers), which stays the last resort.
#include "coll/coll_engine.h"
#include "coll/ring_hop.h"

#include "util/clock.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;
using namespace ring;

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
	// Under per-hop repair a block repaired on its way comes back after
	// later ones, and is no loss of the whole ring's.
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
// here, were lost upstream.  They are NAKed at once instead of waiting for
// their timeout, to the block's origin (partials) or finisher (results),
// which alone can send it again (every node after the loss sees the gap
// and NAKs it: the sender repeats a block once a half round trip at
// most).  A repeat comes out of order and shows nothing.  An allreduce
// repairs each hop alone instead (per-hop repair, below).
void RingPath::gaps(CollJob &job, Message &m, const CollPacket &p, uint8_t phase)
{
	const uint32_t sid = p.h.sid;
	const size_t nc = m.chunks.size();
	if (sid >= m.nblocks || m.ring.next.size() != 2 * nc)
		return;
	const uint16_t chunk = m.chain[sid].chunk;
	uint32_t &next = m.ring.next[phase * nc + chunk];
	if (sid < next)
		return;
	const uint32_t first = next;
	next = sid + 1;
	const ChunkRole &r = m.chunks[chunk];
	const uint64_t now = u_.host().now();
	if (hop_repair(m))
		return; // the link's numbers show what was lost (link_heard)
	const uint16_t to = phase ? r.fin : r.origin;
	for (uint32_t s = first; s < sid;) {
		while (s < sid && m.final_[s])
			s++;
		uint32_t e = s;
		while (e < sid && !m.final_[e])
			e++;
		if (e == s)
			break;
		if (to == job.cfg.node) {
			// Our own results that did not come home: again now.
			for (uint32_t k = s; k < e; k++)
				again(job, m, m.f_pending, k, now);
		} else {
			Ceth h;
			h.src_node = job.cfg.node;
			h.jid = job.cfg.jid;
			h.mid = m.mid;
			h.sid = s;
			h.seq = e - s;
			h.phase = phase;
			h.flags = kCethNak;
			h.job_key = job.cfg.key;
			u_.send(job, to, kCollAck, h);
			u_.ctr.naks_sent++;
		}
		s = e;
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
// reach it; or (phase 2, per-hop repair) the next node did not get the
// packets numbered [sid, sid + seq) on the link from here (seq 0: sid
// and all after it).
void RingPath::on_nak(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (!(p.h.flags & kCethNak) || p.paylen || p.h.phase > kNakResults) {
		u_.ctr.malformed++;
		return;
	}
	const JobConfig &c = job.cfg;
	if (p.h.phase == kAskAll) {
		// The previous node asks: answer for the running message when
		// this node needs nothing more of it, and for one over here.
		if (p.h.src_node != (c.node + c.nodes() - 1) % c.nodes()) {
			u_.ctr.malformed++;
			return;
		}
		u_.ctr.naks_rcvd++;
		bool over = false;
		for (const MsgRecord &r : job.history)
			over |= r.mid == p.h.mid && r.state == MsgState::done;
		if (job.active && job.active->mid == p.h.mid && needs_nothing(*job.active))
			over = true;
		if (over) {
			Ceth h;
			h.src_node = c.node;
			h.jid = c.jid;
			h.mid = p.h.mid;
			h.phase = kHaveAll;
			h.flags = kCethNak;
			h.job_key = c.key;
			u_.send(job, uint16_t((c.node + c.nodes() - 1) % c.nodes()), kCollAck, h);
		}
		return;
	}
	if (!job.active || p.h.mid != job.active->mid || job.active->sw.waiting ||
	    job.active->path != this) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *job.active;
	const uint32_t sid = p.h.sid, n = p.h.seq;
	if (p.h.phase == kHaveAll) {
		if (p.h.src_node != (c.node + 1) % c.nodes()) {
			u_.ctr.malformed++;
			return;
		}
		u_.ctr.naks_rcvd++;
		m.ring.next_has_all = true;
		return;
	}
	if (p.h.phase == kNakResults) {
		if (!hop_repair(m) || p.h.src_node != (c.node + 1) % c.nodes() || !n ||
		    sid >= m.nblocks || n > m.nblocks - sid) {
			u_.ctr.malformed++;
			return;
		}
		u_.ctr.naks_rcvd++;
		for (uint32_t k = sid; k < sid + n && !m.dma_error; k++)
			relay(job, m, 1, k, now, UINT32_MAX);
		if (m.dma_error)
			u_.fail(qp, job, CollStatus::local_err, true,
				"a local buffer is not accessible");
		return;
	}
	if (p.h.phase == kNakLink) {
		if (!hop_repair(m) || p.h.src_node != (job.cfg.node + 1) % job.cfg.nodes()) {
			u_.ctr.malformed++;
			return;
		}
		u_.ctr.naks_rcvd++;
		// The numbers asked for, of those still in the log (n 0: all
		// from sid on).
		const uint32_t tx = m.ring.link_tx, log = RingMsg::kLinkLog;
		uint32_t from = sid, to = n ? sid + n : tx;
		if (to > tx || to < from) {
			u_.ctr.bad_block++;
			return;
		}
		from = std::max(from, tx > log ? tx - log : 0);
		for (uint32_t k = from; k < to && !m.dma_error; k++) {
			const auto &e = m.ring.link_log[k % log];
			if (e.first == k + 1)
				relay(job, m, uint8_t(e.second >> 31), e.second & 0x7fffffff, now,
				      k);
		}
		if (m.dma_error)
			u_.fail(qp, job, CollStatus::local_err, true,
				"a local buffer is not accessible");
		return;
	}
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

// Per-hop repair.  An allreduce's blocks are held by every node they
// passed: a partial in the Seg unit that kept it until its result passes
// (data()), a result in the node's destination.  So a block lost on one
// hop crosses that hop again, not the ring: every packet of the message
// a node sends to the next is numbered on that link (CETH seg, status
// kStatusLinkSeq); the next node, which gets them in order, NAKs the
// numbers it skipped at once, and when nothing has come for a while
// though the message is not done here, everything after the last it got
// (the tail, which no later packet shows lost), each such NAK waiting
// twice as long as the last.  The sender looks the numbers up and sends
// those blocks again (relay), as new packets of the link; what it no
// longer holds (a partial not kept for want of a unit) the block's origin
// sends again.  The origin's and finisher's own repeats (probes,
// timeouts) stay the last resort.
void RingPath::stamp(Message &m, Ceth &h, uint8_t phase, uint32_t sid)
{
	if (m.ring.link_log.empty())
		return;
	const uint32_t k = m.ring.link_tx++;
	h.status |= kStatusLinkSeq;
	h.seg = uint16_t(k);
	if (repeat_of_ != UINT32_MAX) {
		// A repeat says which number it repeats (CETH queue), so that
		// the next node stops asking for it.
		h.status |= kStatusHopRepair;
		h.hold = kHoldUnknown;
		h.queue = repeat_of_;
	}
	m.ring.link_log[k % RingMsg::kLinkLog] = {k + 1, uint32_t(phase) << 31 | sid};
}

void RingPath::link_heard(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	if (m.ring.link_log.empty() || !(p.h.status & kStatusLinkSeq))
		return;
	// The number whole: the nearest to what is expected next.
	const uint32_t k = m.ring.link_rx +
			   uint32_t(int32_t(int16_t(uint16_t(p.h.seg - uint16_t(m.ring.link_rx)))));
	if (m.ring.adopting) {
		m.ring.adopted.push_back(k);
		return;
	}
	m.ring.link_heard = now;
	m.ring.link_naks = 0;
	if (p.h.status & kStatusHopRepair)
		link_mark(m, p.h.queue);
	if (int32_t(k - m.ring.link_rx) < 0) {
		link_mark(m, k);
		return; // came late
	}
	for (uint32_t j = m.ring.link_rx; j != k; j++)
		m.ring.link_got[j % RingMsg::kLinkLog] = 0;
	if (k != m.ring.link_rx) {
		nak_link(job, m, m.ring.link_rx, k - m.ring.link_rx);
	}
	m.ring.link_rx = k + 1;
	m.ring.link_got[k % RingMsg::kLinkLog] = kLinkCame;
	link_mark(m, UINT32_MAX);
}

// Number k (or its repeat) came (UINT32_MAX: none, only move link_lo);
// what is below link_lo all did.
void RingPath::link_mark(Message &m, uint32_t k)
{
	const uint32_t log = RingMsg::kLinkLog, rx = m.ring.link_rx;
	if (k != UINT32_MAX && int32_t(rx - k) > 0 && rx - k <= log)
		m.ring.link_got[k % log] = kLinkCame;
	if (rx - m.ring.link_lo > log)
		m.ring.link_lo = rx - log;
	while (m.ring.link_lo != rx && m.ring.link_got[m.ring.link_lo % log] == kLinkCame)
		m.ring.link_lo++;
}

void RingPath::nak_link(CollJob &job, Message &m, uint32_t first, uint32_t n)
{
	const JobConfig &c = job.cfg;
	Ceth h;
	h.src_node = c.node;
	h.jid = c.jid;
	h.mid = m.mid;
	h.sid = first;
	h.seq = n;
	h.phase = kNakLink;
	h.flags = kCethNak;
	h.job_key = c.key;
	u_.send(job, prev_node(c), kCollAck, h);
	u_.ctr.naks_sent++;
}

// How long the link from the previous node may be silent while the message
// is not done here before its tail is NAKed: two hops' time (the ring's
// round trip crosses 2N - 1), no less than the probe floor.
uint64_t RingPath::link_wait(const CollJob &job, const Message &m) const
{
	const uint64_t floor = uint64_t(u_.host().params.cfg.coll_probe_us) * util::kNsPerUs;
	const uint64_t rtt = job.probe_rtt();
	const uint64_t w = std::max(floor, rtt ? rtt / job.cfg.nodes() : u_.rto_ns(job));
	return w << std::min<uint32_t>(m.ring.link_naks, 0);
}

// What this node needs of the previous one: every result, and the answers
// to the blocks it started (the next node's completion waits for it).
bool RingPath::needs_nothing(const Message &m) const
{
	return m.finals == m.nblocks && m.o_pending.empty() && m.f_pending.empty() &&
	       m.next_inject == m.inject_end;
}

void RingPath::tell_prev(CollJob &job, Message &m)
{
	const JobConfig &c = job.cfg;
	m.ring.told_prev = true;
	Ceth h;
	h.src_node = c.node;
	h.jid = c.jid;
	h.mid = m.mid;
	h.phase = kHaveAll;
	h.flags = kCethNak;
	h.job_key = c.key;
	u_.send(job, prev_node(c), kCollAck, h);
}

void RingPath::link_tail(CollJob &job, Message &m, uint64_t now)
{
	if (m.ring.link_log.empty())
		return;
	if (needs_nothing(m)) {
		if (!m.ring.told_prev)
			tell_prev(job, m);
		// This node is done but for the next one: ask it now and then
		// (its answer, or the one it sent unasked, may be lost).
		if (!m.ring.next_has_all &&
		    now >= std::max(m.ring.asked_next_at, m.ring.link_heard) + link_wait(job, m)) {
			Ceth h;
			h.src_node = job.cfg.node;
			h.jid = job.cfg.jid;
			h.mid = m.mid;
			h.phase = kAskAll;
			h.flags = kCethNak;
			h.job_key = job.cfg.key;
			u_.send(job, next_node(job.cfg), kCollAck, h);
			m.ring.asked_next_at = now;
		}
		return;
	}
	if (now < std::max(m.ring.link_heard, m.ring.link_nak_at) + link_wait(job, m))
		return;
	// The holes below the highest number (their NAK or repeat lost),
	// a few at a time, then the tail.  A hole NAKed kLinkTries times is
	// given up (what the sender cannot send again, it lost too, or the
	// origin makes again): the end-to-end repeats are left for it.
	uint32_t holes = 0;
	const uint32_t log = RingMsg::kLinkLog;
	for (uint32_t j = m.ring.link_lo; j != m.ring.link_rx && holes < 4;) {
		if (m.ring.link_got[j % log] == kLinkCame) {
			j++;
			continue;
		}
		uint32_t e = j;
		while (e != m.ring.link_rx && m.ring.link_got[e % log] != kLinkCame) {
			uint8_t &t = m.ring.link_got[e % log];
			t = t + 1 >= kLinkTries ? kLinkCame : uint8_t(t ? t + 1 : 2);
			e++;
		}
		nak_link(job, m, j, e - j);
		holes++;
		j = e;
	}
	link_mark(m, UINT32_MAX);
	// Results still missing, by block: what the log no longer names.
	uint32_t asked = 0;
	for (uint32_t s = 0; s < m.nblocks && asked < 4;) {
		if (m.final_[s]) {
			s++;
			continue;
		}
		uint32_t e = s;
		while (e < m.nblocks && !m.final_[e])
			e++;
		Ceth h;
		h.src_node = job.cfg.node;
		h.jid = job.cfg.jid;
		h.mid = m.mid;
		h.sid = s;
		h.seq = e - s;
		h.phase = kNakResults;
		h.flags = kCethNak;
		h.job_key = job.cfg.key;
		u_.send(job, prev_node(job.cfg), kCollAck, h);
		u_.ctr.naks_sent++;
		asked++;
		s = e;
	}
	nak_link(job, m, m.ring.link_rx, 0);
	m.ring.link_nak_at = now;
	m.ring.link_naks++;
}

// Block sid's partial (phase 0) or result (phase 1) again to the next
// node, from what this node holds, on the hop it takes from here.
void RingPath::relay(CollJob &job, Message &m, uint8_t phase, uint32_t sid, uint64_t now,
		     uint32_t repeat_of)
{
	if (sid >= m.nblocks)
		return;
	uint64_t &at = m.ring.relayed_at[phase * size_t(m.nblocks) + sid];
	if (at && now - at < link_wait(job, m) / 2)
		return;
	at = now;
	repeat_of_ = repeat_of;
	relay_one(job, m, phase, sid, now);
	repeat_of_ = UINT32_MAX;
}

void RingPath::relay_one(CollJob &job, Message &m, uint8_t phase, uint32_t sid, uint64_t now)
{
	const JobConfig &c = job.cfg;
	const uint16_t nodes = c.nodes();
	if (sid >= m.nblocks)
		return;
	const ChunkRole &r = m.chunks[m.chain[sid].chunk];
	const uint32_t len = m.chain[sid].elems * m.es;
	if (!phase) {
		if (!r.rs)
			return;
		if (r.origin == c.node) {
			again(job, m, m.o_pending, sid, now);
			return;
		}
		if (m.ring.kept[sid] == UINT32_MAX) {
			// Not kept here: the origin makes it again.
			Ceth h;
			h.src_node = uint16_t((c.node + 1) % nodes); // for the next node
			h.jid = c.jid;
			h.mid = m.mid;
			h.sid = sid;
			h.seq = 1;
			h.phase = 0;
			h.flags = kCethNak;
			h.job_key = c.key;
			u_.send(job, r.origin, kCollAck, h);
			u_.ctr.naks_sent++;
			return;
		}
		const uint32_t hop = uint32_t((c.node + nodes - r.origin) % nodes) + 1;
		Ceth h = u_.header(job, m, sid);
		set_hop(h, hop);
		h.node_map = ring_bits(r.origin, hop, nodes);
		h.rank_map = rank_mask(m.ranks);
		h.hold = kHoldUnknown;
		h.queue = kHoldUnknown;
		h.flags |= kCethRetrans;
		h.status = kStatusHopRepair;
		stamp(m, h, 0, sid);
		u_.send(job, next_node(c), kCollData, h,
			Payload::copied(u_.segs().unit(m.ring.kept[sid]).data, len));
		u_.ctr.retrans_data++;
		u_.host().cc_counters().retrans_bytes += len;
		return;
	}
	if (!m.final_[sid]) {
		return;
	}
	const uint8_t *src;
	if (!u_.result_source(job, m, sid, &src)) {
		m.dma_error = true;
		return;
	}
	const uint32_t hop = uint32_t((c.node + nodes - r.fin) % nodes) + 1;
	Ceth h = u_.header(job, m, sid);
	set_hop(h, hop);
	h.node_map = all_nodes(nodes);
	h.hold = kHoldUnknown;
	h.queue = kHoldUnknown;
	h.flags |= kCethRetrans;
	h.status = kStatusHopRepair;
	stamp(m, h, 1, sid);
	u_.send(job, next_node(c), kCollResult, h, Payload::lent(src, hop == nodes ? 0 : len));
	u_.note_src_lent(m, sid);
	u_.ctr.retrans_result++;
	u_.host().cc_counters().retrans_bytes += len;
}

void RingPath::unkeep(Message &m, uint32_t sid)
{
	if (m.ring.kept.size() != m.nblocks || m.ring.kept[sid] == UINT32_MAX)
		return;
	u_.segs().release(m.ring.kept[sid]);
	m.ring.kept[sid] = UINT32_MAX;
}

void RingPath::end(CollJob &job)
{
	Message &m = *job.active;
	for (uint32_t s = 0; s < m.ring.kept.size(); s++)
		unkeep(m, s);
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
