// The switch's data path: partials in, folded in child order, results out
// to the children (or the partial up to the parent), repeats and ASKs
// answered from the shadow copy, missing partials NAKed (wire/swproto.h).
#include "switch/switch.h"
#include "switch/switch_impl.h"

#include "reduce/reduce.h"
#include "util/clock.h"
#include "wire/roce.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;
using namespace swimpl;

// Fold a child's partial into the unit, in child order: it goes in now
// if its lowest node is the lowest still pending, else it waits (a copy).
// Where the order cannot change the result's bits (op_order_free: integer
// types, maxloc/minloc on integer values) it goes in as it comes.
void Switch::fold(Job &j, uint32_t unit, uint64_t cover, const uint8_t *data, uint32_t len)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	std::vector<Stash> &v = j.stash[unit];
	if (lowest(cover) != lowest(u.node_pending) && !op_order_free(u.op, u.dtype)) {
		std::vector<uint8_t> buf;
		if (!wk().spare.empty()) {
			buf.swap(wk().spare.back());
			wk().spare.pop_back();
		}
		buf.assign(data, data + len);
		v.push_back(Stash{cover, std::move(buf)});
		return;
	}
	pool_.contribute_nodes(j.seg_base + unit, cover, data, len);
	if (len)
		ctr(j).reductions++;
	while (!v.empty() && u.node_pending) {
		auto s = std::find_if(v.begin(), v.end(), [&](const Stash &x) {
			return lowest(x.cover) == lowest(u.node_pending);
		});
		if (s == v.end())
			break;
		pool_.contribute_nodes(j.seg_base + unit, s->cover, s->data.data(),
				       uint32_t(s->data.size()));
		if (!s->data.empty())
			ctr(j).reductions++;
		keep_spare(std::move(s->data));
		v.erase(s);
	}
	if (!u.node_pending)
		complete_unit(j, unit);
}

void Switch::unstash(Job &j, uint32_t unit)
{
	for (Stash &s : j.stash[unit])
		keep_spare(std::move(s.data));
	j.stash[unit].clear();
}

// A stashed partial's buffer, kept for the next partial this worker
// stashes: at most kMaxSpare of them (1 MiB of 4 KiB units).  Unbounded,
// a worker that frees more than it stashes kept every buffer: with
// several workers, worker 0 ends or gives again a job whose partials the
// others stashed (scripts/soak.sh -t 300 -S 15 with 4 workers: a switch
// grew from 17 to 25 MiB over 620 jobs, and 17 to 18 MiB with the bound).
void Switch::keep_spare(std::vector<uint8_t> &&b)
{
	std::vector<std::vector<uint8_t>> &spare = wk().spare;
	if (spare.size() < kMaxSpare)
		spare.push_back(std::move(b));
}

void Switch::complete_unit(Job &j, uint32_t unit)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	if (!u.filled) {
		// Nothing but tokens (a barrier, or data of length 0).
		u.filled = true;
	}
	seal(u);
	// The CETH hold and queue of the results (send_result): u.rx_ns is
	// when the result is ready here (a leaf: when its partial went up,
	// until the parent's result comes), u.queue how long it queued here
	// since the last partial it waited for arrived, u.hold the fabric's
	// part of the wait above us.
	const uint64_t now = Switch::now();
	uint64_t last = 0, first = UINT64_MAX;
	const size_t nc = j.children.size();
	if (j.arrive.size() == size_t(j.granted) * nc)
		for (size_t c = 0; c < nc; c++) {
			last = std::max(last, j.arrive[unit * nc + c]);
			first = std::min(first, j.arrive[unit * nc + c]);
		}
	u.queue = hold_add(0, last && last < now ? now - last : 0);
	if (!multi() && unit < j.repaired.size()) { // one worker: the tail's
		const bool clean = !j.repaired[unit];
		if (clean && first && last >= first)
			j.skew = std::max(last - first, j.skew - j.skew / 8);
		j.calm = !clean ? 0 : j.calm < UINT32_MAX ? j.calm + 1 : j.calm;
	}
	u.rx_ns = now;
	u.hold = 0;
	if (j.has_parent) {
		u.kind = kUnitUp;
		send_up(j, unit);
	} else {
		u.kind = kUnitDone;
		pool_.settle(j.seg_base + unit);
		ctr(j).results++;
		send_results(j, unit, now);
	}
	find_missing(j, unit);
}

