// A small message among the member NICs in about log2(N) packets in a row,
// where the ring's allreduce takes 2(N-1) and its broadcast N-1.
//
// ALLREDUCE and BARRIER: pairwise exchange (recursive doubling).  For N = 2^K nodes, in phase k = 1..K node v exchanges
// its partial with node v ^ 2^(k-1) and both combine the two, the lower
// node's first, so that the pair holds the same bits after the phase;
// after phase K every node holds the reduction of all.  For other N, with
// p the largest power of two below N and r = N - p, the first 2r nodes
// pair up: each even one (an extra) hands its partial to the odd one after
// it in phase 0 and takes the result from it in phase K+1; the odd ones
// and the nodes from 2r on are the p nodes of the exchange, in this order.
//
// BCAST: a binomial tree from the root.  With v = (node - root) mod N, in
// phase k = 1..ceil(log2 N) each v < 2^(k-1) that has the data sends it to
// v + 2^(k-1); a node sends to all its children as soon as the data is
// here (the root at once).  The root's node index travels in the CETH's
// seq, so that a node can check a partial of a message it has not started.
//
// A partial goes as XCHG packets (kCollXchg, the phase in the CETH) of
// at most 4 KiB, its pieces (the piece in sid, the partial's bytes in
// node_map), which its receiver acknowledges whenever it has them: kept
// for a message that runs here or a later one, or already taken.  Each
// piece goes through the phases at its own pace: a node sends piece i of
// its next partial as soon as it folded its peer's piece i of this one,
// as the ring sends a block on as soon as it is reduced.  A sender sends a
// partial again until it is acknowledged; a node completes the message
// when it has its result, and what it sent that is not acknowledged yet
// stays with the job and goes again, after the message completed if need
// be (xchg_ack.cc, which also says how an acknowledgement mostly rides on
// the next message's partials).  A QP's job leaves once its peers have
// what it sent them (or after a bound; Nic::settle_coll), so that, as
// with an RC send, a process may leave right after its last collective.
//
// A job runs up to IBV_COLL_EMU_COLL_DEPTH such messages at once (each
// with its own MID and state, Message::xchg; execution control starts
// them, CollJob::flight), so small collectives posted back to back are
// pipelined as a low-latency tree's outstanding transactions are.  A
// message needs every node's partial, so a member finishes at most the
// messages this node has started and runs at most the depth ahead of it:
// partials of later messages are kept (XchgJob::early) until they start
// here.  The job's timeout bounds it all (the watchdog).
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "reduce/reduce.h"
#include "util/clock.h"
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

// The broadcast's binomial tree of N nodes from root (see above).
struct Tree {
	uint32_t n, root, k;
	Tree(uint32_t nodes, uint32_t r) : n(nodes), root(r), k(std::bit_width(nodes - 1)) {}
	uint32_t phases() const { return k + 1; } // phase 0 is not used
	uint32_t v(uint32_t node) const { return (node + n - root) % n; }
	uint32_t node_of(uint32_t x) const { return (x + root) % n; }
	uint32_t recv_phase(uint32_t node) const
	{
		const uint32_t x = v(node);
		return x ? std::bit_width(x) : kNone;
	}
	uint32_t parent(uint32_t node) const
	{
		const uint32_t x = v(node);
		return x ? node_of(x - (1u << (std::bit_width(x) - 1))) : kNone;
	}
	uint32_t child(uint32_t node, uint32_t ph) const
	{
		const uint32_t x = v(node);
		if (ph < 1 || ph > k || x >= (1u << (ph - 1)) || x + (1u << (ph - 1)) >= n)
			return kNone;
		return node_of(x + (1u << (ph - 1)));
	}
};

uint32_t msg_bytes(const Message &m)
{
	return m.coll == CollOp::barrier ? 0 : uint32_t(m.count * m.es);
}

bool is_bcast(uint8_t coll)
{
	return coll == uint8_t(CollOp::bcast);
}

// What a message is, for the partials kept of it: its collective and a
// broadcast's root.
uint32_t tag_of(uint8_t coll, uint32_t root)
{
	return uint32_t(coll) << 16 | (is_bcast(coll) ? root : 0);
}

