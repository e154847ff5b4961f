// ibv_coll_devd's server: requests in, the NIC's command interface out.
#include "devd/devd_server.h"

#include "devd/devd_proto.h"
#include "devd/devd_sock.h"
#include "util/log.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace ibv_coll::devd {

namespace {

// How long a daemon started with --exit-idle waits for a client.
constexpr int kFirstClientMs = 10000;

struct SCq {
	std::unique_ptr<emu::Ring> ring;
	util::UniqueFd ev;
	emu::Cq *hw = nullptr;
};
struct SQp {
	std::unique_ptr<emu::Ring> sq, rq;
	emu::Qp *hw = nullptr;
};

void cq_event(void *arg)
{
	uint64_t one = 1;
	if (write(static_cast<SCq *>(arg)->ev.get(), &one, sizeof(one)) < 0) {
		// EAGAIN: the counter is full, the client has events to read.
	}
}

// Map a client's ring memfd: EINVAL unless it holds the ring.
int map_ring(util::UniqueFd fd, uint32_t slots, uint32_t stride, std::unique_ptr<emu::Ring> *out)
{
	if (!fd || !slots || slots > (1u << 20) || !stride || stride > (1u << 16))
		return EINVAL;
	size_t bytes = emu::Queue::region_bytes(slots, stride);
	struct stat st;
	if (fstat(fd.get(), &st) || size_t(st.st_size) < bytes)
		return EINVAL;
	void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
	if (m == MAP_FAILED)
		return errno;
	*out = std::make_unique<emu::Ring>(slots, stride, std::move(fd), m, bytes, false);
	return 0;
}

} // namespace

struct Server::Conn {
	util::UniqueFd fd;
	Peer peer;
	std::set<uint32_t> pds, mrs;
	std::map<uint32_t, std::unique_ptr<SCq>> cqs;
	std::map<uint32_t, std::unique_ptr<SQp>> qps;
};

int Server::create(const std::string &dev, std::unique_ptr<emu::Nic> nic, const ServerOptions &o,
		   std::unique_ptr<Server> *out)
{
	std::unique_ptr<Server> s(new Server());
	s->dev_ = dev;
	s->nic_ = std::move(nic);
	s->opt_ = o;
	if (int err = listen_dev(dev, &s->lfd_))
		return err;
	s->wake_fd_.reset(memfd_create("ibv_coll_devd-awake", MFD_CLOEXEC));
	if (!s->wake_fd_ || ftruncate(s->wake_fd_.get(), 4096))
		return errno;
	s->wake_map_ = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, s->wake_fd_.get(),
			    0);
	if (s->wake_map_ == MAP_FAILED) {
		s->wake_map_ = nullptr;
		return errno;
	}
	s->nic_->share_awake_word(static_cast<std::atomic<uint32_t> *>(s->wake_map_));
	s->ep_.reset(epoll_create1(EPOLL_CLOEXEC));
	s->stop_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (!s->ep_ || !s->stop_)
		return errno;
	epoll_event e{};
	e.events = EPOLLIN;
	e.data.ptr = nullptr;
	if (epoll_ctl(s->ep_.get(), EPOLL_CTL_ADD, s->stop_.get(), &e))
		return errno;
	e.data.ptr = &s->lfd_;
	if (epoll_ctl(s->ep_.get(), EPOLL_CTL_ADD, s->lfd_.get(), &e))
		return errno;
	*out = std::move(s);
	return 0;
}

Server::~Server()
{
	nic_.reset(); // its engine thread writes the awake word
	if (wake_map_)
		munmap(wake_map_, 4096);
}

void Server::stop()
{
	stopping_ = true;
	uint64_t one = 1;
	if (write(stop_.get(), &one, sizeof(one)) < 0) {
	}
}

