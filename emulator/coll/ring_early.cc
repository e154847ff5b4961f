// A ring block of a message this node has not started yet: kept in a Seg
// unit (the job's range) until the message starts here, then taken in as
// if it came then (coll/ring.cc).  Members run up to
// IBV_COLL_EMU_COLL_DEPTH messages ahead of each other.
#include "coll/coll_engine.h"
#include "coll/ring_nav.h"

#include "nic/nic.h"
#include "util/log.h"

#include <algorithm>

namespace ibv_coll::emu {

using namespace wire;

// A block of a message this node has not started: keep it in its Seg unit
// until the message starts here.  A result is passed on at once (it needs
// nothing from this node), but only if it could be kept.
void RingPath::early(CollJob &job, const CollPacket &p)
{
	const JobConfig &c = job.cfg;
	const uint32_t hop = hop_of(p.h);
	if (p.paylen > u_.segs().unit_bytes() || hop < 1 || hop >= c.nodes() ||
	    p.h.src_node != prev_node(c)) {
		u_.ctr.early_dropped++;
		IBVC_DEBUG("coll", "{}: early mid {} sid {} kind {:#x} hop {} dropped",
			   u_.host().params.name, p.h.mid, p.h.sid, p.kind, p.h.phase);
		return;
	}
	auto forward = [&] {
		if (p.kind != kCollResult)
			return;
		Ceth h = p.h;
		h.src_node = c.node;
		h.flags &= ~kCethHop;
		h.rank_map = 0; // no number: not this node's running message
		set_hop(h, hop + 1);
		h.hold = p.hold_on(u_.host().now());
		h.queue = p.queue_on(u_.host().now());
		u_.send(job, next_node(c), kCollResult, h,
			Payload::lent(p.payload, hop + 1 == c.nodes() ? 0 : p.paylen, p.crc));
	};
	// Held already (a repeat): a result is still passed on, in case the
	// first copy was lost downstream.
	const EarlyKey key{p.h.mid, p.h.sid, p.kind};
	if (job.early.count(key)) {
		u_.ctr.dup_dropped++;
		forward();
		return;
	}
	// The block's own unit, or the next free one of the job's range (the
	// message finds its blocks again through job.early when it starts).
	uint32_t seg = c.seg_base + p.h.sid % c.seg_count, tries = 0;
	while (!u_.segs().acquire(seg, c.jid, p.h.mid, p.h.sid, RedOp(p.h.op & 7), Dtype::uint8,
				  p.paylen, kUpstream, 0)) {
		if (++tries == c.seg_count) {
			u_.ctr.early_dropped++;
			IBVC_DEBUG("coll", "{}: no unit for early mid {} sid {} (in use {})",
				   u_.host().params.name, p.h.mid, p.h.sid, u_.segs().in_use());
			return;
		}
		seg = c.seg_base + (seg - c.seg_base + 1) % c.seg_count;
	}
	SegUnit &u = u_.segs().unit(seg);
	u_.segs().contribute(seg, kUpstream, 0, p.payload, p.paylen);
	u.kind = p.kind;
	u.hop = hop;
	u.src_node = p.h.src_node;
	u.node_map = p.h.node_map;
	// Kept: its wait from here on is for this node's application, not a
	// queue (CETH queue).
	u.hold = p.h.hold;
	u.queue = p.queue_on(u_.host().now());
	u.rx_ns = p.rx_ns;
	u.seq = p.h.rank_map <= UINT32_MAX ? uint32_t(p.h.rank_map) : 0; // its number, plus 1
	u.rank_pending = 1; // waits for this node's message to start
	job.early.emplace(key, seg);
	u_.ctr.early_stored++;
	forward();
}

// The message has started: take in what arrived before it.
void RingPath::adopt_early(Qp &qp, CollJob &job, Message &m)
{
	const JobConfig &c = job.cfg;
	const uint32_t mid = m.mid;
	uint64_t now = u_.host().now();
	std::vector<uint32_t> mine;
	for (auto it = job.early.begin(); it != job.early.end();) {
		if (it->first.mid == m.mid) {
			mine.push_back(it->second);
			it = job.early.erase(it);
		} else {
			++it;
		}
	}
	// In the order they were sent (their numbers: a gap is a loss, see
	// ring_hop.cc), then by block.
	std::sort(mine.begin(), mine.end(), [&](uint32_t a, uint32_t b) {
		const SegUnit &x = u_.segs().unit(a), &y = u_.segs().unit(b);
		return x.seq != y.seq ? x.seq < y.seq : x.sid < y.sid;
	});
	for (uint32_t i : mine) {
		if (job.running(mid) != &m) // it failed
			return;
		SegUnit &u = u_.segs().unit(i);
		CollPacket p;
		p.kind = u.kind;
		p.h = u_.header(job, m, u.sid);
		p.h.src_node = u.src_node;
		set_hop(p.h, u.hop);
		p.h.node_map = u.node_map;
		p.h.hold = u.hold; // its wait here, from rx_ns, is added as it goes on
		p.h.rank_map = u.seq;
		p.h.queue = u.queue;
		p.payload = u.data;
		p.paylen = u.len;
		p.src = c.members[u.src_node].ep;
		p.crc = nullptr;
		p.rx_ns = u.rx_ns;
		p.q_ns = now;
		// Free before use: what follows may take this very unit for the
		// block, but then only to make its result in the packet (the
		// unit's own memory is not written while we read it).
		u_.segs().release(i);
		if (p.kind == kCollData) {
			data(job, m, p, now);
		} else if (u.sid < m.nblocks && !m.final_[u.sid]) {
			// Already passed on when it arrived: only write it here.
			unkeep(m, u.sid);
			const uint32_t len = m.result_data ? m.chain[u.sid].elems * m.es : 0;
			if (p.paylen == len &&
			    (!len || u_.write_result(job, m, u.sid, p.payload))) {
				m.final_[u.sid] = 1;
				m.finals++;
				m.last_progress = now;
			} else {
				u_.ctr.malformed++;
			}
		}
		if (m.dma_error)
			return u_.fail(qp, job, CollStatus::local_err, true,
				       "a local buffer is not accessible");
		// Its number taken in as if it came now (a block that was not
		// kept, for want of a unit, leaves a gap).
		if (job.running(mid) == &m)
			rx(job, m, p, now);
	}
}

} // namespace ibv_coll::emu
