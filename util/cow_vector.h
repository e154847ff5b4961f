// A vector whose copies share one array until one of them is changed
// (copy on write).  A job's member list is the same on every node: the
// simulator's thousands of emulated NICs hold one array instead of one
// each (the member list is O(N) per node, so O(N^2) in all).  Reads
// never copy; a change through a copy that shares copies first, so every
// copy keeps value semantics.  Not thread-safe between copies that are
// changed concurrently (reads are).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <vector>

namespace ibv_coll::util {

template <class T> class CowVector {
public:
	using value_type = T;
	using const_iterator = typename std::vector<T>::const_iterator;

	CowVector() = default;
	CowVector(std::initializer_list<T> l) : p_(std::make_shared<std::vector<T>>(l)) {}
	CowVector(std::vector<T> v) : p_(std::make_shared<std::vector<T>>(std::move(v))) {}
	template <class It> CowVector(It b, It e) : p_(std::make_shared<std::vector<T>>(b, e)) {}

	// Reads: never copy.
	size_t size() const { return p_ ? p_->size() : 0; }
	bool empty() const { return !size(); }
	const T &operator[](size_t i) const { return (*p_)[i]; }
	const T *data() const { return p_ ? p_->data() : nullptr; }
	const_iterator begin() const { return view().begin(); }
	const_iterator end() const { return view().end(); }
	const std::vector<T> &view() const
	{
		static const std::vector<T> none;
		return p_ ? *p_ : none;
	}
	// Whether two copies share one array (what the sharing saves).
	bool shares(const CowVector &o) const { return p_ && p_ == o.p_; }
	// The array itself, to tell later whether a copy still holds it (is):
	// while a pin lives no copy changes the array in place (a change
	// copies first, the pin being another holder), so a copy that holds
	// the pinned array holds the same values.
	std::shared_ptr<const std::vector<T>> pin() const { return p_; }
	bool is(const std::shared_ptr<const std::vector<T>> &pinned) const { return p_ == pinned; }
	bool operator==(const CowVector &o) const { return p_ == o.p_ || view() == o.view(); }
	bool operator==(const std::vector<T> &o) const { return view() == o; }

	// Changes: copy first when shared.
	std::vector<T> &mut()
	{
		if (!p_)
			p_ = std::make_shared<std::vector<T>>();
		else if (p_.use_count() > 1)
			p_ = std::make_shared<std::vector<T>>(*p_);
		return *p_;
	}
	// (No non-const operator[] or iterators: a read through a non-const
	// copy would copy.  Write through mut().)
	void push_back(const T &v) { mut().push_back(v); }
	void pop_back() { mut().pop_back(); }
	void resize(size_t n) { mut().resize(n); }
	void resize(size_t n, const T &v) { mut().resize(n, v); }
	void assign(size_t n, const T &v) { fresh().assign(n, v); }
	template <class It> void assign(It b, It e) { fresh().assign(b, e); }
	void clear() { p_.reset(); }
	CowVector &operator=(std::initializer_list<T> l)
	{
		p_ = std::make_shared<std::vector<T>>(l);
		return *this;
	}
	CowVector &operator=(std::vector<T> v)
	{
		p_ = std::make_shared<std::vector<T>>(std::move(v));
		return *this;
	}

private:
	// An array of our own, its old contents not wanted.
	std::vector<T> &fresh()
	{
		if (!p_ || p_.use_count() > 1)
			p_ = std::make_shared<std::vector<T>>();
		return *p_;
	}
	std::shared_ptr<std::vector<T>> p_;
};

} // namespace ibv_coll::util