int Server::run()
{
	IBVC_INFO("devd", "{}: serving on @{}", dev_, socket_name(dev_));
	std::set<Conn *> conns;
	while (!stopping_) {
		epoll_event evs[32];
		// Started for a client (exit_idle) that never came (it died, or
		// went to another daemon): leave rather than serve nobody for good.
		const int wait_ms = opt_.exit_idle && !clients_ ? kFirstClientMs : -1;
		int n = epoll_wait(ep_.get(), evs, 32, wait_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0) {
			IBVC_INFO("devd", "{}: no client in {} s, leaving", dev_,
				  kFirstClientMs / 1000);
			break;
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (!p)
				continue; // stop: the loop condition says
			if (p == &lfd_) {
				util::UniqueFd fd;
				while (accept_client(lfd_.get(), &fd) == 0) {
					auto c = std::make_unique<Conn>();
					c->fd = std::move(fd);
					if (peer_of(c->fd.get(), &c->peer) ||
					    !peer_allowed(c->peer, geteuid())) {
						IBVC_WARN("devd", "{}: refused pid {} uid {}", dev_,
							  c->peer.pid, c->peer.uid);
						continue;
					}
					epoll_event e{};
					e.events = EPOLLIN | EPOLLRDHUP;
					e.data.ptr = c.get();
					if (epoll_ctl(ep_.get(), EPOLL_CTL_ADD, c->fd.get(), &e))
						continue;
					IBVC_INFO("devd", "{}: client pid {}", dev_, c->peer.pid);
					clients_++;
					conns.insert(c.release());
				}
				continue;
			}
			auto *c = static_cast<Conn *>(p);
			int err = 0;
			if (evs[i].events & EPOLLIN)
				err = serve(*c);
			else
				err = ECONNRESET;
			if (err) {
				conns.erase(c);
				close_conn(c);
				if (!--clients_ && opt_.exit_idle)
					stopping_ = true;
			}
		}
	}
	for (Conn *c : conns)
		close_conn(c);
	return 0;
}

