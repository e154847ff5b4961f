// The ring's hops made reliable one by one (ring.cc has the protocol,
// ring_loss.cc the end-to-end recovery that stays the last resort).
//
// Every DATA and RESULT a node sends its successor for the running
// message carries a number, from 0 per message (CETH rank_map, plus 1).
// The successor NAKs the numbers a later one showed missing (at once, or
// after the reordering window once the path has been seen to reorder),
// and ACKs what it has (every kAckEvery numbers, a short delay after the
// last, and at once for a packet sent again).  The sender sends a NAKed
// number again with what it carried: a partial from the copy it keeps
// until the block's result passes (the origin computes it again), a
// result from its destination (the finisher from where it always does);
// one it has no more use for (a partial whose result has passed here) it
// declares void, and one it cannot send (a reduce's or barrier's result,
// not kept off its finisher) it also NAKs to the block's finisher.  When
// the numbers sent are not all ACKed a hop's timeout after the last went,
// the last still wanted goes again (a tail probe), and its ACK or the
// NAKs it draws follow.  A loss so costs one hop's round trip, not the
// block's whole way round the ring again, where 5 % loss on each link of
// a 16-node ring failed most of a block's 30 links' crossings.
#include "coll/coll_engine.h"
#include "coll/ring_nav.h"

#include "util/clock.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

namespace {

// Numbers taken in between ACKs.
constexpr uint32_t kAckEvery = 16;

// f(s, t) for each run [s, t) of [s, e) where missing() holds.
template <class Missing, class F> void for_runs(uint32_t s, uint32_t e, Missing missing, F f)
{
	while (s < e) {
		while (s < e && !missing(s))
			s++;
		uint32_t t = s;
		while (t < e && missing(t))
			t++;
		if (t == s)
			break;
		f(s, t);
		s = t;
	}
}

Ceth hop_header(const CollJob &job, const Message &m)
{
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = m.mid;
	h.job_key = job.cfg.key;
	return h;
}

} // namespace

// The numbers one message may use: every block twice (partial and
// result) and as many repeats from the block's start again; a number
// beyond is forged, and not kept.
static uint64_t max_numbers(const Message &m)
{
	return 8 * uint64_t(m.nblocks) + 1024;
}

void RingPath::stamp(CollJob &job, Message &m, Ceth &h, uint8_t phase, uint32_t sid, uint64_t now,
		     int64_t again_seq)
{
	RingMsg &g = m.ring;
	uint32_t q;
	if (again_seq >= 0 && uint64_t(again_seq) < g.sent.size()) {
		q = uint32_t(again_seq);
		g.sent[q].again = true;
		h.flags |= kCethRetrans | kCethHop;
	} else {
		q = uint32_t(g.sent.size());
		g.sent.push_back(RingMsg::Sent{sid, phase, false, now});
	}
	h.rank_map = uint64_t(q) + 1;
	h.seg = g.nak_echo;
	g.tail_at = now + tail_wait(job, g.tail_tries);
}

// Where the partial of block sid that this node passes on is made and
// kept (null: nowhere, a block larger than the slots), free of packets
// still to be sent from it.
uint8_t *RingPath::keep_slot(Message &m, uint32_t sid, uint32_t len)
{
	RingMsg &g = m.ring;
	if (sid >= g.kept_at.size() || len > g.block_bytes)
		return nullptr;
	uint32_t slot = g.kept_at[sid];
	if (!slot) {
		if (g.kept_free.empty()) {
			// Made as needed: as many as the blocks on their way
			// round at once.  The slots move: none may be lent.
			u_.reclaim_lent(u_.lent_mark());
			const size_t had = g.kept.size() / g.block_bytes;
			const size_t more = std::max<size_t>(had, 8);
			g.kept.resize((had + more) * g.block_bytes);
			for (size_t k = had + more; k > had; k--)
				g.kept_free.push_back(uint32_t(k));
		}
		slot = g.kept_free.back();
		g.kept_free.pop_back();
		g.kept_at[sid] = slot;
	}
	if (slot > g.kept_mark.size())
		g.kept_mark.resize(g.kept.size() / g.block_bytes, 0);
	u_.reclaim_lent(g.kept_mark[slot - 1]);
	return g.kept.data() + size_t(slot - 1) * g.block_bytes;
}

