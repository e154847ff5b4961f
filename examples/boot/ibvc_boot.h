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
 * namespaces of one machine) or "host:port" (TCP, IPv4 or IPv6).
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
int ibvc_boot_open(const char *addr, int node, int nodes, int timeout_ms,
		   struct ibvc_boot **out);
/* Contribute len bytes; all receives nodes * len bytes, node 0's first. */
int ibvc_boot_allgather(struct ibvc_boot *b, const void *mine, size_t len, void *all);
/* Return when every node has called it. */
int ibvc_boot_barrier(struct ibvc_boot *b);
void ibvc_boot_close(struct ibvc_boot *b);

/* Read IBVC_BOOT_ADDR, IBVC_BOOT_NODE and IBVC_BOOT_NODES (set by
 * ibv_coll_run) into *addr, *node, *nodes: 0, or ENOENT when unset. */
int ibvc_boot_from_env(const char **addr, int *node, int *nodes);

#ifdef __cplusplus
}
#endif

#endif /* IBVC_BOOT_H */
