/*
 * perf.h - ibv_coll_perf's state, shared by its measuring half
 * (ibv_coll_perf.c) and its setup (perf_setup.c: the device, the job, the
 * buffers).  Private to the program.
 */
#ifndef IBVC_PERF_H
#define IBVC_PERF_H

#include "ibvc_boot.h"
#include "perf_opts.h"

#include <ibv_coll/ibv_coll.h>

#include <stdint.h>
#include <stdio.h>

#define QDEPTH 32 /* collectives in flight during a timed loop */
#define GUARD 64  /* bytes after each buffer that must stay untouched */
#define FILL 0xa5 /* what destinations hold before a checked run */
#define BOOT_TIMEOUT_MS 60000
#define STALL_MS 60000 /* no completion for this long: give up */

/* What each process reports to process 0 after a size. */
struct size_result {
	double us[2]; /* out of place, in place: mean time of one run */
	uint64_t wrong[2];
	uint64_t oob;	/* guard bytes overwritten */
	uint32_t flags; /* OR of the completions' wc_flags */
	uint32_t failed;
	double wire; /* bytes this process's device port sent per out-of-place run */
};

/* What each process tells the others at the start: m.num_ranks is its
 * own ranks, m's address its device's and QP's. */
struct node_info {
	struct ibv_coll_member m;
	int32_t pid;
	int32_t jnode;	/* its node of the job (ibvc_boot_place) */
	int32_t local;	/* its place among the node's processes; 0 leads */
	uint32_t first; /* its first rank in the job */
	char host[44];
};

struct perf {
	struct perf_opts o;
	struct ibv_coll_context *ctx;
	struct ibv_coll_pd *pd;
	struct ibv_coll_comp_channel *ch;
	struct ibv_coll_cq *cq;
	struct ibv_coll_qp *qp;
	struct ibv_coll_mr *mr;
	struct ibvc_boot *boot;
	struct node_info *nodes;   /* one per process (o.nodes), by rendezvous index */
	struct ibvc_boot_place pl; /* the job's nodes, and this process's */
	uint32_t K, first;	   /* ranks in the job, this process's first global rank */
	char *arena;
	size_t per, src_cap, dst_cap; /* per local rank: source, guard, destination, guard */
	struct ibv_sge *src, *dst;
	int armed;	/* the CQ is armed for an event */
	unsigned flags; /* OR of wc_flags since last cleared */
	FILE *ran_log;	/* --ran-log */
};

/* strerrorname_np, or "?". */
const char *errname(int err);

/* Open the device and make the PD, channel, CQ and the QP in INIT. */
int perf_open_device(struct perf *p);
/* Meet the other processes, learn the job, and bring the QP to RTS. */
int perf_join_job(struct perf *p);
/* The sources and destinations of every local rank, registered. */
int perf_alloc_buffers(struct perf *p);
void perf_teardown(struct perf *p);

#endif /* IBVC_PERF_H */