// The partial in block sid's slot was just sent from there.
void RingPath::kept_lent(Message &m, uint32_t sid)
{
	RingMsg &g = m.ring;
	g.kept_mark[g.kept_at[sid] - 1] = u_.lent_mark();
}

void RingPath::unkeep(Message &m, uint32_t sid)
{
	RingMsg &g = m.ring;
	if (sid < g.kept_at.size() && g.kept_at[sid]) {
		g.kept_free.push_back(g.kept_at[sid]);
		g.kept_at[sid] = 0;
	}
}

// A packet of the running message from the previous node, taken in
// (its number, if it has one).
void RingPath::rx(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	if (!p.h.rank_map || p.h.rank_map > max_numbers(m))
		return;
	take(job, m, uint32_t(p.h.rank_map - 1), p.h.flags, now);
	// The sender had heard these NAKs when it sent this, after what they
	// asked for: what is still missing of them was lost again (or, on a
	// path that reorders, may still come within the reordering window).
	RingMsg &g = m.ring;
	while (!g.naked.empty() && int16_t(uint16_t(p.h.seg - g.naked.front().nak)) >= 0 &&
	       int16_t(uint16_t(g.naks - p.h.seg)) >= 0) {
		const RingMsg::Hole h = g.naked.front();
		g.naked.pop_front();
		if (job.reo_wnd)
			g.holes.push_back(RingMsg::Hole{h.s, h.e, now});
		else
			nak(job, m, h.s, h.e, now);
	}
}

void RingPath::take(CollJob &job, Message &m, uint32_t q, uint8_t flags, uint64_t now)
{
	RingMsg &g = m.ring;
	if (g.prev_over)
		return;
	if (q >= g.got.size()) {
		// Within the room made at the start (RingPath::start), all of
		// it at once.
		const size_t n = q < g.got.capacity() ? g.got.capacity()
						      : std::max<size_t>(q + 1, 2 * g.got.size());
		g.got.resize(n);
		g.gap_at.resize(n);
	}
	if (g.got[q]) {
		// Again: the sender has heard nothing of it (what is still
		// missing is NAKed again on its own timer).
		if (flags & kCethHop)
			send_ack(job, m);
		return;
	}
	g.got[q] = 1;
	if (q < g.high) {
		// A gap filled: late, not lost, when it is no repeat (the
		// path reorders, and by how much); a repeat ends a repair's
		// round trip from its NAK.
		if (g.gap_at[q] && !(flags & kCethRetrans)) {
			job.reo_wnd = std::max(job.reo_wnd, now - g.gap_at[q]);
			if (job.srtt)
				job.reo_wnd = std::min(job.reo_wnd, job.srtt);
		} else if (g.gap_at[q] && now > g.gap_at[q]) {
			const uint64_t rtt = now - g.gap_at[q];
			job.repair_rtt = job.repair_rtt
						 ? job.repair_rtt - job.repair_rtt / 8 + rtt / 8
						 : rtt;
		}
		g.gap_at[q] = 0;
	} else {
		if (q > g.high) {
			for (uint32_t k = g.high; k < q; k++)
				g.gap_at[k] = now;
			if (job.reo_wnd)
				g.holes.push_back(RingMsg::Hole{g.high, q, now});
			else
				nak(job, m, g.high, q, now);
		}
		g.high = q + 1;
	}
	while (g.cum < g.high && g.got[g.cum])
		g.cum++;
	if (++g.unacked >= kAckEvery || (flags & kCethHop))
		send_ack(job, m);
	else if (g.ack_due == UINT64_MAX)
		g.ack_due = now + ack_delay(job);
}

// An ACK waits this long for more numbers to cover: half a hop's round
// trip, well inside the sender's hop timeout.
uint64_t RingPath::ack_delay(const CollJob &job) const
{
	if (job.hop_rtt)
		return std::max<uint64_t>(job.hop_rtt / 2, util::kNsPerUs);
	return std::max<uint64_t>(hop_rto(job) / 4, util::kNsPerUs);
}

