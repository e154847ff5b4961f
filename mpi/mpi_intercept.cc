// libibv_coll_mpi entry points: the MPI collectives it can hand to the
// device, each deciding from its arguments alone (so that every rank
// decides alike) whether to offload or to call PMPI unchanged.
#include "coll_mpi.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#define EXPORT extern "C" __attribute__((visibility("default")))

using namespace ibv_coll::mpi;

namespace {

// Reductions: the MPI types the device reduces, by value.
bool reduce_dtype(MPI_Datatype t, ibv_coll_dtype *out, bool *is_float)
{
	static_assert(sizeof(long) == 8 && sizeof(int) == 4 && sizeof(short) == 2);
	struct M {
		MPI_Datatype t;
		ibv_coll_dtype d;
	};
	const M map[] = {
		{MPI_INT8_T, IBV_COLL_DTYPE_INT8},
		{MPI_SIGNED_CHAR, IBV_COLL_DTYPE_INT8},
		{MPI_UINT8_T, IBV_COLL_DTYPE_UINT8},
		{MPI_UNSIGNED_CHAR, IBV_COLL_DTYPE_UINT8},
		{MPI_INT16_T, IBV_COLL_DTYPE_INT16},
		{MPI_SHORT, IBV_COLL_DTYPE_INT16},
		{MPI_UINT16_T, IBV_COLL_DTYPE_UINT16},
		{MPI_UNSIGNED_SHORT, IBV_COLL_DTYPE_UINT16},
		{MPI_INT32_T, IBV_COLL_DTYPE_INT32},
		{MPI_INT, IBV_COLL_DTYPE_INT32},
		{MPI_UINT32_T, IBV_COLL_DTYPE_UINT32},
		{MPI_UNSIGNED, IBV_COLL_DTYPE_UINT32},
		{MPI_INT64_T, IBV_COLL_DTYPE_INT64},
		{MPI_LONG, IBV_COLL_DTYPE_INT64},
		{MPI_LONG_LONG, IBV_COLL_DTYPE_INT64},
		{MPI_UINT64_T, IBV_COLL_DTYPE_UINT64},
		{MPI_UNSIGNED_LONG, IBV_COLL_DTYPE_UINT64},
		{MPI_UNSIGNED_LONG_LONG, IBV_COLL_DTYPE_UINT64},
		{MPI_FLOAT, IBV_COLL_DTYPE_FLOAT32},
		{MPI_DOUBLE, IBV_COLL_DTYPE_FLOAT64},
		// The value-index pairs of MPI_MAXLOC and MPI_MINLOC (the C
		// structs; MPI_LONG_DOUBLE_INT has no device type).
		{MPI_FLOAT_INT, IBV_COLL_DTYPE_FLOAT32_INT32},
		{MPI_DOUBLE_INT, IBV_COLL_DTYPE_FLOAT64_INT32},
		{MPI_LONG_INT, IBV_COLL_DTYPE_INT64_INT32},
		{MPI_2INT, IBV_COLL_DTYPE_INT32_INT32},
		{MPI_SHORT_INT, IBV_COLL_DTYPE_INT16_INT32},
	};
	for (const M &m : map)
		if (m.t == t) {
			*out = m.d;
			*is_float = m.d == IBV_COLL_DTYPE_FLOAT32 || m.d == IBV_COLL_DTYPE_FLOAT64;
			return true;
		}
	return false;
}

bool is_pair(ibv_coll_dtype d)
{
	return d >= IBV_COLL_DTYPE_FLOAT32_INT32 && d <= IBV_COLL_DTYPE_INT16_INT32;
}

// The operation on the type: bitwise and logical ones on integers only,
// MAXLOC/MINLOC on the pairs only (and only they on the pairs).
bool reduce_op(MPI_Op o, ibv_coll_dtype d, bool is_float, ibv_coll_op *out)
{
	enum Kind { kArith, kInteger, kLoc };
	struct M {
		MPI_Op o;
		ibv_coll_op op;
		Kind kind;
	};
	const M map[] = {
		{MPI_SUM, IBV_COLL_OP_SUM, kArith},	{MPI_PROD, IBV_COLL_OP_PROD, kArith},
		{MPI_MIN, IBV_COLL_OP_MIN, kArith},	{MPI_MAX, IBV_COLL_OP_MAX, kArith},
		{MPI_BAND, IBV_COLL_OP_BAND, kInteger}, {MPI_BOR, IBV_COLL_OP_BOR, kInteger},
		{MPI_BXOR, IBV_COLL_OP_BXOR, kInteger}, {MPI_LAND, IBV_COLL_OP_LAND, kInteger},
		{MPI_LOR, IBV_COLL_OP_LOR, kInteger},	{MPI_LXOR, IBV_COLL_OP_LXOR, kInteger},
		{MPI_MAXLOC, IBV_COLL_OP_MAXLOC, kLoc}, {MPI_MINLOC, IBV_COLL_OP_MINLOC, kLoc},
	};
	for (const M &m : map) {
		if (m.o != o)
			continue;
		if ((m.kind == kLoc) != is_pair(d) || (m.kind == kInteger && is_float))
			return false;
		*out = m.op;
		return true;
	}
	return false;
}

// Data movement: any predefined type laid out without gaps, as bytes.
bool plain_type(MPI_Datatype t, size_t *size)
{
	int ni, na, nd, comb, sz;
	MPI_Aint lb, extent;
	if (t == MPI_DATATYPE_NULL ||
	    PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS ||
	    comb != MPI_COMBINER_NAMED || PMPI_Type_size(t, &sz) != MPI_SUCCESS ||
	    PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS || lb != 0 || extent != sz)
		return false;
	*size = size_t(sz);
	return true;
}

// Counted refusal: the caller then calls PMPI.
Job *refuse(Coll c, Why w)
{
	g_stats.fell[c]++;
	g_stats.why[w]++;
	return nullptr;
}

// The checks every collective shares; bytes is each rank's share.
Job *admit(Coll c, MPI_Comm comm, size_t bytes, bool has_data)
{
	// Allgather's destination and reduce-scatter's source hold one share
	// per rank; the other collectives' buffers one.
	const bool per_rank = c == kAllgather || c == kReduceScatter || c == kIallgather ||
			      c == kIreduceScatter || c == kAllgatherv || c == kReduceScatterV;
	lib_init();
	int inter = 0, size = 0;
	if (!g_cfg.enable || !(g_cfg.colls & (1u << c)))
		return refuse(c, kDisabled);
	if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
	    PMPI_Comm_size(comm, &size) != MPI_SUCCESS || !offload_size(size))
		return refuse(c, kComm);
	if (has_data &&
	    (bytes == 0 || bytes < g_cfg.min_bytes || (g_cfg.max_bytes && bytes > g_cfg.max_bytes)))
		return refuse(c, kSize);
	// Setting a job up takes collective calls of its own, which a
	// nonblocking call must not make: another rank may start this one
	// after a blocking collective on another communicator that waits for
	// us.  So a communicator's job comes with its first blocking call.
	const bool nonblocking = c >= kIallreduce && c <= kIbarrier;
	Job *j = job_of(comm, !nonblocking);
	if (!j || job_failed(j))
		return refuse(c, j || !nonblocking ? kSetup : kFirst);
	// What one source or destination may hold.
	if (has_data && bytes * (per_rank ? size_t(size) : 1) > job_max_bytes(j))
		return refuse(c, kSize);
	return j;
}

