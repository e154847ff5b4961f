/*
 * ibv_coll_allreduce - run every collective through the offload engine
 * and check the results.
 *
 * Start one process per node; each serves -k local ranks (buffers) through
 * one collective QP.  The processes meet through ibvc_boot (node 0 listens
 * on the -b address).  Each collective runs with int32 data whose correct
 * result has a closed form, and every destination is checked against it.
 *
 *   ibv_coll_allreduce -b unix:/tmp/ar.sock -i 0 -n 4 -k 2 &   (one per node)
 *   or, under ibv_coll_run, with no -b/-i/-n (read from IBVC_BOOT_*).
 */
#define _GNU_SOURCE
#include "ibvc_boot.h"
#include "ibvc_version.h"

#include <ibv_coll/ibv_coll.h>

#include <errno.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct opts {
	const char *boot, *dev;
	int node, nodes, ranks, iters;
	uint64_t count;
	int topology;
	const char *only;
	const char *sw; /* the aggregation switch, host:port */
	int boot_timeout_s;
};

#define PROG "ibv_coll_allreduce"
/* 2^28 int32 elements (1 GiB) per rank: beyond that the buffers of a
 * single node outgrow what the example is for. */
#define MAX_COUNT (1ull << 28)

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One completion: poll for up to 2 ms, yielding the processor between
 * polls (the polls run the device; on a small machine the other nodes'
 * processes need the processor too), then arm the CQ and sleep on its
 * channel.  Returns what ibv_poll_coll_cq returned, or -1. */
static int wait_one(struct ibv_coll_cq *cq, struct ibv_coll_comp_channel *ch,
		    struct ibv_coll_wc *wc)
{
	double end = now_us() + 2000;
	for (;;) {
		int n = ibv_poll_coll_cq(cq, 1, wc);
		if (n)
			return n;
		if (now_us() < end) {
			sched_yield();
			continue;
		}
		if (ibv_req_notify_coll_cq(cq, 0))
			return -1;
		n = ibv_poll_coll_cq(cq, 1, wc); /* it may have come before the arm */
		if (n)
			return n;
		struct ibv_coll_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_coll_cq_event(ch, &ev_cq, &ev_ctx))
			return -1;
		ibv_ack_coll_cq_events(ev_cq, 1);
	}
}

static void usage(const char *argv0)
{
	printf("usage: %s [-b ADDR -i NODE -n NODES] [-k RANKS] [-c COUNT] [-I ITERS] [-d DEV] "
	       "[-t ring|switch|auto] [-s HOST:PORT] [-T SEC]\n"
	       "  -b, --boot ADDR    rendezvous: unix:/path (node 0 listens; across hosts,\n"
	       "                     a PMIx launcher instead)\n"
	       "  -i, --node N       this node's index; -n, --nodes N: how many\n"
	       "                     (default: IBVC_BOOT_ADDR/NODE/NODES, as ibv_coll_run sets,\n"
	       "                     else the PMIx launcher's: mpirun, srun)\n"
	       "  -k, --ranks K      local ranks served by this node, 1 to 64 (default:\n"
	       "                     IBVC_RANKS_PER_NODE, as ibv_coll_run -k sets, else 2)\n"
	       "  -c, --count C      int32 elements per rank (default 262144)\n"
	       "  -I, --iters N      repetitions of each collective (default 5)\n"
	       "  -d, --ib-dev DEV   device (default crxe_lo)\n"
	       "  -t, --topology T   ring, switch or auto (default ring; switch when -s is given)\n"
	       "  -s, --switch H:P   the aggregation switch (ibv_coll_switchd) at IPv4 H, UDP port P\n"
	       "  -o, --only NAME    run only this collective (allreduce, reduce, bcast, allgather,\n"
	       "                     reduce_scatter, barrier)\n"
	       "  -T, --boot-timeout SEC  give up when the other nodes have not all come\n"
	       "                     within SEC seconds (default 60)\n"
	       "  -V, --version      print the version and exit\n"
	       "  -h, --help         this text\n",
	       argv0);
}

