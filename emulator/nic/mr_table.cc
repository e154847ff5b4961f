// The device's memory translation table and SGE walks.
#include "nic/mr_table.h"

#include "nic/wqe.h"

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
	e.valid = false;
	free_.push_back(idx);
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

void SgeCursor::gather(uint8_t *dst, uint64_t n)
{
	while (n) {
		const Sge &s = sge[idx];
		uint64_t k = s.length - off;
		if (k > n)
			k = n;
		if (k)
			memcpy(dst, reinterpret_cast<const void *>(s.addr + off), k);
		dst += k;
		n -= k;
		off += k;
		if (off == s.length) {
			idx++;
			off = 0;
		}
	}
}

void SgeCursor::scatter(const uint8_t *src, uint64_t n)
{
	while (n) {
		const Sge &s = sge[idx];
		uint64_t k = s.length - off;
		if (k > n)
			k = n;
		if (k)
			memcpy(reinterpret_cast<void *>(s.addr + off), src, k);
		src += k;
		n -= k;
		off += k;
		if (off == s.length) {
			idx++;
			off = 0;
		}
	}
}

} // namespace ibv_coll::emu
