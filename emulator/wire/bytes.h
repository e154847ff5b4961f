// Big-endian loads and stores for header fields at any alignment.
#pragma once

#include <cstdint>
#include <cstring>

namespace ibv_coll::emu::wire {

inline uint16_t load_be16(const uint8_t *p)
{
	return uint16_t(p[0] << 8 | p[1]);
}
inline uint32_t load_be24(const uint8_t *p)
{
	return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
}
inline uint32_t load_be32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return __builtin_bswap32(v);
}
inline uint64_t load_be64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}
inline void store_be16(uint8_t *p, uint16_t v)
{
	p[0] = uint8_t(v >> 8);
	p[1] = uint8_t(v);
}
inline void store_be24(uint8_t *p, uint32_t v)
{
	p[0] = uint8_t(v >> 16);
	p[1] = uint8_t(v >> 8);
	p[2] = uint8_t(v);
}
inline void store_be32(uint8_t *p, uint32_t v)
{
	v = __builtin_bswap32(v);
	memcpy(p, &v, 4);
}
inline void store_be64(uint8_t *p, uint64_t v)
{
	v = __builtin_bswap64(v);
	memcpy(p, &v, 8);
}

} // namespace ibv_coll::emu::wire