/* Rank g's source element e: small enough that sums of 64 ranks stay exact. */
static int32_t input(uint32_t g, uint64_t e)
{
	return (int32_t)((g * 7919u + e * 31u) % 100003u) - 50000;
}

static const char *ran_str(unsigned flags)
{
	if (flags & IBV_COLL_WC_FALLBACK)
		return "ring (fallback)";
	if (flags & IBV_COLL_WC_HIERARCHY)
		return "hierarchy";
	if (flags & IBV_COLL_WC_SWITCH)
		return "switch";
	if (flags & IBV_COLL_WC_RING)
		return "ring";
	if (flags & IBV_COLL_WC_LOCAL)
		return "local";
	return "?";
}

/* An integer option: the whole argument, in [lo, hi]; else say which option
 * and value are wrong. */
static int parse_int_opt(const char *name, const char *arg, long long lo, long long hi,
			 long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(arg, &end, 0);
	if (end == arg || *end || errno || v < lo || v > hi) {
		fprintf(stderr,
			PROG ": bad value for %s: '%s' (want an integer from %lld to %lld)\n", name,
			arg, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* Fill o from the command line (and IBVC_RANKS_PER_NODE): 0 to run, else
 * 1 + the exit status. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"boot", 1, NULL, 'b'},		{"node", 1, NULL, 'i'},
		{"nodes", 1, NULL, 'n'},	{"ranks", 1, NULL, 'k'},
		{"count", 1, NULL, 'c'},	{"iters", 1, NULL, 'I'},
		{"ib-dev", 1, NULL, 'd'},	{"topology", 1, NULL, 't'},
		{"only", 1, NULL, 'o'},		{"switch", 1, NULL, 's'},
		{"boot-timeout", 1, NULL, 'T'}, {"help", 0, NULL, 'h'},
		{"version", 0, NULL, 'V'},	{NULL, 0, NULL, 0},
	};
	const char *env_k = getenv("IBVC_RANKS_PER_NODE");
	long long v = 0;
	int c;
	/* ibv_coll_run -k K hands every process IBVC_RANKS_PER_NODE=K. */
	if (env_k && parse_int_opt("IBVC_RANKS_PER_NODE", env_k, 1, 64, &v))
		return 1 + 2;
	if (env_k)
		o->ranks = (int)v;
	while ((c = getopt_long(argc, argv, "b:i:n:k:c:I:d:t:o:s:T:hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'b': o->boot = optarg; break;
		case 'i':
			bad = parse_int_opt("-i/--node", optarg, 0, 4095, &v);
			o->node = (int)v;
			break;
		case 'n':
			bad = parse_int_opt("-n/--nodes", optarg, 1, 4096, &v);
			o->nodes = (int)v;
			break;
		case 'k':
			bad = parse_int_opt("-k/--ranks", optarg, 1, 64, &v);
			o->ranks = (int)v;
			break;
		case 'c':
			bad = parse_int_opt("-c/--count", optarg, 0, (long long)MAX_COUNT, &v);
			o->count = (uint64_t)v;
			break;
		case 'I':
			bad = parse_int_opt("-I/--iters", optarg, 1, INT_MAX, &v);
			o->iters = (int)v;
			break;
		case 'T':
			bad = parse_int_opt("-T/--boot-timeout", optarg, 1, INT_MAX / 1000, &v);
			o->boot_timeout_s = (int)v;
			break;
		case 'd': o->dev = optarg; break;
		case 't':
			o->topology = !strcmp(optarg, "auto")	  ? IBV_COLL_TOPO_AUTO
				      : !strcmp(optarg, "switch") ? IBV_COLL_TOPO_SWITCH
				      : !strcmp(optarg, "ring")	  ? IBV_COLL_TOPO_RING
								  : -2;
			if (o->topology == -2) {
				fprintf(stderr,
					PROG ": bad value for -t/--topology: '%s' "
					     "(want ring, switch or auto)\n",
					optarg);
				bad = 1;
			}
			break;
		case 's': o->sw = optarg; break;
		case 'o': o->only = optarg; break;
		case 'h': usage(argv[0]); return 1 + 0;
		case 'V': return 1 + ibvc_print_version(PROG, ibv_coll_version());
		default: fprintf(stderr, "try '%s --help'\n", argv[0]); return 1 + 2;
		}
		if (bad)
			return 1 + 2;
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		return 1 + 2;
	}
	if (o->only) {
		int known = 0;
		for (int op = IBV_COLL_WR_ALLREDUCE; op <= IBV_COLL_WR_BARRIER; op++)
			known |= !strcasecmp(o->only,
					     ibv_coll_wr_opcode_str((enum ibv_coll_wr_opcode)op));
		if (!known) {
			fprintf(stderr,
				PROG ": bad value for -o/--only: '%s' (want allreduce, reduce, "
				     "bcast, allgather, reduce_scatter or barrier)\n",
				o->only);
			return 1 + 2;
		}
	}
	return 0;
}

/* Elements of global rank g's destination that differ from the closed
 * form (a REDUCE leaves every rank but the root's destination as it was). */
static long count_wrong(enum ibv_coll_wr_opcode op, const int32_t *dst, uint64_t dst_n, uint32_t g,
			uint32_t root, uint32_t K, uint64_t cnt)
{
	long wrong = 0;

	for (uint64_t e = 0; e < dst_n && op != IBV_COLL_WR_BARRIER; e++) {
		int64_t want = 0;
		int written = 1;
		switch (op) {
		case IBV_COLL_WR_ALLREDUCE:
		case IBV_COLL_WR_REDUCE:
			written = op == IBV_COLL_WR_ALLREDUCE || g == root;
			for (uint32_t q = 0; q < K; q++)
				want += input(q, e);
			break;
		case IBV_COLL_WR_BCAST: want = input(root, e); break;
		case IBV_COLL_WR_ALLGATHER: want = input((uint32_t)(e / cnt), e % cnt); break;
		case IBV_COLL_WR_REDUCE_SCATTER:
			for (uint32_t q = 0; q < K; q++)
				want += input(q, g * cnt + e);
			break;
		default: break;
		}
		if (written ? dst[e] != (int32_t)want : dst[e] != (int32_t)0xa5a5a5a5)
			wrong++;
	}
	return wrong;
}

/* -s HOST:PORT: an IPv4 address as an IPv4-mapped GID, and the port.
 * 0, or -1 with a message. */
static int parse_switch(const char *sw, struct ibv_coll_switch_addr *swaddr)
{
	char host[64];
	const char *colon = strrchr(sw, ':');
	struct in_addr a4;
	if (!colon || (size_t)(colon - sw) >= sizeof(host)) {
		fprintf(stderr, "ibv_coll_allreduce: -s wants HOST:PORT\n");
		return -1;
	}
	memcpy(host, sw, (size_t)(colon - sw));
	host[colon - sw] = 0;
	if (inet_pton(AF_INET, host, &a4) != 1) {
		fprintf(stderr, "ibv_coll_allreduce: %s: not an IPv4 address\n", host);
		return -1;
	}
	swaddr->gid.raw[10] = swaddr->gid.raw[11] = 0xff;
	memcpy(&swaddr->gid.raw[12], &a4, 4);
	swaddr->udp_port = (uint16_t)atoi(colon + 1);
	return 0;
}

/* The device, a PD, a completion channel and CQ, and the collective QP in
 * INIT.  The QP, or NULL with a message printed. */
static struct ibv_coll_qp *open_qp(const struct opts *o, struct ibv_coll_context **ctx,
				   struct ibv_coll_pd **pd, struct ibv_coll_comp_channel **ch,
				   struct ibv_coll_cq **cq)
{
	int n, err;

	struct ibv_coll_device **list = ibv_get_coll_device_list(&n);
	int found = 0;
	for (int i = 0; list && i < n && !found; i++)
		if (!strcmp(ibv_get_coll_device_name(list[i]), o->dev)) {
			found = 1;
			*ctx = ibv_open_coll_device(list[i]);
		}
	/* errno is only the open's when a device of that name was there. */
	err = found ? errno : list ? ENODEV : errno;
	ibv_free_coll_device_list(list);
	if (!*ctx) {
		fprintf(stderr, PROG ": cannot open %s: %s\n", o->dev,
			found || !list ? strerror(err)
				       : "not found (ibv_coll_devinfo -l lists the devices)");
		return NULL;
	}
	*pd = ibv_alloc_coll_pd(*ctx);
	/* Completions are waited for on a channel: poll briefly, then sleep. */
	*ch = ibv_create_coll_comp_channel(*ctx);
	*cq = *ch ? ibv_create_coll_cq(*ctx, 16, NULL, *ch, 0) : NULL;
	struct ibv_coll_qp_init_attr ia = {0};
	ia.send_cq = *cq;
	ia.recv_cq = *cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = 8;
	ia.cap.max_send_sge = (uint32_t)o->ranks;
	struct ibv_coll_qp *qp = *pd && *cq ? ibv_create_coll_qp(*pd, &ia) : NULL;
	if (!qp) {
		fprintf(stderr, "ibv_coll_allreduce: create qp: %s\n", strerror(errno));
		return NULL;
	}
	struct ibv_coll_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if ((err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))) {
		fprintf(stderr, "ibv_coll_allreduce: INIT: %s\n", strerror(err));
		return NULL;
	}
	return qp;
}

