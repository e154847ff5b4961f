// The client side of ibv_coll_devd: an emu::Device that forwards.
#include "devd/devd_client.h"

#include "devd/devd_proto.h"
#include "devd/devd_sock.h"
#include "devd/devd_spawn.h"
#include "util/fence.h"
#include "util/log.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ibv_coll::devd {
namespace {

// The client's handles of the daemon's objects, given to the driver as
// the opaque emu::Cq * / emu::Qp *.
struct RCq {
	uint32_t id = 0;
	emu::Queue *ring = nullptr;
	util::UniqueFd ev;
	emu::CqEventFn fn = nullptr;
	void *arg = nullptr;
	// Armed by the application and no event since: someone may sleep on
	// the CQ's channel, and the device's death must wake them.
	std::atomic<bool> armed{false};
	uint64_t overruns = 0; // flush completions that found the ring full
};
struct RQp {
	uint32_t id = 0;
	uint32_t qpn = 0;
	bool coll = false;
	uint32_t jid = 0; // the collective job given last, for its CQEs
	emu::Queue *sq = nullptr, *rq = nullptr;
	RCq *scq = nullptr, *rcq = nullptr;
	// Once the device died: the WQEs up to these indices have their
	// completion (the daemon's, or the flush this client wrote).
	bool flushing = false;
	uint32_t sq_done = 0, rq_done = 0;
};

RCq *rcq(emu::Cq *c)
{
	return reinterpret_cast<RCq *>(c);
}
RQp *rqp(emu::Qp *q)
{
	return reinterpret_cast<RQp *>(q);
}

} // namespace

class Client;

// Every live client, so that the event threads stop before the process's
// static objects (the logger among them) are destroyed.  A process may
// exit with its contexts open; the daemon dying then (a --exit-idle one,
// or a host shutting down) would otherwise have the event thread log into
// a destroyed logger.  The registry is made at the first open, after the
// logger's own static, and static objects go in reverse order: its
// destructor runs first and joins the threads.
class Registry {
public:
	static Registry &get()
	{
		static Registry r;
		return r;
	}
	void add(Client *c)
	{
		std::lock_guard lk(mu_);
		live_.insert(c);
	}
	// A client closed after the registry went (by a static object of
	// the application's) has its thread stopped already.
	static void remove(Client *c)
	{
		if (gone_)
			return;
		Registry &r = get();
		std::lock_guard lk(r.mu_);
		r.live_.erase(c);
	}
	~Registry();

private:
	static inline std::atomic<bool> gone_{false};
	std::mutex mu_;
	std::set<Client *> live_;
};

class Client final : public emu::Device {
public:
	Client(FatalFn fn, void *arg) : fatal_fn_(fn), fatal_arg_(arg) {}
	~Client() override
	{
		Registry::remove(this);
		stop_events();
		for (RQp *q : qps_)
			delete q;
	}

	// Stop the event thread (at close, or at exit).
	void stop_events()
	{
		std::lock_guard lk(stop_mu_);
		if (!events_.joinable())
			return;
		uint64_t one = 1;
		if (write(stop_.get(), &one, sizeof(one)) < 0) {
		}
		events_.join();
		if (awake_)
			munmap(const_cast<std::atomic<uint32_t> *>(awake_), 4096);
	}

