// Time division of the Seg pool (ibv_coll_switchd(8) --policy tdm): the
// whole pool serves one message at a time.  Every member asks before each
// message (CONFIG flagged ADMIT, CETH mid); the switch decides once per
// (JID, MID), keeps the decision, and answers every member's request, first
// or repeated, with it: members agree because only the switch decides.
//
// decide(): another job's message holds the pool: refused (busy).  Else no
// other job's message is predicted to arrive while this one would hold the
// pool: granted.  Else the highest score() among this message and those
// predicted wins; the others are refused (scored out) and run the ring.
#include "switch/switch.h"

#include "wire/seqnum.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/roce.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

namespace {

// A job refused this many messages in a row wins every comparison, and
// the pool is reserved for it: the other jobs' messages are refused until
// it has had it.  So a job is refused at most kStarveLimit + (K - 1) * r
// messages in a row, K the jobs sharing the pool and r how many of its
// messages (running the ring) fit in one message of another job holding
// the pool.
constexpr uint32_t kStarveLimit = 4;
// Weight of a new observation in the exponentially weighted averages.
constexpr double kEwma = 0.25;
// Decisions a job keeps (its recent messages).
constexpr size_t kKeepDecisions = 16;

void ewma(double &avg, double x)
{
	avg = avg > 0 ? avg + kEwma * (x - avg) : x;
}

} // namespace

const char *policy_name(Policy p)
{
	switch (p) {
	case Policy::exclusive: return "exclusive";
	case Policy::tdm: return "tdm";
	default: return "spatial";
	}
}

bool parse_policy(const char *s, Policy *p)
{
	for (Policy q : {Policy::spatial, Policy::exclusive, Policy::tdm}) {
		if (!strcmp(s, policy_name(q))) {
			*p = q;
			return true;
		}
	}
	return false;
}

Switch::Job::Decision *Switch::decision(Job &j, uint32_t mid)
{
	for (Job::Decision &d : j.decided)
		if (d.mid == mid)
			return &d;
	return nullptr;
}

// CalcScore: the bytes a message saves over the ring per nanosecond it
// holds the pool, aged.  Per node the ring moves 2(N-1)/N of the message
// and takes 2(N-1) steps of latency; the switch moves the message once in
// 2 steps.  A step's latency is counted as one Seg unit's worth of bytes:
//   saved = bytes * (N-2)/N + 2(N-2) * unit_bytes + unit_bytes
//   score = saved / predicted pool-time * (1 + refusals in a row)
double Switch::score(const Job &j, uint64_t now) const
{
	(void)now;
	const double n = j.nodes;
	const double ub = pool_.unit_bytes();
	const double saved = j.bytes * (n - 2) / n + 2 * (n - 2) * ub + ub;
	const double dur = j.dur_ns > 0 ? j.dur_ns : 1e6;
	return saved / dur * (1 + j.starved);
}

uint8_t Switch::decide(Job &j, uint64_t now)
{
	if (hold_.on && hold_.jid != j.jid)
		return sw::kAdmitBusy;
	if (j.starved >= kStarveLimit)
		return 0;
	const double mine = j.dur_ns > 0 ? j.dur_ns : 1e6;
	const double s = score(j, now);
	for (const auto &kv : jobs_) {
		const Job &k = kv.second;
		if (k.jid == j.jid || !k.tdm || k.period_ns <= 0)
			continue;
		// Its next message: one period after its last, unless it has
		// fallen silent (two periods without one).
		const double next = double(k.last_start) + k.period_ns;
		if (double(now) - double(k.last_start) > 2 * k.period_ns)
			continue;
		// A starved job has the pool reserved: its next message takes it.
		if (k.starved >= kStarveLimit)
			return sw::kAdmitScored;
		if (next > double(now) + mine)
			continue; // after this one would be done
		if (score(k, now) > s)
			return sw::kAdmitScored;
	}
	return 0;
}

// The pool goes to the message (j, mid).  Another job's: the units are
// emptied first (every member of the last holder is done with them).
static void take_pool(SegPool &pool, Transport &port, uint32_t units)
{
	for (uint32_t i = 0; i < units; i++) {
		if (pool.unit(i).busy) {
			port.tx_reclaim(pool.unit(i).lent);
			pool.release(i);
		}
	}
}

void Switch::hold_end(uint64_t now, const char *why)
{
	if (!hold_.on)
		return;
	hold_.on = false;
	auto it = jobs_.find(hold_.jid);
	if (it == jobs_.end())
		return;
	Job &j = it->second;
	ctr(j).pool_us += util::elapsed_ns(now, hold_.since) / 1000;
	ewma(j.dur_ns, double(util::elapsed_ns(now, hold_.since)));
	IBVC_DEBUG("switch", "{}: job {} message {} leaves the pool: {}", p_.name, j.jid, hold_.mid,
		   why);
	for (uint32_t i = 0; i < j.stash.size(); i++)
		unstash(j, i);
}

