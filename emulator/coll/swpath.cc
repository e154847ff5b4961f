// The switch path: a member NIC's side of in-network aggregation
// (wire/swproto.h).  The NIC reduces its local ranks, sends each block's
// node partial once to the switch of the block's plane, and gets the
// result back; the result is the acknowledgement.  At most W blocks are
// outstanding past the oldest without its result.  A lost partial is sent
// again when the switch NAKs it (it saw later blocks complete without it);
// a lost result is asked for (ASK, no payload) when later results show the
// gap; a block whose result does not come back in time is asked for, then
// sent again (the switch answers a repeat from its shadow copy, never
// reducing it twice).
#include "coll/coll_engine.h"

#include "nic/nic.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/swproto.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

namespace {

uint64_t bits(uint16_t n)
{
	return n >= 64 ? ~0ull : (1ull << n) - 1;
}

} // namespace

// Seg units asked of each switch: the job's range, at most what the
// CETH's 16-bit unit field can name.
uint32_t SwitchPath::request(const CollJob &job) const
{
	return std::min<uint32_t>(job.cfg.seg_count, 0xffff);
}

bool SwitchPath::wanted(const CollJob &job) const
{
	const JobConfig &c = job.cfg;
	return c.nodes() > 1 && c.sw.on && c.topology != Topology::ring &&
	       job.sw.phase != CollJob::SwPhase::fallback;
}

const Endpoint &SwitchPath::leaf(const CollJob &job, uint32_t plane) const
{
	const SwitchConfig &s = job.cfg.sw;
	uint32_t leaf = s.leaves > 1 ? s.member_leaf[job.cfg.node] : 0;
	return s.leaf[plane * s.leaves + leaf];
}

// The task information for plane's leaf (wire/swproto.h).
sw::Task SwitchPath::task(const CollJob &job, uint32_t plane) const
{
	const JobConfig &c = job.cfg;
	const SwitchConfig &s = c.sw;
	sw::Task t;
	t.node = c.node;
	t.nodes = c.nodes();
	t.qpn = job.qpn;
	t.members = s.top_bits;
	t.subtree = s.leaf_bits;
	t.seg_req = request(job);
	t.plane = uint8_t(plane);
	if (s.leaves > 1) {
		const uint32_t pod = s.pods > 1 ? s.leaf_pod[s.member_leaf[c.node]] : 0;
		const Endpoint &spine = s.spine[plane * s.pods + pod];
		t.up = s.leaf_up;
		memcpy(t.parent_ip, spine.ip.b, 16);
		t.parent_port = spine.port;
	}
	return t;
}

// Three levels: the spine as the core's child (wire/swproto.h).
bool SwitchPath::above(const CollJob &job, uint32_t plane, sw::Above *a) const
{
	const SwitchConfig &s = job.cfg.sw;
	if (s.pods <= 1)
		return false;
	a->subtree = s.pod_bits;
	a->up = s.leaf_pod[s.member_leaf[job.cfg.node]];
	memcpy(a->parent_ip, s.core[plane].ip.b, 16);
	a->parent_port = s.core[plane].port;
	return true;
}

uint8_t SwitchPath::phase(const CollJob &job, int o)
{
	const SwitchConfig &s = job.cfg.sw;
	if (o < 0)
		return 0;
	if (s.leaves > 1 && s.member_leaf[size_t(o)] != s.member_leaf[job.cfg.node])
		return sw::kPhaseAbove;
	return uint8_t(s.member_bit[size_t(o)] + 1);
}

void SwitchPath::send_config(CollJob &job, uint64_t now, bool all)
{
	const JobConfig &c = job.cfg;
	for (uint32_t p = 0; p < c.sw.planes; p++) {
		if (job.sw.granted[p] && !all)
			continue;
		uint8_t tb[sw::kTaskBytes + sw::kAboveBytes];
		task(job, p).store(tb);
		sw::Above a;
		const bool three = above(job, p, &a);
		if (three)
			a.store(tb + sw::kTaskBytes);
		Ceth h;
		h.src_node = c.node;
		h.jid = c.jid;
		h.node_map = my_bit(job);
		h.job_key = c.key;
		u_.send_ep(job, leaf(job, p), leaf(job, p).qpn, kCollConfig, h, tb,
			   sw::kTaskBytes + (three ? sw::kAboveBytes : 0), {});
	}
	job.sw.cfg_sent = now;
}

