// The logging layer: level filtering from the environment, and messages
// that cannot be formatted are reported, not thrown into the caller.
#include "util/config.h"
#include "util/log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
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
	} all[] = {{kLogTrace, 't'},
		   {kLogDebug, 'd'},
		   {kLogInfo, 'i'},
		   {kLogWarn, 'w'},
		   {kLogErr, 'e'}};
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

// A level that is none is said, in the log and in the listing, not
// taken silently as warn.
TEST_F(Log, AMisspeltLevelIsSaid)
{
	char path[] = "/tmp/ibvc_log_XXXXXX";
	const int fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	close(fd);
	setenv("IBV_COLL_LOG_FILE", path, 1);
	setenv("IBV_COLL_LOG_LEVEL", "debgu", 1);
	log_reload();
	unsetenv("IBV_COLL_LOG_FILE");
	log_reload(); // back to standard error, which flushes and closes the file
	FILE *f = fopen(path, "r");
	ASSERT_NE(f, nullptr);
	char buf[4096] = {};
	const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	unlink(path);
	EXPECT_NE(std::string(buf, n).find("IBV_COLL_LOG_LEVEL=debgu"), std::string::npos)
		<< std::string(buf, n);

	const ConfigVar *level = nullptr;
	for (const ConfigTable &t : config_tables())
		for (const ConfigVar &v : t.vars)
			if (!strcmp(v.name, "IBV_COLL_LOG_LEVEL"))
				level = &v;
	ASSERT_NE(level, nullptr);
	EXPECT_NE(config_problem(*level), "");
	setenv("IBV_COLL_LOG_LEVEL", "Info", 1);
	EXPECT_EQ(config_problem(*level), "");
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

// IBV_COLL_LOG_FILE in a directory that does not exist: the log goes to
// standard error, and no directory is made (spdlog's file sink made them).
TEST_F(Log, LogFileInAMissingDirectoryCreatesNothing)
{
	char base[] = "/tmp/ibvc_logdir_XXXXXX";
	ASSERT_NE(mkdtemp(base), nullptr);
	std::string missing = std::string(base) + "/no/such/dir";
	setenv("IBV_COLL_LOG_FILE", (missing + "/x.log").c_str(), 1);
	setenv("IBV_COLL_LOG_LEVEL", "warn", 1);
	log_reload();
	EXPECT_NO_THROW(IBVC_ERR("test", "{}", "to standard error"));
	unsetenv("IBV_COLL_LOG_FILE");
	log_reload();
	struct stat st;
	EXPECT_NE(stat((std::string(base) + "/no").c_str(), &st), 0)
		<< "a directory was created for IBV_COLL_LOG_FILE";
	rmdir(missing.c_str());
	rmdir((std::string(base) + "/no/such").c_str());
	rmdir((std::string(base) + "/no").c_str());
	rmdir(base);
}

// What devinfo -c marks INVALID: each kind's syntax and range.
TEST(Config, ProblemsWithSetValues)
{
	const ConfigVar u{"IBVC_TEST_CFG_U", "5", "help", ConfigKind::uint, 1, 10};
	const ConfigVar b{"IBVC_TEST_CFG_B", "y", "help", ConfigKind::boolean};
	const ConfigVar r{"IBVC_TEST_CFG_R", "0", "help", ConfigKind::ratio};
	const ConfigVar s{"IBVC_TEST_CFG_S", "x", "help", ConfigKind::string};
	const struct {
		const ConfigVar *v;
		const char *value;
		bool ok;
	} cases[] = {
		{&u, "abc", false}, {&u, "0", false},	{&u, "11", false},    {&u, "-1", false},
		{&u, "7", true},    {&u, "0xa", true},	{&b, "maybe", false}, {&b, "off", true},
		{&r, "1.5", false}, {&r, "0.25", true}, {&r, "", false},      {&s, "abc", true},
	};
	for (const auto &c : cases) {
		setenv(c.v->name, c.value, 1);
		EXPECT_EQ(config_problem(*c.v).empty(), c.ok) << c.v->name << "=" << c.value;
		unsetenv(c.v->name);
		EXPECT_TRUE(config_problem(*c.v).empty()) << "unset " << c.v->name;
	}
}

} // namespace
} // namespace ibv_coll::util
