// libnccl-net-ibv_coll.so: the point-to-point net (ncclNet_v10/v11/v12).
// Each NCCL connection is one RC QP with a CQ of its own; NCCL's isend is
// an RC SEND, its irecv a posted receive, matched in order (NCCL posts its
// receives in the order the peer sends).  The QPs learn of each other over
// a TCP connection to the listener, whose address the handle carries; the
// socket is closed once both QPs are up.
#include "plugin.h"

#include "util/fd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

namespace ibv_coll::nccl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kHandleMagic = 0x3170326e63766269; // "ibvcn2p1"
constexpr uint32_t kInfoMagic = 0x69623270;
constexpr uint32_t kSendMagic = 0x73656e64, kRecvMagic = 0x72656376, kListenMagic = 0x6c69736e;
constexpr int kMaxRequests = NCCL_NET_MAX_REQUESTS;
// A peer that has not answered after this long is taken for gone.
constexpr auto kExchangeTimeout = std::chrono::seconds(30);
// RNR NAK wait 0.12 ms: NCCL's sender often runs ahead of the receiver's
// irecv, and the sender retries forever (rnr_retry 7) until it is posted.
constexpr uint8_t kMinRnrTimer = 7;

struct CqDeleter {
	void operator()(ibv_coll_cq *cq) const { ibv_destroy_coll_cq(cq); }
};
struct QpDeleter {
	void operator()(ibv_coll_qp *qp) const { ibv_destroy_coll_qp(qp); }
};

struct Comm;

struct Request {
	Comm *comm = nullptr;
	bool used = false, done = false, recv = false;
	ibv_wc_status status = IBV_WC_SUCCESS;
	size_t size = 0; // sent, or (once done) received
};

// A send or a receive comm: one RC QP.
struct Comm {
	uint32_t magic = 0;
	bool warned = false; // one WARN per failed connection
	// The QP goes before its CQ (members are destroyed in reverse order).
	std::unique_ptr<ibv_coll_cq, CqDeleter> cq;
	std::unique_ptr<ibv_coll_qp, QpDeleter> qp;
	Request reqs[kMaxRequests];
};

// What each side tells the other over TCP (same-architecture hosts).
struct QpInfo {
	uint8_t gid[16];
	uint32_t magic, qp_num, psn, mtu;
	uint16_t udp_port, pad;
};

struct Stage;

