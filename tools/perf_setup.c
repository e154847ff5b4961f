/*
 * perf_setup - ibv_coll_perf's setup: the device and its queues, the job
 * (one member per node; several processes of a node join its lead's QP),
 * the buffers, and their teardown.
 */
#define _GNU_SOURCE
#include "perf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *errname(int err)
{
	const char *n = strerrorname_np(err);
	return n ? n : "?";
}

int perf_open_device(struct perf *p)
{
	int n, err, found = 0;
	struct ibv_coll_device **list = ibv_get_coll_device_list(&n);
	for (int i = 0; list && i < n && !found; i++)
		if (!strcmp(ibv_get_coll_device_name(list[i]), p->o.dev)) {
			found = 1;
			p->ctx = ibv_open_coll_device(list[i]);
		}
	/* errno means something only when the list or the open failed: with
	 * no device of that name it is whatever a provider left behind. */
	err = found || !list ? errno : ENODEV;
	ibv_free_coll_device_list(list);
	if (!p->ctx) {
		fprintf(stderr, PROG ": node %d: cannot open device %s: %s\n", p->o.node, p->o.dev,
			!list	? strerror(err)
			: found ? strerror(err)
				: "not found (ibv_coll_devinfo -l lists the devices)");
		return -1;
	}
	struct ibv_coll_qp_init_attr ia = {0};
	if (!(p->pd = ibv_alloc_coll_pd(p->ctx)) ||
	    !(p->ch = ibv_create_coll_comp_channel(p->ctx)) ||
	    !(p->cq = ibv_create_coll_cq(p->ctx, 2 * QDEPTH, NULL, p->ch, 0))) {
		fprintf(stderr, PROG ": node %d: pd/channel/cq: %s\n", p->o.node, strerror(errno));
		return -1;
	}
	ia.send_cq = ia.recv_cq = p->cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = QDEPTH;
	ia.cap.max_send_sge = (uint32_t)p->o.ranks;
	if (!(p->qp = ibv_create_coll_qp(p->pd, &ia))) {
		fprintf(stderr, PROG ": node %d: create qp: %s\n", p->o.node, strerror(errno));
		return -1;
	}
	struct ibv_coll_qp_attr a = {0};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if ((err = ibv_modify_coll_qp(p->qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))) {
		fprintf(stderr, PROG ": node %d: qp to INIT: %s\n", p->o.node, strerror(err));
		return -1;
	}
	return 0;
}

/* Meet the other processes: the rendezvous, the job's nodes, and every
 * process's node_info in p->nodes.  *pa and *caps: this device's. */
static int meet(struct perf *p, struct ibv_coll_port_attr *pa, struct ibv_coll_caps *caps)
{
	struct node_info me;
	int err;
	if ((err = ibvc_boot_open(p->o.boot, p->o.node, p->o.nodes, BOOT_TIMEOUT_MS, &p->boot))) {
		fprintf(stderr, PROG ": node %d: rendezvous at %s: %s\n", p->o.node, p->o.boot,
			strerror(err));
		return -1;
	}
	memset(&me, 0, sizeof(me));
	if ((err = ibv_query_coll_port(p->ctx, 1, pa)) ||
	    (err = ibv_query_coll_gid(p->ctx, 1, p->o.gid_index, &me.m.gid)) ||
	    (err = ibv_query_coll_caps(p->ctx, caps))) {
		fprintf(stderr, PROG ": node %d: query device: %s\n", p->o.node, strerror(err));
		return -1;
	}
	if ((err = ibvc_boot_place(p->boot, ibvc_boot_shared_device(caps), &p->pl, NULL))) {
		fprintf(stderr, PROG ": node %d: grouping the processes into nodes: %s\n",
			p->o.node, strerror(err));
		return -1;
	}
	if (p->pl.nodes > 64) {
		fprintf(stderr, PROG ": %d nodes: a job has 64 at most\n", p->pl.nodes);
		return -1;
	}
	me.m.udp_port = pa->udp_port;
	me.m.num_ranks = (uint16_t)p->o.ranks;
	me.m.qp_num = p->qp->qp_num;
	me.pid = (int32_t)getpid();
	me.jnode = p->pl.node;
	me.local = p->pl.local;
	gethostname(me.host, sizeof(me.host) - 1);
	if (!(p->nodes = calloc((size_t)p->o.nodes, sizeof(me))) ||
	    (err = ibvc_boot_allgather(p->boot, &me, sizeof(me), p->nodes))) {
		fprintf(stderr, PROG ": node %d: exchange: %s\n", p->o.node,
			p->nodes ? strerror(err) : "out of memory");
		return -1;
	}
	return 0;
}

/* One member per node: its lead's address and QP, and the node's ranks,
 * its processes' in the order of their local index (a process's ranks
 * follow its node's earlier ones).  Sets p->K, p->first, every process's
 * first rank, and *local_first, this process's first rank in its node. */
