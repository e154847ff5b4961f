/*
 * mpi_allreduce_perf - MPI_Allreduce timed and checked the way
 * ibv_coll_perf times and checks ALLREDUCE, printed in the same nccl-tests
 * format: the baseline of scripts/bench-baseline.sh.
 *
 * One MPI rank per process.  For each size: warm-up runs, timed runs out of
 * place and then in place (MPI_IN_PLACE), each timed loop between two
 * barriers and its time the largest over the ranks; with -c 1 one more run
 * of each whose result is compared, element by element, with the values of
 * tools/common/perf_data.h computed by a scalar loop.
 *
 *   mpicc -O2 -std=c11 -Itools bench/mpi_allreduce_perf.c -o mpi_allreduce_perf
 */
#define _POSIX_C_SOURCE 200809L
#include "ibvc_version.h"
#include "perf_data.h"

#include <mpi.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILL 0xa5
#define GUARD 64 /* bytes after the result that must stay untouched */

struct opts {
	size_t minbytes, maxbytes, stepbytes, stepfactor;
	int iters, warmup, check, type, op;
};

static int rank, nranks;

static MPI_Datatype mpi_type(int t)
{
	switch (t) {
	case PD_INT8: return MPI_INT8_T;
	case PD_INT16: return MPI_INT16_T;
	case PD_INT32: return MPI_INT32_T;
	case PD_INT64: return MPI_INT64_T;
	case PD_UINT8: return MPI_UINT8_T;
	case PD_UINT16: return MPI_UINT16_T;
	case PD_UINT32: return MPI_UINT32_T;
	case PD_UINT64: return MPI_UINT64_T;
	case PD_FLOAT: return MPI_FLOAT;
	case PD_DOUBLE: return MPI_DOUBLE;
	case PD_FLOAT_INT: return MPI_FLOAT_INT;
	case PD_DOUBLE_INT: return MPI_DOUBLE_INT;
	case PD_LONG_INT: return MPI_LONG_INT;
	case PD_2INT: return MPI_2INT;
	case PD_SHORT_INT: return MPI_SHORT_INT;
	default: return MPI_DATATYPE_NULL; /* half, bfloat16: not in MPI */
	}
}

static MPI_Op mpi_op(int op)
{
	switch (op) {
	case PD_SUM: return MPI_SUM;
	case PD_PROD: return MPI_PROD;
	case PD_MIN: return MPI_MIN;
	case PD_MAX: return MPI_MAX;
	case PD_BAND: return MPI_BAND;
	case PD_BOR: return MPI_BOR;
	case PD_BXOR: return MPI_BXOR;
	case PD_LAND: return MPI_LAND;
	case PD_LOR: return MPI_LOR;
	case PD_LXOR: return MPI_LXOR;
	case PD_MAXLOC: return MPI_MAXLOC;
	case PD_MINLOC: return MPI_MINLOC;
	default: return MPI_OP_NULL; /* avg */
	}
}

/* 0 to run, 1 after --version, -1 on a bad option. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {{"version", 0, NULL, 'V'}, {NULL, 0, NULL, 0}};
	int c;
	*o = (struct opts){32 << 20, 32 << 20, 1 << 20, 1, 20, 5, 1, PD_FLOAT, PD_SUM};
	while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:d:o:hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'b': bad = pd_parse_size(optarg, &o->minbytes); break;
		case 'e': bad = pd_parse_size(optarg, &o->maxbytes); break;
		case 'i': bad = pd_parse_size(optarg, &o->stepbytes); break;
		case 'f':
			o->stepfactor = strtoul(optarg, NULL, 0);
			bad = !o->stepfactor;
			break;
		case 'n': bad = (o->iters = atoi(optarg)) < 1; break;
		case 'w': bad = (o->warmup = atoi(optarg)) < 0; break;
		case 'c': o->check = atoi(optarg) != 0; break;
		case 'd': bad = (o->type = pd_type_by_name(optarg)) < 0; break;
		case 'o': bad = (o->op = pd_op_by_name(optarg)) < 0; break;
		case 'V':
			if (rank == 0)
				ibvc_print_version("mpi_allreduce_perf", NULL);
			return 1;
		default: bad = 1;
		}
		if (bad) {
			if (rank == 0)
				fprintf(stderr, "usage: mpi_allreduce_perf [-b min] [-e max] "
						"[-i stepbytes] [-f factor] [-n iters] [-w warmup] "
						"[-c 0|1] [-d type] [-o op] [-V|--version]\n");
			return -1;
		}
	}
	if (mpi_type(o->type) == MPI_DATATYPE_NULL || mpi_op(o->op) == MPI_OP_NULL ||
	    (pd_types[o->type].is_float && o->op >= PD_BAND && o->op <= PD_LXOR) ||
	    (o->op == PD_MAXLOC || o->op == PD_MINLOC) != pd_is_pair(o->type)) {
		if (rank == 0)
			fprintf(stderr, "mpi_allreduce_perf: MPI has no %s %s\n",
				pd_types[o->type].name, pd_op_names[o->op]);
		return -1;
	}
	return 0;
}

static void fill_input(const struct opts *o, void *buf, size_t count)
{
	for (size_t i = 0; i < count; i++)
		pd_store(o->type, buf, i,
			 pd_input(o->type, o->op, (uint32_t)nranks, (uint64_t)rank, i));
}

static uint64_t check(const struct opts *o, const void *buf, size_t count)
{
	uint64_t wrong = 0;
	for (size_t i = 0; i < count; i++)
		wrong += !pd_matches(o->type, buf, i,
				     pd_expect(o->type, o->op, (uint32_t)nranks, i));
	return wrong;
}

/* The mean time of one run in microseconds, the largest over the ranks. */
static double timed(const struct opts *o, const void *send, void *recv, size_t count)
{
	MPI_Datatype dt = mpi_type(o->type);
	MPI_Op op = mpi_op(o->op);
	for (int i = 0; i < o->warmup; i++)
		MPI_Allreduce(send, recv, (int)count, dt, op, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int i = 0; i < o->iters; i++)
		MPI_Allreduce(send, recv, (int)count, dt, op, MPI_COMM_WORLD);
	double us = (MPI_Wtime() - t0) * 1e6 / o->iters, max;
	MPI_Allreduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return max;
}

