// The emulated aggregation switch.  See coll/swproto.h for the protocol
// and ibv_coll_switchd(8) for the program around it.
#include "switch/switch.h"

#include "util/clock.h"
#include "util/log.h"
#include "wire/icrc.h"
#include "wire/roce.h"

#include <poll.h>
#include <sys/epoll.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

void SwitchCounters::add(const SwitchCounters &o)
{
	rx_packets += o.rx_packets;
	rx_bytes += o.rx_bytes;
	tx_packets += o.tx_packets;
	tx_bytes += o.tx_bytes;
	data += o.data;
	reductions += o.reductions;
	results += o.results;
	duplicates += o.duplicates;
	retrans_answered += o.retrans_answered;
	resent_up += o.resent_up;
	configs += o.configs;
	grants += o.grants;
	denials += o.denials;
	releases += o.releases;
	drop_icrc += o.drop_icrc;
	drop_malformed += o.drop_malformed;
	drop_key += o.drop_key;
	drop_job += o.drop_job;
	drop_node += o.drop_node;
	drop_block += o.drop_block;
	drop_stale += o.drop_stale;
	drop_busy += o.drop_busy;
	drop_incarnation += o.drop_incarnation;
	incarnations += o.incarnations;
	delivered += o.delivered;
	drop_empty += o.drop_empty;
	drop_short += o.drop_short;
	drop_kind += o.drop_kind;
}

namespace {

// Unit states, kept in SegUnit::kind.
constexpr uint8_t kUnitCollecting = 1; // partials coming in
constexpr uint8_t kUnitUp = 2;	       // our partial went to the parent
constexpr uint8_t kUnitDone = 3;       // holds the result (the shadow copy)

int lowest(uint64_t m)
{
	return m ? std::countr_zero(m) : 64;
}

} // namespace

Switch::Switch(const SwitchParams &p)
	: p_(p), pool_(p.units, p.unit_bytes), range_used_(p.units, 0)
{
}

int Switch::open()
{
	int err = open_transport(p_.transport, &port_, p_.port, false, p_.impair, p_.sockbuf,
				 p_.gso);
	if (err)
		return err;
	epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
	if (!epfd_)
		return errno;
	epoll_event ev{};
	ev.events = EPOLLIN;
	ev.data.fd = port_->fd();
	if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, port_->fd(), &ev))
		return errno;
	IBVC_INFO("switch", "{}: {} port {}, {} Seg units of {} bytes", p_.name, port_->kind(),
		  port_->port(), p_.units, p_.unit_bytes);
	return 0;
}

void Switch::run(const std::atomic<bool> &stop)
{
	while (!stop.load())
		if (!poll_once())
			wait(200);
	port_->tx_flush();
}

void Switch::wait(int ms)
{
	// Sleep no later than packets a delay impairment holds are due, to
	// the nanosecond: ppoll on the epoll descriptor, which is readable
	// when the port is.
	uint64_t wait_ns = uint64_t(ms) * util::kNsPerMs;
	if (uint64_t due = port_->tx_next_due()) {
		uint64_t now = util::now_ns();
		wait_ns = std::min(wait_ns, due > now ? due - now : 0);
	}
	timespec ts{time_t(wait_ns / 1000000000ull), long(wait_ns % 1000000000ull)};
	pollfd pfd{epfd_.get(), POLLIN, 0};
	ppoll(&pfd, 1, &ts, nullptr);
}

bool Switch::poll_once()
{
	RxPacket pkts[Transport::kBatch];
	bool did = false;
	for (int b = 0; b < 8; b++) {
		unsigned n = port_->rx_batch(pkts);
		for (unsigned i = 0; i < n; i++)
			handle(pkts[i]);
		if (!n)
			break;
		did = true;
	}
	port_->tx_flush();
	uint64_t now = util::now_ns();
	if (now - last_expire_ > 1000 * util::kNsPerMs) {
		last_expire_ = now;
		expire(now);
	}
	return did;
}

