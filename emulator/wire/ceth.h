// The collective extended transport header (CETH), which follows the BTH
// of every collective packet.  BTH opcodes 0xe0-0xff (the IBTA's
// manufacturer range) name the packet kind; the CETH names the job,
// message and block, the operation, and whose data the payload holds.
// ibv_coll_wire(7) documents this layout.
//
//   0 u8  coll      collective opcode (CollOp)
//   1 u8  op        reduction op (RedOp)
//   2 u8  dtype     datatype (Dtype)
//   3 u8  flags     CethFlags
//   4 u8  status    CollStatus (abort/NAK packets)
//   5 u8  phase     ring phase or hop count (algorithm specific)
//   6 u16 src_node  sender's node index
//   8 u32 jid       job
//  12 u32 mid       message (one collective WR)
//  16 u32 sid       data block within the message
//  20 u16 seg       Seg unit the sender used
//  22 u16 len       payload bytes (the data block length)
//  24 u64 node_map  nodes whose data the payload holds (data) or all (result)
//  32 u64 rank_map  local ranks of src_node whose data the payload holds
//  40 u64 job_key   the job's key: a packet without it is dropped
//  48 u32 inc       the job's incarnation: bumped each time a member's QP is
//                   given the job again (RESET -> RTS); others' packets are
//                   dropped, so a re-installed job never meets the old one's
//  52 u32 seq       switch path DATA/RESULT: the block's number in the job
//                   (blocks numbered across messages from 0 at each
//                   incarnation), which orders the uses of a Seg unit; 0
//                   elsewhere
//  56 u32 hold      DATA/RESULT: nanoseconds the block spent held at the
//                   endpoints (NICs and switches) it passed since it left
//                   the node that sent it first: from each one's receipt
//                   (the socket's timestamp) to its sending it on.  The
//                   sender of the block subtracts it from the round trip
//                   to measure the fabric's delay alone (congestion
//                   control, nic/cc.h); 0xffffffff: more than that (no
//                   measure); 0 elsewhere
//  60 u32 queue     DATA/RESULT: the part of hold the block spent queued
//                   and processed, not waiting for an application to post
//                   its collective (a NIC ring member's early blocks) or
//                   for other members' partials (a switch): the endpoints'
//                   congestion, which the sender's endpoint window follows
//                   (nic/cc.h); saturating as hold; 0 elsewhere
//  64
#pragma once

#include "wire/bytes.h"

#include <cstddef>
#include <cstdint>