static void print_header(const struct opts *o)
{
	char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];
	int len, pid = (int)getpid();
	MPI_Get_library_version(lib, &len);
	lib[strcspn(lib, ",\n")] = 0;
	MPI_Get_processor_name(host, &len);
	int *pids = rank == 0 ? malloc(sizeof(int) * (size_t)nranks) : NULL;
	MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rank != 0)
		return;
	printf("# mpi_allreduce_perf: allreduce, %s, %s\n", pd_types[o->type].name,
	       pd_op_names[o->op]);
	printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
	       "validation: %d\n",
	       nranks, o->minbytes, o->maxbytes, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
	       o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
	printf("# library %s\n#\n# Using devices\n", lib);
	for (int r = 0; r < nranks; r++)
		printf("#  Rank %2d Pid %7d on %12s\n", r, pids[r], host);
	free(pids);
	printf("#\n");
	printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
	       "in-place\n",
	       "", "", "", "", "");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %s\n", "size",
	       "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
	       "algbw", "busbw", "#wrong", "ran");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
	       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
	       "");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct opts o;
	/* The version without starting MPI: no launcher is needed to ask it. */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V"))
			return ibvc_print_version("mpi_allreduce_perf", NULL);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	int r = parse_opts(argc, argv, &o);
	if (r) {
		MPI_Finalize();
		return r > 0 ? 0 : 2;
	}
	size_t ts = pd_types[o.type].size;
	char *send = malloc(o.maxbytes + ts), *recv = malloc(o.maxbytes + GUARD);
	if (!send || !recv) {
		fprintf(stderr, "mpi_allreduce_perf: rank %d: out of memory\n", rank);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	print_header(&o);
	uint64_t wrong_total = 0, oob_total = 0;
	double bw_sum = 0, n = nranks;
	int bw_n = 0;
	for (size_t size = o.minbytes; size <= o.maxbytes;
	     size = o.stepfactor > 1 ? (size ? size * o.stepfactor : ts) : size + o.stepbytes) {
		size_t count = size / ts;
		double us[2];
		uint64_t wrong[3] = {0, 0, 0}, all[3]; /* out of place, in place, guard */
		fill_input(&o, send, count);
		us[0] = timed(&o, send, recv, count);
		if (o.check) {
			memset(recv, FILL, count * ts + GUARD);
			MPI_Allreduce(send, recv, (int)count, mpi_type(o.type), mpi_op(o.op),
				      MPI_COMM_WORLD);
			wrong[0] = check(&o, recv, count);
		}
		fill_input(&o, recv, count);
		us[1] = timed(&o, MPI_IN_PLACE, recv, count);
		if (o.check) {
			fill_input(&o, recv, count);
			MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, mpi_type(o.type),
				      mpi_op(o.op), MPI_COMM_WORLD);
			wrong[1] = check(&o, recv, count);
		}
		for (int i = 0; o.check && i < GUARD; i++)
			wrong[2] += (unsigned char)recv[count * ts + i] != FILL;
		MPI_Allreduce(wrong, all, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
		if (rank == 0) {
			printf("%12zu  %12zu  %8s  %6s  %6d", count * ts, count,
			       pd_types[o.type].name, pd_op_names[o.op], -1);
			for (int j = 0; j < 2; j++) {
				double algbw = (double)(count * ts) / us[j] / 1e3;
				double busbw = algbw * 2 * (n - 1) / n;
				int prec = us[j] >= 10000 ? 0 : us[j] >= 100 ? 1 : 2;
				printf("  %7.*f  %6.2f  %6.2f", prec, us[j], algbw, busbw);
				if (o.check)
					printf("  %5" PRIu64, all[j]);
				else
					printf("  %5s", "N/A");
				bw_sum += busbw;
				bw_n++;
			}
			printf("  mpi\n");
			fflush(stdout);
		}
		wrong_total += all[0] + all[1];
		oob_total += all[2];
		if (o.stepfactor <= 1 && !o.stepbytes)
			break;
	}
	if (rank == 0) {
		printf("# Out of bounds values : %" PRIu64 " %s\n", oob_total,
		       oob_total ? "FAILED" : "OK");
		printf("# Wrong elements       : %" PRIu64 " %s\n", wrong_total,
		       wrong_total ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g \n#\n", bw_n ? bw_sum / bw_n : 0.0);
	}
	free(send);
	free(recv);
	MPI_Finalize();
	return wrong_total || oob_total ? 1 : 0;
}