void Switch::handle(const RxPacket &rx)
{
	if (rx.len < kBthBytes + kCethBytes + kIcrcBytes) {
		if (rx.len)
			gone_.drop_short++;
		else
			gone_.drop_empty++;
		return;
	}
	size_t len = rx.len - kIcrcBytes;
	UdpEndpoints ep;
	memcpy(ep.src, rx.src.ip.b, 16);
	memcpy(ep.dst, rx.dst.b, 16);
	ep.sport = rx.src.port;
	ep.dport = port_->port();
	// In two parts: a result relayed down the tree reuses its payload's.
	const size_t split = kBthBytes + kCethBytes;
	const uint32_t head = icrc_head(ep, rx.data, split, len);
	const uint32_t whole = crc32_update(head, rx.data + split, len - split);
	if (~whole != load_icrc(rx.data + len)) {
		gone_.drop_icrc++;
		IBVC_DEBUG("switch", "{}: bad icrc from {}:{}", p_.name, rx.src.ip.str(), rx.src.port);
		return;
	}
	Bth bth = Bth::load(rx.data);
	if (!is_coll_opcode(bth.opcode) || bth.opcode > kCollKindLast) {
		gone_.drop_kind++;
		return;
	}
	if (Bth::tver(rx.data) != 0 || bth.pkey != kDefaultPkey ||
	    len < kBthBytes + kCethBytes + bth.pad) {
		gone_.drop_malformed++;
		return;
	}
	In p;
	p.kind = bth.opcode;
	p.h = Ceth::load(rx.data + kBthBytes);
	p.payload = rx.data + kBthBytes + kCethBytes;
	p.paylen = uint32_t(len - kBthBytes - kCethBytes - bth.pad);
	p.src = rx.src;
	p.dst = rx.dst;
	p.tail_crc = rx.data[0] == kCollResult ? whole ^ crc32_shift(head, len - split) : 0;
	if (p.paylen != p.h.len) {
		gone_.drop_malformed++;
		return;
	}
	switch (p.kind) {
	case kCollConfig:
		on_config(p);
		break;
	case kCollConfigAck:
		on_config_ack(p);
		break;
	case kCollData:
		on_data(p);
		break;
	case kCollResult:
		on_result(p);
		break;
	case kCollRelease:
		on_release(p);
		break;
	case kCollStats:
		on_stats(p);
		break;
	case kCollAbort:
		on_abort(p);
		break;
	default:
		gone_.drop_kind++; // ACK is between NICs
		break;
	}
}

// A job as its first packet (CONFIG, or inline DATA) describes it.
bool Switch::init_job(Job &j, const In &p, const sw::Task &t)
{
	if (!t.nodes || t.nodes > 64 || !t.subtree || (t.subtree & ~t.members) ||
	    t.plane >= sw::kMaxPlanes)
		return false;
	j.jid = p.h.jid;
	j.inc = p.h.inc;
	j.key = p.h.job_key;
	j.nodes = t.nodes;
	j.members = t.members;
	j.subtree = t.subtree;
	j.plane = t.plane;
	j.inline_mode = p.kind == kCollData;
	if (t.parent_port) {
		j.has_parent = true;
		memcpy(j.parent.ip.b, t.parent_ip, 16);
		j.parent.port = t.parent_port;
	}
	IBVC_INFO("switch", "{}: job {} incarnation {} ({} nodes, subtree {:#x}{}{})", p_.name, j.jid,
		  j.inc, j.nodes, j.subtree, j.inline_mode ? ", inline" : "",
		  j.has_parent ? ", parent " + j.parent.ip.str() + ":" + std::to_string(j.parent.port)
			       : std::string());
	return true;
}