// Unit `unit` just completed: its children sent this block's partials, so
// a unit a few blocks back on this plane still collecting lacks partials
// they sent before (lost, or very late): NAK them (wire/swproto.h, Loss).
// That order holds on one socket only: with several workers a block's
// partials reach the sockets of different workers, each in its own time,
// and a unit behind is as likely only behind in another worker's queue.
// There the children's ASKs find what was lost (on_ask NAKs it).
void Switch::find_missing(Job &j, uint32_t unit)
{
	if (multi())
		return;
	const SegUnit &u = pool_.unit(j.seg_base + unit);
	for (uint32_t d : sw::kNakLag) {
		if (2 * d >= j.granted)
			break; // members never keep that many blocks of a plane in flight
		const uint32_t v = (unit + j.granted - d) % j.granted;
		const SegUnit &w = pool_.unit(j.seg_base + v);
		if (w.busy && w.kind == kUnitCollecting && seq_after(u.seq, w.seq))
			send_naks(j, v, ~0ull, uint64_t(u.seq) + 1);
	}
}

static Ceth unit_header(const SegUnit &u, uint32_t jid, uint64_t key, uint32_t unit)
{
	Ceth h;
	h.coll = u.hop;
	h.op = uint8_t(u.op);
	h.dtype = uint8_t(u.dtype);
	h.src_node = sw::kNodeSwitch;
	h.jid = jid;
	h.mid = u.mid;
	h.sid = u.sid;
	h.seq = u.seq;
	h.seg = uint16_t(unit);
	h.job_key = key;
	h.phase = uint8_t(u.src_node);
	return h;
}

void Switch::send_up(Job &j, uint32_t unit)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	Ceth h = unit_header(u, j.jid, j.key, unit);
	h.node_map = 1ull << j.up;
	h.rank_map = 0;
	// Which of the parent's children needs the result's data: ours if
	// one of our children does (wire/swproto.h).
	h.phase = u.src_node == 0 || u.src_node == sw::kPhaseAbove ? uint8_t(u.src_node)
								   : uint8_t(j.up + 1);
	if (j.inline_mode) {
		sw::Task t;
		t.node = sw::kNodeSwitch;
		t.nodes = j.nodes;
		t.members = j.members;
		t.subtree = j.members;
		t.seg_req = j.granted;
		t.plane = uint8_t(j.plane);
		uint8_t tb[sw::kTaskBytes];
		t.store(tb);
		h.flags |= kCethInline;
		send_to(j, j.parent, j.parent_local, 0, kCollData, h, tb, u.data, u.len, &u.crc);
	} else {
		send_to(j, j.parent, j.parent_local, 0, kCollData, h, nullptr, u.data, u.len,
			&u.crc);
	}
	u.lent = multi() ? 0 : tx().tx_lend_mark();
}

// A child's partial of the unit's block is here (its first copy).
void Switch::note_arrival(Job &j, uint32_t unit, const Child &c, uint64_t at)
{
	const size_t nc = j.children.size();
	if (j.arrive.size() != size_t(j.granted) * nc) {
		if (multi())
			return; // sized at the grant; not resized under other workers
		size_arrive(j);
	}
	j.arrive[unit * nc + size_t(&c - j.children.data())] = at;
}

// A block's results to every child, each telling (CETH rank_map) the
// block whose results went before it, plus 1: a member that lacks that
// one lost it on the way (one socket keeps the order) and asks for it
// at once, where a result late because its block waited for another
// member's repeat is no loss.
void Switch::send_results(Job &j, uint32_t unit, uint64_t now)
{
	const uint64_t prev = multi() ? 0 : j.last_result;
	for (const Child &c : j.children)
		send_result(j, unit, c, now, prev);
	if (multi())
		return;
	const uint32_t seq = pool_.unit(j.seg_base + unit).seq;
	j.last_result = uint64_t(seq) + 1;
	// The newest block's results, while blocks are being repaired: no
	// later result will show a child that lost them that it did (see
	// find_tail).
	if (unit == j.newest && j.calm < Job::kCalmBlocks && j.skew) {
		j.again_at = now + std::max(j.skew, uint64_t(p_.tail_us) * util::kNsPerUs);
		j.again_unit = unit;
		j.again_seq = seq;
		j.again_prev = prev;
		if (!tail_next_ || j.again_at < tail_next_)
			tail_next_ = j.again_at;
	}
}

