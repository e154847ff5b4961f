// mpi_coll_check - every collective libibv_coll_mpi intercepts, called
// through MPI_* (the drop-in, when preloaded) and again through PMPI_* (the
// MPI library itself, the reference) on the same inputs, with random
// sizes, types, operations, roots, in-place and sub-communicators; results
// must be bit-identical (floats are given values whose sums and products
// are exact in any order, and random reals are checked within a bound).
//
//   mpi_coll_check [--iters N] [--seed S] [--max-count C] [--unsupported | --one-rank |
//                   --liveness]
//
// --one-rank: only rank 0 calls a collective (on MPI_COMM_SELF), then
// every rank finalizes: MPI_Finalize must not wait for ranks that never
// touched the drop-in (it hung once).
// --liveness: what MPI programs may do that once hung or failed the
// drop-in (see liveness() below).
// --unsupported runs what the drop-in must leave to MPI (derived types,
// MPI_Op_create, MPI_LONG_DOUBLE_INT, an intercommunicator) and checks
// those results against PMPI and hand-computed values too.
// MPI_MAXLOC/MPI_MINLOC on the pair types and the logical operations are
// among the random collectives; what MPI leaves open for them (NaN,
// signed zeros) is checked against the device's documented rule.
// Exit 0 when every rank found every result right, else 1.
#include <mpi.h>

#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int g_rank, g_size;
long g_wrong;

struct Type {
	MPI_Datatype t;
	const char *name;
	size_t size; // the extent: a pair's C struct, padding included
	bool is_float, is_signed;
	size_t pair_value = 0; // a value-index pair: the value's bytes (the index follows,
			       // int-aligned)
	bool pair_float = false;
};
const Type kTypes[] = {
	{MPI_INT8_T, "int8", 1, false, true},
	{MPI_UINT8_T, "uint8", 1, false, false},
	{MPI_INT16_T, "int16", 2, false, true},
	{MPI_UNSIGNED_SHORT, "ushort", 2, false, false},
	{MPI_INT, "int", 4, false, true},
	{MPI_UINT32_T, "uint32", 4, false, false},
	{MPI_LONG, "long", 8, false, true},
	{MPI_UINT64_T, "uint64", 8, false, false},
	{MPI_FLOAT, "float", 4, true, true},
	{MPI_DOUBLE, "double", 8, true, true},
	{MPI_FLOAT_INT, "float_int", 8, false, true, 4, true},
	{MPI_DOUBLE_INT, "double_int", 16, false, true, 8, true},
	{MPI_LONG_INT, "long_int", 16, false, true, 8, false},
	{MPI_2INT, "2int", 8, false, true, 4, false},
	{MPI_SHORT_INT, "short_int", 8, false, true, 2, false},
};
struct OpT {
	MPI_Op op;
	const char *name;
	bool bitwise; // integers only (the bitwise and logical ones)
};
// The first four on every type but the pairs, all but the last two on the
// integers, the last two (MAXLOC, MINLOC) on the pairs only.
const OpT kOps[] = {
	{MPI_SUM, "sum", false},  {MPI_PROD, "prod", false},	 {MPI_MIN, "min", false},
	{MPI_MAX, "max", false},  {MPI_BAND, "band", true},	 {MPI_BOR, "bor", true},
	{MPI_BXOR, "bxor", true}, {MPI_LAND, "land", true},	 {MPI_LOR, "lor", true},
	{MPI_LXOR, "lxor", true}, {MPI_MAXLOC, "maxloc", false}, {MPI_MINLOC, "minloc", false}};
constexpr size_t kNumOps = std::size(kOps) - 2;

void fail(const char *what, const std::string &ctx, size_t at)
{
	if (g_wrong++ < 5)
		fprintf(stderr, "rank %d: %s: %s wrong at byte %zu\n", g_rank, ctx.c_str(), what,
			at);
}

// Element e of this rank's input: exact under op in any order for floats
// (small integers for sums, powers of two for products).
void fill(void *buf, size_t n, const Type &t, const OpT &o, std::mt19937_64 &rng, bool exact)
{
	for (size_t e = 0; e < n; e++) {
		uint64_t r = rng();
		char *p = static_cast<char *>(buf) + e * t.size;
		if (t.pair_value) {
			// Values from five (so ranks tie), indices from seven (so
			// the lower index decides, not the lower rank); no -0.0
			// and no NaN, where MPI's answer depends on the order.
			const int v = int(r % 5) - 2;
			const int32_t k = int32_t((r >> 8) % 7);
			memset(p, 0, t.size);
			if (t.pair_float && t.pair_value == 4) {
				float f = float(v);
				memcpy(p, &f, 4);
			} else if (t.pair_float) {
				double d = v;
				memcpy(p, &d, 8);
			} else {
				int64_t i = v;
				memcpy(p, &i, t.pair_value); // little-endian: the low bytes
			}
			memcpy(p + std::max<size_t>(t.pair_value, 4), &k, 4);
			continue;
		}
		if (o.op == MPI_LAND || o.op == MPI_LOR || o.op == MPI_LXOR)
			r = r % 3 ? r : 0; // falsehood too
		if (t.is_float) {
			double v = o.op == MPI_PROD ? ((r & 3) == 0   ? 0.5
						       : (r & 3) == 1 ? 2.0
						       : (r & 3) == 2 ? -1.0
								      : 1.0)
						    : double(int64_t(r % 2001) - 1000);
			if (!exact)
				v = double(r % 1000000) / 997.0 - 500.0;
			if (t.size == 4) {
				float f = float(v);
				memcpy(p, &f, 4);
			} else
				memcpy(p, &v, 8);
		} else {
			if (o.op == MPI_PROD)
				r = (r % 5) - 2; // wraps like two's complement either way
			memcpy(p, &r, t.size);
		}
	}
}

