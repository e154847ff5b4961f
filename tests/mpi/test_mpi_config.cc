// libibv_coll_mpi's configuration (mpi/mpi_config.cc, compiled in: no
// mpirun needed): the IBV_COLL_MPI_* defaults and syntax that
// ibv_coll_mpi(7) documents, written out here by hand; a bad value refused
// with the one line the library prints; and the table in libibv_coll's
// registry, listed by ibv_coll_print_config and known to its check for
// misspelt names.
#include "coll_mpi.h"
#include "seg_range.h"

#include <gtest/gtest.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

using namespace ibv_coll::mpi;

extern char **environ;

namespace {

// Every IBV_COLL_MPI_* variable unset before each test, and the
// environment as it was after it.
class MpiConfig : public ::testing::Test {
protected:
	void SetUp() override
	{
		for (char **e = environ; e && *e; e++)
			if (!strncmp(*e, "IBV_COLL_MPI_", 13))
				saved_.emplace_back(*e);
		for (const std::string &kv : saved_)
			unsetenv(kv.substr(0, kv.find('=')).c_str());
	}
	void TearDown() override
	{
		std::vector<std::string> now;
		for (char **e = environ; e && *e; e++)
			if (!strncmp(*e, "IBV_COLL_MPI_", 13))
				now.emplace_back(*e);
		for (const std::string &kv : now)
			unsetenv(kv.substr(0, kv.find('=')).c_str());
		for (const std::string &kv : saved_) {
			size_t eq = kv.find('=');
			setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
		}
	}
	std::vector<std::string> saved_;
};

// What ibv_coll_print_config writes.
std::string listing()
{
	char *buf = nullptr;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	EXPECT_TRUE(f);
	if (!f)
		return {};
	EXPECT_EQ(ibv_coll_print_config(f), 0);
	fclose(f);
	std::string s(buf, len);
	free(buf);
	return s;
}

// The line of the listing that sets name ("NAME=..."), or "".
std::string line_of(const std::string &all, const std::string &name)
{
	size_t at = all.find("\n" + name + "=");
	if (at == std::string::npos)
		return {};
	size_t end = all.find('\n', at + 1);
	return all.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

} // namespace

TEST_F(MpiConfig, DefaultsAreTheManPages)
{
	Config c;
	c.enable = false; // every field must be written
	c.min_ranks = 99;
	std::string err;
	ASSERT_EQ(load_config(&c, &err), 0) << err;
	EXPECT_TRUE(c.enable);
	EXPECT_EQ(c.colls, 0x3fffu); // all fourteen
	EXPECT_EQ(c.device, "");
	EXPECT_TRUE(c.switches.empty());
	EXPECT_EQ(c.topology, int(IBV_COLL_TOPO_RING)); // no switch: the ring
	EXPECT_EQ(c.min_bytes, 0u);
	EXPECT_EQ(c.max_bytes, 0u);
	EXPECT_EQ(c.min_ranks, 2);
	EXPECT_EQ(c.seg_units, 0u); // by the communicator's size
	EXPECT_EQ(c.timeout_ms, 3600000u);
	EXPECT_EQ(c.spin_us, 2000);
	EXPECT_FALSE(c.stats);
}

TEST_F(MpiConfig, EveryVariableInItsSyntax)
{
	setenv("IBV_COLL_MPI_ENABLE", "no", 1);
	setenv("IBV_COLL_MPI_STATS", "Y", 1);
	setenv("IBV_COLL_MPI_DEVICE", "crxe_eth0", 1);
	setenv("IBV_COLL_MPI_COLLS", "bcast,,barrier", 1);
	setenv("IBV_COLL_MPI_SWITCH", "10.0.0.100:4791,[::1]:0x1389", 1);
	setenv("IBV_COLL_MPI_MIN_BYTES", "32K", 1);
	setenv("IBV_COLL_MPI_MAX_BYTES", "2m", 1);
	setenv("IBV_COLL_MPI_MIN_RANKS", "64", 1);
	setenv("IBV_COLL_MPI_SEG_UNITS", "0x100", 1);
	setenv("IBV_COLL_MPI_TIMEOUT_MS", "60000", 1);
	setenv("IBV_COLL_MPI_SPIN_US", "-1", 1);
	Config c;
	std::string err;
	ASSERT_EQ(load_config(&c, &err), 0) << err;
	EXPECT_FALSE(c.enable);
	EXPECT_TRUE(c.stats);
	EXPECT_EQ(c.device, "crxe_eth0");
	EXPECT_EQ(c.colls, 1u << kBcast | 1u << kBarrier);
	ASSERT_EQ(c.switches.size(), 2u);
	const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 100};
	EXPECT_EQ(memcmp(c.switches[0].gid.raw, v4, 16), 0);
	EXPECT_EQ(c.switches[0].udp_port, 4791);
	const uint8_t v6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	EXPECT_EQ(memcmp(c.switches[1].gid.raw, v6, 16), 0);
	EXPECT_EQ(c.switches[1].udp_port, 5001);
	EXPECT_EQ(c.topology, int(IBV_COLL_TOPO_AUTO)); // a switch, no topology: auto
	EXPECT_EQ(c.min_bytes, 32768u);
	EXPECT_EQ(c.max_bytes, 2097152u);
	EXPECT_EQ(c.min_ranks, 64);
	EXPECT_EQ(c.seg_units, 256u);
	EXPECT_EQ(c.timeout_ms, 60000u);
	EXPECT_EQ(c.spin_us, -1);