// The result to one child: the data if it needs it, else a token.  Its
// hold is the time since the child's partial arrived, less the fabric's
// part of it above us (a leaf's round trip to its spine, u.hold): the
// child's round trip less it is its own fabric's delay (nic/cc.h).
void Switch::send_result(Job &j, uint32_t unit, const Child &c, uint64_t now, uint64_t prev)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	Ceth h = unit_header(u, j.jid, j.key, unit);
	h.node_map = j.members;
	h.rank_map = prev;
	const size_t nc = j.children.size(), ci = size_t(&c - j.children.data());
	const uint64_t at = j.arrive.size() == size_t(j.granted) * nc ? j.arrive[unit * nc + ci]
								      : 0;
	if (u.hold == kHoldUnknown || !at || at > now || now - at < u.hold) {
		h.hold = kHoldUnknown;
	} else {
		h.hold = hold_add(0, now - at - u.hold);
		h.queue = hold_add(u.queue, now > u.rx_ns ? now - u.rx_ns : 0);
	}
	bool data = u.src_node == 0 ||
		    (u.src_node != sw::kPhaseAbove && (c.cover >> (u.src_node - 1) & 1));
	send_to(j, c.ep, c.local, c.qpn, kCollResult, h, nullptr, u.data, data ? u.len : 0, &u.crc);
	u.lent = multi() ? 0 : tx().tx_lend_mark();
}

// A NAK to child c: the partials of the nodes in `missing` (of its cover)
// for the block h names are not here.
static Ceth nak_header(const Ceth &block, uint64_t missing)
{
	Ceth h = block;
	h.src_node = sw::kNodeSwitch;
	h.flags = kCethNak;
	h.status = 0;
	h.node_map = missing;
	h.rank_map = 0;
	return h;
}

// The nodes whose partials the unit lacks: pending, and not waiting
// their turn in the fold.
uint64_t Switch::lacking(const Job &j, uint32_t unit)
{
	uint64_t missing = pool_.unit(j.seg_base + unit).node_pending;
	for (const Stash &s : j.stash[unit])
		missing &= ~s.cover;
	return missing;
}

// NAK every child (of those in `only`, by cover) whose partial the unit
// lacks.
void Switch::send_naks(Job &j, uint32_t unit, uint64_t only, uint64_t gap)
{
	const SegUnit &u = pool_.unit(j.seg_base + unit);
	const uint64_t missing = lacking(j, unit);
	const Ceth h = nak_header(unit_header(u, j.jid, j.key, unit), 0);
	for (const Child &c : j.children) {
		if (!(c.cover & missing & only))
			continue;
		Ceth n = h;
		n.node_map = c.cover & missing;
		n.rank_map = gap;
		ctr(j).naks++;
		send_to(j, c.ep, c.local, c.qpn, kCollResult, n, nullptr, nullptr, 0);
		if (unit < j.repaired.size())
			j.repaired[unit] = 1;
	}
}

