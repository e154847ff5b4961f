// The switch's admission: configuration, grants and refusals of Seg
// units, and release.
#include "switch/switch.h"
#include "switch/switch_impl.h"

#include "util/clock.h"
#include "util/log.h"
#include "wire/roce.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;
using namespace swimpl;

bool Switch::alloc_units(Job &j, uint32_t want)
{
	// An inline job cannot be told its grant: it gets what it assumes or
	// nothing.
	if (p_.max_job_units && want > p_.max_job_units && j.inline_mode)
		return false;
	if (p_.max_job_units)
		want = std::min(want, p_.max_job_units);
	// First fit of the largest free run, up to want.
	uint32_t best = 0, best_len = 0;
	for (uint32_t i = 0; i < p_.units;) {
		if (range_used_[i]) {
			i++;
			continue;
		}
		uint32_t k = i;
		while (k < p_.units && !range_used_[k] && k - i < want)
			k++;
		if (k - i > best_len) {
			best = i;
			best_len = k - i;
		}
		if (best_len == want)
			break;
		i = k + 1;
	}
	if (best_len < 2 || ((j.inline_mode || p_.whole_grant) && best_len < want))
		return false;
	for (uint32_t i = best; i < best + best_len; i++)
		range_used_[i] = 1;
	j.seg_base = best;
	j.granted = best_len;
	j.stash.assign(best_len, {});
	j.have_units = true;
	return true;
}

void Switch::free_units(Job &j)
{
	if (!j.have_units)
		return;
	if (j.tdm) {
		if (hold_.on && hold_.jid == j.jid)
			hold_end(now(), "the job left");
		j.have_units = false;
		for (uint32_t i = 0; i < j.stash.size(); i++)
			unstash(j, i);
		j.stash.clear();
		return;
	}
	for (uint32_t i = j.seg_base; i < j.seg_base + j.granted; i++) {
		range_used_[i] = 0;
		pool_.release(i);
	}
	j.have_units = false;
	for (uint32_t i = 0; i < j.stash.size(); i++)
		unstash(j, i);
	j.stash.clear();
}

void Switch::send_config_up(Job &j)
{
	sw::Task t;
	t.node = sw::kNodeSwitch;
	t.nodes = j.nodes;
	t.members = j.members;
	t.subtree = j.members; // the top switch serves the whole job
	t.seg_req = j.granted;
	t.plane = uint8_t(j.plane);
	if (j.has_above) {
		// Our parent (a spine) has a parent (the core).
		t.subtree = j.above.subtree;
		t.up = j.above.up;
		t.parent_port = j.above.parent_port;
		memcpy(t.parent_ip, j.above.parent_ip, 16);
	}
	uint8_t tb[sw::kTaskBytes];
	t.store(tb);
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.node_map = 1ull << j.up;
	h.job_key = j.key;
	send_to(j, j.parent, j.parent_local, 0, kCollConfig, h, nullptr, tb, sw::kTaskBytes);
}

// Every node of the subtree has spoken: take units, ask the parent.
void Switch::try_grant(Job &j)
{
	if (j.state != State::collecting || j.covered != j.subtree)
		return;
	if (p_.policy == Policy::tdm && !j.has_parent && !j.inline_mode && j.plane == 0) {
		// The whole pool, lent one message at a time (on_admit).
		j.tdm = true;
		j.seg_base = 0;
		j.granted = std::min<uint32_t>(p_.units, 0xffff);
		j.stash.assign(j.granted, {});
		j.have_units = true;
		j.state = State::granted;
		grant_children(j);
		IBVC_INFO("switch", "{}: job {} shares the pool by time ({} Seg units)", p_.name,
			  j.jid, j.granted);
		return;
	}
	if (p_.policy == Policy::tdm) {
		// The pool is lent whole: no range can be set aside for a job
		// that cannot ask per message.
		ctr(j).adm_refused++;
		deny(j,
		     "tdm serves jobs with one switch and a configuration, not inline, under a spine or on several planes");
		return;
	}
	if (p_.policy == Policy::exclusive) {
		for (const auto &kv : jobs_) {
			if (kv.first != j.jid && kv.second.have_units) {
				ctr(j).adm_refused++;
				deny(j, "another job owns the pool (exclusive)");
				return;
			}
		}
	}
	uint32_t want = j.seg_req;
	if (p_.policy == Policy::spatial && p_.shares)
		want = std::min(want, std::max(2u, p_.units / p_.shares));
	if (!alloc_units(j, want)) {
		ctr(j).adm_refused++;
		deny(j, "no free Seg units");
		return;
	}
	if (j.has_parent && !j.inline_mode) {
		j.state = State::waiting_parent;
		send_config_up(j);
		return;
	}
	j.state = State::granted;
	if (!j.inline_mode)
		grant_children(j);
	IBVC_INFO("switch", "{}: job {} granted {} Seg units at {}", p_.name, j.jid, j.granted,
		  j.seg_base);
}

void Switch::grant_children(Job &j)
{
	if (j.arrive.size() != size_t(j.granted) * j.children.size())
		size_arrive(j);
	ctr(j).grants++;
	for (const Child &c : j.children) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.seg = uint16_t(std::min<uint32_t>(j.granted, 0xffff));
		h.flags = j.tdm ? kCethAdmit : 0;
		h.seq = p_.job_idle_ms; // members keep the job alive at a third of it
		h.node_map = c.cover;
		h.job_key = j.key;
		send_to(j, c.ep, c.local, c.qpn, kCollConfigAck, h, nullptr, nullptr, 0);
	}
}

