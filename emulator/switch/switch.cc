// The emulated aggregation switch: its life (open, the poll loop), the
// dispatch of packets, its table of jobs and their children.  Admission is
// in switch_admit.cc, the data path in switch_fold.cc, expiry in
// switch_expire.cc, the packet codec in switch_codec.cc, the counters in
// switch_stats.cc.  See wire/swproto.h for the protocol and
// ibv_coll_switchd(8) for the program around it.
#include "switch/switch.h"
#include "switch/switch_impl.h"

#include "util/clock.h"
#include "util/log.h"
#include "wire/roce.h"

#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;
using namespace swimpl;

Switch::Switch(const SwitchParams &p) : p_(p), pool_(p.units, p.unit_bytes), range_used_(p.units, 0)
{
}

int Switch::open()
{
	int err = open_transport(p_.transport, &port_, p_.port, false, p_.impair, p_.sockbuf,
				 p_.gso);
	if (err)
		return err;
	if (port_->fd() < 0) {
		// A transport without a descriptor (a simulator's): its owner
		// runs poll_once() when packets or next_deadline() are due.
		IBVC_INFO("switch", "{}: {} port {}, {} Seg units of {} bytes", p_.name,
			  port_->kind(), port_->port(), p_.units, p_.unit_bytes);
		return 0;
	}
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
	uint64_t now = Switch::now();
	hold_expire(now);
	if (now - last_expire_ > 1000 * util::kNsPerMs) {
		last_expire_ = now;
		expire(now);
	}
	return did;
}

uint64_t Switch::next_deadline() const
{
	uint64_t d = port_->tx_next_due();
	auto sooner = [&d](uint64_t t) { d = !d || t < d ? t : d; };
	if (!jobs_.empty())
		sooner(last_expire_ + 1000 * util::kNsPerMs + 1);
	if (hold_.on) {
		auto it = jobs_.find(hold_.jid);
		const uint64_t ms = it != jobs_.end() && it->second.hold_ms ? it->second.hold_ms
									    : 1000;
		sooner(hold_.last + ms * util::kNsPerMs + 1);
	}
	return d;
}

void Switch::handle(const RxPacket &rx)
{
	In p;
	if (!parse(rx, p))
		return;
	switch (p.kind) {
	case kCollConfig:
		if (p.h.flags & kCethAdmit)
			on_admit(p);
		else
			on_config(p);
		break;
	case kCollConfigAck: on_config_ack(p); break;
	case kCollData: on_data(p); break;
	case kCollResult: on_result(p); break;
	case kCollRelease:
		if (p.h.flags & kCethAdmit)
			on_admit_done(p);
		else
			on_release(p);
		break;
	case kCollStats: on_stats(p); break;
	case kCollAbort: on_abort(p); break;
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
	IBVC_INFO("switch", "{}: job {} incarnation {} ({} nodes, subtree {:#x}{}{})", p_.name,
		  j.jid, j.inc, j.nodes, j.subtree, j.inline_mode ? ", inline" : "",
		  j.has_parent
			  ? ", parent " + j.parent.ip.str() + ":" + std::to_string(j.parent.port)
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
		IBVC_INFO("switch", "{}: job {}: incarnation {} replaces {}", p_.name, j.jid,
			  p.h.inc, j.inc);
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
		if (sent_by(c, p, t)) {
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

bool Switch::sent_by(const Child &c, const In &p, const sw::Task *t)
{
	if (!(c.ep == p.src))
		return false;
	if (t)
		return c.qpn == t->qpn && c.is_switch == (t->node == sw::kNodeSwitch);
	if (p.h.src_node == sw::kNodeSwitch)
		return c.is_switch;
	return !c.is_switch && p.h.src_node < 64 && c.cover == 1ull << p.h.src_node;
}

Switch::Child *Switch::child_of(Job &j, const In &p, const sw::Task *t)
{
	for (Child &c : j.children)
		if (sent_by(c, p, t))
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
	if (Child *c = child_of(j, p, &t)) {
		if (c->cover != cover) {
			j.ctr.drop_node++;
			return EINVAL;
		}
		return 0;
	}
	if (j.covered & cover) {
		// Another child already serves these nodes: another member, or
		// another QP (perhaps of the same device) claiming its node,
		// which must not take its results.
		j.ctr.drop_node++;
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

} // namespace ibv_coll::emu