// Keepalive: a granted job CONFIGs its switches again when this is due
// (0: never).  Besides the switch's third of its idle timeout, a message
// on the switch path that has completed nothing for a while CONFIGs
// again, at first kStallNs after its last progress, then at twice the
// stall so far, at most every kStallMaxNs: a switch that restarted knows
// no job and drops its DATA, and learns it again from these (a live
// switch answers its grant again, and the members lose nothing), within
// about a second of coming back rather than at the next keepalive (20 s
// with the switch's default idle timeout), inside the job's timeout.
uint64_t SwitchPath::keep_due(const CollJob &job) const
{
	if (job.sw.phase != CollJob::SwPhase::ready)
		return 0;
	uint64_t due = job.sw.keep_ns ? job.sw.cfg_sent + job.sw.keep_ns : 0;
	const Message *m = job.active.get();
	// (An inline job's DATA carries its task: a new switch learns it
	// from them.)
	if (m && m->sw.on && !m->sw.waiting && !job.cfg.sw.inline_task) {
		constexpr uint64_t kStallNs = 100 * util::kNsPerMs,
				   kStallMaxNs = 800 * util::kNsPerMs;
		const uint64_t p = m->last_progress, sent = job.sw.cfg_sent;
		const uint64_t stall = sent > p ? std::clamp(sent - p, kStallNs, kStallMaxNs) : 0;
		const uint64_t d = sent > p ? sent + stall : p + kStallNs;
		due = due && due < d ? due : d;
	}
	return due;
}

// The switch path's first message: ask for Seg units (or, inline, assume
// them), then start.
void SwitchPath::start(Qp &qp, CollJob &job, uint64_t now)
{
	const SwitchConfig &s = job.cfg.sw;
	if (job.sw.phase == CollJob::SwPhase::none) {
		job.sw.granted.assign(s.planes, 0);
		job.sw.heard.assign(s.planes, 0);
		job.sw.heard_at = 0;
		if (s.inline_task) {
			job.sw.granted.assign(s.planes, request(job));
			ready(job);
		} else {
			job.sw.phase = CollJob::SwPhase::configuring;
			job.sw.cfg_start = now;
			send_config(job, now);
		}
	}
	Message &m = *job.active;
	m.sw.on = true;
	if (job.sw.phase == CollJob::SwPhase::configuring) {
		m.sw.waiting = true;
		return;
	}
	launch(qp, job, now);
}

void SwitchPath::ready(CollJob &job)
{
	const SwitchConfig &s = job.cfg.sw;
	uint32_t g = *std::min_element(job.sw.granted.begin(), job.sw.granted.end());
	uint32_t w = std::min<uint64_t>(uint64_t(s.planes) * g / 2, UINT32_MAX);
	uint32_t want = s.window ? s.window : u_.host().params.cfg.coll_window;
	// Blocks in flight are at most the window; the blocks between the
	// oldest without its result and the next to go, at most half the
	// units (no two of them meet in one unit).  A block waiting for its
	// repeat thus holds up the window only once the units run out, not
	// once W blocks went after it (selective repeat, as IRN's).
	job.sw.span = w;
	job.sw.window = std::min(w, want);
	job.sw.phase = CollJob::SwPhase::ready;
	IBVC_INFO("coll", "{}: job {} through the switch: {} plane(s), {} Seg units, window {}",
		  u_.host().params.name, job.cfg.jid, s.planes, g, job.sw.window);
}