uint32_t phases_of(const CollJob &job, const Message &m)
{
	return m.coll == CollOp::bcast ? Tree(job.cfg.nodes(), m.root_node).phases()
				       : Shape(job.cfg.nodes()).phases();
}

// Where this node's partial of phase ph goes.
uint32_t dest(const CollJob &job, const Message &m, uint32_t ph)
{
	if (m.coll == CollOp::bcast)
		return Tree(job.cfg.nodes(), m.root_node).child(job.cfg.node, ph);
	return Shape(job.cfg.nodes()).peer(job.cfg.node, ph);
}

// The reduction of a piece of this node's partial and its peer's of phase
// ph (count elements), the lower node's first, as its peer makes it.
void combine(const Message &m, const Shape &s, uint32_t node, uint32_t ph, const uint8_t *theirs,
	     uint8_t *acc, uint64_t count, CollCounters &ctr)
{
	const uint32_t peer = s.peer(node, ph);
	const bool mine_first = ph == 0 ? node < peer : s.vrank(node) < s.vrank(peer);
	reduce_fn(m.op, m.dtype)(acc, mine_first ? acc : theirs, mine_first ? theirs : acc, count);
	ctr.reductions++;
}

} // namespace

void XchgPath::start(Qp &qp, CollJob &job, uint64_t now)
{
	start(qp, job, *job.active, now);
}

void XchgPath::start(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	XchgMsg &x = m.xchg;
	XchgJob &xj = job.xchg;
	const uint32_t len = msg_bytes(m), phases = phases_of(job, m);
	const uint32_t tag = tag_of(uint8_t(m.coll), m.root_node);
	m.ran |= kRanRing; // among the member NICs, as the ring
	x.at.fill(0);
	x.result = x.done = false;
	x.crossed = 0;
	if (!xj.accs.empty()) { // a buffer of a message done here
		x.acc.swap(xj.accs.back());
		xj.accs.pop_back();
	}
	x.acc.resize(len);
	bool ok = true;
	if (m.coll != CollOp::bcast) {
		ok = !len || u_.local_partial(job, m, 0, x.acc.data());
	} else if (m.root_node == job.cfg.node) {
		const uint8_t *src = nullptr;
		ok = u_.result_source(job, m, 0, &src);
		if (ok && len)
			memcpy(x.acc.data(), src, len);
	}
	if (!ok)
		return u_.fail(qp, job, CollStatus::local_err, false,
			       "a local buffer is not accessible");
	XchgSlots *e = xj.early_of(m.mid);
	if (e && e->len == len && e->tag == tag) {
		std::swap(x.in, *e); // what came before the message started here
		e->on = false;
	} else {
		if (e)
			IBVC_WARN("coll",
				  "{}: job {} message {}: a member sent {} bytes of another "
				  "collective or size, {} posted here",
				  u_.host().params.name, job.cfg.jid, m.mid, e->len, len);
		for (XchgSlots &o : xj.early)
			if (!o.on && !o.data.empty() && x.in.data.empty())
				std::swap(x.in, o); // its buffer
		x.in.reset(m.mid, len, phases, tag, xj.piece);
	}
	// The slots keep later messages' partials, not this one's or older
	// (m is the newest that runs here).
	for (XchgSlots &o : xj.early)
		if (o.on && !job.ahead(o.mid))
			o.on = false;
	open_out(job, m, len, phases, tag);
	advance(qp, job, m, now);
}

// What this node sends of m: its header and each phase's peer, into an
// XchgOut not in use (its buffer reused).
void XchgPath::open_out(CollJob &job, Message &m, uint32_t len, uint32_t phases, uint32_t tag)
{
	XchgOut &o = m.xchg.out;
	for (XchgOut &e : job.xchg.outs)
		if (!e.sent.on && !e.sent.data.empty() && o.sent.data.empty())
			std::swap(o, e);
	// A packet of the message that used the buffer may wait in the port
	// (sent again in this pass, before its acknowledgement came).
	if (o.lent)
		u_.reclaim_lent(o.lent);
	o.lent = 0;
	o.sent.reset(m.mid, len, phases, tag, job.xchg.piece);
	o.h = u_.header(job, m, 0);
	o.h.seq = m.coll == CollOp::bcast ? m.root_node : 0;
	for (uint32_t ph = 0; ph < phases && ph < 32; ph++) {
		const uint32_t d = dest(job, m, ph);
		o.to[ph] = d == kNone ? 0 : uint16_t(d);
	}
	o.again_at = o.again_gap = o.parked = o.heard = 0;
	o.probing = 0;
	o.acked_pieces.fill(0);
	o.in_order.fill(0);
}