// The holder's members fell silent for the job's timeout (one died): the
// pool is free again.
void Switch::hold_expire(uint64_t now)
{
	if (!hold_.on)
		return;
	auto it = jobs_.find(hold_.jid);
	uint64_t limit = (it != jobs_.end() && it->second.hold_ms ? it->second.hold_ms : 1000) *
			 util::kNsPerMs; // as next_deadline() expects
	if (util::elapsed_ns(now, hold_.last) > limit) {
		if (it != jobs_.end())
			IBVC_WARN("switch",
				  "{}: job {} message {}: members silent, the pool is free",
				  p_.name, hold_.jid, hold_.mid);
		hold_end(now, "silent");
	}
}

// DATA of a tdm job: only the message holding the pool (or the job's
// earlier ones, for late members) uses it.
bool Switch::tdm_holds(Job &j)
{
	if (!hold_.on || hold_.jid != j.jid) {
		ctr(j).drop_busy++;
		return false;
	}
	if (!multi() || hold_.last + util::kNsPerMs <= j.last_seen)
		hold_.last = uint64_t(j.last_seen);
	return true;
}

// A member asks whether message mid may use the pool.  CETH seq: the job's
// collective timeout in ms; rank_map: the message's bytes.
void Switch::on_admit(const In &p)
{
	Job *jp = job_for(p, nullptr, false);
	if (!jp)
		return;
	Job &j = *jp;
	Child *c = child_of(j, p);
	if (!c || c->cover != p.h.node_map || !j.tdm || j.state != State::granted) {
		ctr(j).drop_node++;
		return;
	}
	const uint64_t now = Switch::now();
	j.last_seen = now;
	// A member's first request is delivered, its repeat a duplicate
	// (answered again from the decision, taken once): each datagram is
	// counted once.
	Job::Decision *d = decision(j, p.h.mid);
	if (d && (d->heard & c->cover))
		ctr(j).duplicates++;
	else
		ctr(j).delivered++;
	if (!d) {
		uint8_t why;
		if (j.any_mid && !seq_after(p.h.mid, j.last_mid)) {
			why = sw::kAdmitRefused; // older than what we decided: never taken late
		} else {
			if (p.h.seq)
				j.hold_ms = p.h.seq;
			ewma(j.bytes, double(p.h.rank_map));
			if (j.any_mid)
				ewma(j.period_ns, double(util::elapsed_ns(now, j.last_start)));
			j.last_start = now;
			j.last_mid = p.h.mid;
			j.any_mid = true;
			why = decide(j, now);
		}
		if (!why) {
			if (hold_.on && hold_.jid == j.jid) {
				// The job's next message: its units' order carries on.
				ctr(j).pool_us += util::elapsed_ns(now, hold_.since) / 1000;
				ewma(j.dur_ns, double(util::elapsed_ns(now, hold_.since)));
			} else {
				take_pool(pool_, tx(), p_.units);
			}
			hold_ = Holder{true, j.jid, p.h.mid, now, now};
			ctr(j).adm_grants++;
			j.starved = 0;
		} else {
			j.starved++;
			ctr(j).adm_streak = std::max<uint64_t>(ctr(j).adm_streak, j.starved);
			if (why == sw::kAdmitBusy)
				ctr(j).adm_busy++;
			else if (why == sw::kAdmitScored)
				ctr(j).adm_scored++;
			else
				ctr(j).adm_refused++;
		}
		j.decided.push_back(Job::Decision{p.h.mid, why, 0, 0});
		if (j.decided.size() > kKeepDecisions)
			j.decided.erase(j.decided.begin());
		d = &j.decided.back();
	}
	d->heard |= c->cover;
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.mid = d->mid;
	h.flags = kCethAdmit;
	h.status = d->why ? 4 : 0; // CollStatus::denied
	h.phase = d->why;
	h.seg = uint16_t(j.granted);
	h.node_map = c->cover;
	h.job_key = j.key;
	send_to(j, c->ep, c->local, c->qpn, kCollConfigAck, h, nullptr, nullptr, 0);
}

// A member has every result of message mid: when all have, the pool is
// free.
void Switch::on_admit_done(const In &p)
{
	Job *jp = job_for(p, nullptr, false);
	if (!jp)
		return;
	Job &j = *jp;
	Child *c = child_of(j, p);
	if (!c || c->cover != p.h.node_map || !j.tdm) {
		ctr(j).drop_node++;
		return;
	}
	ctr(j).delivered++;
	Job::Decision *d = decision(j, p.h.mid);
	if (!d || d->why)
		return;
	d->done |= c->cover;
	if (hold_.on && hold_.jid == j.jid && hold_.mid == p.h.mid && d->done == j.covered)
		hold_end(now(), "done");
}

} // namespace ibv_coll::emu