void SwitchPath::launch(Qp &qp, CollJob &job, uint64_t now)
{
	Message &m = *job.active;
	m.sw.waiting = false;
	if (job.sw.phase == CollJob::SwPhase::fallback) {
		// Execution control moves it to the ring (CollEngine::settle).
		m.sw.on = false;
		return;
	}
	if (job.sw.phase == CollJob::SwPhase::failed)
		return u_.fail(qp, job, job.sw.fail, false,
			       job.sw.fail == CollStatus::denied ? "the switch refused the job"
								 : "no answer from the switch");
	if (!job.sw.window)
		return u_.fail(qp, job, CollStatus::buffer_err, true,
			       "the switch granted too few Seg units for a window");
	if (job.sw.tdm && m.sw.admit != 2) {
		m.sw.waiting = true; // for the switch's decision on this message
		return admit_ask(job, m, now);
	}
	go(qp, job, m, now);
}

// Message m's blocks are numbered after those of the messages before it
// (every member numbers them alike: they start in MID order), and go.
void SwitchPath::go(Qp &qp, CollJob &job, Message &m, uint64_t now)
{
	m.ran = kRanSwitch | (job.cfg.sw.leaves > 1 ? kRanHierarchy : 0);
	m.sw.gs0 = job.sw.next_gs;
	job.sw.next_gs += m.nblocks;
	m.sw.base = m.sw.next = m.sw.high = 0;
	job.sw.reo_wnd -= job.sw.reo_wnd / 8; // what the path did lately counts most
	job.sw.asks /= 2;
	job.sw.asks_needless /= 2;
	job.sw.naks /= 2;
	job.sw.naks_needless /= 2;
	if (job.cfg.sw.e2e_ack)
		m.sw.acked.assign(m.nblocks, job.cfg.node == 0 ? 1 : 0);
	m.last_progress = now;
	pump(qp, job, now);
}

// Which node needs block sid's data (the others get a token): -1 for all.
int SwitchPath::owner(const Message &m, uint32_t sid) const
{
	switch (m.coll) {
	case CollOp::reduce: return m.root_node;
	case CollOp::reduce_scatter: return m.chunks[m.chain[sid].chunk].fin;
	default: return -1;
	}
}

void SwitchPath::send_block(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool again,
			    bool ask)
{
	const JobConfig &c = job.cfg;
	const BlockDesc &b = m.chain[sid];
	const uint32_t len = b.elems * m.es;
	const uint64_t gs = m.sw.gs0 + sid;
	const uint32_t plane = sw::plane_of(gs, c.sw.planes);
	// The partial is reduced straight into the packet, or sent from the
	// application's buffer when there is nothing to reduce.
	const uint32_t ext_len = c.sw.inline_task ? uint32_t(sw::kTaskBytes) : 0;
	Payload pl;
	if (ask) {
		// No payload: the switch has it, or says it has not.
	} else if (m.coll == CollOp::bcast || m.coll == CollOp::allgather) {
		// Only the block's owner has data; the others send a token.
		if ((m.coll == CollOp::bcast && m.root_node == c.node) ||
		    (m.coll == CollOp::allgather && m.chunks[b.chunk].fin == c.node)) {
			if (!u_.result_source(job, m, sid, &pl.data)) {
				m.dma_error = true;
				return;
			}
			pl.len = len;
			pl.lend = true;
		}
	} else {
		if (!u_.local_data(job, m, sid, u_.tx_payload(ext_len), &pl.data)) {
			m.dma_error = true;
			return;
		}
		pl.len = len;
		pl.lend = true; // unless it is in place
	}
	Ceth h = u_.header(job, m, sid);
	h.seg = uint16_t(sw::unit_of(gs, c.sw.planes, job.sw.granted[plane]));
	h.seq = uint32_t(gs); // what orders the uses of a unit (wire/swproto.h)
	h.node_map = my_bit(job);
	h.rank_map = bits(m.ranks);
	int o = owner(m, sid);
	h.phase = phase(job, o);
	if (again)
		h.flags |= kCethRetrans;
	if (ask) {
		h.flags |= kCethAsk;
		job.sw.asks++;
	}
	const Endpoint &to = leaf(job, plane);
	if (c.sw.inline_task) {
		uint8_t tb[sw::kTaskBytes];
		task(job, plane).store(tb);
		h.flags |= kCethInline;
		u_.send_ep(job, to, to.qpn, kCollData, h, tb, ext_len, pl);
	} else {
		u_.send_ep(job, to, to.qpn, kCollData, h, nullptr, 0, pl);
	}
	if (pl.len)
		u_.note_src_lent(m, sid);
	u_.arm(job, m, m.o_pending, sid, now, again);
	PendingSet::Entry &e = *m.o_pending.find(sid);
	e.asks = ask ? uint8_t(std::min(e.asks + 1, 255)) : 0;
	if (!ask) {
		e.data_sent = now;
		e.next_at_data = uint32_t(next_out(job));
		e.nak_lead = 0;
	}
	if (again && !ask) {
		u_.ctr.retrans_data++;
		u_.host().cc_counters().retrans_bytes += pl.len;
	}
}

