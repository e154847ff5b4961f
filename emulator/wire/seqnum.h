// Serial-number arithmetic (RFC 1982) on the 32-bit numbers of the
// collective protocol: message IDs, the switch path's block numbers and job
// incarnations.  They wrap, so "later" is defined on a circle: a follows b
// when it is 1 to 2^31 - 1 ahead of it modulo 2^32.  Every comparison of
// two of them, in the NIC, the ring and the switch, goes through here, and
// the provider refuses an explicit MID that would not follow the last one
// (ibv_post_coll_send(3)), so every sequence the API accepts is ordered
// alike everywhere.
#pragma once

#include <cstdint>

namespace ibv_coll::emu {

// a comes after b.  Exactly 2^31 apart: neither comes after the other.
constexpr bool seq_after(uint32_t a, uint32_t b)
{
	return int32_t(a - b) > 0;
}

// The automatic MID after m.  0 is no message's: in a WR it asks for the
// next one, in the engine it means "none yet".
constexpr uint32_t next_mid(uint32_t m)
{
	return m == UINT32_MAX ? 1 : m + 1;
}

} // namespace ibv_coll::emu