void Server::close_conn(Conn *c)
{
	// What the client made, undone in dependency order; its work is
	// flushed as its QPs go.
	size_t nq = c->qps.size(), ncq = c->cqs.size(), nmr = c->mrs.size();
	for (auto &[id, q] : c->qps)
		nic_->destroy_qp(q->hw);
	c->qps.clear();
	for (auto &[id, q] : c->cqs)
		nic_->destroy_cq(q->hw);
	c->cqs.clear();
	for (uint32_t k : c->mrs)
		nic_->dereg_mr(k);
	for (uint32_t pdn : c->pds)
		nic_->dealloc_pd(pdn);
	IBVC_INFO("devd", "{}: client pid {} gone ({} qps, {} cqs, {} mrs released)", dev_,
		  c->peer.pid, nq, ncq, nmr);
	epoll_ctl(ep_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
	delete c;
}

// One request being served: what came, and the reply being built.
struct Server::Req {
	Conn &c;
	Hdr h;
	const uint8_t *body;
	util::UniqueFd *fds;
	size_t nfds;
	uint8_t *out; // the reply's body
	size_t rlen = 0;
	int res = 0;	 // the reply's errno
	int out_fd = -1; // a descriptor the reply carries (lent)
	bool need(size_t n) const { return h.len == n; }
	void put(const void *p, size_t n)
	{
		memcpy(out, p, n);
		rlen = n;
	}
	SCq *cq_of(uint32_t id)
	{
		auto it = c.cqs.find(id);
		return it == c.cqs.end() ? nullptr : it->second.get();
	}
	SQp *qp_of(uint32_t id)
	{
		auto it = c.qps.find(id);
		return it == c.qps.end() ? nullptr : it->second.get();
	}
};

// The device, protection domains and memory regions.
int Server::serve_mem(Req &r)
{
	switch (Op(r.h.op)) {
	case Op::hello: {
		HelloRep o;
		o.version = kProtoVersion;
		o.active_mtu = nic_->active_mtu();
		o.seg_units = nic_->seg_units();
		o.seg_unit_bytes = nic_->seg_unit_bytes();
		o.udp_port = nic_->udp_port();
		r.put(&o, sizeof(o));
		r.out_fd = wake_fd_.get();
		break;
	}
	case Op::alloc_pd: {
		PdMsg o;
		// The client's memory is its process's: SO_PEERCRED's pid.
		r.res = nic_->alloc_pd_in(r.c.peer.pid, &o.pdn);
		if (!r.res) {
			r.c.pds.insert(o.pdn);
			r.put(&o, sizeof(o));
		}
		break;
	}
	case Op::dealloc_pd: {
		PdMsg q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		if (!r.c.pds.count(q.pdn))
			r.res = EINVAL;
		else if (!(r.res = nic_->dealloc_pd(q.pdn)))
			r.c.pds.erase(q.pdn);
		break;
	}
	case Op::reg_mr:
	case Op::reg_mr_keyed: {
		MrReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		KeyRep o;
		if (!r.c.pds.count(q.pdn))
			r.res = EINVAL;
		else if (Op(r.h.op) == Op::reg_mr)
			r.res = nic_->reg_mr(q.pdn, reinterpret_cast<const void *>(q.addr), q.len,
					     q.access, &o.key);
		else
			r.res = nic_->reg_mr_keyed(q.pdn, reinterpret_cast<const void *>(q.addr),
						   q.len, q.access, o.key = q.key);
		if (!r.res) {
			r.c.mrs.insert(o.key);
			if (Op(r.h.op) == Op::reg_mr)
				r.put(&o, sizeof(o));
		}
		break;
	}
	case Op::dereg_mr: {
		MrReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		// Only the connection's own keys: another's would be theirs.
		if (!r.c.mrs.count(q.key))
			r.res = EINVAL;
		else if (!(r.res = nic_->dereg_mr(q.key)))
			r.c.mrs.erase(q.key);
		break;
	}
	default: return kNotMine;
	}
	return 0;
}

// Completion queues, counters and the post-time check of local SGEs.
int Server::serve_cq(Req &r)
{
	switch (Op(r.h.op)) {
	case Op::create_cq: {
		CqReq q;
		if (!r.need(sizeof(q)) || r.nfds != 2)
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		auto cq = std::make_unique<SCq>();
		cq->ev = std::move(r.fds[1]);
		r.res = map_ring(std::move(r.fds[0]), q.slots, q.stride, &cq->ring);
		ObjRep o;
		if (!r.res)
			r.res = nic_->create_cq(cq->ring.get(), cq_event, cq.get(), &cq->hw,
						&o.num);
		if (!r.res) {
			o.id = next_id_++;
			r.c.cqs[o.id] = std::move(cq);
			r.put(&o, sizeof(o));
		}
		break;
	}
	case Op::destroy_cq: {
		ObjReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		SCq *cq = r.cq_of(q.id);
		if (!cq)
			r.res = EINVAL;
		else if (!(r.res = nic_->destroy_cq(cq->hw)))
			r.c.cqs.erase(q.id);
		break;
	}
	case Op::arm_cq: {
		ObjReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		if (SCq *cq = r.cq_of(q.id))
			nic_->cq_arm(cq->hw, q.arg != 0);
		else
			r.res = EINVAL;
		break;
	}
	case Op::counters: {
		emu::NicCounters o = nic_->counters();
		r.put(&o, sizeof(o));
		break;
	}
	default: return kNotMine;
	}
	return 0;
}

// Queue pairs and their doorbells.
int Server::serve_qp(Req &r)
{
	switch (Op(r.h.op)) {
	case Op::create_qp: {
		QpReq q;
		if (!r.need(sizeof(q)) || r.nfds != 2)
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		auto qp = std::make_unique<SQp>();
		SCq *scq = r.cq_of(q.send_cq), *rcq = r.cq_of(q.recv_cq);
		if (!scq || !rcq || !r.c.pds.count(q.pdn))
			r.res = EINVAL;
		if (!r.res)
			r.res = map_ring(std::move(r.fds[0]), q.sq_slots, q.sq_stride, &qp->sq);
		if (!r.res)
			r.res = map_ring(std::move(r.fds[1]), q.rq_slots, q.rq_stride, &qp->rq);
		ObjRep o;
		if (!r.res) {
			emu::QpCreate cr;
			cr.pdn = q.pdn;
			cr.sq = qp->sq.get();
			cr.rq = qp->rq.get();
			cr.send_cq = scq->hw;
			cr.recv_cq = rcq->hw;
			cr.sig_all = q.sig_all;
			cr.coll = q.coll;
			r.res = nic_->create_qp(cr, &qp->hw, &o.num);
		}
		if (!r.res) {
			o.id = next_id_++;
			r.c.qps[o.id] = std::move(qp);
			r.put(&o, sizeof(o));
		}
		break;
	}
	case Op::modify_qp: {
		ModifyReq q;
		if (r.h.len < sizeof(q))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		q.attr.job = nullptr;
		emu::JobConfig job;
		if (q.mask & emu::kQpJob) {
			r.res = unpack_job(r.body + sizeof(q), r.h.len - sizeof(q), &job);
			if (r.res == EPROTO)
				return EPROTO;
			q.attr.job = &job;
		} else if (r.h.len != sizeof(q)) {
			return EPROTO;
		}
		SQp *qp = r.qp_of(q.id);
		if (!r.res && !qp)
			r.res = EINVAL;
		if (!r.res)
			r.res = nic_->modify_qp(qp->hw, q.attr, q.mask);
		break;
	}
	case Op::query_qp: {
		ObjReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		SQp *qp = r.qp_of(q.id);
		emu::QpAttr a;
		if (!qp)
			r.res = EINVAL;
		else if (!(r.res = nic_->query_qp(qp->hw, &a))) {
			a.job = nullptr;
			r.put(&a, sizeof(a));
		}
		break;
	}
	case Op::destroy_qp: {
		ObjReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		SQp *qp = r.qp_of(q.id);
		if (!qp)
			r.res = EINVAL;
		else if (!(r.res = nic_->destroy_qp(qp->hw)))
			r.c.qps.erase(q.id);
		break;
	}
	case Op::sq_doorbell:
	case Op::rq_doorbell: {
		ObjReq q;
		if (!r.need(sizeof(q)))
			return EPROTO;
		memcpy(&q, r.body, sizeof(q));
		if (SQp *qp = r.qp_of(q.id)) {
			if (Op(r.h.op) == Op::sq_doorbell)
				nic_->sq_doorbell(qp->hw);
			else
				nic_->rq_doorbell(qp->hw);
		}
		return kNoReply;
	}
	default: return kNotMine;
	}
	return 0;
}

// One request: 0, or an errno that ends the connection.  Each group of
// requests has its own function; kNotMine passes it on.
int Server::serve(Conn &c)
{
	uint8_t buf[kMaxMsgBytes];
	size_t len = 0, nfds = 0;
	util::UniqueFd fds[kMaxFds];
	int err = recv_msg(c.fd.get(), buf, sizeof(buf), &len, fds, &nfds);
	if (err == EAGAIN)
		return 0;
	if (err)
		return err;
	Hdr h;
	if (len < sizeof(h))
		return EPROTO;
	memcpy(&h, buf, sizeof(h));
	if (h.len != len - sizeof(h))
		return EPROTO;
	uint8_t rep[kMaxMsgBytes];
	ReplyHdr rh;
	Req r{c, h, buf + sizeof(h), fds, nfds, rep + sizeof(rh)};
	int st = serve_mem(r);
	if (st == kNotMine)
		st = serve_cq(r);
	if (st == kNotMine)
		st = serve_qp(r);
	if (st == kNotMine) {
		IBVC_WARN("devd", "{}: pid {}: unknown request {}", dev_, c.peer.pid, h.op);
		return EPROTO;
	}
	if (st == kNoReply)
		return 0;
	if (st)
		return st;
	rh.h = h;
	rh.err = r.res;
	rh.h.len = uint32_t(sizeof(rh) - sizeof(Hdr) + r.rlen);
	memcpy(rep, &rh, sizeof(rh));
	return send_msg(c.fd.get(), rep, sizeof(rh) + r.rlen, r.out_fd >= 0 ? &r.out_fd : nullptr,
			r.out_fd >= 0 ? 1 : 0);
}

} // namespace ibv_coll::devd
