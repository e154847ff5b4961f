// The emulated aggregation switch: its life (open, the workers and their
// poll loop), the dispatch of packets, its table of jobs and their
// children.  Admission is in switch_admit.cc, the data path in
// switch_fold.cc, expiry in switch_expire.cc, the packet codec in
// switch_codec.cc, the counters in switch_stats.cc.  See wire/swproto.h
// for the protocol and ibv_coll_switchd(8) for the program around it.
#include "switch/switch.h"
#include "switch/switch_impl.h"

#include "net/udp_port.h"
#include "util/clock.h"
#include "util/log.h"
#include "wire/roce.h"

#include <linux/filter.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace ibv_coll::emu {

using namespace wire;
using namespace swimpl;

namespace {

// Consecutive Seg units one worker serves (steer()).
constexpr uint32_t kSteerRun = 16;

// The worker the running thread is, of which switch.
thread_local const Switch *tl_switch = nullptr;
thread_local unsigned tl_worker = 0;

} // namespace

unsigned default_workers()
{
	cpu_set_t set;
	int mine = 1;
	if (!sched_getaffinity(0, sizeof(set), &set))
		mine = std::max(1, CPU_COUNT(&set));
	const long online = sysconf(_SC_NPROCESSORS_ONLN);
	return unsigned(std::max(1L, std::min<long>(mine, online > 1 ? online / 2 : 1)));
}

RwLock::RwLock()
{
	pthread_rwlockattr_t a;
	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&l_, &a);
	pthread_rwlockattr_destroy(&a);
}

// What a worker's pass holds of the switch's lock, taken as its packets
// ask: shared for the data path, exclusive for the rest.  Nothing with one
// worker.
class Switch::Section {
public:
	explicit Section(const Switch &s) : s_(s), on_(s.multi()) {}
	~Section() { drop(); }
	Section(const Section &) = delete;
	Section &operator=(const Section &) = delete;
	void shared()
	{
		if (!on_ || mode_ != 0)
			return;
		s_.mu_.lock_shared();
		mode_ = 1;
	}
	void exclusive()
	{
		if (!on_ || mode_ == 2)
			return;
		drop();
		s_.mu_.lock();
		mode_ = 2;
	}
	void drop()
	{
		if (mode_ == 1)
			s_.mu_.unlock_shared();
		else if (mode_ == 2)
			s_.mu_.unlock();
		mode_ = 0;
	}

private:
	const Switch &s_;
	const bool on_;
	int mode_ = 0; // 1 shared, 2 exclusive
};

Switch::Switch(const SwitchParams &p) : p_(p), pool_(p.units, p.unit_bytes), range_used_(p.units, 0)
{
	// Given a transport, each worker gets one of its own from the factory.
	const unsigned n = std::clamp(p.threads, 1u, 256u);
	for (unsigned k = 0; k < n; k++)
		w_.push_back(std::make_unique<Worker>());
	one_ = n == 1;
	if (n > 1)
		unit_mu_ = std::make_unique<UnitLock[]>(p.units);
}

Switch::~Switch()
{
	quit_ = true;
	for (auto &w : w_)
		if (w->th.joinable())
			w->th.join();
}

unsigned Switch::me_threaded() const
{
	return tl_switch == this ? tl_worker : 0;
}

// Steer each datagram to a worker's socket: a block's DATA (not inline)
// and RESULT to the worker of its unit's run of kSteerRun units (CETH seg
// / kSteerRun, modulo the workers), the rest (control, inline jobs,
// anything short or foreign) to worker 0.  A run, not a unit: one worker
// completes consecutive blocks in order, as members expect their results
// (a result overtaken by a later one looks lost to them, and they ask),
// and a run of packets sent at once (GSO) stays with the worker of its
// first.  A program that cannot be attached leaves the kernel's hash to
// spread them: every worker handles every packet correctly, only less
// well placed.
static int steer(int fd, unsigned workers)
{
#ifdef SO_ATTACH_REUSEPORT_CBPF
	const uint32_t flags = kBthBytes + 3, seg = kBthBytes + 20;
	sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0), // the BTH opcode: our kind
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kCollData, 0, 2),
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, flags),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kCethInline, 5, 1),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kCollResult, 0, 4),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, seg),
		BPF_STMT(BPF_ALU | BPF_DIV | BPF_K, kSteerRun),
		BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, workers),
		BPF_STMT(BPF_RET | BPF_A, 0),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	sock_fprog prog{uint16_t(sizeof(code) / sizeof(code[0])), code};
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)))
		return errno;
	return 0;
#else
	(void)fd;
	(void)workers;
	return ENOTSUP;
