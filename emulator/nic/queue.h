// A ring of fixed-size slots shared by a driver and the device model: the
// work queues (driver produces, device consumes) and the completion queues
// (device produces, driver consumes).  The indices and slots are one
// region, of the queue's own or given (a shared mapping), so that driver
// and device may be two processes.
//
// Memory ordering: the producer fills a slot, then publishes it with a
// release store of prod; the consumer reads prod with acquire before it
// reads the slot.  The consumer frees slots with a release store of cons;
// the producer reads cons with acquire before it overwrites a slot.  Each
// index has one writer, so no read-modify-write is needed.  Indices run
// free and wrap at 2^32; the slot of index i is i & mask.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace ibv_coll::emu {

// The indices, each on a cache line of its own, at the start of a queue's
// memory; the slots follow.  Lock-free 32-bit atomics, so that the two
// sides may be two processes mapping one shared region (a memfd).
struct QueueHdr {
	alignas(64) std::atomic<uint32_t> prod{0};
	alignas(64) std::atomic<uint32_t> cons{0};
};
static_assert(sizeof(QueueHdr) == 128 && std::atomic<uint32_t>::is_always_lock_free);

class Queue {
public:
	// slots is rounded up to a power of two; stride to 64 bytes.
	static uint32_t round_slots(uint32_t slots)
	{
		uint32_t n = 1;
		while (n < slots)
			n <<= 1;
		return n;
	}
	static uint32_t round_stride(uint32_t stride) { return (stride + 63) & ~63u; }
	// The bytes a queue of these dimensions takes: the header, then the slots.
	static size_t region_bytes(uint32_t slots, uint32_t stride)
	{
		return sizeof(QueueHdr) + size_t(round_slots(slots)) * round_stride(stride);
	}

	// A queue in memory of its own.
	Queue(uint32_t slots, uint32_t stride)
	{
		size_t bytes = region_bytes(slots, stride);
		own_.reset(static_cast<uint8_t *>(aligned_alloc(64, bytes)));
		if (!own_)
			throw std::bad_alloc();
		place(slots, stride, own_.get(), true);
	}
	// A queue in region_bytes(slots, stride) bytes at mem (64-byte
	// aligned) that the caller keeps mapped while the queue lives, such as
	// a shared mapping of a memfd: init formats it (both indices 0),
	// otherwise the queue attaches to one formatted already (its indices
	// are used as found: a consumer must not trust them beyond the mask).
	Queue(uint32_t slots, uint32_t stride, void *mem, bool init)
	{
		place(slots, stride, static_cast<uint8_t *>(mem), init);
	}
	Queue(const Queue &) = delete;
	Queue &operator=(const Queue &) = delete;

	uint32_t slots() const { return mask_ + 1; }
	uint32_t stride() const { return stride_; }
	uint8_t *slot(uint32_t idx) const { return buf_ + size_t(idx & mask_) * stride_; }
	template <class T> T *at(uint32_t idx) const { return reinterpret_cast<T *>(slot(idx)); }

	// Producer side.
	uint32_t prod_relaxed() const { return hdr_->prod.load(std::memory_order_relaxed); }
	uint32_t free_slots() const
	{
		return slots() - (hdr_->prod.load(std::memory_order_relaxed) -
				  hdr_->cons.load(std::memory_order_acquire));
	}
	void publish(uint32_t new_prod) { hdr_->prod.store(new_prod, std::memory_order_release); }

	// Consumer side.
	uint32_t prod() const { return hdr_->prod.load(std::memory_order_acquire); }
	uint32_t cons() const { return hdr_->cons.load(std::memory_order_relaxed); }
	void consume(uint32_t new_cons) { hdr_->cons.store(new_cons, std::memory_order_release); }

private:
	void place(uint32_t slots, uint32_t stride, uint8_t *mem, bool init)
	{
		mask_ = round_slots(slots) - 1;
		stride_ = round_stride(stride);
		hdr_ = init ? new (mem) QueueHdr() : reinterpret_cast<QueueHdr *>(mem);
		buf_ = mem + sizeof(QueueHdr);
	}
	struct Free {
		void operator()(uint8_t *p) const { free(p); }
	};
	std::unique_ptr<uint8_t, Free> own_; // empty: the caller's memory
	QueueHdr *hdr_ = nullptr;
	uint8_t *buf_ = nullptr;
	uint32_t mask_ = 0;
	uint32_t stride_ = 0;
};

} // namespace ibv_coll::emu
