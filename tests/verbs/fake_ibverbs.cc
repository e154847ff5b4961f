// A stand-in for libibverbs.so.1, for hosts without RDMA devices: the
// verbs provider's tests load it (LD_LIBRARY_PATH) instead of the real
// library.  It offers one RoCE device, "fake0" (IBVC_FAKE_DEVICES names
// others, comma-separated; empty: none), whose RC QPs reach QPs of the
// same process: every work request runs at once in the poster's thread
// (memcpy, key and bounds checks), a SEND without a receive waits for one
// (an RNR retry without end), and an rkey violation fails the requester
// with REM_ACCESS_ERR and raises IBV_EVENT_QP_ACCESS_ERR at the responder,
// as a real device does.  Completion channels and the async fd are pipes
// that are readable while events wait, so poll(2) works on them.
//
// Only what the provider and its tests call is here, with libibverbs'
// symbol versions (fake_ibverbs.map).  It checks its callers, too: it
// refuses to destroy a CQ or QP whose events were not acknowledged, which
// the real library would wait for forever.
#include <infiniband/verbs.h>

#include <endian.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::mutex mu; // everything below

// A queue of events behind a pipe that holds one byte while the queue is
// not empty.
template <class T> struct EventQueue {
	int rfd = -1, wfd = -1;
	std::deque<T> q;
	bool open()
	{
		int fds[2];
		if (pipe2(fds, O_CLOEXEC))
			return false;
		rfd = fds[0];
		wfd = fds[1];
		return true;
	}
	void close_fds()
	{
		::close(rfd);
		::close(wfd);
	}
	void push(const T &e)
	{
		q.push_back(e);
		if (q.size() == 1 && write(wfd, "e", 1) != 1)
			abort();
	}
	void became_empty()
	{
		char c;
		if (read(rfd, &c, 1) != 1)
			abort();
	}
	// Pop one event; waits unless the read end is non-blocking.
	bool pop(std::unique_lock<std::mutex> &lk, T *out)
	{
		while (q.empty()) {
			if (fcntl(rfd, F_GETFL) & O_NONBLOCK) {
				errno = EAGAIN;
				return false;
			}
			lk.unlock();
			pollfd p{rfd, POLLIN, 0};
			poll(&p, 1, -1);
			lk.lock();
		}
		*out = q.front();
		q.pop_front();
		if (q.empty())
			became_empty();
		return true;
	}
	template <class F> void erase_if(F f)
	{
		bool had = !q.empty();
		std::erase_if(q, f);
		if (had && q.empty())
			became_empty();
	}
};

struct CqEvent {
	ibv_cq *cq;
};

struct FakeCtx {
	ibv_context pub{};
	EventQueue<ibv_async_event> async;
	std::map<uint32_t, struct FakeMr *> mrs; // by lkey and by rkey
};

std::set<FakeCtx *> open_ctxs; // under mu

struct FakeChannel {
	ibv_comp_channel pub{};
	EventQueue<CqEvent> ev;
};

struct FakeMr {
	ibv_mr pub{};
	int access = 0;
};

struct FakeCq {
	ibv_cq pub{};
	std::deque<ibv_wc> wcs;
	bool armed = false, solicited_only = false;
	uint32_t events_reported = 0, events_acked = 0;
};

struct FakeQp {
	ibv_qp pub{};
	ibv_qp_attr attr{};
	ibv_qp_init_attr init{};
	std::deque<ibv_recv_wr> rq; // sg lists copied below
	std::deque<std::vector<ibv_sge>> rq_sges;
	struct Pending {
		ibv_send_wr wr;
		std::vector<ibv_sge> sges;
	};
	std::deque<Pending> sq; // sends waiting for a receive
	uint32_t async_reported = 0, async_acked = 0;
};

std::map<uint32_t, FakeQp *> qps; // every QP of the process, by number
uint32_t next_qpn = 0x11, next_handle = 1, next_key = 0x100;

std::vector<ibv_device *> &devices()
{
	static std::vector<ibv_device *> *devs = [] {
		auto *v = new std::vector<ibv_device *>;
		const char *e = getenv("IBVC_FAKE_DEVICES");
		std::string names = e ? e : "fake0";
		size_t pos = 0;
		while (pos <= names.size()) {
			size_t c = names.find(',', pos);
			std::string n = names.substr(pos, c == std::string::npos ? c : c - pos);
			if (!n.empty()) {
				auto *d = new ibv_device{};
				d->node_type = IBV_NODE_CA;
				d->transport_type = IBV_TRANSPORT_IB;
				snprintf(d->name, sizeof(d->name), "%s", n.c_str());
				snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%zu", v->size());
				v->push_back(d);
			}
			if (c == std::string::npos)
				break;
			pos = c + 1;
		}
		return v;
	}();
	return *devs;
}

