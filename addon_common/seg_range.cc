// The add-ons' Seg ranges (seg_range.h).
#include "seg_range.h"

#include <algorithm>

namespace ibv_coll::addon {

SegAsk seg_ask(uint32_t units, uint32_t want, int members)
{
	if (!units)
		units = 4096;
	if (!want)
		want = std::clamp(64u * uint32_t(std::max(members - 1, 1)), 128u, 512u);
	SegAsk a;
	a.of = std::min(units, 64u);
	a.granule = units / a.of;
	a.granules = std::clamp((want + a.granule - 1) / a.granule, 1u, a.of);
	return a;
}

uint64_t seg_pick(const SegAsk &ask, uint64_t avail)
{
	const uint32_t k = ask.granules;
	if (!k || k > ask.of || ask.of > 64)
		return 0;
	const uint64_t run = k < 64 ? (uint64_t(1) << k) - 1 : ~uint64_t(0);
	for (uint32_t at = 0; at + k <= ask.of; at++)
		if ((avail >> at & run) == run)
			return run << at;
	return 0;
}

} // namespace ibv_coll::addon
