/*
 * host_ring - claim 004's experiment: the host's CPU per allreduce when the
 * whole collective is one work request on a collective QP (the device runs
 * it), against the same ring driven by the host step by step over RC QPs
 * (one SEND to the right neighbour and one receive from the left per step,
 * the host reducing each received chunk and starting the next step), as
 * libraries without offload do.  One process per node, under ibv_coll_run
 * (or a PMIx launcher); fp32 sum; every result checked against a scalar
 * loop.  Both wait for completions on a completion channel (blocking), so
 * the CPU time measured is the work each model asks of the application's
 * thread (CLOCK_THREAD_CPUTIME_ID around the collective; the emulated
 * NIC's engine thread is the device's, not the host's).
 *
 *   ibv_coll_run -n N -- host_ring [-m host|device] [-s BYTES] [-i ITERS]
 *
 * Prints one line: mode, nodes, bytes, and per collective the wall time,
 * the application thread's CPU time and its wake-ups (completion events),
 * medians over the iterations after two untimed ones.
 */
#define _GNU_SOURCE
#include "ibvc_boot.h"

#include <ibv_coll/ibv_coll.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int node, nodes;

static void die(const char *what, int err)
{
	fprintf(stderr, "host_ring %d: %s: %s\n", node, what, strerror(err));
	exit(2);
}

