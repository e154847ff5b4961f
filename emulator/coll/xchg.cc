// A small message among the member NICs by pairwise exchange (recursive
// doubling): the latency of about log2(N) packets in a row where the
// ring's is 2(N-1).  For N = 2^K nodes, in phase k = 1..K node v exchanges
// its partial with node v ^ 2^(k-1) and both combine the two, the lower
// node's first, so that the pair holds the same bits after the phase;
// after phase K every node holds the reduction of all.  For other N, with
// p the largest power of two below N and r = N - p, the first 2r nodes
// pair up: each even one (an extra) hands its partial to the odd one after
// it in phase 0 and takes the result from it in phase K+1; the odd ones
// and the nodes from 2r on are the p nodes of the exchange, in this order.
//
// Every partial is one XCHG packet (kCollXchg, the phase in the CETH),
// which its receiver acknowledges (XCHG with kCethXchgAck, no payload)
// whenever it has it: kept for the running message or the next, or
// already taken.  A sender sends a partial again until it is
// acknowledged, and a node completes the message only when it has its
// result and every partial it sent was acknowledged: as with an RC send,
// a member that completes leaves no peer waiting for it, so a process may
// leave right after its last collective.  Members are at most one message
// apart (a message needs every node's partial), so partials of the next
// message are kept until it starts here.  The job's timeout bounds it all
// (the watchdog).
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "reduce/reduce.h"
#include "util/log.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

namespace {

constexpr uint32_t kNone = UINT32_MAX;

// The exchange's shape for N nodes (see above): p nodes in K phases, r
// pairs before them.
struct Shape {
	uint32_t p, r, k;
	explicit Shape(uint32_t n) : p(std::bit_floor(n)), r(n - p), k(std::countr_zero(p)) {}
	uint32_t phases() const { return k + 2; }
	uint32_t post() const { return k + 1; }
	bool extra(uint32_t node) const { return node < 2 * r && node % 2 == 0; }
	uint32_t vrank(uint32_t node) const { return node < 2 * r ? node / 2 : node - r; }
	uint32_t real(uint32_t v) const { return v < r ? 2 * v + 1 : v + r; }
	// node's peer in phase ph (kNone: it has none).
	uint32_t peer(uint32_t node, uint32_t ph) const
	{
		if (ph == 0 || ph == post())
			return node < 2 * r ? node ^ 1 : kNone;
		if (ph > post() || extra(node))
			return kNone;
		return real(vrank(node) ^ (1u << (ph - 1)));
	}
	// The partial of phase ph goes from node to its peer: in phase 0 from
	// the extra, in the last from its partner, both ways in between.
	bool sends(uint32_t node, uint32_t ph) const
	{
		if (peer(node, ph) == kNone)
			return false;
		return ph == 0 ? extra(node) : ph == post() ? !extra(node) : true;
	}
};

uint32_t msg_bytes(const Message &m)
{
	return m.coll == CollOp::barrier ? 0 : uint32_t(m.count * m.es);
}

// The reduction of this node's partial and its peer's of phase ph, the
// lower node's first, as its peer makes it.
void combine(const Message &m, const Shape &s, uint32_t node, uint32_t ph, const uint8_t *theirs,
	     uint8_t *acc, CollCounters &ctr)
{
	const uint32_t peer = s.peer(node, ph);
	const bool mine_first = ph == 0 ? node < peer : s.vrank(node) < s.vrank(peer);
	reduce_fn(m.op, m.dtype)(acc, mine_first ? acc : theirs, mine_first ? theirs : acc,
				 m.count);
	ctr.reductions++;
}

} // namespace

void XchgPath::start(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	XchgMsg &x = m.xchg;
	XchgJob &xj = job.xchg;
	const Shape s(job.cfg.nodes());
	const uint32_t len = msg_bytes(m);
	m.ran |= kRanRing; // among the member NICs, as the ring
	x.at = 0;
	x.result = x.done = false;
	x.again_at = x.again_gap = 0;
	x.acc.resize(len);
	if (len && !u_.local_partial(job, m, 0, x.acc.data()))
		return u_.fail(qp, job, CollStatus::local_err, false,
			       "a local buffer is not accessible");
	if (xj.early.on && xj.early.mid == m.mid && xj.early.len == len) {
		std::swap(xj.in, xj.early); // what came before the message started here
	} else {
		if (xj.early.on && xj.early.mid == m.mid)
			IBVC_WARN("coll",
				  "{}: job {} message {}: a member sent {} bytes, {} posted here",
				  u_.host().params.name, job.cfg.jid, m.mid, xj.early.len, len);
		xj.in.reset(m.mid, len, s.phases());
	}
	xj.early.on = false;
	xj.sent.reset(m.mid, len, s.phases());
	advance(qp, job, now);
}