// A child's ASK: its partial of the block went before, its result did not
// come back.  The result if we hold it, our partial up again if it is on
// its way there, NAKs to whoever the unit still lacks, or (a block never
// seen here) a NAK to the asker.
void Switch::on_ask(Job &j, Child &c, const In &p)
{
	const uint32_t unit = p.h.seg;
	SegUnit &u = pool_.unit(j.seg_base + unit);
	const bool holds = u.busy && u.seq == p.h.seq;
	if (p.paylen || (holds && (u.mid != p.h.mid || u.sid != p.h.sid))) {
		ctr(j).drop_block++;
		return;
	}
	if (u.busy && !holds && !seq_after(p.h.seq, u.seq)) {
		ctr(j).drop_stale++; // an older block: every node has its result
		return;
	}
	ctr(j).asks++;
	ctr(j).rx_packets++;
	ctr(j).delivered++;
	if (!multi())
		j.calm = 0;
	if (!holds) {
		Ceth h = nak_header(p.h, c.cover);
		h.rank_map = uint64_t(p.h.seq) + 1; // the ASK came after it
		h.jid = j.jid;
		h.job_key = j.key;
		ctr(j).naks++;
		send_to(j, c.ep, c.local, c.qpn, kCollResult, h, nullptr, nullptr, 0);
	} else if (u.kind == kUnitDone) {
		ctr(j).retrans_answered++;
		send_result(j, unit, c, now());
	} else if (u.kind == kUnitUp) {
		ctr(j).resent_up++;
		send_up(j, unit); // the parent may have lost ours, or we its result
	} else {
		// Still collecting: a NAK to the asker, naming it if its
		// partial is missing, else the nodes the unit waits for; and
		// then a NAK to each of those too.  They are NAKed as later
		// blocks complete, but a window stalled on this very block
		// completes none, and a member whose repeat (or NAK) was lost
		// again would wait for its own probe: the others' probes
		// reach it sooner (a member sends a partial again once a round
		// trip at most, however many NAKs name it).
		const uint64_t missing = lacking(j, unit);
		const uint64_t mine = missing & c.cover;
		Ceth h = nak_header(unit_header(u, j.jid, j.key, unit), mine ? mine : missing);
		if (mine)
			h.rank_map = uint64_t(p.h.seq) + 1; // the ASK came after it
		ctr(j).naks++;
		send_to(j, c.ep, c.local, c.qpn, kCollResult, h, nullptr, nullptr, 0);
		if (!mine)
			send_naks(j, unit, ~c.cover);
	}
}

void Switch::on_data(const In &p0)
{
	In p = p0;
	sw::Task t;
	bool inl = p.h.flags & kCethInline;
	if (inl) {
		if (p.paylen < sw::kTaskBytes) {
			gone().drop_malformed++;
			return;
		}
		t = sw::Task::load(p.payload);
		p.payload += sw::kTaskBytes;
		p.paylen -= uint32_t(sw::kTaskBytes);
	}
	Job *jp = job_for(p, inl ? &t : nullptr, inl);
	if (!jp)
		return;
	Job &j = *jp;
	touch(j, now());
	if (inl) {
		if (add_child(j, p, t))
			return;
		try_grant(j);
	}
	Child *c = child_of(j, p, inl ? &t : nullptr);
	if (!c || c->cover != p.h.node_map) {
		ctr(j).drop_node++;
		return;
	}
	if (j.state != State::granted) {
		ctr(j).drop_busy++;
		if (j.state == State::denied) {
			Ceth h;
			h.src_node = sw::kNodeSwitch;
			h.jid = j.jid;
			h.status = 4; // CollStatus::denied
			h.node_map = c->cover;
			h.job_key = j.key;
			send_to(j, c->ep, c->local, c->qpn, kCollConfigAck, h, nullptr, nullptr, 0);
		}
		return;
	}
	if (j.tdm && !tdm_holds(j))
		return;
	const size_t es = dtype_size(Dtype(p.h.dtype));
	// phase b + 1 names the child of bit b (the one that needs the
	// result's data): one of ours, before send_result shifts by it (found
	// by fuzz_switch_rx: phase 116); kPhaseAbove only in a tree.
	const uint8_t ph = p.h.phase;
	const bool phase_ok = ph == 0 ||
			      (ph == sw::kPhaseAbove && (j.has_parent || c->is_switch)) ||
			      (ph <= 64 && (j.subtree >> (ph - 1) & 1));
	if (p.h.seg >= j.granted || !phase_ok || p.paylen > pool_.unit_bytes() || !es ||
	    p.paylen % es || !op_supported(RedOp(p.h.op), Dtype(p.h.dtype))) {
		ctr(j).drop_block++;
		return;
	}
	// The unit is this worker's until its packet is handled.
	std::unique_lock<std::mutex> held;
	if (std::mutex *m = unit_lock(j, p.h.seg))
		held = std::unique_lock<std::mutex>(*m);
	if (p.h.flags & kCethAsk)
		return on_ask(j, *c, p);
	take_partial(j, *c, p);
}