// Compare got with want: bytes, or within a relative bound for inexact floats.
void compare(const void *got, const void *want, size_t n, const Type &t, bool exact,
	     const std::string &ctx)
{
	const char *g = static_cast<const char *>(got), *w = static_cast<const char *>(want);
	if (t.pair_value) { // the value and the index; MPI leaves the padding undefined
		const size_t ki = std::max<size_t>(t.pair_value, 4);
		for (size_t e = 0; e < n; e++) {
			const char *x = g + e * t.size, *y = w + e * t.size;
			if (memcmp(x, y, t.pair_value))
				return fail("result (the value of a pair)", ctx, e * t.size);
			if (memcmp(x + ki, y + ki, 4))
				return fail("result (the index of a pair)", ctx, e * t.size + ki);
		}
		return;
	}
	if (exact || !t.is_float) {
		for (size_t i = 0; i < n * t.size; i++)
			if (g[i] != w[i]) {
				char what[64];
				snprintf(what, sizeof(what), "result (byte 0x%02x, want 0x%02x)",
					 unsigned(uint8_t(g[i])), unsigned(uint8_t(w[i])));
				return fail(what, ctx, i);
			}
		return;
	}
	for (size_t e = 0; e < n; e++) {
		double a, b;
		if (t.size == 4) {
			float x, y;
			memcpy(&x, g + e * 4, 4);
			memcpy(&y, w + e * 4, 4);
			a = x, b = y;
		} else {
			memcpy(&a, g + e * 8, 8);
			memcpy(&b, w + e * 8, 8);
		}
		// Sums of g_size terms of magnitude <= 500 in another order.
		double tol = (t.size == 4 ? 1e-6 : 1e-14) * 500.0 * g_size * 4;
		if (!(std::fabs(a - b) <= tol))
			return fail("result (beyond the fold-order bound)", ctx, e * t.size);
	}
}

constexpr size_t kGuard = 64;

