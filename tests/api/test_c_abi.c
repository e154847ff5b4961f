/* The C ABI used from C: values C allows in enum fields that are not
 * members (a C++ test cannot form them), and the basic object life cycle.
 * Exits non-zero after printing each failed check. */
#include <ibv_coll/ibv_coll.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                              \
		}                                                                                \
	} while (0)

int main(void)
{
	struct ibv_coll_device **list;
	struct ibv_coll_context *ctx = NULL;
	struct ibv_coll_pd *pd;
	struct ibv_coll_cq *cq;
	struct ibv_coll_qp *qp;
	struct ibv_coll_qp_init_attr ia;
	struct ibv_coll_qp_attr attr;
	const char *want = getenv("IBV_COLL_TEST_DEV");
	int n = 0, i;

	CHECK(strcmp(ibv_coll_wc_status_str((enum ibv_wc_status)999), "unknown") == 0);
	CHECK(strcmp(ibv_coll_wc_status_str((enum ibv_wc_status) - 1), "unknown") == 0);
	CHECK(strcmp(ibv_coll_wr_opcode_str((enum ibv_coll_wr_opcode)99), "unknown") == 0);
	CHECK(strcmp(ibv_coll_wc_opcode_str((enum ibv_coll_wc_opcode)3), "unknown") == 0);

	list = ibv_get_coll_device_list(&n);
	CHECK(list != NULL && n > 0);
	if (!want || !*want)
		want = "crxe_lo";
	for (i = 0; list && i < n && !ctx; i++)
		if (!strcmp(ibv_get_coll_device_name(list[i]), want))
			ctx = ibv_open_coll_device(list[i]);
	ibv_free_coll_device_list(list);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;
	pd = ibv_alloc_coll_pd(ctx);
	cq = ibv_create_coll_cq(ctx, 8, NULL, NULL, 0);
	CHECK(pd && cq);

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.qp_type = (enum ibv_coll_qp_type)12345;
	CHECK(ibv_create_coll_qp(pd, &ia) == NULL && errno == EINVAL);
	ia.qp_type = IBV_COLL_QPT_RC;
	qp = ibv_create_coll_qp(pd, &ia);
	CHECK(qp != NULL);

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = (enum ibv_qp_state)42;
	CHECK(ibv_modify_coll_qp(qp, &attr, IBV_COLL_QP_STATE) == EINVAL);
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	CHECK(ibv_modify_coll_qp(qp, &attr,
				 IBV_COLL_QP_STATE | IBV_COLL_QP_PORT | IBV_COLL_QP_ACCESS_FLAGS) ==
	      0);
	CHECK(qp->state == IBV_QPS_INIT);

	CHECK(ibv_destroy_coll_qp(qp) == 0);
	CHECK(ibv_destroy_coll_cq(cq) == 0);
	CHECK(ibv_dealloc_coll_pd(pd) == 0);
	CHECK(ibv_close_coll_device(ctx) == 0);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