// A child's partial for a unit of a granted job, checked: fold it, answer
// a repeat, or claim the unit for a newer block.
void Switch::take_partial(Job &j, const Child &c, const In &p)
{
	ctr(j).data++;
	ctr(j).rx_packets++;
	ctr(j).rx_bytes += p.paylen;
	const uint32_t unit = p.h.seg;
	SegUnit &u = pool_.unit(j.seg_base + unit);
	if (u.busy && u.seq == p.h.seq) {
		if (u.mid != p.h.mid || u.sid != p.h.sid) {
			ctr(j).drop_block++; // one block number, two blocks: not a member's
			return;
		}
		if ((u.node_pending & p.h.node_map) == p.h.node_map) {
			// Its first copy is still to come for this block.
			bool stashed = false;
			for (const Stash &s : j.stash[unit])
				stashed |= s.cover == p.h.node_map;
			if (!stashed) {
				if (p.paylen && p.paylen != u.len && u.len) {
					ctr(j).drop_block++;
					return;
				}
				if (p.paylen && !u.len)
					u.len = p.paylen;
				if (p.h.phase != sw::kPhaseAbove)
					u.src_node = p.h.phase; // the leaf below it knows
				ctr(j).delivered++;
				note_arrival(j, unit, c, p.rx_ns);
				if ((p.h.flags & kCethRetrans) && unit < j.repaired.size()) {
					j.repaired[unit] = 1;
					tail_answered(j, p.rx_ns);
				}
				fold(j, unit, p.h.node_map, p.payload, p.paylen);
				find_gap(j, c, unit, p);
				return;
			}
		}
		// A repeat: never reduced again.  Answer it from what we have.
		ctr(j).duplicates++;
		if (u.kind == kUnitDone) {
			ctr(j).retrans_answered++;
			send_result(j, unit, c, now());
		} else if (u.kind == kUnitUp) {
			ctr(j).resent_up++;
			send_up(j, unit); // the parent may have lost ours
		}
		return;
	}
	if (u.busy && !seq_after(p.h.seq, u.seq)) {
		ctr(j).drop_stale++; // an older block: every node has its result
		return;
	}
	if (u.busy && u.kind != kUnitDone) {
		// A newer block while this one is unfinished: not possible for
		// members keeping the window.
		ctr(j).drop_busy++;
		return;
	}
	tx().tx_reclaim(u.lent); // packets may still be sent from its last result
	pool_.release(j.seg_base + unit);
	unstash(j, unit);
	pool_.acquire(j.seg_base + unit, j.jid, p.h.mid, p.h.sid, RedOp(p.h.op), Dtype(p.h.dtype),
		      0, j.subtree, 0);
	u.seq = p.h.seq;
	u.kind = kUnitCollecting;
	u.hop = p.h.coll;
	u.src_node = p.h.phase;
	u.len = p.paylen;
	ctr(j).delivered++;
	note_arrival(j, unit, c, p.rx_ns);
	if (unit < j.repaired.size())
		j.repaired[unit] = (p.h.flags & kCethRetrans) ? 1 : 0;
	if (p.h.flags & kCethRetrans)
		tail_answered(j, p.rx_ns);
	arm_tail(j, unit, p.rx_ns);
	fold(j, unit, p.h.node_map, p.payload, p.paylen);
	find_gap(j, c, unit, p);
}

// The tail.  Where members go on sending, a lost partial shows by the
// member's next one (find_gap) or by later blocks completing
// (find_missing), and a lost result by the next result, which names it
// (send_results).  The last blocks of a message have none after them: a
// partial or a result lost there waited for its member's probe, which
// counts from the member's last result, and at 64 members and 5 % loss
// results keep coming for a while (blocks waiting on others' repeats):
// 20-27 us of a 90 us message.  So:
// - when no later block has begun twice as long after the newest block's
//   first partial came as a clean block's partials take to arrive (skew)
//   and eight times as long as blocks of a message begin apart (pace),
//   whoever that block and the 8 blocks behind it still lack is NAKed;
//   again after twice the round trip the NAKs' first repeat took,
//   doubling, four times at most, while any lacks a partial.  A member
//   that has not sent that block yet takes the NAK for what holds it up
//   (on_nak, urged): its oldest block without a result;
// - the newest block's results, when no later block has begun by skew
//   after they went, go again to every child, while blocks are being
//   repaired (a repair among the last kCalmBlocks, or an ASK): a child
//   that lost the first copy has it then, and its chain names the block
//   before it, which the child asks for at once if it lacks it.
// Not before a clean block is seen, nor with several workers (no order).
uint64_t Switch::tail_wait(const Job &j) const
{
	return std::max(2 * j.skew + 8 * j.pace, uint64_t(p_.tail_us) * util::kNsPerUs);
}