// listen's output, which NCCL carries to the connecting peer.  NCCL calls
// connect again with the same handle until it gives a comm, so the connect
// under way is kept in the handle (listen leaves it NULL).
struct Handle {
	uint64_t magic;
	sockaddr_in addr;
	Stage *stage;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

std::string addr_str(const sockaddr_in &a)
{
	char ip[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
	return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// One side of the QP swap, never blocking: the connector sends first, the
// acceptor answers once its QP can take the connector's packets.
struct Exchange {
	util::UniqueFd fd;
	bool connecting = false; // TCP connect still under way
	bool mine_ready = false;
	QpInfo mine{}, theirs{};
	size_t sent = 0, got = 0;
	Clock::time_point deadline = Clock::now() + kExchangeTimeout;

	// 1 when both ways are done, 0 not yet, -1 failed (*why says why).
	int step(std::string *why);
	bool got_all() const { return got == sizeof(theirs); }
};

bool would_block(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

int Exchange::step(std::string *why)
{
	if (connecting) {
		pollfd p{fd.get(), POLLOUT, 0};
		int err = 0;
		socklen_t len = sizeof(err);
		if (poll(&p, 1, 0) == 1) {
			getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
			if (err) {
				*why = std::string("tcp connect: ") + strerror(err);
				return -1;
			}
			connecting = false;
		}
	}
	if (!connecting && mine_ready && sent < sizeof(mine)) {
		ssize_t n = send(fd.get(), reinterpret_cast<char *>(&mine) + sent,
				 sizeof(mine) - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && !would_block(errno)) {
			*why = std::string("send: ") + strerror(errno);
			return -1;
		}
		sent += size_t(std::max<ssize_t>(n, 0));
	}
	if (!connecting && !got_all()) {
		ssize_t n = recv(fd.get(), reinterpret_cast<char *>(&theirs) + got,
				 sizeof(theirs) - got, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && !would_block(errno))) {
			*why = n ? std::string("recv: ") + strerror(errno)
				 : "the peer closed the connection";
			return -1;
		}
		got += size_t(std::max<ssize_t>(n, 0));
		if (got_all() && theirs.magic != kInfoMagic) {
			*why = "the peer is not an ibv_coll p2p net";
			return -1;
		}
	}
	if (sent == sizeof(mine) && got_all())
		return 1;
	if (Clock::now() > deadline) {
		*why = "no answer in 30 s";
		return -1;
	}
	return 0;
}

// A comm with its CQ and a QP in INIT, or NULL after a WARN.
std::unique_ptr<Comm> make_comm(uint32_t magic)
{
	auto c = std::make_unique<Comm>();
	c->magic = magic;
	for (Request &r : c->reqs) {
		r.comm = c.get();
		r.recv = magic == kRecvMagic;
	}
	Device &d = device();
	// Each request has at most one completion waiting, so this never overruns.
	c->cq.reset(ibv_create_coll_cq(d.ctx, kMaxRequests, nullptr, nullptr, 0));
	if (!c->cq) {
		NCCL_PLUGIN_WARN("ibv_create_coll_cq: %s", strerror(errno));
		return nullptr;
	}
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = c->cq.get();
	ia.qp_type = IBV_COLL_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = kMaxRequests;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	c->qp.reset(ibv_create_coll_qp(d.pd, &ia));
	if (!c->qp) {
		NCCL_PLUGIN_WARN("ibv_create_coll_qp: %s", strerror(errno));
		return nullptr;
	}
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	int err = ibv_modify_coll_qp(
		c->qp.get(), &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS);
	if (err) {
		NCCL_PLUGIN_WARN("qp to init: %s", strerror(err));
		return nullptr;
	}
	return c;
}

QpInfo info_of(const Comm &c)
{
	const Device &d = device();
	QpInfo i{};
	memcpy(i.gid, d.gid.raw, sizeof(i.gid));
	i.magic = kInfoMagic;
	i.qp_num = c.qp->qp_num;
	// PSNs need only differ between a QP's incarnations; 24 bits.
	i.psn = uint32_t(Clock::now().time_since_epoch().count()) & 0xffffff;
	i.mtu = uint32_t(d.port.active_mtu);
	i.udp_port = d.port.udp_port;
	return i;
}

// INIT -> RTR -> RTS towards the peer; false after a WARN.
bool bring_up(Comm &c, const QpInfo &mine, const QpInfo &peer)
{
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = ibv_mtu(std::min(mine.mtu, peer.mtu));
	a.dest_qp_num = peer.qp_num;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = kMinRnrTimer;
	memcpy(a.ah_attr.dgid.raw, peer.gid, sizeof(peer.gid));
	a.ah_attr.udp_port = peer.udp_port;
	a.ah_attr.sgid_index = 0; // device().gid
	int err = ibv_modify_coll_qp(c.qp.get(), &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
					     IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN |
					     IBV_COLL_QP_MAX_DEST_RD_ATOMIC |
					     IBV_COLL_QP_MIN_RNR_TIMER);
	if (!err) {
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = mine.psn;
		a.timeout = 0; // the device's default
		a.retry_cnt = 7;
		a.rnr_retry = 7; // forever: a send waits for its receive
		a.max_rd_atomic = 1;
		err = ibv_modify_coll_qp(c.qp.get(), &a,
					 IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN |
						 IBV_COLL_QP_TIMEOUT | IBV_COLL_QP_RETRY_CNT |
						 IBV_COLL_QP_RNR_RETRY |
						 IBV_COLL_QP_MAX_QP_RD_ATOMIC);
	}
	if (err)
		NCCL_PLUGIN_WARN("qp %#x to rts: %s", c.qp->qp_num, strerror(err));
	return !err;
}

// v11+'s per-communicator context: the net needs none.
char g_ctx;

// What one message may hold: an sge's length within the device's largest
// RC message, and what test's int sizes can report.
size_t max_p2p()
{
	size_t most = std::min<size_t>(device().port.max_msg_sz, INT_MAX);
	return most ? most : INT_MAX;
}

ncclResult_t init_net(ncclDebugLogger_t logger)
{
	return setup(logger);
}

template <typename Props> ncclResult_t get_properties(int dev, Props *p)
{
	if (!ready() || dev != 0) {
		NCCL_PLUGIN_WARN("getProperties: no device %d", dev);
		return ncclInvalidArgument;
	}
	fill_properties(p);
	p->maxP2pBytes = std::min(p->maxP2pBytes, max_p2p());
	if constexpr (requires { p->maxMultiRequestSize; })
		p->maxMultiRequestSize = 1;
	if constexpr (requires { p->railId; })
		p->railId = p->planeId = 0;
	return ncclSuccess;
}

// The address the listener binds: the device's IPv4 address when its GID
// is one (::ffff:a.b.c.d), else loopback (crxe_lo).
in_addr listen_ip()
{
	const uint8_t *g = device().gid.raw;
	in_addr ip{htonl(INADDR_LOOPBACK)};
	static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (!memcmp(g, kMapped, sizeof(kMapped)) && memcmp(g + 12, "\0\0\0\0", 4))
		memcpy(&ip, g + 12, 4);
	return ip;
}

// A connect or an accept under way.
struct Stage {
	Exchange ex;
	std::unique_ptr<Comm> comm;
	sockaddr_in addr{}; // the listener's
};

struct ListenComm {
	uint32_t magic = kListenMagic;
	util::UniqueFd fd;
	sockaddr_in addr{};
	std::unique_ptr<Stage> stage; // the accept under way
};

ncclResult_t listen_net(int dev, void *handle, void **listen_comm)
{
	*listen_comm = nullptr;
	if (!ready() || dev != 0 || !handle) {
		NCCL_PLUGIN_WARN("listen: no device %d", dev);
		return ncclInvalidArgument;
	}
	auto lc = std::make_unique<ListenComm>();
	lc->addr.sin_family = AF_INET;
	lc->addr.sin_addr = listen_ip();
	socklen_t len = sizeof(lc->addr);
	lc->fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (!lc->fd || bind(lc->fd.get(), reinterpret_cast<sockaddr *>(&lc->addr), len) ||
	    ::listen(lc->fd.get(), 16) ||
	    getsockname(lc->fd.get(), reinterpret_cast<sockaddr *>(&lc->addr), &len)) {
		NCCL_PLUGIN_WARN("listen on %s: %s", addr_str(lc->addr).c_str(), strerror(errno));
		return ncclSystemError;
	}
	Handle h{};
	h.magic = kHandleMagic;
	h.addr = lc->addr;
	memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
	memcpy(handle, &h, sizeof(h));
	*listen_comm = lc.release();
	return ncclSuccess;
}

// The first call of a connect: a QP in INIT and a TCP connection started.
ncclResult_t connect_start(Handle *h)
{
	auto s = std::make_unique<Stage>();
	s->addr = h->addr;
	if (!(s->comm = make_comm(kSendMagic)))
		return ncclSystemError;
	s->ex.fd.reset(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (!s->ex.fd) {
		NCCL_PLUGIN_WARN("socket: %s", strerror(errno));
		return ncclSystemError;
	}
	if (connect(s->ex.fd.get(), reinterpret_cast<sockaddr *>(&s->addr), sizeof(s->addr))) {
		if (errno != EINPROGRESS && errno != EINTR) {
			NCCL_PLUGIN_WARN("connect to %s: %s", addr_str(s->addr).c_str(),
					 strerror(errno));
			return ncclSystemError;
		}
		s->ex.connecting = true;
	}
	s->ex.mine = info_of(*s->comm);
	s->ex.mine_ready = true;
	h->stage = s.release();
	return ncclSuccess;
}

ncclResult_t connect_net(void *handle, void **send_comm)
{
	*send_comm = nullptr;
	auto *h = static_cast<Handle *>(handle);
	if (!ready() || !h || h->magic != kHandleMagic) {
		NCCL_PLUGIN_WARN("connect: not a handle of this net");
		return ncclInvalidArgument;
	}
	if (!h->stage) {
		ncclResult_t r = connect_start(h);
		if (r != ncclSuccess)
			return r;
	}
	std::string why;
	int r = h->stage->ex.step(&why);
	if (r == 0)
		return ncclSuccess;
	std::unique_ptr<Stage> s(std::exchange(h->stage, nullptr));
	if (r < 0) {
		NCCL_PLUGIN_WARN("connect to %s: %s", addr_str(s->addr).c_str(), why.c_str());
		return ncclSystemError;
	}
	if (!bring_up(*s->comm, s->ex.mine, s->ex.theirs))
		return ncclSystemError;
	*send_comm = s->comm.release();
	return ncclSuccess;
}

// A TCP connection taken from the backlog, or ncclSuccess with none yet.
ncclResult_t accept_start(ListenComm *lc)
{
	int fd = accept4(lc->fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (would_block(errno) || errno == ECONNABORTED)
			return ncclSuccess;
		NCCL_PLUGIN_WARN("accept on %s: %s", addr_str(lc->addr).c_str(), strerror(errno));
		return ncclSystemError;
	}
	auto s = std::make_unique<Stage>();
	s->ex.fd.reset(fd);
	if (!(s->comm = make_comm(kRecvMagic)))
		return ncclSystemError;
	s->ex.mine = info_of(*s->comm);
	lc->stage = std::move(s);
	return ncclSuccess;
}

// The device handle is left alone: a host net offers no device offload.
ncclResult_t accept_net(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_t **)
{
	*recv_comm = nullptr;
	auto *lc = static_cast<ListenComm *>(listen_comm);
	if (!lc || lc->magic != kListenMagic) {
		NCCL_PLUGIN_WARN("accept: not a listen comm of this net");
		return ncclInvalidArgument;
	}
	if (!lc->stage) {
		ncclResult_t r = accept_start(lc);
		if (r != ncclSuccess || !lc->stage)
			return r;
	}
	Stage &s = *lc->stage;
	std::string why;
	int r = s.ex.step(&why);
	// Answer only once the QP takes the connector's packets.
	if (r == 0 && !s.ex.mine_ready && s.ex.got_all()) {
		if (!bring_up(*s.comm, s.ex.mine, s.ex.theirs)) {
			lc->stage.reset();
			return ncclSystemError;
		}
		s.ex.mine_ready = true;
		r = s.ex.step(&why);
	}
	if (r == 0)
		return ncclSuccess;
	if (r > 0)
		*recv_comm = s.comm.release();
	else
		NCCL_PLUGIN_WARN("accept on %s: %s", addr_str(lc->addr).c_str(), why.c_str());
	lc->stage.reset();
	return r > 0 ? ncclSuccess : ncclSystemError;
}

struct Mr {
	ibv_coll_mr *mr = nullptr;
};

// The handles regMr gave out and deregMr has not taken back.
std::mutex g_mr_lock;
std::unordered_set<const Mr *> g_mrs;

Comm *as_comm(void *p, uint32_t magic)
{
	auto *c = static_cast<Comm *>(p);
	return c && c->magic == magic ? c : nullptr;
}

// The comm, or NULL after a WARN.
Comm *comm_of(void *p, uint32_t magic, const char *what)
{
	Comm *c = as_comm(p, magic);
	if (!c)
		NCCL_PLUGIN_WARN("%s: not a %s comm of this net", what,
				 magic == kSendMagic ? "send" : "receive");
	return c;
}

ncclResult_t reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
	*mhandle = nullptr;
	if (type != NCCL_PTR_HOST) {
		NCCL_PLUGIN_WARN("regMr: memory type %d is not host memory", type);
		return ncclInvalidArgument;
	}
	if (!as_comm(comm, kSendMagic) && !as_comm(comm, kRecvMagic)) {
		NCCL_PLUGIN_WARN("regMr: not a comm of this net");
		return ncclInvalidArgument;
	}
	auto m = std::make_unique<Mr>();
	std::lock_guard<std::mutex> g(g_mr_lock);
	auto it = g_mrs.insert(m.get()).first; // may throw: before there is an MR to leak
	// Sends and receives only: nothing remote ever needs this memory's rkey.
	if (!(m->mr = ibv_reg_coll_mr(device().pd, data, size, IBV_ACCESS_LOCAL_WRITE))) {
		g_mrs.erase(it);
		NCCL_PLUGIN_WARN("regMr of %zu bytes at %p: %s", size, data, strerror(errno));
		return ncclSystemError;
	}
	*mhandle = m.release();
	return ncclSuccess;
}

ncclResult_t dereg_mr(void *, void *mhandle)
{
	auto *m = static_cast<Mr *>(mhandle);
	{
		std::lock_guard<std::mutex> g(g_mr_lock);
		if (!g_mrs.erase(m)) {
			NCCL_PLUGIN_WARN("deregMr: unknown memory handle %p", mhandle);
			return ncclInvalidArgument;
		}
	}
	int err = ibv_dereg_coll_mr(m->mr);
	delete m;
	if (err) {
		NCCL_PLUGIN_WARN("deregMr: %s", strerror(err));
		return ncclSystemError;
	}
	return ncclSuccess;
}

// The lkey for [data, data + size), or false after a WARN.  A zero-length
// message touches no memory and needs no handle.
bool lkey_for(const char *what, void *mhandle, const void *data, size_t size, uint32_t *lkey)
{
	*lkey = 0;
	if (size > max_p2p()) {
		NCCL_PLUGIN_WARN("%s: %zu bytes is over maxP2pBytes (%zu)", what, size, max_p2p());
		return false;
	}
	if (!mhandle && !size)
		return true;
	std::lock_guard<std::mutex> g(g_mr_lock);
	auto *m = static_cast<const Mr *>(mhandle);
	if (!g_mrs.count(m)) {
		NCCL_PLUGIN_WARN("%s: unknown memory handle %p", what, mhandle);
		return false;
	}
	auto lo = reinterpret_cast<uintptr_t>(m->mr->addr), at = reinterpret_cast<uintptr_t>(data);
	if (size && (at < lo || at - lo > m->mr->length || size > m->mr->length - (at - lo))) {
		NCCL_PLUGIN_WARN("%s: %zu bytes at %p are outside their registration", what, size,
				 data);
		return false;
	}
	*lkey = m->mr->lkey;
	return true;
}

Request *take_request(Comm &c)
{
	for (Request &r : c.reqs)
		if (!r.used) {
			r.used = true;
			r.done = false;
			r.status = IBV_WC_SUCCESS;
			return &r;
		}
	return nullptr;
}

// A SEND or a receive of [data, data + size) as a request; *request stays
// NULL when all are in flight, for NCCL to ask again.
ncclResult_t post(Comm &c, void *data, size_t size, uint32_t lkey, void **request)
{
	Request *r = take_request(c);
	if (!r)
		return ncclSuccess;
	ibv_sge sge{reinterpret_cast<uintptr_t>(data), uint32_t(size), lkey};
	int num_sge = size ? 1 : 0, err;
	if (r->recv) {
		ibv_coll_recv_wr wr{uintptr_t(r), nullptr, &sge, num_sge}, *bad;
		err = ibv_post_coll_recv(c.qp.get(), &wr, &bad);
	} else {
		ibv_coll_send_wr wr{}, *bad;
		wr.wr_id = reinterpret_cast<uintptr_t>(r);
		wr.sg_list = &sge;
		wr.num_sge = num_sge;
		wr.opcode = IBV_COLL_WR_SEND;
		wr.send_flags = IBV_COLL_SEND_SIGNALED;
		err = ibv_post_coll_send(c.qp.get(), &wr, &bad);
	}
	if (err) {
		r->used = false;
		NCCL_PLUGIN_WARN("posting a %s of %zu bytes: %s", r->recv ? "receive" : "send",
				 size, strerror(err));
		return ncclSystemError;
	}
	r->size = size;
	*request = r;
	return ncclSuccess;
}

ncclResult_t isend(void *send_comm, void *data, size_t size, int, void *mhandle, void *,
		   void **request)
{
	*request = nullptr;
	Comm *c = comm_of(send_comm, kSendMagic, "isend");
	uint32_t lkey;
	if (!c || !lkey_for("isend", mhandle, data, size, &lkey))
		return ncclInvalidArgument;
	return post(*c, data, size, lkey, request);
}

// One receive at a time (maxRecvs 1), so the tags need no matching.
ncclResult_t irecv(void *recv_comm, int n, void **data, size_t *sizes, int *, void **mhandles,
		   void **, void **request)
{
	*request = nullptr;
	Comm *c = comm_of(recv_comm, kRecvMagic, "irecv");
	uint32_t lkey;
	if (c && n != 1)
		NCCL_PLUGIN_WARN("irecv: %d receives in one (maxRecvs is 1)", n);
	if (!c || n != 1 ||
	    !lkey_for("irecv", mhandles ? mhandles[0] : nullptr, data[0], sizes[0], &lkey))
		return ncclInvalidArgument;
	return post(*c, data[0], sizes[0], lkey, request);
}

// Take the comm's completions into their requests.
ncclResult_t poll_comm(Comm &c)
{
	ibv_coll_wc wc[kMaxRequests];
	int n = ibv_poll_coll_cq(c.cq.get(), kMaxRequests, wc);
	if (n < 0) {
		NCCL_PLUGIN_WARN("ibv_poll_coll_cq: %s", strerror(-n));
		return ncclSystemError;
	}
	for (int i = 0; i < n; i++) {
		auto *r = reinterpret_cast<Request *>(wc[i].wr_id);
		if (r < c.reqs || r >= c.reqs + kMaxRequests || !r->used)
			continue; // not ours: cannot happen
		r->done = true;
		r->status = wc[i].status;
		if (r->recv)
			r->size = wc[i].byte_len;
	}
	return ncclSuccess;
}

// The peer refused, or never answered.
bool remote_fault(ibv_wc_status s)
{
	return s == IBV_WC_REM_INV_REQ_ERR || s == IBV_WC_REM_ACCESS_ERR ||
	       s == IBV_WC_REM_OP_ERR || s == IBV_WC_RETRY_EXC_ERR ||
	       s == IBV_WC_RNR_RETRY_EXC_ERR || s == IBV_WC_REM_ABORT_ERR;
}

ncclResult_t test(void *request, int *done, int *sizes)
{
	*done = 0;
	auto *r = static_cast<Request *>(request);
	if (!r || !r->used) {
		NCCL_PLUGIN_WARN("test: not a request in flight");
		return ncclInvalidArgument;
	}
	if (!r->done) {
		ncclResult_t res = poll_comm(*r->comm);
		if (res != ncclSuccess || !r->done)
			return res;
	}
	*done = 1;
	r->used = false;
	if (r->status != IBV_WC_SUCCESS) {
		Comm &c = *r->comm;
		if (!std::exchange(c.warned, true))
			NCCL_PLUGIN_WARN("%s on qp %#x failed: %s", r->recv ? "receive" : "send",
					 c.qp->qp_num, ibv_coll_wc_status_str(r->status));
		return remote_fault(r->status) ? ncclRemoteError : ncclSystemError;
	}
	if (sizes)
		sizes[0] = int(r->size);
	return ncclSuccess;
}

template <uint32_t Magic> ncclResult_t close_comm(void *comm)
{
	Comm *c = comm_of(comm, Magic, "close");
	if (!c)
		return ncclInvalidArgument;
	c->magic = 0;
	delete c;
	return ncclSuccess;
}

ncclResult_t close_listen(void *listen_comm)
{
	auto *lc = static_cast<ListenComm *>(listen_comm);
	if (!lc || lc->magic != kListenMagic) {
		NCCL_PLUGIN_WARN("closeListen: not a listen comm of this net");
		return ncclInvalidArgument;
	}
	lc->magic = 0;
	delete lc;
	return ncclSuccess;
}

ncclResult_t init_v11(void **ctx, uint64_t, ncclNetCommConfig_v10_t *, ncclDebugLogger_t logger,
		      ncclProfilerCallback_t)
{
	ncclResult_t r = init_net(logger);
	*ctx = r == ncclSuccess ? &g_ctx : nullptr;
	return r;
}

ncclResult_t reg_mr_dmabuf(void *, void *, size_t, int, uint64_t, int, void **mhandle)
{
	*mhandle = nullptr;
	NCCL_PLUGIN_WARN("regMrDmaBuf: dma-buf memory is not supported (host memory only)");
	return ncclInvalidArgument;
}

// getProperties and makeVDevice for the version's own property types.
template <typename P, typename V>
constexpr void set_typed(ncclResult_t (*&props)(int, P *), ncclResult_t (*&vdev)(int *, V *))
{
	props = E<get_properties<P>>;
	vdev = E<no_vdevice<V>>;
}

template <typename Net> constexpr Net make_net()
{
	Net n{};
	n.name = "ibv_coll";
	n.devices = [](int *ndev) {
		*ndev = ready() ? 1 : 0; // one device, while init has it open
		return ncclSuccess;
	};
	set_typed(n.getProperties, n.makeVDevice);
	n.accept = E<accept_net>;
	n.regMr = E<reg_mr>;
	n.regMrDmaBuf = E<reg_mr_dmabuf>;
	n.deregMr = E<dereg_mr>;
	n.isend = E<isend>;
	n.irecv = E<irecv>;
	n.test = E<test>;
	n.closeSend = E<close_comm<kSendMagic>>;
	n.closeRecv = E<close_comm<kRecvMagic>>;
	n.closeListen = E<close_listen>;
	// Host memory only: a completed receive is already visible.
	n.iflush = [](void *, int, void **, int *, void **, void **req) {
		*req = nullptr;
		return ncclSuccess;
	};
	// No device-side data path, so nothing to map or hand back.
	n.getDeviceMr = [](void *, void *, void **) { return ncclInternalError; };
	n.irecvConsumed = [](void *, int, void *) { return ncclSuccess; };
	if constexpr (requires { n.finalize; }) {
		n.init = E<init_v11>;
		n.listen = [](void *, int dev, void *h, void **lc) {
			return E<listen_net>(dev, h, lc);
		};
		n.connect = [](void *, int, void *h, void **sc, ncclNetDeviceHandle_t **) {
			return E<connect_net>(h, sc);
		};
		n.finalize = [](void *) { return release(); };
		// Hints only: one QP per connection either way.
		n.setNetAttr = [](void *, ncclNetAttr_v11_t *) { return ncclSuccess; };
	} else {
		n.init = [](ncclDebugLogger_t logger, ncclProfilerCallback_t) {
			return E<init_net>(logger);
		};
		n.listen = E<listen_net>;
		n.connect = [](int, ncclNetCommConfig_v10_t *, void *h, void **sc,
			       ncclNetDeviceHandle_t **) { return E<connect_net>(h, sc); };
	}
	return n;
}

} // namespace

} // namespace ibv_coll::nccl

#define IBVC_EXPORT extern "C" __attribute__((visibility("default")))

IBVC_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = ibv_coll::nccl::make_net<ncclNet_v10_t>();
IBVC_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = ibv_coll::nccl::make_net<ncclNet_v11_t>();
IBVC_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = ibv_coll::nccl::make_net<ncclNet_v12_t>();