// Piece i of this node's partial of phase ph (as acc holds it now) to
// its peer, kept until acknowledged.  A phase's round trips are timed
// from its first piece.
void XchgPath::send_piece(CollJob &job, Message &m, uint32_t ph, uint32_t i)
{
	XchgOut &o = m.xchg.out;
	XchgSlots &sent = o.sent;
	if (sent.pieces(ph) >> i & 1)
		return;
	const size_t off = sent.off(i);
	if (const uint32_t n = sent.piece_len(i))
		memcpy(sent.at(ph) + off, m.xchg.acc.data() + off, n);
	if (!(sent.begun >> ph & 1)) {
		o.first_at[ph] = o.last_at[ph] = u_.host().now();
		o.tries[ph] = 0;
		o.acked_pieces[ph] = 0;
		o.in_order[ph] = 0;
	}
	if (!(sent.pieces(ph) >> i))
		o.in_order[ph] |= 1ull << i;
	sent.add(ph, i);
	o.went[ph] = u_.host().now();
	send_out(job, o, ph, false, 1ull << i);
	// The result an extra takes from its partner says its partial came
	// (on_packet): no other acknowledgement of it is owed.
	if (m.coll != CollOp::bcast && ph == Shape(job.cfg.nodes()).post() && sent.has(ph))
		settle_owed(job, o.to[ph], m.mid, 0);
}

void XchgPath::advance(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	if (m.coll == CollOp::bcast)
		advance_bcast(qp, job, m, now);
	else
		advance_reduce(qp, job, m, now);
}

// The broadcast: each piece of the data from the parent (the root has
// it), on to every child as soon as it is here, and into the local ranks
// once all are (at[i] 1: piece i went on).  What is here goes to the
// child of the largest subtree first (the earliest phase), as the tree's
// store-and-forward did.
void XchgPath::advance_bcast(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	XchgMsg &x = m.xchg;
	const XchgSlots &in = x.in;
	const Tree t(job.cfg.nodes(), m.root_node);
	const uint32_t node = job.cfg.node, rp = t.recv_phase(node);
	bool all = true;
	uint64_t ready = 0;
	for (uint32_t i = 0; !x.result && i < in.npieces(); i++) {
		if (x.at[i])
			continue;
		if (rp != kNone && !(in.pieces(rp) >> i & 1)) {
			all = false;
			continue;
		}
		const size_t off = in.off(i);
		const uint32_t n = in.piece_len(i);
		if (rp != kNone && n)
			memcpy(x.acc.data() + off, in.at(rp) + off, n);
		x.at[i] = 1;
		ready |= 1ull << i;
	}
	for (uint32_t ph = rp == kNone ? 1 : rp + 1; ready && ph < t.phases(); ph++)
		for (uint64_t b = ready; b && t.child(node, ph) != kNone; b &= b - 1)
			send_piece(job, m, ph, uint32_t(std::countr_zero(b)));
	bool moved = ready != 0;
	if (!x.result && all) {
		if (!finish(qp, job, m))
			return;
		moved = true;
	}
	if (moved)
		m.last_progress = now;
	arm(job, m, now);
}

// The result (in acc) into the local ranks: false when it could not be
// written, and the message failed.
bool XchgPath::finish(Qp &qp, CollJob &job, Message &m)
{
	if (msg_bytes(m) && !u_.write_result(job, m, 0, m.xchg.acc.data())) {
		m.dma_error = true;
		u_.fail(qp, job, CollStatus::local_err, false, "a local buffer is not accessible");
		return false;
	}
	m.xchg.result = true;
	m.final_[0] = 1;
	m.finals = 1;
	return true;
}