// One random collective on comm; seq is the same on every rank of comm.
void one(MPI_Comm comm, std::mt19937_64 &seq, std::mt19937_64 &mine, size_t max_count, int iter)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	const int coll = int(seq() % 9);
	const Type &t = kTypes[seq() % std::size(kTypes)];
	const OpT *o = &kOps[seq() % kNumOps];
	if (t.is_float && o->bitwise)
		o = &kOps[seq() % 4];
	if (t.pair_value)
		o = &kOps[kNumOps + seq() % 2];
	// Mostly small (the drop-in's copy path), sometimes large (registration).
	size_t count = seq() % 4 ? 1 + seq() % 300 : 1 + seq() % max_count;
	const int root = int(seq() % uint64_t(size));
	const bool in_place = seq() % 3 == 0;
	const bool exact = !(t.is_float && o->op == MPI_SUM && seq() % 4 == 0);
	const int n = int(count);
	char ctxbuf[160];
	snprintf(ctxbuf, sizeof(ctxbuf), "iter %d coll %d %s %s count %zu root %d%s (comm of %d)",
		 iter, coll, t.name, o->name, count, root, in_place ? " in place" : "", size);
	const std::string ctx = ctxbuf;
	const size_t sbytes = count * t.size, abytes = sbytes * size_t(size);
	std::vector<char> in(abytes), a(abytes + kGuard, 0x5a), b(abytes + kGuard, 0x5a);
	fill(in.data(), count * size_t(size), t, *o, mine, exact);
	switch (coll) {
	case 0: // allreduce
		if (in_place) {
			memcpy(a.data(), in.data(), sbytes);
			memcpy(b.data(), in.data(), sbytes);
			MPI_Allreduce(MPI_IN_PLACE, a.data(), n, t.t, o->op, comm);
			PMPI_Allreduce(MPI_IN_PLACE, b.data(), n, t.t, o->op, comm);
		} else {
			MPI_Allreduce(in.data(), a.data(), n, t.t, o->op, comm);
			PMPI_Allreduce(in.data(), b.data(), n, t.t, o->op, comm);
		}
		compare(a.data(), b.data(), count, t, exact, ctx);
		break;
	case 1: // reduce: only the root's result is defined; others' stay untouched
		if (in_place && rank == root) {
			memcpy(a.data(), in.data(), sbytes);
			memcpy(b.data(), in.data(), sbytes);
			MPI_Reduce(MPI_IN_PLACE, a.data(), n, t.t, o->op, root, comm);
			PMPI_Reduce(MPI_IN_PLACE, b.data(), n, t.t, o->op, root, comm);
		} else {
			MPI_Reduce(in.data(), a.data(), n, t.t, o->op, root, comm);
			PMPI_Reduce(in.data(), b.data(), n, t.t, o->op, root, comm);
		}
		compare(a.data(), b.data(), count, t, exact, ctx); // non-roots: both untouched
		break;
	case 2: // bcast
		memcpy(a.data(), in.data(), sbytes);
		memcpy(b.data(), in.data(), sbytes);
		MPI_Bcast(a.data(), n, t.t, root, comm);
		PMPI_Bcast(b.data(), n, t.t, root, comm);
		compare(a.data(), b.data(), count, t, true, ctx);
		break;
	case 3: // allgather
		if (in_place) {
			memcpy(a.data() + size_t(rank) * sbytes, in.data(), sbytes);
			memcpy(b.data() + size_t(rank) * sbytes, in.data(), sbytes);
			MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a.data(), n, t.t, comm);
			PMPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.data(), n, t.t, comm);
		} else {
			MPI_Allgather(in.data(), n, t.t, a.data(), n, t.t, comm);
			PMPI_Allgather(in.data(), n, t.t, b.data(), n, t.t, comm);
		}
		compare(a.data(), b.data(), count * size_t(size), t, true, ctx);
		break;
	case 4: // reduce_scatter_block
		if (in_place) {
			memcpy(a.data(), in.data(), abytes);
			memcpy(b.data(), in.data(), abytes);
			MPI_Reduce_scatter_block(MPI_IN_PLACE, a.data(), n, t.t, o->op, comm);
			PMPI_Reduce_scatter_block(MPI_IN_PLACE, b.data(), n, t.t, o->op, comm);
		} else {
			MPI_Reduce_scatter_block(in.data(), a.data(), n, t.t, o->op, comm);
			PMPI_Reduce_scatter_block(in.data(), b.data(), n, t.t, o->op, comm);
		}
		compare(a.data(), b.data(), count, t, exact, ctx);
		break;
	case 5: { // iallreduce, waited for together with point-to-point requests
		std::vector<char> a2(sbytes + kGuard, 0x5a), b2(sbytes + kGuard, 0x5a), pr(8),
			ps(8, char(rank));
		MPI_Request r[4];
		MPI_Iallreduce(in.data(), a.data(), n, t.t, o->op, comm, &r[0]);
		MPI_Iallreduce(in.data() + sbytes * size_t(size > 1), a2.data(), n, t.t, o->op,
			       comm, &r[1]);
		MPI_Irecv(pr.data(), 8, MPI_BYTE, (rank + size - 1) % size, 7, comm, &r[2]);
		MPI_Isend(ps.data(), 8, MPI_BYTE, (rank + 1) % size, 7, comm, &r[3]);
		switch (seq() % 4) {
		case 0: MPI_Waitall(4, r, MPI_STATUSES_IGNORE); break;
		case 1:
			for (MPI_Request &x : r)
				MPI_Wait(&x, MPI_STATUS_IGNORE);
			break;
		case 2: {
			int done = 0;
			while (!done)
				MPI_Testall(4, r, &done, MPI_STATUSES_IGNORE);
			break;
		}
		default:
			for (int k = 0, idx; k < 4; k++)
				MPI_Waitany(4, r, &idx, MPI_STATUS_IGNORE);
		}
		PMPI_Allreduce(in.data(), b.data(), n, t.t, o->op, comm);
		PMPI_Allreduce(in.data() + sbytes * size_t(size > 1), b2.data(), n, t.t, o->op,
			       comm);
		compare(a.data(), b.data(), count, t, exact, ctx);
		compare(a2.data(), b2.data(), count + kGuard / t.size, t, exact, ctx + " (second)");
		if (pr[0] != char((rank + size - 1) % size))
			fail("point-to-point message beside iallreduce", ctx, 0);
		break;
	}
	case 6: { // nonblocking ones outstanding together, a blocking one and point-to-point between
		const char *kNames[] = {"ibcast",     "ireduce",
					"iallgather", "ireduce_scatter_block",
					"ibarrier",   "iallreduce"};
		int kind[3];
		std::vector<char> got[3], want[3];
		size_t elems[3];
		MPI_Request r[5];
		std::vector<char> pr(8), ps(8, char(rank));
		for (int i = 0; i < 3; i++) {
			kind[i] = int(seq() % 6);
			const bool whole = kind[i] == 2; // allgather: a share per rank
			elems[i] = kind[i] == 4 ? 0 : whole ? count * size_t(size) : count;
			got[i].assign(elems[i] * t.size + kGuard, 0x5a);
			want[i] = got[i];
			void *g = got[i].data();
			switch (kind[i]) {
			case 0:
				memcpy(g, in.data(), sbytes);
				MPI_Ibcast(g, n, t.t, root, comm, &r[i]);
				break;
			case 1: MPI_Ireduce(in.data(), g, n, t.t, o->op, root, comm, &r[i]); break;
			case 2: MPI_Iallgather(in.data(), n, t.t, g, n, t.t, comm, &r[i]); break;
			case 3:
				MPI_Ireduce_scatter_block(in.data(), g, n, t.t, o->op, comm, &r[i]);
				break;
			case 4: MPI_Ibarrier(comm, &r[i]); break;
			default: MPI_Iallreduce(in.data(), g, n, t.t, o->op, comm, &r[i]);
			}
			if (i == 1) { // a blocking collective while two are outstanding
				MPI_Allreduce(in.data(), a.data(), n, t.t, o->op, comm);
				PMPI_Allreduce(in.data(), b.data(), n, t.t, o->op, comm);
				compare(a.data(), b.data(), count, t, exact,
					ctx + " (blocking between)");
			}
		}
		MPI_Irecv(pr.data(), 8, MPI_BYTE, (rank + size - 1) % size, 8, comm, &r[3]);
		MPI_Isend(ps.data(), 8, MPI_BYTE, (rank + 1) % size, 8, comm, &r[4]);
		switch (seq() % 4) {
		case 0: MPI_Waitall(5, r, MPI_STATUSES_IGNORE); break;
		case 1:
			for (int i = 4; i >= 0; i--)
				MPI_Wait(&r[i], MPI_STATUS_IGNORE);
			break;
		case 2: {
			int done = 0;
			while (!done)
				MPI_Testall(5, r, &done, MPI_STATUSES_IGNORE);
			break;
		}
		default:
			for (int k = 0, idx; k < 5; k++)
				MPI_Waitany(5, r, &idx, MPI_STATUS_IGNORE);
		}
		for (int i = 0; i < 3; i++) {
			void *w = want[i].data();
			switch (kind[i]) {
			case 0:
				memcpy(w, in.data(), sbytes);
				PMPI_Bcast(w, n, t.t, root, comm);
				break;
			case 1: PMPI_Reduce(in.data(), w, n, t.t, o->op, root, comm); break;
			case 2: PMPI_Allgather(in.data(), n, t.t, w, n, t.t, comm); break;
			case 3: PMPI_Reduce_scatter_block(in.data(), w, n, t.t, o->op, comm); break;
			case 4: break;
			default: PMPI_Allreduce(in.data(), w, n, t.t, o->op, comm);
			}
			const std::string c = ctx + " (" + kNames[kind[i]] + " " +
					      std::to_string(i) + ")";
			const bool moved = kind[i] == 0 || kind[i] == 2;
			compare(got[i].data(), want[i].data(), elems[i], t, exact || moved, c);
			if (memcmp(got[i].data() + elems[i] * t.size,
				   want[i].data() + elems[i] * t.size, kGuard))
				fail("guard bytes", c, elems[i] * t.size);
		}
		if (pr[0] != char((rank + size - 1) % size))
			fail("point-to-point message beside nonblocking collectives", ctx, 0);
		break;
	}
	case 7: { // allgatherv and reduce_scatter with counts per rank (some 0), gaps between shares
		std::vector<int> counts(static_cast<size_t>(size)),
			displs(static_cast<size_t>(size));
		int total = 0, span = 0;
		for (int i = 0; i < size; i++) {
			counts[size_t(i)] = seq() % 5 ? int(seq() % (count + 1)) : n;
			displs[size_t(i)] = span + int(seq() % 3);
			total += counts[size_t(i)];
			span = displs[size_t(i)] + counts[size_t(i)];
		}
		const bool packed = seq() % 2; // equal counts, no gaps: the plain allgather
		if (packed)
			for (int i = 0; i < size; i++)
				counts[size_t(i)] = n, displs[size_t(i)] = i * n, span = size * n,
				total = size * n;
		const size_t vbytes = size_t(span) * t.size;
		std::vector<char> va(vbytes + kGuard, 0x5a), vb(vbytes + kGuard, 0x5a);
		const int mine = counts[size_t(rank)];
		if (in_place) {
			memcpy(va.data() + size_t(displs[size_t(rank)]) * t.size, in.data(),
			       size_t(mine) * t.size);
			memcpy(vb.data() + size_t(displs[size_t(rank)]) * t.size, in.data(),
			       size_t(mine) * t.size);
			MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, va.data(), counts.data(),
				       displs.data(), t.t, comm);
			PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, vb.data(),
					counts.data(), displs.data(), t.t, comm);
		} else {
			MPI_Allgatherv(in.data(), mine, t.t, va.data(), counts.data(),
				       displs.data(), t.t, comm);
			PMPI_Allgatherv(in.data(), mine, t.t, vb.data(), counts.data(),
					displs.data(), t.t, comm);
		}
		compare(va.data(), vb.data(), size_t(span) + kGuard / t.size, t, true,
			ctx + " (allgatherv)");
		// reduce_scatter: the input holds total elements (in has count * size).
		if (in_place) {
			std::vector<char> ra(size_t(total) * t.size + kGuard, 0x5a), rb = ra;
			memcpy(ra.data(), in.data(), size_t(total) * t.size);
			memcpy(rb.data(), in.data(), size_t(total) * t.size);
			MPI_Reduce_scatter(MPI_IN_PLACE, ra.data(), counts.data(), t.t, o->op,
					   comm);
			PMPI_Reduce_scatter(MPI_IN_PLACE, rb.data(), counts.data(), t.t, o->op,
					    comm);
			compare(ra.data(), rb.data(), size_t(mine), t, exact,
				ctx + " (reduce_scatter)");
		} else {
			MPI_Reduce_scatter(in.data(), a.data(), counts.data(), t.t, o->op, comm);
			PMPI_Reduce_scatter(in.data(), b.data(), counts.data(), t.t, o->op, comm);
			compare(a.data(), b.data(), size_t(mine) + kGuard / t.size, t, exact,
				ctx + " (reduce_scatter)");
		}
		break;
	}
	default: { // barrier: nobody leaves before the last arrives
		// Entry and exit on one clock (the ranks of these tests share a
		// machine): every exit must come after every entry.
		auto now = [] {
			timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
		};
		if (rank == root)
			usleep(5000);
		double io[2], all_in = 0, all_out = 0;
		io[0] = now();
		MPI_Barrier(comm);
		io[1] = now();
		PMPI_Allreduce(&io[0], &all_in, 1, MPI_DOUBLE, MPI_MAX, comm);
		PMPI_Allreduce(&io[1], &all_out, 1, MPI_DOUBLE, MPI_MIN, comm);
		if (all_out < all_in)
			fail("barrier (a rank left before the last arrived)", ctx, 0);
		break;
	}
	}
	// Nothing beyond the result written (the guards were equal before).
	if (memcmp(a.data() + abytes, b.data() + abytes, kGuard))
		fail("guard bytes", ctx, abytes);
}