static int make_members(struct perf *p, struct ibv_coll_member *members, uint32_t *local_first)
{
	for (int j = 0; j < p->pl.nodes; j++) {
		uint32_t nr = 0;
		for (int l = 0; l < p->o.nodes; l++) /* local index l, if some process has it */
			for (int i = 0; i < p->o.nodes; i++) {
				struct node_info *n = &p->nodes[i];
				if (n->jnode != j || n->local != l)
					continue;
				if (!l)
					members[j] = n->m;
				if (i == p->o.node)
					*local_first = nr;
				n->first = p->K + nr;
				nr += n->m.num_ranks;
			}
		if (nr > UINT16_MAX) {
			fprintf(stderr, PROG ": node %d has %u ranks, more than a member takes\n",
				j, nr);
			return -1;
		}
		members[j].num_ranks = (uint16_t)nr;
		p->K += nr;
	}
	p->first = p->nodes[p->o.node].first;
	return 0;
}

/* This node's Seg units.  Nodes whose leads share one device (one host's
 * nodes on its shared device) split them: each lead's job reserves its
 * range, and the processes joining a lead give the same. */
static void seg_range(const struct perf *p, const struct ibv_coll_member *members, uint32_t units,
		      struct ibv_coll_job_attr *job)
{
	const struct ibv_coll_member *mine = &members[p->pl.node];
	uint32_t devs = 0, idx = 0;
	for (int j = 0; j < p->pl.nodes; j++)
		if (!memcmp(&members[j].gid, &mine->gid, sizeof(mine->gid)) &&
		    members[j].udp_port == mine->udp_port) {
			idx += j < p->pl.node;
			devs++;
		}
	job->seg_count = units / devs;
	job->seg_base = idx * job->seg_count;
}

/* The switches of -s (and --spine), in sw. */
struct switches {
	struct ibv_coll_switch_addr leaves[8], spine;
	struct ibv_coll_switch_attr attr;
	uint8_t member_leaf[64];
};

static void set_switches(const struct perf *p, struct switches *sw, struct ibv_coll_job_attr *job)
{
	memset(sw, 0, sizeof(*sw));
	for (int i = 0; i < p->o.sw_planes; i++) {
		memcpy(sw->leaves[i].gid.raw, p->o.sws[i].gid, 16);
		sw->leaves[i].udp_port = p->o.sws[i].port;
		sw->leaves[i].qp_num = p->o.sws[i].qpn;
	}
	sw->attr.num_planes = (uint32_t)p->o.sw_planes;
	sw->attr.num_leaves = 1;
	sw->attr.leaves = sw->leaves;
	if (p->o.have_spine) { /* one plane: the -s switches are its leaves */
		memcpy(sw->spine.gid.raw, p->o.spine.gid, 16);
		sw->spine.udp_port = p->o.spine.port;
		sw->spine.qp_num = p->o.spine.qpn;
		for (int i = 0; i < p->pl.nodes; i++)
			sw->member_leaf[i] = (uint8_t)(i * p->o.sw_planes / p->pl.nodes);
		sw->attr.num_planes = 1;
		sw->attr.num_leaves = (uint32_t)p->o.sw_planes;
		sw->attr.spines = &sw->spine;
		sw->attr.member_leaf = sw->member_leaf;
	}
	sw->attr.window = (uint32_t)p->o.window;
	sw->attr.flags = p->o.e2e_ack ? IBV_COLL_SWITCH_E2E_ACK : 0;
	job->comp_mask |= IBV_COLL_JOB_ATTR_SWITCH;
	job->sw = &sw->attr;
}

/* The QP to RTR with the job: the leads first, the others joining a QP
 * that has it.  0, or an errno value (-1: the rendezvous failed, said). */
static int to_rtr(struct perf *p, struct ibv_coll_qp_attr *a)
{
	const int mask = IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU;
	int err = 0, berr = 0;
	if (p->pl.local == 0)
		err = ibv_modify_coll_qp(p->qp, a, mask);
	if (p->o.nodes > p->pl.nodes && (berr = ibvc_boot_barrier(p->boot))) {
		fprintf(stderr, PROG ": node %d: rendezvous: %s\n", p->o.node, strerror(berr));
		return -1;
	}
	if (!err && p->pl.local != 0)
		err = ibv_modify_coll_qp(p->qp, a, mask);
	return err;
}

static void say_refused(const struct perf *p, const struct ibv_coll_caps *caps, int err)
{
	int listed = p->o.topology < 32 && (caps->topologies & (1u << p->o.topology));
	int needs_sw = p->o.topology == IBV_COLL_TOPO_SWITCH ||
		       p->o.topology == IBV_COLL_TOPO_HIERARCHY;
	fprintf(stderr,
		PROG ": node %d: device %s refused the job (topology %s, %d nodes, %u ranks%s): "
		     "%s (%s)%s\n",
		p->o.node, p->o.dev, topo_name(p->o.topology), p->pl.nodes, p->K,
		p->pl.locals > 1 ? ", this process's part of its node" : "", strerror(err),
		errname(err),
		!listed		       ? "; the device does not list this topology"
		: needs_sw && !p->o.sw ? "; this topology needs a switch (-s HOST:PORT)"
				       : "");
}