FakeCtx *ctx_of(ibv_context *c)
{
	return reinterpret_cast<FakeCtx *>(c);
}
FakeCq *cq_of(ibv_cq *c)
{
	return reinterpret_cast<FakeCq *>(c);
}
FakeQp *qp_of(ibv_qp *q)
{
	return reinterpret_cast<FakeQp *>(q);
}

// The port's GID table: fe80::1, then ::ffff:127.0.0.1, then two empty slots.
constexpr int kGids = 4;
bool gid_of(int index, ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	if (index == 0) {
		g->raw[0] = 0xfe;
		g->raw[1] = 0x80;
		g->raw[15] = 1;
		return true;
	}
	if (index == 1) {
		g->raw[10] = g->raw[11] = 0xff;
		g->raw[12] = 127;
		g->raw[15] = 1;
		return true;
	}
	return false;
}

// libibverbs' destroy waits until every event the object reported was
// acknowledged; so does this, for a while, then it complains.
bool wait_acked(std::unique_lock<std::mutex> &lk, const uint32_t &reported, const uint32_t &acked)
{
	for (int i = 0; i < 5000 && acked != reported; i++) {
		lk.unlock();
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
		lk.lock();
	}
	return acked == reported;
}

void complete(FakeCq *cq, const ibv_wc &wc)
{
	if (cq->wcs.size() >= size_t(cq->pub.cqe)) {
		ibv_async_event e{};
		e.element.cq = &cq->pub;
		e.event_type = IBV_EVENT_CQ_ERR;
		ctx_of(cq->pub.context)->async.push(e);
		return;
	}
	cq->wcs.push_back(wc);
	if (cq->armed &&
	    (!cq->solicited_only || wc.status != IBV_WC_SUCCESS ||
	     (wc.wc_flags & IBV_WC_WITH_IMM)) &&
	    cq->pub.channel) {
		cq->armed = false;
		cq->events_reported++;
		reinterpret_cast<FakeChannel *>(cq->pub.channel)->ev.push({&cq->pub});
	}
}

ibv_wc wc_for(FakeQp *qp, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op, uint32_t len)
{
	ibv_wc wc{};
	wc.wr_id = wr_id;
	wc.status = st;
	wc.opcode = op;
	wc.byte_len = len;
	wc.qp_num = qp->pub.qp_num;
	return wc;
}