/* Meet the other nodes through the rendezvous, swap member entries, and
 * bring the QP to RTS with the job.  0, or the exit status with a message
 * printed. */
static int join_job(const struct opts *o, struct ibv_coll_context *ctx, struct ibv_coll_qp *qp,
		    struct ibvc_boot **boot, struct ibv_coll_member **members, uint32_t *K,
		    uint32_t *first)
{
	struct ibv_coll_qp_attr a = {0};
	int err;

	if ((err = ibvc_boot_open(o->boot, o->node, o->nodes, o->boot_timeout_s * 1000, boot))) {
		fprintf(stderr, "ibv_coll_allreduce: bootstrap %s: %s\n", o->boot, strerror(err));
		return 1;
	}
	struct ibv_coll_port_attr pa;
	struct ibv_coll_member me = {0};

	*members = calloc((size_t)o->nodes, sizeof(me));
	if (!*members)
		return 1;
	ibv_query_coll_port(ctx, 1, &pa);
	ibv_query_coll_gid(ctx, 1, 0, &me.gid);
	me.udp_port = pa.udp_port;
	me.num_ranks = (uint16_t)o->ranks;
	me.qp_num = qp->qp_num;
	if ((err = ibvc_boot_allgather(*boot, &me, sizeof(me), *members))) {
		fprintf(stderr, "ibv_coll_allreduce: exchange: %s\n", strerror(err));
		return 1;
	}
	*K = 0;
	*first = 0;
	for (int i = 0; i < o->nodes; i++) {
		if (i == o->node)
			*first = *K;
		*K += (*members)[i].num_ranks;
	}
	struct ibv_coll_job_attr job = {0};
	job.jid = 1;
	job.node_index = (uint32_t)o->node;
	job.num_nodes = (uint32_t)o->nodes;
	job.members = *members;
	job.topology = (enum ibv_coll_topology)o->topology;
	job.seg_count = 256;
	job.job_key = 0x1bc011ull;
	/* The switch: an IPv4 address as an IPv4-mapped GID, and its port. */
	struct ibv_coll_switch_addr swaddr = {0};
	struct ibv_coll_switch_attr swattr = {0};
	if (o->sw) {
		if (parse_switch(o->sw, &swaddr))
			return 2;
		swattr.num_planes = 1;
		swattr.num_leaves = 1;
		swattr.leaves = &swaddr;
		job.comp_mask = IBV_COLL_JOB_ATTR_SWITCH;
		job.sw = &swattr;
	}
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.job = &job;
	if ((err = ibv_modify_coll_qp(
		     qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU))) {
		fprintf(stderr, "ibv_coll_allreduce: RTR: %s\n", strerror(err));
		return 1;
	}
	a.qp_state = IBV_QPS_RTS;
	if ((err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE))) {
		fprintf(stderr, "ibv_coll_allreduce: RTS: %s\n", strerror(err));
		return 1;
	}
	return 0;
}