static double now_us(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static struct ibv_coll_cq *cq;
static struct ibv_coll_comp_channel *ch;
static unsigned wakeups;

/* One completion, blocking on the channel when there is none; it must be
 * a success. */
static void wait_wc(struct ibv_coll_wc *wc)
{
	for (;;) {
		int n = ibv_poll_coll_cq(cq, 1, wc);
		if (n < 0)
			die("poll", -n);
		if (n == 0) {
			if (ibv_req_notify_coll_cq(cq, 0))
				die("notify", errno);
			n = ibv_poll_coll_cq(cq, 1, wc);
		}
		if (n > 0) {
			if (wc->status != IBV_WC_SUCCESS) {
				fprintf(stderr, "host_ring %d: completion %s\n", node,
					ibv_coll_wc_status_str(wc->status));
				exit(1);
			}
			return;
		}
		struct ibv_coll_cq *ecq;
		void *ectx;
		if (ibv_get_coll_cq_event(ch, &ecq, &ectx))
			die("cq event", errno);
		ibv_ack_coll_cq_events(ecq, 1);
		wakeups++;
	}
}

struct addr {
	union ibv_gid gid;
	uint16_t port;
	uint32_t qpn_r, qpn_l, qpn_c; /* RC to the right, RC to the left, collective */
};

static void rc_connect(struct ibv_coll_qp *qp, const struct addr *peer, uint32_t qpn)
{
	struct ibv_coll_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
	int err = ibv_modify_coll_qp(
		qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS);
	if (err)
		die("RC INIT", err);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = qpn;
	a.rq_psn = 0;
	a.min_rnr_timer = 1;
	a.max_dest_rd_atomic = 1;
	a.ah_attr.dgid = peer->gid;
	a.ah_attr.udp_port = peer->port;
	err = ibv_modify_coll_qp(qp, &a,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_AV | IBV_COLL_QP_PATH_MTU |
					 IBV_COLL_QP_DEST_QPN | IBV_COLL_QP_RQ_PSN |
					 IBV_COLL_QP_MIN_RNR_TIMER |
					 IBV_COLL_QP_MAX_DEST_RD_ATOMIC);
	if (err)
		die("RC RTR", err);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	err = ibv_modify_coll_qp(qp, &a,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_SQ_PSN | IBV_COLL_QP_TIMEOUT |
					 IBV_COLL_QP_RETRY_CNT | IBV_COLL_QP_RNR_RETRY |
					 IBV_COLL_QP_MAX_QP_RD_ATOMIC);
	if (err)
		die("RC RTS", err);
}

static struct ibv_coll_qp *make_qp(struct ibv_coll_pd *pd, enum ibv_coll_qp_type t)
{
	struct ibv_coll_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = t;
	/* Every step's receive is posted before the first send: 2(N - 1). */
	const uint32_t depth = nodes > 32 ? 2 * (uint32_t)nodes : 64;
	ia.cap.max_send_wr = depth;
	ia.cap.max_send_sge = 1;
	if (t == IBV_COLL_QPT_RC) {
		ia.cap.max_recv_wr = depth;
		ia.cap.max_recv_sge = 1;
	}
	struct ibv_coll_qp *qp = ibv_create_coll_qp(pd, &ia);
	if (!qp)
		die("create qp", errno);
	return qp;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The job: everything one process holds. */
static struct ibvc_boot *boot;
static struct ibv_coll_mr *mr;
static struct ibv_coll_qp *qr, *ql, *qc; /* RC right, RC left, collective */
static float *data, *out, *tmp;
static size_t n, chunk;
static struct ibv_coll_member *members;
static struct ibv_coll_job_attr job;

static struct ibv_coll_context *open_device(void)
{
	const char *dev = getenv("IBV_COLL_TEST_DEV") ? getenv("IBV_COLL_TEST_DEV") : "crxe_lo";
	int nd = 0;
	struct ibv_coll_device **list = ibv_get_coll_device_list(&nd);
	struct ibv_coll_context *ctx = NULL;
	for (int i = 0; list && i < nd && !ctx; i++)
		if (!strcmp(ibv_get_coll_device_name(list[i]), dev))
			ctx = ibv_open_coll_device(list[i]);
	ibv_free_coll_device_list(list);
	if (!ctx)
		die("open device", ENODEV);
	return ctx;
}

/* The collective QP given the ring job of every node's address. */
static void install_job(const struct addr *all)
{
	members = calloc((size_t)nodes, sizeof(*members));
	for (int i = 0; i < nodes; i++) {
		members[i].gid = all[i].gid;
		members[i].udp_port = all[i].port;
		members[i].num_ranks = 1;
		members[i].qp_num = all[i].qpn_c;
	}
	memset(&job, 0, sizeof(job));
	job.jid = 4;
	job.node_index = (uint32_t)node;
	job.num_nodes = (uint32_t)nodes;
	job.members = members;
	job.topology = IBV_COLL_TOPO_RING;
	job.seg_count = 256;
	job.job_key = 0x4004;
	struct ibv_coll_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	int err = ibv_modify_coll_qp(qc, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT);
	if (err)
		die("INIT", err);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.job = &job;
	err = ibv_modify_coll_qp(qc, &a,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU);
	if (err)
		die("RTR", err);
	a.qp_state = IBV_QPS_RTS;
	err = ibv_modify_coll_qp(qc, &a, IBV_COLL_QP_STATE);
	if (err)
		die("RTS", err);
}

/* Device, memory, QPs, and the others met: RC QPs connected to the
 * neighbours, or the collective QP given the job. */
static void setup(int host)
{
	struct ibv_coll_context *ctx = open_device();
	struct ibv_coll_pd *pd = ibv_alloc_coll_pd(ctx);
	ch = ibv_create_coll_comp_channel(ctx);
	cq = ch ? ibv_create_coll_cq(ctx, 256 + 4 * nodes, NULL, ch, 0) : NULL;
	if (!pd || !cq)
		die("pd/channel/cq", errno);
	/* data (n floats), the result (device mode), the received chunks */
	const size_t floats = 2 * n + (size_t)nodes * chunk;
	data = calloc(floats, sizeof(float));
	if (!data)
		die("memory", ENOMEM);
	out = data + n;
	tmp = data + 2 * n;
	mr = ibv_reg_coll_mr(pd, data, floats * 4, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("register", errno);
	struct addr me, *all = calloc((size_t)nodes, sizeof(*all));
	memset(&me, 0, sizeof(me));
	struct ibv_coll_port_attr pa;
	if (ibv_query_coll_port(ctx, 1, &pa) || ibv_query_coll_gid(ctx, 1, 0, &me.gid))
		die("port", EIO);
	me.port = pa.udp_port;
	if (host) {
		qr = make_qp(pd, IBV_COLL_QPT_RC);
		ql = make_qp(pd, IBV_COLL_QPT_RC);
		me.qpn_r = qr->qp_num;
		me.qpn_l = ql->qp_num;
	} else {
		qc = make_qp(pd, IBV_COLL_QPT_COLL);
		me.qpn_c = qc->qp_num;
	}
	if (ibvc_boot_allgather(boot, &me, sizeof(me), all))
		die("exchange", EIO);
	const int right = (node + 1) % nodes, left = (node + nodes - 1) % nodes;
	if (host) {
		rc_connect(qr, &all[right], all[right].qpn_l);
		rc_connect(ql, &all[left], all[left].qpn_r);
	} else {
		install_job(all);
	}
	free(all);
	ibvc_boot_barrier(boot);
}

/* Host-driven: every step's receive, posted before anyone sends. */
static void post_receives(void)
{
	for (int s = 0; s < 2 * (nodes - 1); s++) {
		const int rs = s < nodes - 1;
		float *dst = rs ? tmp + (size_t)s * chunk /* one chunk a step */
				: data + (size_t)((node - (s - (nodes - 1)) + 2 * nodes) % nodes) *
						     chunk;
		struct ibv_sge sge = {(uintptr_t)dst, (uint32_t)(chunk * 4), mr->lkey};
		struct ibv_coll_recv_wr rw, *bad;
		memset(&rw, 0, sizeof(rw));
		rw.wr_id = (uint64_t)s;
		rw.sg_list = &sge;
		rw.num_sge = 1;
		int err = ibv_post_coll_recv(ql, &rw, &bad);
		if (err)
			die("post recv", err);
	}
}

/* The ring driven by the host.  Reduce-scatter step k: send chunk node - k
 * (reduced so far), take chunk node - k - 1 from the left and add ours.
 * Allgather step k: send chunk node + 1 - k, take chunk node - k. */
static void host_allreduce(void)
{
	int sends = 0, recvs = 0;
	for (int s = 0; s < 2 * (nodes - 1); s++) {
		const int rs = s < nodes - 1, k = rs ? s : s - (nodes - 1);
		const size_t send_c = (size_t)((node - k + (rs ? 0 : 1) + 2 * nodes) % nodes);
		struct ibv_sge sge = {(uintptr_t)(data + send_c * chunk), (uint32_t)(chunk * 4),
				      mr->lkey};
		struct ibv_coll_send_wr sw, *bad;
		memset(&sw, 0, sizeof(sw));
		sw.wr_id = 1000 + (uint64_t)s;
		sw.opcode = IBV_COLL_WR_SEND;
		sw.send_flags = IBV_COLL_SEND_SIGNALED;
		sw.sg_list = &sge;
		sw.num_sge = 1;
		int err = ibv_post_coll_send(qr, &sw, &bad);
		if (err)
			die("post send", err);
		/* This step's send done and its chunk in (the left may be
		 * ahead: receives complete in order, counted). */
		while (sends <= s || recvs <= s) {
			struct ibv_coll_wc wc;
			wait_wc(&wc);
			if (wc.wr_id >= 1000)
				sends++;
			else
				recvs++;
		}
		if (rs) {
			float *d = data + (size_t)((node - k - 1 + 2 * nodes) % nodes) * chunk;
			const float *t = tmp + (size_t)k * chunk;
			for (size_t e = 0; e < chunk; e++)
				d[e] += t[e];
		}
	}
}

/* The same allreduce as one collective work request. */
static void device_allreduce(void)
{
	struct ibv_sge ss = {(uintptr_t)data, (uint32_t)(n * 4), mr->lkey};
	struct ibv_sge ds = {(uintptr_t)out, (uint32_t)(n * 4), mr->lkey};
	struct ibv_coll_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_COLL_WR_ALLREDUCE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = &ss;
	wr.num_sge = 1;
	wr.wr.coll.dst_list = &ds;
	wr.wr.coll.count = n;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_FLOAT32;
	int err = ibv_post_coll_send(qc, &wr, &bad);
	if (err)
		die("post", err);
	struct ibv_coll_wc wc;
	wait_wc(&wc);
}

int main(int argc, char **argv)
{
	const char *mode = "device", *addr;
	size_t bytes = 1 << 20;
	int iters = 20, c;
	while ((c = getopt(argc, argv, "m:s:i:")) != -1) {
		switch (c) {
		case 'm': mode = optarg; break;
		case 's': bytes = strtoull(optarg, NULL, 0); break;
		case 'i': iters = atoi(optarg); break;
		default: return 2;
		}
	}
	const int host = !strcmp(mode, "host");
	if ((!host && strcmp(mode, "device")) || iters < 1) {
		fprintf(stderr, "usage: host_ring [-m host|device] [-s BYTES] [-i ITERS]\n");
		return 2;
	}
	if (ibvc_boot_from_env(&addr, &node, &nodes))
		die("no launcher (run under ibv_coll_run)", ENOENT);
	n = bytes / 4 / (size_t)nodes * (size_t)nodes;
	chunk = n / (size_t)nodes;
	if (nodes < 2 || chunk == 0)
		die("at least 2 nodes and a float per node", EINVAL);
	if (ibvc_boot_open(addr, node, nodes, 60000, &boot))
		die("bootstrap", EIO);
	setup(host);

	double *wall = calloc((size_t)iters, sizeof(double));
	double *cpu = calloc((size_t)iters, sizeof(double));
	double wk = 0;
	long wrong = 0;
	for (int it = -2; it < iters; it++) {
		/* Inputs: small integers, exact in any order of summation. */
		for (size_t e = 0; e < n; e++)
			data[e] = (float)((node + 1) * ((int)(e % 7) - 3) + it);
		if (host)
			post_receives();
		ibvc_boot_barrier(boot);
		wakeups = 0;
		const double w0 = now_us(CLOCK_MONOTONIC), c0 = now_us(CLOCK_THREAD_CPUTIME_ID);
		if (host)
			host_allreduce();
		else
			device_allreduce();
		const double c1 = now_us(CLOCK_THREAD_CPUTIME_ID), w1 = now_us(CLOCK_MONOTONIC);
		const float *res = host ? data : out;
		for (size_t e = 0; e < n; e++) {
			float want = (float)(nodes * (nodes + 1) / 2 * ((int)(e % 7) - 3) +
					     nodes * it);
			wrong += res[e] != want;
		}
		if (it >= 0) {
			wall[it] = w1 - w0;
			cpu[it] = c1 - c0;
			wk += wakeups;
		}
	}
	ibvc_boot_barrier(boot);
	qsort(wall, (size_t)iters, sizeof(double), cmp_double);
	qsort(cpu, (size_t)iters, sizeof(double), cmp_double);
	if (node == 0)
		printf("%s,%d,%zu,%.1f,%.1f,%.1f,%ld\n", mode, nodes, n * 4, wall[iters / 2],
		       cpu[iters / 2], wk / iters, wrong);
	else if (wrong)
		fprintf(stderr, "host_ring %d: %ld wrong elements\n", node, wrong);
	ibvc_boot_close(boot);
	return wrong ? 1 : 0;
}
