// The switch protocol between member NICs and aggregation switches (and
// between leaf and spine switches), shared by both ends.
//
// Every packet is BTH + CETH (wire/ceth.h).  A switch serves a job's
// "subtree": the member nodes below it.  Its children are member NICs (a
// leaf) or switches (a spine); each child covers a set of bits of the
// switch's own (its CETH node_map): a member's bit at its leaf is its
// index among that leaf's members (in node order), a leaf's bit at the
// spine its leaf index, so a job of up to 64 leaves of up to 64 members
// each fits the 64-bit maps (with one switch, a member's bit is its node
// index).  A member child is its endpoint and collective QP (the task's
// qpn): the nodes of one shared device share the endpoint; a packet with no
// task names its child by endpoint and CETH src_node.  ibv_coll_wire(7)
// documents the fields.
//
// Three levels.  Under a core switch, spines serve pods of leaves: a
// leaf's bit at its spine is its index among the pod's leaves, a spine's
// bit at the core its pod index, and the top switch's bits (Task members)
// are the pods'.  A member's CONFIG to its leaf then carries, after the
// task, one Above record: what the leaf's parent (the spine) is to its
// own parent (the core): the spine's subtree, its bit at the core, the
// core's address.  The leaf sends the spine a task made of it.  Inline
// mode has no room for it: a three-level job configures.
//
// Configuration.  A child sends CONFIG with the task information below; a
// leaf that has heard from every node of its subtree (and, with a parent,
// been granted by it) answers every child with CONFIG_ACK: CETH seg = the
// Seg units granted (0 and CETH status = DENIED: refused) and, in CETH
// seq, the switch's idle timeout in ms: granted members CONFIG again every
// third of it, so a job silent between collectives is not forgotten (a
// leaf passes such a keepalive on to its parent).  Inline mode
// skips this: every DATA packet carries the task information after the
// CETH (flag kCethInline) and the switch builds the job on first sight.
//
// Data.  Block g of a job (its blocks numbered across messages) goes to
// plane g mod P; on that plane it is block g / P, in Seg unit
// (g / P) mod G of the grant.  A node keeps at most W <= P * G / 2 blocks
// past the oldest one whose result it lacks, so a unit is only reused
// once every node holds the result of the block it held before: that
// result stays in the unit as the shadow copy that answers a late repeat.
// A switch folds its children's partials in child order (lowest node
// first), whatever order they arrive in, so results are reproducible.
// CETH phase on DATA: 0, the result goes to every node; b + 1, only the
// child of bit b needs the result's data and the others get a token (no
// payload); kPhaseAbove, no child below this leaf needs it (a spine
// learns the bit from the leaf that has it).
//
// Loss.  A switch that completes the block in unit u looks at the units
// kNakLag[] blocks back on its plane ((u - d) mod G): one still collecting
// for an older block lacks partials its children sent before the ones
// just folded, so it sends each child whose nodes are pending (and not
// waiting their turn in the fold) a NAK: RESULT flagged kCethNak, no
// payload, CETH node_map = the child's missing nodes, mid, sid, seq and
// seg of the block.  The child sends those partials again at once, and
// only those.  A node whose results show a gap (the result of block g + 2P
// is here and g's is not; only from a switch whose results do not chain,
// below), or that has had no result for two round trips
// (its oldest blocks), or whose block timed out, sends an ASK: DATA
// flagged kCethAsk, no payload: a switch holding the result answers with
// it; one still collecting NAKs the asker alone: naming it if its partial
// is missing, else naming the nodes it waits for (the asker then never
// sends that partial again); one that never saw the block NAKs the asker;
// a leaf whose partial is on its way up sends it up again.
// A spine NAKs a leaf like a member, and the leaf sends its partial up
// again.  A node's timed-out block alternates ASK and the full partial,
// so that the timeout stays the last resort when the switch is not heard.
// A switch of one worker (one socket, read in order; members send their
// blocks in order) also NAKs a member at once when its first copy of a
// block arrives while a unit up to kGapLook blocks back still waits for
// its partial; such a NAK (and the NAK to an asker, and the one from a
// completed unit) carries in rank_map the seq that showed the loss, plus
// 1: sure on a path that keeps its order (unless that block went before
// the member's last copy of the NAKed one: the NAK crossed the repeat).
// Each RESULT it sends carries in rank_map the seq of the block whose
// results went before, plus 1: a member lacking that one asks for it at
// once.  The newest block begun has nothing after it to show a loss: such
// a switch NAKs (rank_map 0) what it and the blocks just behind it lack
// once it is older than twice the spread of a clean block's partials
// plus eight block intervals, and sends its results again, unasked, while
// blocks are being repaired (switch_fold.cc, find_tail).
//
// Counters.  STATS asks a switch for its counters: CETH mid is the asker's
// tag, sid the first record it wants, and its payload is zeros, as many as
// the answer may take.  STATS_REPLY echoes mid and sid, holds in CETH seg
// how many records the switch has, and carries the switch's name then as
// many whole records from sid on as fit in the request's length: a reply
// is never longer than its request, so a forged source address makes the
// switch reflect no more than it was sent (no amplification).  An asker
// that gets fewer records than seg asks again from the next one.
//
// Order.  DATA and RESULT carry block g's number in CETH seq (mod 2^32).
// The uses of one unit are P * G blocks apart, far less than 2^31, so a
// switch tells a unit's next block from a late repeat of its last by
// seq_after(), whatever the MIDs: a switch never orders MIDs (a plane or a
// unit may see messages far apart in MID space), it only matches them.
//
// Incarnations.  Every packet carries the job's incarnation (CETH inc),
// which each member bumps when its QP is given the job again.  A CONFIG
// (or inline DATA) of a later incarnation replaces the job's state at the
// switch; packets of any other incarnation are dropped and counted
// (drop_incarnation), so members reset at their own pace after a failure
// neither meet the old job's units nor end the new one with their RELEASE.
#pragma once