/* The rendezvous from the launcher when the command line gave none, the
 * default topology, and the options checked.  0, or the exit status with
 * a message printed. */
static int settle_opts(struct opts *o)
{
	if (!o->boot && ibvc_boot_from_env(&o->boot, &o->node, &o->nodes)) {
		fprintf(stderr, "ibv_coll_allreduce: no rendezvous: give -b/-i/-n, or run under "
				"ibv_coll_run or a PMIx launcher (mpirun, srun)\n");
		return 2;
	}
	if (o->topology == -1)
		o->topology = o->sw ? IBV_COLL_TOPO_SWITCH : IBV_COLL_TOPO_RING;
	if (o->node < 0 || o->node >= o->nodes) {
		fprintf(stderr, PROG ": node index %d is not below the number of nodes %d\n",
			o->node, o->nodes);
		return 2;
	}
	if (o->topology == IBV_COLL_TOPO_SWITCH && !o->sw) {
		fprintf(stderr, PROG ": -t switch needs the switch's address (-s HOST:PORT)\n");
		return 2;
	}
	return 0;
}

/* One collective WR over the ranks' buffers (SUM of int32), signalled.
 * 0, or -1 with a message printed. */
static int post_coll(struct ibv_coll_qp *qp, enum ibv_coll_wr_opcode op, size_t id,
		     struct ibv_sge *s, struct ibv_sge *d, int ranks, uint64_t cnt, uint32_t root)
{
	struct ibv_coll_send_wr wr = {0}, *bad;
	int err;

