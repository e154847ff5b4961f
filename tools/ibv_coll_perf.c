/*
 * ibv_coll_perf - time one collective over a range of sizes and check its
 * results, printing what nccl-tests' all_reduce_perf prints.
 *
 * One process per node, or several sharing the node's device (ibv_coll_run
 * -p; ibvc_boot_place says which), each serving k local ranks through one
 * collective QP: the node's first process's QP leads the node's part of the
 * job and the others join it with their range of the node's ranks.  For
 * each size: warm-up runs, timed runs (out of place, then in place), and
 * with -c 1 one more run of each whose destinations are compared, element
 * by element, with values computed by a scalar loop (perf_data.h).
 * Process 0 gathers every process's times, keeps the largest, and prints
 * the table for the whole job.
 */
#define _GNU_SOURCE
#include "perf.h"
#include "perf_data.h"

#include <ibv_coll/ibv_coll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* perf_data.h names types and operations by the library's values. */
_Static_assert((int)PD_INT8 == (int)IBV_COLL_DTYPE_INT8 &&
		       (int)PD_UINT8 == (int)IBV_COLL_DTYPE_UINT8 &&
		       (int)PD_HALF == (int)IBV_COLL_DTYPE_FLOAT16 &&
		       (int)PD_BF16 == (int)IBV_COLL_DTYPE_BFLOAT16 &&
		       (int)PD_FLOAT == (int)IBV_COLL_DTYPE_FLOAT32 &&
		       (int)PD_DOUBLE == (int)IBV_COLL_DTYPE_FLOAT64,
	       "perf_data types follow enum ibv_coll_dtype");
_Static_assert((int)PD_SUM == (int)IBV_COLL_OP_SUM && (int)PD_AVG == (int)IBV_COLL_OP_AVG &&
		       (int)PD_BXOR == (int)IBV_COLL_OP_BXOR,
	       "perf_data operations follow enum ibv_coll_op up to bxor");

_Static_assert((int)PD_FLOAT_INT == (int)IBV_COLL_DTYPE_FLOAT32_INT32 &&
		       (int)PD_SHORT_INT == (int)IBV_COLL_DTYPE_INT16_INT32,
	       "perf_data's pairs follow enum ibv_coll_dtype");

/* The library's op for a perf_data one: the same value up to bxor; the
 * logical ops come after MAXLOC and MINLOC there, which perf_data lists
 * last. */
static enum ibv_coll_op coll_op(int op)
{
	switch (op) {
	case PD_MAXLOC: return IBV_COLL_OP_MAXLOC;
	case PD_MINLOC: return IBV_COLL_OP_MINLOC;
	case PD_LAND: return IBV_COLL_OP_LAND;
	case PD_LOR: return IBV_COLL_OP_LOR;
	case PD_LXOR: return IBV_COLL_OP_LXOR;
	default: return (enum ibv_coll_op)op;
	}
}


static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}


static char *src_of(struct perf *p, int r)
{
	return p->arena + p->per * (size_t)r;
}

static char *dst_of(struct perf *p, int r, int inplace)
{
	return inplace ? src_of(p, r) : src_of(p, r) + p->src_cap + GUARD;
}

/* ---- waiting for completions -------------------------------------- */

/* Up to max completions: poll for a short while, then sleep on the
 * completion channel.  While this thread polls, its polls run the NIC and
 * the engine thread sleeps; between polls it yields, so that on a small
 * machine the other nodes' threads (and the switch) get the processor. */