	setenv("IBV_COLL_MPI_TOPOLOGY", "switch", 1);
	setenv("IBV_COLL_MPI_COLLS", "all", 1);
	ASSERT_EQ(load_config(&c, &err), 0) << err;
	EXPECT_EQ(c.topology, int(IBV_COLL_TOPO_SWITCH));
	EXPECT_EQ(c.colls, 0x3fffu);
	unsetenv("IBV_COLL_MPI_SWITCH");
	setenv("IBV_COLL_MPI_TOPOLOGY", "ring", 1);
	ASSERT_EQ(load_config(&c, &err), 0) << err;
	EXPECT_EQ(c.topology, int(IBV_COLL_TOPO_RING));
}

// A bad value: EINVAL, the configuration left as it was, and the one line
// the library prints before sending every collective to PMPI
// ("NAME=VALUE: not understood (...)").
TEST_F(MpiConfig, BadValueIsRefusedWithItsName)
{
	struct Bad {
		const char *name, *value;
	};
	const Bad bad[] = {
		{"IBV_COLL_MPI_ENABLE", "maybe"},
		{"IBV_COLL_MPI_ENABLE", ""},
		{"IBV_COLL_MPI_STATS", "2"},
		{"IBV_COLL_MPI_COLLS", "allreduce,gather"},
		{"IBV_COLL_MPI_SWITCH", "10.0.0.1"},
		{"IBV_COLL_MPI_SWITCH", "10.0.0.1:65536"},
		{"IBV_COLL_MPI_SWITCH", "host:4791"},
		{"IBV_COLL_MPI_SWITCH", "1.1.1.1:1,1.1.1.2:1,1.1.1.3:1,1.1.1.4:1,1.1.1.5:1,"
					"1.1.1.6:1,1.1.1.7:1,1.1.1.8:1,1.1.1.9:1"},
		{"IBV_COLL_MPI_TOPOLOGY", "tree"},
		{"IBV_COLL_MPI_TOPOLOGY", "switch"}, // without IBV_COLL_MPI_SWITCH
		{"IBV_COLL_MPI_TOPOLOGY", "auto"},
		{"IBV_COLL_MPI_MIN_BYTES", "-1"},
		{"IBV_COLL_MPI_MIN_BYTES", "1T"},
		{"IBV_COLL_MPI_MAX_BYTES", "12abc"},
		{"IBV_COLL_MPI_MIN_RANKS", "0"},
		{"IBV_COLL_MPI_MIN_RANKS", "65"},
		{"IBV_COLL_MPI_SEG_UNITS", "-1"},
		{"IBV_COLL_MPI_SEG_UNITS", "2M"},
		{"IBV_COLL_MPI_TIMEOUT_MS", "3600001"},
		{"IBV_COLL_MPI_SPIN_US", "-2"},
		{"IBV_COLL_MPI_SPIN_US", "10000001"},
	};
	for (const Bad &b : bad) {
		setenv(b.name, b.value, 1);
		Config c;
		c.min_ranks = 7; // untouched on failure
		std::string err;
		EXPECT_EQ(load_config(&c, &err), EINVAL) << b.name << "=" << b.value;
		EXPECT_EQ(c.min_ranks, 7) << b.name << "=" << b.value;
		const std::string head = std::string(b.name) + "=" + b.value + ": not understood (";
		EXPECT_EQ(err.compare(0, head.size(), head), 0) << err;
		EXPECT_EQ(err.back(), ')') << err;
		EXPECT_EQ(err.find('\n'), std::string::npos) << err;
		unsetenv(b.name);
	}
}

