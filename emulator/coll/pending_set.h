// The blocks of one message sent and not yet acknowledged, with their
// retransmission timers (coll/coll_job.h's Message: o_pending, f_pending).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ibv_coll::emu {

// Entries by block number, in pages of page_entries made at their first
// add: a strategy that never uses the set pays nothing for it, and a
// message pays for the blocks in flight (its window), not for all of its
// blocks (56 bytes a block: 14 KiB at 1 MiB, 14 MiB at 1 GiB).  A page
// whose entries have all left is freed once blocks have been sent from
// a page keep_pages after it.  What an entry held after it left (last(),
// read when a result comes twice, SwitchPath::answered_twice) is kept
// with its page, and beyond it for the last kept_entries that drew an
// ASK or went again on a NAK (the only ones it reads), so that a message
// answers as one with an entry for every block.  A count, and a lower
// bound of the earliest deadline, so that a pass with nothing due costs
// no walk (the bound goes stale-early when entries leave; the walk it
// then causes finds nothing due and makes it exact again).
class PendingSet {
public:
	static constexpr uint32_t page_entries = 32;
	static constexpr uint32_t keep_pages = 3;
	static constexpr uint32_t kept_entries = 256;
	struct Entry {
		uint64_t deadline = 0;	    // send again after this
		uint64_t sent = 0;	    // when it was (last) sent
		uint64_t progress_mark = 0; // the message's last_progress at the last repeat
		uint8_t repeats = 0;	    // sent again since the message's last progress
		bool again = false;	    // sent more than once: no RTT sample (Karn)
		bool fast = false;	    // sent again on a gap (RingPath::acked): once only
		// Switch path: ASKs (no payload) since the partial last went,
		// and whether the switch said it holds the partial.
		uint8_t asks = 0;
		bool held = false;
		bool on = false;
		// Switch path: when the partial itself last went, and (not 0)
		// if that copy went on a NAK, how long after the copy before
		// (SwitchPath::on_nak, spurious()).
		uint32_t nak_lead = 0;
		uint32_t next_at_data = 0; // switch path: the first block not yet sent then
		uint64_t data_sent = 0;