// What the drop-in must leave to MPI, checked against PMPI and closed forms.
void unsupported(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	std::vector<int> in(30), a(30), b(30);
	for (int i = 0; i < 30; i++)
		in[size_t(i)] = rank * 100 + i;
	// A derived type: three ints.
	MPI_Datatype three;
	MPI_Type_contiguous(3, MPI_INT, &three);
	MPI_Type_commit(&three);
	// (MPI's predefined operations take predefined types only: a user
	// operation that sums three ints at a time.)
	MPI_Op sum3;
	MPI_Op_create(
		[](void *i, void *io, int *len, MPI_Datatype *) {
			for (int k = 0; k < 3 * *len; k++)
				static_cast<int *>(io)[k] += static_cast<int *>(i)[k];
		},
		1, &sum3);
	MPI_Allreduce(in.data(), a.data(), 10, three, sum3, comm);
	MPI_Op_free(&sum3);
	for (int i = 0; i < 30; i++)
		if (a[size_t(i)] != 100 * size * (size - 1) / 2 + size * i)
			fail("allreduce of a derived type", "unsupported", size_t(i));
	std::vector<int> ga(30 * size_t(size)), gb(30 * size_t(size));
	MPI_Allgather(in.data(), 10, three, ga.data(), 10, three, comm);
	PMPI_Allgather(in.data(), 10, three, gb.data(), 10, three, comm);
	if (ga != gb)
		fail("allgather of a derived type", "unsupported", 0);
	a = in;
	MPI_Bcast(a.data(), 10, three, size - 1, comm);
	for (int i = 0; i < 30; i++)
		if (a[size_t(i)] != (size - 1) * 100 + i)
			fail("bcast of a derived type", "unsupported", size_t(i));
	MPI_Type_free(&three);
	// A user operation: the maximum of absolute values.
	MPI_Op absmax;
	MPI_Op_create(
		[](void *i, void *io, int *len, MPI_Datatype *) {
			for (int k = 0; k < *len; k++) {
				int x = std::abs(static_cast<int *>(i)[k]),
				    &y = static_cast<int *>(io)[k];
				y = std::max(x, std::abs(y));
			}
		},
		1, &absmax);
	for (int i = 0; i < 30; i++)
		in[size_t(i)] = (rank % 2 ? -1 : 1) * (rank * 7 + i);
	MPI_Allreduce(in.data(), a.data(), 30, MPI_INT, absmax, comm);
	for (int i = 0; i < 30; i++)
		if (a[size_t(i)] != (size - 1) * 7 + i)
			fail("allreduce with MPI_Op_create", "unsupported", size_t(i));
	MPI_Reduce(in.data(), a.data(), 30, MPI_INT, absmax, 0, comm);
	if (rank == 0 && a[0] != (size - 1) * 7)
		fail("reduce with MPI_Op_create", "unsupported", 0);
	MPI_Op_free(&absmax);
	// A predefined pair type the device lacks (long double).
	struct {
		long double v;
		int at;
	} mi = {(long double)(rank * 3 % 5), rank}, mo{}, mr{};
	MPI_Allreduce(&mi, &mo, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, comm);
	PMPI_Allreduce(&mi, &mr, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, comm);
	if (mo.v != mr.v || mo.at != mr.at)
		fail("allreduce of MPI_LONG_DOUBLE_INT with MPI_MAXLOC", "unsupported", 0);
	// An intercommunicator between the even and the odd ranks.
	if (size >= 2) {
		MPI_Comm half, inter;
		MPI_Comm_split(comm, rank % 2, rank, &half);
		MPI_Intercomm_create(half, 0, comm, rank % 2 ? 0 : 1, 99, &inter);
		int x = rank + 1, sum = 0, remote;
		MPI_Comm_remote_size(inter, &remote);
		MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, inter);
		int want = 0; // the other group's sum
		for (int r = 0; r < size; r++)
			if (r % 2 != rank % 2)
				want += r + 1;
		if (sum != want)
			fail("allreduce on an intercommunicator", "unsupported", 0);
		MPI_Barrier(inter);
		MPI_Comm_free(&inter);
		MPI_Comm_free(&half);
	}
}

