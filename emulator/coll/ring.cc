// The NIC ring: reduce-scatter then allgather over the member NICs,
// pipelined by data block.
//
// The vector is cut into one chunk per node.  Chunk c's blocks start at
// their origin o and travel the ring as partials (DATA, hop h reaching node
// o+h), each node reducing its local ranks' data in: op(partial, local).
// At hop N-1 the block is complete at fin; fin sends the result (RESULT,
// hop h reaching node fin+h) round the ring, each node writing it into its
// local destinations, until it comes back to fin at hop N.  The result's
// first hop reaches o, so the result is o's acknowledgement; its return to
// fin is fin's.  o keeps at most W blocks without their result and starts
// them again when they are lost; fin sends a result again until it
// returns (ring_loss.cc: gaps, probes, timeouts).
// A node only ever recomputes a partial from its own (unchanged) source,
// so a repeated block is never reduced twice: a DATA block whose result
// this node already holds is dropped, and at fin answered with the result.
// Allgather and broadcast have no reduce-scatter: their chunks start as
// results at their owner.  Reduce-scatter sends a result token (no data).
// Up to IBV_COLL_EMU_COLL_DEPTH messages of a job run round the ring at
// once (posted back to back, on a job without switches: CollJob::flight),
// each with its own hop numbers and timers; a message's blocks go once
// the older ones' have all started, in the job's one window (pump), and
// the next node keeps what comes of a message it has not started yet
// (ring_early.cc).
//
// RingPath (coll/coll_path.h) holds this code and its state; what it
// shares with the switch path (send, arm, fail, the DMA helpers, the
// counters, the Seg pool) it reaches through its CollEngine.
#include "coll/coll_engine.h"
#include "coll/ring_nav.h"

#include "nic/nic.h"
#include "util/clock.h"
#include "util/log.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

namespace {

// The nodes o, o+1, ..., o+h-1 (mod N) as the CETH's node bitmap; a
// ring of more than 64 nodes sends none (0): the hop and the chunk's
// origin say the same.
constexpr uint64_t low_bits(uint32_t k)
{
	return k >= 64 ? ~0ull : (1ull << k) - 1;
}

uint64_t ring_bits(uint16_t o, uint32_t h, uint16_t n)
{
	if (n > kMaxSwitchNodes)
		return 0;
	if (h >= n)
		return low_bits(n);
	// h < n <= 64 and o < n: the run from o up to node n-1, then from 0.
	const uint32_t first = std::min<uint32_t>(h, n - o);
	return low_bits(first) << o | low_bits(h - first);
}


// The endpoints' part of the round trip a result ends (acked()), or not
// known when it is no round trip's: a result sent again by its finisher's
// timer answers a block sent long before.
Holding sample_of(const CollPacket &p, uint64_t now)
{
	return p.h.flags & kCethRetrans ? Holding::unknown() : p.holding(now);
}

uint64_t all_nodes(uint16_t n)
{
	return ring_bits(0, n, n);
}

uint64_t rank_mask(uint16_t k)
{
	return k >= 64 ? ~0ull : (1ull << k) - 1;
}

} // namespace

// Complete block sid here: finish AVG, write the local destinations, and
// send the result on its way round.
// retrans: the partial that completed it was a repeat (kCethRetrans),
// and so is its result, for the gaps the nodes after look for (gaps()).
// data: the result, made in the packet or scratch, or in the destination
// (in_dst, CollCore::result_in_dst), and then sent from there.
void RingPath::finish_block(CollJob &job, Message &m, uint32_t sid, uint8_t *data, uint64_t now,
			    uint32_t hold, uint32_t queue, uint8_t retrans, bool in_dst)
{
	const BlockDesc &b = m.chain[sid];
	if (m.op == RedOp::avg)
		avg_finalize(m.dtype, data, b.elems, job.cfg.total_ranks);
	if (!u_.write_result(job, m, sid, data)) {
		m.dma_error = true;
		return;
	}
	m.final_[sid] = 1;
	m.finals++;
	m.last_progress = now;
	Ceth h = u_.header(job, m, sid);
	set_hop(h, 1);
	h.node_map = all_nodes(job.cfg.nodes());
	h.hold = hold;
	h.queue = queue;
	h.flags |= retrans;
	stamp(job, m, h, 1, sid, now);
	const uint32_t len = m.result_data ? b.elems * m.es : 0;
	u_.send(job, next_node(job.cfg), kCollResult, h,
		in_dst ? Payload::lent(data, len) : Payload::copied(len ? data : nullptr, len));
	u_.arm(job, m, m.f_pending, sid, now, false);
}

