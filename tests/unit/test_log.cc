// The logging layer: level filtering from the environment, and messages
// that cannot be formatted are reported, not thrown into the caller.
#include "util/log.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace ibv_coll::util {
namespace {

class Log : public ::testing::Test {
protected:
	void SetUp() override
	{
		const char *v = getenv("IBV_COLL_LOG_LEVEL");
		had_ = v != nullptr;
		if (had_)
			saved_ = v;
	}
	void TearDown() override
	{
		if (had_)
			setenv("IBV_COLL_LOG_LEVEL", saved_.c_str(), 1);
		else
			unsetenv("IBV_COLL_LOG_LEVEL");
		log_reload();
	}
	bool had_ = false;
	std::string saved_;
};

// The levels enabled after IBV_COLL_LOG_LEVEL=v, as a string of the
// letters t d i w e (trace ... error) that pass.
std::string enabled_after(const char *v)
{
	setenv("IBV_COLL_LOG_LEVEL", v, 1);
	log_reload();
	std::string r;
	const struct {
		int lvl;
		char c;
	} all[] = {{kLogTrace, 't'}, {kLogDebug, 'd'}, {kLogInfo, 'i'}, {kLogWarn, 'w'}, {kLogErr, 'e'}};
	for (const auto &a : all)
		if (log_enabled(a.lvl))
			r += a.c;
	return r;
}

TEST_F(Log, LevelComesFromTheEnvironment)
{
	EXPECT_EQ(enabled_after("error"), "e");
	EXPECT_EQ(enabled_after("debug"), "diwe");
	EXPECT_EQ(enabled_after("trace"), "tdiwe");
	EXPECT_EQ(enabled_after("off"), "");
	EXPECT_EQ(enabled_after("loud"), "we"); // unknown: the default, warn
}

TEST_F(Log, AMessageThatCannotBeFormattedDoesNotThrow)
{
	setenv("IBV_COLL_LOG_LEVEL", "warn", 1);
	log_reload();
	// A format string only known at run time, with a field and no argument.
	std::string f = "[test] value {} and {:d}";
	EXPECT_NO_THROW(log_vwrite(kLogWarn, f, fmt::make_format_args()));
	int x = 7;
	std::string s = "text";
	EXPECT_NO_THROW(log_vwrite(kLogWarn, "[test] {:d}", fmt::make_format_args(s)));
	// And a good one through the macro, checked at compile time.
	EXPECT_NO_THROW(IBVC_WARN("test", "x {} s {}", x, s));
}

} // namespace
} // namespace ibv_coll::util