// Piece i through the phases it can pass now (the peer's piece of each
// here): true if it moved.  Past the last phase it is the result's.
bool XchgPath::advance_piece(CollJob &job, Message &m, uint32_t i)
{
	XchgMsg &x = m.xchg;
	const XchgSlots &in = x.in;
	const Shape s(job.cfg.nodes());
	const uint32_t node = job.cfg.node, n = in.piece_len(i);
	const size_t off = in.off(i);
	uint8_t *acc = x.acc.data() + off;
	const uint8_t was = x.at[i];
	while (x.at[i] <= s.post()) {
		const uint32_t ph = x.at[i];
		if (ph < s.post()) {
			if (s.peer(node, ph) == kNone) { // none in phase 0
				x.at[i]++;
				continue;
			}
			if (s.sends(node, ph))
				send_piece(job, m, ph, i);
			if (s.extra(node)) { // phase 0 sent: wait for the result
				x.at[i] = uint8_t(s.post());
				continue;
			}
			if (!(in.pieces(ph) >> i & 1))
				break;
			if (n)
				combine(m, s, node, ph, in.at(ph) + off, acc, n / m.es, u_.ctr);
			x.at[i]++;
			continue;
		}
		if (s.extra(node)) {
			if (!(in.pieces(ph) >> i & 1))
				break;
			if (n)
				memcpy(acc, in.at(ph) + off, n);
		} else {
			if (n && m.op == RedOp::avg)
				avg_finalize(m.dtype, acc, n / m.es, job.cfg.total_ranks);
			if (s.sends(node, ph))
				send_piece(job, m, ph, i);
		}
		x.at[i]++;
	}
	return x.at[i] != was;
}

// Every piece as far as it goes; the result once all are through.
void XchgPath::advance_reduce(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	XchgMsg &x = m.xchg;
	const uint32_t post = Shape(job.cfg.nodes()).post();
	bool moved = false, all = true;
	for (uint32_t i = 0; !x.result && i < x.in.npieces(); i++) {
		moved |= advance_piece(job, m, i);
		all &= x.at[i] > post;
	}
	if (!x.result && all) {
		if (!finish(qp, job, m))
			return;
		moved = true;
	}
	if (moved)
		m.last_progress = now;
	arm(job, m, now);
}

// The message is done once its result is written; what it sent and no
// peer acknowledged yet stays with the job (park()).  Until then what is
// not acknowledged goes again (arm_out(), xchg_ack.cc).
void XchgPath::arm(CollJob &job, Message &m, uint64_t now)
{
	if (m.xchg.result)
		return park(job, m, now);
	arm_out(job, m.xchg.out, now);
}