void RingPath::start(Qp &qp, CollJob &job, uint64_t now)
{
	start(qp, job, *job.active, now);
}

// m is the active message, or the newest of those in flight beside it
// (CollJob::flight): its blocks go once those of the messages before it
// have all started (pump).
void RingPath::start(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	const JobConfig &c = job.cfg;
	const uint32_t mid = m.mid;
	m.ran |= c.nodes() == 1 ? kRanLocal : kRanRing; // and why, as the caller set
	if (c.nodes() == 1) {
		// One node: the NIC reduces its ranks and writes the result back.
		size_t need = 0;
		for (const BlockDesc &b : m.chain)
			need = std::max<size_t>(need, size_t(b.elems) * m.es);
		if (u_.scratch().size() < need)
			u_.scratch().resize(need);
		uint8_t *buf = u_.scratch().data();
		for (uint32_t sid = 0; sid < m.nblocks; sid++) {
			const BlockDesc &b = m.chain[sid];
			bool ok;
			if (m.chunks[b.chunk].rs) {
				ok = u_.local_partial(job, m, sid, buf);
				if (ok && m.op == RedOp::avg)
					avg_finalize(m.dtype, buf, b.elems, c.total_ranks);
				ok = ok && u_.write_result(job, m, sid, buf);
			} else {
				const uint8_t *src;
				ok = u_.result_source(job, m, sid, &src) &&
				     u_.write_result(job, m, sid, src);
			}
			if (!ok)
				return u_.fail(qp, job, CollStatus::local_err, false,
					       "a local buffer is not accessible");
			m.final_[sid] = 1;
			m.finals++;
		}
		return;
	}
	// Gaps are looked for from each chunk's first block on.
	job.reo_wnd -= job.reo_wnd / 8; // what the path did lately counts most
	if (job.spare_rings.empty()) {
		m.ring = RingMsg{};
	} else {
		m.ring = RingMsg::reusing(job.spare_rings.back());
		job.spare_rings.pop_back();
	}
	m.ring.probe_at = now;
	m.ring.kept_at.assign(m.nblocks, 0);
	// Room for the numbers of the hops (every block twice, and a few
	// sent again), made here at once rather than as they grow: a
	// message's passes then allocate nothing for them.
	const size_t room = 2 * size_t(m.nblocks) + 16;
	m.ring.sent.reserve(room);
	m.ring.got.reserve(room);
	m.ring.gap_at.reserve(room);
	for (const BlockDesc &b : m.chain)
		m.ring.block_bytes = std::max<uint32_t>(m.ring.block_bytes, b.elems * m.es);
	// The copies' slots, as this message's blocks cut them.
	if (m.ring.block_bytes)
		for (size_t k = m.ring.kept.size() / m.ring.block_bytes; k > 0; k--)
			m.ring.kept_free.push_back(uint32_t(k));
	// The blocks this node starts: its chunk's partials (as origin) or its
	// chunk's results (allgather, broadcast).
	for (const ChunkRole &r : m.chunks) {
		if ((r.rs && r.origin == c.node) || (!r.rs && r.fin == c.node)) {
			m.next_inject = r.first_sid;
			m.inject_end = r.first_sid + r.nblocks;
		}
	}
	adopt_early(qp, job, m);
	if (job.running(mid) == &m)
		pump(qp, job, now);
}

