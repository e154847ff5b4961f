// CollNet communicators (collnet.h) and NCCL's ncclCollNetPlugin_v10/v11/
// v12 tables.  listen() makes the rank's collective QP and writes its
// address into the handle NCCL all-gathers; connect() gives the QP the job
// of every rank's handle (rank 0's handle names the job), through the
// switches of IBV_COLL_NCCL_SWITCH or round the ring, and waits for a
// barrier through the device, so that no rank's first collective meets a
// QP still without its job.
#include "collnet.h"
#include "seg_range.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

namespace ibv_coll::nccl {

namespace {

// What listen() writes into NCCL's handle: the rank's address, and the
// job it would name were it rank 0.
struct Handle {
	uint32_t magic;
	uint32_t jid;
	ibv_coll_member m;
	uint64_t job_key;
	uint32_t units, want; // rank 0's: the device's Seg units, the job's wish
	uint64_t free;	      // the granules no live communicator here held (seg_range.h)
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);
// The magic names the handle's layout: a rank of a plugin whose handle
// says other things (0x69626363 carried seg_base and seg_count) is refused
// at connect, not misread.
constexpr uint32_t kHandleMagic = 0x69626332, kListenMagic = 0x6c69736e;

struct ListenComm {
	uint32_t magic = kListenMagic;
	CollComm *comm = nullptr; // its QP until connect takes it
};

std::atomic<uint32_t> g_comms; // this process's CollNet communicators
uint64_t g_comm_id;	       // v11+: NCCL's communicator hash, from init
// The Seg units of this process's live CollNet communicators, a bit per
// granule (seg_range.h; CollComm::range).  NCCL may make communicators
// from several threads.
std::mutex g_units_mu;
uint64_t g_granules_busy;

void destroy(CollComm *c)
{
	if (c->inflight)
		NCCL_PLUGIN_WARN("closeColl: %u requests still in flight", c->inflight);
	if (c->qp)
		ibv_destroy_coll_qp(c->qp);
	if (c->range) {
		std::lock_guard<std::mutex> g(g_units_mu);
		g_granules_busy &= ~c->range;
	}
	if (c->cq)
		ibv_destroy_coll_cq(c->cq);
	for (CollReq &r : c->reqs) {
		coll_free_stages(&r);
		cuda::event_destroy(c->cu, r.cu_event);
		cuda::event_destroy(c->cu, r.in_event);
	}
	cuda::stream_destroy(&c->cu);
	c->magic = 0;
	delete c;
}

ncclResult_t init_v10(ncclDebugLogger_t logger)
{
	return setup(logger);
}

ncclResult_t init_v11(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger)
{
	g_comm_id = comm_id;
	*ctx = &g_comms; // the plugin keeps no per-communicator context
	return setup(logger);
}

ncclResult_t finalize(void *)
{
	return release();
}

ncclResult_t devices(int *n)
{
	*n = device().ctx ? 1 : 0;
	return ncclSuccess;
}

template <typename Props> ncclResult_t get_properties(int dev, Props *p)
{
	if (dev != 0 || !device().ctx) {
		NCCL_PLUGIN_WARN("getProperties: no device %d", dev);
		return ncclInvalidArgument;
	}
	*p = {};
	fill_properties(p);
	if (cuda::available())
		p->ptrSupport |= NCCL_PTR_CUDA; // staged (cuda_stage.h)
	if constexpr (requires { p->maxMultiRequestSize; })
		p->maxMultiRequestSize = 1;
	return ncclSuccess;
}

ncclResult_t listen_any(int dev, void *handle, void **listen_comm)
{
	*listen_comm = nullptr;
	Device &d = device();
	if (dev != 0 || !d.ctx) {
		NCCL_PLUGIN_WARN("listen: no device %d", dev);
		return ncclInvalidArgument;
	}
	auto *c = new (std::nothrow) CollComm;
	auto *l = new (std::nothrow) ListenComm;
	ibv_coll_qp_init_attr ia{};
	ibv_coll_qp_attr a{};
	if (!c || !l)
		goto fail;
	c->magic = kCommMagic;
	// Room for every request and connect's barrier.
	if (!(c->cq = ibv_create_coll_cq(d.ctx, 2 * NCCL_NET_MAX_REQUESTS + 2, nullptr, nullptr,
					 0)))
		goto fail;
	ia.send_cq = ia.recv_cq = c->cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = NCCL_NET_MAX_REQUESTS + 1;
	ia.cap.max_send_sge = 1;
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if (!(c->qp = ibv_create_coll_qp(d.pd, &ia)) ||
	    ibv_modify_coll_qp(c->qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))
		goto fail;
	{
		Handle h{};
		uint32_t n = g_comms++;
		timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		h.magic = kHandleMagic;
		h.m.gid = d.gid;
		h.m.udp_port = d.port.udp_port;
		h.m.num_ranks = 1;
		h.m.qp_num = c->qp->qp_num;
		// Jobs one after another through one switch must differ.
		uint64_t mix = (g_comm_id ^ uint64_t(t.tv_nsec) ^ (uint64_t(getpid()) << 20) ^
				(uint64_t(n) * 0x9e3779b97f4a7c15ull));
		h.jid = uint32_t(mix ^ (mix >> 32)) | 1u;
		h.job_key = mix * 0xbf58476d1ce4e5b9ull ^ 0x6e63636cull;
		h.units = d.caps.max_seg_units;
		h.want = config().seg_units;
		std::lock_guard<std::mutex> g(g_units_mu);
		h.free = ~g_granules_busy;
		memcpy(handle, &h, sizeof(h));
	}
	l->comm = c;
	*listen_comm = l;
	return ncclSuccess;
fail:
	NCCL_PLUGIN_WARN("listen: collective QP: %s", strerror(errno ? errno : ENOMEM));
	if (c)
		destroy(c);
	delete l;
	return ncclSystemError;
}

ncclResult_t listen_v10(int dev, void *handle, void **listen_comm)
{
	return listen_any(dev, handle, listen_comm);
}

ncclResult_t listen_v11(void *, int dev, void *handle, void **listen_comm)
{
	return listen_any(dev, handle, listen_comm);
}

// The job's attributes from the ranks' handles and the Seg units connect
// took (ask, c->range), into the QP (RTR, RTS).
int give_job(CollComm *c, const Handle *const *h, const addon::SegAsk &ask)
{
	const int n = c->nranks, me = c->rank;
	std::vector<ibv_coll_member> members(static_cast<size_t>(n));
	uint32_t devs = 0, idx = 0;
	for (int k = 0; k < n; k++) {
		members[size_t(k)] = h[k]->m;
		// Ranks whose QPs share a device (the host's shared device)
		// split the communicator's Seg units.
		if (!memcmp(&h[k]->m.gid, &h[me]->m.gid, sizeof(ibv_gid)) &&
		    h[k]->m.udp_port == h[me]->m.udp_port) {
			idx += k < me;
			devs++;
		}
	}
	const Config &cfg = config();
	ibv_coll_job_attr job{};
	ibv_coll_switch_attr sw{};
	ibv_coll_qp_attr a{};
	job.jid = h[0]->jid;
	job.node_index = uint32_t(me);
	job.num_nodes = uint32_t(n);
	job.members = members.data();
	job.topology = ibv_coll_topology(cfg.topology);
	job.seg_count = addon::seg_count(ask, devs);
	job.seg_base = addon::seg_base(ask, c->range, devs, idx);
	job.job_key = h[0]->job_key;
	job.timeout_ms = cfg.timeout_ms;
	if (!cfg.switches.empty() && cfg.topology != IBV_COLL_TOPO_RING) {
		sw.num_planes = uint32_t(cfg.switches.size());
		sw.num_leaves = 1;
		sw.leaves = cfg.switches.data();
		job.comp_mask |= IBV_COLL_JOB_ATTR_SWITCH;
		job.sw = &sw;
	}
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = device().port.active_mtu;
	a.job = &job;
	if (int err = ibv_modify_coll_qp(
		    c->qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU))
		return err;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_coll_qp(c->qp, &a, IBV_COLL_QP_STATE);
}

ncclResult_t connect(void *handles[], int nranks, int rank, void *listen_comm, void **coll_comm)
{
	*coll_comm = nullptr;
	auto *l = static_cast<ListenComm *>(listen_comm);
	if (!l || l->magic != kListenMagic || !l->comm || !handles || nranks < 1 || rank < 0 ||
	    rank >= nranks) {
		NCCL_PLUGIN_WARN("connect: rank %d of %d, listen comm %p: not a group this plugin "
				 "listened for",
				 rank, nranks, listen_comm);
		return ncclInvalidArgument;
	}
	std::vector<const Handle *> h(static_cast<size_t>(nranks));
	for (int k = 0; k < nranks; k++) {
		h[size_t(k)] = static_cast<const Handle *>(handles[k]);
		if (!h[size_t(k)] || h[size_t(k)]->magic != kHandleMagic) {
			NCCL_PLUGIN_WARN("connect: rank %d's handle is not this plugin's (or is "
					 "another version's)",
					 k);
			return ncclInvalidArgument;
		}
	}
	CollComm *c = l->comm;
	c->rank = rank;
	c->nranks = nranks;
	// The lowest run of granules free at every rank when it listened (all
	// conclude alike), unless another communicator of this process took
	// some since (NCCL makes them from several threads), or none is left:
	// then this one has no CollNet, which NCCL learns from every rank.
	const addon::SegAsk ask = addon::seg_ask(h[0]->units, h[0]->want, nranks);
	uint64_t avail = ~0ull;
	for (const Handle *x : h)
		avail &= x->free;
	{
		const uint64_t range = addon::seg_pick(ask, avail);
		std::lock_guard<std::mutex> g(g_units_mu);
		if (!range || (range & g_granules_busy)) {
			NCCL_PLUGIN_WARN(
				"connect: rank %d of %d: %s %u Seg units free at every rank "
				"(live CollNet communicators hold them; "
				"IBV_COLL_NCCL_SEG_UNITS)",
				rank, nranks, range ? "another communicator took the" : "no",
				ask.granules * ask.granule);
			return ncclSystemError;
		}
		g_granules_busy |= range;
		c->range = range;
	}
	if (int err = give_job(c, h.data(), ask)) {
		NCCL_PLUGIN_WARN("connect: job 0x%x of %d ranks (%s): %s", h[0]->jid, nranks,
				 config().switches.empty() ? "ring" : "through the switch",
				 strerror(err));
		return ncclSystemError;
	}
	// The ranks are all in NCCL's communicator setup: a minute at most.
	uint32_t wait = config().timeout_ms ? std::min<uint32_t>(config().timeout_ms, 60000)
					    : 60000;
	if (ncclResult_t r = coll_barrier(c, int(wait)))
		return r;
	l->comm = nullptr;
	*coll_comm = c;
	NCCL_PLUGIN_INFO(NCCL_INIT | NCCL_NET, "CollNet rank %d of %d on %s: job 0x%x %s", rank,
			 nranks, device().name.c_str(), h[0]->jid,
			 config().switches.empty() || config().topology == IBV_COLL_TOPO_RING
				 ? "round the ring"
				 : "through the aggregation switch");
	return ncclSuccess;
}

ncclResult_t reduce_support(ncclDataType_t dt, ncclRedOp_t op, int *supported)
{
	ibv_coll_dtype cdt;
	ibv_coll_op cop;
	*supported = coll_map(dt, op, &cdt, &cop);
	return ncclSuccess;
}

// GPU memory: a shadow of it in pinned host memory, which the device
// registers; the communicator's stream made with the first.
ncclResult_t reg_gpu(CollComm *c, void *data, size_t size, void **mhandle)
{
	void *ctx = cuda::context_of(data);
	if (!ctx) {
		NCCL_PLUGIN_WARN("regMr: %zu bytes at %p of type NCCL_PTR_CUDA: %s", size, data,
				 cuda::available() ? "not GPU memory, or GPU memory of no context "
						     "with none current on this thread"
						   : "no CUDA driver and device here, "
						     "host memory only (NCCL_PTR_HOST)");
		return ncclInvalidArgument;
	}
	if (c->cu.stream && c->cu.ctx != ctx) {
		NCCL_PLUGIN_WARN("regMr: %zu bytes at %p: GPU memory of another CUDA context than "
				 "the communicator's other registrations",
				 size, data);
		return ncclInvalidArgument;
	}
	if (!c->cu.stream) {
		if (!cuda::stream_create(ctx, &c->cu))
			return ncclUnhandledCudaError;
		NCCL_PLUGIN_INFO(NCCL_NET,
				 "CollNet rank %d: GPU memory staged through pinned host "
				 "memory",
				 c->rank);
	}
	auto *shadow = static_cast<char *>(cuda::host_alloc(ctx, size ? size : 1));
	if (!shadow)
		return ncclUnhandledCudaError;
	auto *m = new (std::nothrow)
		CollMr{kMrMagic, nullptr, static_cast<char *>(data), size, shadow, ctx};
	if (!m || !(m->mr = ibv_reg_coll_mr(device().pd, shadow, size ? size : 1,
					    IBV_ACCESS_LOCAL_WRITE))) {
		NCCL_PLUGIN_WARN("regMr: the %zu-byte shadow of GPU memory at %p: %s", size, data,
				 strerror(m ? errno : ENOMEM));
		delete m;
		cuda::host_free(ctx, shadow);
		return ncclSystemError;
	}
	*mhandle = m;
	return ncclSuccess;
}

ncclResult_t reg_mr(void *coll_comm, void *data, size_t size, int type, void **mhandle)
{
	*mhandle = nullptr;
	if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
		NCCL_PLUGIN_WARN("regMr: memory of type %d; this plugin takes host memory "
				 "(NCCL_PTR_HOST) and, with a CUDA driver, GPU memory "
				 "(NCCL_PTR_CUDA)",
				 type);
		return ncclInvalidArgument;
	}
	auto *c = static_cast<CollComm *>(coll_comm);
	if (!c || c->magic != kCommMagic) {
		NCCL_PLUGIN_WARN("regMr: %p is not a collective communicator", coll_comm);
		return ncclInvalidArgument;
	}
	if (type == NCCL_PTR_CUDA)
		return reg_gpu(c, data, size, mhandle);
	auto *m = new (std::nothrow) CollMr{kMrMagic, nullptr, static_cast<char *>(data), size};
	if (!m || !(m->mr = ibv_reg_coll_mr(device().pd, data, size ? size : 1,
					    IBV_ACCESS_LOCAL_WRITE))) {
		NCCL_PLUGIN_WARN("regMr: %zu bytes at %p: %s", size, data,
				 strerror(m ? errno : ENOMEM));
		delete m;
		return ncclSystemError;
	}
	*mhandle = m;
	return ncclSuccess;
}

ncclResult_t reg_mr_dmabuf(void *, void *, size_t size, int, uint64_t, int fd, void **mhandle)
{
	*mhandle = nullptr;
	NCCL_PLUGIN_WARN("regMrDmaBuf: %zu bytes of dma-buf %d: this plugin takes no dma-buf "
			 "(regMr takes host memory, and GPU memory where CUDA is)",
			 size, fd);
	return ncclInvalidArgument;
}

ncclResult_t dereg_mr(void *, void *mhandle)
{
	auto *m = static_cast<CollMr *>(mhandle);
	if (!m || m->magic != kMrMagic) {
		NCCL_PLUGIN_WARN("deregMr: %p is not a registration of this plugin", mhandle);
		return ncclInvalidArgument;
	}
	int err = ibv_dereg_coll_mr(m->mr);
	cuda::host_free(m->cu_ctx, m->shadow);
	m->magic = 0;
	delete m;
	if (err)
		NCCL_PLUGIN_WARN("deregMr: %s", strerror(err));
	return err ? ncclSystemError : ncclSuccess;
}

ncclResult_t iflush(void *, void *, int, void *, void **request)
{
	// Host memory: what the device wrote is visible; GPU memory: test()
	// said done after the copy into it was through.
	*request = nullptr;
	return ncclSuccess;
}

ncclResult_t close_coll(void *coll_comm)
{
	auto *c = static_cast<CollComm *>(coll_comm);
	if (!c || c->magic != kCommMagic) {
		NCCL_PLUGIN_WARN("closeColl: %p is not a collective communicator", coll_comm);
		return ncclInvalidArgument;
	}
	destroy(c);
	return ncclSuccess;
}

ncclResult_t close_listen(void *listen_comm)
{
	auto *l = static_cast<ListenComm *>(listen_comm);
	if (!l || l->magic != kListenMagic) {
		NCCL_PLUGIN_WARN("closeListen: %p is not a listen comm of this plugin",
				 listen_comm);
		return ncclInvalidArgument;
	}
	if (l->comm)
		destroy(l->comm); // never connected
	l->magic = 0;
	delete l;
	return ncclSuccess;
}


} // namespace

} // namespace ibv_coll::nccl

