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

TEST_F(Log, LevelComesFromTheEnvironment)
{
	setenv("IBV_COLL_LOG_LEVEL", "error", 1);
	log_reload();
	EXPECT_TRUE(log_enabled(kLogErr));
	EXPECT_FALSE(log_enabled(kLogWarn));
	EXPECT_FALSE(log_enabled(kLogDebug));

	setenv("IBV_COLL_LOG_LEVEL", "debug", 1);
	log_reload();
	EXPECT_TRUE(log_enabled(kLogErr));
	EXPECT_TRUE(log_enabled(kLogInfo));
	EXPECT_TRUE(log_enabled(kLogDebug));
	EXPECT_FALSE(log_enabled(kLogTrace));

	setenv("IBV_COLL_LOG_LEVEL", "off", 1);
	log_reload();
	EXPECT_FALSE(log_enabled(kLogErr));

	// Unknown: the default, warn.
	setenv("IBV_COLL_LOG_LEVEL", "loud", 1);
	log_reload();
	EXPECT_TRUE(log_enabled(kLogWarn));
	EXPECT_FALSE(log_enabled(kLogInfo));
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
