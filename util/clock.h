// Monotonic time in nanoseconds.  Whatever keeps timers (a device's
// engine, a switch) reads it through a Clock it is given, so that the same
// code runs on the host's clock or on a simulator's virtual one
// (ibv_coll_sim(1)); now_ns() is the host's, for what only real sockets and
// threads use.
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

class Clock {
public:
	virtual ~Clock() = default;
	virtual uint64_t now() const = 0; // ns, never going back
};

// CLOCK_MONOTONIC: the clock of every real device and switch.
class HostClock final : public Clock {
public:
	uint64_t now() const override { return now_ns(); }
};
// Never destroyed: a device's engine thread may still read it while the
// process exits (a library, such as the NCCL plugin, whose device stays
// open until then).
inline const Clock &host_clock()
{
	static const HostClock *const c = new HostClock;
	return *c;
}

// A clock that moves only when told to: a simulator's.
class ManualClock final : public Clock {
public:
	explicit ManualClock(uint64_t start = 0) : t_(start) {}
	uint64_t now() const override { return t_; }
	void set(uint64_t t) { t_ = t > t_ ? t : t_; }

private:
	uint64_t t_;
};

constexpr uint64_t kNsPerUs = 1000, kNsPerMs = 1000000;

// How long after `then` `now` is: 0 when it is not later, as when `now`
// was read before another thread stamped `then` (unsigned, now - then
// would be centuries).
constexpr uint64_t elapsed_ns(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

} // namespace ibv_coll::util