void RingPath::inject(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool again,
		      int64_t hop_seq)
{
	const bool hop = hop_seq >= 0;
	const BlockDesc &b = m.chain[sid];
	const ChunkRole &r = m.chunks[b.chunk];
	const uint32_t len = b.elems * m.es;
	if (r.rs) {
		// Straight into the packet (send() sees its own payload), or
		// from the application's buffer when there is nothing to reduce.
		const uint8_t *buf;
		if (!u_.local_data(job, m, sid, u_.tx_payload(), &buf)) {
			m.dma_error = true;
			return;
		}
		Ceth h = u_.header(job, m, sid);
		set_hop(h, 1);
		h.node_map = ring_bits(job.cfg.node, 1, job.cfg.nodes());
		if (again)
			h.flags |= kCethRetrans;
		stamp(job, m, h, 0, sid, now, hop_seq);
		u_.send(job, next_node(job.cfg), kCollData, h, Payload::lent(buf, len));
		u_.note_src_lent(m, sid);
		if (!hop)
			u_.arm(job, m, m.o_pending, sid, now, again);
		if (again || hop) {
			u_.ctr.retrans_data++;
			u_.host().cc_counters().retrans_bytes += len;
		}
		return;
	}
	// A chunk that starts as a result here (allgather, broadcast).
	const uint8_t *src;
	if (!u_.result_source(job, m, sid, &src)) {
		m.dma_error = true;
		return;
	}
	if (!m.final_[sid]) {
		if (!u_.write_result(job, m, sid, src)) {
			m.dma_error = true;
			return;
		}
		m.final_[sid] = 1;
		m.finals++;
		m.last_progress = now;
	}
	Ceth h = u_.header(job, m, sid);
	set_hop(h, 1);
	h.node_map = all_nodes(job.cfg.nodes());
	if (again)
		h.flags |= kCethRetrans;
	stamp(job, m, h, 1, sid, now, hop_seq);
	u_.send(job, next_node(job.cfg), kCollResult, h, Payload::lent(src, len));
	u_.note_src_lent(m, sid);
	if (!hop)
		u_.arm(job, m, m.f_pending, sid, now, again);
	if (again || hop) {
		u_.ctr.retrans_result++;
		u_.host().cc_counters().retrans_bytes += len;
	}
}

// The blocks this node starts (its chunk's), oldest message first, while
// the window has room: the window is the job's, whatever message its
// blocks are of (the next node keeps what comes of a message it has not
// started: CollCore::window).  A message's blocks go once the messages
// before it have started all of theirs.
void RingPath::pump(Qp &qp, CollJob &job, uint64_t now)
{
	const uint32_t w = u_.window(job);
	if (!w)
		return u_.fail(qp, job, CollStatus::buffer_err, true,
			       "the job's Seg range cannot hold a block from every other node");
	if (!job.cc.ready())
		cc_init(job, w);
	size_t before = 0; // the older messages' own blocks in flight
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (m.path != this)
			continue;
		while (m.next_inject < m.inject_end && !m.dma_error) {
			const ChunkRole &r = m.chunks[m.chain[m.next_inject].chunk];
			const size_t inflight = before +
						(r.rs ? m.o_pending.size() : m.f_pending.size());
			if (inflight >= w || !job.cc.may_send(uint32_t(inflight), now))
				break;
			inject(job, m, m.next_inject++, now, false);
			job.cc.on_send(now);
		}
		if (m.dma_error)
			return u_.fail(qp, job, CollStatus::local_err, true,
				       "a local buffer is not accessible");
		if (m.next_inject < m.inject_end)
			return;
		if (m.inject_end)
			before += m.chunks[m.chain[m.inject_end - 1].chunk].rs ? m.o_pending.size()
									       : m.f_pending.size();
	}
}

// The message of mid that runs here round the ring (null: none; one that
// waits for a switch's answer, or runs another way, is not).
Message *RingPath::running(const CollJob &job, uint32_t mid) const
{
	Message *m = job.running(mid);
	return m && m->path == this && !m->sw.waiting ? m : nullptr;
}

// The result of block sid (this node its finisher) again: to the next
// node (with number hop_seq, or as a repeat round the ring), or straight
// to node `to`, which NAKed it, with the hop it has there and no number
// (it comes from no neighbour); its way home is the ring's from there.
void RingPath::resend_result(CollJob &job, Message &m, uint32_t sid, uint64_t now, int64_t hop_seq,
			     int32_t to)
{
	const JobConfig &c = job.cfg;
	const uint16_t n = c.nodes();
	const BlockDesc &b = m.chain[sid];
	const bool straight = to >= 0 && uint16_t(to) != next_node(c);
	const uint32_t len = m.result_data ? b.elems * m.es : 0;
	const uint8_t *src = nullptr;
	if (len && !u_.result_source(job, m, sid, &src)) {
		m.dma_error = true;
		return;
	}
	Ceth h = u_.header(job, m, sid);
	set_hop(h, straight ? (uint16_t(to) + n - c.node) % n : 1);
	h.node_map = all_nodes(n);
	h.flags |= kCethRetrans;
	if (!straight)
		stamp(job, m, h, 1, sid, now, hop_seq);
	u_.send(job, straight ? uint16_t(to) : next_node(c), kCollResult, h,
		Payload::lent(src, len));
	if (!m.chunks[b.chunk].rs) // allgather, broadcast: from the source (inject())
		u_.note_src_lent(m, sid);
	if (hop_seq < 0)
		u_.arm(job, m, m.f_pending, sid, now, true);
	u_.ctr.retrans_result++;
	u_.host().cc_counters().retrans_bytes += len;
}