// A reduction's admission: the type and operation the device has, then
// admit(); fills *d, *o and the type's size *sz when it returns a job.
Job *admit_reduction(Coll c, MPI_Datatype dt, MPI_Op op, int count, MPI_Comm comm,
		     ibv_coll_dtype *d, ibv_coll_op *o, int *sz)
{
	bool fl;
	if (!reduce_dtype(dt, d, &fl))
		return refuse(c, kDatatype);
	if (!reduce_op(op, *d, fl, o))
		return refuse(c, kOp);
	if (count <= 0 || PMPI_Type_size(dt, sz) != MPI_SUCCESS)
		return refuse(c, kSize);
	if (is_pair(*d)) {
		// A pair's buffer is an array of the C struct: its extent (16
		// for MPI_DOUBLE_INT, whose size is 12) is the device's element.
		MPI_Aint lb, extent;
		if (PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS || lb != 0 ||
		    extent !=
			    (*d == IBV_COLL_DTYPE_FLOAT64_INT32 || *d == IBV_COLL_DTYPE_INT64_INT32
				     ? 16
				     : 8))
			return refuse(c, kDatatype);
		*sz = int(extent);
	}
	return admit(c, comm, size_t(count) * size_t(*sz), true);
}

// A collective the device takes: its job, what it asks of the device, and
// a copy of an in-place input that must live until it completes (freed
// with the op).
struct Call {
	Job *j = nullptr;
	Request r{};
	void *owned = nullptr;
};

