// The device's memory translation table and its DMA interface: every byte
// the device reads or writes in application memory goes through check()
// (key, protection domain, access rights, bounds) and then a copy, by
// dma_read()/dma_write() or an SgeCursor, in the address space the
// protection domain belongs to.
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

// The address space application memory lives in: a protection domain, and
// so every MR and QP in it, belongs to one.  kLocalSpace is the device's
// own process (a plain memcpy); any other value is the pid of another
// process, reached with process_vm_readv/process_vm_writev (the device
// must be allowed to ptrace it: same uid, or CAP_SYS_PTRACE).
using DmaSpace = int32_t;
constexpr DmaSpace kLocalSpace = 0;

// Copy len bytes between application memory at addr in space and the
// device's own buffer.  Only after check() said yes.  False when the other
// process is gone or the range is not mapped there any more (errno says
// which); the local space never fails.
bool dma_read_remote(DmaSpace space, void *dst, uint64_t addr, uint64_t len);
bool dma_write_remote(DmaSpace space, uint64_t addr, const void *src, uint64_t len);
// Whether the process of space is gone (exited, perhaps not yet reaped):
// what a failed copy means when it is, rather than an address not mapped.
bool dma_space_gone(DmaSpace space);
inline bool dma_read(DmaSpace space, void *dst, uint64_t addr, uint64_t len)
{
	if (space == kLocalSpace) {
		if (len)
			__builtin_memcpy(dst, reinterpret_cast<const void *>(addr), len);
		return true;
	}
	return dma_read_remote(space, dst, addr, len);
}
inline bool dma_write(DmaSpace space, uint64_t addr, const void *src, uint64_t len)
{
	if (space == kLocalSpace) {
		if (len)
			__builtin_memcpy(reinterpret_cast<void *>(addr), src, len);
		return true;
	}
	return dma_write_remote(space, addr, src, len);
}

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

// A scatter/gather walk over a list of local SGEs, already checked, in
// address space `space`, that copies to or from a flat buffer at a
// running offset.
struct SgeCursor {
	SgeCursor(const struct Sge *s, uint32_t n, DmaSpace sp = kLocalSpace)
		: sge(s), num(n), space(sp)
	{
	}
	const struct Sge *sge = nullptr;
	uint32_t num = 0;
	DmaSpace space = kLocalSpace;
	uint32_t idx = 0;	 // current SGE
	uint64_t off = 0;	 // offset in the current SGE
	void seek(uint64_t pos); // position pos bytes from the start of the list
	// Copy n bytes out of the SGEs into dst (gather), advancing.  False:
	// another space's memory could not be read (see dma_read).
	bool gather(uint8_t *dst, uint64_t n);
	// Copy n bytes from src into the SGEs (scatter), advancing.
	bool scatter(const uint8_t *src, uint64_t n);
};

} // namespace ibv_coll::emu