using namespace ibv_coll::nccl;

#define IBVC_EXPORT extern "C" __attribute__((visibility("default")))

// A version's table, every call behind E<> (no exception reaches NCCL).
// v11 and v12 take a context in init and listen and have finalize.
template <typename T, typename Props, typename VProps> constexpr T collnet_table()
{
	T t{};
	t.name = "ibv_coll";
	t.devices = E<devices>;
	t.getProperties = E<get_properties<Props>>;
	t.connect = E<connect>;
	t.reduceSupport = E<reduce_support>;
	t.regMr = E<reg_mr>;
	t.regMrDmaBuf = E<reg_mr_dmabuf>;
	t.deregMr = E<dereg_mr>;
	t.iallreduce = E<coll_iallreduce>;
	t.iallgather = E<coll_iallgather>;
	t.ireducescatter = E<coll_ireducescatter>;
	t.iflush = E<iflush>;
	t.test = E<coll_test>;
	t.closeColl = E<close_coll>;
	t.closeListen = E<close_listen>;
	t.makeVDevice = E<no_vdevice<VProps>>;
	if constexpr (requires { t.finalize; }) {
		t.init = E<init_v11>;
		t.listen = E<listen_v11>;
		t.finalize = E<finalize>;
	} else {
		t.init = E<init_v10>;
		t.listen = E<listen_v10>;
	}
	return t;
}

IBVC_EXPORT const ncclCollNet_v10_t ncclCollNetPlugin_v10 =
	collnet_table<ncclCollNet_v10_t, ncclNetProperties_v10_t, ncclNetVDeviceProps_v10_t>();
IBVC_EXPORT const ncclCollNet_v11_t ncclCollNetPlugin_v11 =
	collnet_table<ncclCollNet_v11_t, ncclNetProperties_v11_t, ncclNetVDeviceProps_v11_t>();
IBVC_EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 =
	collnet_table<ncclCollNet_v12_t, ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t>();