// The blocking call: post, wait, finish.
int run(Call &k, Coll c, MPI_Comm comm)
{
	Op *op;
	int rc = job_post(k.j, k.r, c, &op);
	if (rc != MPI_SUCCESS) {
		free(k.owned);
		return rc;
	}
	op->owned = k.owned;
	job_wait(op);
	return job_finish(op, comm);
}

// Nonblocking calls handed out as generalized requests, which MPI_Wait and
// friends complete once the device has (see the wait family below).
struct Pending {
	Op *op;
	MPI_Comm comm;
	int *rc; // the request's error, read by query_fn
};
std::unordered_map<MPI_Request, Pending> g_pending;
std::vector<Op *> g_orphans; // requests freed before they completed

int query_fn(void *extra, MPI_Status *st)
{
	st->MPI_SOURCE = MPI_UNDEFINED;
	st->MPI_TAG = MPI_UNDEFINED;
	st->MPI_ERROR = *static_cast<int *>(extra);
	PMPI_Status_set_cancelled(st, 0);
	PMPI_Status_set_elements(st, MPI_BYTE, 0);
	return MPI_SUCCESS;
}

int free_fn(void *extra)
{
	delete static_cast<int *>(extra);
	return MPI_SUCCESS;
}

int cancel_fn(void *, int)
{
	return MPI_SUCCESS; // a collective cannot be cancelled: MPI_Test_cancelled says no
}

void progress_orphans()
{
	std::erase_if(g_orphans, [](Op *op) {
		if (!job_test(op))
			return false;
		job_finish(op, MPI_COMM_NULL);
		return true;
	});
}

// Complete our request *r if its op is done (or wait for it); true if ours.
bool settle(MPI_Request r, bool block)
{
	auto it = r == MPI_REQUEST_NULL ? g_pending.end() : g_pending.find(r);
	if (it == g_pending.end())
		return false;
	Pending &p = it->second;
	if (block)
		job_wait(p.op);
	else if (!job_test(p.op))
		return true;
	*p.rc = job_finish(p.op, MPI_COMM_NULL);
	g_pending.erase(it);
	PMPI_Grequest_complete(r);
	return true;
}

// Settle every one of ours in the array; true if any was ours.
bool settle_all(int n, MPI_Request *reqs, bool block)
{
	bool any = false;
	if (!g_orphans.empty())
		progress_orphans();
	if (g_pending.empty())
		return false;
	for (int i = 0; i < n; i++)
		any |= settle(reqs[i], block);
	return any;
}

// Each prep_*: the call's checks (refusals counted under c) and what it
// asks of the device; false sends the call to PMPI.
bool prep_allreduce(Coll c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
		    MPI_Op op, MPI_Comm comm, Call *k)
{
	ibv_coll_dtype d;
	ibv_coll_op o;
	int sz = 0;
	if (!(k->j = admit_reduction(c, dt, op, count, comm, &d, &o, &sz)))
		return false;
	size_t b = size_t(count) * size_t(sz);
	const void *src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	k->r = {IBV_COLL_WR_ALLREDUCE, src, recvbuf, b, b, uint64_t(count), o, d, 0};
	return true;
}

bool prep_reduce(Coll c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
		 int root, MPI_Comm comm, Call *k)
{
	ibv_coll_dtype d;
	ibv_coll_op o;
	int sz = 0, rank = 0, size = 0;
	if (!(k->j = admit_reduction(c, dt, op, count, comm, &d, &o, &sz)))
		return false;
	PMPI_Comm_rank(comm, &rank);
	PMPI_Comm_size(comm, &size);
	// A bad root, or MPI_IN_PLACE off the root: PMPI reports the error.
	if (root < 0 || root >= size || (sendbuf == MPI_IN_PLACE && rank != root))
		return false;
	size_t b = size_t(count) * size_t(sz);
	const void *src = sendbuf == MPI_IN_PLACE && rank == root ? recvbuf : sendbuf;
	void *dst = rank == root ? recvbuf : nullptr;
	k->r = {IBV_COLL_WR_REDUCE, src, dst, b, b, uint64_t(count), o, d, uint32_t(root)};
	return true;
}