static int wait_wcs(struct perf *p, struct ibv_coll_wc *wc, int max)
{
	double spin_end = now_us() + p->o.spin_us, stall_end = now_us() + STALL_MS * 1e3;
	for (;;) {
		int n = ibv_poll_coll_cq(p->cq, max, wc), err;
		if (n < 0) {
			fprintf(stderr, PROG ": node %d: poll cq failed (%d)\n", p->o.node, n);
			return -1;
		}
		if (n > 0)
			return n;
		if (now_us() < spin_end) {
			sched_yield();
			continue;
		}
		if (!p->armed) {
			/* Arm, then poll once more: a completion that came
			 * before arming raises no event. */
			if ((err = ibv_req_notify_coll_cq(p->cq, 0))) {
				fprintf(stderr, PROG ": node %d: arm cq: %s\n", p->o.node,
					strerror(err));
				return -1;
			}
			p->armed = 1;
			continue;
		}
		struct pollfd pf = {p->ch->fd, POLLIN, 0};
		int r = poll(&pf, 1, 1000);
		if (r < 0 && errno != EINTR) {
			fprintf(stderr, PROG ": node %d: poll: %s\n", p->o.node, strerror(errno));
			return -1;
		}
		if (r <= 0) {
			if (now_us() > stall_end) {
				fprintf(stderr, PROG ": node %d: no completion for %d s\n",
					p->o.node, STALL_MS / 1000);
				return -1;
			}
			continue;
		}
		struct ibv_coll_cq *ecq;
		void *ectx;
		if ((err = ibv_get_coll_cq_event(p->ch, &ecq, &ectx))) {
			fprintf(stderr, PROG ": node %d: cq event: %s\n", p->o.node, strerror(err));
			return -1;
		}
		ibv_ack_coll_cq_events(ecq, 1);
		p->armed = 0;
	}
}

/* Post n copies of *tmpl, at most --depth (QDEPTH) in flight, and wait
 * for all. */
static int run_ops(struct perf *p, const struct ibv_coll_send_wr *tmpl, int n, size_t bytes)
{
	struct ibv_coll_send_wr wrs[QDEPTH], *bad;
	struct ibv_coll_wc wc[QDEPTH];
	int posted = 0, done = 0, err;
	const int depth = p->o.blocking ? 1 : p->o.depth < QDEPTH ? p->o.depth : QDEPTH;
	while (done < n) {
		int batch = n - posted < depth - (posted - done) ? n - posted
								 : depth - (posted - done);
		for (int i = 0; i < batch; i++) {
			wrs[i] = *tmpl;
			wrs[i].wr_id = (uint64_t)(posted + i);
			wrs[i].next = i + 1 < batch ? &wrs[i + 1] : NULL;
		}
		if (batch > 0 && p->o.gap_us > 0) {
			/* The compute between two collectives of a training loop. */
			struct timespec ts = {p->o.gap_us / 1000000,
					      (p->o.gap_us % 1000000) * 1000L};
			nanosleep(&ts, NULL);
		}
		if (batch > 0 && (err = ibv_post_coll_send(p->qp, wrs, &bad))) {
			fprintf(stderr, PROG ": node %d: post %s: %s (%s)\n", p->o.node,
				ibv_coll_wr_opcode_str(tmpl->opcode), strerror(err), errname(err));
			return -1;
		}
		posted += batch > 0 ? batch : 0;
		int got = wait_wcs(p, wc, QDEPTH);
		if (got < 0)
			return -1;
		for (int i = 0; i < got; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr,
					PROG ": node %d: %s of %zu bytes per rank failed: %s (%s), "
					     "vendor_err 0x%x\n",
					p->o.node, ibv_coll_wr_opcode_str(tmpl->opcode), bytes,
					ibv_coll_wc_status_str(wc[i].status),
					ibv_coll_status_str(wc[i].coll_status), wc[i].vendor_err);
				return -1;
			}
			p->flags |= wc[i].wc_flags;
			if (p->ran_log)
				fprintf(p->ran_log, "%u %#x\n", wc[i].mid, wc[i].wc_flags);
		}
		done += got;
	}
	return 0;
}

/* ---- data ---------------------------------------------------------- */

/* Sources get their inputs; destinations (and every guard) the fill. */
static void fill(struct perf *p, size_t count, int inplace)
{
	const struct coll_info *ci = &colls[p->o.coll];
	int t = p->o.type, op = p->o.op;
	size_t ts = pd_types[t].size, sn = count * (ci->src_k ? p->K : 1),
	       dn = count * (ci->dst_k ? p->K : 1);
	for (int r = 0; r < p->o.ranks; r++) {
		char *s = src_of(p, r), *d = dst_of(p, r, inplace);
		uint64_t g = p->first + (uint64_t)r;
		for (size_t i = 0; i < sn; i++)
			pd_store(t, s, i, pd_input(t, op, p->K, g, i));
		memset(s + sn * ts, FILL, GUARD);
		if (!inplace)
			memset(d, FILL, dn * ts + GUARD);
	}
}