namespace ibv_coll::emu::wire {

constexpr size_t kCethBytes = 64;

// CETH hold: saturating, in nanoseconds.
constexpr uint32_t kHoldUnknown = 0xffffffff;
inline uint32_t hold_add(uint32_t hold, uint64_t ns)
{
	const uint64_t h = uint64_t(hold) + ns;
	return h >= kHoldUnknown ? kHoldUnknown : uint32_t(h);
}

// BTH opcodes of collective packets.
enum CollKind : uint8_t {
	kCollData = 0xe0,	// a partial to aggregate
	kCollResult = 0xe1,	// a final result; also acknowledges the block
	kCollAck = 0xe2,	// acknowledges a block that has no result to return
	kCollAbort = 0xe3,	// the collective failed (status says why)
	kCollConfig = 0xe4,	// job configuration for a switch
	kCollConfigAck = 0xe5,	// admission grant (Seg units) or refusal
	kCollRelease = 0xe6,	// the job leaves the switch
	kCollStats = 0xe7,	// asks a switch for its counters (padded: see below)
	kCollStatsReply = 0xe8, // the counters, never longer than the request
	// Between members, a small message's exchange (coll/xchg.cc): the
	// sender's partial of one phase; with kCethXchgAck and no payload,
	// the receiver's partial of that phase is here.
	kCollXchg = 0xe9,
	kCollKindLast = 0xe9,
};

inline bool is_coll_opcode(uint8_t op)
{
	return (op & 0xe0) == 0xe0;
}

enum CethFlags : uint8_t {
	kCethInline = 1 << 0,  // carries the task information (no prior configuration)
	kCethRetrans = 1 << 1, // sent again after a timeout
	kCethInPlace = 1 << 2,
	kCethPending = 1 << 3, // CONFIG_ACK: heard, still waiting for the rest of the subtree
	kCethSuperseded =
		1 << 4,	     // ABORT: the job was given again; the receiver's incarnation is over
	kCethAdmit = 1 << 5, // CONFIG/CONFIG_ACK/RELEASE: one message's admission (tdm)
	// Round the ring (coll/ring_loss.cc), the bit ADMIT uses: DATA or
	// RESULT sent again by the node before, one hop (a receiver that
	// passed it on already only answers it); an ACK without payload: the
	// chunk of block sid is all here, in phase `phase`.
	kCethHop = 1 << 5,
	// Switch path loss recovery (wire/swproto.h): RESULT from a switch, no
	// payload: the partials of the nodes in node_map are missing for this
	// block (send them again);
	kCethNak = 1 << 6,
	// DATA from a child, no payload: its partial went before, the result
	// did not come back (answer with it, or NAK the missing).
	kCethAsk = 1 << 7,
	// XCHG, no payload: acknowledges the receiver's partial of the phase
	// (the bit CONFIG_ACK's kCethPending uses).
	kCethXchgAck = 1 << 3,
	// An XCHG acknowledgement: its sender sent the receiver every piece
	// of its own partial of the phase before it (the bit ADMIT uses).
	kCethXchgSent = 1 << 5,
};

struct Ceth {
	uint8_t coll = 0;
	uint8_t op = 0;
	uint8_t dtype = 0;
	uint8_t flags = 0;
	uint8_t status = 0;
	uint8_t phase = 0;
	uint16_t src_node = 0;
	uint32_t jid = 0;
	uint32_t mid = 0;
	uint32_t sid = 0;
	uint16_t seg = 0;
	uint16_t len = 0;
	uint64_t node_map = 0;
	uint64_t rank_map = 0;
	uint64_t job_key = 0;
	uint32_t inc = 0;
	uint32_t seq = 0;
	uint32_t hold = 0;
	uint32_t queue = 0;

	void store(uint8_t *p) const
	{
		p[0] = coll;
		p[1] = op;
		p[2] = dtype;
		p[3] = flags;
		p[4] = status;
		p[5] = phase;
		store_be16(p + 6, src_node);
		store_be32(p + 8, jid);
		store_be32(p + 12, mid);
		store_be32(p + 16, sid);
		store_be16(p + 20, seg);
		store_be16(p + 22, len);
		store_be64(p + 24, node_map);
		store_be64(p + 32, rank_map);
		store_be64(p + 40, job_key);
		store_be32(p + 48, inc);
		store_be32(p + 52, seq);
		store_be32(p + 56, hold);
		store_be32(p + 60, queue);
	}
	static Ceth load(const uint8_t *p)
	{
		Ceth c;
		c.coll = p[0];
		c.op = p[1];
		c.dtype = p[2];
		c.flags = p[3];
		c.status = p[4];
		c.phase = p[5];
		c.src_node = load_be16(p + 6);
		c.jid = load_be32(p + 8);
		c.mid = load_be32(p + 12);
		c.sid = load_be32(p + 16);
		c.seg = load_be16(p + 20);
		c.len = load_be16(p + 22);
		c.node_map = load_be64(p + 24);
		c.rank_map = load_be64(p + 32);
		c.job_key = load_be64(p + 40);
		c.inc = load_be32(p + 48);
		c.seq = load_be32(p + 52);
		c.hold = load_be32(p + 56);
		c.queue = load_be32(p + 60);
		return c;
	}
};

} // namespace ibv_coll::emu::wire
