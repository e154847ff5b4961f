// Logging over spdlog: one process-wide logger, level and file from the environment.
#include "util/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ibv_coll::util {
namespace {

std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;

spdlog::level::level_enum parse_level(const char *s)
{
	if (!s || !*s)
		return spdlog::level::warn;
	static const struct {
		const char *name;
		spdlog::level::level_enum lvl;
	} names[] = {
		{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
		{"info", spdlog::level::info},   {"warn", spdlog::level::warn},
		{"warning", spdlog::level::warn}, {"error", spdlog::level::err},
		{"err", spdlog::level::err},     {"off", spdlog::level::off},
		{"none", spdlog::level::off},
	};
	for (const auto &n : names)
		if (!strcasecmp(s, n.name))
			return n.lvl;
	return spdlog::level::warn;
}

std::shared_ptr<spdlog::logger> make_logger()
{
	std::shared_ptr<spdlog::logger> l;
	const char *file = getenv("IBV_COLL_LOG_FILE");
	if (file && *file) {
		try {
			auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file);
			l = std::make_shared<spdlog::logger>("ibv_coll", sink);
		} catch (const spdlog::spdlog_ex &) {
			l.reset();
		}
	}
	if (!l) {
		auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
		l = std::make_shared<spdlog::logger>("ibv_coll", sink);
	}
	l->set_pattern("ibv_coll[%P] %L %H:%M:%S.%f %v");
	l->set_level(parse_level(getenv("IBV_COLL_LOG_LEVEL")));
	l->flush_on(spdlog::level::warn);
	return l;
}

} // namespace

spdlog::logger &logger()
{
	// The pointer is set once and never freed before exit, so readers need
	// no lock after the first call.
	static spdlog::logger *fast = [] {
		std::lock_guard lk(g_mu);
		if (!g_logger)
			g_logger = make_logger();
		return g_logger.get();
	}();
	return *fast;
}

void log_reload()
{
	std::lock_guard lk(g_mu);
	auto &l = logger();
	l.set_level(parse_level(getenv("IBV_COLL_LOG_LEVEL")));
}

std::string errstr(int err)
{
	char buf[128];
	return std::string(strerror_r(err, buf, sizeof(buf)));
}

} // namespace ibv_coll::util
