// Data cache & compute: the Seg pool.
#include "seg/seg_pool.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

SegPool::SegPool(uint32_t units, uint32_t unit_bytes) : units_(units), unit_bytes_(unit_bytes)
{
	mem_.reset(new uint8_t[size_t(units) * unit_bytes]);
	for (uint32_t i = 0; i < units; i++)
		units_[i].data = mem_.get() + size_t(i) * unit_bytes;
}

bool SegPool::acquire(uint32_t i, uint32_t jid, uint32_t mid, uint32_t sid, RedOp op, Dtype dt,
		      uint32_t len, uint64_t node_pending, uint64_t rank_pending)
{
	SegUnit &u = units_[i];
	if (u.busy || len > unit_bytes_)
		return false;
	uint8_t *data = u.data;
	const uint64_t lent = u.lent; // a property of the memory, not of the block
	u = SegUnit{};
	u.data = data;
	u.lent = lent;
	u.busy = true;
	u.jid = jid;
	u.mid = mid;
	u.sid = sid;
	u.op = op;
	u.dtype = dt;
	u.fn = reduce_fn(op, dt);
	u.len = len;
	u.node_pending = node_pending;
	u.rank_pending = rank_pending;
	const uint32_t n = in_use_.fetch_add(1, std::memory_order_relaxed) + 1;
	uint32_t hw = high_water_.load(std::memory_order_relaxed);
	while (n > hw && !high_water_.compare_exchange_weak(hw, n, std::memory_order_relaxed)) {
	}
	return true;
}

void SegPool::release(uint32_t i)
{
	SegUnit &u = units_[i];
	if (u.busy) {
		if (u.settled) {
			u.settled = false;
			settled_.fetch_sub(1, std::memory_order_relaxed);
		}
		u.busy = false;
		in_use_.fetch_sub(1, std::memory_order_relaxed);
	}
}

void SegPool::settle(uint32_t i)
{
	SegUnit &u = units_[i];
	if (u.busy && !u.settled) {
		u.settled = true;
		settled_.fetch_add(1, std::memory_order_relaxed);
	}
}

SegResult SegPool::contribute(uint32_t i, uint64_t node_bit, uint64_t rank_bit, const void *src,
			      uint32_t len)
{
	SegUnit &u = units_[i];
	if (len != u.len)
		return SegResult::mismatch;
	if ((node_bit && !(u.node_pending & node_bit)) ||
	    (rank_bit && !(u.rank_pending & rank_bit)))
		return SegResult::duplicate;
	u.node_pending &= ~node_bit;
	u.rank_pending &= ~rank_bit;
	u.node_map |= node_bit;
	if (!u.filled) {
		memcpy(u.data, src, len);
		u.filled = true;
		return SegResult::filled;
	}
	size_t n = len / dtype_size(u.dtype);
	u.fn(u.data, u.data, src, n);
	return SegResult::reduced;
}

SegResult SegPool::contribute_ranks(uint32_t i, uint64_t rank_mask, const void *src, uint32_t len)
{
	SegUnit &u = units_[i];
	if (len != u.len)
		return SegResult::mismatch;
	if (!rank_mask || (u.rank_pending & rank_mask) != rank_mask)
		return SegResult::duplicate;
	u.rank_pending &= ~rank_mask;
	if (!u.filled) {
		memcpy(u.data, src, len);
		u.filled = true;
		return SegResult::filled;
	}
	u.fn(u.data, u.data, src, len / dtype_size(u.dtype));
	return SegResult::reduced;
}

SegResult SegPool::contribute_node_and_ranks(uint32_t i, uint64_t node_bit, const void *node_src,
					     uint64_t rank_mask, const void *rank_src, uint32_t len,
					     uint8_t *out)
{
	SegUnit &u = units_[i];
	if (len != u.len)
		return SegResult::mismatch;
	if (!node_bit || !rank_mask || !(u.node_pending & node_bit) ||
	    (u.rank_pending & rank_mask) != rank_mask)
		return SegResult::duplicate;
	u.node_pending &= ~node_bit;
	u.rank_pending &= ~rank_mask;
	u.node_map |= node_bit;
	ReduceFn f = u.fn;
	size_t n = len / dtype_size(u.dtype);
	if (!u.filled) {
		f(out && complete(i) ? out : u.data, node_src, rank_src, n);
		u.filled = true;
		return SegResult::filled;
	}
	if (out && complete(i))
		memcpy(out, u.data, len);
	uint8_t *d = out && complete(i) ? out : u.data;
	f(d, d, node_src, n);
	f(d, d, rank_src, n);
	return SegResult::reduced;
}

SegResult SegPool::contribute_nodes(uint32_t i, uint64_t node_mask, const void *src, uint32_t len)
{
	SegUnit &u = units_[i];
	if (len && len != u.len)
		return SegResult::mismatch;
	if (!node_mask || (u.node_pending & node_mask) != node_mask)
		return SegResult::duplicate;
	u.node_pending &= ~node_mask;
	u.node_map |= node_mask;
	if (!len)
		return SegResult::reduced; // a member with nothing to add (a token)
	if (!u.filled) {
		memcpy(u.data, src, len);
		u.filled = true;
		return SegResult::filled;
	}
	u.fn(u.data, u.data, src, len / dtype_size(u.dtype));
	return SegResult::reduced;
}

bool SegPool::reserve(uint32_t base, uint32_t count, uint64_t owner)
{
	const uint32_t end = base + count;
	for (const Reservation &r : reserved_)
		if (r.owner != owner && r.base < end && base < r.end)
			return false;
	// The owner's own ranges that overlap or touch this one merge into it.
	uint32_t lo = base, hi = end;
	size_t k = 0;
	for (const Reservation &r : reserved_) {
		if (r.owner == owner && r.base <= hi && lo <= r.end) {
			lo = std::min(lo, r.base);
			hi = std::max(hi, r.end);
			continue;
		}
		reserved_[k++] = r;
	}
	reserved_.resize(k);
	if (lo < hi)
		reserved_.push_back(Reservation{lo, hi, owner});
	return true;
}

void SegPool::unreserve(uint32_t base, uint32_t count, uint64_t owner)
{
	const uint32_t end = base + count;
	std::vector<Reservation> &keep = keep_;
	keep.clear();
	bool changed = false;
	for (const Reservation &r : reserved_) {
		if (r.owner != owner || r.end <= base || end <= r.base) {
			keep.push_back(r);
			continue;
		}
		changed = true;
		if (r.base < base) // what is left on either side stays reserved
			keep.push_back(Reservation{r.base, base, owner});
		if (end < r.end)
			keep.push_back(Reservation{end, r.end, owner});
	}
	if (changed)
		reserved_.swap(keep);
}

uint32_t SegPool::find_free(uint32_t count, uint64_t owner) const
{
	// First fit: the candidates are 0 and the end of every other owner's
	// range (a free stretch starts at one of them).
	uint32_t best = size();
	auto fits = [&](uint32_t base) {
		if (uint64_t(base) + count > size())
			return false;
		for (const Reservation &r : reserved_)
			if (r.owner != owner && r.base < base + count && base < r.end)
				return false;
		return true;
	};
	if (fits(0))
		return 0;
	for (const Reservation &r : reserved_)
		if (r.owner != owner && r.end < best && fits(r.end))
			best = r.end;
	return best;
}

} // namespace ibv_coll::emu