// The table is in libibv_coll's registry: ibv_coll_print_config lists every
// variable with its default, marks a bad value, and does not take a set
// IBV_COLL_MPI_* variable for a misspelt one (a misspelt one it names).
TEST_F(MpiConfig, ListedByTheLibrary)
{
	std::string all = listing();
	EXPECT_NE(all.find("# mpi (libibv_coll_mpi)\n"), std::string::npos) << all;
	const char *const want[][2] = {
		{"IBV_COLL_MPI_ENABLE", "1"},	  {"IBV_COLL_MPI_COLLS", "all"},
		{"IBV_COLL_MPI_DEVICE", ""},	  {"IBV_COLL_MPI_SWITCH", ""},
		{"IBV_COLL_MPI_TOPOLOGY", ""},	  {"IBV_COLL_MPI_MIN_BYTES", "0"},
		{"IBV_COLL_MPI_MAX_BYTES", "0"},  {"IBV_COLL_MPI_MIN_RANKS", "2"},
		{"IBV_COLL_MPI_SEG_UNITS", "0"},  {"IBV_COLL_MPI_TIMEOUT_MS", "3600000"},
		{"IBV_COLL_MPI_SPIN_US", "2000"}, {"IBV_COLL_MPI_STATS", "0"},
	};
	for (const auto &w : want)
		EXPECT_EQ(line_of(all, w[0]), std::string(w[0]) + "=" + w[1]) << all;

	setenv("IBV_COLL_MPI_STATS", "1", 1);
	setenv("IBV_COLL_MPI_MIN_RANKS", "0", 1);
	setenv("IBV_COLL_MPI_COLLS", "allreduce,scan", 1);
	setenv("IBV_COLL_MPI_STATZ", "1", 1);
	all = listing();
	EXPECT_EQ(line_of(all, "IBV_COLL_MPI_STATS"), "IBV_COLL_MPI_STATS=1    # default: 0");
	EXPECT_NE(line_of(all, "IBV_COLL_MPI_MIN_RANKS").find("# INVALID: "), std::string::npos)
		<< all;
	EXPECT_NE(line_of(all, "IBV_COLL_MPI_COLLS").find("# INVALID: "), std::string::npos) << all;
	size_t unknown = all.find("# unknown:");
	ASSERT_NE(unknown, std::string::npos) << all;
	EXPECT_NE(all.find("IBV_COLL_MPI_STATZ=1", unknown), std::string::npos) << all;
	EXPECT_EQ(all.find("IBV_COLL_MPI_STATS=", unknown), std::string::npos) << all;
}

// The add-ons' Seg ranges (addon_common/seg_range.h), against values
// worked out by hand.
TEST(SegRange, AskFollowsTheMembersAndTheDevice)
{
	using ibv_coll::addon::seg_ask;
	auto a = seg_ask(4096, 0, 4); // 64 x 3 = 192 units: 3 granules of 64
	EXPECT_EQ(a.of, 64u);
	EXPECT_EQ(a.granule, 64u);
	EXPECT_EQ(a.granules, 3u);
	EXPECT_EQ(seg_ask(4096, 0, 2).granules, 2u);	     // at least 128
	EXPECT_EQ(seg_ask(4096, 0, 1).granules, 2u);	     // one member too
	EXPECT_EQ(seg_ask(4096, 0, 64).granules, 8u);	     // at most 512
	EXPECT_EQ(seg_ask(0, 0, 64).granules, 8u);	     // 0: a device of 4096
	EXPECT_EQ(seg_ask(4096, 100, 4).granules, 2u);	     // 100 rounded up to 128
	EXPECT_EQ(seg_ask(4096, 1u << 20, 4).granules, 64u); // no more than the device
	a = seg_ask(16, 0, 4); // a device of 16 units: 16 granules of 1, all of them
	EXPECT_EQ(a.of, 16u);
	EXPECT_EQ(a.granule, 1u);
	EXPECT_EQ(a.granules, 16u);
	a = seg_ask(8192, 0, 4); // granules of 128: 192 takes 2
	EXPECT_EQ(a.granule, 128u);
	EXPECT_EQ(a.granules, 2u);
}

TEST(SegRange, PickTakesTheLowestRunFreeEverywhere)
{
	using ibv_coll::addon::seg_pick;
	const ibv_coll::addon::SegAsk three{64, 3, 64}, all{64, 64, 64}, small{1, 2, 4};
	EXPECT_EQ(seg_pick(three, ~0ull), 0x7ull);
	EXPECT_EQ(seg_pick(three, ~0ull << 5), 0xe0ull);
	// 0b1101_1011: runs of 2 only below bit 5; bits 6-7 (0xc0) make 2, not 3.
	EXPECT_EQ(seg_pick(three, 0xdbull), 0ull);
	EXPECT_EQ(seg_pick(three, 0x1dbull), 0x1c0ull);
	EXPECT_EQ(seg_pick(three, 0), 0ull);
	EXPECT_EQ(seg_pick(all, ~0ull), ~0ull);
	EXPECT_EQ(seg_pick(all, ~0ull >> 1), 0ull);
	// Only the device's granules count: bits 4 and up are not a device of 4.
	EXPECT_EQ(seg_pick(small, 0x38ull), 0ull);
	EXPECT_EQ(seg_pick(small, 0x3cull), 0xcull);
	// Base and count: granule 5 of 64 units, split two ways.
	EXPECT_EQ(ibv_coll::addon::seg_base(three, 0xe0ull, 1, 0), 320u);
	EXPECT_EQ(ibv_coll::addon::seg_count(three, 2), 96u);
	EXPECT_EQ(ibv_coll::addon::seg_base(three, 0xe0ull, 2, 1), 416u);
}