// What MPI leaves open for MAXLOC and MINLOC, as the device defines it
// (ibv_post_coll_send(3)): a NaN beats every number, NaNs tie (the lower
// index wins), -0.0 is below +0.0; hand-computed per rank count.
void loc_rules(MPI_Comm comm)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	if (size < 3)
		return;
	struct DI {
		double v;
		int k;
	};
	const double nan = std::nan("");
	// 0: a NaN at the last two ranks (indices 2*size-r), the others' values
	// r: both MAXLOC and MINLOC give the NaN with the lower index (size+1).
	// 1: -0.0 at rank 0 and +0.0 elsewhere: MAXLOC +0.0 (index 1), MINLOC
	// -0.0 (index 0).  2: ties at 5.0 with indices 9-r: the last rank's.
	DI in[3] = {{rank >= size - 2 ? nan : double(rank), 2 * size - rank},
		    {rank ? 0.0 : -0.0, rank},
		    {5.0, 9 - rank}};
	for (MPI_Op op : {MPI_MAXLOC, MPI_MINLOC}) {
		const bool max = op == MPI_MAXLOC;
		DI out[3] = {};
		MPI_Allreduce(in, out, 3, MPI_DOUBLE_INT, op, comm);
		const char *ctx = max ? "maxloc rules" : "minloc rules";
		if (!std::isnan(out[0].v) || out[0].k != size + 1)
			fail("NaN (a NaN wins; of two, the lower index)", ctx, 0);
		if (out[1].v != 0.0 || std::signbit(out[1].v) == max || out[1].k != (max ? 1 : 0))
			fail("signed zero (-0.0 below +0.0)", ctx, 16);
		if (out[2].v != 5.0 || out[2].k != 9 - (size - 1))
			fail("tie (the lower index)", ctx, 32);
	}
}

