// The configuration variables' number syntax, "decimal or 0x hex"
// (ibv_coll(7)), sizes with their K, M and G suffixes, and string
// variables' own checks, against hand-written cases; the fuzz target fuzz_config
// checks the same against a reference on arbitrary text.  And the tables'
// registry: every variable in one self-registered table, with the default
// ibv_coll(7) documents.
#include "nic/emu_config.h"
#include "reduce/reduce.h"
#include "util/config.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

using ibv_coll::util::parse_uint;

TEST(Config, UintDecimalAndHex)
{
	uint64_t x = 0;
	EXPECT_TRUE(parse_uint("2000", &x));
	EXPECT_EQ(x, 2000u);
	EXPECT_TRUE(parse_uint("0x10", &x));
	EXPECT_EQ(x, 16u);
	EXPECT_TRUE(parse_uint("0XfF", &x));
	EXPECT_EQ(x, 255u);
	EXPECT_TRUE(parse_uint("18446744073709551615", &x));
	EXPECT_EQ(x, UINT64_MAX);
	EXPECT_TRUE(parse_uint("0", &x));
	EXPECT_EQ(x, 0u);
}

// Found by fuzz_config: strtoull with base 0 read a leading 0 as octal.
TEST(Config, UintLeadingZeroIsDecimal)
{
	uint64_t x = 0;
	EXPECT_TRUE(parse_uint("0200", &x));
	EXPECT_EQ(x, 200u);
	EXPECT_TRUE(parse_uint("09", &x)); // not a bad octal number
	EXPECT_EQ(x, 9u);
}

// Blanks and signs, which strtoull skips or applies: " -1" was 2^64 - 1.
TEST(Config, UintRejectsSignsBlanksAndJunk)
{
	uint64_t x = 7;
	for (const char *s : {"", " 1", " -1", "-1", "+1", "1 ", "0x", "0x-1", "0x 1", "0x0x5",
			      "1e3", "18446744073709551616", "12abc"}) {
		EXPECT_FALSE(parse_uint(s, &x)) << '"' << s << '"';
		EXPECT_EQ(x, 7u) << "changed by \"" << s << '"';
	}
}

// Sizes: the same numbers, with an optional K, M or G suffix (2^10, 2^20,
// 2^30), as the MPI library's byte counts have always been written.
TEST(Config, SizeSuffixes)
{
	using ibv_coll::util::parse_size;
	uint64_t x = 0;
	EXPECT_TRUE(parse_size("4096", &x));
	EXPECT_EQ(x, 4096u);
	EXPECT_TRUE(parse_size("32K", &x));
	EXPECT_EQ(x, 32u * 1024);
	EXPECT_TRUE(parse_size("3m", &x));
	EXPECT_EQ(x, 3u * 1024 * 1024);
	EXPECT_TRUE(parse_size("2G", &x));
	EXPECT_EQ(x, 2ull * 1024 * 1024 * 1024);
	EXPECT_TRUE(parse_size("0x10k", &x));
	EXPECT_EQ(x, 16u * 1024);
	EXPECT_TRUE(parse_size("010", &x)); // decimal, as every variable
	EXPECT_EQ(x, 10u);
	EXPECT_TRUE(parse_size("17179869183G", &x)); // 2^34 - 1 times 2^30 fits
	EXPECT_EQ(x, ((1ull << 34) - 1) << 30);
	x = 7;
	for (const char *s :
	     {"", "K", "1KB", "1T", "-1", " 1K", "1 K", "0xK", "17179869184G", "1.5M"}) {
		EXPECT_FALSE(parse_size(s, &x)) << '"' << s << '"';
		EXPECT_EQ(x, 7u) << "changed by \"" << s << '"';
	}
}

namespace {

const char *check_abc(const char *s)
{
	return strcmp(s, "a") && strcmp(s, "b") ? "expected a or b" : nullptr;
}

// Sets a variable for one test, and restores the environment after it.
struct ScopedEnv {
	const char *name;
	ScopedEnv(const char *n, const char *v) : name(n) { setenv(n, v, 1); }
	~ScopedEnv() { unsetenv(name); }
};

} // namespace