// NAK the numbers of [s, e) still missing here.
void RingPath::nak(CollJob &job, Message &m, uint32_t s, uint32_t e, uint64_t now)
{
	RingMsg &g = m.ring;
	e = std::min<uint32_t>(e, uint32_t(g.got.size()));
	for_runs(
		s, e, [&](uint32_t k) { return !g.got[k]; },
		[&](uint32_t a, uint32_t b) {
			for (uint32_t k = a; k < b; k++)
				g.gap_at[k] = now; // the repair's round trip starts
			Ceth h = hop_header(job, m);
			h.sid = a;
			h.seq = b - a;
			h.flags = kCethNak | kCethHop;
			h.seg = ++g.naks;
			u_.send(job, prev_node(job.cfg), kCollAck, h);
			u_.ctr.naks_sent++;
			g.naked.push_back(RingMsg::Hole{a, b, now, g.naks});
		});
}

void RingPath::send_ack(CollJob &job, Message &m)
{
	RingMsg &g = m.ring;
	Ceth h = hop_header(job, m);
	h.sid = g.cum;
	h.flags = kCethHop;
	u_.send(job, prev_node(job.cfg), kCollAck, h);
	g.unacked = 0;
	g.ack_due = UINT64_MAX;
}

// Numbers [s, e) this node sent carry nothing the next node needs: the
// next node counts them as come (ACK flagged HOP, phase 1).
void RingPath::send_void(CollJob &job, const Message &m, uint32_t s, uint32_t e)
{
	Ceth h = hop_header(job, m);
	h.sid = s;
	h.seq = e - s;
	h.phase = 1;
	h.flags = kCethHop;
	u_.send(job, next_node(job.cfg), kCollAck, h);
}

RingPath::Again RingPath::pass_again(CollJob &job, Message &m, uint32_t q, uint64_t now)
{
	const RingMsg::Sent s = m.ring.sent[q];
	const JobConfig &c = job.cfg;
	const uint32_t sid = s.sid;
	const ChunkRole &r = m.chunks[m.chain[sid].chunk];
	if (s.phase == 0 && m.final_[sid])
		return Again::moot; // its result is on its way there
	if (s.phase == 0 && r.rs && r.origin == c.node) {
		inject(job, m, sid, now, false, q);
		return Again::sent;
	}
	if (s.phase == 1 && r.fin == c.node) {
		if (r.rs)
			resend_result(job, m, sid, now, q);
		else
			inject(job, m, sid, now, false, q);
		return Again::sent;
	}
	return s.phase ? forward_result_again(job, m, sid, now, q)
		       : forward_partial_again(job, m, sid, now, q);
}

void RingPath::send_over(const CollJob &job, uint32_t mid, uint16_t to)
{
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = mid;
	h.job_key = job.cfg.key;
	h.phase = 2;
	h.flags = kCethHop;
	if (to < job.cfg.nodes())
		u_.send(job, to, kCollAck, h);
}

// The message is over at the previous node, with numbers missing here:
// what they carried that is still wanted, results, is asked of their
// finishers (every partial's result exists: the previous node has them
// all), which send them here straight (on_nak), not round the nodes where
// the message is over: those pass a result on unnumbered, and a lap of
// them at 20 % loss on each link came through once in four.  While some
// are still missing the NAKs go again, backed off as a tail probe: this
// node has nothing of its own out, so no timer of its own would ask.
void RingPath::prev_over(CollJob &job, Message &m, uint64_t now)
{
	RingMsg &g = m.ring;
	g.prev_over = true;
	g.holes.clear();
	g.naked.clear();
	g.over_tries = 0;
	// The previous node has every result, so every node from each
	// result's finisher to it does: this node's own results went round
	// (their tokens home, perhaps lost on the way, answer nothing more).
	uint32_t sid;
	while (m.f_pending.lowest(&sid)) {
		acked(job, m.f_pending, sid, now, Holding::unknown());
		m.last_progress = now;
	}
	nak_finishers(job, m, now);
}