/* Compare every element of every local destination with its expected
 * value; count the guard bytes written over into *oob. */
static uint64_t check(struct perf *p, size_t count, int inplace, uint64_t *oob)
{
	const struct coll_info *ci = &colls[p->o.coll];
	int t = p->o.type, op = p->o.op;
	uint32_t K = p->K, root = (uint32_t)p->o.root;
	size_t ts = pd_types[t].size, dn = count * (ci->dst_k ? K : 1);
	uint64_t wrong = 0;
	char fillv[8];
	memset(fillv, FILL, sizeof(fillv));
	if (ci->op == IBV_COLL_WR_BARRIER)
		return 0;
	for (size_t e = 0; e < dn; e++) {
		struct pd_val common = {0, 0, 0};
		if (ci->op == IBV_COLL_WR_ALLREDUCE || ci->op == IBV_COLL_WR_REDUCE)
			common = pd_expect(t, op, K, e);
		else if (ci->op == IBV_COLL_WR_BCAST)
			common = pd_input(t, op, K, root, e);
		else if (ci->op == IBV_COLL_WR_ALLGATHER)
			common = pd_input(t, op, K, e / count, e % count);
		for (int r = 0; r < p->o.ranks; r++) {
			const char *d = dst_of(p, r, inplace);
			uint32_t g = p->first + (uint32_t)r;
			struct pd_val want = common;
			if (ci->op == IBV_COLL_WR_REDUCE && g != root) {
				/* not the root: untouched */
				if (!inplace) {
					wrong += memcmp(d + e * ts, fillv, ts) != 0;
					continue;
				}
				want = pd_input(t, op, K, g, e);
			} else if (ci->op == IBV_COLL_WR_REDUCE_SCATTER) {
				want = pd_expect(t, op, K, (uint64_t)g * count + e);
			}
			wrong += !pd_matches(t, d, e, want);
		}
	}
	for (int r = 0; r < p->o.ranks; r++) {
		const unsigned char *guard = (const unsigned char *)dst_of(p, r, inplace) +
					     (inplace ? count * (ci->src_k ? K : 1) : dn) * ts;
		for (int i = 0; i < GUARD; i++)
			*oob += guard[i] != FILL;
	}
	return wrong;
}

/* ---- one size -------------------------------------------------------- */

static void make_wr(struct perf *p, size_t count, int inplace, struct ibv_coll_send_wr *wr)
{
	const struct coll_info *ci = &colls[p->o.coll];
	size_t ts = pd_types[p->o.type].size;
	for (int r = 0; r < p->o.ranks; r++) {
		size_t sb = count * ts * (ci->src_k ? p->K : 1),
		       db = count * ts * (ci->dst_k ? p->K : 1);
		p->src[r] = (struct ibv_sge){(uintptr_t)src_of(p, r), (uint32_t)sb, p->mr->lkey};
		p->dst[r] = (struct ibv_sge){(uintptr_t)dst_of(p, r, inplace), (uint32_t)db,
					     p->mr->lkey};
	}
	memset(wr, 0, sizeof(*wr));
	wr->opcode = ci->op;
	wr->send_flags = IBV_COLL_SEND_SIGNALED;
	wr->sg_list = p->src;
	wr->num_sge = ci->op == IBV_COLL_WR_BARRIER ? 0 : p->o.ranks;
	wr->wr.coll.dst_list = p->dst;
	wr->wr.coll.count = count;
	wr->wr.coll.op = coll_op(p->o.op);
	wr->wr.coll.dtype = (enum ibv_coll_dtype)p->o.type;
	wr->wr.coll.root = (uint32_t)p->o.root;
}

