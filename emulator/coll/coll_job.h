// Execution control's tables: the job a collective QP holds, and the state
// of the message (collective WR) it is running.
#pragma once

#include "net/transport.h"
#include "nic/cc.h"
#include "nic/coll_iface.h"
#include "nic/qp.h"
#include "wire/seqnum.h"
#include "nic/wqe.h"
#include "coll/pending_set.h"
#include "reduce/reduce.h"
#include "util/cow_vector.h"
#include "util/fifo.h"
#include "wire/ceth.h"
#include "wire/seqnum.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ibv_coll::emu {

constexpr uint32_t kMaxCollRanks = 64; // rank bitmap width
// A job's nodes: CETH src_node is 16 bits; on the switch path (switch,
// hierarchy, AUTO) the CETH's bitmap, 64 bits, bounds the members under a
// leaf and the leaves under a spine (wire/swproto.h); a ring of more than
// 64 sends no bitmap: its hop says whose data a block holds.
constexpr uint32_t kMaxCollNodes = 65535;
constexpr uint32_t kMaxSwitchNodes = 64;

enum class Topology : uint8_t { ring = 0, sw = 1, hierarchy = 2, autosel = 3 };

class CollPath;

struct JobMember {
	Endpoint ep;
	uint32_t qpn = 0;
	uint16_t ranks = 0;
	uint32_t first_rank = 0; // global rank of its local rank 0
};

// Where a job's aggregation switches are (topologies switch, hierarchy,
// auto): P planes of L leaves, one spine per plane when L > 1; or, with
// K > 1 pods, the leaves in K pods, one spine per pod and a core above
// the spines (three levels).
struct SwitchConfig {
	bool on = false;
	uint32_t planes = 1, leaves = 1, pods = 1;
	// (The per-member and per-leaf lists are the same on every node: their
	// copies share them, util/cow_vector.h.)
	util::CowVector<Endpoint> leaf; // planes * leaves: plane p's leaf l at p * leaves + l
	util::CowVector<Endpoint>
		spine;		    // planes * pods, when leaves > 1: p's spine k at p * pods + k
	std::vector<Endpoint> core; // planes, when pods > 1
	util::CowVector<uint16_t> member_leaf; // per member node
	util::CowVector<uint8_t> leaf_pod;     // per leaf, when pods > 1
	uint32_t window = 0;		       // 0: as the grant allows
	bool inline_task = false;	       // no configuration step
	bool e2e_ack = false;		       // windows slide on node 0's ACK, not on the result
	// What check_job derives (the bitmaps of wire/swproto.h): every
	// member's bit at its own leaf, this node's leaf's members' bits, and
	// the top switch's bits (one switch: every member's; a tree: every
	// leaf's that has members; three levels: every pod's); with three
	// levels, this node's leaf's bit at its spine and the spine's bits
	// (its pod's leaves that have members).
	util::CowVector<uint8_t> member_bit;
	uint64_t leaf_bits = 0, top_bits = 0;
	uint8_t leaf_up = 0;
	uint64_t pod_bits = 0;
};

struct LayoutCache; // coll/xmit.cc

// What check_job derives from the member lists alone, the same on every
// node.  A copy of a checked configuration carries it, and check_job takes
// it instead of walking the lists again while the copy holds the very
// lists it came from (it pins them, util/cow_vector.h): each node's check
// is then O(leaves), not O(N), and a simulation of N nodes O(N), not
// O(N^2).
struct JobShape {
	std::shared_ptr<const std::vector<JobMember>> members;
	std::shared_ptr<const std::vector<uint16_t>> member_leaf;
	std::shared_ptr<const std::vector<uint8_t>> leaf_pod;
	bool sw = false;
	uint32_t leaves = 1, pods = 1;
	uint32_t total_ranks = 0;
	uint8_t family = 0;		     // the members' addresses: 4, 6, or 0 for both
	util::CowVector<uint8_t> member_bit; // with switches: as SwitchConfig's
	std::vector<uint8_t> leaf_count;     // with switches: members per leaf
	std::vector<uint8_t> leaf_up;	     // with pods: a leaf's bit at its spine
	uint64_t top_bits = 0;
	std::vector<uint64_t> pod_bits; // with pods: per pod, its leaves that have members
	// The last message layout made for these lists (coll/xmit.cc).
	std::shared_ptr<LayoutCache> layout;
};
std::shared_ptr<LayoutCache> new_layout_cache();

