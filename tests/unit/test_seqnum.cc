// The order of message IDs, switch-path block numbers and incarnations
// (wire/seqnum.h) against hand-computed cases: serial-number arithmetic
// modulo 2^32, as the provider's MID check, the ring and the switch use it.
#include "wire/seqnum.h"

#include <gtest/gtest.h>

using ibv_coll::emu::next_mid;
using ibv_coll::emu::seq_after;

TEST(SeqNum, FollowsByOneTo2To31MinusOne)
{
	EXPECT_TRUE(seq_after(1, 0));
	EXPECT_FALSE(seq_after(0, 1));
	EXPECT_FALSE(seq_after(5, 5)) << "a number does not follow itself";
	EXPECT_TRUE(seq_after(0x7fffffffu, 0)) << "2^31 - 1 ahead";
	EXPECT_FALSE(seq_after(0x80000000u, 0)) << "exactly 2^31: neither follows";
	EXPECT_FALSE(seq_after(0, 0x80000000u)) << "exactly 2^31: neither follows";
	EXPECT_FALSE(seq_after(0x80000001u, 0)) << "2^31 + 1 ahead is 2^31 - 1 behind";
	EXPECT_TRUE(seq_after(0, 0x80000001u));
}

TEST(SeqNum, WrapsAt2To32)
{
	EXPECT_TRUE(seq_after(0, 0xffffffffu));
	EXPECT_FALSE(seq_after(0xffffffffu, 0));
	EXPECT_TRUE(seq_after(5, 0xfffffff0u)) << "0x15 ahead, across the wrap";
	EXPECT_TRUE(seq_after(1, 0xffffffffu));
	// The far jump: 0x90000000 after 2 is 0x8ffffffe ahead, more
	// than 2^31 - 1, so it reads as behind (and the provider refuses it).
	EXPECT_FALSE(seq_after(0x90000000u, 2));
	EXPECT_TRUE(seq_after(2, 0x90000000u));
	// 0x10 -> 0x8000000f -> 0xfffffffe: each step follows, but the last
	// does not follow the first (0xffffffee ahead): a Seg unit that held
	// a block of 0x10 must not compare MIDs with 0xfffffffe's, which is
	// why a switch orders by block number, never by MID.
	EXPECT_TRUE(seq_after(0x8000000fu, 0x10u));
	EXPECT_TRUE(seq_after(0xfffffffeu, 0x8000000fu));
	EXPECT_FALSE(seq_after(0xfffffffeu, 0x10u));
}

TEST(SeqNum, AutomaticMidSkipsZero)
{
	EXPECT_EQ(next_mid(0), 1u) << "the first message";
	EXPECT_EQ(next_mid(1), 2u);
	EXPECT_EQ(next_mid(0xfffffffeu), 0xffffffffu);
	EXPECT_EQ(next_mid(0xffffffffu), 1u) << "0 is no message's";
	EXPECT_TRUE(seq_after(next_mid(0xffffffffu), 0xffffffffu));
}
