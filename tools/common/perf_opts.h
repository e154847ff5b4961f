/*
 * perf_opts - ibv_coll_perf's command line and its table of collectives.
 */
#ifndef IBVC_PERF_OPTS_H
#define IBVC_PERF_OPTS_H

#include <ibv_coll/ibv_coll.h>

#include <stddef.h>
#include <stdint.h>

#define PROG "ibv_coll_perf"

struct coll_info {
	const char *name;
	enum ibv_coll_wr_opcode op;
	int reduces; /* takes -o */
	int rooted;  /* takes -r */
	int inplace; /* the library defines an in-place form */
	int src_k;   /* the source holds count x ranks elements */
	int dst_k;   /* the destination does */
};

enum { NCOLLS = 6 };
extern const struct coll_info colls[NCOLLS];

struct perf_opts {
	size_t minbytes, maxbytes, stepbytes, stepfactor; /* bytes per rank */
	int iters, warmup, check, root, ranks, topology;
	int type, op, coll; /* enum pd_type, enum pd_op, index in colls */
	int spin_us;
	int blocking; /* -z: one collective in flight at a time */
	int depth;    /* --depth: in flight with -z 0 (1..32) */
	int window;   /* --window: switch window (0: the grant's) */
	int e2e_ack;  /* --e2e-ack */
	const char *dev;
	const char *boot; /* the rendezvous; nodes == 1 needs none */
	int node, nodes;
	const char *sw; /* -s: the (first) aggregation switch, as given */
	int sw_planes;	/* how many -s: one switch per plane */
	struct {
		uint8_t gid[16];
		uint16_t port;
		uint32_t qpn; /* -s .../QPN: the switch's UD QP on a verbs device */
	} sws[8];
	/* --spine: the -s switches are the leaves of one plane under this
	 * spine (topology hierarchy), node i on leaf i * leaves / nodes. */
	int have_spine;
	struct {
		uint8_t gid[16];
		uint16_t port;
		uint32_t qpn;
	} spine;
	int gid_index;	     /* --gid-index: this node's address in the GID table */
	int progress;	     /* --progress: a line per size on stderr (node 0) */
	int gap_us;	     /* --gap-us: a compute gap before each collective */
	const char *ran_log; /* --ran-log: per completion "mid flags" (%d: node) */
	char dev_buf[64];    /* -D with %d: the device of this node */
};

/* Fill *o from the command line and the environment: -1 to go on, or the
 * status to exit with (0 after --help or --version, 2 on a usage error). */
int parse_opts(int argc, char **argv, struct perf_opts *o);

/* nccl-tests' bus bandwidth factor for n ranks (doc/PERFORMANCE.md). */
double busbw_factor(enum ibv_coll_wr_opcode op, double n);

const char *topo_name(int topology);

#endif /* IBVC_PERF_OPTS_H */