	int start(util::UniqueFd sock)
	{
		sock_ = std::move(sock);
		// The daemon reaches this process's memory with process_vm_*:
		// under Yama's ptrace_scope 1 it must be named as our tracer.
		Peer d;
		if (peer_of(sock_.get(), &d) == 0)
			prctl(PR_SET_PTRACER, d.pid, 0, 0, 0);
		HelloReq req;
		HelloRep rep;
		util::UniqueFd wfd;
		int err = call(Op::hello, &req, sizeof(req), nullptr, 0, &rep, sizeof(rep), &wfd);
		if (err)
			return dead_ ? ECONNRESET : err; // closed: a daemon leaving took us
		hello_done_ = true;
		if (rep.version != kProtoVersion) {
			IBVC_ERR("devd", "daemon speaks protocol {}, this library {}", rep.version,
				 kProtoVersion);
			return EPROTO;
		}
		hello_ = rep;
		if (wfd) {
			void *p = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, wfd.get(), 0);
			if (p != MAP_FAILED)
				awake_ = static_cast<const std::atomic<uint32_t> *>(p);
		}
		ep_.reset(epoll_create1(EPOLL_CLOEXEC));
		stop_.reset(eventfd(0, EFD_CLOEXEC));
		if (!ep_ || !stop_)
			return errno;
		epoll_event e{};
		e.events = EPOLLIN;
		e.data.ptr = nullptr;
		if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, stop_.get(), &e))
			return errno;
		// The daemon's end closing (it exited or was killed) wakes the
		// event thread, which fails the device (fatal()).
		e.events = EPOLLRDHUP;
		e.data.ptr = &sock_;
		if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, sock_.get(), &e))
			return errno;
		events_ = std::thread([this] { event_loop(); });
		Registry::get().add(this);
		return 0;
	}

	uint16_t udp_port() const override { return hello_.udp_port; }
	uint32_t active_mtu() const override { return hello_.active_mtu; }
	uint32_t seg_units() const override { return hello_.seg_units; }
	uint32_t seg_unit_bytes() const override { return hello_.seg_unit_bytes; }

	int make_ring(uint32_t slots, uint32_t stride, std::unique_ptr<emu::Ring> *out) override
	{
		size_t bytes = emu::Queue::region_bytes(slots, stride);
		util::UniqueFd fd(memfd_create("ibv_coll_ring", MFD_CLOEXEC));
		if (!fd || ftruncate(fd.get(), off_t(bytes)))
			return errno;
		void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
		if (m == MAP_FAILED)
			return errno;
		*out = std::make_unique<emu::Ring>(slots, stride, std::move(fd), m, bytes, true);
		return 0;
	}

	int alloc_pd(uint32_t *pdn) override
	{
		PdMsg rep;
		int err = call(Op::alloc_pd, nullptr, 0, nullptr, 0, &rep, sizeof(rep));
		if (!err)
			*pdn = rep.pdn;
		return err;
	}
	int dealloc_pd(uint32_t pdn) override
	{
		PdMsg req{pdn};
		int err = call(Op::dealloc_pd, &req, sizeof(req), nullptr, 0, nullptr, 0);
		return err && fatal() ? 0 : err;
	}
	int reg_mr(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
		   uint32_t *key) override
	{
		MrReq req;
		req.pdn = pdn;
		req.access = access;
		req.addr = reinterpret_cast<uintptr_t>(addr);
		req.len = len;
		KeyRep rep;
		int err = call(Op::reg_mr, &req, sizeof(req), nullptr, 0, &rep, sizeof(rep));
		if (!err) {
			*key = rep.key;
			mine_.add_keyed(pdn, req.addr, len, access, rep.key);
		}
		return err;
	}
	int reg_mr_keyed(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
			 uint32_t key) override
	{
		MrReq req;
		req.pdn = pdn;
		req.access = access;
		req.addr = reinterpret_cast<uintptr_t>(addr);
		req.len = len;
		req.key = key;
		int err = call(Op::reg_mr_keyed, &req, sizeof(req), nullptr, 0, nullptr, 0);
		if (!err)
			mine_.add_keyed(pdn, req.addr, len, access, key);
		return err;
	}
	int dereg_mr(uint32_t key) override
	{
		MrReq req;
		req.key = key;
		mine_.remove(key);
		int err = call(Op::dereg_mr, &req, sizeof(req), nullptr, 0, nullptr, 0);
		return err && fatal() ? 0 : err;
	}

	int create_cq(emu::Queue *ring, emu::CqEventFn fn, void *arg, emu::Cq **cq,
		      uint32_t *cqn) override
	{
		auto *r = static_cast<emu::Ring *>(ring);
		auto c = std::make_unique<RCq>();
		c->fn = fn;
		c->arg = arg;
		c->ring = ring;
		c->ev.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
		if (!c->ev)
			return errno;
		CqReq req;
		req.slots = r->slots();
		req.stride = r->stride();
		int fds[2] = {r->mem_fd(), c->ev.get()};
		ObjRep rep;
		int err = call(Op::create_cq, &req, sizeof(req), fds, 2, &rep, sizeof(rep));
		if (err)
			return err;
		c->id = rep.id;
		epoll_event e{};
		e.events = EPOLLIN;
		e.data.ptr = c.get();
		{
			std::lock_guard lk(ev_mu_);
			if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c->ev.get(), &e))
				IBVC_WARN("devd", "cq {}: no events: {}", rep.num, strerror(errno));
			cqs_.insert(c.get());
		}
		*cqn = rep.num;
		*cq = reinterpret_cast<emu::Cq *>(c.release());
		return 0;
	}
	int destroy_cq(emu::Cq *cq) override
	{
		RCq *c = rcq(cq);
		ObjReq req{c->id, 0};
		int err = call(Op::destroy_cq, &req, sizeof(req), nullptr, 0, nullptr, 0);
		if (err && !fatal())
			return err;
		{
			// The event thread dispatches under ev_mu_.
			std::lock_guard lk(ev_mu_);
			epoll_ctl(ep_.get(), EPOLL_CTL_DEL, c->ev.get(), nullptr);
			cqs_.erase(c);
		}
		delete c;
		return 0;
	}

	int create_qp(const emu::QpCreate &c, emu::Qp **qp, uint32_t *qpn) override
	{
		auto *sq = static_cast<emu::Ring *>(c.sq);
		auto *rq = static_cast<emu::Ring *>(c.rq);
		QpReq req;
		req.pdn = c.pdn;
		req.send_cq = rcq(c.send_cq)->id;
		req.recv_cq = rcq(c.recv_cq)->id;
		req.sq_slots = sq->slots();
		req.sq_stride = sq->stride();
		req.rq_slots = rq->slots();
		req.rq_stride = rq->stride();
		req.sig_all = c.sig_all;
		req.coll = c.coll;
		int fds[2] = {sq->mem_fd(), rq->mem_fd()};
		ObjRep rep;
		int err = call(Op::create_qp, &req, sizeof(req), fds, 2, &rep, sizeof(rep));
		if (err)
			return err;
		auto q = std::make_unique<RQp>();
		q->id = rep.id;
		q->qpn = rep.num;
		q->coll = c.coll;
		q->sq = c.sq;
		q->rq = c.rq;
		q->scq = rcq(c.send_cq);
		q->rcq = rcq(c.recv_cq);
		{
			std::lock_guard lk(ev_mu_);
			qps_.insert(q.get());
		}
		*qpn = rep.num;
		*qp = reinterpret_cast<emu::Qp *>(q.release());
		return 0;
	}
	int modify_qp(emu::Qp *qp, const emu::QpAttr &a, uint32_t mask) override
	{
		ModifyReq req;
		req.id = rqp(qp)->id;
		req.mask = mask;
		req.attr = a;
		req.attr.job = nullptr;
		std::vector<uint8_t> buf(reinterpret_cast<uint8_t *>(&req),
					 reinterpret_cast<uint8_t *>(&req) + sizeof(req));
		if ((mask & emu::kQpJob) && a.job) {
			std::vector<uint8_t> job;
			pack_job(*a.job, &job);
			buf.insert(buf.end(), job.begin(), job.end());
			if (sizeof(Hdr) + buf.size() > kMaxMsgBytes) {
				IBVC_WARN("devd",
					  "a job of {} nodes is more than one request to the "
					  "daemon carries ({} bytes)",
					  a.job->members.size(), kMaxMsgBytes);
				return EINVAL;
			}
		}
		int err = call(Op::modify_qp, buf.data(), buf.size(), nullptr, 0, nullptr, 0);
		if (!err && (mask & emu::kQpJob) && a.job) {
			std::lock_guard lk(ev_mu_);
			rqp(qp)->jid = a.job->jid;
		}
		return err;
	}
	int query_qp(emu::Qp *qp, emu::QpAttr *a) override
	{
		ObjReq req{rqp(qp)->id, 0};
		int err = call(Op::query_qp, &req, sizeof(req), nullptr, 0, a, sizeof(*a));
		if (!err)
			a->job = nullptr;
		return err;
	}
	int destroy_qp(emu::Qp *qp) override
	{
		ObjReq req{rqp(qp)->id, 0};
		int err = call(Op::destroy_qp, &req, sizeof(req), nullptr, 0, nullptr, 0);
		if (err && fatal())
			err = 0; // it died with the device
		if (!err) {
			std::lock_guard lk(ev_mu_);
			qps_.erase(rqp(qp));
			delete rqp(qp);
		}
		return err;
	}

	void sq_doorbell(emu::Qp *qp) override { doorbell(Op::sq_doorbell, rqp(qp)); }
	void rq_doorbell(emu::Qp *qp) override { doorbell(Op::rq_doorbell, rqp(qp)); }
	void cq_arm(emu::Cq *cq, bool solicited_only) override
	{
		RCq *c = rcq(cq);
		c->armed = true;
		// A reply, so that the arm is in place before the caller polls
		// again (a completion in between must not go unannounced).
		ObjReq req{c->id, solicited_only};
		int err = call(Op::arm_cq, &req, sizeof(req), nullptr, 0, nullptr, 0);
		if (err && fatal()) {
			// The device is gone: the arm is answered at once, as
			// the event its death gave would have been.
			std::lock_guard lk(ev_mu_);
			if (c->armed.exchange(false) && c->fn)
				c->fn(c->arg);
		} else if (err) {
			IBVC_WARN("devd", "arm cq: {}", strerror(err));
		}
	}
	// The daemon's engine thread makes all progress: a poller that found
	// the CQ empty gives the processor up, so that on a machine with
	// fewer cores than busy threads the engine runs sooner.
	void progress(const emu::Cq *) override { sched_yield(); }
	bool fatal() const override { return dead_.load(std::memory_order_relaxed); }
	emu::NicCounters counters() override
	{
		emu::NicCounters c;
		if (int err = call(Op::counters, nullptr, 0, nullptr, 0, &c, sizeof(c))) {
			IBVC_WARN("devd", "counters: {}", strerror(err));
			c = emu::NicCounters{};
		}
		return c;
	}
	int check_local(uint32_t pdn, const emu::Sge *sges, const uint64_t *len, uint32_t n,
			uint32_t need) override
	{
		if (fatal())
			return EIO;
		for (uint32_t i = 0; i < n; i++) {
			if (!len[i])
				continue;
			if (sges[i].length < len[i] || mine_.check(sges[i].lkey, pdn, sges[i].addr,
								   len[i], need) != emu::DmaErr::ok)
				return EINVAL;
		}
		return 0;
	}