#endif
}

int Switch::open()
{
	const unsigned n = workers();
	for (unsigned k = 0; k < n; k++) {
		Worker &w = *w_[k];
		int err;
		if (p_.transport || n == 1) {
			err = open_transport(p_.transport, &w.port, p_.port, false, p_.impair,
					     p_.sockbuf, p_.gso);
		} else {
			auto udp = std::make_unique<UdpPort>();
			err = udp->open(k ? port() : p_.port, false, p_.impair, p_.sockbuf, p_.gso,
					true);
			w.port = std::move(udp);
		}
		if (err)
			return err;
		// A switch drops what a full port cannot take and goes on:
		// waiting for one port's room would hold every other.
		w.port->set_port_wait(false);
	}
	if (w_[0]->port->fd() < 0) {
		// A transport without a descriptor (a simulator's): its owner
		// runs poll_once() when packets or next_deadline() are due.
		IBVC_INFO("switch", "{}: {} port {}, {} Seg units of {} bytes", p_.name,
			  w_[0]->port->kind(), port(), p_.units, p_.unit_bytes);
		return 0;
	}
	if (n > 1 && !p_.transport)
		if (int err = steer(w_[0]->port->fd(), n))
			IBVC_WARN("switch",
				  "{}: no steering program ({}): the kernel spreads "
				  "packets over the workers by address",
				  p_.name, util::errstr(err));
	for (auto &w : w_) {
		w->epfd.reset(epoll_create1(EPOLL_CLOEXEC));
		if (!w->epfd)
			return errno;
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = w->port->fd();
		if (epoll_ctl(w->epfd.get(), EPOLL_CTL_ADD, w->port->fd(), &ev))
			return errno;
	}
	IBVC_INFO("switch", "{}: {} port {}, {} Seg units of {} bytes, {} worker{}", p_.name,
		  w_[0]->port->kind(), port(), p_.units, p_.unit_bytes, n, n > 1 ? "s" : "");
	return 0;
}

void Switch::start()
{
	for (unsigned k = 1; k < workers(); k++)
		if (!w_[k]->th.joinable())
			w_[k]->th = std::thread([this, k] { serve(k); });
}

void Switch::serve(unsigned k)
{
	tl_switch = this;
	tl_worker = k;
	uint64_t idle_since = 0;
	const uint64_t spin_ns = uint64_t(p_.poll_us) * 1000;
	while (!quit_.load(std::memory_order_relaxed)) {
		bool did = false;
		try {
			did = pass(k);
		} catch (const std::bad_alloc &) {
			// The packets of this pass are lost, as a full queue's
			// are: their senders recover them.
			IBVC_ERR("switch", "{}: worker {}: out of memory", p_.name, k);
		}
		if (did) {
			idle_since = 0;
			continue;
		}
		// Nothing arrived: keep looking for a short while (the next
		// partial of a block is usually close behind), then block.
		const uint64_t now = util::now_ns();
		if (!idle_since)
			idle_since = now;
		if (now - idle_since < spin_ns)
			sched_yield();
		else
			wait_on(k, 200);
	}
	Section s(*this);
	s.shared();
	w_[k]->port->tx_flush();
}

void Switch::run(const std::atomic<bool> &stop)
{
	start();
	while (!stop.load())
		if (!poll_once())
			wait(200);
	Section s(*this);
	s.shared();
	tx().tx_flush();
}

void Switch::wait(int ms)
{
	wait_on(0, ms);
}

void Switch::wait_on(unsigned k, int ms)
{
	// Sleep no later than packets a delay impairment holds are due, to
	// the nanosecond: ppoll on the epoll descriptor, which is readable
	// when the port is.
	// And no later than a job's tail is due (one worker: switch_fold.cc,
	// tails(), which moves it on whenever it runs).
	uint64_t wait_ns = uint64_t(ms) * util::kNsPerMs;
	for (uint64_t due : {w_[k]->port->tx_next_due(), k == 0 && one_ ? tail_next_ : 0})
		if (due) {
			const uint64_t now = Switch::now();
			wait_ns = std::min(wait_ns, due > now ? due - now : 0);
		}
	timespec ts{time_t(wait_ns / 1000000000ull), long(wait_ns % 1000000000ull)};
	pollfd pfd{w_[k]->epfd.get(), POLLIN, 0};
	ppoll(&pfd, 1, &ts, nullptr);
}

bool Switch::poll_once()
{
	return pass(0);
}

bool Switch::poll_worker(unsigned k)
{
	const Switch *s = tl_switch;
	const unsigned w = tl_worker;
	tl_switch = this;
	tl_worker = k;
	const bool did = pass(k);
	tl_switch = s;
	tl_worker = w;
	return did;
}