// When this node next asks for the results still missing here (or its
// own results' tokens home): with its blocks all sent and its numbers
// ACKed, a hop's timeout after the last of the message came, then again
// twice as long after each time it asked.  A result lost on the previous
// node's last hop after that node finished the message (a tail
// loss: no later number shows the gap, and a node whose message is over
// probes nothing) was found before only by its finisher's probe, round
// the nodes where the message is over, which pass it on unnumbered: at
// 20 % loss on an 8-node ring, 6 of 400 runs timed out at 2 s.
uint64_t RingPath::over_due(const CollJob &job, const Message &m) const
{
	const RingMsg &g = m.ring;
	if (g.over_at != UINT64_MAX || g.prev_over)
		return g.over_at;
	if ((m.finals >= m.nblocks && m.f_pending.empty()) || m.next_inject < m.inject_end ||
	    g.acked < g.sent.size())
		return UINT64_MAX;
	return std::max(m.last_progress, g.heard) + tail_wait(job, 0);
}

// Asked of the previous node: a hop NAK of no numbers, which it ignores
// while it runs the message (what it sent and is not ACKed its own tail
// probe sends again; a NAK of a number on its way in a queue would be
// sent twice and cut its window) and answers, if the message is over
// there, with the ACK that says so (prev_over: the finishers are asked
// then).  Not of the finishers before that: a result sent straight here
// passes on home from here, and the nodes between its finisher and the
// previous node may lack it too while the previous node runs.
void RingPath::ask_prev(CollJob &job, Message &m, uint64_t now)
{
	RingMsg &g = m.ring;
	Ceth h = hop_header(job, m);
	h.sid = g.high;
	h.seq = 0;
	h.flags = kCethNak | kCethHop;
	h.seg = g.naks;
	u_.send(job, prev_node(job.cfg), kCollAck, h);
	u_.ctr.probes++;
	g.over_at = now + tail_wait(job, g.over_tries);
}

void RingPath::nak_finishers(CollJob &job, Message &m, uint64_t now)
{
	RingMsg &g = m.ring;
	bool any = false;
	for (const ChunkRole &r : m.chunks) {
		if (r.fin == job.cfg.node)
			continue;
		const auto missing = [&](uint32_t k) { return !m.final_[k]; };
		for_runs(r.first_sid, r.first_sid + r.nblocks, missing,
			 [&](uint32_t a, uint32_t b) {
				 Ceth h = hop_header(job, m);
				 h.sid = a;
				 h.seq = b - a;
				 h.phase = 1;
				 h.flags = kCethNak;
				 u_.send(job, r.fin, kCollAck, h);
				 u_.ctr.naks_sent++;
				 any = true;
			 });
	}
	g.over_at = any ? now + tail_wait(job, g.over_tries) : UINT64_MAX;
}

// The ACK of the next node: it has every number below sid (phase 0); the
// previous node's numbers [sid, sid + seq) are void (phase 1); the message
// is over at the neighbour that sent it (phase 2).
void RingPath::on_ack(CollJob &job, const CollPacket &p, uint64_t now)
{
	if (p.paylen || p.h.phase > 2 || (p.h.phase != 1 && p.h.seq)) {
		u_.ctr.malformed++;
		return;
	}
	Message *mp = running(job, p.h.mid);
	if (!mp) {
		u_.ctr.stale_dropped++;
		// Void numbers of a message over here: its sender waits for
		// them to be ACKed.
		if (p.h.phase == 1 && !job.running(p.h.mid) && !job.ahead(p.h.mid))
			send_over(job, p.h.mid, p.h.src_node);
		return;
	}
	Message &m = *mp;
	RingMsg &g = m.ring;
	const JobConfig &c = job.cfg;
	if (p.h.phase == 2) {
		if (p.h.src_node == next_node(c)) {
			g.acked = uint32_t(g.sent.size());
			g.tail_at = UINT64_MAX;
		}
		if (p.h.src_node == prev_node(c) && !g.prev_over)
			prev_over(job, m, now);
		return;
	}
	if (p.h.phase == 1) {
		if (p.h.src_node != prev_node(c) || !p.h.seq ||
		    uint64_t(p.h.sid) + p.h.seq > max_numbers(m)) {
			u_.ctr.malformed++;
			return;
		}
		for (uint32_t k = p.h.sid; k < p.h.sid + p.h.seq; k++)
			take(job, m, k, 0, now);
		return;
	}
	if (p.h.src_node != next_node(c) || p.h.sid > g.sent.size()) {
		u_.ctr.malformed++;
		return;
	}
	if (p.h.sid > g.acked) {
		const RingMsg::Sent &s = g.sent[p.h.sid - 1];
		if (!s.again && now > s.at) {
			const uint64_t rtt = now - s.at;
			job.hop_rtt = job.hop_rtt ? job.hop_rtt - job.hop_rtt / 8 + rtt / 8 : rtt;
		}
		g.acked = p.h.sid;
		g.tail_tries = 0;
	}
	if (g.acked == g.sent.size())
		g.tail_at = UINT64_MAX;
}

