// One side of an RC connection for tests, through the public API only.
#pragma once

#include "oob.h"

#include <ibv_coll/ibv_coll.h>

#include <cstdint>
#include <string>

namespace ibvc_test {

int test_gid_index(); // $IBV_COLL_TEST_GID, else 0

struct RcOptions {
	std::string dev; // empty: $IBV_COLL_TEST_DEV, else crxe_lo
	int gid_index = test_gid_index();
	ibv_mtu mtu = IBV_MTU_1024;
	size_t buf_size = 1 << 20;
	uint8_t timeout = 10; // 4 ms
	uint8_t retry_cnt = 7;
	uint8_t rnr_retry = 7;
	uint8_t min_rnr_timer = 1;
	uint32_t max_wr = 256;
	uint32_t psn = 0x123;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
};

std::string test_device_name();
// Whether the test device is crxe's emulated NIC (crxe_*), whose wire,
// UDP ports and impairments the tests control, or a real device reached
// through the verbs provider (verbs_*: kernel rxe, an RDMA NIC).
bool test_device_is_emulated();
// A context of the test device (test_device_name()), or nullptr.
ibv_coll_context *open_test_device();

class RcEndpoint {
public:
	~RcEndpoint();
	// Open the device and create PD, CQ, MR over a fresh buffer and a QP in
	// INIT.  0 or an errno.
	int open(const RcOptions &o);
	PeerInfo info() const;
	// INIT -> RTR -> RTS towards the remote.
	int connect(const PeerInfo &remote);
	int post_send(ibv_coll_wr_opcode op, uint64_t off, uint32_t len, uint64_t raddr,
		      uint32_t rkey, uint64_t wr_id, uint32_t imm = 0, bool signaled = true);
	int post_recv(uint64_t off, uint32_t len, uint64_t wr_id);
	// Poll one completion for up to timeout_ms: 0, or ETIMEDOUT.
	int wait(ibv_coll_wc *wc, int timeout_ms);

	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	ibv_coll_mr *mr = nullptr;
	uint8_t *buf = nullptr;
	size_t size = 0;
	RcOptions opt;
};

} // namespace ibvc_test