// Every plane's leaf has answered (perhaps only "heard, wait").
bool SwitchPath::all_heard(const CollJob &job) const
{
	return std::count(job.sw.heard.begin(), job.sw.heard.end(), uint8_t(0)) == 0;
}

// CONFIG goes again every retransmission timeout until every leaf has
// answered, then (while they wait for late members) after as long as it
// has waited so far, from the timeout up to 100 ms: a repeat is what
// recovers a lost grant, and a grant lost when the last member came
// costs the wait so far (the others, granted, wait for this one's
// partials), not 100 ms (ibv_coll_sim, 16 hosts at 5 % loss: the first
// message took 100 ms).
uint64_t SwitchPath::config_interval(const CollJob &job) const
{
	const uint64_t rto = u_.rto_ns(job);
	if (!all_heard(job))
		return rto;
	const uint64_t waited = job.sw.heard_at && job.sw.cfg_sent > job.sw.heard_at
					? job.sw.cfg_sent - job.sw.heard_at
					: 0;
	return std::clamp<uint64_t>(waited, rto, std::max<uint64_t>(rto, 100 * util::kNsPerMs));
}

// Configuring: a switch that never answers fails the job (or, with AUTO,
// sends it round the ring) after IBV_COLL_EMU_SW_CONFIG_MS; one that
// answers "heard, wait" is waited for as long as the collective's own
// timeout allows, since members may start their first collective far
// apart.
void SwitchPath::config_timers(Qp &qp, CollJob &job, uint64_t now)
{
	if (!all_heard(job)) {
		uint64_t limit = uint64_t(u_.host().params.cfg.sw_config_ms) * util::kNsPerMs;
		if (now - job.sw.cfg_start > limit) {
			if (job.cfg.topology == Topology::autosel) {
				IBVC_WARN("coll",
					  "{}: job {}: no answer from the switch, using the ring",
					  u_.host().params.name, job.cfg.jid);
				job.sw.phase = CollJob::SwPhase::fallback;
				tell_fallback(job); // the others may have heard it (swadmit.cc)
			} else {
				job.sw.phase = CollJob::SwPhase::failed;
				job.sw.fail = CollStatus::timeout;
			}
			if (job.active && job.active->sw.waiting)
				launch(qp, job, now);
			return;
		}
	} else if (job.active && job.active->sw.waiting && now > job.active->last_progress &&
		   now - job.active->last_progress > u_.coll_timeout_ns(job)) {
		u_.ctr.timeouts++;
		return u_.fail(qp, job, CollStatus::timeout, true,
			       "the switch still waits for other members of the job");
	}
	if (now - job.sw.cfg_sent > config_interval(job))
		send_config(job, now);
}

// A block leaves the window when its result is here and, in end-to-end
// mode, node 0 has acknowledged it.
void SwitchPath::release_block(CollJob &job, Message &m, uint32_t sid, uint64_t now,
			       Holding endpoint)
{
	if (!m.final_[sid] || (!m.sw.acked.empty() && !m.sw.acked[sid]))
		return;
	if (PendingSet::Entry *e = m.o_pending.find(sid)) {
		if (!e->again && endpoint.known()) {
			u_.rtt_sample(job, now - e->sent, endpoint);
			job.sw.cc.on_rtt_sample(now - e->sent, endpoint, now);
		}
		job.sw.cc.on_ack(1, now);
		m.o_pending.erase(sid);
	}
	while (m.sw.base < m.nblocks && m.final_[m.sw.base] &&
	       (m.sw.acked.empty() || m.sw.acked[m.sw.base]))
		m.sw.base++;
}

