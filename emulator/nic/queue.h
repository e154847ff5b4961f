// A ring of fixed-size slots shared by a driver and the device model: the
// work queues (driver produces, device consumes) and the completion queues
// (device produces, driver consumes).
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

namespace ibv_coll::emu {

class Queue {
public:
	// slots is rounded up to a power of two; stride to 64 bytes.
	Queue(uint32_t slots, uint32_t stride)
	{
		uint32_t n = 1;
		while (n < slots)
			n <<= 1;
		mask_ = n - 1;
		stride_ = (stride + 63) & ~63u;
		buf_.reset(static_cast<uint8_t *>(aligned_alloc(64, size_t(n) * stride_)));
		if (!buf_)
			throw std::bad_alloc();
	}

	uint32_t slots() const { return mask_ + 1; }
	uint32_t stride() const { return stride_; }
	uint8_t *slot(uint32_t idx) const { return buf_.get() + size_t(idx & mask_) * stride_; }
	template <class T> T *at(uint32_t idx) const { return reinterpret_cast<T *>(slot(idx)); }

	// Producer side.
	uint32_t prod_relaxed() const { return prod_.load(std::memory_order_relaxed); }
	uint32_t free_slots() const
	{
		return slots() - (prod_.load(std::memory_order_relaxed) -
				  cons_.load(std::memory_order_acquire));
	}
	void publish(uint32_t new_prod) { prod_.store(new_prod, std::memory_order_release); }

	// Consumer side.
	uint32_t prod() const { return prod_.load(std::memory_order_acquire); }
	uint32_t cons() const { return cons_.load(std::memory_order_relaxed); }
	void consume(uint32_t new_cons) { cons_.store(new_cons, std::memory_order_release); }

private:
	struct Free {
		void operator()(uint8_t *p) const { free(p); }
	};
	std::unique_ptr<uint8_t, Free> buf_;
	uint32_t mask_ = 0;
	uint32_t stride_ = 0;
	alignas(64) std::atomic<uint32_t> prod_{0};
	alignas(64) std::atomic<uint32_t> cons_{0};
};

} // namespace ibv_coll::emu
