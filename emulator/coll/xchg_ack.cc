// What the pairwise exchange (xchg.cc) sends, and how each partial comes
// to be acknowledged.
//
// A node completes a message once it has its result; what it sent that a
// peer has not acknowledged yet stays with the job (XchgJob::outs) and
// goes again on its timer, after the message completed if need be, until
// acknowledged or the job's timeout.  An acknowledgement costs a packet,
// a system call and often a wake-up at each end, as much as the partial
// itself, so it goes only when nothing else says as much in time:
//
//  - every XCHG carries in rank_map the newest MID finished at its sender
//    (plus 1; 0: none), and every message up to it is finished there:
//    what the receiver sent the sender for those messages needs no more
//    acknowledgement.  In a run of collectives, each member's partials of
//    the next message acknowledge the last one's, at no cost;
//  - a partial that came is acknowledged on its own (an ACK, echoing its
//    seg, with hold the ns the acknowledgement was held) only when the
//    wait (ack_wait()) runs out first, or at once when it came again or
//    was here already (its sender is waiting), or when the job leaves the
//    QP (leaving(): destroying a QP waits, boundedly, for its own partials
//    to be acknowledged, so that a process may leave right after its last
//    collective and no peer waits for it);
//  - an extra's partial of phase 0 is acknowledged by the result its
//    partner sends it;
//  - every eighth partial held back from one peer is acknowledged at once
//    (a broadcast's children never send their parent anything else), and
//    a node completes at most kAhead messages beyond one a peer has not
//    acknowledged (XchgPath::done()), so a broadcast's root waits there.
// A repeat waits the round trip plus that wait, at least the probe time.
// A partial of a later message while an older one's of that phase from
// the same peer is missing is acknowledged at once, with NAK: its sender
// sends the older one again then (repeat_older(), TCP's fast retransmit),
// not after the repeat timer; with several messages in flight, and under
// a broadcast's stream, that is how most losses are repaired.  So is a
// piece of a partial whose next piece came: that one's acknowledgement
// goes at once, with NAK, and the lost piece again (repeat_gap()).
#include "coll/coll_engine.h"

#include "util/clock.h"
#include "util/log.h"

#include <algorithm>
#include <bit>