// What a program may do that MPI itself survives, each a hang, a failed
// collective or a lost result once (--liveness):
//  - nonblocking collectives first on fresh communicators, started in
//    different orders across communicators by different ranks (each
//    communicator sees one order): setting a job up must not block there;
//  - more requests outstanding on one communicator than it has bounce
//    slots and than its send queue holds, small and large;
//  - a rendezvous-sized point-to-point message whose other side waits in
//    an offloaded collective (ours must run MPI's progress while it waits);
//  - requests still pending when their communicator is freed;
//  - a rank that comes to a collective longer after the others than the
//    device's own timeout (set to 1 s here);
//  - more communicators, each with a large request in flight, than the
//    NIC's Seg units hold at once (the 17th of 1 MiB failed);
//  - registered buffers freed and their addresses reused.
void liveness()
{
	const int rank = g_rank, size = g_size;
	const int sum_ranks = size * (size - 1) / 2;
	MPI_Comm a, b, c, d;
	MPI_Comm_dup(MPI_COMM_WORLD, &a);
	MPI_Comm_dup(MPI_COMM_WORLD, &b);
	MPI_Comm_dup(MPI_COMM_WORLD, &c);
	MPI_Comm_dup(MPI_COMM_WORLD, &d);
	{
		int x = rank + 1, y = 0, x2 = 2 * rank, y2 = 0;
		MPI_Request r[2];
		if (rank % 2 == 0) {
			MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, a, &r[0]);
			MPI_Ibarrier(c, &r[1]);
			MPI_Allreduce(&x2, &y2, 1, MPI_INT, MPI_SUM, b);
			MPI_Barrier(d);
		} else { // the blocking ones in the same order: they may synchronize
			MPI_Allreduce(&x2, &y2, 1, MPI_INT, MPI_SUM, b);
			MPI_Barrier(d);
			MPI_Ibarrier(c, &r[1]);
			MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, a, &r[0]);
		}
		MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
		if (y != sum_ranks + size || y2 != 2 * sum_ranks)
			fail("collectives first on fresh communicators, in two orders", "liveness",
			     0);
	}
	// Many outstanding on one communicator: a blocking call sets its job
	// up first (a nonblocking one would go to MPI).
	MPI_Barrier(a);
	for (int len : {1, 25000}) {
		const int n = len == 1 ? 300 : 40;
		std::vector<int> in(size_t(n) * size_t(len)), out(in.size(), -1);
		std::vector<MPI_Request> r(static_cast<size_t>(n));
		for (size_t i = 0; i < in.size(); i++)
			in[i] = rank + int(i % 1000);
		for (int i = 0; i < n; i++)
			MPI_Iallreduce(&in[size_t(i) * size_t(len)], &out[size_t(i) * size_t(len)],
				       len, MPI_INT, MPI_SUM, a, &r[size_t(i)]);
		MPI_Waitall(n, r.data(), MPI_STATUSES_IGNORE);
		for (size_t i = 0; i < out.size(); i++)
			if (out[i] != sum_ranks + size * int(i % 1000)) {
				fail(len == 1 ? "300 small requests outstanding"
					      : "40 large requests outstanding",
				     "liveness", i * sizeof(int));
				break;
			}
	}
	// A rendezvous message beside an offloaded collective, both ways.
	const int big = 1 << 18; // 1 MiB of ints
	std::vector<int> msg(big, rank == 1 ? 7 : -1);
	for (int mode = 0; mode < 2 && size >= 2; mode++) {
		int x = rank, y = -1;
		MPI_Request r[2];
		if (mode == 0 && rank == 1) { // the sender then waits in the collective
			MPI_Isend(msg.data(), big, MPI_INT, 0, 5, a, &r[0]);
			MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, a);
			MPI_Wait(&r[0], MPI_STATUS_IGNORE);
		} else if (mode == 0) {
			if (rank == 0)
				MPI_Recv(msg.data(), big, MPI_INT, 1, 5, a, MPI_STATUS_IGNORE);
			MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, a);
		} else if (rank == 0) { // the receiver waits for both at once
			MPI_Irecv(msg.data(), big, MPI_INT, 1, 6, a, &r[0]);
			MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, a, &r[1]);
			MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
		} else {
			if (rank == 1)
				MPI_Send(msg.data(), big, MPI_INT, 0, 6, a);
			MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, a, &r[1]);
			MPI_Wait(&r[1], MPI_STATUS_IGNORE);
		}
		if (y != sum_ranks || (rank == 0 && (msg[0] != 7 || msg[big - 1] != 7)))
			fail(mode ? "a receive and a collective waited for together"
				  : "a rendezvous send beside a blocking collective",
			     "liveness", 0);
		if (rank == 0)
			msg.assign(size_t(big), -1);
	}
	// Requests pending when their communicator is freed complete normally
	// (MPI_Comm_free): some the device finished before (their results sat
	// in the job's bounce buffers), some not yet.
	for (int early = 0; early < 2; early++) {
		MPI_Comm e;
		MPI_Comm_dup(MPI_COMM_WORLD, &e);
		MPI_Barrier(e); // its job
		int x[4], y[4];
		MPI_Request r[4];
		for (int i = 0; i < 4; i++) {
			x[i] = rank + i;
			y[i] = -1;
			MPI_Iallreduce(&x[i], &y[i], 1, MPI_INT, MPI_SUM, e, &r[i]);
		}
		if (early)
			MPI_Wait(&r[3], MPI_STATUS_IGNORE); // and so the three before it
		MPI_Comm_free(&e);
		std::vector<char> scribble(1 << 20, 0x55); // what was freed, reused
		const int rc = MPI_Waitall(early ? 3 : 4, r, MPI_STATUSES_IGNORE);
		for (int i = 0; i < 4; i++)
			if (rc != MPI_SUCCESS || y[i] != sum_ranks + size * i)
				fail(early ? "requests finished by the device, then their communicator "
					     "freed"
					   : "requests pending when their communicator was freed",
				     "liveness", size_t(i) * sizeof(int));
	}
	// Late by 2.5 times the device's timeout: blocking and nonblocking, a
	// few bytes (the exchange between members) and 1 MiB (round the ring
	// or through the switch, the others' blocks waiting at the late one).
	for (int nb = 0; nb < 2; nb++) {
		const size_t n = nb ? 1 : size_t(big);
		std::vector<int> x(n, rank), y(n, -1);
		if (rank == size - 1)
			usleep(2500 * 1000);
		if (nb) {
			MPI_Request r;
			MPI_Iallreduce(x.data(), y.data(), int(n), MPI_INT, MPI_SUM, b, &r);
			MPI_Wait(&r, MPI_STATUS_IGNORE);
		} else {
			MPI_Allreduce(x.data(), y.data(), int(n), MPI_INT, MPI_SUM, b);
		}
		for (size_t i = 0; i < n; i++)
			if (y[i] != sum_ranks) {
				fail("a rank 2.5 s late", "liveness", i * sizeof(int));
				break;
			}
	}
	// Buffers above the bounce size, which the library registers and
	// keeps registered, freed after each call and their addresses given
	// to new allocations (mmap()ed: new pages, other contents).
	for (int round = 0; round < 4; round++) {
		const size_t n = 100000 + size_t(round % 2);
		int *x = static_cast<int *>(malloc(n * sizeof(int)));
		int *y = static_cast<int *>(malloc(n * sizeof(int)));
		for (size_t i = 0; i < n; i++) {
			x[i] = rank * (round + 1) + int(i % 333);
			y[i] = -1;
		}
		MPI_Allreduce(x, y, int(n), MPI_INT, MPI_SUM, b);
		for (size_t i = 0; i < n; i++)
			if (y[i] != (round + 1) * sum_ranks + size * int(i % 333)) {
				fail("buffers freed and their addresses reused", "liveness",
				     i * sizeof(int));
				break;
			}
		free(x);
		free(y);
	}
	// 20 communicators, each a 1 MiB request in flight, twice.
	{
		constexpr int kComms = 20;
		MPI_Comm m[kComms];
		std::vector<int> in(big), out(size_t(kComms) * size_t(big));
		for (int i = 0; i < big; i++)
			in[size_t(i)] = rank + i % 977;
		for (MPI_Comm &k : m) {
			MPI_Comm_dup(MPI_COMM_WORLD, &k);
			MPI_Barrier(k); // its job, when it can have one
		}
		for (int round = 0; round < 2; round++) {
			MPI_Request r[kComms];
			out.assign(out.size(), -1);
			for (int k = 0; k < kComms; k++)
				MPI_Iallreduce(in.data(), &out[size_t(k) * size_t(big)], big,
					       MPI_INT, MPI_SUM, m[k], &r[k]);
			MPI_Waitall(kComms, r, MPI_STATUSES_IGNORE);
			for (size_t i = 0; i < out.size(); i++)
				if (out[i] != sum_ranks + size * int(i % size_t(big) % 977)) {
					fail("20 communicators with 1 MiB in flight", "liveness",
					     i * sizeof(int));
					break;
				}
		}
		for (MPI_Comm &k : m)
			MPI_Comm_free(&k);
	}
	for (MPI_Comm *k : {&a, &b, &c, &d})
		MPI_Comm_free(k);
}

} // namespace