// End-to-end mode: node 0 acknowledges block sid to node `to` (or, with
// ask, another node asks node 0 for it).
void SwitchPath::send_ack(const CollJob &job, uint32_t mid, uint32_t sid, uint16_t to, bool ask)
{
	Ceth h;
	h.src_node = job.cfg.node;
	h.jid = job.cfg.jid;
	h.mid = mid;
	h.sid = sid;
	h.node_map = my_bit(job);
	h.job_key = job.cfg.key;
	if (ask)
		h.flags |= kCethRetrans;
	u_.send(job, to, kCollAck, h);
}

// End-to-end mode: an ACK from node 0, or (at node 0) a request for one.
void SwitchPath::on_ack(Qp &qp, CollJob &job, const CollPacket &p)
{
	if (!job.cfg.sw.e2e_ack) {
		u_.ctr.malformed++;
		return;
	}
	const uint64_t now = u_.host().now();
	if (job.cfg.node == 0) {
		if (!(p.h.flags & kCethRetrans)) {
			u_.ctr.malformed++;
			return;
		}
		// Acknowledge it if we hold the result (or the message is over).
		const Message *m = job.active ? job.active.get() : nullptr;
		if ((m && m->sw.on && p.h.mid == m->mid && p.h.sid < m->nblocks &&
		     m->final_[p.h.sid]) ||
		    (m ? seq_after(m->mid, p.h.mid) : !job.ahead(p.h.mid)))
			send_ack(job, p.h.mid, p.h.sid, p.h.src_node, false);
		return;
	}
	if (p.h.src_node != 0 || (p.h.flags & kCethRetrans)) {
		u_.ctr.malformed++;
		return;
	}
	if (!job.active || !job.active->sw.on || job.active->sw.waiting ||
	    p.h.mid != job.active->mid || p.h.sid >= job.active->nblocks) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *job.active;
	if (m.sw.acked[p.h.sid]) {
		u_.ctr.dup_dropped++;
		return;
	}
	m.sw.acked[p.h.sid] = 1;
	m.last_progress = now;
	release_block(job, m, p.h.sid, now, p.holding(now));
	pump(qp, job, now);
}

// CONFIG_ACK: a grant, a refusal, "heard, wait", or a tdm decision.
void SwitchPath::on_config_ack(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	const SwitchConfig &s = job.cfg.sw;
	if ((p.h.flags & kCethAdmit) && job.sw.phase != CollJob::SwPhase::configuring) {
		// A decision names its message; MID 0 is a grant repeated (the
		// answer to a keepalive), nothing new.
		if (p.h.mid)
			on_admit(qp, job, p);
		return;
	}
	if (job.sw.phase != CollJob::SwPhase::configuring) {
		if (p.h.status == uint8_t(CollStatus::denied) && job.active && job.active->sw.on) {
			// Inline: the switch could not take the job.
			u_.fail(qp, job, CollStatus::denied, true, "the switch refused the job");
		}
		return;
	}
	uint32_t plane = s.planes;
	for (uint32_t q = 0; q < s.planes; q++)
		if (leaf(job, q) == p.src)
			plane = q;
	if (plane == s.planes)
		return;
	// The first answer to the one CONFIG sent ("heard, wait", or the
	// grant to the member that completed the job) came at once: its
	// round trip is the job's first sample, as TCP's handshake gives
	// its first.  Before one a lost block waits a quarter of the
	// retransmission timeout for its probe (5 ms); an answer slower than
	// that (its "wait" lost, the grant waited for the others) is no
	// better.
	if (job.sw.cfg_sent == job.sw.cfg_start && now > job.sw.cfg_sent &&
	    now - job.sw.cfg_sent < unsampled(job))
		first_sample(job, now - job.sw.cfg_sent);
	if (p.h.flags & kCethPending) {
		if (!job.sw.heard[plane])
			IBVC_DEBUG("coll", "{}: job {}: plane {}'s switch waits for other members",
				   u_.host().params.name, job.cfg.jid, plane);
		job.sw.heard[plane] = 1;
		if (!job.sw.heard_at && all_heard(job))
			job.sw.heard_at = now;
		ring_seen_answer(qp, job, true, now);
		return;
	}
	job.sw.heard[plane] = 1;
	on_grant(qp, job, p, plane, now);
}