// What this node passed on of block sid, sent again to the next node with
// its number q (ring_hop.cc): a partial from the copy kept, a result
// from where this node wrote it.
RingPath::Again RingPath::forward_partial_again(CollJob &job, Message &m, uint32_t sid,
						uint64_t now, uint32_t q)
{
	const JobConfig &c = job.cfg;
	const uint16_t n = c.nodes();
	const BlockDesc &b = m.chain[sid];
	const ChunkRole &r = m.chunks[b.chunk];
	const uint32_t slot = sid < m.ring.kept_at.size() ? m.ring.kept_at[sid] : 0;
	if (!slot)
		return Again::relay;
	const uint32_t hop = (c.node + n - r.origin) % n + 1, len = b.elems * m.es;
	Ceth h = u_.header(job, m, sid);
	set_hop(h, hop);
	h.node_map = ring_bits(r.origin, hop, n);
	stamp(job, m, h, 0, sid, now, q);
	u_.send(job, next_node(c), kCollData, h,
		Payload::copied(m.ring.kept.data() + size_t(slot - 1) * m.ring.block_bytes, len));
	u_.ctr.retrans_data++;
	u_.host().cc_counters().retrans_bytes += len;
	return Again::sent;
}

RingPath::Again RingPath::forward_result_again(CollJob &job, Message &m, uint32_t sid, uint64_t now,
					       uint32_t q)
{
	const JobConfig &c = job.cfg;
	const uint16_t n = c.nodes();
	const BlockDesc &b = m.chain[sid];
	const ChunkRole &r = m.chunks[b.chunk];
	const uint32_t hop = (c.node + n - r.fin) % n + 1;
	const uint8_t *src = nullptr;
	if (hop < n && !u_.written_result(m, sid, &src))
		return Again::relay; // the way home is a token: no data needed
	const uint32_t len = src && hop < n ? b.elems * m.es : 0;
	Ceth h = u_.header(job, m, sid);
	set_hop(h, hop);
	h.node_map = all_nodes(n);
	stamp(job, m, h, 1, sid, now, q);
	u_.send(job, next_node(c), kCollResult, h, Payload::copied(src, len));
	u_.ctr.retrans_result++;
	u_.host().cc_counters().retrans_bytes += len;
	return Again::sent;
}

