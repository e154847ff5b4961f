// A first-in first-out queue that allocates nothing until its first
// push (std::deque allocates a block of 512 bytes when it is made: a
// message's ring state holds two, whether the message goes round the
// ring or not, 1 KiB in each of a simulated fabric's hosts).  Its items
// lie in one vector from head_ on; the vector is compacted when the
// popped head is most of it, so a push or pop is O(1) amortised.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace ibv_coll::util {

template <class T> class Fifo {
public:
	bool empty() const { return head_ == v_.size(); }
	size_t size() const { return v_.size() - head_; }
	T &front() { return v_[head_]; }
	const T &front() const { return v_[head_]; }
	void push_back(const T &x) { v_.push_back(x); }
	void pop_front()
	{
		if (++head_ == v_.size()) {
			v_.clear();
			head_ = 0;
		} else if (head_ >= 32 && 2 * head_ >= v_.size()) {
			v_.erase(v_.begin(), v_.begin() + ptrdiff_t(head_));
			head_ = 0;
		}
	}
	void swap(Fifo &o)
	{
		v_.swap(o.v_);
		std::swap(head_, o.head_);
	}
	void clear()
	{
		v_.clear();
		head_ = 0;
	}

private:
	std::vector<T> v_;
	size_t head_ = 0;
};

} // namespace ibv_coll::util