// The next node NAKs numbers [sid, sid + seq) this node sent it.  On a
// path that keeps its order the numbers were lost, and when the delay
// shows a queue (CongestionCtl::on_loss) it was the queue into the next
// node that overflowed: the window halves, as on a timeout.  Cut by an
// eighth only, the repeats went into the same full queue and most were
// lost again (4 hosts, 400 Mbit/s: 123 of 176 repairs lost a repeat,
// 3.6 ms a repair), and the ring ran 3 % below where halving takes it.
// Where the path reorders a NAK may be a packet still on its way.
void RingPath::on_hop_nak(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	RingMsg &g = m.ring;
	if (int16_t(uint16_t(p.h.seg - g.nak_echo)) > 0)
		g.nak_echo = p.h.seg;
	if (p.h.src_node == next_node(job.cfg) && !p.h.seq)
		return; // the next node asks whether the message is over here (ask_prev)
	if (p.h.src_node != next_node(job.cfg) || !p.h.seq ||
	    uint64_t(p.h.sid) + p.h.seq > g.sent.size()) {
		u_.ctr.malformed++;
		return;
	}
	u_.ctr.naks_rcvd++;
	again_numbers(job, m, p.h.sid, p.h.sid + p.h.seq, now);
	job.cc.on_loss(now, !job.reo_wnd);
}

// Numbers [s, e) go again, or are declared void (and NAKed on to the
// block's finisher where this node cannot send them).
void RingPath::again_numbers(CollJob &job, Message &m, uint32_t s, uint32_t e, uint64_t now)
{
	uint32_t vs = 0, ve = 0; // a run of void numbers
	for (uint32_t q = s; q < e && !m.dma_error; q++) {
		const Again a = pass_again(job, m, q, now);
		if (a == Again::sent) {
			u_.host().cc_counters().fast_retrans++;
			continue;
		}
		if (a == Again::relay) {
			const RingMsg::Sent &s = m.ring.sent[q];
			const ChunkRole &r = m.chunks[m.chain[s.sid].chunk];
			Ceth h = hop_header(job, m);
			h.sid = s.sid;
			h.seq = 1;
			h.phase = s.phase;
			h.flags = kCethNak;
			u_.send(job, s.phase ? r.fin : r.origin, kCollAck, h);
			u_.ctr.naks_sent++;
		}
		if (ve == q) {
			ve++;
			continue;
		}
		if (ve > vs)
			send_void(job, m, vs, ve);
		vs = q;
		ve = q + 1;
	}
	if (ve > vs)
		send_void(job, m, vs, ve);
}

// A hop's timeout: three of its round trips, no less than the probes'
// floor; before any, twice the ring's round trip (or the timeout).
uint64_t RingPath::hop_rto(const CollJob &job) const
{
	const uint64_t floor = u_.probe_ns();
	if (job.hop_rtt)
		return std::max(floor, 3 * job.hop_rtt);
	if (job.probe_rtt())
		return std::max(floor, 2 * job.probe_rtt());
	return u_.rto_ns(job);
}