int perf_join_job(struct perf *p)
{
	struct ibv_coll_port_attr pa;
	struct ibv_coll_caps caps;
	struct ibv_coll_member members[64];
	struct ibv_coll_job_attr job = {0};
	struct ibv_coll_qp_attr a = {0};
	struct switches sw;
	uint32_t local_first = 0;
	int err;
	memset(members, 0, sizeof(members));
	if (meet(p, &pa, &caps) || make_members(p, members, &local_first))
		return -1;
	/* A job id of this run's own (node 0's process id): a switch that
	 * still holds an earlier run's job (one killed before it could
	 * release it) does not take this run for that one. */
	job.jid = 0x9e4f0000u ^ (uint32_t)p->nodes[0].pid;
	job.node_index = (uint32_t)p->pl.node;
	job.num_nodes = (uint32_t)p->pl.nodes;
	job.members = members;
	job.topology = (enum ibv_coll_topology)p->o.topology;
	/* The device serves this one job (its share, when nodes share it). */
	seg_range(p, members, caps.max_seg_units, &job);
	if (p->pl.locals > 1) { /* the node's ranks come from several processes */
		job.comp_mask |= IBV_COLL_JOB_ATTR_LOCAL;
		job.local_first = local_first;
		job.local_count = (uint32_t)p->o.ranks;
	}
	job.job_key = 0x1bc0fe4full;
	if (p->o.sw)
		set_switches(p, &sw, &job);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.job = &job;
	if ((err = to_rtr(p, &a))) {
		if (err > 0)
			say_refused(p, &caps, err);
		return -1;
	}
	a.qp_state = IBV_QPS_RTS;
	if ((err = ibv_modify_coll_qp(p->qp, &a, IBV_COLL_QP_STATE))) {
		fprintf(stderr, PROG ": node %d: qp to RTS: %s\n", p->o.node, strerror(err));
		return -1;
	}
	if (p->o.root < 0 || (uint32_t)p->o.root >= p->K) {
		fprintf(stderr, PROG ": root %d: the job has ranks 0 to %u\n", p->o.root, p->K - 1);
		return -1;
	}
	size_t need = p->o.maxbytes * (colls[p->o.coll].src_k || colls[p->o.coll].dst_k ? p->K : 1);
	if (p->o.maxbytes > caps.max_count_bytes || need > UINT32_MAX) {
		fprintf(stderr, PROG ": -e %zu: a buffer would exceed the device's limits\n",
			p->o.maxbytes);
		return -1;
	}
	return 0;
}

int perf_alloc_buffers(struct perf *p)
{
	const struct coll_info *ci = &colls[p->o.coll];
	size_t maxb = p->o.maxbytes;
	p->src_cap = maxb * (ci->src_k ? p->K : 1);
	p->dst_cap = maxb * (ci->dst_k ? p->K : 1);
	p->per = (p->src_cap + GUARD + p->dst_cap + GUARD + 4095) & ~(size_t)4095;
	p->arena = aligned_alloc(4096, p->per * (size_t)p->o.ranks);
	p->src = calloc((size_t)p->o.ranks, sizeof(*p->src));
	p->dst = calloc((size_t)p->o.ranks, sizeof(*p->dst));
	if (p->arena)
		memset(p->arena, 0, p->per * (size_t)p->o.ranks);
	if (!p->arena || !p->src || !p->dst ||
	    !(p->mr = ibv_reg_coll_mr(p->pd, p->arena, p->per * (size_t)p->o.ranks,
				      IBV_ACCESS_LOCAL_WRITE))) {
		fprintf(stderr, PROG ": node %d: %zu bytes of buffers: %s\n", p->o.node,
			p->per * (size_t)p->o.ranks, strerror(errno));
		return -1;
	}
	return 0;
}

void perf_teardown(struct perf *p)
{
	if (p->qp)
		ibv_destroy_coll_qp(p->qp);
	if (p->mr)
		ibv_dereg_coll_mr(p->mr);
	if (p->cq)
		ibv_destroy_coll_cq(p->cq);
	if (p->ch)
		ibv_destroy_coll_comp_channel(p->ch);
	if (p->pd)
		ibv_dealloc_coll_pd(p->pd);
	if (p->ctx)
		ibv_close_coll_device(p->ctx);
	if (p->boot)
		ibvc_boot_close(p->boot);
	free(p->arena);
	free(p->src);
	free(p->dst);
	free(p->nodes);
}