static int bench_size(struct perf *p, size_t count, struct size_result *res)
{
	const struct coll_info *ci = &colls[p->o.coll];
	size_t bytes = count * pd_types[p->o.type].size;
	memset(res, 0, sizeof(*res));
	p->flags = 0;
	for (int inplace = 0; inplace < 2; inplace++) {
		struct ibv_coll_send_wr wr;
		if (inplace && !ci->inplace) {
			res->us[1] = -1;
			break;
		}
		make_wr(p, count, inplace, &wr);
		fill(p, count, inplace);
		if (ibvc_boot_barrier(p->boot) || run_ops(p, &wr, p->o.warmup, bytes) ||
		    ibvc_boot_barrier(p->boot))
			return -1;
		/* comp_mask 0: the first layout, which has tx_bytes (garbage
		 * there was refused with EINVAL, and the column read 0).
		 * Out of place, each snapshot is taken between two barriers:
		 * a device that several nodes share (whose leads each read
		 * all of its traffic) then counts every node's runs, and
		 * nothing of another node's warm-up or check. */
		struct ibv_coll_counters c0 = {0}, c1 = {0};
		int have = !ibv_query_coll_counters(p->ctx, &c0);
		if (!inplace && ibvc_boot_barrier(p->boot))
			return -1;
		double t0 = now_us();
		if (run_ops(p, &wr, p->o.iters, bytes))
			return -1;
		res->us[inplace] = (now_us() - t0) / p->o.iters;
		if (!inplace && ibvc_boot_barrier(p->boot))
			return -1;
		if (!inplace && have && !ibv_query_coll_counters(p->ctx, &c1))
			res->wire = (double)(c1.tx_bytes - c0.tx_bytes) / p->o.iters;
		if (!inplace && ibvc_boot_barrier(p->boot))
			return -1;
		if (p->o.check) {
			fill(p, count, inplace);
			if (run_ops(p, &wr, 1, bytes))
				return -1;
			res->wrong[inplace] = check(p, count, inplace, &res->oob);
		}
	}
	res->flags = p->flags;
	return 0;
}

/* ---- output ---------------------------------------------------------- */

static void ran_str(unsigned f, char *out, size_t len)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {
		{IBV_COLL_WC_LOCAL, "local"},	    {IBV_COLL_WC_RING, "ring"},
		{IBV_COLL_WC_SWITCH, "switch"},	    {IBV_COLL_WC_HIERARCHY, "hierarchy"},
		{IBV_COLL_WC_FALLBACK, "fallback"},
	};
	out[0] = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (f & names[i].bit)
			snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? "+" : "",
				 names[i].name);
	if (!out[0])
		snprintf(out, len, "?");
}

static void print_header(const struct perf *p)
{
	const struct perf_opts *o = &p->o;
	const struct coll_info *ci = &colls[o->coll];
	char gid[INET6_ADDRSTRLEN];
	int same_k = 1, multi = 0;
	uint32_t per_node[64] = {0}; /* each job node's ranks */
	for (int i = 0; i < o->nodes; i++) {
		per_node[p->nodes[i].jnode] += p->nodes[i].m.num_ranks;
		multi |= p->nodes[i].local > 0;
	}
	for (int j = 1; j < p->pl.nodes; j++)
		same_k &= per_node[j] == per_node[0];
	printf("# ibv_coll_perf: %s, %s, %s\n", ci->name,
	       ci->op == IBV_COLL_WR_BARRIER ? "none" : pd_types[o->type].name,
	       ci->reduces ? pd_op_names[o->op] : "none");
	printf("# nNodes %d ", p->pl.nodes);
	if (multi)
		printf("nProcs %d ", o->nodes);
	printf("ranksPerNode ");
	if (same_k)
		printf("%u", per_node[0]);
	else
		printf("mixed");
	printf(" nRanks %u minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
	       "validation: %d\n",
	       p->K, o->minbytes, o->maxbytes, o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
	       o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
	printf("# device %s topology %s collective %s\n", o->dev, topo_name(o->topology), ci->name);
	printf("#\n# Using devices\n");
	/* A process per line, by node: with several processes per node,
	 * "Node 1.2" is node 1's process 2 (0 leads). */
	for (int j = 0; j < p->pl.nodes; j++)
		for (int i = 0; i < o->nodes; i++) {
			const struct node_info *n = &p->nodes[i];
			char name[24];
			if (n->jnode != j)
				continue;
			if (multi)
				snprintf(name, sizeof(name), "%d.%d", j, n->local);
			else
				snprintf(name, sizeof(name), "%2d", j);
			inet_ntop(AF_INET6, n->m.gid.raw, gid, sizeof(gid));
			printf("#  Node %s Ranks %3u-%-3u Pid %7d on %12s device %s gid %s udp %u "
			       "qpn 0x%06x\n",
			       name, n->first, n->first + n->m.num_ranks - 1, n->pid, n->host,
			       o->dev, gid, n->m.udp_port, n->m.qp_num);
		}
	printf("#\n");
	printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
	       "in-place\n",
	       "", "", "", "", "");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %6s  %s\n",
	       "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
	       "algbw", "busbw", "#wrong", "wire/S", "ran");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
	       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
	       "");
	fflush(stdout);
}