private:
	// One request and its reply; EIO when the daemon is gone.
	int call(Op op, const void *req, size_t len, const int *fds, size_t nfds, void *rep,
		 size_t rep_len, util::UniqueFd *rep_fd = nullptr)
	{
		std::lock_guard lk(mu_);
		if (dead_)
			return EIO;
		uint8_t buf[kMaxMsgBytes];
		Hdr h;
		h.op = uint16_t(op);
		h.seq = ++seq_;
		h.len = uint32_t(len);
		if (sizeof(h) + len > sizeof(buf))
			return EINVAL;
		memcpy(buf, &h, sizeof(h));
		if (len)
			memcpy(buf + sizeof(h), req, len);
		int err = send_msg(sock_.get(), buf, sizeof(h) + len, fds, nfds);
		size_t got = 0, nf = 0;
		util::UniqueFd rfds[kMaxFds];
		if (!err)
			err = recv_msg(sock_.get(), buf, sizeof(buf), &got, rfds, &nf);
		if (err)
			return lost(err);
		ReplyHdr r;
		if (got < sizeof(r))
			return lost(EPROTO);
		memcpy(&r, buf, sizeof(r));
		if (r.h.seq != h.seq || r.h.op != h.op)
			return lost(EPROTO);
		if (r.err)
			return r.err;
		if (got - sizeof(r) != rep_len)
			return lost(EPROTO);
		if (rep_len)
			memcpy(rep, buf + sizeof(r), rep_len);
		if (rep_fd && nf)
			*rep_fd = std::move(rfds[0]);
		return 0;
	}
	// A doorbell after the device died (the WQEs were published after
	// the flush looked at the ring, or the poster checked fatal() before
	// it turned) flushes them here, so that none is left without its
	// completion.
	void doorbell(Op op, RQp *q)
	{
		// The driver stored the queue's producer index: an engine thread
		// that is awake sees it in a pass, the last after its word went
		// to 0 (nic/engine.h awake_word), so no message is needed.  A dead
		// daemon's word stays as it was: its death is looked at first.
		util::full_fence();
		if (!dead_ && awake_ && awake_->load(std::memory_order_relaxed) == 1)
			return;
		std::unique_lock lk(mu_);
		if (dead_) {
			lk.unlock();
			std::lock_guard elk(ev_mu_);
			flush_qp(q);
			return;
		}
		uint32_t id = q->id;
		struct {
			Hdr h;
			ObjReq r;
		} m;
		m.h.op = uint16_t(op);
		m.h.seq = ++seq_;
		m.h.len = sizeof(m.r);
		m.r.id = id;
		if (int err = send_msg(sock_.get(), &m, sizeof(m)))
			lost(err);
	}
	int lost(int err)
	{
		// Before the hello, the daemon that accepted us was leaving:
		// open_client looks again, nothing is lost yet.
		if (!dead_.exchange(true) && hello_done_)
			IBVC_ERR("devd", "lost the device daemon: {}", strerror(err));
		return EIO;
	}

	// Produce one CQE into a CQ ring whose producer (the daemon) is gone.
	// Under ev_mu_.
	void push_cqe(RCq *c, const emu::Cqe &e)
	{
		emu::Queue &q = *c->ring;
		if (!q.free_slots()) {
			if (!c->overruns++)
				IBVC_ERR("devd", "cq overrun: flush completion of wr_id {:#x} lost",
					 e.wr_id);
			return;
		}
		uint32_t prod = q.prod_relaxed();
		memcpy(q.slot(prod), &e, sizeof(e));
		q.publish(prod + 1);
	}

	// Whether a collective QUERY WQE was answered already: the daemon
	// answers one at once, out of order, and leaves it in the SQ until
	// the collectives before it retire.  Its CQE is among the last ring
	// slots produced (unless more than a ring of completions came since).
	static bool query_answered(const RQp &q, const emu::CollWqe &w)
	{
		const emu::Queue &r = *q.scq->ring;
		uint32_t prod = r.prod();
		for (uint32_t i = prod - r.slots(); i != prod; i++) {
			const auto *e = r.at<emu::Cqe>(i);
			if (e->qpn == q.qpn && e->opcode == uint8_t(emu::CollOp::query) &&
			    e->wr_id == w.wr_id && e->mid == w.mid)
				return true;
		}
		return false;
	}

	// Complete every WQE of q the daemon had not completed with
	// IBV_WC_WR_FLUSH_ERR, as the NIC does for a QP in error.  The
	// daemon advanced each ring's cons past a WQE before writing its
	// completion (engine.cc: room first), so what lies between cons and
	// our prod had none.  Under ev_mu_, once the device is dead.
	void flush_qp(RQp *q)
	{
		if (!q->flushing) {
			q->flushing = true;
			q->sq_done = q->sq->cons();
			q->rq_done = q->rq->cons();
		}
		for (uint32_t prod = q->sq->prod(); q->sq_done != prod; q->sq_done++) {
			if (prod - q->sq_done > q->sq->slots())
				q->sq_done = prod - q->sq->slots(); // a torn index
			emu::Cqe e{};
			e.qpn = q->qpn;
			e.status = uint8_t(emu::WcStatus::wr_flush_err);
			if (q->coll) {
				const auto *w = q->sq->at<emu::CollWqe>(q->sq_done);
				if (w->opcode == uint8_t(emu::CollOp::query) &&
				    query_answered(*q, *w))
					continue;
				e.wr_id = w->wr_id;
				e.opcode = w->opcode;
				e.coll_status = uint8_t(emu::CollStatus::flushed);
				e.jid = q->jid;
				e.mid = w->mid;
			} else {
				const auto *w = q->sq->at<emu::SendWqe>(q->sq_done);
				e.wr_id = w->wr_id;
				e.byte_len = w->length;
				switch (emu::WrOpcode(w->opcode)) {
				case emu::WrOpcode::rdma_write:
				case emu::WrOpcode::rdma_write_imm:
					e.opcode = uint8_t(emu::WcOpcode::rdma_write);
					break;
				case emu::WrOpcode::rdma_read:
					e.opcode = uint8_t(emu::WcOpcode::rdma_read);
					break;
				default: e.opcode = uint8_t(emu::WcOpcode::send);
				}
			}
			push_cqe(q->scq, e);
		}
		for (uint32_t prod = q->rq->prod(); q->rq_done != prod; q->rq_done++) {
			if (prod - q->rq_done > q->rq->slots())
				q->rq_done = prod - q->rq->slots();
			const auto *w = q->rq->at<emu::RecvWqe>(q->rq_done);
			emu::Cqe e{};
			e.wr_id = w->wr_id;
			e.qpn = q->qpn;
			e.status = uint8_t(emu::WcStatus::wr_flush_err);
			e.opcode = uint8_t(emu::WcOpcode::recv);
			push_cqe(q->rcq, e);
		}
		// A poller asleep on a channel wakes to find them.
		for (RCq *c : {q->scq, q->rcq})
			if (c->armed.exchange(false) && c->fn)
				c->fn(c->arg);
	}

	// The daemon is gone, and the NIC with it (rdma-core's device
	// removal, or a NIC's internal error): every WQE it had not completed
	// completes with IBV_WC_WR_FLUSH_ERR, as if every QP had moved to
	// error; every armed CQ gets its event, so that no poller and no
	// thread asleep on a channel waits forever; then one
	// IBV_EVENT_DEVICE_FATAL goes to the context's async events.  The
	// commands fail with EIO from now on.  The daemon produced into the
	// CQ rings; it is dead, so this thread may.  Under ev_mu_.
	void fail_device()
	{
		{
			// Under the channel's lock: a doorbell either went before
			// (its WQEs are in the rings the flush reads) or finds the
			// device dead and flushes itself.
			std::lock_guard lk(mu_);
			lost(ECONNRESET);
		}
		epoll_ctl(ep_.get(), EPOLL_CTL_DEL, sock_.get(), nullptr);
		for (RQp *q : qps_)
			flush_qp(q);
		for (RCq *c : cqs_)
			if (c->armed.exchange(false) && c->fn)
				c->fn(c->arg);
		if (fatal_fn_)
			fatal_fn_(fatal_arg_);
	}

	void event_loop()
	{
		epoll_event evs[16];
		for (;;) {
			int n = epoll_wait(ep_.get(), evs, 16, -1);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return;
			std::lock_guard lk(ev_mu_);
			for (int i = 0; i < n; i++) {
				if (!evs[i].data.ptr)
					return; // stop
				if (evs[i].data.ptr == &sock_) {
					fail_device();
					continue;
				}
				auto *c = static_cast<RCq *>(evs[i].data.ptr);
				uint64_t v;
				if (read(c->ev.get(), &v, sizeof(v)) == sizeof(v)) {
					c->armed = false; // the daemon disarmed it
					if (c->fn)
						c->fn(c->arg);
				}
			}
		}
	}

	FatalFn fatal_fn_;
	void *fatal_arg_;
	util::UniqueFd sock_, ep_, stop_;
	std::mutex mu_; // the channel: one request at a time
	uint32_t seq_ = 0;
	std::atomic<bool> dead_{false};
	bool hello_done_ = false;
	std::set<RCq *> cqs_; // under ev_mu_
	std::set<RQp *> qps_; // under ev_mu_
	HelloRep hello_;
	// This client's own MRs, as the daemon registered them: the keys of
	// its PDs are its own, so a post's SGEs are checked here, as the
	// daemon would, without a round trip (check_local).
	emu::MrTable mine_;
	const std::atomic<uint32_t> *awake_ = nullptr; // the daemon's page, read-only
	std::mutex ev_mu_;
	std::mutex stop_mu_;
	std::thread events_;
};

