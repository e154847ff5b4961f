/* ibvc_boot_pmix - ibvc_boot's exchange through a PMIx launcher (internal to
 * ibvc_boot.c).  Functions return 0 or a positive errno value and print one
 * line to stderr saying what PMIx answered when they fail. */
#ifndef IBVC_BOOT_PMIX_H
#define IBVC_BOOT_PMIX_H

#include <stddef.h>

/* Connect to the launcher's PMIx server (once) and learn our rank and the
 * job's size. */
int ibvc_pmix_init(int *rank, int *size);
/* Every rank's len bytes, rank 0's first. */
int ibvc_pmix_allgather(const void *mine, size_t len, void *all, int nodes, int timeout_ms);
int ibvc_pmix_barrier(int timeout_ms);
/* A name of the host this process runs on, equal for the processes the
 * launcher put on one node: "nodeid:N" from PMIx, else the host name. */
void ibvc_pmix_host(char *out, size_t len);
void ibvc_pmix_fini(void);

#endif /* IBVC_BOOT_PMIX_H */