// A peer's partial: for a message that runs here, or kept for a later one.
// Taken (fresh), or this node had it already (again: a message it took
// the partial of, or finished; the peer did not hear so), which the peer
// is told; or not taken (no).  Up to kXchgEarlySlots later messages' partials
// are kept at a time: members run at most the depth ahead, and a
// broadcast's leaves more (they wait for no one but their parent); a
// partial of another later message while every slot holds one is not
// taken, nor acknowledged: its sender sends it again.
XchgPath::Kept XchgPath::keep(CollJob &job, const CollPacket &p)
{
	const uint32_t ph = p.h.phase, tag = tag_of(p.h.coll, p.h.seq);
	// The partial's length (node_map) and this piece of it (sid).
	const uint32_t len = uint32_t(std::min<uint64_t>(p.h.node_map, UINT32_MAX));
	const uint32_t piece = p.h.sid;
	const uint32_t pc = job.xchg.piece;
	if (p.h.node_map > uint64_t(pc) * kXchgPiecesMost || piece >= xchg_pieces(len, pc) ||
	    p.paylen != xchg_piece_len(len, piece, pc)) {
		u_.ctr.bad_block++;
		return Kept::no;
	}
	XchgSlots *to = nullptr;
	if (Message *m = job.running(p.h.mid)) {
		if (m->path == this && m->xchg.result) { // taken already
			u_.ctr.dup_dropped++;
			return Kept::again;
		}
		if (m->path != this || len != m->xchg.in.len || tag != m->xchg.in.tag) {
			u_.ctr.bad_block++; // the members do not agree on the message
			return Kept::no;
		}
		to = &m->xchg.in;
	} else if (job.ahead(p.h.mid)) {
		XchgJob &xj = job.xchg;
		to = xj.early_of(p.h.mid);
		if (to && (len != to->len || tag != to->tag)) {
			u_.ctr.bad_block++;
			return Kept::no;
		}
		if (!to) {
			for (XchgSlots &e : xj.early)
				if (!e.on && (!to || (to->data.empty() && !e.data.empty())))
					to = &e;
			if (!to && xj.early.size() < kXchgEarlySlots)
				to = &xj.early.emplace_back();
			if (!to) {
				u_.ctr.early_dropped++; // every slot holds a later message's
				return Kept::no;
			}
			const uint32_t n = job.cfg.nodes();
			to->reset(p.h.mid, len,
				  is_bcast(p.h.coll) ? Tree(n, p.h.seq).phases()
						     : Shape(n).phases(),
				  tag, pc);
		}
		if (!(to->pieces(ph) >> piece & 1))
			u_.ctr.early_stored++;
	} else {
		u_.ctr.stale_dropped++; // a message done here: its acknowledgement was lost
		return Kept::again;
	}
	if (!to->add(ph, piece)) {
		u_.ctr.dup_dropped++;
		return Kept::again;
	}
	if (p.paylen)
		memcpy(to->at(ph) + to->off(piece), p.payload, p.paylen);
	return Kept::fresh;
}

// A message that runs here, older than p's, waits for the partial of p's
// phase from p's sender (the same collective and root: the same peer).
bool XchgPath::missing_before(const CollJob &job, const CollPacket &p) const
{
	const uint32_t tag = tag_of(p.h.coll, p.h.seq);
	for (size_t i = 0; i < job.runs(); i++) {
		const Message &m = job.run(i);
		if (m.path == this && seq_after(p.h.mid, m.mid) && !m.xchg.result && m.xchg.in.on &&
		    m.xchg.in.tag == tag && !m.xchg.in.has(p.h.phase))
			return true;
	}
	return false;
}

// The piece before p's (of its partial) is not here: lost, most likely
// (its sender sends a partial's pieces in order, but for those a piece
// of the phase before held back).
bool XchgPath::gap_before(CollJob &job, const CollPacket &p) const
{
	return p.h.sid > 0 && p.h.sid < 64 && !(pieces_here(job, p.h) >> (p.h.sid - 1) & 1);
}

// p acknowledges this node's partial of its phase and says its sender
// sent this node every piece of its own partial of that phase before it
// (kCethXchgSent: the two partials of an exchange's phase cross).  On a
// path that keeps order, what of that partial is not here was lost: the
// NAK that says so goes now (once a phase and message; then the repeat
// timer), not when its sender's timer runs out.  sid names no piece (the
// number of pieces): every piece not named in node_map goes again.
void XchgPath::nak_crossed(CollJob &job, const CollPacket &p)
{
	const uint32_t ph = p.h.phase, src = p.h.src_node;
	Message *m = job.running(p.h.mid);
	if (is_bcast(p.h.coll) || !m || m->path != this || m->xchg.result || ph >= 32 ||
	    (m->xchg.crossed >> ph & 1))
		return;
	const XchgSlots &in = m->xchg.in;
	const Shape s(job.cfg.nodes());
	if (!in.on || in.mid != p.h.mid || ph >= s.phases() || s.peer(job.cfg.node, ph) != src ||
	    !s.sends(src, ph) || in.pieces(ph) == in.all())
		return;
	m->xchg.crossed |= 1u << ph;
	Ceth h = p.h; // the sender's partial: the same collective, message and phase
	h.sid = in.npieces();
	h.seg = kXchgNoSeg;
	h.node_map = in.len;
	acknowledge(job, h, uint16_t(src), 0, true);
}

