// The device's memory translation table and its DMA interface: every byte
// the device reads or writes in application memory goes through check()
// (key, protection domain, access rights, bounds) and then a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace ibv_coll::emu {

// Values of enum ibv_access_flags.
enum Access : uint32_t {
	kAccLocalWrite = 1 << 0,
	kAccRemoteWrite = 1 << 1,
	kAccRemoteRead = 1 << 2,
};

enum class DmaErr : uint8_t { ok, bad_key, bad_pd, bad_access, bounds };

// Thread safety: the table has its own reader/writer lock, so that a
// posting thread can check its SGEs while the engine thread is busy (the
// engine's big lock is held across system calls).
class MrTable {
public:
	static constexpr size_t kMaxMrSlots = (1u << 24) - 1; // keys carry 24 index bits

	// Keys are index << 8 | tag; the tag changes each time a slot is
	// reused, so a stale key misses.  lkey == rkey.
	int add(uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access, uint32_t *key);
	int remove(uint32_t key);
	// A region whose key someone else chose: a device in front of a real
	// RDMA device registers each real MR under the real lkey, so that the
	// application's keys are the engine's.  EEXIST when the key is taken.
	int add_keyed(uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access, uint32_t key);
	// Whether [addr, addr+len) is inside the region named by key, owned by
	// pdn, and allowed `need` access.  len 0 still checks key and pd.
	DmaErr check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t need) const;
	size_t count() const
	{
		std::shared_lock lk(mu_);
		return live_ + keyed_.size();
	}

private:
	struct Entry {
		uint64_t addr = 0;
		uint64_t len = 0;
		uint32_t pdn = 0;
		uint32_t access = 0;
		uint8_t tag = 0;
		bool valid = false;
	};
	const Entry *find(uint32_t key) const;
	mutable std::shared_mutex mu_;
	std::vector<Entry> slots_;
	std::unordered_map<uint32_t, Entry> keyed_;
	std::vector<uint32_t> free_;
	size_t live_ = 0;
};

// A scatter/gather walk over a list of local SGEs, already checked, that
// copies to or from a flat buffer at a running offset.
struct SgeCursor {
	const struct Sge *sge = nullptr;
	uint32_t num = 0;
	uint32_t idx = 0;	 // current SGE
	uint64_t off = 0;	 // offset in the current SGE
	void seek(uint64_t pos); // position pos bytes from the start of the list
	// Copy n bytes out of the SGEs into dst (gather), advancing.
	void gather(uint8_t *dst, uint64_t n);
	// Copy n bytes from src into the SGEs (scatter), advancing.
	void scatter(const uint8_t *src, uint64_t n);
};

} // namespace ibv_coll::emu
