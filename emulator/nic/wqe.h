// The formats the driver and the device exchange through queues: send and
// receive WQEs and CQEs.  Standard layout, sizes fixed by static_assert, as
// a hardware interface would be.  Status and opcode values are the public
// API's, so the driver translates by cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ibv_coll::emu {

struct Sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

enum class WrOpcode : uint8_t {
	rdma_write = 0,
	rdma_write_imm = 1,
	send = 2,
	send_imm = 3,
	rdma_read = 4,
};

enum WqeFlags : uint8_t {
	kWqeFence = 1 << 0,
	kWqeSignaled = 1 << 1,
	kWqeSolicited = 1 << 2,
};

// A send WQE: this header, then num_sge Sge entries.
struct SendWqe {
	uint64_t wr_id;
	uint8_t opcode; // WrOpcode
	uint8_t flags;	// WqeFlags
	uint16_t num_sge;
	uint32_t imm; // network order, as the application gave it
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t length; // sum of the SGE lengths
	Sge *sges() { return reinterpret_cast<Sge *>(this + 1); }
	const Sge *sges() const { return reinterpret_cast<const Sge *>(this + 1); }
};
static_assert(sizeof(SendWqe) == 32 && std::is_standard_layout_v<SendWqe>);

struct RecvWqe {
	uint64_t wr_id;
	uint16_t num_sge;
	uint16_t rsvd0;
	uint32_t length; // capacity: sum of the SGE lengths
	Sge *sges() { return reinterpret_cast<Sge *>(this + 1); }
	const Sge *sges() const { return reinterpret_cast<const Sge *>(this + 1); }
};
static_assert(sizeof(RecvWqe) == 16 && std::is_standard_layout_v<RecvWqe>);

// A collective WQE: this header, then num_sge source SGEs (one per local
// rank, in rank order), then num_sge destination SGEs.
struct CollWqe {
	uint64_t wr_id;
	uint8_t opcode; // CollOp
	uint8_t flags;	// WqeFlags
	uint16_t num_sge;
	uint8_t op;    // RedOp
	uint8_t dtype; // Dtype
	uint16_t rsvd0;
	uint32_t mid;
	uint32_t root;
	uint32_t block_len;
	uint32_t rsvd1;
	uint64_t count;
	uint64_t rsvd2;
	Sge *srcs() { return reinterpret_cast<Sge *>(this + 1); }
	const Sge *srcs() const { return reinterpret_cast<const Sge *>(this + 1); }
	Sge *dsts() { return srcs() + num_sge; }
	const Sge *dsts() const { return srcs() + num_sge; }
};
static_assert(sizeof(CollWqe) == 48 && std::is_standard_layout_v<CollWqe>);
static_assert(offsetof(CollWqe, opcode) == offsetof(SendWqe, opcode) &&
	      offsetof(CollWqe, flags) == offsetof(SendWqe, flags));

// Collective opcodes: the values of IBV_COLL_WR_ALLREDUCE...
enum class CollOp : uint8_t {
	allreduce = 0x40,
	reduce = 0x41,
	bcast = 0x42,
	allgather = 0x43,
	reduce_scatter = 0x44,
	barrier = 0x45,
	query = 0x46,
};
inline bool is_coll_op(uint8_t op)
{
	return op >= uint8_t(CollOp::allreduce) && op <= uint8_t(CollOp::query);
}

// Values of enum ibv_coll_status, ibv_coll_wc_flags >> 8, ibv_coll_msg_state.
enum class CollStatus : uint8_t {
	success = 0,
	buffer_err = 1,
	timeout = 2,
	remote_abort = 3,
	denied = 4,
	local_err = 5,
	flushed = 6,
};
enum CollRan : uint8_t {
	kRanLocal = 1 << 0,
	kRanRing = 1 << 1,
	kRanSwitch = 1 << 2,
	kRanHierarchy = 1 << 3,
	kRanFallback = 1 << 4,
	// Why it fell back (with kRanFallback): the pool was busy, the score
	// chose another job, or the switch refused the job.
	kRanBusy = 1 << 5,
	kRanScored = 1 << 6,
	kRanRefused = 1 << 7,
};
enum class MsgState : uint8_t { unknown = 0, queued = 1, active = 2, done = 3, failed = 4 };

inline uint32_t coll_wqe_stride(uint32_t ranks)
{
	return uint32_t(sizeof(CollWqe) + 2 * ranks * sizeof(Sge));
}

inline uint32_t send_wqe_stride(uint32_t max_sge)
{
	return uint32_t(sizeof(SendWqe) + max_sge * sizeof(Sge));
}
inline uint32_t recv_wqe_stride(uint32_t max_sge)
{
	return uint32_t(sizeof(RecvWqe) + max_sge * sizeof(Sge));
}

// Values of enum ibv_wc_status.
enum class WcStatus : uint8_t {
	success = 0,
	loc_len_err = 1,
	loc_qp_op_err = 2,
	loc_prot_err = 4,
	wr_flush_err = 5,
	bad_resp_err = 7,
	loc_access_err = 8,
	rem_inv_req_err = 9,
	rem_access_err = 10,
	rem_op_err = 11,
	retry_exc_err = 12,
	rnr_retry_exc_err = 13,
	rem_abort_err = 16,
	fatal_err = 19,
	resp_timeout_err = 20,
	general_err = 21,
};

// Values of enum ibv_coll_wc_opcode.
enum class WcOpcode : uint8_t {
	send = 0,
	rdma_write = 1,
	rdma_read = 2,
	recv = 128,
	recv_rdma_imm = 129,
};

enum CqeFlags : uint8_t {
	kCqeWithImm = 1 << 1,
	kCqeSolicited = 1 << 7, // internal: the message asked for an event
};

struct Cqe {
	uint64_t wr_id;
	uint64_t byte_len;
	uint32_t qpn;
	uint32_t src_qp;
	uint32_t imm; // network order
	uint32_t vendor_err;
	uint8_t status;	     // WcStatus
	uint8_t opcode;	     // WcOpcode, or the collective opcode
	uint8_t flags;	     // CqeFlags
	uint8_t coll_status; // CollStatus
	uint8_t coll_flags;  // CollRan
	uint8_t msg_state;   // MsgState (QUERY)
	uint16_t rsvd0;
	uint32_t jid;
	uint32_t mid;
	uint32_t blocks_done;
	uint32_t blocks_total;
	uint64_t rsvd1;
};
static_assert(sizeof(Cqe) == 64 && std::is_standard_layout_v<Cqe>);

} // namespace ibv_coll::emu