void Switch::deny(Job &j, const char *why)
{
	IBVC_WARN("switch", "{}: job {} refused: {}", p_.name, j.jid, why);
	j.state = State::denied;
	ctr(j).denials++;
	free_units(j);
	for (const Child &c : j.children) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.status = 4; // CollStatus::denied
		h.node_map = c.cover;
		h.job_key = j.key;
		send_to(j, c.ep, c.local, c.qpn, kCollConfigAck, h, nullptr, nullptr, 0);
	}
}

void Switch::on_config(const In &p)
{
	// The task, and for a three-level job one Above record after it.
	if (p.paylen != sw::kTaskBytes && p.paylen != sw::kTaskBytes + sw::kAboveBytes) {
		gone().drop_malformed++;
		return;
	}
	sw::Task t = sw::Task::load(p.payload);
	sw::Above above;
	if (p.paylen > sw::kTaskBytes)
		above = sw::Above::load(p.payload + sw::kTaskBytes);
	Job *j = job_for(p, &t, true, p.paylen > sw::kTaskBytes ? &above : nullptr);
	if (!j)
		return;
	j->last_seen = now();
	if (add_child(*j, p, t))
		return;
	ctr(*j).configs++;
	ctr(*j).delivered++;
	switch (j->state) {
	case State::collecting:
		try_grant(*j);
		if (j->state == State::collecting || j->state == State::waiting_parent)
			answer_pending(*j, *child_of(*j, p, &t));
		break;
	case State::waiting_parent:
		send_config_up(*j); // the child asks again: so do we
		answer_pending(*j, *child_of(*j, p, &t));
		break;
	case State::granted:
	case State::denied: {
		// A repeat (our answer was lost), or a member's keepalive:
		// answer this child again.
		Child *c = child_of(*j, p, &t);
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j->jid;
		h.seg = j->state == State::granted
				? uint16_t(std::min<uint32_t>(j->granted, 0xffff))
				: 0;
		h.status = j->state == State::granted ? 0 : 4;
		h.flags = j->tdm && j->state == State::granted ? kCethAdmit : 0;
		h.seq = p_.job_idle_ms;
		h.node_map = c->cover;
		h.job_key = j->key;
		send_to(*j, c->ep, c->local, c->qpn, kCollConfigAck, h, nullptr, nullptr, 0);
		// A member's keepalive (or repeat) keeps the job alive up the
		// tree too: the parent answers a repeat and forgets nothing.
		if (j->has_parent && j->state == State::granted)
			send_config_up(*j);
		break;
	}
	}
}

// The child is heard but must wait for the rest of the subtree (or our
// parent): without this a member that starts early could not tell a
// switch that waits for late members from one that is not there.
void Switch::answer_pending(Job &j, const Child &c)
{
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.flags = kCethPending;
	h.node_map = c.cover;
	h.job_key = j.key;
	send_to(j, c.ep, c.local, c.qpn, kCollConfigAck, h, nullptr, nullptr, 0);
}

void Switch::on_config_ack(const In &p)
{
	Job *j = job_for(p, nullptr, false);
	if (!j)
		return;
	if (!j->has_parent || !(p.src == j->parent)) {
		ctr(*j).drop_node++;
		return;
	}
	j->last_seen = now();
	ctr(*j).delivered++;
	if (p.h.flags & kCethPending)
		return; // the parent waits for other leaves
	if (p.h.status || p.h.seg < 2) {
		if (j->state != State::denied)
			deny(*j, "the parent switch refused it");
		return;
	}
	if (j->state != State::waiting_parent)
		return; // a repeat
	j->granted = std::min<uint32_t>(j->granted, p.h.seg);
	j->state = State::granted;
	grant_children(*j);
	IBVC_INFO("switch", "{}: job {} granted {} Seg units (parent agreed)", p_.name, j->jid,
		  j->granted);
}

void Switch::on_release(const In &p)
{
	auto it = jobs_.find(p.h.jid);
	if (it == jobs_.end()) {
		gone().drop_job++;
		return;
	}
	Job &j = it->second;
	if (p.h.job_key != j.key) {
		ctr(j).drop_key++;
		return;
	}
	if (p.h.inc != j.inc) {
		// A member of the old incarnation leaves while others already
		// configure the new one: the new one stays.
		ctr(j).drop_incarnation++;
		return;
	}
	Child *c = child_of(j, p);
	if (!c) {
		ctr(j).drop_node++;
		return;
	}
	if (c->released) {
		ctr(j).duplicates++;
		return;
	}
	c->released = true;
	ctr(j).releases++;
	ctr(j).delivered++;
	if (++j.released < j.children.size())
		return;
	IBVC_INFO("switch", "{}: job {} released", p_.name, j.jid);
	if (j.has_parent) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.node_map = 1ull << j.up;
		h.job_key = j.key;
		send_to(j, j.parent, j.parent_local, 0, kCollRelease, h, nullptr, nullptr, 0);
	}
	free_units(j);
	gone().add(job_total(j));
	jobs_.erase(it);
}

} // namespace ibv_coll::emu