// A plane's leaf granted the job Seg units, or refused it.
void SwitchPath::on_grant(Qp &qp, CollJob &job, const CollPacket &p, uint32_t plane, uint64_t now)
{
	const SwitchConfig &s = job.cfg.sw;
	// A switch sharing its pool by time serves one plane, no spine.
	const bool tdm_unusable = (p.h.flags & kCethAdmit) && (s.planes != 1 || s.leaves != 1);
	if (p.h.status || p.h.seg < 2 || tdm_unusable) {
		IBVC_WARN("coll", "{}: job {}: the switch refused it{}", u_.host().params.name,
			  job.cfg.jid,
			  job.cfg.topology == Topology::autosel ? ", using the ring" : "");
		job.sw.why = kRanRefused;
		if (job.cfg.topology == Topology::autosel) {
			job.sw.phase = CollJob::SwPhase::fallback;
		} else {
			job.sw.phase = CollJob::SwPhase::failed;
			job.sw.fail = CollStatus::denied;
		}
	} else {
		job.sw.tdm = p.h.flags & kCethAdmit;
		job.sw.granted[plane] = p.h.seg;
		// CETH seq: the switch's idle timeout in ms (0: it does not say).
		const uint64_t keep = uint64_t(p.h.seq) * util::kNsPerMs / 3;
		if (keep && (!job.sw.keep_ns || keep < job.sw.keep_ns))
			job.sw.keep_ns = keep;
		if (std::count(job.sw.granted.begin(), job.sw.granted.end(), 0u) == 0)
			ready(job);
	}
	if (job.sw.phase != CollJob::SwPhase::configuring && job.active && job.active->sw.waiting &&
	    !ring_seen_answer(qp, job, false, now))
		launch(qp, job, now);
}

// A RESULT (or NAK) names a block of the active message, from the leaf of
// the block's plane, with what it should carry.
bool SwitchPath::result_ok(const CollJob &job, const Message &m, const CollPacket &p) const
{
	const uint32_t sid = p.h.sid;
	const uint32_t planes = job.cfg.sw.planes;
	if (p.h.coll != uint8_t(m.coll) || p.h.seq != uint32_t(m.sw.gs0 + sid) ||
	    !(leaf(job, sw::plane_of(m.sw.gs0 + sid, planes)) == p.src))
		return false;
	if (p.h.flags & kCethNak)
		return p.paylen == 0;
	const uint32_t len = m.chain[sid].elems * m.es;
	const int o = owner(m, sid);
	const bool need = m.coll != CollOp::barrier && (o < 0 || o == job.cfg.node);
	return need ? p.paylen == len : p.paylen == 0 || p.paylen == len;
}