// A partial of the running message: reduce this node's data in and pass
// it on, or finish the block.
void RingPath::data(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	const JobConfig &c = job.cfg;
	const uint16_t n = c.nodes();
	const uint32_t sid = p.h.sid;
	if (sid >= m.nblocks) {
		u_.ctr.bad_block++;
		return;
	}
	const BlockDesc &b = m.chain[sid];
	const ChunkRole &r = m.chunks[b.chunk];
	const uint32_t hop = hop_of(p.h);
	const uint32_t len = b.elems * m.es;
	// Where a partial may come from and what it may hold are fixed by the
	// ring: anything else is forged or damaged, and never reduced.
	if (!r.rs || hop < 1 || hop >= n || (r.origin + hop) % n != c.node ||
	    p.h.src_node != prev_node(c) || p.h.node_map != ring_bits(r.origin, hop, n) ||
	    p.paylen != len || p.h.coll != uint8_t(m.coll) || p.h.op != uint8_t(m.op) ||
	    p.h.dtype != uint8_t(m.dtype)) {
		u_.ctr.malformed++;
		return;
	}
	const bool went = m.final_[sid] || (sid < m.ring.kept_at.size() && m.ring.kept_at[sid]);
	if (went && (p.h.flags & kCethHop)) {
		// The node before sent again what came here and went on (its
		// number is answered: rx()).
		u_.ctr.dup_dropped++;
		return;
	}
	if (m.final_[sid]) {
		if (r.fin == c.node)
			resend_result(job, m, sid, now); // the origin asks again
		else
			u_.ctr.dup_dropped++;
		return;
	}
	// Data cache & compute: the block's Seg unit gets the partial, then
	// this node's ranks (already reduced among themselves, in rank order).
	// Both arrive in one pass: unit = op(partial, ranks).
	uint32_t seg = u_.seg_of(job, sid);
	const uint8_t *local;
	if (!u_.local_data(job, m, sid, u_.scratch().data() + u_.segs().unit_bytes(), &local)) {
		m.dma_error = true;
		return;
	}
	bool own = u_.segs().acquire(seg, c.jid, m.mid, sid, m.op, m.dtype, len, kUpstream,
				     rank_mask(m.ranks));
	// The unit's result goes on at once, so it is made where it goes: a
	// partial passed on in the slot that keeps it for a repeat, a result
	// in the destination (each sent from there), else in the packet that
	// carries it on.
	const bool last = hop == uint32_t(n - 1);
	uint8_t *kept = last ? nullptr : keep_slot(m, sid, len);
	uint8_t *in_dst = last ? u_.result_in_dst(m, sid) : nullptr;
	uint8_t *made = kept ? kept : in_dst;
	uint8_t *acc;
	if (own) {
		acc = made ? made : u_.tx_payload();
		u_.segs().contribute_node_and_ranks(seg, kUpstream, p.payload, rank_mask(m.ranks),
						    local, len, acc);
	} else {
		// Held by an early block of a later message: work beside it.
		u_.ctr.seg_busy++;
		acc = made ? made : u_.scratch().data();
		reduce_fn(m.op, m.dtype)(acc, p.payload, local, b.elems);
	}
	u_.ctr.reductions++;
	m.ring.heard = now;
	if (last) {
		finish_block(job, m, sid, acc, now, p.hold_on(now), p.queue_on(now),
			     p.h.flags & kCethRetrans, in_dst != nullptr);
	} else {
		Ceth h = u_.header(job, m, sid);
		set_hop(h, hop + 1);
		h.node_map = ring_bits(r.origin, hop + 1, n);
		h.hold = p.hold_on(now);
		h.queue = p.queue_on(now);
		h.flags |= p.h.flags & kCethRetrans; // a repeat all the way
		stamp(job, m, h, 0, sid, now);
		u_.send(job, next_node(c), kCollData, h,
			kept ? Payload::lent(acc, len) : Payload::copied(acc, len));
		if (kept)
			kept_lent(m, sid);
	}
	if (own)
		u_.segs().release(seg); // both bitmaps are empty: the block has moved on
}

// A result of the running message: write it here and pass it on.
void RingPath::result(CollJob &job, Message &m, const CollPacket &p, uint64_t now)
{
	const JobConfig &c = job.cfg;
	const uint16_t n = c.nodes();
	const uint32_t sid = p.h.sid;
	if (sid >= m.nblocks) {
		u_.ctr.bad_block++;
		return;
	}
	const BlockDesc &b = m.chain[sid];
	const ChunkRole &r = m.chunks[b.chunk];
	const uint32_t hop = hop_of(p.h);
	const uint32_t len = m.result_data ? b.elems * m.es : 0;
	// The last hop, home to fin, is a token: fin has the data.  From the
	// previous node, or straight from fin, unnumbered, to a node that
	// NAKed it (RingPath::resend_result).
	const bool straight = p.h.src_node == r.fin && (p.h.flags & kCethRetrans) &&
			      !(p.h.flags & kCethHop) && !p.h.rank_map;
	if (hop < 1 || hop > n || (r.fin + hop) % n != c.node ||
	    (p.h.src_node != prev_node(c) && !straight) || p.h.node_map != all_nodes(n) ||
	    p.paylen != (hop == n ? 0 : len) || p.h.coll != uint8_t(m.coll)) {
		u_.ctr.malformed++;
		return;
	}
	unkeep(m, sid); // no partial of it is asked for again
	if (m.final_[sid] && hop < n && (p.h.flags & kCethHop)) {
		u_.ctr.dup_dropped++; // went on already (its number is answered: rx())
		return;
	}
	if (hop == n) {
		// Back where it started: everyone has it.
		if (m.f_pending.find(sid)) {
			acked(job, m.f_pending, sid, now, sample_of(p, now));
			m.last_progress = now;
		}
		return;
	}
	if (!m.final_[sid]) {
		if (len && !u_.write_result(job, m, sid, p.payload)) {
			m.dma_error = true;
			return;
		}
		m.final_[sid] = 1;
		m.finals++;
		m.last_progress = now;
	} else {
		u_.ctr.dup_dropped++;
	}
	if (r.rs && r.origin == c.node)
		acked(job, m.o_pending, sid, now, sample_of(p, now));
	Ceth h = p.h;
	h.src_node = c.node;
	h.flags &= ~kCethHop;
	set_hop(h, hop + 1);
	h.hold = p.hold_on(now);
	h.queue = p.queue_on(now);
	stamp(job, m, h, 1, sid, now);
	u_.send(job, next_node(c), kCollResult, h,
		Payload::lent(p.payload, hop + 1 == n ? 0 : len, p.crc));
}