// This node's partial of phase ph to its peer, kept until acknowledged.
void XchgPath::send_phase(CollJob &job, Message &m, uint32_t ph, bool again)
{
	XchgSlots &sent = job.xchg.sent;
	if (!again) {
		if (sent.has(ph))
			return;
		if (sent.len)
			memcpy(sent.at(ph), m.xchg.acc.data(), sent.len);
		sent.have |= 1u << ph;
	}
	const Shape s(job.cfg.nodes());
	Ceth h = u_.header(job, m, 0);
	h.phase = uint8_t(ph);
	if (again)
		h.flags |= kCethRetrans;
	u_.send(job, uint16_t(s.peer(job.cfg.node, ph)), kCollXchg, h,
		Payload::copied(sent.at(ph), sent.len));
	if (again)
		u_.ctr.retrans_data++;
	else
		u_.ctr.tx_data++;
}

void XchgPath::advance(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	XchgMsg &x = m.xchg;
	XchgSlots &in = job.xchg.in;
	const Shape s(job.cfg.nodes());
	const uint32_t node = job.cfg.node, len = msg_bytes(m);
	const uint8_t at = x.at;
	const bool had = x.result;
	while (!x.result) {
		const uint32_t ph = x.at;
		if (ph < s.post()) {
			if (s.peer(node, ph) == kNone) { // none in phase 0
				x.at++;
				continue;
			}
			if (s.sends(node, ph))
				send_phase(job, m, ph);
			if (s.extra(node)) { // phase 0 sent: wait for the result
				x.at = uint8_t(s.post());
				continue;
			}
			if (!in.has(ph))
				break;
			if (len)
				combine(m, s, node, ph, in.at(ph), x.acc.data(), u_.ctr);
			x.at++;
			continue;
		}
		if (s.extra(node)) {
			if (!in.has(ph))
				break;
			if (len)
				memcpy(x.acc.data(), in.at(ph), len);
		} else {
			if (len && m.op == RedOp::avg)
				avg_finalize(m.dtype, x.acc.data(), m.count, job.cfg.total_ranks);
			if (s.sends(node, ph))
				send_phase(job, m, ph);
		}
		if (len && m.coll != CollOp::barrier && !u_.write_result(job, m, 0, x.acc.data())) {
			m.dma_error = true;
			return u_.fail(qp, job, CollStatus::local_err, false,
				       "a local buffer is not accessible");
		}
		x.result = true;
		m.final_[0] = 1;
		m.finals = 1;
	}
	if (x.at != at || x.result != had)
		m.last_progress = now;
	arm(job, m, now);
}

// The message is done once every partial sent is acknowledged; until then
// what is not goes again, less often each time: after the probe time (or
// twice the round trip), then twice as long each time, up to the
// retransmission timeout.
void XchgPath::arm(CollJob &job, Message &m, uint64_t now)
{
	XchgMsg &x = m.xchg;
	const XchgSlots &sent = job.xchg.sent;
	if (x.result && sent.acked == sent.have) {
		x.done = true;
		job.xchg.sent.on = false;
		job.xchg.in.on = false;
		return;
	}
	if (sent.acked == sent.have) {
		x.again_at = 0; // nothing to send again: waiting for a peer
		return;
	}
	if (!x.again_at) {
		const uint64_t probe = uint64_t(u_.host().params.cfg.coll_probe_us) * 1000;
		x.again_gap = probe ? std::max(probe, 2 * job.srtt) : u_.rto_ns(job);
		x.again_at = now + x.again_gap;
	}
}

void XchgPath::again(CollJob &job, Message &m, uint64_t now)
{
	const XchgSlots &sent = job.xchg.sent;
	for (uint32_t ph = 0; ph < 32; ph++)
		if ((sent.have & ~sent.acked) >> ph & 1)
			send_phase(job, m, ph, true);
	XchgMsg &x = m.xchg;
	x.again_gap = std::min(2 * x.again_gap, std::max(u_.rto_ns(job), x.again_gap));
	x.again_at = now + x.again_gap;
}