// A size variable's range applies after the suffix; a string variable
// with a check is marked by config_problem, which the listing prints as
// "# INVALID", and one without passes whatever it holds.
TEST(Config, SizeRangeAndStringCheck)
{
	using namespace ibv_coll::util;
	const ConfigVar sz{"IBVC_TEST_CFG_SIZE", "1K", "help", ConfigKind::size, 1, 4096};
	const ConfigVar ch{
		"IBVC_TEST_CFG_CHOICE", "a", "help", ConfigKind::string, 0, UINT64_MAX, check_abc};
	const ConfigVar any{"IBVC_TEST_CFG_ANY", "", "help", ConfigKind::string};
	uint64_t x = 0;
	ASSERT_EQ(config_uint(sz, &x), 0);
	EXPECT_EQ(x, 1024u);
	{
		ScopedEnv e(sz.name, "4k");
		EXPECT_EQ(config_uint(sz, &x), 0);
		EXPECT_EQ(x, 4096u);
		EXPECT_EQ(config_problem(sz), "");
	}
	{
		ScopedEnv e(sz.name, "5K");
		x = 9;
		EXPECT_EQ(config_uint(sz, &x), EINVAL);
		EXPECT_EQ(x, 9u);
		EXPECT_NE(config_problem(sz).find("[1, 4096]"), std::string::npos)
			<< config_problem(sz);
	}
	EXPECT_EQ(config_problem(ch), "") << "unset";
	{
		ScopedEnv e(ch.name, "b");
		EXPECT_EQ(config_problem(ch), "");
	}
	{
		ScopedEnv e(ch.name, "c");
		EXPECT_EQ(config_problem(ch), "expected a or b");
		ScopedEnv f(any.name, "c");
		EXPECT_EQ(config_problem(any), "");
	}
}

// The registry: every component's table registers itself, and whoever
// lists them (ibv_coll_print_config, ibv_coll_devinfo -c) walks it.
namespace {

using ibv_coll::util::config_tables;
using ibv_coll::util::ConfigKind;
using ibv_coll::util::ConfigRegistrar;
using ibv_coll::util::ConfigTable;
using ibv_coll::util::ConfigVar;

const ConfigVar kLate[] = {{"IBVC_TEST_REG_LATE", "1", "help", ConfigKind::uint}};
const ConfigVar kEarly[] = {{"IBVC_TEST_REG_EARLY", "2", "help", ConfigKind::uint}};
// Registered late-ranked first: the listing must still put rank 1000 after 999.
const ConfigRegistrar kLateReg({"test late", kLate}, 1000);
const ConfigRegistrar kEarlyReg({"test early", kEarly}, 999);

// Every table whose variables are read by the device model, the logger and
// the transports, with their defaults, as ibv_coll(7) documents them.
struct Want {
	const char *name, *def;
};
const Want kWant[] = {
	{"IBV_COLL_LOG_LEVEL", "warn"},
	{"IBV_COLL_LOG_FILE", ""},
	{"IBV_COLL_EMU_POLL_US", "2000"},
	{"IBV_COLL_EMU_APP_POLL_US", "1000"},
	{"IBV_COLL_EMU_RC_WINDOW", "256"},
	{"IBV_COLL_EMU_ACK_REQ_EVERY", "32"},
	{"IBV_COLL_EMU_RC_TIMEOUT", "14"},
	{"IBV_COLL_EMU_SOCKBUF", "4194304"},
	{"IBV_COLL_EMU_READ_BURST", "64"},
	{"IBV_COLL_EMU_RC_OOO", "256"},
	{"IBV_COLL_EMU_IMPAIR", ""},
	{"IBV_COLL_EMU_ISA", "auto"},
	{"IBV_COLL_EMU_SEG_UNITS", "4096"},
	{"IBV_COLL_EMU_COLL_WINDOW", "64"},
	{"IBV_COLL_EMU_COLL_RTO_US", "20000"},
	{"IBV_COLL_EMU_COLL_PROBE_US", "500"},
	{"IBV_COLL_EMU_COLL_TIMEOUT_MS", "10000"},
	{"IBV_COLL_EMU_GSO", "1"},
	{"IBV_COLL_EMU_PORT_WAIT", "1"},
	{"IBV_COLL_SWITCH_THREADS", "0"},
	{"IBV_COLL_EMU_SW_CONFIG_MS", "1000"},
	{"IBV_COLL_EMU_XCHG_BYTES", "16384"},
	{"IBV_COLL_EMU_COLL_DEPTH", "4"},
	{"IBV_COLL_EMU_PORT_MBPS", "0"},
	{"IBV_COLL_EMU_CC", "1"},
	{"IBV_COLL_EMU_CC_TARGET_US", "1000"},
	{"IBV_COLL_EMU_CC_HOST_TARGET_US", "0"},
	{"IBV_COLL_EMU_CC_MAX_MDF", "50"},
	{"IBV_COLL_EMU_CC_PACE", "0"},
	{"IBV_COLL_EMU_CNP_INTERVAL_US", "50"},
	{"IBV_COLL_EMU_DCQCN_ALPHA_US", "55"},
	{"IBV_COLL_EMU_DCQCN_RECOVER_US", "300"},
	{"IBV_COLL_EMU_DCQCN_RECOVER_UNITS", "64"},
	{"IBV_COLL_EMU_DCQCN_G_SHIFT", "4"},
};

} // namespace

