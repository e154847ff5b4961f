// The configuration variables' number syntax, "decimal or 0x hex"
// (ibv_coll(7)), against hand-written cases; the fuzz target fuzz_config
// checks the same against a reference on arbitrary text.
#include "util/config.h"

#include <gtest/gtest.h>

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