// The job a packet belongs to; with a task, a new one is made for it, or
// a new incarnation of it (its members were given the job again after a
// failure) takes the old one's place.  Packets of any other incarnation
// are dropped and counted: the old one's late packets, and those of
// members not yet reset while the others already configure the new one.
Switch::Job *Switch::job_for(const In &p, const sw::Task *t, bool create)
{
	auto it = jobs_.find(p.h.jid);
	if (it == jobs_.end()) {
		if (!create || !t) {
			gone_.drop_job++;
			return nullptr;
		}
		Job j;
		if (!init_job(j, p, *t)) {
			gone_.drop_malformed++;
			return nullptr;
		}
		return &(jobs_[p.h.jid] = std::move(j));
	}
	Job &j = it->second;
	if (p.h.job_key != j.key) {
		j.ctr.drop_key++;
		IBVC_DEBUG("switch", "{}: job {}: wrong key from {}:{}", p_.name, j.jid,
			   p.src.ip.str(), p.src.port);
		return nullptr;
	}
	if (p.h.inc != j.inc) {
		if (!create || !t || !seq_after(p.h.inc, j.inc)) {
			j.ctr.drop_incarnation++;
			if (seq_after(j.inc, p.h.inc))
				tell_superseded(j, p, t);
			return nullptr;
		}
		Job fresh;
		if (!init_job(fresh, p, *t)) {
			j.ctr.drop_malformed++;
			return nullptr;
		}
		IBVC_INFO("switch", "{}: job {}: incarnation {} replaces {}", p_.name, j.jid, p.h.inc,
			  j.inc);
		free_units(j);
		fresh.ctr = j.ctr;
		fresh.ctr.incarnations++;
		fresh.retired = std::move(j.children);
		j = std::move(fresh);
		return &j;
	}
	if (t && (t->members != j.members || t->subtree != j.subtree || t->nodes != j.nodes ||
		  t->plane != j.plane)) {
		j.ctr.drop_malformed++;
		return nullptr;
	}
	return &j;
}

// A child still in an older incarnation sends us its DATA or CONFIG:
// tell it at once that the job has moved on (an ABORT flagged SUPERSEDED,
// in its own incarnation), so that its members fail their collective, are
// reset and join the new incarnation before the others' first collective
// of it times out waiting for them.  A leaf passes it down (on_abort).
void Switch::tell_superseded(Job &j, const In &p, const sw::Task *t)
{
	if (p.kind != kCollData && p.kind != kCollConfig)
		return;
	uint32_t qpn = 0;
	IpAddr local = p.dst;
	bool known = t != nullptr;
	if (t)
		qpn = t->qpn;
	for (const Child &c : j.retired) {
		if (c.ep == p.src) {
			qpn = c.qpn;
			local = c.local;
			known = true;
		}
	}
	if (!known)
		return;
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.mid = p.h.mid;
	h.status = 3; // CollStatus::remote_abort
	h.flags = kCethSuperseded;
	h.inc = p.h.inc;
	h.job_key = j.key;
	send_to(j, p.src, local, qpn, kCollAbort, h, nullptr, nullptr, 0);
}

Switch::Child *Switch::child_of(Job &j, const Endpoint &ep)
{
	for (Child &c : j.children)
		if (c.ep == ep)
			return &c;
	return nullptr;
}

// A child introduces itself (CONFIG, or an inline DATA packet's task).
int Switch::add_child(Job &j, const In &p, const sw::Task &t)
{
	uint64_t cover = p.h.node_map;
	bool is_switch = t.node == sw::kNodeSwitch;
	// A member's node index must be one of the job's before it is a shift
	// count (found by fuzz_switch_rx: a task naming node 100).
	if (!cover || (cover & ~j.subtree) ||
	    (!is_switch && (t.node >= j.nodes || cover != 1ull << t.node))) {
		j.ctr.drop_node++;
		return EINVAL;
	}
	if (Child *c = child_of(j, p.src)) {
		if (c->cover != cover) {
			j.ctr.drop_node++;
			return EINVAL;
		}
		c->qpn = t.qpn;
		return 0;
	}
	if (j.covered & cover) {
		j.ctr.drop_node++; // another child already serves these nodes
		return EINVAL;
	}
	if (j.children.empty())
		j.parent_local = p.dst; // reach the parent as our children reach us
	Child c;
	c.ep = p.src;
	c.local = p.dst;
	c.qpn = t.qpn;
	c.cover = cover;
	c.is_switch = is_switch;
	j.children.push_back(c);
	std::sort(j.children.begin(), j.children.end(),
		  [](const Child &a, const Child &b) { return lowest(a.cover) < lowest(b.cover); });
	j.covered |= cover;
	j.seg_req = std::min(j.seg_req, t.seg_req);
	return 0;
}

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
	if (best_len < 2 || (j.inline_mode && best_len < want))
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
	for (uint32_t i = j.seg_base; i < j.seg_base + j.granted; i++) {
		range_used_[i] = 0;
		pool_.release(i);
	}
	j.have_units = false;
	for (uint32_t i = 0; i < j.stash.size(); i++)
		unstash(j, i);
	j.stash.clear();
}

