// The engine thread's waiting: its loop of passes and sleeps, and the
// hand-off of the port to an application thread that polls (engine.cc
// has the rest of the engine).
#include "nic/engine.h"

#include "util/clock.h"
#include "util/fence.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

namespace ibv_coll::emu {

// Hand-off of the port.  A thread that wakes for every packet costs a
// wake-up per packet (~40 us on a small VM) and competes for the lock with
// the application thread that is polling for the same packet anyway.  So
// while an application thread polls, the engine thread sleeps with only
// its doorbell and timer (for timers, and for the moment the application
// stops polling without saying so); arming a CQ, which an application does
// before it sleeps, gives the port back to the engine thread at once.
void Engine::app_polled()
{
	const uint64_t hold = uint64_t(params.cfg.app_poll_us) * util::kNsPerUs;
	if (hold)
		app_until.store(util::now_ns() + hold, std::memory_order_relaxed);
}

void Engine::app_sleeps()
{
	if (!app_until.exchange(0))
		return;
	// As kick(): the engine thread either sees work_pending before it
	// sleeps (and looks again, not quiet now) or is seen sleeping.
	work_pending.store(true);
	if (sleeping.load())
		wake();
}

void Engine::run_passes()
{
	uint64_t idle_since = 0;
	bool pass = true; // run a progress pass before sleeping again
	while (!stop_.load() && !dead.load()) {
		work_pending.store(false);
		bool did = false, quiet;
		uint64_t timer, now;
		std::atomic<uint32_t> *aw; // set once, before clients come
		{
			std::lock_guard lk(mu);
			aw = awake_word;
			if (pass)
				did = progress_locked();
			timer = next_deadline_locked();
			// While an application thread polls, leave the port to it
			// until it stops (or arms a CQ, which wakes us).
			// Its polls run the timers too: we wake only when the
			// hold ends (each wake-up is a context switch on a busy
			// machine; a timer every probe's time of a short collective
			// cost a third more time per allreduce of 8 bytes).
			now = util::now_ns();
			const uint64_t until = app_until.load();
			quiet = until > now;
			if (quiet)
				timer = until;
			armed_deadline.store(timer ? timer : UINT64_MAX);
		}
		pass = true;
		if (did) {
			idle_since = 0;
			continue;
		}
		if (!idle_since)
			idle_since = now;
		if (!quiet && now - idle_since < uint64_t(params.cfg.poll_us) * util::kNsPerUs) {
			sched_yield();
			continue;
		}
		{
			// What ibv_coll_stat reads is exact while the device sleeps
			// (a progress pass publishes at most once a millisecond).
			std::lock_guard lk(mu);
			if (aw) {
				// Work queued by a client that saw us awake and sent no
				// doorbell: this pass, after the word says we sleep,
				// sees it (the client stored, then read the word).
				aw->store(0);
				util::full_fence();
				if (progress_locked()) {
					aw->store(1);
					idle_since = 0;
					continue;
				}
				timer = next_deadline_locked();
				armed_deadline.store(timer ? timer : UINT64_MAX);
			}
			publish_stats(util::now_ns(), true);
		}
		sleeping.store(true);
		if (work_pending.load() || stop_.load()) {
			sleeping.store(false);
			continue;
		}
		const bool rung = sleep_on(quiet ? epq_.get() : epfd_.get(), timer);
		sleeping.store(false);
		if (aw)
			aw->store(1);
		// The hand-off timer, with the application still polling: its
		// polls run the timers too, so only sleep on.
		pass = !(quiet && !rung && app_until.load() > util::now_ns());
		idle_since = 0;
		if (!pass && !aw)
			pass = sleep_while_app_polls();
	}
}

// The hand-off timer woke the engine thread and the application still
// polls: sleep on until its hold ends, without taking mu.  The loop above
// would take it to recompute a deadline that is the hold's end anyway;
// the application thread, which holds mu for most of its polls, then
// paid a futex wake for each of these wake-ups (about one a millisecond,
// a fifth of them lock waits, strace says).  True when a pass is due: a
// doorbell, work_pending, or the hold ended (the application stopped
// polling without arming a CQ, and its timers are ours again).  Not with
// ibv_coll_devd's clients (awake_word), whose protocol wants the locked
// pass before every sleep.
bool Engine::sleep_while_app_polls()
{
	for (;;) {
		const uint64_t until = app_until.load();
		if (until <= util::now_ns() || stop_.load() || dead.load())
			return true;
		armed_deadline.store(until);
		sleeping.store(true);
		if (work_pending.load()) {
			sleeping.store(false);
			return true;
		}
		const bool rung = sleep_on(epq_.get(), until);
		sleeping.store(false);
		if (rung)
			return true;
	}
}

// One sleep of the engine thread: the timer set to `timer` (absolute, on
// the monotonic clock; 0: none), then epoll on epfd (epfd_: the port, the
// doorbell and the timer; epq_: the last two), the doorbell's and the
// timer's counts read.  True when the doorbell rang.
bool Engine::sleep_on(int epfd, uint64_t timer)
{
	itimerspec its{};
	if (timer) {
		its.it_value.tv_sec = time_t(timer / 1000000000ull);
		its.it_value.tv_nsec = long(timer % 1000000000ull);
	}
	timerfd_settime(tfd_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
	epoll_event evs[4];
	const int n = epoll_wait(epfd, evs, 4, -1);
	bool rung = false;
	for (int i = 0; i < n; i++) {
		if (evs[i].data.fd == evfd_.get() || evs[i].data.fd == tfd_.get()) {
			uint64_t v;
			ssize_t r = read(evs[i].data.fd, &v, sizeof(v));
			(void)r;
			rung |= evs[i].data.fd == evfd_.get();
		}
	}
	return rung;
}

} // namespace ibv_coll::emu
