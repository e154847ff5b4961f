// util::Fifo against std::deque, the queue it stands in for.
#include "util/fifo.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

TEST(Fifo, AnswersAsADequeDoes)
{
	std::mt19937 rng(7);
	ibv_coll::util::Fifo<uint32_t> f, g;
	std::deque<uint32_t> d;
	for (uint32_t i = 0; i < 200000; i++) {
		const uint32_t r = rng() % 100;
		if (r < 55) {
			f.push_back(i);
			d.push_back(i);
		} else if (r < 98 && !d.empty()) {
			ASSERT_EQ(f.front(), d.front());
			f.pop_front();
			d.pop_front();
		} else if (r == 98) {
			f.swap(g); // and back: the same items
			EXPECT_TRUE(f.empty());
			f.swap(g);
		} else {
			f.clear();
			d.clear();
		}
		ASSERT_EQ(f.size(), d.size());
		ASSERT_EQ(f.empty(), d.empty());
		if (!d.empty()) {
			ASSERT_EQ(f.front(), d.front());
		}
	}
}