void to_error(FakeQp *qp)
{
	qp->attr.qp_state = IBV_QPS_ERR;
	qp->pub.state = IBV_QPS_ERR;
	for (auto &p : qp->sq)
		complete(cq_of(qp->pub.send_cq),
			 wc_for(qp, p.wr.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0));
	qp->sq.clear();
	for (auto &r : qp->rq)
		complete(cq_of(qp->pub.recv_cq),
			 wc_for(qp, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
	qp->rq.clear();
	qp->rq_sges.clear();
}

// The MR behind a key in ctx, if the range lies inside it with the access.
FakeMr *find_mr(FakeCtx *ctx, ibv_pd *pd, uint32_t key, uint64_t addr, uint64_t len, int access)
{
	auto it = ctx->mrs.find(key);
	if (it == ctx->mrs.end())
		return nullptr;
	FakeMr *mr = it->second;
	uint64_t base = reinterpret_cast<uint64_t>(mr->pub.addr);
	if (mr->pub.pd != pd || addr < base || addr + len > base + mr->pub.length ||
	    (access & ~mr->access))
		return nullptr;
	return mr;
}

uint64_t sge_len(const std::vector<ibv_sge> &s)
{
	uint64_t n = 0;
	for (auto &e : s)
		n += e.length;
	return n;
}

// Copy between an SGE list and a flat buffer.
bool sges_ok(FakeQp *qp, const std::vector<ibv_sge> &s, int access)
{
	for (auto &e : s)
		if (e.length &&
		    !find_mr(ctx_of(qp->pub.context), qp->pub.pd, e.lkey, e.addr, e.length, access))
			return false;
	return true;
}
void gather(const std::vector<ibv_sge> &s, std::vector<uint8_t> &out)
{
	for (auto &e : s) {
		const auto *p = reinterpret_cast<const uint8_t *>(e.addr);
		out.insert(out.end(), p, p + e.length);
	}
}
void scatter(const std::vector<ibv_sge> &s, const uint8_t *data, uint64_t len)
{
	for (auto &e : s) {
		uint64_t k = std::min<uint64_t>(e.length, len);
		if (k)
			memcpy(reinterpret_cast<void *>(e.addr), data, k);
		data += k;
		len -= k;
	}
}

// Run qp's send queue in order until it is empty or its head waits for a
// receive at the peer.
void progress(FakeQp *qp)
{
	while (!qp->sq.empty()) {
		FakeQp::Pending &p = qp->sq.front();
		const ibv_send_wr &wr = p.wr;
		bool signaled = (wr.send_flags & IBV_SEND_SIGNALED) || qp->init.sq_sig_all;
		FakeCq *scq = cq_of(qp->pub.send_cq);
		uint64_t len = sge_len(p.sges);
		auto it = qps.find(qp->attr.dest_qp_num);
		FakeQp *peer = it == qps.end() ? nullptr : it->second;
		if (!peer ||
		    (peer->attr.qp_state != IBV_QPS_RTR && peer->attr.qp_state != IBV_QPS_RTS)) {
			complete(scq, wc_for(qp, wr.wr_id, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 0));
			qp->sq.pop_front();
			to_error(qp);
			return;
		}
		bool needs_recv = wr.opcode == IBV_WR_SEND || wr.opcode == IBV_WR_SEND_WITH_IMM ||
				  wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		if (needs_recv && peer->rq.empty())
			return; // RNR: wait for a receive
		ibv_wc_opcode op = wr.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
				   : (wr.opcode == IBV_WR_RDMA_WRITE ||
				      wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
					   ? IBV_WC_RDMA_WRITE
					   : IBV_WC_SEND;
		int local_access = wr.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
		if (!sges_ok(qp, p.sges, local_access)) {
			complete(scq, wc_for(qp, wr.wr_id, IBV_WC_LOC_PROT_ERR, op, 0));
			qp->sq.pop_front();
			to_error(qp);
			return;
		}
		FakeCtx *pctx = ctx_of(peer->pub.context);
		if (wr.opcode != IBV_WR_SEND && wr.opcode != IBV_WR_SEND_WITH_IMM) {
			int ra = wr.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
							       : IBV_ACCESS_REMOTE_WRITE;
			if (!find_mr(pctx, peer->pub.pd, wr.wr.rdma.rkey, wr.wr.rdma.remote_addr,
				     len, ra)) {
				complete(scq, wc_for(qp, wr.wr_id, IBV_WC_REM_ACCESS_ERR, op, 0));
				qp->sq.pop_front();
				to_error(qp);
				ibv_async_event e{};
				e.element.qp = &peer->pub;
				e.event_type = IBV_EVENT_QP_ACCESS_ERR;
				peer->async_reported++;
				pctx->async.push(e);
				to_error(peer);
				return;
			}
		}
		std::vector<uint8_t> data;
		if (wr.opcode == IBV_WR_RDMA_READ) {
			const auto *src = reinterpret_cast<const uint8_t *>(wr.wr.rdma.remote_addr);
			scatter(p.sges, src, len);
		} else {
			gather(p.sges, data);
			if (wr.opcode != IBV_WR_SEND && wr.opcode != IBV_WR_SEND_WITH_IMM && len)
				memcpy(reinterpret_cast<void *>(wr.wr.rdma.remote_addr),
				       data.data(), len);
		}
		if (needs_recv) {
			ibv_recv_wr r = peer->rq.front();
			std::vector<ibv_sge> rs = peer->rq_sges.front();
			peer->rq.pop_front();
			peer->rq_sges.pop_front();
			bool write = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
			ibv_wc rwc = wc_for(peer, r.wr_id, IBV_WC_SUCCESS,
					    write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
					    uint32_t(len));
			rwc.src_qp = qp->pub.qp_num;
			if (!write &&
			    (sge_len(rs) < len || !sges_ok(peer, rs, IBV_ACCESS_LOCAL_WRITE))) {
				rwc.status = IBV_WC_LOC_LEN_ERR;
				complete(cq_of(peer->pub.recv_cq), rwc);
				complete(scq, wc_for(qp, wr.wr_id, IBV_WC_REM_INV_REQ_ERR, op, 0));
				qp->sq.pop_front();
				to_error(peer);
				to_error(qp);
				return;
			}
			if (!write)
				scatter(rs, data.data(), len);
			if (wr.opcode != IBV_WR_SEND) {
				rwc.wc_flags |= IBV_WC_WITH_IMM;
				rwc.imm_data = wr.imm_data;
			}
			complete(cq_of(peer->pub.recv_cq), rwc);
		}
		if (signaled)
			complete(scq, wc_for(qp, wr.wr_id, IBV_WC_SUCCESS, op, uint32_t(len)));
		qp->sq.pop_front();
	}
}

int fake_poll_cq(ibv_cq *c, int n, ibv_wc *wc)
{
	std::lock_guard lk(mu);
	FakeCq *cq = cq_of(c);
	int k = 0;
	for (; k < n && !cq->wcs.empty(); k++) {
		wc[k] = cq->wcs.front();
		cq->wcs.pop_front();
	}
	return k;
}

int fake_req_notify_cq(ibv_cq *c, int solicited_only)
{
	std::lock_guard lk(mu);
	cq_of(c)->armed = true;
	cq_of(c)->solicited_only = solicited_only != 0;
	return 0;
}

int fake_post_send(ibv_qp *q, ibv_send_wr *wr, ibv_send_wr **bad)
{
	std::lock_guard lk(mu);
	FakeQp *qp = qp_of(q);
	for (ibv_send_wr *w = wr; w; w = w->next) {
		if (uint32_t(w->num_sge) > qp->init.cap.max_send_sge ||
		    qp->sq.size() >= qp->init.cap.max_send_wr) {
			*bad = w;
			return w->num_sge < 0 || uint32_t(w->num_sge) > qp->init.cap.max_send_sge
				       ? EINVAL
				       : ENOMEM;
		}
		if (qp->attr.qp_state == IBV_QPS_ERR) {
			complete(cq_of(q->send_cq),
				 wc_for(qp, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0));
			continue;
		}
		if (qp->attr.qp_state != IBV_QPS_RTS) {
			*bad = w;
			return EINVAL;
		}
		FakeQp::Pending p{*w, std::vector<ibv_sge>(w->sg_list, w->sg_list + w->num_sge)};
		p.wr.next = nullptr;
		p.wr.sg_list = nullptr;
		qp->sq.push_back(std::move(p));
		progress(qp);
	}
	return 0;
}

int fake_post_recv(ibv_qp *q, ibv_recv_wr *wr, ibv_recv_wr **bad)
{
	std::lock_guard lk(mu);
	FakeQp *qp = qp_of(q);
	for (ibv_recv_wr *w = wr; w; w = w->next) {
		if (w->num_sge < 0 || uint32_t(w->num_sge) > qp->init.cap.max_recv_sge ||
		    qp->rq.size() >= qp->init.cap.max_recv_wr ||
		    qp->attr.qp_state == IBV_QPS_RESET) {
			*bad = w;
			return qp->attr.qp_state == IBV_QPS_RESET || w->num_sge < 0 ||
					       uint32_t(w->num_sge) > qp->init.cap.max_recv_sge
				       ? EINVAL
				       : ENOMEM;
		}
		if (qp->attr.qp_state == IBV_QPS_ERR) {
			complete(cq_of(q->recv_cq),
				 wc_for(qp, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
			continue;
		}
		qp->rq.push_back(*w);
		qp->rq_sges.emplace_back(w->sg_list, w->sg_list + w->num_sge);
	}
	// A sender waiting for these receives goes on.
	for (auto &[n, other] : qps)
		if (other->attr.dest_qp_num == qp->pub.qp_num && !other->sq.empty())
			progress(other);
	return 0;
}

} // namespace

FAKE_EXPORT ibv_device **ibv_get_device_list(int *num)
{
	std::lock_guard lk(mu);
	auto &d = devices();
	if (d.empty()) {
		errno = ENOSYS; // what libibverbs says without an RDMA subsystem
		if (num)
			*num = 0;
		return nullptr;
	}
	auto **l = static_cast<ibv_device **>(calloc(d.size() + 1, sizeof(void *)));
	for (size_t i = 0; i < d.size(); i++)
		l[i] = d[i];
	if (num)
		*num = int(d.size());
	return l;
}

FAKE_EXPORT void ibv_free_device_list(ibv_device **l)
{
	free(l);
}

FAKE_EXPORT const char *ibv_get_device_name(ibv_device *d)
{
	return d->name;
}

FAKE_EXPORT ibv_context *ibv_open_device(ibv_device *d)
{
	auto *c = new FakeCtx();
	if (!c->async.open()) {
		delete c;
		return nullptr;
	}
	c->pub.device = d;
	c->pub.cmd_fd = -1;
	c->pub.async_fd = c->async.rfd;
	c->pub.num_comp_vectors = 4;
	c->pub.ops.poll_cq = fake_poll_cq;
	c->pub.ops.req_notify_cq = fake_req_notify_cq;
	c->pub.ops.post_send = fake_post_send;
	c->pub.ops.post_recv = fake_post_recv;
	std::lock_guard lk(mu);
	open_ctxs.insert(c);
	return &c->pub;
}

// The test's hand on the device: raise an event of the device (port 0)
// or of a port in every open context, as a NIC's failure or a link going
// down would.
FAKE_EXPORT void fake_ibverbs_async_event(int type, int port)
{
	std::lock_guard lk(mu);
	for (FakeCtx *c : open_ctxs) {
		ibv_async_event e{};
		e.event_type = ibv_event_type(type);
		e.element.port_num = port;
		c->async.push(e);
	}
}

FAKE_EXPORT int ibv_close_device(ibv_context *c)
{
	FakeCtx *ctx = ctx_of(c);
	{
		std::lock_guard lk(mu);
		open_ctxs.erase(ctx);
	}
	ctx->async.close_fds();
	delete ctx;
	return 0;
}

FAKE_EXPORT int ibv_query_device(ibv_context *c, ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "fake-%.32s 1.2.3", c->device->name);
	a->node_guid = htobe64(0x0002c90300a1b2c3ull);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = 0x02c9;
	a->vendor_part_id = 4119;
	a->hw_ver = 7;
	a->max_qp = 1000;
	a->max_qp_wr = 4096;
	a->max_sge = 8;
	a->max_cq = 100;
	a->max_cqe = 65536;
	a->max_mr = 5000;
	a->max_pd = 50;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->phys_port_cnt = 1;
	return 0;
}

FAKE_EXPORT int ibv_query_port(ibv_context *, uint8_t port, _compat_ibv_port_attr *out)
{
	if (port != 1)
		return EINVAL;
	auto *a = reinterpret_cast<ibv_port_attr *>(out);
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_1024;
	a->gid_tbl_len = kGids;
	a->max_msg_sz = 1u << 30;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

FAKE_EXPORT int ibv_query_gid(ibv_context *, uint8_t port, int index, ibv_gid *gid)
{
	if (port != 1 || index < 0 || index >= kGids) {
		errno = EINVAL;
		return -1;
	}
	gid_of(index, gid); // an empty slot reads as zeros, as in libibverbs
	return 0;
}

FAKE_EXPORT int _ibv_query_gid_ex(ibv_context *, uint32_t port, uint32_t index, ibv_gid_entry *e,
				  uint32_t, size_t)
{
	if (port != 1 || index >= uint32_t(kGids))
		return EINVAL;
	memset(e, 0, sizeof(*e));
	if (!gid_of(int(index), &e->gid))
		return ENODATA;
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = if_nametoindex("lo");
	return 0;
}

FAKE_EXPORT ibv_pd *ibv_alloc_pd(ibv_context *c)
{
	std::lock_guard lk(mu);
	auto *pd = new ibv_pd{c, next_handle++};
	return pd;
}

FAKE_EXPORT int ibv_dealloc_pd(ibv_pd *pd)
{
	delete pd;
	return 0;
}

FAKE_EXPORT ibv_mr *ibv_reg_mr_iova2(ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				     unsigned int access)
{
	std::lock_guard lk(mu);
	if (iova != reinterpret_cast<uint64_t>(addr) || !len) {
		errno = EINVAL;
		return nullptr;
	}
	auto *mr = new FakeMr();
	mr->pub.context = pd->context;
	mr->pub.pd = pd;
	mr->pub.addr = addr;
	mr->pub.length = len;
	mr->pub.handle = next_handle++;
	// Different lkey and rkey, so that mixing them up shows.
	mr->pub.lkey = next_key++;
	mr->pub.rkey = 0x800000 | next_key++;
	mr->access = int(access);
	FakeCtx *ctx = ctx_of(pd->context);
	ctx->mrs[mr->pub.lkey] = mr;
	ctx->mrs[mr->pub.rkey] = mr;
	return &mr->pub;
}

FAKE_EXPORT int ibv_dereg_mr(ibv_mr *m)
{
	std::lock_guard lk(mu);
	FakeCtx *ctx = ctx_of(m->context);
	ctx->mrs.erase(m->lkey);
	ctx->mrs.erase(m->rkey);
	delete reinterpret_cast<FakeMr *>(m);
	return 0;
}

FAKE_EXPORT ibv_comp_channel *ibv_create_comp_channel(ibv_context *c)
{
	auto *ch = new FakeChannel();
	if (!ch->ev.open()) {
		delete ch;
		return nullptr;
	}
	ch->pub.context = c;
	ch->pub.fd = ch->ev.rfd;
	return &ch->pub;
}

FAKE_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel *c)
{
	std::lock_guard lk(mu);
	auto *ch = reinterpret_cast<FakeChannel *>(c);
	if (ch->pub.refcnt)
		return EBUSY;
	ch->ev.close_fds();
	delete ch;
	return 0;
}

FAKE_EXPORT ibv_cq *ibv_create_cq(ibv_context *c, int cqe, void *cq_context, ibv_comp_channel *ch,
				  int comp_vector)
{
	std::lock_guard lk(mu);
	if (cqe < 1 || cqe > 65536 || comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
		errno = EINVAL;
		return nullptr;
	}
	auto *cq = new FakeCq();
	cq->pub.context = c;
	cq->pub.channel = ch;
	cq->pub.cq_context = cq_context;
	cq->pub.handle = next_handle++;
	cq->pub.cqe = (cqe + 15) / 16 * 16; // rounded up, as devices do
	if (ch)
		ch->refcnt++;
	return &cq->pub;
}

FAKE_EXPORT int ibv_destroy_cq(ibv_cq *c)
{
	std::unique_lock lk(mu);
	FakeCq *cq = cq_of(c);
	if (!wait_acked(lk, cq->events_reported, cq->events_acked)) {
		fprintf(stderr, "fake_ibverbs: destroy_cq with %u events unacknowledged\n",
			cq->events_reported - cq->events_acked);
		return EBUSY;
	}
	if (c->channel) {
		// Events not yet read go with the CQ, as the kernel does it.
		reinterpret_cast<FakeChannel *>(c->channel)->ev.erase_if([&](const CqEvent &e) {
			return e.cq == c;
		});
		c->channel->refcnt--;
	}
	delete cq;
	return 0;
}

FAKE_EXPORT int ibv_get_cq_event(ibv_comp_channel *c, ibv_cq **cq, void **cq_context)
{
	std::unique_lock lk(mu);
	CqEvent e;
	if (!reinterpret_cast<FakeChannel *>(c)->ev.pop(lk, &e))
		return -1;
	*cq = e.cq;
	*cq_context = e.cq->cq_context;
	return 0;
}

FAKE_EXPORT void ibv_ack_cq_events(ibv_cq *cq, unsigned int n)
{
	std::lock_guard lk(mu);
	cq_of(cq)->events_acked += n;
}

FAKE_EXPORT int ibv_get_async_event(ibv_context *c, ibv_async_event *e)
{
	std::unique_lock lk(mu);
	return ctx_of(c)->async.pop(lk, e) ? 0 : -1;
}

FAKE_EXPORT void ibv_ack_async_event(ibv_async_event *e)
{
	std::lock_guard lk(mu);
	switch (e->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: qp_of(e->element.qp)->async_acked++; break;
	default: break;
	}
}

FAKE_EXPORT const char *ibv_event_type_str(ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
	case IBV_EVENT_CQ_ERR: return "CQ error";
	default: return "unknown";
	}
}

FAKE_EXPORT ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *ia)
{
	std::lock_guard lk(mu);
	ibv_qp_cap &c = ia->cap;
	if (ia->qp_type != IBV_QPT_RC || ia->srq || !c.max_send_wr || c.max_send_wr > 4096 ||
	    c.max_recv_wr > 4096 || c.max_send_sge > 8 || c.max_recv_sge > 8 ||
	    c.max_inline_data > 256) {
		errno = EINVAL;
		return nullptr;
	}
	auto *qp = new FakeQp();
	// Rounded up, as devices do, and reported back.
	c.max_send_wr = (c.max_send_wr + 7) / 8 * 8;
	c.max_recv_wr = (c.max_recv_wr + 7) / 8 * 8;
	c.max_send_sge = std::max(c.max_send_sge, 1u);
	c.max_recv_sge = std::max(c.max_recv_sge, 1u);
	qp->init = *ia;
	qp->pub.context = pd->context;
	qp->pub.qp_context = ia->qp_context;
	qp->pub.pd = pd;
	qp->pub.send_cq = ia->send_cq;
	qp->pub.recv_cq = ia->recv_cq;
	qp->pub.handle = next_handle++;
	qp->pub.qp_num = next_qpn++;
	qp->pub.state = IBV_QPS_RESET;
	qp->pub.qp_type = IBV_QPT_RC;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = c;
	qps[qp->pub.qp_num] = qp;
	return &qp->pub;
}

// The fake device has RC QPs only: no shared receive queues and no
// address handles (UD), so ibv_coll's collective engine, which needs both,
// finds it unable to carry collectives, as it would a device without UD.
FAKE_EXPORT ibv_srq *ibv_create_srq(ibv_pd *, ibv_srq_init_attr *)
{
	errno = EOPNOTSUPP;
	return nullptr;
}

FAKE_EXPORT int ibv_destroy_srq(ibv_srq *)
{
	return EINVAL;
}

FAKE_EXPORT ibv_ah *ibv_create_ah(ibv_pd *, ibv_ah_attr *)
{
	errno = EOPNOTSUPP;
	return nullptr;
}

FAKE_EXPORT int ibv_destroy_ah(ibv_ah *)
{
	return EINVAL;
}

FAKE_EXPORT int ibv_modify_qp(ibv_qp *q, ibv_qp_attr *a, int mask)
{
	std::lock_guard lk(mu);
	FakeQp *qp = qp_of(q);
	ibv_qp_attr &s = qp->attr;
	if ((mask & IBV_QP_PORT && a->port_num != 1) ||
	    (mask & IBV_QP_PATH_MTU && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)))
		return EINVAL;
	if (mask & IBV_QP_AV) {
		ibv_gid g;
		if (!a->ah_attr.is_global || a->ah_attr.port_num != 1 ||
		    !gid_of(a->ah_attr.grh.sgid_index, &g) || !a->ah_attr.grh.hop_limit)
			return EINVAL;
		s.ah_attr = a->ah_attr;
	}
	if (mask & IBV_QP_ACCESS_FLAGS)
		s.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		s.pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT)
		s.port_num = a->port_num;
	if (mask & IBV_QP_PATH_MTU)
		s.path_mtu = a->path_mtu;
	if (mask & IBV_QP_TIMEOUT)
		s.timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		s.retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		s.rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_RQ_PSN)
		s.rq_psn = a->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		s.sq_psn = a->sq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		s.max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		s.max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		s.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_DEST_QPN)
		s.dest_qp_num = a->dest_qp_num;
	if (mask & IBV_QP_STATE) {
		if (a->qp_state == IBV_QPS_ERR) {
			to_error(qp);
		} else if (a->qp_state == IBV_QPS_RESET) {
			qp->sq.clear();
			qp->rq.clear();
			qp->rq_sges.clear();
			ibv_qp_cap cap = s.cap;
			s = {};
			s.cap = cap;
		}
		s.qp_state = a->qp_state;
		q->state = a->qp_state;
	}
	return 0;
}

FAKE_EXPORT int ibv_query_qp(ibv_qp *q, ibv_qp_attr *a, int, ibv_qp_init_attr *init)
{
	std::lock_guard lk(mu);
	FakeQp *qp = qp_of(q);
	*a = qp->attr;
	a->cur_qp_state = a->qp_state;
	*init = qp->init;
	return 0;
}

FAKE_EXPORT int ibv_destroy_qp(ibv_qp *q)
{
	std::unique_lock lk(mu);
	FakeQp *qp = qp_of(q);
	if (!wait_acked(lk, qp->async_reported, qp->async_acked)) {
		fprintf(stderr, "fake_ibverbs: destroy_qp with async events unacknowledged\n");
		return EBUSY;
	}
	qps.erase(q->qp_num);
	delete qp;
	return 0;
}
