// Logging over spdlog: one process-wide logger, level and file from the environment.
#include "util/log.h"

#include "util/config.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ibv_coll::util {
namespace {

std::mutex g_mu;
std::shared_ptr<spdlog::logger> g_logger;

const struct {
	const char *name;
	spdlog::level::level_enum lvl;
} kLevels[] = {
	{"trace", spdlog::level::trace},  {"debug", spdlog::level::debug},
	{"info", spdlog::level::info},	  {"warn", spdlog::level::warn},
	{"warning", spdlog::level::warn}, {"error", spdlog::level::err},
	{"err", spdlog::level::err},	  {"off", spdlog::level::off},
	{"none", spdlog::level::off},
};

// The level a name gives, false when it names none.
bool parse_level(const char *s, spdlog::level::level_enum *out)
{
	for (const auto &n : kLevels)
		if (!strcasecmp(s, n.name))
			return *out = n.lvl, true;
	return false;
}

const char *check_level(const char *s)
{
	spdlog::level::level_enum l;
	return parse_level(s, &l) ? nullptr : "expected trace, debug, info, warn, error or off";
}

// The logger's variables, read where the logger is made (below).
const ConfigVar kVars[] = {
	{"IBV_COLL_LOG_LEVEL", "warn", "log level: trace, debug, info, warn, error or off",
	 ConfigKind::string, 0, UINT64_MAX, check_level},
	{"IBV_COLL_LOG_FILE", "", "write the log to this file instead of standard error"},
};
const ConfigRegistrar kRegistrar({"core (log)", kVars}, 0);
const ConfigVar &kLevelVar = kVars[0];
const ConfigVar &kFileVar = kVars[1];

// The configured level; a name that is none is warn, and said (once per
// reading) on the logger itself, so a misspelt "debgu" is not silence.
spdlog::level::level_enum configured_level(std::string *bad)
{
	const std::string s = config_text(kLevelVar);
	spdlog::level::level_enum l = spdlog::level::warn;
	if (!s.empty() && !parse_level(s.c_str(), &l))
		*bad = s;
	return l;
}

void say_bad_level(spdlog::logger &l, const std::string &bad)
{
	if (!bad.empty())
		l.warn("log: IBV_COLL_LOG_LEVEL={}: {}; logging at warn", bad,
		       check_level(bad.c_str()));
}

// Points the logger at IBV_COLL_LOG_FILE (standard error when unset or
// when it cannot be opened) at IBV_COLL_LOG_LEVEL, saying what it could
// not use on the logger itself.
void configure(spdlog::logger &l)
{
	const std::string file = config_text(kFileVar);
	spdlog::sink_ptr sink;
	int file_err = 0;
	// spdlog's file sink creates missing directories; a misspelt path
	// must not leave new directories behind, so open it ourselves first.
	if (!file.empty()) {
		if (FILE *f = fopen(file.c_str(), "a"))
			fclose(f);
		else
			file_err = errno;
	}
	if (!file.empty() && !file_err) {
		try {
			sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file);
		} catch (const spdlog::spdlog_ex &) {
			file_err = EIO;
		}
	}
	if (!sink)
		sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
	l.sinks() = {sink};
	l.set_pattern("ibv_coll[%P] %L %H:%M:%S.%f %v");
	std::string bad;
	l.set_level(configured_level(&bad));
	l.flush_on(spdlog::level::warn);
	say_bad_level(l, bad);
	if (file_err)
		l.error("log: IBV_COLL_LOG_FILE={}: {}; logging to standard error", file,
			errstr(file_err));
}

spdlog::logger &logger()
{
	// The pointer is set once and never freed before exit, so readers need
	// no lock after the first call.
	static spdlog::logger *fast = [] {
		std::lock_guard lk(g_mu);
		if (!g_logger) {
			g_logger = std::make_shared<spdlog::logger>("ibv_coll");
			configure(*g_logger);
		}
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
	configure(l);
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
