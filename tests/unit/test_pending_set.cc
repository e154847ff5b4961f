// The pending set's paged storage (coll/pending_set.h) against a plain
// model: one entry per block for the whole message, as the set was.
#include "coll/pending_set.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

using ibv_coll::emu::PendingSet;

namespace {

// Every block's entry for the whole message, never freed.
struct Model {
	struct E {
		bool on = false, ever = false;
		uint64_t deadline = 0;
		uint32_t nak_lead = 0;
	};
	std::vector<E> e;
	explicit Model(uint32_t n) : e(n) {}
	size_t size() const
	{
		size_t n = 0;
		for (const E &x : e)
			n += x.on;
		return n;
	}
	int lowest() const
	{
		for (size_t s = 0; s < e.size(); s++)
			if (e[s].on)
				return int(s);
		return -1;
	}
};

void same(const PendingSet &p, const Model &m)
{
	ASSERT_EQ(p.size(), m.size());
	for (uint32_t s = 0; s < m.e.size(); s++) {
		const PendingSet::Entry *e = p.find(s);
		ASSERT_EQ(e != nullptr, m.e[s].on) << "block " << s;
		if (e) {
			EXPECT_EQ(e->deadline, m.e[s].deadline);
			EXPECT_EQ(e->nak_lead, m.e[s].nak_lead);
		}
	}
	uint32_t sid = 0;
	const PendingSet::Entry *lo = p.lowest(&sid);
	ASSERT_EQ(lo ? int(sid) : -1, m.lowest());
}

} // namespace

// Random windows of blocks sent, acknowledged out of order, re-armed and
// found due: the set answers as one entry a block would, and keeps what
// a block held after it left while (keep_pages - 1) pages of blocks more
// are sent.
TEST(PendingSet, PagesAnswerAsOneEntryABlock)
{
	for (uint32_t seed = 1; seed <= 20; seed++) {
		std::mt19937 rng(seed);
		const uint32_t n = 1 + rng() % 2000;
		PendingSet p;
		p.init(n);
		Model m(n);
		uint32_t next_send = 0;
		uint64_t now = 0;
		const uint32_t window = 1 + rng() % 100;
		while (next_send < n || m.size()) {
			now += 1 + rng() % 10;
			const uint32_t r = rng() % 10;
			if (r < 4 && next_send < n && m.size() < window) {
				const uint32_t s = next_send++;
				PendingSet::Entry &e = p.add(s);
				e.deadline = now + 50 + rng() % 100;
				e.nak_lead = 1 + s;
				p.timer_set(e.deadline);
				m.e[s] = {true, true, e.deadline, e.nak_lead};
			} else if (r < 8 && m.size()) {
				// Acknowledge one of the oldest few, as results come.
				const int lo = m.lowest();
				uint32_t s = uint32_t(lo) + rng() % 4;
				if (s >= n || !m.e[s].on)
					s = uint32_t(lo);
				p.erase(s);
				m.e[s].on = false;
				p.erase(s); // twice: no change
			} else {
				std::set<uint32_t> due, want;
				p.for_due(now, [&](uint32_t s) {
					due.insert(s);
					PendingSet::Entry &e = *p.find(s);
					e.deadline = now + 100;
					p.timer_set(e.deadline);
				});
				for (uint32_t s = 0; s < n; s++)
					if (m.e[s].on && now >= m.e[s].deadline) {
						want.insert(s);
						m.e[s].deadline = now + 100;
					}
				ASSERT_EQ(due, want) << "seed " << seed;
				uint64_t earliest = UINT64_MAX;
				for (const Model::E &x : m.e)
					if (x.on)
						earliest = std::min(earliest, x.deadline);
				EXPECT_LE(p.next(), earliest);
			}
			same(p, m);
			// What a block held after it left, while fewer than
			// (keep_pages - 1) pages of blocks were sent after it.
			const uint32_t keep = (PendingSet::keep_pages - 1) *
					      PendingSet::page_entries;
			for (uint32_t s = next_send > keep ? next_send - keep : 0; s < next_send;
			     s++) {
				const PendingSet::Entry *e = p.last(s);
				ASSERT_NE(e, nullptr) << "block " << s << ", seed " << seed;
				EXPECT_EQ(e->nak_lead, 1 + s);
			}
		}
		EXPECT_TRUE(p.empty());
		EXPECT_EQ(p.next(), UINT64_MAX);
	}
}

// A long message with a window of 64 blocks in flight holds the pages of
// its window and one behind, not one entry for each of its blocks.
TEST(PendingSet, HoldsTheWindowNotTheMessage)
{
	const uint32_t n = 1 << 18, window = 64; // a 1 GiB message of 4 KiB blocks
	PendingSet p;
	p.init(n);
	size_t most = 0;
	for (uint32_t s = 0; s < n; s++) {
		p.add(s);
		if (s >= window)
			p.erase(s - window);
		most = std::max(most, p.pages());
	}
	EXPECT_LE(most, window / PendingSet::page_entries + 3);
	uint32_t sid = 0;
	ASSERT_NE(p.lowest(&sid), nullptr);
	EXPECT_EQ(sid, n - window);
	// A block stuck at the start holds its own page, not those after it.
	PendingSet q;
	q.init(n);
	most = 0;
	for (uint32_t s = 0; s < n; s++) {
		q.add(s);
		if (s >= window)
			q.erase(s - window + 1);
		most = std::max(most, q.pages());
	}
	EXPECT_EQ(q.size(), window);
	EXPECT_LE(most, window / PendingSet::page_entries + 4);
	EXPECT_NE(q.find(0), nullptr);
	EXPECT_EQ(q.find(1), nullptr);
}

// What a block that drew an ASK or went again on a NAK held is found
// after its page is freed (a result that comes twice reads it), for the
// last kept_entries such blocks; a block without either is forgotten
// with its page.
TEST(PendingSet, KeepsWhatAResultThatComesTwiceReads)
{
	const uint32_t n = 20000, window = 64;
	PendingSet p;
	p.init(n);
	for (uint32_t s = 0; s < n; s++) {
		PendingSet::Entry &e = p.add(s);
		e.sent = 1000 + s;
		if (s % 10 == 0)
			e.asks = 1;
		else if (s % 10 == 5)
			e.nak_lead = 7;
		if (s >= window)
			p.erase(s - window);
	}
	for (uint32_t s = n - window; s < n; s++)
		p.erase(s);
	EXPECT_TRUE(p.empty());
	const uint32_t kept_from = n - PendingSet::kept_entries * 5; // two a ten
	for (uint32_t s = 0; s < n; s++) {
		const PendingSet::Entry *e = p.last(s);
		const bool marked = s % 10 == 0 || s % 10 == 5;
		const bool on_page = s / PendingSet::page_entries + PendingSet::keep_pages >
				     (n - 1) / PendingSet::page_entries;
		if (on_page || (marked && s >= kept_from)) {
			ASSERT_NE(e, nullptr) << "block " << s;
			EXPECT_EQ(e->sent, 1000 + s);
			EXPECT_EQ(e->asks, s % 10 == 0 ? 1 : 0);
		} else if (!marked || s < kept_from - 2 * window) {
			EXPECT_EQ(e, nullptr) << "block " << s;
		}
	}
}