#include "wire/bytes.h"
#include "wire/seqnum.h"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ibv_coll::emu::sw {

constexpr size_t kTaskBytes = 48;
constexpr uint16_t kNodeSwitch = 0xffff; // CETH src_node of a switch
// Why a tdm admission was refused: CETH phase of a CONFIG_ACK flagged
// ADMIT with status DENIED (the same bits the completion's wc_flags carry,
// shifted; see ibv_poll_coll_cq(3)).
enum AdmitWhy : uint8_t { kAdmitBusy = 0x20, kAdmitScored = 0x40, kAdmitRefused = 0x80 };
constexpr uint32_t kMaxPlanes = 8;
// Loss: how many blocks back on its plane a completed block makes a switch
// look for one still collecting (see "Loss" above).
constexpr uint32_t kNakLag[] = {2, 6};
// Loss: how many blocks back on its plane a member's partial makes a switch
// look for units still waiting for that member (see "Loss" above).
constexpr uint32_t kGapLook = 8;
constexpr uint32_t kMaxLeaves = 64;
// The most members under one leaf (a leaf's bitmap).
constexpr uint32_t kMaxLeafMembers = 64;
// CETH phase of DATA: the child that needs the result's data is not below
// this leaf (see "Data" above).
constexpr uint8_t kPhaseAbove = 0xff;