// A result from the switch: the block is done here.
void SwitchPath::on_result(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	const bool nak = p.h.flags & kCethNak;
	if (!nak)
		u_.ctr.rx_result++;
	Message *mp = job.running(p.h.mid);
	if (!mp || mp->path != this || !mp->sw.on || mp->sw.waiting) {
		u_.ctr.stale_dropped++;
		return;
	}
	Message &m = *mp;
	const uint32_t sid = p.h.sid;
	if (sid >= m.nblocks) {
		u_.ctr.bad_block++;
		return;
	}
	if (!result_ok(job, m, p)) {
		u_.ctr.malformed++;
		return;
	}
	m.sw.answered = true;
	if (m.final_[sid]) {
		u_.ctr.dup_dropped++;
		if (!nak)
			answered_twice(job, m, sid, now);
		return;
	}
	if (nak)
		return on_nak(job, m, p, now);
	const BlockDesc &b = m.chain[sid];
	const uint32_t len = b.elems * m.es;
	const int o = owner(m, sid);
	if (m.coll != CollOp::barrier && (o < 0 || o == job.cfg.node) && len) {
		const uint8_t *data = p.payload;
		if (m.op == RedOp::avg &&
		    (m.coll == CollOp::allreduce || m.coll == CollOp::reduce ||
		     m.coll == CollOp::reduce_scatter)) {
			memcpy(u_.scratch().data(), p.payload, len);
			avg_finalize(m.dtype, u_.scratch().data(), b.elems, job.cfg.total_ranks);
			data = u_.scratch().data();
		}
		if (!u_.write_result(job, m, sid, data)) {
			u_.fail(qp, job, CollStatus::local_err, true,
				"a local buffer is not accessible");
			return;
		}
	}
	m.final_[sid] = 1;
	m.finals++;
	m.last_progress = now;
	m.sw.high = std::max(m.sw.high, sid + 1);
	if (job.sw.tdm && m.finals == m.nblocks)
		admit_done(job, m);
	if (job.cfg.sw.e2e_ack && job.cfg.node == 0)
		for (uint16_t n = 1; n < job.cfg.nodes(); n++)
			send_ack(job, m.mid, sid, n, false);
	const Holding held = p.holding(now);
	if (PendingSet::Entry *e = m.o_pending.find(sid)) {
		spurious(job, *e, held, now);
		e->result_at = now;
	}
	// Results chain (rank_map) only from a switch of one worker, whose
	// results leave in block order: only there does a later message's
	// completion say that an older one's missing result was lost.  A
	// switch of several workers sends each worker's results in its own
	// time, and an older block behind in a busy worker's queue was ASKed
	// for, its members NAKed and their partials sent twice (4 workers on
	// 2 cores: tools.perf_wire_switch over its bound in 11 of 40 runs).
	const bool chain = p.h.rank_map != 0;
	find_gaps(job, m, sid, now, chain);
	if (chain && m.finals == m.nblocks && &m != job.active.get())
		overtaken(job, m, now);
	chained(job, p.h.rank_map, now);
	release_block(job, m, sid, now, held);
	pump(qp, job, now);
}

// The job leaves its switches (its QP is reset or destroyed).
// The job leaves its switches: whatever they hold for it (units, or a
// configuration still collecting, or a refusal) goes at once rather than
// at their idle timeout, so the job ID is free for the next run.
void SwitchPath::release(const CollJob &job)
{
	if (job.sw.phase == CollJob::SwPhase::none)
		return;
	// Three times, as an ABORT goes: a lost RELEASE would hold the units
	// until the switch's idle timeout, and refuse the job's next run.
	const SwitchConfig &s = job.cfg.sw;
	for (int i = 0; i < 3; i++) {
		for (uint32_t p = 0; p < s.planes; p++) {
			Ceth h;
			h.src_node = job.cfg.node;
			h.jid = job.cfg.jid;
			h.node_map = my_bit(job);
			h.job_key = job.cfg.key;
			u_.send_ep(job, leaf(job, p), leaf(job, p).qpn, kCollRelease, h, nullptr, 0,
				   {});
		}
	}
}

// The switch path as a strategy (coll/coll_path.h).
// A packet from one of the job's switches, or an ACK between members.
void SwitchPath::on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now)
{
	if (p.h.src_node != sw::kNodeSwitch)
		return on_ack(qp, job, p);
	if (p.kind == kCollConfigAck)
		return on_config_ack(qp, job, p, now);
	if (p.kind != kCollResult) {
		u_.ctr.malformed++;
		return;
	}
	on_result(qp, job, p, now);
}

void SwitchPath::on_timer(Qp &qp, CollJob &job, uint64_t now)
{
	timers(qp, job, now);
	if (job.active && qp.state == QpState::rts && !job.active->sw.waiting && job.active->sw.on)
		pump(qp, job, now);
}

bool SwitchPath::done(const CollJob &job) const
{
	const Message &m = *job.active;
	return m.sw.on && !m.sw.waiting && m.finals == m.nblocks && m.o_pending.empty();
}

} // namespace ibv_coll::emu
