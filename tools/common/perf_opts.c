/*
 * perf_opts - ibv_coll_perf's command line: nccl-tests' flags where they
 * exist, and the job's own (ranks per node, topology, device, switch).
 */
#define _GNU_SOURCE
#include "perf_opts.h"

#include "ibvc_boot.h"
#include "ibvc_version.h"
#include "perf_data.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

const struct coll_info colls[NCOLLS] = {
	{"allreduce", IBV_COLL_WR_ALLREDUCE, 1, 0, 1, 0, 0},
	{"reduce", IBV_COLL_WR_REDUCE, 1, 1, 1, 0, 0},
	{"bcast", IBV_COLL_WR_BCAST, 0, 1, 1, 0, 0},
	/* In place, ALLGATHER and REDUCE_SCATTER would overlap a rank's source
	 * and destination, which ibv_post_coll_send(3) leaves undefined. */
	{"allgather", IBV_COLL_WR_ALLGATHER, 0, 0, 0, 0, 1},
	{"reduce_scatter", IBV_COLL_WR_REDUCE_SCATTER, 1, 0, 0, 1, 0},
	{"barrier", IBV_COLL_WR_BARRIER, 0, 0, 0, 0, 0},
};

static const char *const topo_names[] = {
	[IBV_COLL_TOPO_RING] = "ring",
	[IBV_COLL_TOPO_SWITCH] = "switch",
	[IBV_COLL_TOPO_HIERARCHY] = "hierarchy",
	[IBV_COLL_TOPO_AUTO] = "auto",
};

const char *topo_name(int topology)
{
	static char other[24];
	if (topology >= 0 && (size_t)topology < sizeof(topo_names) / sizeof(topo_names[0]))
		return topo_names[topology];
	snprintf(other, sizeof(other), "%d", topology);
	return other;
}

double busbw_factor(enum ibv_coll_wr_opcode op, double n)
{
	switch (op) {
	case IBV_COLL_WR_ALLREDUCE: return 2 * (n - 1) / n;
	case IBV_COLL_WR_REDUCE_SCATTER:
	case IBV_COLL_WR_ALLGATHER: return (n - 1) / n;
	case IBV_COLL_WR_BCAST:
	case IBV_COLL_WR_REDUCE: return 1;
	default: return 0;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options]   (one process per node: run it under ibv_coll_run)\n"
		"  -b, --minbytes SIZE     smallest size, bytes per rank, K/M/G suffixes (32M)\n"
		"  -e, --maxbytes SIZE     largest size (32M)\n"
		"  -i, --stepbytes SIZE    step when -f is 1 (1M)\n"
		"  -f, --stepfactor F      multiply the size by F at each step (1)\n"
		"  -n, --iters N           timed runs per size (20)\n"
		"  -w, --warmup_iters N    untimed runs first (5)\n"
		"  -c, --check 0|1         check every destination element (1)\n"
		"  -z, --blocking 0|1      wait for each collective before posting the next (0: keep\n"
		"                          up to 32 in flight, as nccl-tests keeps a stream busy)\n"
		"      --depth N           with -z 0, at most N in flight (1-32; 32)\n"
		"  -d, --datatype TYPE     int8 uint8 int16 uint16 int32 uint32 int64 uint64\n"
		"                          half bfloat16 float double (float)\n"
		"  -o, --op OP             sum prod min max avg band bor bxor (sum)\n"
		"  -C, --collective NAME   allreduce (the default) reduce bcast allgather\n"
		"                          reduce_scatter barrier\n"
		"  -r, --root RANK         global root rank of reduce and bcast (0)\n"
		"  -k, --ranks K           local ranks per node (IBVC_RANKS_PER_NODE, else 1)\n"
		"  -t, --topology T        ring switch hierarchy auto, or a number (ring)\n"
		"  -s, --switch HOST:PORT[/QPN]\n"
		"                          the aggregation switch, for switch and auto (QPN: its\n"
		"                          UD QP, on verbs devices); again for each further plane\n"
		"                          (up to 8)\n"
		"      --spine HOST:PORT[/QPN]\n"
		"                          hierarchy: the spine above the -s switches, which are then\n"
		"                          the leaves of one plane (node i on leaf i*leaves/nodes)\n"
		"  -D, --device DEV        the device (crxe_lo); %%d in DEV is the node's index\n"
		"                          (IBVC_JOB_NODE, else the process's)\n"
		"      --gid-index N       the GID table entry that is this node's address (0)\n"
		"      --window W          switch: data blocks a node keeps in flight (default: the grant)\n"
		"      --e2e-ack           switch: slide windows on node 0's ACK, not on the result\n"
		"      --gap-us US         a compute gap of US microseconds before each collective\n"
		"                          (a training-like loop; use with -z 1)\n"
		"      --ran-log FILE      write \"MID WC_FLAGS\" per completion to FILE (%%d: the\n"
		"                          process's index), to see how each message ran\n"
		"      --spin-us US        poll (yielding the processor between polls) this long\n"
		"                          before sleeping on the channel (2000)\n"
		"      --boot ADDR --node I --nodes N\n"
		"                          the rendezvous (default: IBVC_BOOT_ADDR/NODE/NODES,\n"
		"                          as ibv_coll_run sets them; else a PMIx launcher's\n"
		"                          (mpirun, srun); --nodes 1 alone: this node alone)\n"
		"      --progress, --no-progress\n"
		"                          a line per size on stderr as the sweep goes (default:\n"
		"                          when stderr, or ibv_coll_run's, is a terminal)\n"
		"  -V, --version           print the version and exit\n"
		"  -h, --help              this text\n");
}

