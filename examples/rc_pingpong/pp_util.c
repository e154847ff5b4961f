/* ibv_coll_rc_pingpong: small helpers and the check pattern. */
#define _XOPEN_SOURCE 700

#include "pingpong.h"
/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */


void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Milliseconds left until deadline, at least 0, at most INT_MAX. */
int ms_left(int64_t deadline)
{
	int64_t left = deadline - now_ns();

	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 0);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

enum ibv_mtu mtu_to_enum(unsigned int bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	default: return (enum ibv_mtu)0;
	}
}

unsigned int mtu_from_enum(enum ibv_mtu m)
{
	if (m < IBV_MTU_256 || m > IBV_MTU_4096)
		return 0;
	return 128u << m;
}

int gid_is_v4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

void gid_to_str(const union ibv_gid *gid, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, gid->raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* ------------------------------------------------------------------ */
/* The check pattern (-c)                                              */
/* ------------------------------------------------------------------ */

/* One 64-bit word of message `seed`: a mixing function of the seed and
 * the word's index, so that every message and every offset differ. */
uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	uint64_t z = seed * 0x100000001b3ull + (index + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Message number n sent by the client (1) or the server (0). */
uint64_t pattern_seed(int n, int from_client)
{
	return ((uint64_t)(unsigned int)n << 1) | (from_client ? 1u : 0u);
}

void pattern_fill(uint8_t *buf, size_t len, uint64_t seed)
{
	size_t words = len / 8, i;

	for (i = 0; i < words; i++) {
		uint64_t w = pattern_word(seed, i);

		memcpy(buf + i * 8, &w, 8);
	}
	if (len % 8) {
		uint64_t w = pattern_word(seed, words);

		memcpy(buf + words * 8, &w, len % 8);
	}
}

/* Offset of the first byte that differs from the pattern, or len. */
size_t pattern_check(const uint8_t *buf, size_t len, uint64_t seed)
{
	for (size_t off = 0; off < len; off += 8) {
		uint64_t w = pattern_word(seed, off / 8);
		size_t n = len - off < 8 ? len - off : 8;
		uint8_t want[8];

		memcpy(want, &w, 8);
		if (memcmp(buf + off, want, n) != 0) {
			for (size_t k = 0; k < n; k++)
				if (buf[off + k] != want[k])
					return off + k;
		}
	}
	return len;
}