// A DATA or RESULT of a message that runs here round the ring (the
// active one, unless it waits for the switch, or one beside it): reduced
// or written, and its number taken in.  False: none here runs it.
bool RingPath::deliver(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	Message *m = running(job, p.h.mid);
	if (!m)
		return false;
	if (p.kind == kCollData)
		data(job, *m, p, now);
	else
		result(job, *m, p, now);
	if (!m->dma_error)
		rx(job, *m, p, now);
	if (m->dma_error)
		u_.fail(qp, job, CollStatus::local_err, true, "a local buffer is not accessible");
	return true;
}

// A ring packet of a message that runs here through a switch (not waiting
// for its answer): members do not run a message two ways (AUTO's
// disagreement fails the job before: SwitchPath::on_member_ring), so it
// is forged, and dropped.
bool RingPath::switch_runs(const CollJob &job, const CollPacket &p) const
{
	const Message *m = job.running(p.h.mid);
	if (!m || m->path == this || m->sw.waiting)
		return false;
	u_.ctr.malformed++;
	return true;
}

void RingPath::on_data(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	IBVC_TRACE("coll", "{}: data mid {} sid {} hop {} from {} active {}", u_.host().params.name,
		   p.h.mid, p.h.sid, p.h.phase, p.h.src_node,
		   job.active ? int(job.active->mid) : -1);
	if (deliver(qp, job, p, now) || switch_runs(job, p))
		return;
	if (job.active && p.h.mid == job.active->mid) {
		early(job, p); // it waits for the switch, which another node gave up on
		return;
	}
	if (job.ahead(p.h.mid)) {
		early(job, p);
		return;
	}
	// A message that is over here: its result has passed this node, so
	// the origin holds it too.
	u_.ctr.stale_dropped++;
	if (p.h.rank_map)
		send_over(job, p.h.mid, p.h.src_node); // numbered: its sender waits
}

void RingPath::on_result(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	IBVC_TRACE("coll", "{}: result mid {} sid {} hop {} from {} active {}",
		   u_.host().params.name, p.h.mid, p.h.sid, p.h.phase, p.h.src_node,
		   job.active ? int(job.active->mid) : -1);
	if (deliver(qp, job, p, now) || switch_runs(job, p))
		return;
	if (job.ahead(p.h.mid) || (job.active && p.h.mid == job.active->mid)) {
		early(job, p);
		return;
	}
	// Over here, perhaps not downstream: pass it on until it is home;
	// but one sent again for this node alone is answered.
	const uint16_t n = job.cfg.nodes();
	const uint32_t hop = hop_of(p.h);
	if (p.h.rank_map)
		send_over(job, p.h.mid, p.h.src_node); // numbered: its sender waits
	if (p.h.flags & kCethHop) {
		u_.ctr.stale_dropped++;
	} else if (hop >= 1 && hop < n &&
		   (p.h.src_node == prev_node(job.cfg) ||
		    ((p.h.src_node + hop) % n == job.cfg.node && (p.h.flags & kCethRetrans)))) {
		// From the previous node, or straight from the block's
		// finisher (RingPath::resend_result) to a node that has finished
		// since it asked.
		Ceth h = p.h;
		h.src_node = job.cfg.node;
		h.flags &= ~kCethHop;
		h.rank_map = 0; // no number: not this node's running message
		set_hop(h, hop + 1);
		h.hold = p.hold_on(now);
		h.queue = p.queue_on(now);
		u_.send(job, next_node(job.cfg), kCollResult, h,
			Payload::lent(p.payload, hop + 1 == n ? 0 : p.paylen, p.crc));
	} else {
		u_.ctr.stale_dropped++;
	}
}