// Only a node's peer in the phase sends it a partial, the way the phase
// goes: in an exchange, its partner; in a broadcast's tree, its parent.
static bool from_peer(const CollJob &job, const CollPacket &p)
{
	const uint32_t n = job.cfg.nodes(), node = job.cfg.node, src = p.h.src_node;
	const uint32_t ph = p.h.phase;
	if (is_bcast(p.h.coll))
		return p.h.seq < n && Tree(n, p.h.seq).recv_phase(node) == ph &&
		       Tree(n, p.h.seq).parent(node) == src;
	if (p.h.coll != uint8_t(CollOp::allreduce) && p.h.coll != uint8_t(CollOp::barrier))
		return false;
	const Shape s(n);
	return ph < s.phases() && s.peer(node, ph) == src && s.sends(src, ph);
}

void XchgPath::on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	job.xchg.piece = xchg_piece_of(qp);
	const Shape s(job.cfg.nodes());
	const uint32_t ph = p.h.phase;
	const bool ack = p.h.flags & kCethXchgAck;
	if (ack ? p.paylen != 0 : !from_peer(job, p)) {
		u_.ctr.bad_node++;
		return;
	}
	// Whatever it is, what the sender finished acknowledges what it had
	// of this node's.
	take_through(job, p);
	if (ack)
		return on_ack(job, p, now);
	u_.ctr.rx_data++;
	const Kept k = keep(job, p);
	if (k == Kept::no)
		return;
	// A partial sent again, or one this node had: its sender waits to
	// hear, now; as for a later message's while an earlier one's from
	// the same peer is missing (lost, most likely: the acknowledgement
	// has it sent again, on_ack).  A first one: later, unless this node
	// says so before.
	if (k == Kept::again || (p.h.flags & kCethRetrans))
		acknowledge(job, p.h, p.h.src_node, 0);
	else if (missing_before(job, p) || gap_before(job, p))
		acknowledge(job, p.h, p.h.src_node, 0, true);
	else
		owe(job, p.h, now);
	Message *m = job.running(p.h.mid);
	if (!m || m->path != this || m->xchg.result)
		return;
	// A piece of the result an extra takes from its partner says that
	// piece of its partial came.
	XchgOut &o = m->xchg.out;
	if (!is_bcast(p.h.coll) && ph == s.post() && o.sent.on)
		o.take_acks(0, 1ull << p.h.sid);
	if (qp.state == QpState::rts)
		advance(qp, job, *m, now);
}

// Every message that runs here (all of them on this path: the active one
// and those in flight beside it), oldest first; one that fails ends them
// all (CollEngine::fail).
void XchgPath::on_timer(Qp &qp, CollJob &job, uint64_t now)
{
	for (size_t i = 0; qp.state == QpState::rts && i < job.runs(); i++) {
		Message &m = job.run(i);
		if (m.xchg.done)
			continue;
		advance(qp, job, m, now);
		if (!job.active || qp.state != QpState::rts)
			return;
		XchgOut &o = m.xchg.out;
		if (!m.xchg.done && o.again_at && now >= o.again_at)
			again(job, o, now);
	}
}

// A node runs at most kAhead messages ahead of what its peers acknowledged
// (the others' early slots keep up to twice the deepest depth): a
// broadcast's root, which needs no one's partial, waits there for its
// children, as it did for every message when completion waited for the
// acknowledgements.
bool XchgPath::done(const CollJob &job) const
{
	constexpr uint32_t kAhead = 16;
	const Message &m = *job.active;
	if (!m.xchg.done)
		return false;
	for (const XchgOut &o : job.xchg.outs)
		if (o.sent.on && !seq_after(o.sent.mid, m.mid - kAhead))
			return false;
	return true;
}

uint64_t XchgPath::next_deadline(const CollJob &job) const
{
	uint64_t d = UINT64_MAX;
	for (size_t i = 0; i < job.runs(); i++) {
		const XchgMsg &x = job.run(i).xchg;
		if (!x.done && x.out.again_at)
			d = std::min(d, x.out.again_at);
	}
	return d;
}
} // namespace ibv_coll::emu
