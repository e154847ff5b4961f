// The Seg units of the add-ons' jobs (libibv_coll_mpi, the NCCL plugin):
// a job keeps a range of the device's units while its communicator lives,
// one that no other live communicator of any of its members holds, so
// that collectives in flight on many communicators at once never find
// their units taken (the NIC fails a collective whose units another job
// holds, as waiting for them could deadlock across nodes).  The device's
// units are cut into at most 64 granules; each member says which are
// free at it, and all members pick alike the lowest run free at every
// one of them, as SHARP gives a communicator its resources when it is
// made.
#pragma once

#include <cstdint>

namespace ibv_coll::addon {

// What member 0 asks for, the same for every member.
struct SegAsk {
	uint32_t granule;  // units per granule
	uint32_t granules; // how many the job takes
	uint32_t of;	   // how many the device has (at most 64)
};

// The ask for a job of `members` on a device of `units` (0: 4096) Seg
// units: `want` of them, or with want 0 as many as the device's default
// window of 64 blocks from every other member needs, 128 to 512 (fewer
// would slow the ring down).
SegAsk seg_ask(uint32_t units, uint32_t want, int members);

// The granules the job takes, as a mask: the lowest run of ask.granules
// set in avail (the members' free masks ANDed), or 0 when there is none.
uint64_t seg_pick(const SegAsk &ask, uint64_t avail);

// The job's unit count and first unit: its range, split in `ways` equal
// parts (leads of several nodes that share a device), part `idx`.
inline uint32_t seg_count(const SegAsk &ask, uint32_t ways)
{
	const uint32_t count = ask.granules * ask.granule / ways;
	return count ? count : 1;
}
inline uint32_t seg_base(const SegAsk &ask, uint64_t range, uint32_t ways, uint32_t idx)
{
	return uint32_t(__builtin_ctzll(range)) * ask.granule + idx * seg_count(ask, ways);
}

} // namespace ibv_coll::addon