namespace ibv_coll::emu {

using namespace wire;

namespace {

constexpr size_t kOutSlots = 64;  // messages whose partials wait for an ACK
constexpr size_t kOwedMost = 128; // acknowledgements held back at a time
constexpr size_t kOwedEach = 8;	  // ... to one peer: the eighth goes at once

// The newest MID finished here; every one before it is (0: none yet).
uint32_t through(const CollJob &job)
{
	return job.active ? job.active->mid - 1 : job.last_mid;
}

uint64_t through_field(const CollJob &job)
{
	const uint32_t t = through(job);
	return t ? uint64_t(t) + 1 : 0;
}

// The pieces of phase ph sent and not acknowledged.
uint64_t unacked(const XchgOut &o, uint32_t ph)
{
	return (o.sent.acked >> ph & 1) ? 0 : o.sent.pieces(ph) & ~o.acked_pieces[ph];
}

// f on each phase this node sent a piece of.
template <class F> void each_begun(const XchgOut &o, F &&f)
{
	for (uint32_t b = o.sent.begun; b; b &= b - 1)
		f(uint32_t(std::countr_zero(b)));
}

bool all_acked(const XchgOut &o)
{
	bool all = true;
	each_begun(o, [&](uint32_t ph) { all &= !unacked(o, ph); });
	return all;
}

// f on what each message of the job sent: those that run here on the
// exchange, then those done here (parked).
template <class F> void each_out(CollJob &job, const CollPath *path, F &&f)
{
	for (size_t i = 0; i < job.runs(); i++) {
		Message &m = job.run(i);
		if (m.path == path)
			f(m.xchg.out);
	}
	for (XchgOut &o : job.xchg.outs)
		f(o);
}

} // namespace

// How long an acknowledgement may wait for something else to say as much:
// a quarter of the probe time (or of the timeout without probes), well
// within the sender's repeat (arm_out()).
uint64_t XchgPath::ack_wait(const CollJob &job) const
{
	const uint64_t probe = u_.probe_ns();
	return (probe ? probe : u_.rto_ns(job)) / 4;
}

// The pieces of phase ph's partial (of those in `pieces`) sent here and
// not acknowledged by its peer.
void XchgPath::send_out(CollJob &job, XchgOut &o, uint32_t ph, bool again, uint64_t pieces)
{
	Ceth h = o.h;
	h.phase = uint8_t(ph);
	h.seg = o.tries[ph]; // the transmission, echoed by the acknowledgement
	h.rank_map = through_field(job);
	h.node_map = o.sent.len;
	if (again)
		h.flags |= kCethRetrans;
	const uint64_t out = o.sent.pieces(ph) & ~o.acked_pieces[ph] & pieces;
	if (again)
		o.in_order[ph] &= ~out; // a later piece's coming says nothing of these now
	for (uint64_t go = out; go; go &= go - 1) {
		const uint32_t i = uint32_t(std::countr_zero(go));
		h.sid = i;
		const uint32_t n = o.sent.piece_len(i);
		const uint8_t *at = o.sent.at(ph) + o.sent.off(i);
		u_.send(job, o.to[ph], kCollXchg, h, n ? Payload::lent(at, n) : Payload{});
		if (n)
			o.lent = u_.lent_mark();
		if (again)
			u_.ctr.retrans_data++;
		else
			u_.ctr.tx_data++;
	}
	settle_owed(job, o.to[ph], through(job));
}

// Phase ph's pieces (of those in `pieces`) not acknowledged, again: a new
// transmission (seg), timed from now.
void XchgPath::resend(CollJob &job, XchgOut &o, uint32_t ph, uint64_t now, uint64_t pieces)
{
	o.last_at[ph] = o.went[ph] = now;
	o.tries[ph]++;
	send_out(job, o, ph, true, pieces);
}

// The longest a repeat waits: as the ring's while nothing progresses, up
// to a second (or twice the timeout), and at most an eighth of the job's
// timeout, so that a partial goes several times before a peer gives up on
// it whatever the round trips said (hosts descheduled for milliseconds
// on end timed one at 73 ms: a repeat 147 ms after each acknowledgement,
// and a broadcast under loss failed its 200 ms timeout).
uint64_t XchgPath::most_gap(const CollJob &job) const
{
	const uint64_t most = std::max<uint64_t>(1000 * util::kNsPerMs, 2 * u_.rto_ns(job));
	return std::min(most, u_.backoff_most(job));
}

// What is not acknowledged goes again, less often each time: after the
// probe time (or twice the round trip) and the acknowledgement's wait,
// then twice as long each time (again()).
void XchgPath::arm_out(const CollJob &job, XchgOut &o, uint64_t now)
{
	if (all_acked(o)) {
		o.again_at = 0; // nothing to send again: waiting for a peer
		return;
	}
	if (!o.again_at) {
		const uint64_t probe = u_.probe_ns();
		o.again_gap = std::min((probe ? std::max(probe, 2 * job.srtt) : u_.rto_ns(job)) +
					       ack_wait(job),
				       most_gap(job));
		o.again_at = now + o.again_gap;
	}
}

// The repeat timer of what o sent.  Where round trips set the wait (a
// slow path: they are longer than the probe time), each phase goes again
// a full wait after it last sent, not when the timer its first phase
// armed runs out.
void XchgPath::again(CollJob &job, XchgOut &o, uint64_t now)
{
	bool whole = false;
	uint64_t next = 0;
	const uint64_t probe = u_.probe_ns();
	const bool timed = probe && 2 * job.srtt > probe;
	each_begun(o, [&](uint32_t ph) {
		const uint64_t left = unacked(o, ph);
		if (!left)
			return;
		if (timed && now - o.went[ph] < o.again_gap) {
			const uint64_t due = o.went[ph] + o.again_gap;
			next = next ? std::min(next, due) : due;
			return;
		}
		const uint32_t bit = 1u << ph;
		if ((left & (left - 1)) && (timed || !o.acked_pieces[ph])) {
			// Several pieces, nothing said of them (or a slow
			// path): the last alone (what went before it and is
			// not acknowledged with it was lost, on_ack), as TCP's
			// tail loss probe; where the
			// acknowledgement was only slow, one piece went twice,
			// not the partial.  The first probe does not back off.
			whole |= (o.probing & bit) != 0;
			o.probing |= bit;
			resend(job, o, ph, now, uint64_t(1) << (63 - std::countl_zero(left)));
			return;
		}
		o.probing &= ~bit;
		resend(job, o, ph, now);
		whole = true;
	});
	if (whole)
		o.again_gap = std::min(2 * o.again_gap, most_gap(job));
	const uint64_t due = now + o.again_gap;
	o.again_at = next ? std::min(next, due) : due;
}

// m has its result: what it sent goes to the job (kept while a peer has
// not acknowledged it), its buffers back to the job's for the next.
void XchgPath::park(CollJob &job, Message &m, uint64_t now)
{
	XchgMsg &x = m.xchg;
	XchgJob &xj = job.xchg;
	x.done = true;
	XchgOut &o = x.out;
	o.sent.on = o.sent.on && !all_acked(o);
	o.parked = now;
	if (o.sent.on)
		arm_out(job, o, now); // sent in the pass that completed it
	// Its slot: a free one without a buffer, else a new one, else a free
	// one whose buffer then goes with m.  A free slot's buffer (its peers
	// have what it held) stays with the job for a later message's
	// partials: a message that opens while the one before it waits for
	// its acknowledgement (every message of a blocking loop) would
	// otherwise allocate and clear its partials' buffer again (128 KiB
	// for a 32 KiB allreduce of 4 nodes).
	XchgOut *slot = nullptr;
	for (XchgOut &e : xj.outs)
		if (!e.sent.on && e.sent.data.empty()) {
			slot = &e;
			break;
		}
	if (!slot && xj.outs.size() < kOutSlots)
		slot = &xj.outs.emplace_back();
	for (XchgOut &e : xj.outs)
		if (!slot && !e.sent.on)
			slot = &e;
	if (!slot) { // the oldest: its peer has not answered for 64 messages
		slot = &xj.outs.front();
		for (XchgOut &e : xj.outs)
			if (e.parked < slot->parked)
				slot = &e;
		IBVC_DEBUG("coll", "{}: job {} message {}: no acknowledgement, given up",
			   u_.host().params.name, job.cfg.jid, slot->sent.mid);
	}
	std::swap(*slot, o);
	// Its partials' buffer likewise, in an early slot without one (else a
	// new one): a later message's partial that came before m completed
	// took the slot m's buffer came from.
	x.in.on = false;
	XchgSlots *keep = nullptr;
	for (XchgSlots &e : xj.early)
		if (!keep && !e.on && e.data.empty())
			keep = &e;
	if (!keep && !x.in.data.empty() && xj.early.size() < kXchgEarlySlots)
		keep = &xj.early.emplace_back();
	if (keep && !x.in.data.empty())
		std::swap(*keep, x.in);
	if (xj.accs.size() < kOutSlots && !x.acc.empty())
		xj.accs.push_back(std::move(x.acc));
}

// The pieces of the partial p (a partial's header that was taken) here:
// of a message that runs or is kept for later, those that came; of one
// finished here, all.
uint64_t XchgPath::pieces_here(CollJob &job, const Ceth &p) const
{
	const uint64_t all = xchg_all_pieces(uint32_t(std::min<uint64_t>(p.node_map, UINT32_MAX)),
					     job.xchg.piece);
	const XchgSlots *s = job.xchg.early_of(p.mid);
	if (Message *m = job.running(p.mid); m && m->path == this && !m->xchg.result)
		s = &m->xchg.in;
	return s && s->on && s->mid == p.mid && p.phase < 32 ? s->pieces(p.phase) : all;
}

// Tell `to` that its partial of the phase in p (a partial's header) is
// here, after holding the acknowledgement `held` ns: in node_map, the
// pieces that are (all but a lost one, or a late one, the first time).
void XchgPath::acknowledge(CollJob &job, const Ceth &p, uint16_t to, uint64_t held, bool gap)
{
	Ceth h;
	h.coll = p.coll;
	h.op = p.op;
	h.dtype = p.dtype;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = p.mid;
	h.phase = p.phase;
	h.seq = p.seq;
	h.flags = kCethXchgAck | (gap ? kCethNak : 0) |
		  (sent_whole(job, p, to) ? kCethXchgSent : 0);
	h.seg = p.seg;
	h.sid = p.sid;
	h.node_map = pieces_here(job, p);
	h.job_key = job.cfg.key;
	h.hold = uint32_t(std::min<uint64_t>(held, kHoldUnknown - 1));
	h.rank_map = through_field(job);
	u_.send(job, to, kCollXchg, h);
	settle_owed(job, to, p.mid, p.phase);
	settle_owed(job, to, through(job));
}

// Every piece of this node's partial of p's message and phase went to
// `to`, which has not acknowledged it all.
bool XchgPath::sent_whole(CollJob &job, const Ceth &p, uint16_t to)
{
	if (p.phase >= 32)
		return false;
	bool whole = false;
	each_out(job, this, [&](const XchgOut &o) {
		whole |= o.sent.on && o.sent.mid == p.mid && o.to[p.phase] == to &&
			 o.sent.pieces(p.phase) == o.sent.all() && unacked(o, p.phase);
	});
	return whole;
}

void XchgPath::owe(CollJob &job, const Ceth &p, uint64_t now)
{
	XchgJob &xj = job.xchg;
	// A peer that sends without waiting for this node (a broadcast's
	// parent) hears every few partials, as TCP acknowledges every other
	// segment: it runs at most kAhead messages ahead of what is
	// acknowledged (done()).
	// One acknowledgement says every piece of a partial that is here.
	if (std::any_of(xj.owed.begin(), xj.owed.end(), [&](const XchgOwed &o) {
		    return o.to == p.src_node && o.h.mid == p.mid && o.h.phase == p.phase;
	    }))
		return;
	const auto held = std::count_if(xj.owed.begin(), xj.owed.end(),
					[&](const XchgOwed &o) { return o.to == p.src_node; });
	if (size_t(held) + 1 >= kOwedEach)
		return acknowledge(job, p, p.src_node, 0);
	if (xj.owed.size() >= kOwedMost) { // the oldest goes now
		const XchgOwed o = xj.owed.front();
		xj.owed.erase(xj.owed.begin());
		acknowledge(job, o.h, o.to, now - o.since);
	}
	xj.owed.push_back(XchgOwed{p, p.src_node, now});
	if (!xj.owed_due)
		xj.owed_due = now + ack_wait(job);
}

// Acknowledgements owed to `to` that are said now: of messages up to mid
// (phase < 0), or of mid's partial of that phase.
void XchgPath::settle_owed(CollJob &job, uint16_t to, uint32_t mid, int phase)
{
	XchgJob &xj = job.xchg;
	if (xj.owed.empty() || (phase < 0 && !mid))
		return;
	std::erase_if(xj.owed, [&](const XchgOwed &o) {
		return o.to == to && (phase < 0 ? !seq_after(o.h.mid, mid)
						: o.h.mid == mid && o.h.phase == phase);
	});
	xj.owed_due = xj.owed.empty() ? 0 : xj.owed.front().since + ack_wait(job);
}

// Every message up to the one p's sender names in rank_map is finished
// there: what this node sent it for those needs no acknowledgement.
void XchgPath::take_through(CollJob &job, const CollPacket &p)
{
	if (!p.h.rank_map || p.h.rank_map > UINT32_MAX)
		return;
	const uint32_t t = uint32_t(p.h.rank_map - 1), src = p.h.src_node;
	auto take = [&](XchgOut &o) {
		if (!o.sent.on || seq_after(o.sent.mid, t))
			return;
		each_begun(o, [&](uint32_t ph) {
			if (o.to[ph] != src)
				return;
			o.sent.acked |= 1u << ph;
			o.acked_pieces[ph] = o.sent.all();
		});
		if (!all_acked(o))
			return;
		o.again_at = 0;
		if (o.parked)
			o.sent.on = false;
	};
	each_out(job, this, take);
}

// The round trip an acknowledgement of phase ph closes, from the
// transmission it answers (its echo of seg) to now, less the time the
// acknowledgement was held; once per transmission, by the acknowledgement
// that names every piece (a partial's round trip includes the time its
// pieces take to leave: timed by its first pieces' acknowledgement, a
// 32 KiB partial at 400 Mbit/s went again while its last pieces were still
// on their way, wire/S 2.85 where 2 is the exchange's).  It paces the
// repeats (arm_out()): with none, an exchange on a path slower than the
// probe time sent every partial twice, message after message (Karn's rule
// alone never timed one).
static void time_ack(CollCore &u, CollJob &job, XchgOut &o, const CollPacket &p, uint64_t now)
{
	const uint32_t ph = p.h.phase;
	const uint16_t echo = p.h.seg;
	uint64_t *at = echo == o.tries[ph] ? &o.last_at[ph] : echo == 0 ? &o.first_at[ph] : nullptr;
	if (!at || !*at || now <= *at)
		return;
	const uint64_t rtt = now - *at, held = p.h.hold;
	u.rtt_sample(job, held < rtt ? rtt - held : rtt, Holding::unknown());
	if (echo == 0)
		o.first_at[ph] = 0;
	if (echo == o.tries[ph])
		o.last_at[ph] = 0;
}

void XchgPath::on_ack(CollJob &job, const CollPacket &p, uint64_t now)
{
	const uint32_t ph = p.h.phase;
	Message *m = job.running(p.h.mid);
	XchgOut *o = nullptr;
	if (m && m->path == this && m->xchg.out.sent.on)
		o = &m->xchg.out;
	for (size_t i = 0; !o && i < job.xchg.outs.size(); i++)
		if (job.xchg.outs[i].sent.on && job.xchg.outs[i].sent.mid == p.h.mid)
			o = &job.xchg.outs[i];
	if (o && ph < 32 && o->sent.pieces(ph) && o->to[ph] == p.h.src_node) {
		const uint16_t echo = p.h.seg;
		const uint64_t at = echo == o->tries[ph] ? o->last_at[ph]
				    : echo == 0		 ? o->first_at[ph]
							 : 0;
		if (at && (p.h.flags & kCethNak))
			repeat_older(job, p.h.mid, p.h.src_node, at, now);
		if ((p.h.node_map & o->sent.all()) == o->sent.all())
			time_ack(u_, job, *o, p, now);
	}
	// Whether or not this node's partial was acknowledged before (its
	// peer's rank_map says it finished the message, take_through).
	if ((p.h.flags & kCethXchgSent) && !(p.h.flags & kCethNak))
		nak_crossed(job, p);
	if (!o || ph >= 32 || !o->sent.pieces(ph) || (o->sent.acked >> ph & 1)) {
		u_.ctr.dup_dropped++; // acknowledged already, or of a message long done
		return;
	}
	if (o->to[ph] != p.h.src_node) {
		u_.ctr.bad_node++; // not whom this node sent it to
		return;
	}
	// A piece missing there (lost, or not sent yet) goes on the timer,
	// or at once where the acknowledgement says it is lost (NAK).
	const bool fresh = o->take_acks(ph, p.h.node_map) != 0;
	if (p.h.flags & kCethNak)
		repeat_gap(job, *o, ph, p.h.sid, now);
	if (!fresh) {
		if (!(p.h.flags & kCethNak))
			u_.ctr.dup_dropped++; // names no piece not acknowledged before
		return;
	}
	o->heard = now;
	if ((o->probing >> ph & 1) && p.h.seg == o->tries[ph]) {
		// The probe (again()) came: what it names not, of what went
		// before it, was lost.  It goes now.
		o->probing &= ~(1u << ph);
		if (unacked(*o, ph))
			resend(job, *o, ph, now);
	}
	if (!o->parked)
		m->last_progress = now;
	else if (all_acked(*o))
		o->sent.on = false;
	// What is still unacknowledged went later: its repeat is due a full
	// wait from now (arm_out()), as TCP restarts its timer on every ACK;
	// but not a repeat that is due already (this host was descheduled
	// past it): pushed back on every acknowledgement, it never went.
	if (all_acked(*o) || !o->again_at || now < o->again_at) {
		o->again_at = 0;
		arm_out(job, *o, now);
	}
}

// A partial sent at sent_at to peer came (its acknowledgement, for message
// mid) while an older message's of that phase is missing there (the
// acknowledgement's NAK flag): what this node sent that peer before, for
// older messages, and no acknowledgement came for, was lost (or is late:
// the path reorders).  It goes again now rather than on its timer, as
// TCP's fast retransmit, without touching the timer's backoff; at most
// once per later partial.
void XchgPath::repeat_older(CollJob &job, uint32_t mid, uint16_t peer, uint64_t sent_at,
			    uint64_t now)
{
	auto older = [&](XchgOut &o) {
		if (!o.sent.on || !seq_after(mid, o.sent.mid))
			return;
		each_begun(o, [&](uint32_t q) {
			if (unacked(o, q) && o.to[q] == peer && o.last_at[q] &&
			    o.last_at[q] <= sent_at) {
				resend(job, o, q, now);
				u_.ctr.fast_repeats++;
			}
		});
	};
	each_out(job, this, older);
}

// The acknowledgement of piece `piece` of a partial said (NAK) that the
// piece before it is not there: what went before `piece`, once and in
// order, and is not acknowledged now, was lost.  It goes again now, as
// TCP's fast retransmit does with a hole its duplicate acknowledgements
// show, each piece once (after that, its timer); the partial's other
// pieces wait for their acknowledgement.  Without it, a lost piece of a
// blocking collective (no later message comes to show the loss) waited
// the repeat timer, the probe time and more: at 5 % loss 32 KiB
// allreduces of 6 processes on one host lost one almost every time.
void XchgPath::repeat_gap(CollJob &job, XchgOut &o, uint32_t ph, uint32_t piece, uint64_t now)
{
	// piece: the one that came, or the number of pieces (a peer that
	// had this node's word that all went before: every piece not named).
	const uint64_t lost = piece >= o.sent.npieces() ? unacked(o, ph)
							: unacked(o, ph) & o.in_order[ph] &
								  ((uint64_t(1) << piece) - 1);
	if (!lost)
		return;
	resend(job, o, ph, now, lost);
	u_.ctr.fast_repeats++;
}

bool XchgPath::tend(CollJob &job, uint64_t now)
{
	XchgJob &xj = job.xchg;
	bool did = false;
	const uint64_t wait = ack_wait(job);
	while (xj.owed_due && now >= xj.owed_due) {
		const XchgOwed o = xj.owed.front();
		xj.owed.erase(xj.owed.begin());
		acknowledge(job, o.h, o.to, now - o.since);
		xj.owed_due = xj.owed.empty() ? 0 : xj.owed.front().since + wait;
		did = true;
	}
	const uint64_t bound = u_.coll_timeout_ns(job);
	for (XchgOut &o : xj.outs) {
		if (!o.sent.on)
			continue;
		if (now - std::max(o.parked, o.heard) > bound) {
			// Its peer is gone, or left the job: it fails there.
			IBVC_INFO("coll",
				  "{}: job {} message {}: a peer acknowledged nothing "
				  "for the job's timeout; no longer sent",
				  u_.host().params.name, job.cfg.jid, o.sent.mid);
			o.sent.on = false;
		} else if (o.again_at && now >= o.again_at) {
			again(job, o, now);
			did = true;
		}
	}
	return did;
}

uint64_t XchgPath::due(const CollJob &job) const
{
	uint64_t d = job.xchg.owed_due;
	const uint64_t bound = u_.coll_timeout_ns(job) + 1;
	for (const XchgOut &o : job.xchg.outs)
		if (o.sent.on) {
			const uint64_t quit = std::max(o.parked, o.heard) + bound;
			const uint64_t t = o.again_at ? std::min(o.again_at, quit) : quit;
			d = d ? std::min(d, t) : t;
		}
	return d;
}

void XchgPath::flush_owed(CollJob &job, uint64_t now)
{
	XchgJob &xj = job.xchg;
	while (!xj.owed.empty()) {
		const XchgOwed o = xj.owed.front();
		xj.owed.erase(xj.owed.begin());
		acknowledge(job, o.h, o.to, now - o.since);
	}
	xj.owed_due = 0;
}

bool XchgPath::leaving(CollJob &job, uint64_t now)
{
	XchgJob &xj = job.xchg;
	flush_owed(job, now);
	tend(job, now);
	return std::any_of(xj.outs.begin(), xj.outs.end(),
			   [](const XchgOut &o) { return o.sent.on; });
}

} // namespace ibv_coll::emu