struct JobConfig {
	uint32_t jid = 0;
	uint16_t node = 0;		    // this node's index
	util::CowVector<JobMember> members; // shared by copies (the same on every node)
	Topology topology = Topology::ring;
	uint32_t seg_base = 0, seg_count = 0;
	uint32_t block_len = 0; // 0: the path MTU
	uint64_t key = 0;
	uint32_t timeout_ms = 0; // 0: the device default
	uint32_t total_ranks = 0;
	SwitchConfig sw;
	// The node's local ranks this QP serves: [local_first, local_first +
	// local_count); local_count 0: all of them.  The QP the member table
	// names leads; the node's other QPs join it (coll/join.cc).
	uint16_t local_first = 0, local_count = 0;
	std::shared_ptr<const JobShape> shape; // check_job's, shared by copies
	uint16_t nodes() const { return uint16_t(members.size()); }
	uint16_t my_count() const { return local_count ? local_count : members[node].ranks; }
};

// The job's shape checked, and what follows from it filled in (each
// member's first_rank, total_ranks; local_count 0 for all of the node's
// ranks): 0, or EINVAL with *why (when not null) naming what is wrong.
// The only such check (coll/job_check.cc): providers, ibv_coll_devd, the
// simulator and CollEngine::configure all call it; the engine adds only
// what depends on the device (its Seg units, its address, the QP).
int check_job(JobConfig &c, const char **why);

// One link of the chain of block descriptors: operator, end
// marker, block size and source position.  Built once per message and
// walked by both ring phases.
struct BlockDesc {
	uint64_t voff; // first element, in the collective's vector
	uint32_t elems;
	uint16_t chunk; // its place in Message::chunks (those that have blocks)
	uint8_t op;	// RedOp
	uint8_t end;	// last block of the message
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

// The ring's state of a message (ring.cc, ring_loss.cc).  Each hop, from
// this node to the next, is made reliable on its own: every DATA and
// RESULT this node sends the next one of the message gets a number (CETH
// rank_map, plus 1; a block sent again for the next node keeps its
// number), the next node NAKs the numbers a later one showed missing and
// ACKs those it has, and the last number sent goes again when no ACK came
// for a hop's timeout.  The block's own end-to-end timers, probes and
// RACK stay as the last resort.
struct RingMsg {
	// As sender: what each number carried, when it went, and whether it
	// went again; the next node has every number below acked; no tail
	// probe is due before tail_at, and tail_tries went without an ACK.
	struct Sent {
		uint32_t sid;
		uint8_t phase; // 0: a partial, 1: a result
		bool again;
		uint64_t at;
	};
	std::vector<Sent> sent;
	uint32_t acked = 0;
	uint64_t tail_at = UINT64_MAX;
	uint32_t tail_tries = 0;
	// As receiver: which numbers came (by number), when a later one
	// showed each missing (0: none, or it came), every number below cum
	// came, high is the highest seen plus 1; the gaps not NAKed yet, in
	// the order they showed (the reordering window); numbers taken in
	// since the last ACK, and when the next ACK is due.
	std::vector<uint8_t> got;
	std::vector<uint64_t> gap_at;
	uint32_t cum = 0, high = 0;
	struct Hole {
		uint32_t s, e;
		uint64_t at;
		uint16_t nak = 0; // the NAK's number (CETH seg)
	};
	util::Fifo<Hole> holes;
	// NAKed: NAKed again when still missing once a packet the sender
	// sent after it heard the NAK came (it echoes the last NAK it heard,
	// CETH seg), or, with nothing coming, after a while.
	util::Fifo<Hole> naked;
	uint16_t naks = 0;     // as receiver: the last NAK's number
	uint16_t nak_echo = 0; // as sender: the last NAK number heard
	uint32_t unacked = 0;
	uint64_t ack_due = UINT64_MAX;
	bool prev_over = false; // the message is over at the previous node
	// When this node next asks for what it still lacks (RingPath::
	// over_due): the previous node, or once it is over the finishers;
	// over_tries asks so far without it.
	uint64_t over_at = UINT64_MAX;
	uint32_t over_tries = 0;