void Switch::send_to(Job &j, const Endpoint &dst, const IpAddr &src, uint32_t qpn, uint8_t kind,
		     const Ceth &h0, const void *task, const void *payload, uint32_t len,
		     const uint32_t *lend_crc)
{
	j.ctr.tx_packets++;
	j.ctr.tx_bytes += len;
	uint8_t *buf = port_->tx_buf();
	Bth bth;
	bth.opcode = kind;
	bth.dqpn = qpn;
	bth.psn = h0.sid & kPsnMask;
	bth.store(buf);
	Ceth h = h0;
	size_t off = kBthBytes + kCethBytes;
	uint32_t tlen = task ? uint32_t(sw::kTaskBytes) : 0;
	h.len = uint16_t(len + tlen);
	// Every packet carries the incarnation the switch serves, but the
	// ABORT that tells a member of an older one so, which carries its.
	if (!(h.flags & kCethSuperseded) || kind != kCollAbort)
		h.inc = j.inc;
	h.store(buf + kBthBytes);
	if (task)
		memcpy(buf + off, task, tlen);
	const bool lend = lend_crc && len;
	if (len && !lend)
		memcpy(buf + off + tlen, payload, len);
	// The task's length is a multiple of 4: the pad is the payload's.
	uint32_t paylen = len + tlen;
	uint32_t pad = (4 - (paylen & 3)) & 3;
	buf[1] = uint8_t((buf[1] & ~0x30) | pad << 4);
	size_t roce_len = off + paylen + pad;
	UdpEndpoints ep;
	memcpy(ep.src, src.b, 16);
	memcpy(ep.dst, dst.ip.b, 16);
	ep.sport = port_->port();
	ep.dport = dst.port;
	if (lend) {
		size_t hdr = off + tlen;
		uint8_t *trailer = buf + hdr;
		memset(trailer, 0, pad);
		store_icrc(trailer + pad, icrc_finish(icrc_head(ep, buf, hdr, roce_len), *lend_crc,
						      len + pad));
		port_->tx_commit_split(hdr, static_cast<const uint8_t *>(payload), len,
				       pad + kIcrcBytes, dst, src);
		return;
	}
	memset(buf + off + paylen, 0, pad);
	store_icrc(buf + roce_len, icrc(ep, buf, roce_len));
	port_->tx_commit(roce_len + kIcrcBytes, dst, src);
}

void Switch::seal(SegUnit &u)
{
	const uint32_t pad = (4 - (u.len & 3)) & 3;
	u.crc = crc32_update(0, u.data, u.len);
	if (pad)
		u.crc = crc32_shift(u.crc, pad);
}

void Switch::send_config_up(Job &j)
{
	sw::Task t;
	t.node = sw::kNodeSwitch;
	t.nodes = j.nodes;
	t.members = j.members;
	t.subtree = j.members; // a spine serves the whole job
	t.seg_req = j.granted;
	t.plane = j.plane;
	uint8_t tb[sw::kTaskBytes];
	t.store(tb);
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.node_map = j.subtree;
	h.job_key = j.key;
	send_to(j, j.parent, j.parent_local, 0, kCollConfig, h, nullptr, tb, sw::kTaskBytes);
}

// Every node of the subtree has spoken: take units, ask the parent.
void Switch::try_grant(Job &j)
{
	if (j.state != State::collecting || j.covered != j.subtree)
		return;
	if (!alloc_units(j, j.seg_req)) {
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
	j.ctr.grants++;
	for (const Child &c : j.children) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.seg = uint16_t(std::min<uint32_t>(j.granted, 0xffff));
		h.mid = p_.job_idle_ms; // members keep the job alive at a third of it
		h.node_map = c.cover;
		h.job_key = j.key;
		send_to(j, c.ep, c.local, c.qpn, kCollConfigAck, h, nullptr, nullptr, 0);
	}
}

