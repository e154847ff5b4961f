// Private to the switch's source files: unit states and child order.
#pragma once

#include <bit>
#include <cstdint>

namespace ibv_coll::emu::swimpl {

// Unit states, kept in SegUnit::kind.
constexpr uint8_t kUnitCollecting = 1; // partials coming in
constexpr uint8_t kUnitUp = 2;	       // our partial went to the parent
constexpr uint8_t kUnitDone = 3;       // holds the result (the shadow copy)

// A child's place in the fold order: its lowest node.
inline int lowest(uint64_t m)
{
	return m ? std::countr_zero(m) : 64;
}

} // namespace ibv_coll::emu::swimpl
