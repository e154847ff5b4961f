// The device's memory translation table and SGE walks.
#include "nic/mr_table.h"

#include "nic/wqe.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace ibv_coll::emu {

int MrTable::add(uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access, uint32_t *key)
{
	std::unique_lock lk(mu_);
	uint32_t idx;
	if (!free_.empty()) {
		idx = free_.back();
		free_.pop_back();
	} else {
		if (slots_.size() >= kMaxMrSlots)
			return ENOMEM;
		slots_.emplace_back();
		idx = uint32_t(slots_.size() - 1);
	}
	Entry &e = slots_[idx];
	e.addr = addr;
	e.len = len;
	e.pdn = pdn;
	e.access = access;
	e.tag = uint8_t(e.tag + 1);
	e.valid = true;
	live_++;
	// Index 0 with tag 0 would make key 0; start indices at 1.
	*key = (idx + 1) << 8 | e.tag;
	return 0;
}

int MrTable::add_keyed(uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access, uint32_t key)
{
	std::unique_lock lk(mu_);
	if (keyed_.count(key))
		return EEXIST;
	Entry e;
	e.addr = addr;
	e.len = len;
	e.pdn = pdn;
	e.access = access;
	e.valid = true;
	keyed_.emplace(key, e);
	return 0;
}

int MrTable::remove(uint32_t key)
{
	std::unique_lock lk(mu_);
	if (keyed_.erase(key))
		return 0;
	uint32_t idx = (key >> 8) - 1;
	if ((key >> 8) == 0 || idx >= slots_.size())
		return EINVAL;
	Entry &e = slots_[idx];
	if (!e.valid || e.tag != uint8_t(key))
		return EINVAL;
	free_.push_back(idx); // may fail (allocation): before anything changes
	e.valid = false;
	live_--;
	return 0;
}

const MrTable::Entry *MrTable::find(uint32_t key) const
{
	if (!keyed_.empty()) {
		auto it = keyed_.find(key);
		if (it != keyed_.end())
			return &it->second;
	}
	uint32_t idx = (key >> 8) - 1;
	if ((key >> 8) == 0 || idx >= slots_.size())
		return nullptr;
	const Entry &e = slots_[idx];
	if (!e.valid || e.tag != uint8_t(key))
		return nullptr;
	return &e;
}

DmaErr MrTable::check(uint32_t key, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t need) const
{
	std::shared_lock lk(mu_);
	const Entry *ep = find(key);
	if (!ep)
		return DmaErr::bad_key;
	const Entry &e = *ep;
	if (e.pdn != pdn)
		return DmaErr::bad_pd;
	if ((e.access & need) != need)
		return DmaErr::bad_access;
	if (addr < e.addr || len > e.len || addr - e.addr > e.len - len)
		return DmaErr::bounds;
	return DmaErr::ok;
}

// process_vm_readv/writev may stop short (a page not mapped there part way
// through); go on from where it stopped so that a short copy is an error
// only when nothing more can be moved.
static bool vm_copy(DmaSpace space, void *local, uint64_t addr, uint64_t len, bool write)
{
	uint8_t *p = static_cast<uint8_t *>(local);
	while (len) {
		iovec l{p, size_t(len)}, r{reinterpret_cast<void *>(addr), size_t(len)};
		ssize_t n = write ? process_vm_writev(space, &l, 1, &r, 1, 0)
				  : process_vm_readv(space, &l, 1, &r, 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (n == 0) {
			errno = EFAULT;
			return false;
		}
		p += n;
		addr += uint64_t(n);
		len -= uint64_t(n);
	}
	return true;
}

bool dma_read_remote(DmaSpace space, void *dst, uint64_t addr, uint64_t len)
{
	return vm_copy(space, dst, addr, len, false);
}

bool dma_write_remote(DmaSpace space, uint64_t addr, const void *src, uint64_t len)
{
	return vm_copy(space, const_cast<void *>(src), addr, len, true);
}

bool dma_space_gone(DmaSpace space)
{
	if (space == kLocalSpace)
		return false;
	// The process is looked up before the address: ESRCH for one that is
	// gone (a zombie has no memory either), EFAULT for a live one.
	uint8_t b;
	iovec l{&b, 1}, r{nullptr, 1};
	return process_vm_readv(space, &l, 1, &r, 1, 0) < 0 && errno == ESRCH;
}

void SgeCursor::seek(uint64_t pos)
{
	idx = 0;
	off = 0;
	while (idx < num && pos >= sge[idx].length) {
		pos -= sge[idx].length;
		idx++;
	}
	off = pos;
}

bool SgeCursor::gather(uint8_t *dst, uint64_t n)
{
	bool ok = true;
	while (n) {
		const Sge &s = sge[idx];
		uint64_t k = s.length - off;
		if (k > n)
			k = n;
		if (k && !dma_read(space, dst, s.addr + off, k)) {
			memset(dst, 0, k); // never what was in the buffer before
			ok = false;
		}
		dst += k;
		n -= k;
		off += k;
		if (off == s.length) {
			idx++;
			off = 0;
		}
	}
	return ok;
}

bool SgeCursor::scatter(const uint8_t *src, uint64_t n)
{
	bool ok = true;
	while (n) {
		const Sge &s = sge[idx];
		uint64_t k = s.length - off;
		if (k > n)
			k = n;
		if (k && !dma_write(space, s.addr + off, src, k))
			ok = false;
		src += k;
		n -= k;
		off += k;
		if (off == s.length) {
			idx++;
			off = 0;
		}
	}
	return ok;
}

} // namespace ibv_coll::emu
