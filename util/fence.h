// A full memory barrier: a store before it is visible to other threads
// (and processes sharing the memory) before any load after it, the
// store-load order that a "store my flag, then read yours" hand-off
// needs.  ThreadSanitizer does not support fences (GCC refuses them); there
// a sequentially consistent read-modify-write of a private word stands in,
// which x86 also executes as a full barrier.
#pragma once

#include <atomic>

namespace ibv_coll::util {

inline void full_fence()
{
#if defined(__SANITIZE_THREAD__)
	static std::atomic<int> word{0};
	word.fetch_add(0, std::memory_order_seq_cst);
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
	static std::atomic<int> word{0};
	word.fetch_add(0, std::memory_order_seq_cst);
#else
	std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
#else
	std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

} // namespace ibv_coll::util