bool prep_bcast(Coll c, void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, Call *k)
{
	size_t sz = 0;
	int size = 0;
	if (!plain_type(dt, &sz))
		refuse(c, kDatatype);
	else if (count > 0)
		k->j = admit(c, comm, size_t(count) * sz, true);
	else
		refuse(c, kSize);
	if (!k->j)
		return false;
	PMPI_Comm_size(comm, &size);
	if (root < 0 || root >= size)
		return false;
	size_t b = size_t(count) * sz;
	k->r = {IBV_COLL_WR_BCAST,    buf,	     buf, b, b, b, IBV_COLL_OP_SUM,
		IBV_COLL_DTYPE_UINT8, uint32_t(root)};
	return true;
}

bool prep_allgather(Coll c, const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
		    int rcount, MPI_Datatype rtype, MPI_Comm comm, Call *k)
{
	size_t ssz = 0, rsz = 0;
	bool in_place = sendbuf == MPI_IN_PLACE;
	if (!plain_type(rtype, &rsz) || (!in_place && !plain_type(stype, &ssz)))
		refuse(c, kDatatype);
	else if (rcount > 0 && (in_place || size_t(scount) * ssz == size_t(rcount) * rsz))
		k->j = admit(c, comm, size_t(rcount) * rsz, true);
	else
		refuse(c, kSize);
	if (!k->j)
		return false;
	int rank, size;
	PMPI_Comm_rank(comm, &rank);
	PMPI_Comm_size(comm, &size);
	size_t b = size_t(rcount) * rsz;
	// In place, our share sits inside the destination: read it from a copy.
	if (in_place) {
		if (!(k->owned = malloc(b)))
			return false;
		memcpy(k->owned, static_cast<char *>(recvbuf) + size_t(rank) * b, b);
	}
	k->r = {IBV_COLL_WR_ALLGATHER,
		in_place ? k->owned : sendbuf,
		recvbuf,
		b,
		b * size_t(size),
		b,
		IBV_COLL_OP_SUM,
		IBV_COLL_DTYPE_UINT8,
		0};
	return true;
}

bool prep_reduce_scatter(Coll c, const void *sendbuf, void *recvbuf, int rcount, MPI_Datatype dt,
			 MPI_Op op, MPI_Comm comm, Call *k)
{
	ibv_coll_dtype d;
	ibv_coll_op o;
	int sz = 0;
	if (!(k->j = admit_reduction(c, dt, op, rcount, comm, &d, &o, &sz)))
		return false;
	int size;
	PMPI_Comm_size(comm, &size);
	size_t b = size_t(rcount) * size_t(sz), all = b * size_t(size);
	// In place, the input is the whole destination: reduce from a copy.
	if (sendbuf == MPI_IN_PLACE) {
		if (!(k->owned = malloc(all)))
			return false;
		memcpy(k->owned, recvbuf, all);
	}
	k->r = {IBV_COLL_WR_REDUCE_SCATTER,
		k->owned ? k->owned : sendbuf,
		recvbuf,
		all,
		b,
		uint64_t(rcount),
		o,
		d,
		0};
	return true;
}

bool prep_barrier(Coll c, MPI_Comm comm, Call *k)
{
	if (!(k->j = admit(c, comm, 0, false)))
		return false;
	k->r = {IBV_COLL_WR_BARRIER,  nullptr, nullptr, 0, 0, 0, IBV_COLL_OP_SUM,
		IBV_COLL_DTYPE_UINT8, 0};
	return true;
}

// The nonblocking call: post, and hand out a generalized request that the
// wait family completes once the device has.
int start(Call &k, Coll c, MPI_Comm comm, MPI_Request *req)
{
	Op *p;
	int rc = job_post(k.j, k.r, c, &p);
	if (rc != MPI_SUCCESS) {
		free(k.owned);
		return PMPI_Comm_call_errhandler(comm, rc), rc;
	}
	p->owned = k.owned;
	int *err = new int(MPI_SUCCESS);
	if ((rc = PMPI_Grequest_start(query_fn, free_fn, cancel_fn, err, req)) != MPI_SUCCESS) {
		job_wait(p);
		job_finish(p, comm);
		delete err;
		return rc;
	}
	g_pending[*req] = {p, comm, err};
	return MPI_SUCCESS;
}

} // namespace