// The task information: in a CONFIG payload, or after the CETH of an
// inline DATA packet.
//
//   0 u16 node	   the sender's node index (kNodeSwitch from a switch)
//   2 u16 nodes	   members in the job
//   4 u32 qpn	   where results go (the sender's collective QP)
//   8 u64 members	   the top switch's bits: every member node with one
//		   switch, every leaf (that has members) in a tree
//  16 u64 subtree	   the bits the receiving switch serves (its children's)
//  24 u32 seg_req	   Seg units asked for
//  28 u8  up	   the receiving switch's bit at its parent (its leaf index)
//  29 u8  plane
//  30 u16 parent_port the receiving switch's parent (0: none)
//  32 u8[16] parent_ip
//  48
struct Task {
	uint16_t node = 0;
	uint16_t nodes = 0;
	uint32_t qpn = 0;
	uint64_t members = 0;
	uint64_t subtree = 0;
	uint32_t seg_req = 0;
	uint8_t up = 0;
	uint8_t plane = 0;
	uint16_t parent_port = 0;
	uint8_t parent_ip[16] = {};

	void store(uint8_t *p) const
	{
		wire::store_be16(p, node);
		wire::store_be16(p + 2, nodes);
		wire::store_be32(p + 4, qpn);
		wire::store_be64(p + 8, members);
		wire::store_be64(p + 16, subtree);
		wire::store_be32(p + 24, seg_req);
		p[28] = up;
		p[29] = plane;
		wire::store_be16(p + 30, parent_port);
		memcpy(p + 32, parent_ip, 16);
	}
	static Task load(const uint8_t *p)
	{
		Task t;
		t.node = wire::load_be16(p);
		t.nodes = wire::load_be16(p + 2);
		t.qpn = wire::load_be32(p + 4);
		t.members = wire::load_be64(p + 8);
		t.subtree = wire::load_be64(p + 16);
		t.seg_req = wire::load_be32(p + 24);
		t.up = p[28];
		t.plane = p[29];
		t.parent_port = wire::load_be16(p + 30);
		memcpy(t.parent_ip, p + 32, 16);
		return t;
	}
};

// What a CONFIG payload carries after the task for a three-level job:
// the receiving switch's parent as a child of its own parent (see "Three
// levels" above).
//
//   0 u64 subtree	   the parent's bits (its children's)
//   8 u8  up	   the parent's bit at its parent
//   9 u8  reserved (0)
//  10 u16 parent_port the parent's parent
//  12 u8[16] parent_ip
//  28 u32 reserved (0)
//  32
constexpr size_t kAboveBytes = 32;
struct Above {
	uint64_t subtree = 0;
	uint8_t up = 0;
	uint16_t parent_port = 0;
	uint8_t parent_ip[16] = {};

	void store(uint8_t *p) const
	{
		memset(p, 0, kAboveBytes);
		wire::store_be64(p, subtree);
		p[8] = up;
		wire::store_be16(p + 10, parent_port);
		memcpy(p + 12, parent_ip, 16);
	}
	static Above load(const uint8_t *p)
	{
		Above a;
		a.subtree = wire::load_be64(p);
		a.up = p[8];
		a.parent_port = wire::load_be16(p + 10);
		memcpy(a.parent_ip, p + 12, 16);
		return a;
	}
	bool operator==(const Above &o) const
	{
		return subtree == o.subtree && up == o.up && parent_port == o.parent_port &&
		       !memcmp(parent_ip, o.parent_ip, 16);
	}
};

// STATS_REPLY payload: the switch's name (NUL-padded, cut to fit), then
// records of a NUL-padded counter name and a big-endian u64 value.
constexpr size_t kStatsNameBytes = 32;
constexpr size_t kStatsKeyBytes = 24;
constexpr size_t kStatsRecordBytes = kStatsKeyBytes + 8;
// What an asker pads a STATS request to by default: every record of
// today's switch fits, and the packet stays under a 1500-byte MTU.
constexpr size_t kStatsRequestPad = 1344;

// Where block g of a job goes.
inline uint32_t plane_of(uint64_t g, uint32_t planes)
{
	return uint32_t(g % planes);
}
inline uint32_t unit_of(uint64_t g, uint32_t planes, uint32_t granted)
{
	return uint32_t((g / planes) % granted);
}

} // namespace ibv_coll::emu::sw