int main(int argc, char **argv)
{
	int iters = 200;
	uint64_t seed = 1;
	size_t max_count = 70000;
	bool unsup = false, one_rank = false, live = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], nullptr, 0);
		else if (!strcmp(argv[i], "--max-count") && i + 1 < argc)
			max_count = strtoull(argv[++i], nullptr, 0);
		else if (!strcmp(argv[i], "--unsupported"))
			unsup = true;
		else if (!strcmp(argv[i], "--one-rank"))
			one_rank = true;
		else if (!strcmp(argv[i], "--liveness"))
			live = true;
		else {
			fprintf(stderr,
				"usage: mpi_coll_check [--iters N] [--seed S] [--max-count C] "
				"[--unsupported | --one-rank | --liveness]\n");
			return 2;
		}
	}
	if (live) // the device's own timeout short: the drop-in's must hold
		setenv("IBV_COLL_EMU_COLL_TIMEOUT_MS", "1000", 1);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &g_size);
	if (one_rank) {
		int x = 1, y = 0;
		if (g_rank == 0) {
			MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
			if (y != 1)
				fail("allreduce on MPI_COMM_SELF", "one rank", 0);
		}
		if (g_wrong)
			fprintf(stderr, "mpi_coll_check: one rank: wrong\n");
		MPI_Finalize(); // no collective before it on the other ranks
		return g_wrong ? 1 : 0;
	}
	if (unsup) {
		unsupported(MPI_COMM_WORLD);
	} else if (live) {
		liveness();
	} else {
		// The world, a duplicate, halves and the world in reverse order.
		MPI_Comm dup, half, rev;
		MPI_Comm_dup(MPI_COMM_WORLD, &dup);
		MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
		MPI_Comm_split(MPI_COMM_WORLD, 0, g_size - g_rank, &rev);
		MPI_Comm comms[] = {MPI_COMM_WORLD, dup, half, rev};
		loc_rules(MPI_COMM_WORLD);
		std::mt19937_64 seq(seed), mine(seed * 1000003 + uint64_t(g_rank));
		for (int it = 0; it < iters; it++) {
			// The communicator: same choice everywhere; halves choose alike too.
			MPI_Comm c = comms[seq() % 4];
			std::mt19937_64 s2(seq());
			one(c, s2, mine, max_count, it);
		}
		// A communicator freed and made again: its job goes and comes.
		MPI_Comm_free(&dup);
		MPI_Comm_dup(MPI_COMM_WORLD, &dup);
		std::mt19937_64 s3(seed + 7);
		for (int it = 0; it < 5; it++)
			one(dup, s3, mine, 1000, iters + it);
		MPI_Comm_free(&dup);
		MPI_Comm_free(&half);
		MPI_Comm_free(&rev);
	}
	long all = 0;
	PMPI_Allreduce(&g_wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (g_rank == 0)
		printf("mpi_coll_check: %s, %d ranks: %ld wrong\n",
		       unsup  ? "unsupported cases"
		       : live ? "liveness cases"
			      : "random collectives",
		       g_size, all);
	MPI_Finalize();
	return all ? 1 : 0;
}