void Switch::deny(Job &j, const char *why)
{
	IBVC_WARN("switch", "{}: job {} refused: {}", p_.name, j.jid, why);
	j.state = State::denied;
	j.ctr.denials++;
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
	if (p.paylen != sw::kTaskBytes) {
		gone_.drop_malformed++;
		return;
	}
	sw::Task t = sw::Task::load(p.payload);
	Job *j = job_for(p, &t, true);
	if (!j)
		return;
	j->last_seen = util::now_ns();
	if (add_child(*j, p, t))
		return;
	j->ctr.configs++;
	j->ctr.delivered++;
	switch (j->state) {
	case State::collecting:
		try_grant(*j);
		if (j->state == State::collecting || j->state == State::waiting_parent)
			answer_pending(*j, p.src);
		break;
	case State::waiting_parent:
		send_config_up(*j); // the child asks again: so do we
		answer_pending(*j, p.src);
		break;
	case State::granted:
	case State::denied: {
		// A repeat (our answer was lost), or a member's keepalive:
		// answer this child again.
		Child *c = child_of(*j, p.src);
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j->jid;
		h.seg = j->state == State::granted ? uint16_t(std::min<uint32_t>(j->granted, 0xffff))
						   : 0;
		h.status = j->state == State::granted ? 0 : 4;
		h.mid = p_.job_idle_ms;
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
void Switch::answer_pending(Job &j, const Endpoint &src)
{
	Child *c = child_of(j, src);
	if (!c)
		return;
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.jid = j.jid;
	h.flags = kCethPending;
	h.node_map = c->cover;
	h.job_key = j.key;
	send_to(j, c->ep, c->local, c->qpn, kCollConfigAck, h, nullptr, nullptr, 0);
}

void Switch::on_config_ack(const In &p)
{
	Job *j = job_for(p, nullptr, false);
	if (!j)
		return;
	if (!j->has_parent || !(p.src == j->parent)) {
		j->ctr.drop_node++;
		return;
	}
	j->last_seen = util::now_ns();
	j->ctr.delivered++;
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

// Our parent holds a later incarnation of the job than ours: tell our
// children, whose members are in ours.
void Switch::on_abort(const In &p)
{
	Job *jp = job_for(p, nullptr, false);
	if (!jp)
		return;
	Job &j = *jp;
	if (!j.has_parent || !(p.src == j.parent) || !(p.h.flags & kCethSuperseded)) {
		j.ctr.drop_node++;
		return;
	}
	j.ctr.delivered++;
	for (const Child &c : j.children) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.mid = p.h.mid;
		h.status = p.h.status;
		h.flags = kCethSuperseded;
		h.inc = j.inc;
		h.job_key = j.key;
		send_to(j, c.ep, c.local, c.qpn, kCollAbort, h, nullptr, nullptr, 0);
	}
}

void Switch::on_release(const In &p)
{
	auto it = jobs_.find(p.h.jid);
	if (it == jobs_.end()) {
		gone_.drop_job++;
		return;
	}
	Job &j = it->second;
	if (p.h.job_key != j.key) {
		j.ctr.drop_key++;
		return;
	}
	if (p.h.inc != j.inc) {
		// A member of the old incarnation leaves while others already
		// configure the new one: the new one stays.
		j.ctr.drop_incarnation++;
		return;
	}
	Child *c = child_of(j, p.src);
	if (!c) {
		j.ctr.drop_node++;
		return;
	}
	if (c->released) {
		j.ctr.duplicates++;
		return;
	}
	c->released = true;
	j.ctr.releases++;
	j.ctr.delivered++;
	if (++j.released < j.children.size())
		return;
	IBVC_INFO("switch", "{}: job {} released", p_.name, j.jid);
	if (j.has_parent) {
		Ceth h;
		h.src_node = sw::kNodeSwitch;
		h.jid = j.jid;
		h.node_map = j.subtree;
		h.job_key = j.key;
		send_to(j, j.parent, j.parent_local, 0, kCollRelease, h, nullptr, nullptr, 0);
	}
	free_units(j);
	gone_.add(j.ctr);
	jobs_.erase(it);
}

// Fold a child's partial into the unit, in child order: it goes in now
// if its lowest node is the lowest still pending, else it waits.
void Switch::fold(Job &j, uint32_t unit, uint64_t cover, const uint8_t *data, uint32_t len)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	std::vector<Stash> &v = j.stash[unit];
	if (lowest(cover) != lowest(u.node_pending)) {
		std::vector<uint8_t> buf;
		if (!spare_.empty()) {
			buf.swap(spare_.back());
			spare_.pop_back();
		}
		buf.assign(data, data + len);
		v.push_back(Stash{cover, std::move(buf)});
		return;
	}
	pool_.contribute_nodes(j.seg_base + unit, cover, data, len);
	if (len)
		j.ctr.reductions++;
	while (!v.empty() && u.node_pending) {
		auto s = std::find_if(v.begin(), v.end(), [&](const Stash &x) {
			return lowest(x.cover) == lowest(u.node_pending);
		});
		if (s == v.end())
			break;
		pool_.contribute_nodes(j.seg_base + unit, s->cover, s->data.data(),
				       uint32_t(s->data.size()));
		if (!s->data.empty())
			j.ctr.reductions++;
		spare_.push_back(std::move(s->data));
		v.erase(s);
	}
	if (!u.node_pending)
		complete_unit(j, unit);
}

void Switch::unstash(Job &j, uint32_t unit)
{
	for (Stash &s : j.stash[unit])
		spare_.push_back(std::move(s.data));
	j.stash[unit].clear();
}

void Switch::complete_unit(Job &j, uint32_t unit)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	if (!u.filled) {
		// Nothing but tokens (a barrier, or data of length 0).
		u.filled = true;
	}
	seal(u);
	if (j.has_parent) {
		u.kind = kUnitUp;
		send_up(j, unit);
		return;
	}
	u.kind = kUnitDone;
	j.ctr.results++;
	for (const Child &c : j.children)
		send_result(j, unit, c);
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
	h.node_map = j.subtree;
	h.rank_map = 0;
	if (j.inline_mode) {
		sw::Task t;
		t.node = sw::kNodeSwitch;
		t.nodes = j.nodes;
		t.members = j.members;
		t.subtree = j.members;
		t.seg_req = j.granted;
		t.plane = j.plane;
		uint8_t tb[sw::kTaskBytes];
		t.store(tb);
		h.flags |= kCethInline;
		send_to(j, j.parent, j.parent_local, 0, kCollData, h, tb, u.data, u.len, &u.crc);
	} else {
		send_to(j, j.parent, j.parent_local, 0, kCollData, h, nullptr, u.data, u.len, &u.crc);
	}
	u.lent = port_->tx_lend_mark();
}

// The result to one child: the data if it needs it, else a token.
void Switch::send_result(Job &j, uint32_t unit, const Child &c)
{
	SegUnit &u = pool_.unit(j.seg_base + unit);
	Ceth h = unit_header(u, j.jid, j.key, unit);
	h.node_map = j.members;
	bool data = u.src_node == 0 || (c.cover >> (u.src_node - 1) & 1);
	send_to(j, c.ep, c.local, c.qpn, kCollResult, h, nullptr, u.data, data ? u.len : 0, &u.crc);
	u.lent = port_->tx_lend_mark();
}

void Switch::on_data(const In &p0)
{
	In p = p0;
	sw::Task t;
	bool inl = p.h.flags & kCethInline;
	if (inl) {
		if (p.paylen < sw::kTaskBytes) {
			gone_.drop_malformed++;
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
	j.last_seen = util::now_ns();
	if (inl) {
		if (add_child(j, p, t))
			return;
		try_grant(j);
	}
	Child *c = child_of(j, p.src);
	if (!c || c->cover != p.h.node_map) {
		j.ctr.drop_node++;
		return;
	}
	if (j.state != State::granted) {
		j.ctr.drop_busy++;
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
	j.ctr.data++;
	j.ctr.rx_packets++;
	j.ctr.rx_bytes += p.paylen;
	const size_t es = dtype_size(Dtype(p.h.dtype));
	// phase o + 1 names node o (the one that needs the result's data): a
	// node of the job, before send_result shifts by it (found by
	// fuzz_switch_rx: phase 116).
	if (p.h.seg >= j.granted || p.h.phase > j.nodes || p.paylen > pool_.unit_bytes() || !es ||
	    p.paylen % es ||
	    p.h.op > uint8_t(RedOp::bxor) || !reduce_fn(RedOp(p.h.op), Dtype(p.h.dtype))) {
		j.ctr.drop_block++;
		return;
	}
	const uint32_t unit = p.h.seg;
	SegUnit &u = pool_.unit(j.seg_base + unit);
	if (u.busy && u.seq == p.h.seq) {
		if (u.mid != p.h.mid || u.sid != p.h.sid) {
			j.ctr.drop_block++; // one block number, two blocks: not a member's
			return;
		}
		if ((u.node_pending & p.h.node_map) == p.h.node_map) {
			// Its first copy is still to come for this block.
			bool stashed = false;
			for (const Stash &s : j.stash[unit])
				stashed |= s.cover == p.h.node_map;
			if (!stashed) {
				if (p.paylen && p.paylen != u.len && u.len) {
					j.ctr.drop_block++;
					return;
				}
				if (p.paylen && !u.len)
					u.len = p.paylen;
				j.ctr.delivered++;
				fold(j, unit, p.h.node_map, p.payload, p.paylen);
				return;
			}
		}
		// A repeat: never reduced again.  Answer it from what we have.
		j.ctr.duplicates++;
		if (u.kind == kUnitDone) {
			j.ctr.retrans_answered++;
			send_result(j, unit, *c);
		} else if (u.kind == kUnitUp) {
			j.ctr.resent_up++;
			send_up(j, unit); // the parent may have lost ours
		}
		return;
	}
	if (u.busy && !seq_after(p.h.seq, u.seq)) {
		j.ctr.drop_stale++; // an older block: every node has its result
		return;
	}
	if (u.busy && u.kind != kUnitDone) {
		// A newer block while this one is unfinished: not possible for
		// members keeping the window.
		j.ctr.drop_busy++;
		return;
	}
	port_->tx_reclaim(u.lent); // packets may still be sent from its last result
	pool_.release(j.seg_base + unit);
	unstash(j, unit);
	pool_.acquire(j.seg_base + unit, j.jid, p.h.mid, p.h.sid, RedOp(p.h.op), Dtype(p.h.dtype),
		      0, j.subtree, 0);
	u.seq = p.h.seq;
	u.kind = kUnitCollecting;
	u.hop = p.h.coll;
	u.src_node = p.h.phase;
	u.len = p.paylen;
	j.ctr.delivered++;
	fold(j, unit, p.h.node_map, p.payload, p.paylen);
}

// A result from our parent: keep it and send it down.
void Switch::on_result(const In &p)
{
	Job *jp = job_for(p, nullptr, false);
	if (!jp)
		return;
	Job &j = *jp;
	if (!j.has_parent || !(p.src == j.parent) || p.h.seg >= j.granted) {
		j.ctr.drop_node++;
		return;
	}
	j.last_seen = util::now_ns();
	SegUnit &u = pool_.unit(j.seg_base + p.h.seg);
	if (!u.busy || u.seq != p.h.seq || u.mid != p.h.mid || u.sid != p.h.sid) {
		j.ctr.drop_stale++;
		return;
	}
	if (u.kind == kUnitDone) {
		j.ctr.duplicates++;
		return;
	}
	if (u.kind != kUnitUp || p.paylen > pool_.unit_bytes()) {
		j.ctr.drop_block++;
		return;
	}
	j.ctr.rx_packets++;
	j.ctr.rx_bytes += p.paylen;
	j.ctr.delivered++;
	port_->tx_reclaim(u.lent); // our partial may still be on its way up from it
	if (p.paylen)
		memcpy(u.data, p.payload, p.paylen);
	const uint32_t len = std::max(u.len, p.paylen);
	u.kind = kUnitDone;
	if (len == p.paylen)
		u.crc = p.tail_crc;
	u.len = len;
	if (len != p.paylen)
		seal(u);
	j.ctr.results++;
	for (const Child &c : j.children)
		send_result(j, p.h.seg, c);
}

void Switch::expire(uint64_t now)
{
	for (auto it = jobs_.begin(); it != jobs_.end();) {
		if (now - it->second.last_seen > uint64_t(p_.job_idle_ms) * util::kNsPerMs) {
			IBVC_INFO("switch", "{}: job {} idle, forgotten", p_.name, it->first);
			free_units(it->second);
			gone_.add(it->second.ctr);
			it = jobs_.erase(it);
		} else {
			++it;
		}
	}
}

SwitchCounters Switch::totals() const
{
	SwitchCounters t = gone_;
	for (const auto &kv : jobs_)
		t.add(kv.second.ctr);
	const PortCounters &pc = port_->counters();
	t.rx_packets = pc.rx_packets;
	t.rx_bytes = pc.rx_bytes;
	t.tx_packets = pc.tx_packets;
	t.tx_bytes = pc.tx_bytes;
	return t;
}

bool Switch::job_counters(uint32_t jid, SwitchCounters *out) const
{
	auto it = jobs_.find(jid);
	if (it == jobs_.end())
		return false;
	*out = it->second.ctr;
	return true;
}

uint32_t Switch::units_in_use() const
{
	uint32_t n = 0;
	for (uint8_t b : range_used_)
		n += b;
	return n;
}

std::vector<NamedCounter> named_counters(const SwitchCounters &c)
{
	return {
		{"rx_packets", c.rx_packets},
		{"rx_bytes", c.rx_bytes},
		{"tx_packets", c.tx_packets},
		{"tx_bytes", c.tx_bytes},
		{"data", c.data},
		{"reductions", c.reductions},
		{"results", c.results},
		{"duplicates", c.duplicates},
		{"retrans_answered", c.retrans_answered},
		{"resent_up", c.resent_up},
		{"configs", c.configs},
		{"grants", c.grants},
		{"denials", c.denials},
		{"releases", c.releases},
		{"drop_icrc", c.drop_icrc},
		{"drop_malformed", c.drop_malformed},
		{"drop_key", c.drop_key},
		{"drop_job", c.drop_job},
		{"drop_node", c.drop_node},
		{"drop_block", c.drop_block},
		{"drop_stale", c.drop_stale},
		{"drop_busy", c.drop_busy},
		{"drop_incarnation", c.drop_incarnation},
		{"incarnations", c.incarnations},
		{"delivered", c.delivered},
		{"drop_empty", c.drop_empty},
		{"drop_short", c.drop_short},
		{"drop_kind", c.drop_kind},
	};
}

std::vector<NamedCounter> Switch::stat_records() const
{
	std::vector<NamedCounter> v = named_counters(totals());
	v.emplace_back("units", p_.units);
	v.emplace_back("units_in_use", units_in_use());
	v.emplace_back("jobs", jobs_.size());
	return v;
}

namespace {

void print_ctr(FILE *f, const SwitchCounters &c)
{
	bool first = true;
	for (const auto &kv : named_counters(c)) {
		fprintf(f, "%s%s %llu", first ? "" : ", ", kv.first,
			static_cast<unsigned long long>(kv.second));
		first = false;
	}
}

nlohmann::ordered_json json_ctr(const SwitchCounters &c)
{
	nlohmann::ordered_json o = nlohmann::ordered_json::object();
	for (const auto &kv : named_counters(c))
		o[kv.first] = kv.second;
	return o;
}

} // namespace

void Switch::print_stats(FILE *f, bool json) const
{
	SwitchCounters t = totals();
	if (json) {
		// Through a JSON library: a name may hold quotes, backslashes or
		// bytes that are not UTF-8 (replaced, not rejected).
		nlohmann::ordered_json o;
		o["switch"] = p_.name;
		o["port"] = port_->port();
		o["units"] = p_.units;
		o["units_in_use"] = units_in_use();
		o["total"] = json_ctr(t);
		o["jobs"] = nlohmann::ordered_json::array();
		for (const auto &kv : jobs_) {
			nlohmann::ordered_json j;
			j["jid"] = kv.first;
			j["units"] = kv.second.granted;
			j["children"] = kv.second.children.size();
			j.update(json_ctr(kv.second.ctr));
			o["jobs"].push_back(std::move(j));
		}
		fprintf(f, "%s\n",
			o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
	} else {
		fprintf(f, "%s: port %u, Seg units %u, in use %u\n", p_.name.c_str(), port_->port(),
			p_.units, units_in_use());
		fprintf(f, "  total: ");
		print_ctr(f, t);
		fprintf(f, "\n");
		for (const auto &kv : jobs_) {
			fprintf(f, "  job %u (%u units, %zu children): ", kv.first, kv.second.granted,
				kv.second.children.size());
			print_ctr(f, kv.second.ctr);
			fprintf(f, "\n");
		}
	}
	fflush(f);
}

} // namespace ibv_coll::emu