	uint64_t probe_at = 0;
	uint32_t probes = 0;
	uint64_t heard = 0; // a partial of the message last passed through here
	// The partials this node passed on (neither origin nor finisher),
	// kept until the block's result passes here, to send again to the
	// next node: slots of block_bytes in kept, made as needed and kept
	// for the job's next messages (CollJob::spare_rings: a fresh buffer a
	// message cost its pages' faults, and a 4-node loopback ring ran 40 %
	// slower); kept_at by block: its slot + 1, or 0.
	// A partial is made in its slot and sent from there (lent:
	// kept_mark by slot, the port's lend mark of the last packet sent
	// from it, reclaimed before the slot is written again).
	std::vector<uint8_t> kept;
	std::vector<uint32_t> kept_at;
	std::vector<uint32_t> kept_free;
	std::vector<uint64_t> kept_mark;
	uint32_t block_bytes = 0;

	// A fresh state that keeps the memory of old's (the job's last
	// message's): a message then allocates nothing for its hops.
	static RingMsg reusing(RingMsg &old)
	{
		RingMsg g;
		g.sent.swap(old.sent);
		g.got.swap(old.got);
		g.gap_at.swap(old.gap_at);
		g.holes.swap(old.holes);
		g.naked.swap(old.naked);
		g.kept_at.swap(old.kept_at);
		g.kept_free.swap(old.kept_free);
		g.kept.swap(old.kept);		 // its contents are not read again
		g.kept_mark.swap(old.kept_mark); // reclaimed when old completed
		g.sent.clear();
		g.got.clear();
		g.gap_at.clear();
		g.holes.clear();
		g.naked.clear();
		g.kept_at.clear();
		g.kept_free.clear();
		return g;
	}
};

// A partial of the exchange travels as XCHG packets of a piece each (the
// job's path MTU, at most kXchgPiece bytes; numbered in the CETH's sid),
// at most kXchgPiecesMost of them: a message of more goes round the ring.
constexpr uint32_t kXchgPiece = 4096;
constexpr uint32_t kXchgPiecesMost = 64;
// XCHG's seg in an acknowledgement that answers no transmission (a NAK
// sent without one: XchgPath::nak_crossed).
constexpr uint16_t kXchgNoSeg = 0xffff;

inline uint32_t xchg_pieces(uint32_t len, uint32_t piece)
{
	return len ? (len + piece - 1) / piece : 1;
}

inline uint32_t xchg_piece_len(uint32_t len, uint32_t i, uint32_t piece)
{
	return std::min(piece, len - std::min<uint32_t>(len, i * piece));
}

// The piece of a QP's job: its path MTU, at most kXchgPiece (every member
// has the same, as for the ring's blocks).
inline uint32_t xchg_piece_of(const Qp &qp)
{
	return qp.attr.path_mtu ? std::min(qp.attr.path_mtu, kXchgPiece) : kXchgPiece;
}

// Every piece of a partial of len bytes, a bit each.
inline uint64_t xchg_all_pieces(uint32_t len, uint32_t piece)
{
	const uint32_t n = std::min(xchg_pieces(len, piece), kXchgPiecesMost);
	return n >= 64 ? ~0ull : (1ull << n) - 1;
}

// What a node of the exchange (xchg.cc) received or sent for one message:
// a partial per phase, each len bytes, those in have (bit per phase), of
// a phase not complete yet the pieces here (got), and the phases of which
// a piece is (begun); of those sent, the phases the peer acknowledged
// whole.  A piece goes on as soon as it is here (a partial's pieces
// travel its phases each at its own pace, as the ring's blocks do).
struct XchgSlots {
	uint32_t mid = 0;
	bool on = false;
	uint32_t len = 0;
	uint32_t tag = 0; // the collective, and a broadcast's root (xchg.cc)
	uint32_t have = 0, acked = 0, begun = 0;
	uint32_t piece = kXchgPiece; // bytes a packet
	std::array<uint64_t, 32> got{};
	std::vector<uint8_t> data;