	wr.wr_id = id;
	wr.opcode = op;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = s;
	wr.num_sge = op == IBV_COLL_WR_BARRIER ? 0 : ranks;
	wr.wr.coll.dst_list = d;
	wr.wr.coll.count = cnt;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	wr.wr.coll.root = root;
	if ((err = ibv_post_coll_send(qp, &wr, &bad))) {
		fprintf(stderr, "ibv_coll_allreduce: post: %s\n", strerror(err));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {NULL, "crxe_lo", -1, -1, 2, 5, 262144, -1, NULL, NULL, 60};
	int c, n, failures = 0;
	if ((c = parse_opts(argc, argv, &o)))
		return c - 1;
	if ((c = settle_opts(&o)))
		return c;

	struct ibv_coll_context *ctx = NULL;
	struct ibv_coll_pd *pd = NULL;
	struct ibv_coll_comp_channel *ch = NULL;
	struct ibv_coll_cq *cq = NULL;
	struct ibv_coll_qp *qp = open_qp(&o, &ctx, &pd, &ch, &cq);
	if (!qp)
		return 1;

	/* Exchange member entries, then bring the job up. */
	struct ibvc_boot *boot;
	struct ibv_coll_member *members;
	uint32_t K, first;
	if ((c = join_job(&o, ctx, qp, &boot, &members, &K, &first)))
		return c;
	ibvc_boot_barrier(boot);

	/* Per rank: a source and a destination big enough for every collective. */
	const uint64_t cnt = o.count, big = cnt * K;
	size_t per = (size_t)(2 * big) * 4; /* source and destination, each up to count * ranks */
	int32_t *arena = malloc(per * (size_t)o.ranks);
	struct ibv_coll_mr *mr = ibv_reg_coll_mr(pd, arena, per * (size_t)o.ranks,
						 IBV_ACCESS_LOCAL_WRITE);
	if (!arena || !mr) {
		fprintf(stderr, "ibv_coll_allreduce: buffers: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_sge *s = calloc((size_t)o.ranks, sizeof(*s)),
		       *d = calloc((size_t)o.ranks, sizeof(*d));
	static const enum ibv_coll_wr_opcode colls[] = {
		IBV_COLL_WR_ALLREDUCE, IBV_COLL_WR_REDUCE,	   IBV_COLL_WR_BCAST,
		IBV_COLL_WR_ALLGATHER, IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_WR_BARRIER,
	};
	if (o.node == 0)
		printf("%-15s %12s %6s %-16s %10s %10s %8s\n", "collective", "count", "ranks",
		       "ran", "avg_us", "GB/s", "#wrong");
	for (size_t ci = 0; ci < sizeof(colls) / sizeof(colls[0]); ci++) {
		enum ibv_coll_wr_opcode op = colls[ci];
		if (o.only && strcasecmp(o.only, ibv_coll_wr_opcode_str(op)))
			continue;
		uint64_t src_n = op == IBV_COLL_WR_REDUCE_SCATTER ? big : cnt;
		uint64_t dst_n = op == IBV_COLL_WR_ALLGATHER ? big : cnt;
		uint32_t root = K - 1;
		double total = 0;
		long wrong = 0;
		unsigned flags = 0;
		for (int it = 0; it < o.iters; it++) {
			for (int r = 0; r < o.ranks; r++) {
				int32_t *src = (int32_t *)((char *)arena + per * (size_t)r);
				int32_t *dst = src + big;
				if (it == 0)
					for (uint64_t e = 0; e < src_n; e++)
						src[e] = input(first + (uint32_t)r, e);
				if (it == o.iters - 1)
					memset(dst, 0xa5, dst_n * 4);
				s[r] = (struct ibv_sge){(uintptr_t)src, (uint32_t)(src_n * 4),
							mr->lkey};
				d[r] = (struct ibv_sge){(uintptr_t)dst, (uint32_t)(dst_n * 4),
							mr->lkey};
			}
			double t0 = now_us();
			if (post_coll(qp, op, ci, s, d, o.ranks, cnt, root))
				return 1;
			struct ibv_coll_wc wc;
			n = wait_one(cq, ch, &wc);
			total += now_us() - t0;
			if (n < 0 || wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "node %d: %s failed: %s (%s)\n", o.node,
					ibv_coll_wr_opcode_str(op),
					ibv_coll_wc_status_str(wc.status),
					ibv_coll_status_str(wc.coll_status));
				return 1;
			}
			flags = wc.wc_flags;
			/* Check every destination against the closed form, after the
			 * last run (checking in between would time the checks). */
			for (int r = 0; r < o.ranks && it == o.iters - 1; r++) {
				uint32_t g = first + (uint32_t)r;
				int32_t *dst = (int32_t *)((char *)arena + per * (size_t)r) + big;
				wrong += count_wrong(op, dst, dst_n, g, root, K, cnt);
			}
		}
		failures += wrong != 0;
		double avg = total / o.iters;
		double bytes = (double)(op == IBV_COLL_WR_ALLGATHER ? big : cnt) * 4;
		if (o.node == 0)
			printf("%-15s %12lu %6u %-16s %10.1f %10.3f %8ld\n",
			       ibv_coll_wr_opcode_str(op), (unsigned long)cnt, K, ran_str(flags),
			       avg, op == IBV_COLL_WR_BARRIER ? 0.0 : bytes / avg / 1e3, wrong);
		else if (wrong)
			printf("node %d: %s: %ld wrong elements\n", o.node,
			       ibv_coll_wr_opcode_str(op), wrong);
	}
	ibvc_boot_barrier(boot); /* everyone done before anyone leaves */
	ibvc_boot_close(boot);
	ibv_destroy_coll_qp(qp);
	ibv_dereg_coll_mr(mr);
	ibv_destroy_coll_cq(cq);
	ibv_destroy_coll_comp_channel(ch);
	ibv_dealloc_coll_pd(pd);
	ibv_close_coll_device(ctx);
	free(arena);
	free(members);
	free(s);
	free(d);
	return failures ? 1 : 0;
}
