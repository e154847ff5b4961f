// The CollNet side of libnccl-net-ibv_coll.so: one collective QP (one job
// of the device) per CollNet communicator, every NCCL request one
// collective WR on it.  collnet.cc brings communicators up and down and
// holds NCCL's tables; collnet_ops.cc posts and completes the requests.
#pragma once

#include "cuda_stage.h"
#include "plugin.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace ibv_coll::nccl {

// A registration: NCCL's mhandle.  Of GPU memory (NCCL_PTR_CUDA), the
// device's registration is of a shadow in pinned host memory, the
// same length: the byte at base + i is staged at shadow + i.
struct CollMr {
	uint32_t magic;
	ibv_coll_mr *mr;
	const char *base;
	size_t len;
	char *shadow = nullptr;
	void *cu_ctx = nullptr;
};

// A staging buffer for windowed allgather and reduce-scatter, kept by its
// slot and grown on demand.
struct Stage {
	char *buf = nullptr;
	size_t len = 0;
	ibv_coll_mr *mr = nullptr;
};

struct CollComm;

// One NCCL request: a posted WR, and what to copy where when it
// completes (out of a staging buffer or a shadow; into GPU memory on the
// communicator's stream, test() saying done once that is through).
struct CollReq {
	CollComm *comm = nullptr;
	bool busy = false, done = false;
	uint64_t wr_id = 0;
	ibv_wc_status status = IBV_WC_SUCCESS;
	ibv_coll_status coll_status = IBV_COLL_STATUS_SUCCESS;
	size_t bytes = 0; // reported by test()
	struct Copy {
		char *to;
		const char *from;
		size_t len;
		bool gpu; // to is GPU memory
	};
	std::vector<Copy> copies;
	bool copied = false, to_gpu = false;
	void *cu_event = nullptr; // after the copies into GPU memory
	// The WR, kept while it waits (CollComm::waiting) for its sources'
	// copies out of GPU memory (in_event), or behind one that does.
	ibv_coll_send_wr wr{};
	ibv_sge wr_src{}, wr_dst{};
	bool fetching = false, waiting = false;
	void *in_event = nullptr;
	ncclResult_t fail = ncclSuccess; // it failed before the device had it
	Stage src, dst;
	const char *what = "";
};

struct CollComm {
	uint32_t magic;
	int rank = 0, nranks = 0;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	uint64_t next_wr = 1;
	CollReq reqs[NCCL_NET_MAX_REQUESTS];
	unsigned inflight = 0;
	cuda::Stream cu;	       // made by the first registration of GPU memory
	std::deque<CollReq *> waiting; // posted in NCCL's order as they can be
	uint64_t range = 0;	       // its Seg granules (seg_range.h), from connect
};

constexpr uint32_t kMrMagic = 0x6d72636e, kCommMagic = 0x636f6d6d;

// NCCL's request posters and test, on a connected communicator.
ncclResult_t coll_iallreduce(void *comm, void *send, void *recv, size_t count, ncclDataType_t dt,
			     ncclRedOp_t op, void *smh, void *rmh, void **request);
ncclResult_t coll_iallgather(void *comm, void *send, int nparts, ncclNetSGE_v10_t *parts,
			     size_t per_rank, size_t win_off, size_t win_bytes, void *smh,
			     void **request);
ncclResult_t coll_ireducescatter(void *comm, int nparts, ncclNetSGE_v10_t *parts, void *recv,
				 size_t per_rank, size_t win_off, size_t win_bytes,
				 ncclDataType_t dt, ncclRedOp_t op, void *rmh, void **request);
ncclResult_t coll_test(void *request, int *done, int *size);
// Whether the device reduces op on dt, and the device's names for them.
bool coll_map(ncclDataType_t dt, ncclRedOp_t op, ibv_coll_dtype *cdt, ibv_coll_op *cop);
// Post a barrier and wait for it (connect's last step).
ncclResult_t coll_barrier(CollComm *c, int timeout_ms);
// Give back a staging buffer, a request slot's two (close).
void coll_free_stage(Stage *s);
void coll_free_stages(CollReq *r);

} // namespace ibv_coll::nccl