	void reset(uint32_t m, uint32_t l, uint32_t phases, uint32_t t, uint32_t pc)
	{
		mid = m;
		on = true;
		len = l;
		piece = pc;
		tag = t;
		have = acked = begun = 0;
		got.fill(0);
		data.resize(size_t(l) * phases);
	}
	bool has(uint32_t ph) const { return on && (have >> ph & 1); }
	// The pieces of phase ph here.
	uint64_t pieces(uint32_t ph) const { return has(ph) ? all() : got[ph]; }
	uint64_t all() const { return xchg_all_pieces(len, piece); }
	uint32_t npieces() const { return xchg_pieces(len, piece); }
	uint32_t piece_len(uint32_t i) const { return xchg_piece_len(len, i, piece); }
	size_t off(uint32_t i) const { return size_t(i) * piece; }
	// Piece i of phase ph came: false if it was here already; the phase
	// is here once every piece is.
	bool add(uint32_t ph, uint32_t i)
	{
		const uint64_t bit = 1ull << i;
		if (has(ph) || (got[ph] & bit))
			return false;
		got[ph] |= bit;
		begun |= 1u << ph;
		if (got[ph] == all())
			have |= 1u << ph;
		return true;
	}
	uint8_t *at(uint32_t ph) { return data.data() + size_t(len) * ph; }
	const uint8_t *at(uint32_t ph) const { return data.data() + size_t(len) * ph; }
};

// What this node sent of one message of the exchange, kept until each
// peer it went to has it (xchg_ack.cc), after the message completed here
// if need be: the partials, their header and peers, and when what no peer
// acknowledged yet goes again.
struct XchgOut {
	XchgSlots sent;
	wire::Ceth h;		       // the message's XCHG header
	std::array<uint16_t, 32> to{}; // each phase's peer
	uint64_t again_at = 0, again_gap = 0;
	uint64_t parked = 0; // when the message completed here (0: it runs)
	uint64_t heard = 0;  // ... or a piece was last acknowledged, if later
	// Per phase: when its partial was first sent and last sent, and how
	// often it went again (XCHG's seg, which the acknowledgement echoes:
	// it says which transmission it answers, so a round trip is timed
	// even when the partial went again; 0 once timed).
	std::array<uint64_t, 32> first_at{}, last_at{};
	std::array<uint16_t, 32> tries{};
	// Per phase: when it last sent a piece, new or again (never cleared):
	// its repeat is due again_gap after that (XchgPath::again).
	std::array<uint64_t, 32> went{};
	// Phases whose repeat sent only their last unacknowledged piece, and
	// whose other missing pieces go once its acknowledgement says which
	// (XchgPath::on_ack).
	uint32_t probing = 0;
	// Per phase: the pieces acknowledged (an acknowledgement names those
	// its sender has, in node_map; all once acked has the phase).
	std::array<uint64_t, 32> acked_pieces{};
	// Per phase: the pieces sent once, before any piece above them (a
	// piece held back by a missing one of the phase before goes after
	// those above it): where a later piece came and one of these below it
	// did not, that one was lost (XchgPath::repeat_gap).
	std::array<uint64_t, 32> in_order{};
	// The packets go from sent's buffer (lent): the port's mark of the
	// last, which a new message's partials may not overwrite before it
	// left (XchgPath::open_out).
	uint64_t lent = 0;