TEST(ConfigRegistry, TablesComeOutInRankOrder)
{
	std::vector<ConfigTable> t = config_tables();
	int early = -1, late = -1;
	for (size_t i = 0; i < t.size(); i++) {
		if (!strcmp(t[i].component, "test early"))
			early = int(i);
		if (!strcmp(t[i].component, "test late"))
			late = int(i);
	}
	ASSERT_GE(early, 0);
	ASSERT_GE(late, 0);
	EXPECT_EQ(late, early + 1);
	EXPECT_EQ(late, int(t.size()) - 1) << "rank 1000 is the highest registered";
	// The logger's table (rank 0) comes first.
	EXPECT_STREQ(t[0].vars[0].name, "IBV_COLL_LOG_LEVEL");
}

TEST(ConfigRegistry, EveryVariableListedOnceWithItsDefault)
{
	// Referenced so that the linker keeps the device model's tables.
	ibv_coll::emu::EmuConfig c;
	ASSERT_EQ(ibv_coll::emu::load_emu_config(&c), 0);
	std::map<std::string, std::string> seen;
	for (const ConfigTable &t : config_tables()) {
		EXPECT_FALSE(t.vars.empty()) << t.component;
		for (const ConfigVar &v : t.vars) {
			EXPECT_TRUE(seen.emplace(v.name, v.def).second)
				<< v.name << " listed twice";
			EXPECT_TRUE(v.help && *v.help) << v.name;
		}
	}
	for (const Want &w : kWant) {
		auto it = seen.find(w.name);
		ASSERT_NE(it, seen.end()) << w.name << " is in no table";
		EXPECT_EQ(it->second, w.def) << w.name;
	}
	// The device model reads the same set emu_config_vars() lists.
	size_t emu = 0;
	for (const auto &[name, def] : seen)
		emu += name.rfind("IBV_COLL_EMU_", 0) == 0;
	EXPECT_EQ(ibv_coll::emu::emu_config_vars().size(), emu);
	EXPECT_EQ(emu, std::size(kWant) - 3);
}

// The reduce kernels read IBV_COLL_EMU_ISA from their own table, whose
// check lets the listing mark a name that is not an ISA.
TEST(ConfigRegistry, IsaIsCheckedByItsTable)
{
	std::span<const ConfigVar> vars = ibv_coll::emu::reduce_config_vars();
	ASSERT_EQ(vars.size(), 1u);
	const ConfigVar &isa = vars[0];
	EXPECT_STREQ(isa.name, "IBV_COLL_EMU_ISA");
	for (const char *ok : {"auto", "scalar", "avx2", "avx512", ""}) {
		ScopedEnv e(isa.name, ok);
		EXPECT_EQ(ibv_coll::util::config_problem(isa), "") << '"' << ok << '"';
	}
	for (const char *bad : {"avx", "AVX2", "sse4", "avx512 "}) {
		ScopedEnv e(isa.name, bad);
		EXPECT_NE(ibv_coll::util::config_problem(isa), "") << '"' << bad << '"';
	}
}

TEST(ConfigRegistry, LoadersKeepTheirDefaults)
{
	ibv_coll::emu::EmuConfig c;
	ASSERT_EQ(ibv_coll::emu::load_emu_config(&c), 0);
	EXPECT_EQ(c.poll_us, 2000u);
	EXPECT_EQ(c.rc_window, 256u);
	EXPECT_EQ(c.rc_timeout, 14u);
	EXPECT_EQ(c.rc_ooo, 256u);
	EXPECT_EQ(c.sockbuf, 4194304u);
	EXPECT_EQ(c.seg_units, 4096u);
	EXPECT_EQ(c.coll_timeout_ms, 10000u);
	EXPECT_TRUE(c.gso);
	EXPECT_FALSE(c.impair.active());
	EXPECT_TRUE(c.cc.on);
	EXPECT_EQ(c.cc.target_us, 1000u);
	EXPECT_EQ(c.cc.max_mdf_pct, 50u);
	EXPECT_FALSE(c.cc.pace);
	EXPECT_EQ(c.cnp_interval_us, 50u);
	EXPECT_EQ(c.cc.alpha_us, 55u);
	EXPECT_EQ(c.cc.recover_us, 300u);
	EXPECT_EQ(c.cc.recover_units, 64u);
	EXPECT_EQ(c.cc.dcqcn_g_shift, 4u);
	ibv_coll::emu::NetConfig n;
	ASSERT_EQ(ibv_coll::emu::load_net_config(&n), 0);
	EXPECT_EQ(n.sockbuf, 4194304u);
	EXPECT_TRUE(n.gso);
}