/* The time column as nccl-tests formats it. */
static void print_time(double us)
{
	printf("  %7.*f", us >= 10000 ? 0 : us >= 100 ? 1 : 2, us);
}

/* Whether process i is the first lead on its device: no lead before it
 * has its address and UDP port. */
static int first_on_device(const struct perf *p, int i)
{
	const struct ibv_coll_member *m = &p->nodes[i].m;
	for (int j = 0; j < i; j++)
		if (!p->nodes[j].local && p->nodes[j].m.udp_port == m->udp_port &&
		    !memcmp(&p->nodes[j].m.gid, &m->gid, sizeof(m->gid)))
			return 0;
	return 1;
}

/* One row from every node's results; returns the busbw values added to
 * *bw_sum and their number to *bw_n. */
static void print_row(const struct perf *p, size_t count, const struct size_result *all,
		      uint64_t *wrong_total, uint64_t *oob_total, double *bw_sum, int *bw_n)
{
	const struct perf_opts *o = &p->o;
	const struct coll_info *ci = &colls[o->coll];
	size_t bytes = count * pd_types[o->type].size;
	struct size_result m = all[0];
	for (int i = 1; i < o->nodes; i++) {
		for (int j = 0; j < 2; j++) {
			if (all[i].us[j] > m.us[j])
				m.us[j] = all[i].us[j];
			m.wrong[j] += all[i].wrong[j];
		}
		m.oob += all[i].oob;
		m.flags |= all[i].flags;
	}
	*oob_total += m.oob;
	printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count,
	       ci->op == IBV_COLL_WR_BARRIER ? "none" : pd_types[o->type].name,
	       ci->reduces ? pd_op_names[o->op] : "none", ci->rooted ? o->root : -1);
	double n = p->K, algbytes = (double)bytes * (ci->src_k || ci->dst_k ? n : 1);
	for (int j = 0; j < 2; j++) {
		if (m.us[j] < 0) {
			printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
			continue;
		}
		double algbw = m.us[j] > 0 ? algbytes / m.us[j] / 1e3 : 0;
		double busbw = algbw * busbw_factor(ci->op, n);
		print_time(m.us[j]);
		printf("  %6.2f  %6.2f", algbw, busbw);
		if (o->check)
			printf("  %5" PRIu64, m.wrong[j]);
		else
			printf("  %5s", "N/A");
		*wrong_total += m.wrong[j];
		*bw_sum += busbw;
		(*bw_n)++;
	}
	/* What a node's port sent per run, over the bytes per rank: the mean
	 * over the nodes (switch: about 1; ring: about 2(N-1)/N).  A node's
	 * processes share its device, whose lead sends for the node: the
	 * leads' counts.  Leads on one shared device (one address and UDP
	 * port) each read the whole device's counters, which hold every one
	 * of its nodes' traffic: that device counts once. */
	double wire = 0;
	for (int i = 0; i < o->nodes; i++)
		if (!p->nodes[i].local && first_on_device(p, i))
			wire += all[i].wire;
	wire /= p->pl.nodes;
	if (bytes)
		printf("  %6.3f", wire / (double)bytes);
	else
		printf("  %6s", "-");
	char ran[64];
	ran_str(m.flags, ran, sizeof(ran));
	printf("  %s\n", ran);
	fflush(stdout);
}

/* ---- the sweep ----------------------------------------------------- */

