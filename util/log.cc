// Logging over spdlog: one process-wide logger, level and file from the environment.
#include "util/log.h"

#include "util/config.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ibv_coll::util {
namespace {

std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;

// The logger's variables, read where the logger is made (below).
const ConfigVar kVars[] = {
	{"IBV_COLL_LOG_LEVEL", "warn", "log level: trace, debug, info, warn, error or off"},
	{"IBV_COLL_LOG_FILE", "", "write the log to this file instead of standard error"},
};
const ConfigRegistrar kRegistrar({"core (log)", kVars}, 0);

spdlog::level::level_enum parse_level(const char *s)
{
	if (!s || !*s)
		return spdlog::level::warn;
	static const struct {
		const char *name;
		spdlog::level::level_enum lvl;
	} names[] = {
		{"trace", spdlog::level::trace},  {"debug", spdlog::level::debug},
		{"info", spdlog::level::info},	  {"warn", spdlog::level::warn},
		{"warning", spdlog::level::warn}, {"error", spdlog::level::err},
		{"err", spdlog::level::err},	  {"off", spdlog::level::off},
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
	int file_err = 0;
	// spdlog's file sink creates missing directories; a misspelt path
	// must not leave new directories behind, so open it ourselves first.
	if (file && *file) {
		if (FILE *f = fopen(file, "a"))
			fclose(f);
		else
			file_err = errno;
	}
	if (file && *file && !file_err) {
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
	if (file_err)
		l->error("log: IBV_COLL_LOG_FILE={}: {}; logging to standard error", file,
			 errstr(file_err));
	return l;
}

spdlog::logger &logger()
{
	// The pointer is set once and never freed before exit, so readers need
	// no lock after the first call.
	static spdlog::logger *fast = [] {
		std::lock_guard lk(g_mu);
		if (!g_logger)
			g_logger = make_logger();
		g_log_level.store(int(g_logger->level()));
		return g_logger.get();
	}();
	return *fast;
}

} // namespace

std::atomic<int> g_log_level{-1};

int log_level_slow()
{
	return int(logger().level());
}

void log_init()
{
	logger();
}

void log_reload()
{
	auto &l = logger(); // first, as its first call takes g_mu too
	std::lock_guard lk(g_mu);
	l.set_level(parse_level(getenv("IBV_COLL_LOG_LEVEL")));
	g_log_level.store(int(l.level()));
}

void log_vwrite(int lvl, fmt::string_view f, fmt::format_args args)
{
	auto &l = logger();
	const auto level = spdlog::level::level_enum(lvl);
	if (!l.should_log(level))
		return;
	try {
		l.log(level, fmt::vformat(f, args));
	} catch (const std::exception &e) {
		// A message that cannot be formatted (or no memory for it) is
		// reported as such: logging never throws into the device.
		try {
			l.log(level, "{} (message not formatted: {})",
			      std::string_view(f.data(), f.size()), e.what());
		} catch (...) {
		}
	}
}

std::string errstr(int err)
{
	char buf[128];
	return std::string(strerror_r(err, buf, sizeof(buf)));
}

} // namespace ibv_coll::util
