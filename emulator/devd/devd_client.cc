// The client side of ibv_coll_devd: an emu::Device that forwards.
#include "devd/devd_client.h"

#include "devd/devd_proto.h"
#include "devd/devd_sock.h"
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
};
struct RQp {
	uint32_t id = 0;
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

class Client final : public emu::Device {
public:
	~Client() override
	{
		uint64_t one = 1;
		if (write(stop_.get(), &one, sizeof(one)) < 0) {
		}
		if (events_.joinable())
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
			return err;
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
		}
		return call(Op::modify_qp, buf.data(), buf.size(), nullptr, 0, nullptr, 0);
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
		if (!err)
			delete rqp(qp);
		return err;
	}

	void sq_doorbell(emu::Qp *qp) override { doorbell(Op::sq_doorbell, rqp(qp)->id); }
	void rq_doorbell(emu::Qp *qp) override { doorbell(Op::rq_doorbell, rqp(qp)->id); }
	void cq_arm(emu::Cq *cq, bool solicited_only) override
	{
		// A reply, so that the arm is in place before the caller polls
		// again (a completion in between must not go unannounced).
		ObjReq req{rcq(cq)->id, solicited_only};
		if (int err = call(Op::arm_cq, &req, sizeof(req), nullptr, 0, nullptr, 0))
			IBVC_WARN("devd", "arm cq: {}", strerror(err));
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
	void doorbell(Op op, uint32_t id)
	{
		// The driver stored the queue's producer index: an engine thread
		// that is awake sees it in a pass, the last after its word went
		// to 0 (nic/engine.h awake_word), so no message is needed.
		util::full_fence();
		if (awake_ && awake_->load(std::memory_order_relaxed) == 1)
			return;
		std::lock_guard lk(mu_);
		if (dead_)
			return;
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
		if (!dead_.exchange(true))
			IBVC_ERR("devd", "lost the device daemon: {}", strerror(err));
		return EIO;
	}

	// The daemon is gone, and the NIC with it: every CQ gets one
	// IBV_WC_FATAL_ERR completion (wr_id 0, qp_num 0) and an event, so
	// that no poller and no thread asleep on a channel waits forever; the
	// commands fail with EIO from now on.  The daemon produced into the
	// CQ rings; it is dead, so this thread may.  Under ev_mu_.
	void fail_device()
	{
		lost(ECONNRESET);
		epoll_ctl(ep_.get(), EPOLL_CTL_DEL, sock_.get(), nullptr);
		for (RCq *c : cqs_) {
			emu::Queue &q = *c->ring;
			if (q.free_slots()) {
				uint32_t prod = q.prod_relaxed();
				auto *e = q.at<emu::Cqe>(prod);
				memset(e, 0, sizeof(*e));
				e->status = uint8_t(emu::WcStatus::fatal_err);
				q.publish(prod + 1);
			}
			if (c->fn)
				c->fn(c->arg);
		}
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
				if (read(c->ev.get(), &v, sizeof(v)) == sizeof(v) && c->fn)
					c->fn(c->arg);
			}
		}
	}

	util::UniqueFd sock_, ep_, stop_;
	std::mutex mu_; // the channel: one request at a time
	uint32_t seq_ = 0;
	std::atomic<bool> dead_{false};
	std::set<RCq *> cqs_; // under ev_mu_
	HelloRep hello_;
	// This client's own MRs, as the daemon registered them: the keys of
	// its PDs are its own, so a post's SGEs are checked here, as the
	// daemon would, without a round trip (check_local).
	emu::MrTable mine_;
	const std::atomic<uint32_t> *awake_ = nullptr; // the daemon's page, read-only
	std::mutex ev_mu_;
	std::thread events_;
};

static int spawn_daemon(const std::string &netdev, const std::string &path)
{
	pid_t pid = fork();
	if (pid < 0)
		return errno;
	if (pid == 0) {
		// A grandchild, in a session of its own, so that the daemon
		// is nobody's child and outlives the process that started it.
		setsid();
		if (fork() != 0)
			_exit(0);
		execl(path.c_str(), path.c_str(), "--exit-idle", netdev.c_str(), (char *)nullptr);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
	}
	return 0;
}

int open_client(const std::string &netdev, const std::string &devd_path,
		std::unique_ptr<emu::Device> *out)
{
	const std::string dev = "crxe_" + netdev;
	util::UniqueFd fd;
	int err = connect_dev(dev, &fd);
	if (err == ECONNREFUSED && !devd_path.empty()) {
		IBVC_INFO("devd", "{}: no daemon, starting {}", dev, devd_path);
		if ((err = spawn_daemon(netdev, devd_path)))
			return err;
		// Wait for it to listen (it may also lose the race to another
		// starter: then that one serves).
		for (int i = 0; i < 200; i++) {
			err = connect_dev(dev, &fd);
			if (err != ECONNREFUSED)
				break;
			usleep(10000);
		}
	}
	if (err) {
		IBVC_ERR("devd", "{}: cannot reach ibv_coll_devd: {}", dev, strerror(err));
		return err;
	}
	auto c = std::make_unique<Client>();
	if ((err = c->start(std::move(fd))))
		return err;
	*out = std::move(c);
	return 0;
}

} // namespace ibv_coll::devd