Registry::~Registry()
{
	std::lock_guard lk(mu_);
	gone_ = true;
	for (Client *c : live_)
		c->stop_events();
}

namespace {

// Connect to the daemon of the netdev, starting one when none serves.  0
// with *fd; EAGAIN when the daemon our start lost the race to had gone by
// the time we connected; else an errno, logged once.
int reach(const std::string &netdev, const DevdStart &start, util::UniqueFd *fd)
{
	const std::string dev = "crxe_" + netdev;
	int err = connect_dev(dev, fd);
	if (err == ECONNREFUSED && start.path.empty()) {
		IBVC_ERR("devd", "{}: no ibv_coll_devd serves it, and none is started: {}", dev,
			 start.advice);
		return err;
	}
	if (err == ECONNREFUSED) {
		IBVC_INFO("devd", "{}: no daemon, starting {}", dev, start.path);
		SpawnResult r;
		if ((err = spawn_daemon(netdev, start.path, &r))) {
			IBVC_ERR("devd", "{}: cannot start {}: {}", dev, start.path, strerror(err));
			return err;
		}
		if (r.exec_err) {
			IBVC_ERR("devd", "{}: cannot run {}: {}; {}", dev, start.path,
				 strerror(r.exec_err), start.advice);
			return r.exec_err;
		}
		// Status 3: it lost the race to serve the netdev to another
		// starter, which serves now.
		if (r.status >= 0 && r.status != 3) {
			IBVC_ERR("devd",
				 "{}: {} exited with status {} before it served (what it said is "
				 "above; '{} {}' runs it by hand)",
				 dev, start.path, r.status, start.path, netdev);
			return ECONNREFUSED;
		}
		// It serves, or the one it lost to does (which may still be
		// getting ready), or it is slow: connect.
		for (int i = 0; i < 200; i++) {
			err = connect_dev(dev, fd);
			if (err != ECONNREFUSED)
				break;
			usleep(10000);
		}
		if (err == ECONNREFUSED && r.status == 3)
			return EAGAIN;
		if (err == ECONNREFUSED) {
			IBVC_ERR("devd",
				 "{}: {} started but does not answer{} ('{} {}' runs it by hand)",
				 dev, start.path, r.timed_out ? " (not ready after 10 s)" : "",
				 start.path, netdev);
			return err;
		}
	}
	if (err)
		IBVC_ERR("devd", "{}: cannot reach ibv_coll_devd: {}", dev, strerror(err));
	return err;
}

} // namespace

int open_client(const std::string &netdev, const DevdStart &start,
		std::unique_ptr<emu::Device> *out, FatalFn on_fatal, void *arg)
{
	// A daemon started with --exit-idle leaves when its last client has
	// gone: one leaving may still take our connection and then close it
	// (the last job's daemon, as the next job's first process opens), and
	// the one our start lost the race to may be gone before we connect.
	// Both are a daemon going as we come: look again (and start one).
	for (int attempt = 1;; attempt++) {
		util::UniqueFd fd;
		int err = reach(netdev, start, &fd);
		if (!err) {
			auto c = std::make_unique<Client>(on_fatal, arg);
			if (!(err = c->start(std::move(fd)))) {
				*out = std::move(c);
				return 0;
			}
		}
		if (err != EAGAIN && err != ECONNRESET)
			return err;
		if (attempt == 5) {
			IBVC_ERR("devd", "crxe_{}: the daemon went as this process came, {} times",
				 netdev, attempt);
			return ECONNREFUSED;
		}
		IBVC_INFO("devd", "crxe_{}: the daemon went as this process came; again", netdev);
	}
}

} // namespace ibv_coll::devd