EXPORT int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
			 MPI_Comm comm)
{
	Call k;
	if (!prep_allreduce(kAllreduce, sendbuf, recvbuf, count, dt, op, comm, &k))
		return PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
	return run(k, kAllreduce, comm);
}

EXPORT int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
		      int root, MPI_Comm comm)
{
	Call k;
	if (!prep_reduce(kReduce, sendbuf, recvbuf, count, dt, op, root, comm, &k))
		return PMPI_Reduce(sendbuf, recvbuf, count, dt, op, root, comm);
	return run(k, kReduce, comm);
}

EXPORT int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm)
{
	Call k;
	if (!prep_bcast(kBcast, buf, count, dt, root, comm, &k))
		return PMPI_Bcast(buf, count, dt, root, comm);
	return run(k, kBcast, comm);
}

EXPORT int MPI_Allgather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
			 int rcount, MPI_Datatype rtype, MPI_Comm comm)
{
	Call k;
	if (!prep_allgather(kAllgather, sendbuf, scount, stype, recvbuf, rcount, rtype, comm, &k))
		return PMPI_Allgather(sendbuf, scount, stype, recvbuf, rcount, rtype, comm);
	return run(k, kAllgather, comm);
}

EXPORT int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int rcount, MPI_Datatype dt,
				    MPI_Op op, MPI_Comm comm)
{
	Call k;
	if (!prep_reduce_scatter(kReduceScatter, sendbuf, recvbuf, rcount, dt, op, comm, &k))
		return PMPI_Reduce_scatter_block(sendbuf, recvbuf, rcount, dt, op, comm);
	return run(k, kReduceScatter, comm);
}

namespace {

// Counts per rank: the largest, and whether all are equal; false when one
// is negative or all are 0.
bool counts_of(const int *counts, int size, int *largest, bool *equal)
{
	*largest = 0;
	*equal = true;
	for (int i = 0; i < size; i++) {
		if (counts[i] < 0)
			return false;
		*largest = std::max(*largest, counts[i]);
		*equal &= counts[i] == counts[0];
	}
	return *largest > 0;
}

// Blocking run of k through a private buffer, then out() copies the
// result where MPI wants it; the buffer is freed after.
template <class F> int run_padded(Call &k, Coll c, MPI_Comm comm, void *buf, F out)
{
	int rc = run(k, c, comm);
	if (rc == MPI_SUCCESS)
		out();
	free(buf);
	return rc;
}

} // namespace

// Through the device's allgather with every share padded to the largest
// count, into a private buffer whose shares are then copied to displs.
// Equal counts at consecutive displacements need neither.
EXPORT int MPI_Allgatherv(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
			  const int rcounts[], const int displs[], MPI_Datatype rtype,
			  MPI_Comm comm)
{
	auto pmpi = [&] {
		return PMPI_Allgatherv(sendbuf, scount, stype, recvbuf, rcounts, displs, rtype,
				       comm);
	};
	int rank = 0, size = 0, largest = 0;
	bool equal = true;
	size_t ssz = 0, rsz = 0;
	const bool in_place = sendbuf == MPI_IN_PLACE;
	if (comm == MPI_COMM_NULL || PMPI_Comm_size(comm, &size) != MPI_SUCCESS ||
	    PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS || !rcounts || !displs)
		return pmpi();
	Job *j = nullptr;
	if (!plain_type(rtype, &rsz) || (!in_place && !plain_type(stype, &ssz)))
		refuse(kAllgatherv, kDatatype);
	else if (!counts_of(rcounts, size, &largest, &equal) ||
		 (!in_place && size_t(scount) * ssz != size_t(rcounts[rank]) * rsz))
		refuse(kAllgatherv, kSize);
	else
		j = admit(kAllgatherv, comm, size_t(largest) * rsz, true);
	if (!j)
		return pmpi();
	const size_t share = size_t(largest) * rsz, mine = size_t(rcounts[rank]) * rsz;
	bool packed = equal;
	for (int i = 0; i < size && packed; i++)
		packed = displs[i] == i * largest;
	auto at = [&](int i) { return static_cast<char *>(recvbuf) + size_t(displs[i]) * rsz; };
	Call k;
	k.j = j;
	if (packed && !in_place) {
		k.r = {IBV_COLL_WR_ALLGATHER,
		       sendbuf,
		       recvbuf,
		       share,
		       share * size_t(size),
		       share,
		       IBV_COLL_OP_SUM,
		       IBV_COLL_DTYPE_UINT8,
		       0};
		return run(k, kAllgatherv, comm);
	}
	// [all shares | our padded share]
	char *buf = static_cast<char *>(calloc(size_t(size) + 1, share));
	if (!buf)
		return pmpi();
	char *src = buf + share * size_t(size);
	memcpy(src, in_place ? at(rank) : sendbuf, mine);
	k.r = {IBV_COLL_WR_ALLGATHER, src, buf, share, share * size_t(size), share, IBV_COLL_OP_SUM,
	       IBV_COLL_DTYPE_UINT8,  0};
	return run_padded(k, kAllgatherv, comm, buf, [&] {
		for (int i = 0; i < size; i++)
			if (!(in_place && i == rank))
				memcpy(at(i), buf + size_t(i) * share, size_t(rcounts[i]) * rsz);
	});
}

