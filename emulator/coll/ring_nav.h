// Where a ring block goes and how far it has come (coll/ring*.cc): the
// next and previous member NIC, a block's hop on the wire, and what its
// Seg unit waits for.
#pragma once

#include "coll/coll_job.h"
#include "wire/ceth.h"

#include <cstdint>

namespace ibv_coll::emu {

inline uint16_t next_node(const JobConfig &c)
{
	return uint16_t((c.node + 1) % c.nodes());
}

inline uint16_t prev_node(const JobConfig &c)
{
	return uint16_t((c.node + c.nodes() - 1) % c.nodes());
}

// A ring block's hop on the wire (ibv_coll_wire(7)): in the CETH's phase,
// and beyond 255 whole in seq as well (phase then has it modulo 256; seq
// is 0 below).  A packet where the two disagree has no hop (0), which
// every check refuses.
inline void set_hop(wire::Ceth &h, uint32_t hop)
{
	h.phase = uint8_t(hop);
	h.seq = hop > 0xff ? hop : 0;
}

inline uint32_t hop_of(const wire::Ceth &h)
{
	if (!h.seq)
		return h.phase;
	return h.seq > 0xff && uint8_t(h.seq) == h.phase ? h.seq : 0;
}

// The bit a Seg unit on the ring waits for: the partial from upstream
// (its sender is always the predecessor).
inline constexpr uint64_t kUpstream = 1;

} // namespace ibv_coll::emu
