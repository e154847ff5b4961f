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

#ifdef __cplusplus
}
#endif

#endif /* IBVC_BOOT_H */