// The ring's congestion window: at most the fixed window, starting from
// a quarter of it; a round trip crosses each of the ring's N links once.
void RingPath::cc_init(CollJob &job, uint32_t w)
{
	job.cc.init(&u_.host().params.cfg.cc, &u_.host().cc_counters(), std::max(1u, w / 4), w,
		    job.cfg.nodes());
	job.cnp_at.assign(job.cfg.nodes(), 0);
}

bool RingPath::done(const CollJob &job) const
{
	const Message &m = *job.active;
	// ... and the next node has what this node sent it (ring_hop.cc):
	// nothing sent from here needs this message's state any more.
	return m.finals == m.nblocks && m.o_pending.empty() && m.f_pending.empty() &&
	       m.next_inject == m.inject_end && m.ring.acked >= m.ring.sent.size();
}

// The ring as a strategy (coll/coll_path.h).
void RingPath::on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (p.kind == kCollAck && (p.h.flags & kCethHop) && !(p.h.flags & kCethNak))
		on_ack(job, p, now);
	else if (p.kind == kCollAck)
		on_nak(qp, job, p, now);
	else if (p.kind == kCollData)
		on_data(qp, job, p, now);
	else
		on_result(qp, job, p, now);
}

// Every result is here and every block this node started or finished
// has come round: all the previous node sends in the message (results,
// the blocks' end-to-end acknowledgements) is here, and is ACKed now (it
// waits for that ACK to end the message); numbers still to come wait for
// the usual ACK (every kAckEvery, a short delay after the last).  Once a
// pass (on_timer, after the packets the pass took in), not once a
// packet.  ACKed at once from the last result on, each acknowledgement
// that followed it drew an ACK of its own: as many hop ACKs again as all
// the others (1 MiB, 4 nodes: 17-31 a message beside 26; round a ring of
// 4 on 10 Gbit/s links, 70 % of the ACKs).
void RingPath::ack_all(CollJob &job)
{
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (m.path == this && m.ring.unacked && m.finals == m.nblocks &&
		    m.o_pending.empty() && m.f_pending.empty())
			send_ack(job, m);
	}
}

// Each message that runs round the ring, oldest first.  One in flight
// beside an older one waits for it (its blocks go once the older one's
// have, pump): while the older one progresses, so does it.  One that
// fails ends them all (CollEngine::fail).
void RingPath::on_timer(Qp &qp, CollJob &job, uint64_t now)
{
	uint64_t older = 0;
	for (size_t i = 0; qp.state == QpState::rts && i < job.runs(); i++) {
		Message &m = job.run(i);
		if (m.path != this)
			continue;
		m.last_progress = std::max(m.last_progress, older);
		older = m.last_progress;
		timers(qp, job, m, now);
	}
	if (job.active && qp.state == QpState::rts)
		pump(qp, job, now);
	ack_all(job);
}

uint64_t RingPath::next_deadline(const CollJob &job) const
{
	uint64_t d = UINT64_MAX;
	for (size_t i = 0; i < job.runs(); i++) {
		const Message &m = job.run(i);
		if (m.path != this)
			continue;
		// A paced window: the next block may leave then.
		uint64_t pace = 0;
		if (m.next_inject < m.inject_end) {
			const bool rs = m.chunks[m.chain[m.next_inject].chunk].rs;
			if ((rs ? m.o_pending.size() : m.f_pending.size()) < job.cc.window())
				pace = job.cc.next_send_time();
		}
		d = std::min({d, m.last_progress + u_.coll_timeout_ns(job), m.o_pending.next(),
			      m.f_pending.next(), pace ? pace : UINT64_MAX, probe_due(job, m),
			      hop_deadline(job, m)});
	}
	return d;
}

} // namespace ibv_coll::emu
