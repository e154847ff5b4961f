/* ibvc_boot_pmix - the rendezvous through the process manager (PMIx), for
 * programs started by mpirun or srun: the launcher already knows every
 * process and carries the exchange between hosts, so there is nothing of
 * our own to listen on or connect to. */
#define _GNU_SOURCE
#include "ibvc_boot_pmix.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <pmix.h>

static pmix_proc_t me;
static int inited;	  /* PMIx_Init succeeded and PMIx_Finalize is owed */
static unsigned round_no; /* each exchange puts a key of its own */

static int pmix_errno(pmix_status_t rc)
{
	return rc == PMIX_ERR_TIMEOUT ? ETIMEDOUT : rc == PMIX_ERR_NOMEM ? ENOMEM : EPROTO;
}

int ibvc_pmix_init(int *rank, int *size)
{
	pmix_status_t rc;
	pmix_value_t *val = NULL;
	pmix_proc_t job;
	if (!inited) {
		if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS) {
			fprintf(stderr, "ibvc_boot: PMIx_Init: %s\n", PMIx_Error_string(rc));
			return pmix_errno(rc);
		}
		inited = 1;
	}
	PMIX_PROC_CONSTRUCT(&job);
	PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
	if ((rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val)) != PMIX_SUCCESS ||
	    val->type != PMIX_UINT32) {
		fprintf(stderr, "ibvc_boot: PMIx_Get(job size): %s\n", PMIx_Error_string(rc));
		if (val)
			PMIX_VALUE_RELEASE(val);
		return rc == PMIX_SUCCESS ? EPROTO : pmix_errno(rc);
	}
	*size = (int)val->data.uint32;
	*rank = (int)me.rank;
	PMIX_VALUE_RELEASE(val);
	return 0;
}

/* A fence over the whole job, bounded by timeout_ms. */
static int fence(int collect, int timeout_ms)
{
	pmix_info_t info[2];
	pmix_proc_t job;
	bool yes = true;
	int secs = timeout_ms < 1000 ? 1 : timeout_ms / 1000;
	pmix_status_t rc;
	PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_LOAD(&info[0], PMIX_TIMEOUT, &secs, PMIX_INT);
	PMIX_INFO_LOAD(&info[1], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
	rc = PMIx_Fence(&job, 1, info, collect ? 2 : 1);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	if (rc != PMIX_SUCCESS) {
		fprintf(stderr, "ibvc_boot: PMIx_Fence: %s\n", PMIx_Error_string(rc));
		return pmix_errno(rc);
	}
	return 0;
}

int ibvc_pmix_allgather(const void *mine, size_t len, void *all, int nodes, int timeout_ms)
{
	char key[PMIX_MAX_KEYLEN];
	pmix_value_t v;
	pmix_status_t rc;
	int err;
	snprintf(key, sizeof(key), "ibvc.boot.%u", round_no++);
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = (char *)mine;
	v.data.bo.size = len;
	/* PMIx_Put copies the value, so the caller's bytes stay theirs. */
	if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS ||
	    (rc = PMIx_Commit()) != PMIX_SUCCESS) {
		fprintf(stderr, "ibvc_boot: PMIx_Put/Commit: %s\n", PMIx_Error_string(rc));
		return pmix_errno(rc);
	}
	if ((err = fence(1, timeout_ms)))
		return err;
	for (int i = 0; i < nodes; i++) {
		pmix_proc_t peer;
		pmix_value_t *got = NULL;
		PMIX_LOAD_PROCID(&peer, me.nspace, (pmix_rank_t)i);
		rc = PMIx_Get(&peer, key, NULL, 0, &got);
		if (rc != PMIX_SUCCESS || got->type != PMIX_BYTE_OBJECT ||
		    got->data.bo.size != len) {
			fprintf(stderr, "ibvc_boot: PMIx_Get(%s) of rank %d: %s\n", key, i,
				rc == PMIX_SUCCESS ? "wrong size" : PMIx_Error_string(rc));
			if (got)
				PMIX_VALUE_RELEASE(got);
			return rc == PMIX_SUCCESS ? EPROTO : pmix_errno(rc);
		}
		memcpy((char *)all + (size_t)i * len, got->data.bo.bytes, len);
		PMIX_VALUE_RELEASE(got);
	}
	return 0;
}

int ibvc_pmix_barrier(int timeout_ms)
{
	return fence(0, timeout_ms);
}

void ibvc_pmix_host(char *out, size_t len)
{
	pmix_value_t *val = NULL;
	/* The launcher's node (its host list's entry): what tells hosts apart
	 * even when they are network namespaces of one machine, whose host
	 * names are one. */
	if (inited && PMIx_Get(&me, PMIX_NODEID, NULL, 0, &val) == PMIX_SUCCESS &&
	    val->type == PMIX_UINT32) {
		snprintf(out, len, "nodeid:%u", val->data.uint32);
		PMIX_VALUE_RELEASE(val);
		return;
	}
	if (val)
		PMIX_VALUE_RELEASE(val);
	memset(out, 0, len);
	memcpy(out, "host:", 5);
	gethostname(out + 5, len - 6);
}

void ibvc_pmix_fini(void)
{
	if (inited)
		PMIx_Finalize(NULL, 0);
	inited = 0;
}
