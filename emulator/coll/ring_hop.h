// The ring's wire helpers, shared by the ring (ring.cc) and its loss
// recovery (ring_loss.cc): neighbours, the hop a block carries, whose data
// a partial holds.
#pragma once

#include "coll/coll_engine.h"

namespace ibv_coll::emu::ring {

using wire::Ceth;

inline uint16_t next_node(const JobConfig &c)
{
	return uint16_t((c.node + 1) % c.nodes());
}

inline uint16_t prev_node(const JobConfig &c)
{
	return uint16_t((c.node + c.nodes() - 1) % c.nodes());
}

// The nodes o, o+1, ..., o+h-1 (mod N) as the CETH's node bitmap; a
// ring of more than 64 nodes sends none (0): the hop and the chunk's
// origin say the same.
inline uint64_t ring_bits(uint16_t o, uint32_t h, uint16_t n)
{
	if (n > kMaxSwitchNodes)
		return 0;
	uint64_t b = 0;
	for (uint32_t i = 0; i < h; i++)
		b |= 1ull << ((o + i) % n);
	return b;
}

// A ring block's hop on the wire (ibv_coll_wire(7)): in the CETH's phase,
// and beyond 255 whole in seq as well (phase then has it modulo 256; seq
// is 0 below).  A packet where the two disagree has no hop (0), which
// every check refuses.
inline void set_hop(Ceth &h, uint32_t hop)
{
	h.phase = uint8_t(hop);
	h.seq = hop > 0xff ? hop : 0;
}

inline uint32_t hop_of(const Ceth &h)
{
	if (!h.seq)
		return h.phase;
	return h.seq > 0xff && uint8_t(h.seq) == h.phase ? h.seq : 0;
}

// CETH status bits on a ring DATA or RESULT (per-hop repair,
// ring_loss.cc).  kStatusHopRepair: it answers a per-hop NAK, and a node
// that already has the block does not pass it on (the nodes after it ask
// their own predecessor), where it passes on an end-to-end repeat, which
// must reach whoever lacks it.  kStatusLinkSeq: seg is its number on the
// link from its sender to the next node.
inline constexpr uint8_t kStatusHopRepair = 1, kStatusLinkSeq = 2;

// RingMsg::link_got: a number that came (or was given up on); 0 one
// missing, 2 and up one NAKed again that many times less one.
inline constexpr uint8_t kLinkCame = 1, kLinkTries = 6;

// The bit a Seg unit on the ring waits for: the partial from upstream
// (its sender is always the predecessor).
inline constexpr uint64_t kUpstream = 1;

// The endpoints' part of the round trip a result ends (acked()), or not
// known when it is no round trip's: a result sent again by its finisher's
// timer answers a block sent long before.
inline Holding sample_of(const CollPacket &p, uint64_t now)
{
	return p.h.flags & wire::kCethRetrans ? Holding::unknown() : p.holding(now);
}

inline uint64_t all_nodes(uint16_t n)
{
	return ring_bits(0, n, n);
}

inline uint64_t rank_mask(uint16_t k)
{
	return k >= 64 ? ~0ull : (1ull << k) - 1;
}


} // namespace ibv_coll::emu::ring