		uint64_t result_at = 0; // switch path: when the result came
	};
	PendingSet() = default;
	PendingSet(PendingSet &&) = default;
	PendingSet &operator=(PendingSet &&) = default;
	PendingSet(const PendingSet &o) { *this = o; }
	PendingSet &operator=(const PendingSet &o)
	{
		if (this == &o)
			return *this;
		pages_.clear();
		for (const std::unique_ptr<Page> &p : o.pages_)
			pages_.push_back(p ? std::make_unique<Page>(*p) : nullptr);
		kept_ = o.kept_;
		kept_at_ = o.kept_at_;
		held_ = o.held_;
		cap_ = o.cap_;
		n_ = o.n_;
		lo_ = o.lo_;
		hi_ = o.hi_;
		next_ = o.next_;
		return *this;
	}
	void init(uint32_t nblocks)
	{
		pages_.clear();
		kept_.clear();
		kept_at_ = 0;
		held_ = 0;
		cap_ = nblocks;
		n_ = 0;
		lo_ = UINT32_MAX;
		hi_ = 0;
		next_ = UINT64_MAX;
	}
	size_t size() const { return n_; }
	bool empty() const { return !n_; }
	// The pages the set holds now (for tests and memory figures).
	size_t pages() const { return held_; }
	Entry *find(uint32_t sid)
	{
		Entry *e = at(sid);
		return e && e->on ? e : nullptr;
	}
	const Entry *find(uint32_t sid) const
	{
		const Entry *e = at(sid);
		return e && e->on ? e : nullptr;
	}
	// What block sid's entry held when it left (or holds): its last
	// send; nullptr when never sent (or, without an ASK or a NAK, when
	// its page is freed).
	const Entry *last(uint32_t sid) const
	{
		if (const Entry *e = at(sid))
			return e;
		for (size_t i = 0; i < kept_.size(); i++) { // the newest first
			const auto &k = kept_[(kept_at_ + kept_.size() - 1 - i) % kept_.size()];
			if (k.first == sid)
				return &k.second;
		}
		return nullptr;
	}
	Entry &add(uint32_t sid)
	{
		if (pages_.size() < pages_for(cap_))
			pages_.resize(pages_for(cap_));
		std::unique_ptr<Page> &pg = pages_[sid / page_entries];
		if (!pg) {
			pg = std::make_unique<Page>();
			held_++;
		}
		Page &page = *pg; // before release(): the page has an entry on
		Entry &e = page.e[sid % page_entries];
		if (!e.on) {
			e = Entry{};
			e.on = true;
			page.on++;
			n_++;
			lo_ = std::min(lo_, sid);
			if (sid >= hi_) {
				const uint32_t was = hi_ ? (hi_ - 1) / page_entries : 0;
				hi_ = sid + 1;
				for (uint32_t q = was; q < sid / page_entries; q++)
					if (q + 1 >= keep_pages)
						release(q + 1 - keep_pages);
			}
		}
		return e;
	}
	void erase(uint32_t sid)
	{
		Entry *e = at(sid);
		if (e && e->on) {
			e->on = false;
			n_--;
			const uint32_t p = sid / page_entries;
			if (!--pages_[p]->on && p + keep_pages <= (hi_ - 1) / page_entries)
				release(p);
		}
	}
	void timer_set(uint64_t deadline) { next_ = std::min(next_, deadline); }
	// Call f(sid) for every entry below sid (f may re-arm it, not erase
	// it).  Blocks are acknowledged roughly in order, so the walk starts
	// at the oldest entry still on.
	template <class F> void for_before(uint32_t sid, F f)
	{
		settle();
		for (uint32_t s = lo_; s < sid && s < hi_; s++)
			if (Entry *e = find(s))
				f(s, *e);
	}
	uint64_t next() const { return n_ ? next_ : UINT64_MAX; }
	// The entry of the lowest block still on (the oldest sent, but for
	// repeats), or nullptr; *sid names it.
	Entry *lowest(uint32_t *sid)
	{
		settle();
		if (!n_ || lo_ >= hi_)
			return nullptr;
		*sid = lo_;
		return at(lo_);
	}
	const Entry *lowest(uint32_t *sid) const
	{
		for (uint32_t s = lo_; n_ && s < hi_; s++)
			if (const Entry *e = find(s)) {
				*sid = s;
				return e;
			}
		return nullptr;
	}
	// Call f(sid) for every entry due at now (f may re-arm it), then make
	// the bound exact.
	template <class F> void for_due(uint64_t now, F f)
	{
		if (!n_ || now < next_)
			return;
		settle();
		for (uint32_t s = lo_; s < hi_; s++)
			if (const Entry *e = find(s); e && now >= e->deadline)
				f(s);
		next_ = UINT64_MAX;
		for (uint32_t s = lo_; s < hi_; s++)
			if (const Entry *e = find(s))
				next_ = std::min(next_, e->deadline);
	}

private:
	struct Page {
		Entry e[page_entries];
		uint32_t on = 0; // entries on
	};
	static size_t pages_for(uint32_t blocks)
	{
		return (size_t(blocks) + page_entries - 1) / page_entries;
	}
	Entry *at(uint32_t sid) const
	{
		const size_t p = sid / page_entries;
		return p < pages_.size() && pages_[p] ? &pages_[p]->e[sid % page_entries] : nullptr;
	}
	// Page p freed if no entry of it is on; what last() reads kept.
	void release(uint32_t p)
	{
		if (!pages_[p] || pages_[p]->on)
			return;
		for (uint32_t i = 0; i < page_entries; i++) {
			const Entry &e = pages_[p]->e[i];
			if (!e.asks && !e.nak_lead)
				continue;
			// A ring: the oldest overwritten once full.
			if (kept_.size() < kept_entries)
				kept_.emplace_back(p * page_entries + i, e);
			else
				kept_[kept_at_] = {p * page_entries + i, e};
			kept_at_ = (kept_at_ + 1) % kept_entries;
		}
		pages_[p].reset();
		held_--;
	}
	// lo_ moved up to the lowest entry still on.
	void settle()
	{
		while (lo_ < hi_) {
			const Entry *e = at(lo_);
			if (e && e->on)
				break;
			lo_ = e ? lo_ + 1 : (lo_ / page_entries + 1) * page_entries;
		}
		lo_ = std::min(lo_, hi_);
	}

	std::vector<std::unique_ptr<Page>> pages_;
	std::vector<std::pair<uint32_t, Entry>> kept_; // freed, with an ASK or a NAK
	size_t kept_at_ = 0;			       // where the next one goes
	size_t held_ = 0;			       // pages made and not freed
	uint32_t cap_ = 0;			       // the message's blocks
	size_t n_ = 0;
	uint32_t lo_ = UINT32_MAX, hi_ = 0; // the entries ever on lie in [lo_, hi_)
	uint64_t next_ = UINT64_MAX;
};

} // namespace ibv_coll::emu
