// Logging over spdlog: one process-wide logger, level and file from the environment.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace ibv_coll::util {

// The logger, created on first use from IBV_COLL_LOG_LEVEL (default warn)
// and IBV_COLL_LOG_FILE (default stderr).
spdlog::logger &logger();

// Text for an errno value, as %m would print it.
std::string errstr(int err);

// Re-read IBV_COLL_LOG_LEVEL / IBV_COLL_LOG_FILE (tests change them).
void log_reload();

} // namespace ibv_coll::util

// The level is tested before the arguments are formatted, so a disabled
// message costs one load and a compare.  comp is a string literal.
#define IBVC_LOG(lvl, comp, fmt_, ...)                                              \
	do {                                                                        \
		auto &ibvc_l_ = ::ibv_coll::util::logger();                         \
		if (ibvc_l_.should_log(lvl))                                        \
			ibvc_l_.log(lvl, "[" comp "] " fmt_ __VA_OPT__(, ) __VA_ARGS__); \
	} while (0)

#define IBVC_ERR(comp, ...) IBVC_LOG(spdlog::level::err, comp, __VA_ARGS__)
#define IBVC_WARN(comp, ...) IBVC_LOG(spdlog::level::warn, comp, __VA_ARGS__)
#define IBVC_INFO(comp, ...) IBVC_LOG(spdlog::level::info, comp, __VA_ARGS__)
#define IBVC_DEBUG(comp, ...) IBVC_LOG(spdlog::level::debug, comp, __VA_ARGS__)

// Per-packet messages compile out unless the build asks for them.
#ifdef IBV_COLL_DATAPATH_DEBUG
#define IBVC_TRACE(comp, ...) IBVC_LOG(spdlog::level::trace, comp, __VA_ARGS__)
#else
#define IBVC_TRACE(comp, ...) \
	do {                  \
	} while (0)
#endif
