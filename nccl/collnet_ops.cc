// CollNet requests (collnet.h): each iallreduce, iallgather and
// ireducescatter one collective WR on the communicator's QP.  NCCL's
// proxy posts allgathers and reduce-scatters in windows, which hold
// unequal shares of the ranks, and the device's allgather and
// reduce-scatter take equal shares by contract.  So: the whole collective
// goes straight through; a window inside one rank's share is a broadcast
// from it (allgather) or a reduce to it (reduce-scatter); a window across
// shares is an allreduce of the window, staged.  GPU memory goes through
// its registration's shadow (collnet.h, cuda_stage.h).
#include "collnet.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ibv_coll::nccl {

namespace {

size_t dtype_bytes(ncclDataType_t dt)
{
	switch (dt) {
	case ncclInt8:
	case ncclUint8: return 1;
	case ncclFloat16:
	case ncclBfloat16: return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32: return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64: return 8;
	default: return 0;
	}
}

CollComm *comm_of(void *p)
{
	auto *c = static_cast<CollComm *>(p);
	return c && c->magic == kCommMagic && c->qp ? c : nullptr;
}

// The registration covering [p, p + n), or nullptr after a WARN.
const CollMr *mr_for(void *mh, const void *p, size_t n, const char *what)
{
	auto *m = static_cast<const CollMr *>(mh);
	auto *c = static_cast<const char *>(p);
	if (!m || m->magic != kMrMagic) {
		NCCL_PLUGIN_WARN("%s: memory handle %p is not a registration of this plugin", what,
				 mh);
		return nullptr;
	}
	if (n && (!c || c < m->base || size_t(c - m->base) > m->len ||
		  n > m->len - size_t(c - m->base))) {
		NCCL_PLUGIN_WARN("%s: %zu bytes at %p lie outside their registration (%zu at %p)",
				 what, n, p, m->len, static_cast<const void *>(m->base));
		return nullptr;
	}
	return m;
}

// A free request slot, or nullptr after a WARN: NCCL keeps at most
// NCCL_NET_MAX_REQUESTS in flight per comm, as getProperties says.
CollReq *take_req(CollComm *c, const char *what)
{
	for (CollReq &r : c->reqs)
		if (!r.busy) {
			r.busy = true;
			r.done = false;
			r.comm = c;
			r.copies.clear();
			r.copied = r.to_gpu = r.fetching = r.waiting = false;
			r.fail = ncclSuccess;
			r.bytes = 0;
			r.status = IBV_WC_SUCCESS;
			r.coll_status = IBV_COLL_STATUS_SUCCESS;
			r.what = what;
			c->inflight++;
			return &r;
		}
	NCCL_PLUGIN_WARN("%s: more than %d requests in flight on one communicator", what,
			 NCCL_NET_MAX_REQUESTS);
	return nullptr;
}

void give_back(CollReq *r)
{
	r->busy = false;
	r->comm->inflight--;
}

// Where the device finds p of registration m: p, or its shadow.
char *host_at(const CollMr *m, const void *p)
{
	auto *c = static_cast<const char *>(p);
	return m->shadow ? m->shadow + (c - m->base) : const_cast<char *>(c);
}

ibv_sge sge_of(const CollMr *m, const void *p, size_t n)
{
	return {uintptr_t(host_at(m, p)), uint32_t(n), m->mr->lkey};
}

// n bytes at p of m into host memory at `to`, or into m's shadow when to
// is null (nothing to do then for host memory): from GPU memory queued on
// the communicator's stream, the WR that reads them waiting for it
// (post).  false after a WARN.
bool fetch(CollReq *r, const CollMr *m, const void *p, size_t n, char *to = nullptr)
{
	if (!n || (!to && !m->shadow))
		return true;
	if (!to)
		to = host_at(m, p);
	if (!m->shadow) {
		memcpy(to, p, n);
		return true;
	}
	r->fetching = true;
	return cuda::copy_in(r->comm->cu, to, p, n, r->what);
}

// At completion, n bytes at `from` (host memory) to p of m: a copy into
// GPU memory, or into host memory unless the device wrote them there.
void deliver(CollReq *r, const CollMr *m, void *p, const char *from, size_t n)
{
	if (m->shadow || from != p)
		r->copies.push_back({static_cast<char *>(p), from, n, m->shadow != nullptr});
}

// A request whose sources could not be fetched from GPU memory: none of
// its copies still to come into its buffers.
ncclResult_t fetch_failed(CollReq *r)
{
	cuda::finish(r->comm->cu, r->what);
	give_back(r);
	return ncclUnhandledCudaError;
}

// Make the stage at least n bytes, registered.  false after a WARN.
bool grow(Stage *s, size_t n)
{
	if (s->len >= n)
		return true;
	coll_free_stage(s);
	size_t len = (n + 4095) & ~size_t(4095);
	s->buf = static_cast<char *>(aligned_alloc(4096, len));
	if (!s->buf ||
	    !(s->mr = ibv_reg_coll_mr(device().pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE))) {
		NCCL_PLUGIN_WARN("staging buffer of %zu bytes: %s", len,
				 strerror(errno ? errno : ENOMEM));
		free(s->buf);
		*s = {};
		return false;
	}
	s->len = len;
	return true;
}

// The request's WR to the device: false after a WARN.
bool post_now(CollReq *r)
{
	ibv_coll_send_wr *bad;
	if (int err = ibv_post_coll_send(r->comm->qp, &r->wr, &bad)) {
		NCCL_PLUGIN_WARN("%s of %lu elements: post: %s", r->what,
				 (unsigned long)r->wr.wr.coll.count, strerror(err));
		return false;
	}
	return true;
}

// The waiting WRs whose sources are in, in NCCL's order (every rank's
// device must see a communicator's collectives in one order); one that
// fails completes its request with the error.
void advance(CollComm *c)
{
	while (!c->waiting.empty()) {
		CollReq *r = c->waiting.front();
		if (r->fetching) {
			int q = cuda::query(c->cu, r->in_event, r->what);
			if (!q)
				return;
			r->fetching = false;
			if (q < 0)
				r->fail = ncclUnhandledCudaError;
		}
		if (!r->fail && !post_now(r))
			r->fail = ncclSystemError;
		r->done = r->fail != ncclSuccess;
		r->waiting = false;
		c->waiting.pop_front();
	}
}

ncclResult_t post(CollReq *r, ibv_coll_wr_opcode opc, ibv_sge src, ibv_sge dst, uint64_t count,
		  ibv_coll_op op, ibv_coll_dtype dt, void **request, uint32_t root = 0)
{
	CollComm *c = r->comm;
	ibv_coll_send_wr &wr = r->wr;
	wr = {};
	r->wr_src = src;
	r->wr_dst = dst;
	r->wr_id = uint64_t(r - c->reqs) | (c->next_wr++ << 8);
	wr.wr_id = r->wr_id;
	wr.opcode = opc;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = &r->wr_src;
	wr.num_sge = 1;
	wr.wr.coll.dst_list = &r->wr_dst;
	wr.wr.coll.count = count;
	wr.wr.coll.op = op;
	wr.wr.coll.dtype = dt;
	wr.wr.coll.root = root;
	if (r->fetching && !cuda::record(c->cu, &r->in_event, r->what))
		return fetch_failed(r);
	if (r->fetching || !c->waiting.empty()) {
		r->waiting = true;
		c->waiting.push_back(r);
		*request = r;
		advance(c);
		return ncclSuccess;
	}
	if (!post_now(r)) {
		give_back(r);
		return ncclSystemError;
	}
	*request = r;
	return ncclSuccess;
}

bool fits_sge(size_t n, const char *what)
{
	if (n <= UINT32_MAX)
		return true;
	NCCL_PLUGIN_WARN("%s: %zu bytes in one request, more than maxCollBytes", what, n);
	return false;
}

// This rank's share of a window [off, off + len) of the whole output
// (nranks shares of per_rank bytes): [*lo, *hi) in whole-output offsets.
void my_share(const CollComm *c, size_t per_rank, size_t off, size_t len, size_t *lo, size_t *hi)
{
	size_t a = size_t(c->rank) * per_rank, b = a + per_rank;
	*lo = off > a ? off : a;
	*hi = off + len < b ? off + len : b;
	if (*hi < *lo)
		*hi = *lo;
}

void drain(CollComm *c)
{
	ibv_coll_wc wc[16];
	int n;
	while ((n = ibv_poll_coll_cq(c->cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++) {
			uint64_t slot = wc[i].wr_id & 0xff;
			if (slot >= NCCL_NET_MAX_REQUESTS)
				continue; // connect's barrier
			CollReq &r = c->reqs[slot];
			if (!r.busy || r.wr_id != wc[i].wr_id)
				continue;
			r.done = true;
			r.status = wc[i].status;
			r.coll_status = wc[i].coll_status;
		}
}

} // namespace

void coll_free_stage(Stage *s)
{
	if (s->mr)
		ibv_dereg_coll_mr(s->mr);
	free(s->buf);
	*s = {};
}

void coll_free_stages(CollReq *r)
{
	coll_free_stage(&r->src);
	coll_free_stage(&r->dst);
}

bool coll_map(ncclDataType_t dt, ncclRedOp_t op, ibv_coll_dtype *cdt, ibv_coll_op *cop)
{
	// In NCCL's order (nccl_abi.h): int8, uint8, int32, uint32, int64,
	// uint64, fp16, fp32, fp64, bf16; sum, prod, max, min.
	static const ibv_coll_dtype kTypes[] = {IBV_COLL_DTYPE_INT8,	IBV_COLL_DTYPE_UINT8,
						IBV_COLL_DTYPE_INT32,	IBV_COLL_DTYPE_UINT32,
						IBV_COLL_DTYPE_INT64,	IBV_COLL_DTYPE_UINT64,
						IBV_COLL_DTYPE_FLOAT16, IBV_COLL_DTYPE_FLOAT32,
						IBV_COLL_DTYPE_FLOAT64, IBV_COLL_DTYPE_BFLOAT16};
	static const ibv_coll_op kOps[] = {IBV_COLL_OP_SUM, IBV_COLL_OP_PROD, IBV_COLL_OP_MAX,
					   IBV_COLL_OP_MIN};
	if (unsigned(dt) > ncclBfloat16 || unsigned(op) > ncclMin)
		return false; // fp8 (no such type in the device), AVG, user ops
	const ibv_coll_caps &caps = device().caps;
	*cdt = kTypes[dt];
	*cop = kOps[op];
	return (caps.dtypes >> *cdt & 1) && (caps.ops >> *cop & 1);
}

ncclResult_t coll_iallreduce(void *comm, void *send, void *recv, size_t count, ncclDataType_t dt,
			     ncclRedOp_t op, void *smh, void *rmh, void **request)
{
	*request = nullptr;
	CollComm *c = comm_of(comm);
	ibv_coll_dtype cdt;
	ibv_coll_op cop;
	if (!c || !coll_map(dt, op, &cdt, &cop)) {
		NCCL_PLUGIN_WARN("iallreduce: %s", c ? "type or op the device does not reduce"
						     : "not a connected collective communicator");
		return ncclInvalidArgument;
	}
	size_t n = count * dtype_bytes(dt);
	const CollMr *s = mr_for(smh, send, n, "iallreduce source"),
		     *d = s ? mr_for(rmh, recv, n, "iallreduce destination") : nullptr;
	if (!d || !fits_sge(n, "iallreduce"))
		return ncclInvalidArgument;
	CollReq *r = take_req(c, "iallreduce");
	if (!r)
		return ncclInternalError;
	r->bytes = n;
	if (!fetch(r, s, send, n))
		return fetch_failed(r);
	deliver(r, d, recv, host_at(d, recv), n);
	return post(r, IBV_COLL_WR_ALLREDUCE, sge_of(s, send, n), sge_of(d, recv, n), count, cop,
		    cdt, request);
}

ncclResult_t coll_iallgather(void *comm, void *send, int nparts, ncclNetSGE_v10_t *parts,
			     size_t per_rank, size_t win_off, size_t win_bytes, void *smh,
			     void **request)
{
	*request = nullptr;
	CollComm *c = comm_of(comm);
	size_t total = 0, lo, hi;
	for (int i = 0; c && parts && i < nparts; i++)
		total += parts[i].size;
	if (!c || nparts < 1 || !parts || total != win_bytes || !win_bytes ||
	    win_off + win_bytes > per_rank * size_t(c->nranks)) {
		NCCL_PLUGIN_WARN(
			"iallgather: a window of %zu bytes at %zu over %d parts of %zu bytes "
			"does not fit %d ranks of %zu bytes",
			win_bytes, win_off, nparts, total, c ? c->nranks : 0, per_rank);
		return ncclInvalidArgument;
	}
	my_share(c, per_rank, win_off, win_bytes, &lo, &hi);
	const CollMr *s = mr_for(smh, send, hi - lo, "iallgather source");
	for (int i = 0; s && i < nparts; i++)
		if (!mr_for(parts[i].mhandle, parts[i].address, parts[i].size,
			    "iallgather destination"))
			s = nullptr;
	if (!s || !fits_sge(win_bytes, "iallgather"))
		return ncclInvalidArgument;
	CollReq *r = take_req(c, "iallgather");
	if (!r)
		return ncclInternalError;
	r->bytes = win_bytes;
	auto *d0 = static_cast<const CollMr *>(parts[0].mhandle);
	if (win_off == 0 && win_bytes == per_rank * size_t(c->nranks) && nparts == 1) {
		if (!fetch(r, s, send, per_rank))
			return fetch_failed(r);
		deliver(r, d0, parts[0].address, host_at(d0, parts[0].address), win_bytes);
		return post(r, IBV_COLL_WR_ALLGATHER, sge_of(s, send, per_rank),
			    sge_of(d0, parts[0].address, win_bytes), per_rank, IBV_COLL_OP_SUM,
			    IBV_COLL_DTYPE_UINT8, request);
	}
	// A window inside one rank's share (most of NCCL's steps when the
	// shares are large): a broadcast from that rank straight into the
	// destination, the window's bytes once.
	const size_t owner = win_off / per_rank;
	if (nparts == 1 && (win_off + win_bytes - 1) / per_rank == owner) {
		ibv_sge dst = sge_of(d0, parts[0].address, win_bytes);
		ibv_sge src = owner == size_t(c->rank) ? sge_of(s, send, win_bytes) : dst;
		if (owner == size_t(c->rank) && !fetch(r, s, send, win_bytes))
			return fetch_failed(r);
		deliver(r, d0, parts[0].address, host_at(d0, parts[0].address), win_bytes);
		return post(r, IBV_COLL_WR_BCAST, src, dst, win_bytes, IBV_COLL_OP_SUM,
			    IBV_COLL_DTYPE_UINT8, request, uint32_t(owner));
	}
	// Else the window as an OR of windows that are zero outside each
	// rank's share.
	if (!grow(&r->src, win_bytes) || !grow(&r->dst, win_bytes)) {
		give_back(r);
		return ncclSystemError;
	}
	memset(r->src.buf, 0, win_bytes);
	if (!fetch(r, s, send, hi - lo, r->src.buf + (lo - win_off)))
		return fetch_failed(r);
	for (size_t i = 0, at = 0; i < size_t(nparts); at += parts[i++].size)
		deliver(r, static_cast<const CollMr *>(parts[i].mhandle), parts[i].address,
			r->dst.buf + at, parts[i].size);
	return post(r, IBV_COLL_WR_ALLREDUCE,
		    {uintptr_t(r->src.buf), uint32_t(win_bytes), r->src.mr->lkey},
		    {uintptr_t(r->dst.buf), uint32_t(win_bytes), r->dst.mr->lkey}, win_bytes,
		    IBV_COLL_OP_BOR, IBV_COLL_DTYPE_UINT8, request);
}

ncclResult_t coll_ireducescatter(void *comm, int nparts, ncclNetSGE_v10_t *parts, void *recv,
				 size_t per_rank, size_t win_off, size_t win_bytes,
				 ncclDataType_t dt, ncclRedOp_t op, void *rmh, void **request)
{
	*request = nullptr;
	CollComm *c = comm_of(comm);
	ibv_coll_dtype cdt;
	ibv_coll_op cop;
	size_t es = dtype_bytes(dt), total = 0, lo, hi;
	for (int i = 0; c && parts && i < nparts; i++)
		total += parts[i].size;
	if (!c || !coll_map(dt, op, &cdt, &cop) || nparts < 1 || !parts || total != win_bytes ||
	    !win_bytes || win_off + win_bytes > per_rank * size_t(c->nranks) || win_bytes % es ||
	    win_off % es || per_rank % es) {
		NCCL_PLUGIN_WARN(
			"ireducescatter: type %d, op %d, a window of %zu bytes at %zu over "
			"%d parts of %zu bytes, %d ranks of %zu bytes: not a reduce-scatter "
			"the device runs",
			int(dt), int(op), win_bytes, win_off, nparts, total, c ? c->nranks : 0,
			per_rank);
		return ncclInvalidArgument;
	}
	my_share(c, per_rank, win_off, win_bytes, &lo, &hi);
	const CollMr *d = mr_for(rmh, recv, hi - lo, "ireducescatter destination");
	for (int i = 0; d && i < nparts; i++)
		if (!mr_for(parts[i].mhandle, parts[i].address, parts[i].size,
			    "ireducescatter source"))
			d = nullptr;
	if (!d || !fits_sge(win_bytes, "ireducescatter"))
		return ncclInvalidArgument;
	CollReq *r = take_req(c, "ireducescatter");
	if (!r)
		return ncclInternalError;
	r->bytes = hi - lo;
	auto *s0 = static_cast<const CollMr *>(parts[0].mhandle);
	if (win_off == 0 && win_bytes == per_rank * size_t(c->nranks) && nparts == 1) {
		if (!fetch(r, s0, parts[0].address, win_bytes))
			return fetch_failed(r);
		deliver(r, d, recv, host_at(d, recv), per_rank);
		return post(r, IBV_COLL_WR_REDUCE_SCATTER, sge_of(s0, parts[0].address, win_bytes),
			    sge_of(d, recv, per_rank), per_rank / es, cop, cdt, request);
	}
	// The window's source in one piece: NCCL's part, or staged.
	ibv_sge src = sge_of(s0, parts[0].address, win_bytes);
	if (nparts > 1) {
		if (!grow(&r->src, win_bytes)) {
			give_back(r);
			return ncclSystemError;
		}
		for (size_t i = 0, at = 0; i < size_t(nparts); at += parts[i++].size)
			if (!fetch(r, static_cast<const CollMr *>(parts[i].mhandle),
				   parts[i].address, parts[i].size, r->src.buf + at))
				return fetch_failed(r);
		src = {uintptr_t(r->src.buf), uint32_t(win_bytes), r->src.mr->lkey};
	} else if (!fetch(r, s0, parts[0].address, win_bytes))
		return fetch_failed(r);
	// A window inside one rank's share: reduced to that rank alone (a
	// reduce writes no other rank's destination: its source stands in).
	const size_t owner = win_off / per_rank;
	if ((win_off + win_bytes - 1) / per_rank == owner) {
		ibv_sge dst = owner == size_t(c->rank) ? sge_of(d, recv, win_bytes) : src;
		if (owner == size_t(c->rank))
			deliver(r, d, recv, host_at(d, recv), win_bytes);
		return post(r, IBV_COLL_WR_REDUCE, src, dst, win_bytes / es, cop, cdt, request,
			    uint32_t(owner));
	}
	if (!grow(&r->dst, win_bytes)) {
		give_back(r);
		return ncclSystemError;
	}
	if (hi > lo)
		deliver(r, d, recv, r->dst.buf + (lo - win_off), hi - lo);
	return post(r, IBV_COLL_WR_ALLREDUCE, src,
		    {uintptr_t(r->dst.buf), uint32_t(win_bytes), r->dst.mr->lkey}, win_bytes / es,
		    cop, cdt, request);
}

ncclResult_t coll_test(void *request, int *done, int *size)
{
	auto *r = static_cast<CollReq *>(request);
	*done = 0;
	if (!r || !r->busy || !r->comm) {
		NCCL_PLUGIN_WARN("test: %p is not a request in flight", request);
		return ncclInvalidArgument;
	}
	advance(r->comm);
	if (r->waiting)
		return ncclSuccess;
	if (!r->done)
		drain(r->comm);
	if (!r->done)
		return ncclSuccess;
	ncclResult_t res = r->fail; // said in a WARN already
	const cuda::Stream &cu = r->comm->cu;
	if (!res && r->status != IBV_WC_SUCCESS) {
		NCCL_PLUGIN_WARN("%s failed: %s (%s)", r->what, ibv_coll_wc_status_str(r->status),
				 ibv_coll_status_str(r->coll_status));
		res = r->coll_status == IBV_COLL_STATUS_TIMEOUT ? ncclRemoteError : ncclSystemError;
	} else if (!res && !r->copied) {
		r->copied = true;
		for (const CollReq::Copy &k : r->copies) {
			if (!k.gpu)
				memcpy(k.to, k.from, k.len);
			else if (!cuda::copy_out(cu, k.to, k.from, k.len, r->what)) {
				res = ncclUnhandledCudaError;
				break;
			} else
				r->to_gpu = true;
		}
		if (!res && r->to_gpu && !cuda::record(cu, &r->cu_event, r->what))
			res = ncclUnhandledCudaError;
	}
	// Done once what goes into GPU memory is there.
	if (!res && r->to_gpu) {
		int q = cuda::query(cu, r->cu_event, r->what);
		if (!q)
			return ncclSuccess;
		if (q < 0)
			res = ncclUnhandledCudaError;
	}
	*done = 1;
	if (size)
		*size = int(r->bytes);
	give_back(r);
	return res;
}

ncclResult_t coll_barrier(CollComm *c, int timeout_ms)
{
	ibv_coll_send_wr wr{}, *bad;
	wr.wr_id = ~0ull; // no request slot has it
	wr.opcode = IBV_COLL_WR_BARRIER;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	if (int err = ibv_post_coll_send(c->qp, &wr, &bad)) {
		NCCL_PLUGIN_WARN("connect: barrier: post: %s", strerror(err));
		return ncclSystemError;
	}
	timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ibv_coll_wc wc;
		int n = ibv_poll_coll_cq(c->cq, 1, &wc);
		if (n > 0 && wc.wr_id == ~0ull) {
			if (wc.status == IBV_WC_SUCCESS)
				return ncclSuccess;
			NCCL_PLUGIN_WARN(
				"connect: the communicator's first barrier failed: %s (%s)",
				ibv_coll_wc_status_str(wc.status),
				ibv_coll_status_str(wc.coll_status));
			return ncclRemoteError;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >
		    timeout_ms) {
			NCCL_PLUGIN_WARN("connect: the other ranks did not come within %d ms",
					 timeout_ms);
			return ncclRemoteError;
		}
		usleep(100);
	}
}

} // namespace ibv_coll::nccl