void Switch::arm_tail(Job &j, uint32_t unit, uint64_t first)
{
	if (multi() || j.repaired.size() != j.granted || !j.skew)
		return;
	bool same = false; // the block before it was of the same message
	if (j.newest < j.granted) {
		const SegUnit &n = pool_.unit(j.seg_base + j.newest);
		const SegUnit &u = pool_.unit(j.seg_base + unit);
		if (n.busy && n.jid == j.jid && unit != j.newest && !seq_after(u.seq, n.seq))
			return;
		same = n.busy && n.jid == j.jid && n.mid == u.mid;
	}
	// The pace within a message: the time between two messages is the
	// application's.
	if (same && first > j.begun_at)
		j.pace = j.pace ? j.pace - j.pace / 8 + (first - j.begun_at) / 8
				: first - j.begun_at;
	j.begun_at = first;
	j.newest = unit;
	j.tail_tries = 0;
	j.tail_at = first + tail_wait(j);
	j.again_at = 0;
	if (!tail_next_ || j.tail_at < tail_next_)
		tail_next_ = j.tail_at;
}

void Switch::find_tail(Job &j, uint64_t now)
{
	if (j.state != State::granted || j.newest >= j.granted) {
		j.tail_at = j.again_at = 0;
		return;
	}
	const SegUnit &n = pool_.unit(j.seg_base + j.newest);
	if (j.again_at && now >= j.again_at) {
		j.again_at = 0;
		if (j.newest == j.again_unit && n.busy && n.jid == j.jid && n.kind == kUnitDone &&
		    n.seq == j.again_seq) {
			for (const Child &c : j.children)
				send_result(j, j.newest, c, now, j.again_prev);
			ctr(j).results_again += j.children.size();
		}
	}
	if (!j.tail_at || now < j.tail_at)
		return;
	j.tail_at = 0;
	if (!n.busy || n.jid != j.jid)
		return;
	const uint64_t before = ctr(j).naks;
	bool open = false;
	for (uint32_t d = 0; d <= sw::kGapLook && 2 * d < j.granted; d++) {
		const uint32_t v = (j.newest + j.granted - d) % j.granted;
		const SegUnit &w = pool_.unit(j.seg_base + v);
		if (!w.busy || seq_after(w.seq, n.seq) || (d && !seq_after(n.seq, w.seq)))
			break;
		if (w.kind == kUnitCollecting && lacking(j, v)) {
			open = true;
			send_naks(j, v, ~0ull);
		}
	}
	ctr(j).tail_naks += ctr(j).naks - before;
	if (!open || ++j.tail_tries >= 4)
		return;
	// Again once the repeats NAKed could be here (twice the members'
	// round trip the last ones took), doubling: a repeat lost too.
	if (ctr(j).naks != before)
		j.tail_nak_at = now;
	const uint64_t wait = j.nak_rtt ? 2 * j.nak_rtt : tail_wait(j);
	j.tail_at = now + (wait << (j.tail_tries - 1));
}

// A repeat came: the first after the tail's NAKs tells the members'
// round trip (the least of the last few, growing by an eighth each).
void Switch::tail_answered(Job &j, uint64_t at)
{
	if (!j.tail_nak_at || at <= j.tail_nak_at)
		return;
	const uint64_t rtt = at - j.tail_nak_at;
	j.nak_rtt = j.nak_rtt ? std::min(rtt, j.nak_rtt + j.nak_rtt / 8) : rtt;
	j.tail_nak_at = 0;
}

// The tails due by now, and when the next one is.
void Switch::tails(uint64_t now)
{
	if (!tail_next_ || now < tail_next_)
		return;
	tail_next_ = 0;
	for (auto &[jid, j] : jobs_) {
		find_tail(j, now);
		for (uint64_t t : {j.tail_at, j.again_at})
			if (t && (!tail_next_ || t < tail_next_))
				tail_next_ = t;
	}
}

