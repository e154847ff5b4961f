// Logging: one process-wide logger (spdlog, behind log.cc), level and file
// from the environment.  This header pulls in only fmt's core, so the
// translation units that log do not each compile spdlog and fmt's whole
// formatting machinery (that was 8 of the ~9 s each took at -O2).
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <string>

namespace ibv_coll::util {

// spdlog's levels, in its order.
enum LogLevel : int {
	kLogTrace = 0,
	kLogDebug = 1,
	kLogInfo = 2,
	kLogWarn = 3,
	kLogErr = 4,
	kLogOff = 6,
};

// The logger is created on first use from IBV_COLL_LOG_LEVEL (default
// warn) and IBV_COLL_LOG_FILE (default stderr); this creates it now.
void log_init();

// Re-read IBV_COLL_LOG_LEVEL / IBV_COLL_LOG_FILE (tests change them); not
// while other threads log, as the logger's sink is replaced.
void log_reload();

// Text for an errno value, as %m would print it.
std::string errstr(int err);

// The current level, kept here so that a disabled message costs one load
// and a compare.  -1: not read from the environment yet.
extern std::atomic<int> g_log_level;
int log_level_slow();

inline bool log_enabled(int lvl)
{
	int l = g_log_level.load(std::memory_order_relaxed);
	if (l < 0)
		l = log_level_slow();
	return lvl >= l;
}

// Format and write one message; a format error is logged, never thrown.
void log_vwrite(int lvl, fmt::string_view f, fmt::format_args args);

// The format string is checked against the arguments at compile time.
template <typename... T> inline void log_write(int lvl, fmt::format_string<T...> f, T &&...args)
{
	log_vwrite(lvl, f, fmt::make_format_args(args...));
}

} // namespace ibv_coll::util

// comp is a string literal.
#define IBVC_LOG(lvl, comp, fmt_, ...)                                                     \
	do {                                                                               \
		if (::ibv_coll::util::log_enabled(lvl))                                    \
			::ibv_coll::util::log_write(lvl, "[" comp "] " fmt_ __VA_OPT__(, ) \
								 __VA_ARGS__);             \
	} while (0)

#define IBVC_ERR(comp, ...) IBVC_LOG(::ibv_coll::util::kLogErr, comp, __VA_ARGS__)
#define IBVC_WARN(comp, ...) IBVC_LOG(::ibv_coll::util::kLogWarn, comp, __VA_ARGS__)
#define IBVC_INFO(comp, ...) IBVC_LOG(::ibv_coll::util::kLogInfo, comp, __VA_ARGS__)
#define IBVC_DEBUG(comp, ...) IBVC_LOG(::ibv_coll::util::kLogDebug, comp, __VA_ARGS__)

// Per-packet messages compile out unless the build asks for them.
#ifdef IBV_COLL_DATAPATH_DEBUG
#define IBVC_TRACE(comp, ...) IBVC_LOG(::ibv_coll::util::kLogTrace, comp, __VA_ARGS__)
#else
#define IBVC_TRACE(comp, ...) \
	do {                  \
	} while (0)
#endif