	// The peer has the pieces in mask of phase ph's partial: those it
	// named for the first time (the phase is acknowledged once all are).
	uint64_t take_acks(uint32_t ph, uint64_t mask)
	{
		const uint64_t fresh = mask & sent.pieces(ph) & ~acked_pieces[ph];
		acked_pieces[ph] |= fresh;
		if (acked_pieces[ph] == sent.all())
			sent.acked |= 1u << ph;
		return fresh;
	}
};

// The exchange's state of a message (xchg.cc): the phase this node is in,
// its partial so far, what came of the message and what this node sent.
struct XchgMsg {
	// The phase each piece of the partial is in here (past the last: done).
	std::array<uint8_t, kXchgPiecesMost> at{};
	bool result = false; // the result is written
	// The phases whose partial a peer said it sent and that was not all
	// here: NAKed once (XchgPath::nak_crossed).
	uint32_t crossed = 0;
	bool done = false; // ... and what was sent handed to the job (XchgJob::outs)
	std::vector<uint8_t> acc;
	XchgSlots in;
	XchgOut out;
};

// The switch path's state of a message (swpath.cc, swadmit.cc): blocks
// numbered across the job's messages.
struct SwitchMsg {
	bool on = false;      // the message runs through the switch (AUTO may leave it)
	bool waiting = false; // for the switch's grant
	uint8_t admit = 0;    // tdm: 1 asked the switch, 2 granted the pool
	uint64_t admit_sent = 0;
	uint16_t admit_why = 0;	 // tdm refused it: kRanBusy, kRanScored or kRanRefused
	uint64_t gs0 = 0;	 // the job's number for block 0
	uint32_t base = 0;	 // oldest block without its result
	uint32_t next = 0;	 // next block to send
	uint32_t high = 0;	 // the highest block with its result, plus 1
	bool port_wait = false;	 // the next block waits for the port (CollCore::port_ready)
	uint64_t held_since = 0; // the full window has held the next block since (0: not)
	// No result for a while: when the oldest blocks were last probed
	// (ASKed), and how many probes since the last result.
	uint64_t probe_at = 0;
	uint32_t probes = 0;
	// The switch answered this message (a result or a NAK came): the
	// path works, and the probes back off less (SwitchPath::probe_due).
	bool answered = false;
	std::vector<uint8_t> acked; // end-to-end mode: node 0 acknowledged the block
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
	// Each of the node's ranks' buffers, and whose they are: its QP's
	// protection domain and that PD's address space (the lead's, or a
	// joined QP's in another process); ranks of them.
	struct RankBufs {
		Sge src, dst;
		uint32_t pdn = 0;
		DmaSpace space = kLocalSpace;
	};
	std::vector<RankBufs> rank;
	bool remote = false; // some rank's buffers are in another process
	// The node's other QPs' WQEs this message runs (coll/join.cc): each
	// completes on its own QP with the message.
	struct PartWqe {
		uint32_t qpn, idx;
		uint64_t wr_id;
		bool signaled;
	};
	std::vector<PartWqe> parts;

	// Layout (build_chain; shared with the other messages of its shape,
	// and in a simulation with the job's other nodes).
	util::CowVector<BlockDesc> chain;
	util::CowVector<ChunkRole> chunks;
	uint32_t nblocks = 0;
	bool result_data = true; // the result phase carries data (not just a token)