// A member's first copy of a block is here: the blocks it sent before on
// this plane came before it (a member sends its blocks in order, and one
// socket keeps the order), so a unit just behind still waiting for this
// member's partial lost it.  NAKed at once, each once: the next block's
// partial finds it no longer missing (or NAKed before, by this very
// walk).  Where the other members' partials complete later blocks
// (find_missing) the loss is found too, but at 64 members and 5 % loss
// nearly every block lacks someone's partial, few complete, and the
// losses waited for the members' ASKs.  Not from a leaf (its partials go
// up as its blocks complete, in no order) nor with several workers.
void Switch::find_gap(Job &j, const Child &c, uint32_t unit, const In &p)
{
	if (multi() || c.is_switch || (p.h.flags & kCethRetrans))
		return;
	const SegUnit &u = pool_.unit(j.seg_base + unit);
	for (uint32_t d = 1; d <= sw::kGapLook && 2 * d < j.granted; d++) {
		const uint32_t v = (unit + j.granted - d) % j.granted;
		const SegUnit &w = pool_.unit(j.seg_base + v);
		if (!w.busy || w.kind != kUnitCollecting || !seq_after(u.seq, w.seq) ||
		    !(lacking(j, v) & c.cover))
			return;
		send_naks(j, v, c.cover, uint64_t(u.seq) + 1);
	}
}

// A result from our parent: keep it and send it down.
void Switch::on_result(const In &p)
{
	Job *jp = job_for(p, nullptr, false);
	if (!jp)
		return;
	Job &j = *jp;
	if (!j.has_parent || !(p.src == j.parent)) {
		ctr(j).drop_node++;
		return;
	}
	if (p.h.seg >= j.granted) {
		ctr(j).drop_block++; // from the parent, but no unit of ours: as DATA's
		return;
	}
	touch(j, now());
	std::unique_lock<std::mutex> held;
	if (std::mutex *m = unit_lock(j, p.h.seg))
		held = std::unique_lock<std::mutex>(*m);
	SegUnit &u = pool_.unit(j.seg_base + p.h.seg);
	if (!u.busy || u.seq != p.h.seq || u.mid != p.h.mid || u.sid != p.h.sid) {
		ctr(j).drop_stale++;
		return;
	}
	if (p.h.flags & kCethNak) {
		// The parent lacks our partial: up again, if it is ours to send.
		if (u.kind != kUnitUp || p.paylen) {
			ctr(j).drop_stale++;
			return;
		}
		ctr(j).delivered++;
		ctr(j).resent_up++;
		send_up(j, p.h.seg);
		return;
	}
	if (u.kind == kUnitDone) {
		ctr(j).duplicates++;
		return;
	}
	if (u.kind != kUnitUp || p.paylen > pool_.unit_bytes()) {
		ctr(j).drop_block++;
		return;
	}
	ctr(j).rx_packets++;
	ctr(j).rx_bytes += p.paylen;
	ctr(j).delivered++;
	tx().tx_reclaim(u.lent); // our partial may still be on its way up from it
	if (p.paylen)
		memcpy(u.data, p.payload, p.paylen);
	const uint32_t len = std::max(u.len, p.paylen);
	u.kind = kUnitDone;
	pool_.settle(j.seg_base + p.h.seg);
	if (len == p.paylen)
		u.crc = p.tail_crc;
	u.len = len;
	if (len != p.paylen)
		seal(u);
	// The fabric's part of the wait since our partial went up: the round
	// trip to the parent less the parent's own holding (kHoldUnknown: the
	// parent could not say, and nor can we).
	const uint64_t up = p.rx_ns > u.rx_ns ? p.rx_ns - u.rx_ns : 0;
	u.hold = p.h.hold == kHoldUnknown || up < p.h.hold ? kHoldUnknown
							   : hold_add(0, up - p.h.hold);
	u.queue = hold_add(u.queue, p.h.queue);
	u.rx_ns = p.rx_ns; // ready here
	ctr(j).results++;
	send_results(j, p.h.seg, Switch::now());
}

} // namespace ibv_coll::emu
