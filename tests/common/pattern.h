// Test data: a deterministic byte pattern that the checking side
// regenerates on its own, so a transfer is verified against an
// independent reference and not against the code that moved it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ibvc_test {

inline uint8_t pattern_byte(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^
		     (i + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
	x ^= x >> 31;
	x *= 0x94d049bb133111ebull;
	return uint8_t(x >> 56);
}

inline void fill_pattern(void *buf, size_t len, uint64_t seed)
{
	auto *p = static_cast<uint8_t *>(buf);
	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, i);
}

// Offset of the first byte that differs, or SIZE_MAX.
inline size_t check_pattern(const void *buf, size_t len, uint64_t seed)
{
	auto *p = static_cast<const uint8_t *>(buf);
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, i))
			return i;
	return SIZE_MAX;
}

} // namespace ibvc_test