// Through the device's reduce-scatter with every rank's block padded to
// the largest count (the padding is reduced too, and dropped).
EXPORT int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int rcounts[],
			      MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
	auto pmpi = [&] { return PMPI_Reduce_scatter(sendbuf, recvbuf, rcounts, dt, op, comm); };
	int rank = 0, size = 0, largest = 0, sz = 0;
	bool equal = true;
	if (comm == MPI_COMM_NULL || PMPI_Comm_size(comm, &size) != MPI_SUCCESS ||
	    PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS || !rcounts)
		return pmpi();
	if (!counts_of(rcounts, size, &largest, &equal)) {
		refuse(kReduceScatterV, kSize);
		return pmpi();
	}
	ibv_coll_dtype d;
	ibv_coll_op o;
	Job *j = admit_reduction(kReduceScatterV, dt, op, largest, comm, &d, &o, &sz);
	if (!j)
		return pmpi();
	const size_t es = size_t(sz), share = size_t(largest) * es;
	Call k;
	k.j = j;
	if (equal && sendbuf != MPI_IN_PLACE) {
		k.r = {IBV_COLL_WR_REDUCE_SCATTER,
		       sendbuf,
		       recvbuf,
		       share * size_t(size),
		       share,
		       uint64_t(largest),
		       o,
		       d,
		       0};
		return run(k, kReduceScatterV, comm);
	}
	// [the padded input | our padded result]
	char *buf = static_cast<char *>(calloc(size_t(size) + 1, share));
	if (!buf)
		return pmpi();
	const char *in = static_cast<const char *>(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf);
	for (int i = 0; i < size; i++) {
		memcpy(buf + size_t(i) * share, in, size_t(rcounts[i]) * es);
		in += size_t(rcounts[i]) * es;
	}
	char *out = buf + share * size_t(size);
	k.r = {IBV_COLL_WR_REDUCE_SCATTER,
	       buf,
	       out,
	       share * size_t(size),
	       share,
	       uint64_t(largest),
	       o,
	       d,
	       0};
	return run_padded(k, kReduceScatterV, comm, buf,
			  [&] { memcpy(recvbuf, out, size_t(rcounts[rank]) * es); });
}

EXPORT int MPI_Barrier(MPI_Comm comm)
{
	Call k;
	if (!prep_barrier(kBarrier, comm, &k))
		return PMPI_Barrier(comm);
	return run(k, kBarrier, comm);
}

EXPORT int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
			  MPI_Comm comm, MPI_Request *req)
{
	Call k;
	if (!prep_allreduce(kIallreduce, sendbuf, recvbuf, count, dt, op, comm, &k))
		return PMPI_Iallreduce(sendbuf, recvbuf, count, dt, op, comm, req);
	return start(k, kIallreduce, comm, req);
}

EXPORT int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
		       int root, MPI_Comm comm, MPI_Request *req)
{
	Call k;
	if (!prep_reduce(kIreduce, sendbuf, recvbuf, count, dt, op, root, comm, &k))
		return PMPI_Ireduce(sendbuf, recvbuf, count, dt, op, root, comm, req);
	return start(k, kIreduce, comm, req);
}