	// Progress.
	std::vector<uint8_t> final_; // per block: its result is here
	uint32_t finals = 0;
	uint32_t next_inject = 0, inject_end = 0; // this node's own blocks to start
	PendingSet o_pending;			  // started here, result not back
	PendingSet f_pending;			  // result sent round, not back
	uint64_t last_progress = 0;
	// This node's finished chunk when no local destination holds it.
	std::vector<uint8_t> staging;
	uint64_t staging_voff = 0;
	std::vector<uint8_t> zeros; // barrier input
	// Buffers in another process (DmaSpace) are reached by a system call
	// per copy, which costs what copying 16 KiB does: so copies move runs
	// of blocks (coll/xmit.cc).  Results and sources sent from there are
	// kept here by vector offset until the message completes (they are
	// lent to queued packets): in_bounce[sid] says block sid is.  Results
	// are written to the ranks in runs: [wrun_b, wrun_e) (elements) are
	// staged here, not written yet.
	std::vector<uint8_t> bounce;
	std::vector<uint8_t> in_bounce;
	uint64_t wrun_b = 0, wrun_e = 0;
	// The ranks' sources read ahead for the reductions: elements
	// [ahead_b, ahead_e) of each rank, ahead_stride bytes apart.
	std::vector<uint8_t> ahead;
	uint64_t ahead_b = 0, ahead_e = 0, ahead_stride = 0;
	uint8_t ran = 0;	// CollRan
	bool dma_error = false; // a local buffer failed its check
	// A destination may be its source (in place): block i's result must
	// not be written while a packet sent from block i of the source is
	// still queued; src_lent[i] is the port's lend mark of the last one.
	bool inplace = false;
	std::vector<uint64_t> src_lent;

	// How it runs (coll/coll_path.h), chosen when it starts.
	CollPath *path = nullptr;

	// Each strategy's own state of the message: only it reads or writes
	// it (execution control reads the switch path's refusal, to report
	// it in the completion).
	RingMsg ring;
	SwitchMsg sw;
	XchgMsg xchg;
};

// The message's chunks and chain of blocks (m.coll, op, count, es and
// root_node set): blocks of at most path_mtu bytes, the same on every node
// of the job (coll/xmit.cc).
void build_chain(const JobConfig &c, Message &m, uint32_t path_mtu);

// A block kept in a Seg unit because it came before its message started
// here: (message, block, kind) -> unit.
struct EarlyKey {
	uint32_t mid, sid;
	uint8_t kind;
	bool operator==(const EarlyKey &o) const
	{
		return mid == o.mid && sid == o.sid && kind == o.kind;
	}
};
struct EarlyKeyHash {
	size_t operator()(const EarlyKey &k) const
	{
		uint64_t x = (uint64_t(k.mid) << 32 | k.sid) * 0x9e3779b97f4a7c15ull;
		return size_t(x ^ (x >> 29) ^ k.kind);
	}
};

struct MsgRecord {
	uint32_t mid;
	MsgState state;
	uint32_t blocks;
};

// The switch path's state of a job (swpath.cc, swadmit.cc).  Execution
// control reads phase and why, to start the ring on AUTO's fallback and
// say so in the completion.
struct SwitchJob {
	enum class Phase : uint8_t { none, configuring, ready, fallback, failed };
	Phase phase = Phase::none;
	std::vector<uint32_t> granted; // per plane (0: not yet)
	std::vector<uint8_t> heard;    // per plane: its leaf has answered
	uint32_t window = 0, span = 0; // see SwitchPath::ready
	uint64_t cfg_start = 0, cfg_sent = 0;
	uint64_t heard_at = 0; // every plane's leaf had answered (0: not yet)
	// Once granted, CONFIG again this often (a third of the switch's idle
	// timeout, which its CONFIG_ACK tells), so that a job whose members
	// are silent for a while (computing, checking) stays known; 0: never.
	uint64_t keep_ns = 0;
	// The job's number for the next message's block 0: every member adds
	// the blocks of each message it starts through the switch
	// (SwitchPath::go), in MID order.
	uint64_t next_gs = 0;
	CollStatus fail = CollStatus::success;
	bool tdm = false; // the switch decides per message (--policy tdm)
	// Blocks in flight through the switches (nic/cc.h): delay, NAKs and
	// timeouts move it; the grant's window caps it.
	CongestionCtl cc;
	// How long after a partial left a NAK of it may still be answered by
	// that partial on its way (RACK's reordering window, for ASKs that
	// overtake partials and partials that overtake each other): 0 until
	// a repeat sent on a NAK turned out needless (SwitchPath::spurious).
	uint64_t reo_wnd = 0;
	// ASKs sent, and of them answered by a result that had come already;
	// partials sent again on a NAK, and of them answered by a second
	// result (SwitchPath::answered_twice); all halve each message.
	uint32_t asks = 0, asks_needless = 0, naks = 0, naks_needless = 0;
	uint8_t why = 0; // kRanRefused: the switch refused the job
	// AUTO, configuring: a member's ring packet of this message came (0:
	// none); the switch's next answer says whether to follow it
	// (SwitchPath::on_member_ring).
	uint32_t ring_mid = 0;
};

// The exchange's state of a job: the partials that came for messages not
// started here yet (members run ahead by up to the depth, and a
// broadcast's leaves by more), a slot each (XchgSlots::on: in use).
//
// An acknowledgement is owed for a partial that came (XchgOwed) and goes
// only when nothing this node sends its peer says as much before
// (xchg_ack.cc).  What this node sent goes from a message to outs when it
// completes, and stays until acknowledged; outs not in use (sent.on
// false) and accs keep their buffers for the next messages.
struct XchgOwed {
	wire::Ceth h; // the partial's header
	uint16_t to = 0;
	uint64_t since = 0;
};

// Later messages' partials kept at a time (XchgPath::keep): twice the
// deepest depth.
constexpr size_t kXchgEarlySlots = 32;

struct XchgJob {
	std::vector<XchgSlots> early;
	std::vector<XchgOut> outs;
	std::vector<XchgOwed> owed;
	std::vector<std::vector<uint8_t>> accs;
	uint64_t owed_due = 0;	     // the oldest owed's deadline (0: none)
	uint32_t piece = kXchgPiece; // a partial's bytes a packet: the path MTU

