/*
 * ibvc_boot - a small out-of-band rendezvous for ibv_coll programs.
 *
 * Collective jobs need every member's address (GID, UDP port, QP number)
 * before their QPs can reach RTR; how they learn them is the application's
 * business (MPI, PMIx, a key-value store).  This helper is the smallest
 * thing that works: node 0 listens on an address, the others connect, and
 * ibvc_boot_allgather() hands everyone everyone's blob in node order.
 *
 * Addresses: "unix:/path" (a Unix socket; reaches across network
 * namespaces of one machine), or "pmix":
 * the process manager that started us (mpirun, srun) does the exchange
 * through PMIx put/commit/fence/get, and node and nodes are the PMIx rank
 * and job size.  Across hosts, use a PMIx launcher: it already knows every
 * process and how to reach it.
 * Every call is bounded by the timeout given to ibvc_boot_open(): a peer
 * that never comes or dies makes the call fail, never hang.
 * Functions return 0 or a positive errno value.
 */
#ifndef IBVC_BOOT_H
#define IBVC_BOOT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibvc_boot;
struct ibv_coll_caps;

/* Join the rendezvous at addr as node `node` of `nodes`. */
int ibvc_boot_open(const char *addr, int node, int nodes, int timeout_ms, struct ibvc_boot **out);
/* Contribute len bytes; all receives nodes * len bytes, node 0's first. */
int ibvc_boot_allgather(struct ibvc_boot *b, const void *mine, size_t len, void *all);
/* Return when every node has called it. */
int ibvc_boot_barrier(struct ibvc_boot *b);
void ibvc_boot_close(struct ibvc_boot *b);

/* Find the rendezvous the launcher gave: IBVC_BOOT_ADDR, IBVC_BOOT_NODE and
 * IBVC_BOOT_NODES (set by ibv_coll_run) first, else a PMIx launcher
 * (PMIX_RANK and PMIX_NAMESPACE set; *addr becomes "pmix" and *node, *nodes
 * the PMIx rank and job size).  0; ENOENT when there is neither; EINVAL
 * when the variables are bad; another errno when the PMIx server cannot be
 * reached (a message says why). */
int ibvc_boot_from_env(const char **addr, int *node, int *nodes);

/* Where a process of the rendezvous stands in the job: the job's nodes are
 * groups of its processes, each node one device whose collective QP in
 * the node's first process (local 0, the lead) joins the job for the
 * node, the others joining it (IBV_COLL_JOB_ATTR_LOCAL).  Nodes are
 * numbered in the order of their first process. */
struct ibvc_boot_place {
	int node, nodes;   /* this process's node of the job, and how many */
	int local, locals; /* its place among the node's processes, and how many */
	int lead;	   /* the node's first process (its rendezvous index) */
};

/* Learn the job's nodes, collectively (every process of the rendezvous
 * calls it).  A process's node is IBVC_JOB_NODE (ibv_coll_run sets it;
 * nodes must then be numbered in order of their first process); else,
 * under a PMIx launcher with shared nonzero, its host (PMIx's node id,
 * else the host name); else each process is a node of its own, as before.
 * shared: whether the process's device is the host's shared device, which
 * ibv_query_coll_caps() reports (ibvc_boot_shared_device()); the caller
 * opens the device first.  node_of, when not NULL, receives every
 * process's node (b's nodes entries).  0, or an errno value with a message
 * on stderr (EINVAL: the processes do not agree on how they are grouped). */
int ibvc_boot_place(struct ibvc_boot *b, int shared, struct ibvc_boot_place *out, int *node_of);

/* Whether caps (ibv_query_coll_caps() of the process's context) say that
 * the device is the host's shared device, served by ibv_coll_devd
 * (IBV_COLL_CAPS_SHARED_DEVICE). */
int ibvc_boot_shared_device(const struct ibv_coll_caps *caps);

#ifdef __cplusplus
}
#endif

#endif /* IBVC_BOOT_H */