static int parse_int(const char *s, long lo, long hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

/* HOST:PORT, with an IPv4 host or a bracketed IPv6 one, into a GID: the
 * next plane's switch. */
/* HOST:PORT[/QPN] into gid, port and qpn. */
static int parse_sw_addr(const char *s, uint8_t gid[16], uint16_t *port_out, uint32_t *qpn_out)
{
	char host[INET6_ADDRSTRLEN + 2], hp[INET6_ADDRSTRLEN + 16];
	const char *slash = strchr(s, '/');
	int port, qpn = 0;
	if (slash && parse_int(slash + 1, 1, 0xffffff, &qpn))
		return -1;
	size_t hplen = slash ? (size_t)(slash - s) : strlen(s);
	if (hplen >= sizeof(hp))
		return -1;
	memcpy(hp, s, hplen);
	hp[hplen] = 0;
	*qpn_out = (uint32_t)qpn;
	s = hp;
	const char *colon = strrchr(s, ':');
	if (!colon || (size_t)(colon - s) >= sizeof(host) || parse_int(colon + 1, 0, 65535, &port))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	memset(gid, 0, 16);
	if (inet_pton(AF_INET, host, gid + 12) == 1) {
		gid[10] = gid[11] = 0xff; /* IPv4-mapped */
	} else {
		size_t n = strlen(host);
		if (n < 3 || host[0] != '[' || host[n - 1] != ']')
			return -1;
		host[n - 1] = 0;
		if (inet_pton(AF_INET6, host + 1, gid) != 1)
			return -1;
	}
	*port_out = (uint16_t)port;
	return 0;
}

static int parse_switch(const char *s, struct perf_opts *o)
{
	if (o->sw_planes == (int)(sizeof(o->sws) / sizeof(o->sws[0])))
		return -1;
	if (parse_sw_addr(s, o->sws[o->sw_planes].gid, &o->sws[o->sw_planes].port,
			  &o->sws[o->sw_planes].qpn))
		return -1;
	if (!o->sw)
		o->sw = s;
	o->sw_planes++;
	return 0;
}

static int parse_topology(const char *s, int *out)
{
	for (size_t t = 0; t < sizeof(topo_names) / sizeof(topo_names[0]); t++)
		if (topo_names[t] && !strcasecmp(s, topo_names[t])) {
			*out = (int)t;
			return 0;
		}
	/* Any number goes to the device as it is: let it say what it takes. */
	return parse_int(s, 0, 1 << 30, out);
}

static int parse_coll(const char *s, int *out)
{
	for (int c = 0; c < NCOLLS; c++)
		if (!strcasecmp(s, colls[c].name)) {
			*out = c;
			return 0;
		}
	if (!strcasecmp(s, "broadcast")) {
		*out = 2;
		return 0;
	}
	return -1;
}

/* Sizes are bytes per rank, rounded down to whole elements (as nccl-tests
 * does).  A size that rounds to nothing would print a row of size 0 the
 * user did not ask for: refuse -b or -e between 1 byte and one element
 * (nccl-tests prints such a row silently). */
static int check_sizes(const struct perf_opts *o)
{
	size_t ts = pd_types[o->type].size;
	if (colls[o->coll].op == IBV_COLL_WR_BARRIER)
		return 0;
	if ((o->minbytes && o->minbytes < ts) || (o->maxbytes && o->maxbytes < ts)) {
		fprintf(stderr,
			PROG ": -%c %zu is less than one %s element (%zu bytes); give 0 "
			     "for an empty collective or at least %zu\n",
			o->minbytes && o->minbytes < ts ? 'b' : 'e',
			o->minbytes && o->minbytes < ts ? o->minbytes : o->maxbytes,
			pd_types[o->type].name, ts, ts);
		return -1;
	}
	return 0;
}

/* The rendezvous: --boot with --node/--nodes, else the launcher's, else
 * this node alone when --nodes 1 asks for it.  0, or -1 with a message. */
static int resolve_boot(struct perf_opts *o, int node, int nodes)
{
	if (o->boot) {
		if (node < 0 || nodes < 1 || node >= nodes) {
			fprintf(stderr, PROG ": --boot needs --node I and --nodes N, I < N\n");
			return -1;
		}
		o->node = node;
		o->nodes = nodes;
	} else {
		int err = ibvc_boot_from_env(&o->boot, &o->node, &o->nodes);
		if (err == ENOENT && nodes == 1) { /* asked for: this node alone */
			o->boot = "none";
			o->node = 0;
			o->nodes = 1;
		} else if (err == ENOENT) {
			/* Several copies started by hand (or by a launcher we do
			 * not know) would each run a job of their own. */
			fprintf(stderr,
				PROG ": no rendezvous: run under ibv_coll_run or a PMIx "
				     "launcher (mpirun, srun), give --boot, or --nodes 1 for "
				     "this node alone\n");
			return -1;
		} else if (err || o->nodes > 1024) {
			fprintf(stderr,
				PROG ": the launcher's node index or count is not valid (%s)\n",
				strerror(err ? err : ERANGE));
			return -1;
		}
	}
	return 0;
}

/* The options checked against each other, and the defaults that depend
 * on others.  0, or -1 with a message. */
static int check_opts(struct perf_opts *o)
{
	if (strstr(o->dev, "%d")) {
		const char *pct = strstr(o->dev, "%d");
		if (strchr(pct + 2, '%') || strchr(o->dev, '%') != pct) {
			fprintf(stderr, PROG ": --device takes one %%d and no other %%\n");
			return -1;
		}
		/* The job's node (processes of one node share its device),
		 * which ibv_coll_run gives; else the process's own index. */
		const char *jn = getenv("IBVC_JOB_NODE");
		snprintf(o->dev_buf, sizeof(o->dev_buf), "%.*s%d%s", (int)(pct - o->dev), o->dev,
			 jn ? atoi(jn) : o->node, pct + 2);
		o->dev = o->dev_buf;
	}
	if (o->have_spine && o->sw_planes < 2) {
		fprintf(stderr, PROG ": --spine needs two or more leaf switches (-s)\n");
		return -1;
	}
	if (o->have_spine && o->sw_planes > o->nodes) {
		fprintf(stderr, PROG ": --spine: %d leaves for %d nodes leaves some leaf empty\n",
			o->sw_planes, o->nodes);
		return -1;
	}
	if (o->spin_us < 0)
		o->spin_us = 2000;
	if (o->minbytes > o->maxbytes) {
		fprintf(stderr, PROG ": -b %zu is larger than -e %zu\n", o->minbytes, o->maxbytes);
		return -1;
	}
	if (check_sizes(o))
		return -1;
	/* ibv_coll_run reads its children's stderr through a pipe; it tells
	 * them when its own is a terminal. */
	if (o->progress < 0) {
		const char *tty = getenv("IBVC_RUN_STDERR_TTY");
		o->progress = isatty(2) || (tty && !strcmp(tty, "1"));
	}
	if (colls[o->coll].reduces &&
	    (o->op == PD_MAXLOC || o->op == PD_MINLOC) != pd_is_pair(o->type)) {
		fprintf(stderr,
			PROG ": -o %s with -d %s: maxloc and minloc go with the pairs "
			     "(float_int, double_int, long_int, 2int, short_int), and only they\n",
			pd_op_names[o->op], pd_types[o->type].name);
		return -1;
	}
	if (colls[o->coll].reduces && pd_types[o->type].is_float && o->op >= PD_BAND &&
	    o->op <= PD_LXOR) {
		fprintf(stderr, PROG ": -o %s needs an integer type, not %s\n", pd_op_names[o->op],
			pd_types[o->type].name);
		return -1;
	}
	if ((o->window || o->e2e_ack) && !o->sw) {
		fprintf(stderr, PROG ": --window and --e2e-ack are for a switch (-s)\n");
		return -1;
	}
	if (o->sw && (o->topology == IBV_COLL_TOPO_RING)) {
		fprintf(stderr, PROG ": -s is for -t switch or auto\n");
		return -1;
	}
	return 0;
}

enum {
	OPT_SPIN = 256,
	OPT_BOOT,
	OPT_NODE,
	OPT_NODES,
	OPT_WINDOW,
	OPT_E2E,
	OPT_GID,
	OPT_PROGRESS,
	OPT_NO_PROGRESS,
	OPT_SPINE,
	OPT_GAP,
	OPT_DEPTH,
	OPT_RANLOG
};

static const struct option long_opts[] = {
	{"minbytes", 1, NULL, 'b'},
	{"maxbytes", 1, NULL, 'e'},
	{"stepbytes", 1, NULL, 'i'},
	{"stepfactor", 1, NULL, 'f'},
	{"iters", 1, NULL, 'n'},
	{"warmup_iters", 1, NULL, 'w'},
	{"check", 1, NULL, 'c'},
	{"datatype", 1, NULL, 'd'},
	{"op", 1, NULL, 'o'},
	{"collective", 1, NULL, 'C'},
	{"root", 1, NULL, 'r'},
	{"ranks", 1, NULL, 'k'},
	{"topology", 1, NULL, 't'},
	{"switch", 1, NULL, 's'},
	{"device", 1, NULL, 'D'},
	{"spin-us", 1, NULL, OPT_SPIN},
	{"boot", 1, NULL, OPT_BOOT},
	{"node", 1, NULL, OPT_NODE},
	{"nodes", 1, NULL, OPT_NODES},
	{"help", 0, NULL, 'h'},
	{"window", 1, NULL, OPT_WINDOW},
	{"e2e-ack", 0, NULL, OPT_E2E},
	{"gid-index", 1, NULL, OPT_GID},
	{"blocking", 1, NULL, 'z'},
	{"progress", 0, NULL, OPT_PROGRESS},
	{"no-progress", 0, NULL, OPT_NO_PROGRESS},
	{"version", 0, NULL, 'V'},
	{"spine", 1, NULL, OPT_SPINE},
	{"gap-us", 1, NULL, OPT_GAP},
	{"depth", 1, NULL, OPT_DEPTH},
	{"ran-log", 1, NULL, OPT_RANLOG},
	{NULL, 0, NULL, 0},
};

/* What a run does without options. */
static void set_defaults(struct perf_opts *o)
{
	*o = (struct perf_opts){
		.minbytes = 32 << 20,
		.maxbytes = 32 << 20,
		.stepbytes = 1 << 20,
		.stepfactor = 1,
		.iters = 20,
		.warmup = 5,
		.check = 1,
		.root = 0,
		.ranks = 1,
		.topology = IBV_COLL_TOPO_RING,
		.type = PD_FLOAT,
		.op = PD_SUM,
		.coll = 0,
		.spin_us = -1,
		.depth = 32,
		.dev = "crxe_lo",
		.node = 0,
		.nodes = 1,
		.progress = -1,
	};
}

/* One option and its value into *o: 0, 1 for a bad value, 2 for an
 * option this program does not have. */
static int take_opt(int c, const char *arg, struct perf_opts *o, int *node, int *nodes)
{
	int bad = 0, f = 1;
	switch (c) {
	case 'b': bad = pd_parse_size(arg, &o->minbytes); break;
	case 'e': bad = pd_parse_size(arg, &o->maxbytes); break;
	case 'i': bad = pd_parse_size(arg, &o->stepbytes); break;
	case 'f':
		bad = parse_int(arg, 1, 1 << 20, &f);
		o->stepfactor = (size_t)f;
		break;
	case 'n': bad = parse_int(arg, 1, 1 << 24, &o->iters); break;
	case 'w': bad = parse_int(arg, 0, 1 << 24, &o->warmup); break;
	case 'c': bad = parse_int(arg, 0, 1, &o->check); break;
	case 'd': bad = (o->type = pd_type_by_name(arg)) < 0; break;
	case 'o': bad = (o->op = pd_op_by_name(arg)) < 0; break;
	case 'C': bad = parse_coll(arg, &o->coll); break;
	case 'r': bad = parse_int(arg, 0, 1 << 30, &o->root); break;
	case 'k': bad = parse_int(arg, 1, 64, &o->ranks); break;
	case 't': bad = parse_topology(arg, &o->topology); break;
	case 's': bad = parse_switch(arg, o); break;
	case 'D': o->dev = arg; break;
	case 'z': bad = parse_int(arg, 0, 1, &o->blocking); break;
	case OPT_SPIN: bad = parse_int(arg, 0, 1000000, &o->spin_us); break;
	case OPT_GAP: bad = parse_int(arg, 0, 10000000, &o->gap_us); break;
	case OPT_DEPTH: bad = parse_int(arg, 1, 32, &o->depth); break;
	case OPT_RANLOG: o->ran_log = arg; break;
	case OPT_WINDOW: bad = parse_int(arg, 1, 1 << 20, &o->window); break;
	case OPT_E2E: o->e2e_ack = 1; break;
	case OPT_GID: bad = parse_int(arg, 0, 255, &o->gid_index); break;
	case OPT_SPINE:
		bad = parse_sw_addr(arg, o->spine.gid, &o->spine.port, &o->spine.qpn);
		o->have_spine = !bad;
		break;
	case OPT_BOOT: o->boot = arg; break;
	case OPT_NODE: bad = parse_int(arg, 0, 1023, node); break;
	case OPT_NODES: bad = parse_int(arg, 1, 1024, nodes); break;
	case OPT_PROGRESS: o->progress = 1; break;
	case OPT_NO_PROGRESS: o->progress = 0; break;
	default: return 2;
	}
	return bad ? 1 : 0;
}

int parse_opts(int argc, char **argv, struct perf_opts *o)
{
	const char *env_k = getenv("IBVC_RANKS_PER_NODE");
	int c, node = -1, nodes = -1;
	set_defaults(o);
	if (env_k && parse_int(env_k, 1, 64, &o->ranks)) {
		fprintf(stderr, PROG ": IBVC_RANKS_PER_NODE=%s: not a number from 1 to 64\n",
			env_k);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:d:o:C:r:k:t:s:D:z:hV", long_opts,
				NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == 'V')
			return ibvc_print_version(PROG, ibv_coll_version());
		const int bad = take_opt(c, optarg, o, &node, &nodes);
		if (bad == 2) {
			usage(stderr);
			return 2;
		}
		if (bad) {
			const char *name = "?";
			for (const struct option *l = long_opts; l->name; l++)
				if (l->val == c)
					name = l->name;
			fprintf(stderr, PROG ": bad value for --%s: %s\n", name, optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument %s\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (resolve_boot(o, node, nodes) || check_opts(o))
		return 2;
	return -1;
}
