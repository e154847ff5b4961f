// Execution control's tables: the job a collective QP holds, and the state
// of the message (collective WR) it is running.
#pragma once

#include "nic/udp_port.h"
#include "nic/wqe.h"
#include "reduce/reduce.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace ibv_coll::emu {

constexpr uint32_t kMaxCollRanks = 64;	// rank bitmap width
constexpr uint32_t kMaxCollNodes = 64;	// node bitmap width
constexpr uint32_t kSegUnitBytes = 4096; // the largest data block (path MTU)

enum class Topology : uint8_t { ring = 0, sw = 1, hierarchy = 2, autosel = 3 };

struct JobMember {
	Endpoint ep;
	uint32_t qpn = 0;
	uint16_t ranks = 0;
	uint32_t first_rank = 0; // global rank of its local rank 0
};

// Where a job's aggregation switches are (topologies switch, hierarchy,
// auto): P planes of L leaves, one spine per plane when L > 1.
struct SwitchConfig {
	bool on = false;
	uint32_t planes = 1, leaves = 1;
	std::vector<Endpoint> leaf;	 // planes * leaves: plane p's leaf l at p * leaves + l
	std::vector<Endpoint> spine;	 // planes, when leaves > 1
	std::vector<uint8_t> member_leaf; // per member node
	uint32_t window = 0;		 // 0: as the grant allows
	bool inline_task = false;	 // no configuration step
	bool e2e_ack = false;		 // windows slide on node 0's ACK, not on the result
};

struct JobConfig {
	uint32_t jid = 0;
	uint16_t node = 0; // this node's index
	std::vector<JobMember> members;
	Topology topology = Topology::ring;
	uint32_t seg_base = 0, seg_count = 0;
	uint32_t block_len = 0; // 0: the path MTU
	uint64_t key = 0;
	uint32_t timeout_ms = 0; // 0: the device default
	uint32_t total_ranks = 0;
	SwitchConfig sw;
	uint16_t nodes() const { return uint16_t(members.size()); }
};

// One link of the chain of block descriptors (seed 004): operator, end
// marker, block size and source position.  Built once per message and
// walked by both ring phases.
struct BlockDesc {
	uint64_t voff;	 // first element, in the collective's vector
	uint32_t elems;
	uint16_t chunk;
	uint8_t op;	 // RedOp
	uint8_t end;	 // last block of the message
};

// Who does what with one chunk of the vector: its reduce-scatter starts at
// origin and ends, complete, at fin; its result then travels the ring
// from fin back round to fin.
struct ChunkRole {
	uint64_t vbegin = 0, vend = 0;
	uint32_t first_sid = 0, nblocks = 0;
	uint16_t origin = 0, fin = 0;
	bool rs = false; // has a reduce-scatter phase
};

struct Message {
	// From the WQE.
	uint32_t idx = 0; // SQ index
	uint64_t wr_id = 0;
	CollOp coll = CollOp::allreduce;
	RedOp op = RedOp::sum;
	Dtype dtype = Dtype::uint8;
	uint32_t es = 1; // element bytes
	uint64_t count = 0;
	uint32_t root = 0;
	uint16_t root_node = 0, root_local = 0;
	uint32_t mid = 0;
	bool signaled = true;
	uint16_t ranks = 0;
	Sge src[kMaxCollRanks], dst[kMaxCollRanks];

	// Layout.
	std::vector<BlockDesc> chain;
	std::vector<ChunkRole> chunks;
	uint32_t nblocks = 0;
	bool result_data = true; // the result phase carries data (not just a token)

	// Progress.
	std::vector<uint8_t> final_; // per block: its result is here
	uint32_t finals = 0;
	uint32_t next_inject = 0, inject_end = 0; // this node's own blocks to start
	struct Pending {
		uint64_t deadline; // send again after this
		uint64_t sent;	   // when it was (last) sent
		bool again;	   // sent more than once: no RTT sample (Karn)
		uint8_t repeats;	   // sent again since the message's last progress
		uint64_t progress_mark; // the message's last_progress at the last repeat
	};
	std::map<uint32_t, Pending> o_pending; // started here, result not back
	std::map<uint32_t, Pending> f_pending; // result sent round, not back
	uint64_t last_progress = 0;
	// This node's finished chunk when no local destination holds it.
	std::vector<uint8_t> staging;
	uint64_t staging_voff = 0;
	std::vector<uint8_t> zeros; // barrier input
	uint8_t ran = 0;	   // CollRan
	bool dma_error = false;	   // a local buffer failed its check

	// Through the switch: blocks numbered across the job's messages.
	bool sw = false;
	bool waiting = false;	 // for the switch's grant
	uint64_t gs0 = 0;	 // the job's number for block 0
	uint32_t sw_base = 0;	 // oldest block without its result
	uint32_t sw_next = 0;	 // next block to send
	std::vector<uint8_t> acked; // end-to-end mode: node 0 acknowledged the block
};

struct MsgRecord {
	uint32_t mid;
	MsgState state;
	uint32_t blocks;
};

struct CollJob {
	JobConfig cfg;
	IpAddr src_ip;
	uint32_t pdn = 0;
	uint32_t qpn = 0;
	uint64_t owner = 0; // Seg range owner id
	std::unique_ptr<Message> active;
	uint32_t last_mid = 0;	  // most recent finished (or failed) message
	uint32_t aborted_mid = 0; // a member aborted this message before we ran it
	CollStatus abort_status = CollStatus::remote_abort;
	std::deque<MsgRecord> history; // recent messages, for QUERY
	// Round trip of a block round the ring (smoothed, and its variation),
	// from which the retransmission timeout follows, as TCP's does.
	uint64_t srtt = 0, rttvar = 0;

	// The switch path's state.
	enum class SwPhase : uint8_t { none, configuring, ready, fallback, failed };
	SwPhase sw_phase = SwPhase::none;
	std::vector<uint32_t> sw_granted; // per plane (0: not yet)
	std::vector<uint8_t> sw_heard;	  // per plane: its leaf has answered
	uint32_t sw_window = 0;
	uint64_t sw_cfg_start = 0, sw_cfg_sent = 0;
	uint64_t sw_next_gs = 0; // the job's number for the next message's block 0
	CollStatus sw_fail = CollStatus::success;
};

} // namespace ibv_coll::emu