bool Switch::pass(unsigned k)
{
	Transport &port = *w_[k]->port;
	RxPacket *pkts = w_[k]->rx.data();
	bool did = false;
	Section s(*this);
	for (int b = 0; b < 8; b++) {
		s.shared();
		unsigned n = port.rx_batch(pkts);
		for (unsigned i = 0; i < n; i++)
			handle(pkts[i], s);
		if (!n)
			break;
		did = true;
	}
	s.shared();
	port.tx_flush();
	if (k == 0)
		timers(s);
	return did;
}

// Worker 0's timers: the pool's holder (tdm), the forgetting of idle jobs.
// The clock is read once the exclusive lock is held: the other workers
// stamp jobs under the shared one, and a time read before waiting for it
// may be older than their stamps.
void Switch::timers(Section &s)
{
	if (p_.policy == Policy::tdm) {
		s.exclusive();
		hold_expire(Switch::now());
	}
	if (!multi())
		tails(Switch::now());
	if (util::elapsed_ns(Switch::now(), last_expire_) > 1000 * util::kNsPerMs) {
		s.exclusive();
		const uint64_t now = Switch::now();
		last_expire_ = now;
		expire(now);
	}
}

uint64_t Switch::next_deadline() const
{
	uint64_t d = w_[0]->port->tx_next_due();
	auto sooner = [&d](uint64_t t) { d = !d || t < d ? t : d; };
	if (!jobs_.empty())
		sooner(last_expire_ + 1000 * util::kNsPerMs + 1);
	if (tail_next_)
		sooner(tail_next_);
	if (hold_.on) {
		auto it = jobs_.find(hold_.jid);
		const uint64_t ms = it != jobs_.end() && it->second.hold_ms ? it->second.hold_ms
									    : 1000;
		sooner(hold_.last + ms * util::kNsPerMs + 1);
	}
	return d;
}

// The packets the data path handles under the shared lock: a block's
// partial, ASK or result of a configured job.  An inline partial may make
// its job (or a child of it), so it changes the table.
bool Switch::is_data(const In &p)
{
	return (p.kind == kCollData && !(p.h.flags & kCethInline)) || p.kind == kCollResult;
}

void Switch::handle(const RxPacket &rx, Section &s)
{
	In p;
	if (!parse(rx, p))
		return;
	if (is_data(p))
		s.shared();
	else
		s.exclusive();
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
		gone().drop_kind++; // ACK is between NICs
		break;
	}
}

// A job is alive: noted at once by a single worker, at most every
// millisecond by several (each note writes a line they all read).
bool Switch::touch(Job &j, uint64_t now)
{
	if (multi() && now < j.last_seen + util::kNsPerMs)
		return false;
	j.last_seen = now;
	return true;
}

// Every child's arrival time of every unit's block, sized when the job
// is granted (the data path of several workers only writes its entries).
void Switch::size_arrive(Job &j)
{
	j.arrive.assign(size_t(j.granted) * j.children.size(), 0);
	j.repaired.assign(j.granted, 0);
	j.newest = UINT32_MAX;
	j.tail_at = 0;
}

SwitchCounters Switch::job_total(const Job &j)
{
	SwitchCounters t;
	for (const SwitchCounters &c : j.ctr)
		t.add(c);
	return t;
}

// A sender's claim in a job of `nodes` nodes whose nodes below us are
// `subtree`: a member is one node of the job and has one bit of ours; a
// switch below us any of ours.
static bool claim_ok(uint64_t cover, const sw::Task &t, uint64_t subtree, uint16_t nodes)
{
	if (!cover || (cover & ~subtree))
		return false;
	return t.node == sw::kNodeSwitch || (t.node < nodes && !(cover & (cover - 1)));
}

