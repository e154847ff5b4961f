// Monotonic time in nanoseconds: every timer in the device model uses it.
#pragma once

#include <time.h>

#include <cstdint>

namespace ibv_coll::util {

inline uint64_t now_ns()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

constexpr uint64_t kNsPerUs = 1000, kNsPerMs = 1000000;

} // namespace ibv_coll::util