// A peer's partial: for the running message, or kept for the next.  True:
// this node has it (now or before), which the peer is told.
bool XchgPath::keep(CollJob &job, const CollPacket &p)
{
	const Shape s(job.cfg.nodes());
	const uint32_t ph = p.h.phase;
	XchgSlots *to = nullptr;
	const Message *m = job.active.get();
	if (m && m->mid == p.h.mid) {
		if (m->path != this || p.paylen != job.xchg.in.len) {
			u_.ctr.bad_block++; // the members do not agree on the message
			return false;
		}
		if (m->xchg.result) { // taken already
			u_.ctr.dup_dropped++;
			return true;
		}
		to = &job.xchg.in;
	} else if (job.ahead(p.h.mid)) {
		to = &job.xchg.early;
		if (!to->on || to->mid != p.h.mid) {
			to->reset(p.h.mid, p.paylen, s.phases());
		} else if (p.paylen != to->len) {
			u_.ctr.bad_block++;
			return false;
		}
	} else {
		u_.ctr.stale_dropped++; // a message done here: its acknowledgement was lost
		return true;
	}
	if (to->has(ph)) {
		u_.ctr.dup_dropped++;
		return true;
	}
	if (p.paylen)
		memcpy(to->at(ph), p.payload, p.paylen);
	to->have |= 1u << ph;
	if (to == &job.xchg.early)
		u_.ctr.early_stored++;
	return true;
}

void XchgPath::acknowledge(const CollJob &job, const CollPacket &p)
{
	Ceth h;
	h.coll = p.h.coll;
	h.op = p.h.op;
	h.dtype = p.h.dtype;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = p.h.mid;
	h.phase = p.h.phase;
	h.flags = kCethXchgAck;
	h.seg = p.h.seg;
	h.job_key = job.cfg.key;
	u_.send(job, p.h.src_node, kCollXchg, h);
}

void XchgPath::on_ack(CollJob &job, const CollPacket &p, uint64_t now)
{
	XchgSlots &sent = job.xchg.sent;
	Message *m = job.active.get();
	if (!m || m->path != this || !sent.on || sent.mid != p.h.mid || !sent.has(p.h.phase) ||
	    (sent.acked >> p.h.phase & 1)) {
		u_.ctr.dup_dropped++; // acknowledged already, or the last message's
		return;
	}
	sent.acked |= 1u << p.h.phase;
	m->last_progress = now;
	if (sent.acked == sent.have)
		m->xchg.again_at = 0;
	arm(job, *m, now);
}

void XchgPath::on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	const Shape s(job.cfg.nodes());
	const uint32_t node = job.cfg.node, src = p.h.src_node, ph = p.h.phase;
	const bool ack = p.h.flags & kCethXchgAck;
	// Only a node's peer in the phase sends to it, each way as the phase
	// goes, and acknowledges what this node sent.
	if (ph >= s.phases() || s.peer(node, ph) != src ||
	    (ack ? !s.sends(node, ph) : !s.sends(src, ph)) || (ack && p.paylen)) {
		u_.ctr.bad_node++;
		return;
	}
	if (ack)
		return on_ack(job, p, now);
	u_.ctr.rx_data++;
	if (!keep(job, p))
		return;
	acknowledge(job, p);
	// The result an extra takes from its partner says its partial came.
	XchgSlots &sent = job.xchg.sent;
	if (ph == s.post() && sent.on && sent.mid == p.h.mid)
		sent.acked |= sent.have & 1;
	if (job.active && job.active->path == this && job.active->mid == p.h.mid &&
	    !job.active->xchg.result && qp.state == QpState::rts)
		advance(qp, job, now);
}

void XchgPath::on_timer(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	if (m.xchg.done)
		return;
	advance(qp, job, now);
	if (job.active && !m.xchg.done && m.xchg.again_at && now >= m.xchg.again_at)
		again(job, m, now);
}

bool XchgPath::done(const CollJob &job) const
{
	return job.active->xchg.done;
}

uint64_t XchgPath::next_deadline(const CollJob &job) const
{
	const XchgMsg &x = job.active->xchg;
	return x.done || !x.again_at ? UINT64_MAX : x.again_at;
}

} // namespace ibv_coll::emu