// A job as its first packet (CONFIG, or inline DATA) describes it.
bool Switch::init_job(Job &j, const In &p, const sw::Task &t, const sw::Above *above)
{
	// Without a parent we are the top switch: our bits are the job's;
	// with one, our bit there is one of the top's, or of our parent's
	// when it has a parent too (three levels: the Above record), whose
	// bit is then one of the top's (wire/swproto.h).
	const uint64_t parents = above ? above->subtree : t.members;
	// The sender's own claim is checked before a job is made (or given
	// again: a keyed CONFIG that could not join would end the running
	// incarnation for nothing; found by fuzz_switch_rx).
	if (!t.nodes || !t.subtree || t.plane >= sw::kMaxPlanes ||
	    !claim_ok(p.h.node_map, t, t.subtree, t.nodes) ||
	    (!t.parent_port && (t.subtree & ~t.members || t.up || above)) ||
	    (t.parent_port && (t.up >= 64 || !(parents >> t.up & 1))) ||
	    (above && (!above->parent_port || above->up >= 64 || !(t.members >> above->up & 1))))
		return false;
	j.ctr.assign(workers(), {});
	j.jid = p.h.jid;
	j.inc = p.h.inc;
	j.key = p.h.job_key;
	j.nodes = t.nodes;
	j.members = t.members;
	j.subtree = t.subtree;
	j.up = t.up;
	j.plane = t.plane;
	j.inline_mode = p.kind == kCollData;
	if (t.parent_port) {
		j.has_parent = true;
		memcpy(j.parent.ip.b, t.parent_ip, 16);
		j.parent.port = t.parent_port;
	}
	if (above) {
		j.has_above = true;
		j.above = *above;
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
Switch::Job *Switch::job_for(const In &p, const sw::Task *t, bool create, const sw::Above *above)
{
	auto it = jobs_.find(p.h.jid);
	if (it == jobs_.end()) {
		if (!create || !t) {
			gone().drop_job++;
			return nullptr;
		}
		Job j;
		if (!init_job(j, p, *t, above)) {
			gone().drop_malformed++;
			return nullptr;
		}
		return &(jobs_[p.h.jid] = std::move(j));
	}
	Job &j = it->second;
	if (p.h.job_key != j.key) {
		ctr(j).drop_key++;
		IBVC_DEBUG("switch", "{}: job {}: wrong key from {}:{}", p_.name, j.jid,
			   p.src.ip.str(), p.src.port);
		return nullptr;
	}
	if (p.h.inc != j.inc) {
		if (!create || !t || !seq_after(p.h.inc, j.inc)) {
			ctr(j).drop_incarnation++;
			if (seq_after(j.inc, p.h.inc))
				tell_superseded(j, p, t);
			return nullptr;
		}
		Job fresh;
		if (!init_job(fresh, p, *t, above)) {
			ctr(j).drop_malformed++;
			return nullptr;
		}
		IBVC_INFO("switch", "{}: job {}: incarnation {} replaces {}", p_.name, j.jid,
			  p.h.inc, j.inc);
		free_units(j);
		fresh.ctr = j.ctr;
		ctr(fresh).incarnations++;
		fresh.retired = std::move(j.children);
		j = std::move(fresh);
		return &j;
	}
	if (t && (t->members != j.members || t->subtree != j.subtree || t->nodes != j.nodes ||
		  t->plane != j.plane || t->up != j.up || bool(above) != j.has_above ||
		  (above && !(*above == j.above)))) {
		ctr(j).drop_malformed++;
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
	return !c.is_switch && p.h.src_node == c.node;
}

Switch::Child *Switch::child_of(Job &j, const In &p, const sw::Task *t)
{
	// The child whose cover holds the packet's lowest node bit, where it
	// names one (a partial, an ASK: what members send most): one look,
	// where the walk below compares every child's address.
	if (p.h.node_map) {
		const uint8_t i = j.by_bit[size_t(__builtin_ctzll(p.h.node_map))];
		if (i < j.children.size() && sent_by(j.children[i], p, t))
			return &j.children[i];
	}
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
	if (!claim_ok(cover, t, j.subtree, j.nodes)) {
		ctr(j).drop_node++;
		return EINVAL;
	}
	if (Child *c = child_of(j, p, &t)) {
		if (c->cover != cover) {
			ctr(j).drop_node++;
			return EINVAL;
		}
		return 0;
	}
	if (j.covered & cover) {
		// Another child already serves these nodes: another member, or
		// another QP (perhaps of the same device) claiming its node,
		// which must not take its results.
		ctr(j).drop_node++;
		return EINVAL;
	}
	if (j.children.empty())
		j.parent_local = p.dst; // reach the parent as our children reach us
	Child c;
	c.ep = p.src;
	c.local = p.dst;
	c.qpn = t.qpn;
	c.node = is_switch ? sw::kNodeSwitch : t.node;
	c.cover = cover;
	c.is_switch = is_switch;
	j.children.push_back(c);
	std::sort(j.children.begin(), j.children.end(),
		  [](const Child &a, const Child &b) { return lowest(a.cover) < lowest(b.cover); });
	for (size_t i = 0; i < j.children.size(); i++)
		for (uint64_t m = j.children[i].cover; m; m &= m - 1)
			j.by_bit[size_t(__builtin_ctzll(m))] = uint8_t(i);
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
		ctr(j).drop_node++;
		return;
	}
	ctr(j).delivered++;
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
