// Data cache & compute: the pool of Seg cache units.  A unit holds one
// data block of one (job, message, block), its op and datatype, and two
// pending bitmaps: the nodes and the local ranks whose contributions are
// still to come.  The first contribution fills the unit, later ones are
// reduced into it and clear their bit; a contribution whose bit is not
// pending is refused, so nothing is ever reduced twice.  When both bitmaps
// are empty the block is complete and the owner moves it on and releases
// the unit at once (the NIC), or keeps the result in it as the shadow copy
// that answers a late repeat until the unit is reused (the switch).  The
// NIC and the switch use the same pool.
#pragma once

#include "reduce/reduce.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ibv_coll::emu {

struct SegUnit {
	bool busy = false;
	bool filled = false;
	bool settled = false; // its holder has its result (SegPool::settle)
	uint32_t jid = 0, mid = 0, sid = 0;
	uint32_t seq = 0; // protocol specific (the switch: the block's number in its job)
	RedOp op = RedOp::sum;
	Dtype dtype = Dtype::uint8;
	ReduceFn fn = nullptr; // reduce_fn(op, dtype), looked up when the unit is taken
	uint8_t kind = 0;      // what the holder stored (protocol specific)
	uint32_t hop = 0;      // protocol specific
	uint16_t src_node = 0; // protocol specific
	uint32_t len = 0;      // payload bytes
	uint64_t node_pending = 0;
	uint64_t rank_pending = 0;
	uint64_t node_map = 0; // nodes whose data the payload holds
	// Protocol specific: the CETH hold and queue of the block, and a time
	// (the NIC's blocks kept early: what they came with, and when they
	// reached this host; the switch: see switch_fold.cc).
	uint32_t hold = 0, queue = 0;
	uint64_t rx_ns = 0;
	uint8_t *data = nullptr; // unit_bytes of payload
	// The switch sends a result from the unit itself: the payload's CRC
	// (crc32_update(0, data || pad)), and the port's lend mark of the
	// last packet sent from it.
	uint32_t crc = 0;
	uint64_t lent = 0;
};

enum class SegResult : uint8_t { filled, reduced, duplicate, mismatch };

class SegPool {
public:
	SegPool(uint32_t units, uint32_t unit_bytes);
	uint32_t size() const { return uint32_t(units_.size()); }
	uint32_t unit_bytes() const { return unit_bytes_; }
	uint32_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
	uint64_t high_water() const { return high_water_.load(std::memory_order_relaxed); }
	// Busy units whose holder still collects for them (not settled):
	// counted as units are taken, settled and released, so that a
	// simulator can sample it after every pass of a pool of thousands.
	uint32_t collecting() const
	{
		const uint32_t n = in_use_.load(std::memory_order_relaxed),
			       s = settled_.load(std::memory_order_relaxed);
		return n > s ? n - s : 0;
	}
	SegUnit &unit(uint32_t i) { return units_[i]; }
	const SegUnit &unit(uint32_t i) const { return units_[i]; }

	// Take unit i for (jid, mid, sid): false if it is busy.
	bool acquire(uint32_t i, uint32_t jid, uint32_t mid, uint32_t sid, RedOp op, Dtype dt,
		     uint32_t len, uint64_t node_pending, uint64_t rank_pending);
	void release(uint32_t i);
	// Busy unit i holds its block's final result: it collects no more
	// (once per taking; again, or on a free unit, nothing).
	void settle(uint32_t i);

	// Add one contribution: a node's (node_bit) or a local rank's
	// (rank_bit) data, exactly one of the two bits set.  The first fills
	// the unit; later ones are reduced in, in arrival order (callers that
	// need a fixed order feed contributions in that order).
	SegResult contribute(uint32_t i, uint64_t node_bit, uint64_t rank_bit, const void *src,
			     uint32_t len);
	// Add the already-reduced data of several local ranks (rank_mask, all
	// pending): fills an empty unit, else unit = op(unit, src).
	SegResult contribute_ranks(uint32_t i, uint64_t rank_mask, const void *src, uint32_t len);
	// A node's data (node_bit) and the already-reduced data of several
	// local ranks (rank_mask), in that order, all pending: an empty unit
	// becomes op(node_src, rank_src) in one pass over the three buffers.
	// With out, an empty unit that this completes is made at out instead
	// of in its own buffer: where it goes next (the NIC ring's packet).
	SegResult contribute_node_and_ranks(uint32_t i, uint64_t node_bit, const void *node_src,
					    uint64_t rank_mask, const void *rank_src, uint32_t len,
					    uint8_t *out = nullptr);
	// Add the already-reduced data of several nodes (node_mask, all
	// pending), as a switch gets it from the switch below: fills an empty
	// unit, else unit = op(unit, src).  len 0 is a contribution of
	// nothing (a broadcast's non-root): only the bits clear.
	SegResult contribute_nodes(uint32_t i, uint64_t node_mask, const void *src, uint32_t len);
	bool complete(uint32_t i) const
	{
		return !units_[i].node_pending && !units_[i].rank_pending;
	}

	// Exclusive use of a range of units by one job's running message;
	// false if another owner holds any of them.  Kept as ranges, not per
	// unit: a job's range is often the whole pool, reserved and released
	// once per message.
	bool reserve(uint32_t base, uint32_t count, uint64_t owner);
	void unreserve(uint32_t base, uint32_t count, uint64_t owner);
	// The lowest base of `count` units that no other owner holds, or
	// size() when there is none.
	uint32_t find_free(uint32_t count, uint64_t owner) const;

private:
	struct Reservation {
		uint32_t base, end; // [base, end)
		uint64_t owner;
	};
	std::vector<SegUnit> units_;
	std::vector<Reservation> reserved_, keep_; // keep_: unreserve's scratch
	std::unique_ptr<uint8_t[]> mem_;
	uint32_t unit_bytes_;
	// Counted atomically: a switch's workers take and release units of
	// their own at once.
	std::atomic<uint32_t> in_use_{0};
	std::atomic<uint32_t> high_water_{0};
	std::atomic<uint32_t> settled_{0};
};

} // namespace ibv_coll::emu