/* How many sizes the sweep runs, for the progress lines. */
static int count_sizes(const struct perf_opts *o, size_t ts, int barrier)
{
	int n = 0;
	for (size_t size = barrier ? 0 : o->minbytes; size <= o->maxbytes;
	     size = o->stepfactor > 1 ? (size ? size * o->stepfactor : ts) : size + o->stepbytes) {
		n++;
		if (barrier || (o->stepfactor <= 1 && !o->stepbytes))
			break;
	}
	return n;
}

/* --progress: on stderr, so that stdout stays nccl-tests' table. */
static void print_progress(const struct perf *p, int i, int n, size_t count, double t0)
{
	const struct perf_opts *o = &p->o;
	fprintf(stderr, PROG ": [%d/%d] %zu bytes per rank, %d+%d runs, %.1f s so far\n", i, n,
		count * pd_types[o->type].size, o->warmup, o->iters, (now_us() - t0) / 1e6);
}

static int sweep(struct perf *p)
{
	const struct perf_opts *o = &p->o;
	const int barrier = colls[o->coll].op == IBV_COLL_WR_BARRIER;
	size_t ts = pd_types[o->type].size;
	struct size_result *all = calloc((size_t)o->nodes, sizeof(*all));
	uint64_t wrong = 0, oob = 0;
	double bw_sum = 0;
	int bw_n = 0, err = 0, failed = 0, nsizes = count_sizes(o, ts, barrier), i = 0;
	double t0 = now_us();
	if (!all)
		return -1;
	if (o->node == 0)
		print_header(p);
	for (size_t size = barrier ? 0 : o->minbytes; size <= o->maxbytes;
	     size = o->stepfactor > 1 ? (size ? size * o->stepfactor : ts) : size + o->stepbytes) {
		struct size_result mine;
		size_t count = size / ts;
		mine.failed = 0;
		if (o->node == 0 && o->progress)
			print_progress(p, ++i, nsizes, count, t0);
		if (bench_size(p, count, &mine)) {
			failed = 1; /* the others learn it as the rendezvous breaks */
			break;
		}
		if ((err = ibvc_boot_allgather(p->boot, &mine, sizeof(mine), all))) {
			fprintf(stderr, PROG ": node %d: gathering results: %s\n", o->node,
				strerror(err));
			failed = 1;
			break;
		}
		if (o->node == 0)
			print_row(p, count, all, &wrong, &oob, &bw_sum, &bw_n);
		else
			for (int j = 0; j < 2; j++)
				wrong += mine.wrong[j];
		if (barrier || (o->stepfactor <= 1 && !o->stepbytes))
			break;
	}
	if (o->node == 0 && !failed) {
		printf("# Out of bounds values : %" PRIu64 " %s\n", oob, oob ? "FAILED" : "OK");
		printf("# Wrong elements       : %" PRIu64 " %s\n", wrong, wrong ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g \n#\n", bw_n ? bw_sum / bw_n : 0.0);
	} else if (wrong)
		fprintf(stderr, PROG ": node %d: %" PRIu64 " wrong elements\n", o->node, wrong);
	free(all);
	if (!failed && (err = ibvc_boot_barrier(p->boot))) /* everyone done before anyone leaves */
		fprintf(stderr, PROG ": node %d: final barrier: %s\n", o->node, strerror(err));
	return failed || err || wrong || oob ? -1 : 0;
}

static int open_ran_log(struct perf *p)
{
	char path[4096];
	if (!p->o.ran_log)
		return 0;
	snprintf(path, sizeof(path), p->o.ran_log, p->o.node);
	if (!(p->ran_log = fopen(path, "w"))) {
		fprintf(stderr, PROG ": --ran-log %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct perf p;
	memset(&p, 0, sizeof(p));
	int rc = parse_opts(argc, argv, &p.o);
	if (rc >= 0)
		return rc;
	rc = perf_open_device(&p) || perf_join_job(&p) || open_ran_log(&p) ||
			     perf_alloc_buffers(&p) || sweep(&p)
		     ? 1
		     : 0;
	perf_teardown(&p);
	if (p.ran_log)
		fclose(p.ran_log);
	return rc;
}