// The wait before the next tail probe after `tries` without an ACK: a
// hop's timeout, twice as long after each, but no more than an eighth of
// the job's timeout (which counts from the message's last progress), so
// that several probes go before the job gives up.  Backed off without that
// bound (and a hop's timeout, three of its round trips, once 100 ms with
// descheduled hosts against a job's 200), two probes lost, or their
// answers, left the third due after the timeout: a member with every
// result in, waiting for the next node to acknowledge what it sent (the
// next node had finished the message and answers only when asked),
// failed the collective, and the others with it.
uint64_t RingPath::tail_wait(const CollJob &job, uint32_t tries) const
{
	return std::min(hop_rto(job) << std::min<uint32_t>(tries, 10), u_.backoff_most(job));
}

// How long a NAKed number may take to come: twice a repair's usual round
// trip (it waits behind what the sender had queued), or before any, a
// hop's timeout.
uint64_t RingPath::renak_time(const CollJob &job) const
{
	if (job.repair_rtt)
		return std::max(2 * job.repair_rtt, hop_rto(job));
	return hop_rto(job);
}

// The hop's timers: gaps past the reordering window are NAKed; the ACK
// due goes; with numbers sent and not ACKed a hop's timeout after the
// last went, the last of them still wanted goes again (twice as long a
// wait after each).
void RingPath::hop_timers(CollJob &job, Message &m, uint64_t now)
{
	RingMsg &g = m.ring;
	while (!g.holes.empty() && now - g.holes.front().at >= job.reo_wnd) {
		const RingMsg::Hole h = g.holes.front();
		g.holes.pop_front();
		nak(job, m, h.s, h.e, now);
	}
	// A NAK or its answer lost: still missing well after a repair
	// usually comes.
	const uint64_t rto = renak_time(job);
	while (!g.naked.empty() && now - g.naked.front().at >= rto) {
		const RingMsg::Hole h = g.naked.front();
		g.naked.pop_front();
		nak(job, m, h.s, h.e, now);
	}
	if (now >= g.ack_due)
		send_ack(job, m);
	if (now >= over_due(job, m)) {
		if (g.over_at != UINT64_MAX)
			g.over_tries = std::min<uint32_t>(g.over_tries + 1, 16);
		if (g.prev_over)
			nak_finishers(job, m, now);
		else
			ask_prev(job, m, now);
	}
	if (now < g.tail_at || g.acked >= g.sent.size())
		return;
	g.tail_tries = std::min<uint32_t>(g.tail_tries + 1, 16);
	u_.ctr.probes++;
	uint32_t q = uint32_t(g.sent.size());
	while (q > g.acked) {
		q--;
		const RingMsg::Sent &s = g.sent[q];
		if (s.phase == 0 && m.final_[s.sid])
			continue;
		again_numbers(job, m, q, q + 1, now);
		break;
	}
	if (q == g.acked && g.sent[q].phase == 0 && m.final_[g.sent[q].sid])
		again_numbers(job, m, g.acked, uint32_t(g.sent.size()), now); // all void
	const bool only_acks = m.finals >= m.nblocks && m.f_pending.empty() && m.o_pending.empty();
	g.tail_at = now + (only_acks ? ack_wait(job, m, now) : tail_wait(job, g.tail_tries));
}

// With the message done here but for the successor's ACK, what the wait
// costs is the application's: a probe and its answer are two small
// packets, so they go a hop's timeout apart, or an eighth of the wait
// since the message's last progress (CollCore::answered_wait, as the
// switch path's probes once answered).  Backed off to four hop timeouts,
// a probe and its answer both arriving 64 % of the time at 20 % loss, a
// few runs had too few tries left in a 200 ms timeout.
uint64_t RingPath::ack_wait(const CollJob &job, const Message &m, uint64_t now) const
{
	return u_.answered_wait(job, hop_rto(job), now - std::min(now, m.last_progress));
}

uint64_t RingPath::hop_deadline(const CollJob &job, const Message &m) const
{
	const RingMsg &g = m.ring;
	const uint64_t hole = g.holes.empty() ? UINT64_MAX : g.holes.front().at + job.reo_wnd;
	const uint64_t tail = g.acked < g.sent.size() ? g.tail_at : UINT64_MAX;
	const uint64_t renak = g.naked.empty() ? UINT64_MAX : g.naked.front().at + renak_time(job);
	return std::min({hole, tail, g.ack_due, renak, over_due(job, m)});
}

} // namespace ibv_coll::emu