	// The early slot that holds mid's partials (null: none).
	XchgSlots *early_of(uint32_t mid)
	{
		for (XchgSlots &e : early)
			if (e.on && e.mid == mid)
				return &e;
		return nullptr;
	}
};

struct CollJob {
	JobConfig cfg;
	IpAddr src_ip;
	uint32_t pdn = 0;
	uint32_t qpn = 0;
	// A QP that joined another's job (coll/join.cc): the lead's QPN (0:
	// this QP holds the job itself).  A lead serving part of its node's
	// ranks waits for the others' WQEs; join_wait: since when (0: not).
	uint32_t lead = 0;
	uint64_t join_wait = 0;
	bool parted() const { return !lead && cfg.my_count() < cfg.members[cfg.node].ranks; }
	uint64_t owner = 0; // Seg range owner id
	// The units the running message holds (CollEngine::hold_units):
	// [run_base, run_base + run_count), the job's own range or, when
	// another job's collective holds part of it, as many free elsewhere.
	uint32_t run_base = 0, run_count = 0;
	std::unique_ptr<Message> active;
	// Messages started after the active one and running beside it, oldest
	// first: only while all run as the exchange (coll/xchg.cc), all
	// round the ring (coll/ring.cc), or all through the switch
	// (coll/swpath.cc), at most IBV_COLL_EMU_COLL_DEPTH in all; they
	// complete in MID order, each becoming the active one in turn
	// (CollEngine::complete).
	std::deque<std::unique_ptr<Message>> flight;
	// The messages that run, oldest first: run(0) is the active one, then
	// those beside it (runs() of them; 0 when none runs).
	size_t runs() const { return active ? 1 + flight.size() : 0; }
	Message &run(size_t i) const { return i ? *flight[i - 1] : *active; }
	// The message of mid that runs here (the active one or one in flight).
	Message *running(uint32_t mid) const
	{
		if (active && active->mid == mid)
			return active.get();
		for (const auto &f : flight)
			if (f->mid == mid)
				return f.get();
		return nullptr;
	}
	// The last message's bounce buffer, for the next (no zeroing again).
	std::vector<uint8_t> spare_bounce;
	// The hop state of messages done round the ring, for their memory:
	// one for each message that may run at once (IBV_COLL_EMU_COLL_DEPTH),
	// so that messages in flight together each find one.
	std::vector<RingMsg> spare_rings;
	uint32_t inc = 0;	  // incarnation: the QP's count of jobs given it (wire::Ceth::inc)
	uint32_t last_mid = 0;	  // most recent finished (or failed) message; 0: none yet
	uint32_t aborted_mid = 0; // a member aborted this message before we ran it (0: none)
	bool superseded = false;  // a later incarnation runs elsewhere: fail what starts
	CollStatus abort_status = CollStatus::remote_abort;
	std::deque<MsgRecord> history; // recent messages, for QUERY
	std::unordered_map<EarlyKey, uint32_t, EarlyKeyHash>
		early; // blocks kept for later messages
	// Round trip of a block round the ring (smoothed, and its variation),
	// from which the retransmission timeout follows, as TCP's does.
	uint64_t srtt = 0, rttvar = 0;
	// How long a gap in what the previous node passes on may wait before
	// it is NAKed (RACK's reordering window): 0 until a block that a gap
	// showed missing came after all, not a repeat (the path reorders);
	// then the longest such wait, at most a round trip.
	uint64_t reo_wnd = 0;
	// Round the ring, one hop's round trip (smoothed): from passing a
	// chunk's last block on to the next node's ACK of the chunk; 0 before
	// any.
	uint64_t hop_rtt = 0;
	// ... and from a NAK to the number it asked for (smoothed): the
	// repair waits behind what the sender had queued.
	uint64_t repair_rtt = 0;
	// The same without the time blocks waited (for an application to post
	// its collective, for other members' partials at a switch): how long
	// an answer takes when no one is waited for, which paces probes.
	uint64_t qrtt = 0, qrttvar = 0;
	// The least of those: an answer's time through an empty queue; and
	// the latest: through the queue as it is now.
	uint64_t qmin = 0, qlast = 0;
	uint64_t probe_rtt() const { return qrtt ? qrtt : srtt; }
	// When an answer not here is probed for (TCP's TLP, with room for the
	// round trip's variation as its RTO has): twice the round trip, or
	// the round trip and four times its variation, and no sooner than an
	// answer usually comes, waits included (a member that posts late, or
	// is descheduled, is no loss); no less than floor; 0 before any
	// sample.
	// tail: nothing is left to send, and nothing more will come to show
	// a loss.  The probe is due after this long without an answer, and
	// while answers come the queue drains one after another: silence for
	// twice the round trip through an empty queue is a loss, however
	// long the queue the message itself built (the smoothed round trip
	// there is the message's own time, and waiting for it would double a
	// short message's).
	uint64_t probe_time(uint64_t floor, bool tail = false) const
	{
		if (!qrtt)
			return srtt ? std::max(2 * srtt, floor) : 0;
		if (tail)
			return std::max(2 * qmin, floor);
		return std::max({2 * qrtt, qrtt + 4 * qrttvar, srtt, floor});
	}
	// This node's blocks' congestion window (nic/cc.h), and when a CNP
	// last went to each member.
	CongestionCtl cc;
	std::vector<uint64_t> cnp_at;

	// The switch path's state of the job (swpath.cc, swadmit.cc).
	SwitchJob sw;
	// The exchange's (xchg.cc).
	XchgJob xchg;
	using SwPhase = SwitchJob::Phase;

	// A packet of message mid belongs to one this node has not reached
	// yet.  A member runs at most the depth ahead of the newest message
	// started here and a MID follows the last in serial-number arithmetic
	// (coll/seqnum.h), so a MID after the newest we run is a later
	// message's, any other an old one's (or one that runs).
	bool ahead(uint32_t mid) const
	{
		const uint32_t at = !flight.empty() ? flight.back()->mid
				    : active	    ? active->mid
						    : last_mid;
		return at ? seq_after(mid, at) : mid != 0;
	}
};

} // namespace ibv_coll::emu