EXPORT int MPI_Ibcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm,
		      MPI_Request *req)
{
	Call k;
	if (!prep_bcast(kIbcast, buf, count, dt, root, comm, &k))
		return PMPI_Ibcast(buf, count, dt, root, comm, req);
	return start(k, kIbcast, comm, req);
}

EXPORT int MPI_Iallgather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf,
			  int rcount, MPI_Datatype rtype, MPI_Comm comm, MPI_Request *req)
{
	Call k;
	if (!prep_allgather(kIallgather, sendbuf, scount, stype, recvbuf, rcount, rtype, comm, &k))
		return PMPI_Iallgather(sendbuf, scount, stype, recvbuf, rcount, rtype, comm, req);
	return start(k, kIallgather, comm, req);
}

EXPORT int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int rcount,
				     MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
	Call k;
	if (!prep_reduce_scatter(kIreduceScatter, sendbuf, recvbuf, rcount, dt, op, comm, &k))
		return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, rcount, dt, op, comm, req);
	return start(k, kIreduceScatter, comm, req);
}

EXPORT int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req)
{
	Call k;
	if (!prep_barrier(kIbarrier, comm, &k))
		return PMPI_Ibarrier(comm, req);
	return start(k, kIbarrier, comm, req);
}

EXPORT int MPI_Init(int *argc, char ***argv)
{
	int rc = PMPI_Init(argc, argv);
	if (rc == MPI_SUCCESS)
		job_world();
	return rc;
}

EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
	int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		job_world();
	return rc;
}

EXPORT int MPI_Wait(MPI_Request *req, MPI_Status *st)
{
	settle_all(1, req, true);
	return PMPI_Wait(req, st);
}

EXPORT int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st)
{
	settle_all(1, req, false);
	return PMPI_Test(req, flag, st);
}

EXPORT int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[])
{
	settle_all(n, reqs, true);
	return PMPI_Waitall(n, reqs, sts);
}

EXPORT int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[])
{
	settle_all(n, reqs, false);
	return PMPI_Testall(n, reqs, flag, sts);
}

// Waiting for any of a set that holds ours: test ours and MPI's in turn,
// since blocking in either could miss the other's completion.
EXPORT int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st)
{
	if (!settle_all(n, reqs, false))
		return PMPI_Waitany(n, reqs, index, st);
	for (;;) {
		int flag = 0, rc = PMPI_Testany(n, reqs, index, &flag, st);
		if (rc != MPI_SUCCESS || flag)
			return rc;
		settle_all(n, reqs, false);
		sched_yield();
	}
}

EXPORT int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st)
{
	settle_all(n, reqs, false);
	return PMPI_Testany(n, reqs, index, flag, st);
}

EXPORT int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[])
{
	if (!settle_all(n, reqs, false))
		return PMPI_Waitsome(n, reqs, outcount, idx, sts);
	for (;;) {
		int rc = PMPI_Testsome(n, reqs, outcount, idx, sts);
		if (rc != MPI_SUCCESS || *outcount != 0)
			return rc; // MPI_UNDEFINED (nothing active) included
		settle_all(n, reqs, false);
		sched_yield();
	}
}

EXPORT int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[])
{
	settle_all(n, reqs, false);
	return PMPI_Testsome(n, reqs, outcount, idx, sts);
}

EXPORT int MPI_Request_free(MPI_Request *req)
{
	auto it = g_pending.find(*req);
	if (it != g_pending.end()) {
		// MPI lets a program drop an active request; the device still
		// writes the result, and we still owe the op's cleanup.
		g_orphans.push_back(it->second.op);
		g_pending.erase(it);
		PMPI_Grequest_complete(*req);
	}
	return PMPI_Request_free(req);
}

EXPORT int MPI_Comm_free(MPI_Comm *comm)
{
	// Every member done with the job before its QP goes (MPI_Comm_free is
	// collective, so every member comes here).
	if (comm && *comm != MPI_COMM_NULL && comm_free_hook(*comm))
		PMPI_Barrier(*comm);
	return PMPI_Comm_free(comm);
}

EXPORT int MPI_Finalize(void)
{
	for (auto &[r, p] : g_pending)
		job_wait(p.op); // never waited for: still the device's to finish
	for (Op *op : g_orphans)
		job_wait(op);
	progress_orphans();
	// On every rank, even one that never offloaded: it waits at a barrier.
	lib_init();
	jobs_finalize();
	return PMPI_Finalize();
}
