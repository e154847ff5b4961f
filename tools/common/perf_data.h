/*
 * perf_data - what ibv_coll_perf and bench/mpi_allreduce_perf put in their
 * buffers, and the results they expect, computed by plain scalar loops so
 * that a check never trusts the code it checks.
 *
 * Global rank g's element i is a small integer function of (g, i), chosen
 * per operation so that every partial result is exact in every type:
 * sums of K values of at most R in magnitude, with K * R within the type's
 * exact integers (2048 for half, 256 for bfloat16); products of 1, -1 and
 * one 2.  Integer types wrap, and the expected value wraps the same way, so
 * the order in which an implementation reduces never matters.
 *
 * Plain C11, header only: bench/mpi_allreduce_perf.c includes it too
 * (CMake target ibvc_perf_data), and both parse sizes with pd_parse_size.
 */
#ifndef IBVC_PERF_DATA_H
#define IBVC_PERF_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A size in bytes with an optional K, M or G (powers of 1024) and an
 * optional B, as nccl-tests takes it ("32M", "1.5K", "8B"): 0, or -1 for
 * anything else, a negative value or more than 10^15. */
static inline int pd_parse_size(const char *s, size_t *out)
{
	char *end;
	double v = strtod(s, &end), unit = 1;
	switch (*end) {
	case 'k':
	case 'K':
		unit = 1024.0;
		end++;
		break;
	case 'm':
	case 'M':
		unit = 1024.0 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		unit = 1024.0 * 1024 * 1024;
		end++;
		break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (end == s || *end || !(v >= 0) || v * unit > 1e15)
		return -1;
	*out = (size_t)(v * unit);
	return 0;
}

/* The values of enum ibv_coll_dtype and enum ibv_coll_op (ibv_coll_perf
 * checks that they match). */
enum pd_type {
	PD_INT8,
	PD_INT16,
	PD_INT32,
	PD_INT64,
	PD_UINT8,
	PD_UINT16,
	PD_UINT32,
	PD_UINT64,
	PD_HALF,
	PD_BF16,
	PD_FLOAT,
	PD_DOUBLE,
	/* value-index pairs, as MPI_FLOAT_INT ... MPI_SHORT_INT lay them out:
	 * the value, then a 32-bit index (for MAXLOC and MINLOC) */
	PD_FLOAT_INT,
	PD_DOUBLE_INT,
	PD_LONG_INT,
	PD_2INT,
	PD_SHORT_INT,
	PD_NTYPES
};

/* The bitwise and logical operations (integer types only) come last. */
enum pd_op {
	PD_SUM,
	PD_PROD,
	PD_MIN,
	PD_MAX,
	PD_AVG,
	PD_BAND,
	PD_BOR,
	PD_BXOR,
	PD_LAND,
	PD_LOR,
	PD_LXOR,
	PD_MAXLOC, /* value-index pairs only: the largest value, and its index */
	PD_MINLOC, /* ties: the lower index, as MPI defines */
	PD_NOPS
};

struct pd_type_info {
	const char *name;  /* as nccl-tests prints it */
	const char *alias; /* another name accepted */
	unsigned size;
	unsigned is_float, is_signed;
	int64_t exact;	  /* floats: integers up to this are exact */
	int val;	  /* pairs: the value's type; else the type itself */
	unsigned idx_off; /* pairs: the index's offset in the element */
};

static const struct pd_type_info pd_types[PD_NTYPES] = {
	{"int8", "char", 1, 0, 1, 0, PD_INT8, 0},
	{"int16", "short", 2, 0, 1, 0, PD_INT16, 0},
	{"int32", "int", 4, 0, 1, 0, PD_INT32, 0},
	{"int64", "long", 8, 0, 1, 0, PD_INT64, 0},
	{"uint8", "uchar", 1, 0, 0, 0, PD_UINT8, 0},
	{"uint16", "ushort", 2, 0, 0, 0, PD_UINT16, 0},
	{"uint32", "uint", 4, 0, 0, 0, PD_UINT32, 0},
	{"uint64", "ulong", 8, 0, 0, 0, PD_UINT64, 0},
	{"half", "float16", 2, 1, 1, 2048, PD_HALF, 0},
	{"bfloat16", "bf16", 2, 1, 1, 256, PD_BF16, 0},
	{"float", "float32", 4, 1, 1, 1L << 24, PD_FLOAT, 0},
	{"double", "float64", 8, 1, 1, 1LL << 53, PD_DOUBLE, 0},
	{"float_int", "float32_int32", 8, 1, 1, 1L << 24, PD_FLOAT, 4},
	{"double_int", "float64_int32", 16, 1, 1, 1LL << 53, PD_DOUBLE, 8},
	{"long_int", "int64_int32", 16, 0, 1, 0, PD_INT64, 8},
	{"2int", "int32_int32", 8, 0, 1, 0, PD_INT32, 4},
	{"short_int", "int16_int32", 8, 0, 1, 0, PD_INT16, 4},
};

static inline int pd_is_pair(int t)
{
	return t >= PD_FLOAT_INT;
}

static const char *const pd_op_names[PD_NOPS] = {"sum",	 "prod",   "min",   "max",  "avg",
						 "band", "bor",	   "bxor",  "land", "lor",
						 "lxor", "maxloc", "minloc"};

static inline int pd_type_by_name(const char *s)
{
	for (int t = 0; t < PD_NTYPES; t++)
		if (!strcmp(s, pd_types[t].name) || !strcmp(s, pd_types[t].alias))
			return t;
	return -1;
}

static inline int pd_op_by_name(const char *s)
{
	for (int o = 0; o < PD_NOPS; o++)
		if (!strcmp(s, pd_op_names[o]))
			return o;
	return -1;
}

/* One element's value: integers in i (sign-extended or zero-extended to 64
 * bits as the type says), floating-point values in f; a pair's index in
 * idx. */
struct pd_val {
	uint64_t i;
	double f;
	int64_t idx;
};

static inline uint64_t pd_mix(uint64_t g, uint64_t i)
{
	uint64_t z = g * 0x9e3779b97f4a7c15ull + i * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull;
	z ^= z >> 31;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 29;
	return z;
}

/* Wrap x to the type's width, as the type would hold it. */
static inline uint64_t pd_wrap(int t, uint64_t x)
{
	unsigned bits = pd_types[t].size * 8;
	if (bits == 64)
		return x;
	uint64_t m = (1ull << bits) - 1;
	x &= m;
	if (pd_types[t].is_signed && (x >> (bits - 1)) & 1)
		x |= ~m;
	return x;
}

/* The magnitude bound of summed inputs for K ranks. */
static inline int64_t pd_range(int t, uint32_t K)
{
	int64_t r = pd_types[t].size == 1 ? 100 : 1000;
	if (pd_types[t].is_float && pd_types[t].exact / (int64_t)K < r)
		r = pd_types[t].exact / (int64_t)K;
	return r < 1 ? 1 : r;
}

/* Global rank g's element i, for operation op in a job of K ranks. */
static inline struct pd_val pd_input(int t, int op, uint32_t K, uint64_t g, uint64_t i)
{
	uint64_t h = pd_mix(g, i);
	int64_t v;
	if (pd_is_pair(t)) {
		/* Values from -3 to 3, so that ranks tie often; the index is
		 * the rank, as MPI programs pass it. */
		v = (int64_t)(h % 7) - 3;
		struct pd_val out = {pd_wrap(pd_types[t].val, (uint64_t)v), (double)v, (int64_t)g};
		return out;
	}
	switch (op) {
	case PD_PROD: v = g == i % K ? 2 : h % 5 == 0 ? -1 : 1; break;
	case PD_BAND: /* each rank clears one bit, or two */
		v = (int64_t) ~((1ull << (h & 63)) | (1ull << ((h >> 8) % 61)));
		break;
	case PD_BOR: v = (int64_t)((1ull << (h & 63)) | (1ull << ((h >> 8) % 61))); break;
	case PD_BXOR: v = (int64_t)(h >> 1); break;
	case PD_LAND: /* false at one rank in 8, at 7 in 8 for LOR: both results come */
	case PD_LOR:
	case PD_LXOR:
		if ((h & 7) < (op == PD_LAND ? 1u : op == PD_LOR ? 7u : 4u))
			v = 0;
		else /* true: a value from -100 to 100 but 0, or a high bit alone */
			v = (h >> 3) % 16 == 0
				    ? (int64_t)(1ull << (pd_types[t].size * 8 - 1))
				    : (int64_t)((h >> 8) % 100 + 1) * ((h >> 16) & 1 ? -1 : 1);
		break;
	default: { /* SUM, AVG, MIN, MAX, and the copies */
		int64_t r = pd_range(t, K);
		v = (int64_t)(h % (uint64_t)(2 * r + 1)) - r;
	}
	}
	struct pd_val out = {pd_wrap(t, (uint64_t)v), (double)v, 0};
	return out;
}

/* Compare as the type does: signed, unsigned or floating point. */
static inline int pd_less(int t, struct pd_val a, struct pd_val b)
{
	if (pd_types[t].is_float)
		return a.f < b.f;
	if (pd_types[t].is_signed)
		return (int64_t)a.i < (int64_t)b.i;
	return a.i < b.i;
}

/* The reduction over all K ranks of element i. */
static inline struct pd_val pd_expect(int t, int op, uint32_t K, uint64_t i)
{
	if (op == PD_MAXLOC || op == PD_MINLOC) { /* ranks in order: a tie keeps the first */
		int vt = pd_types[t].val;
		struct pd_val acc = pd_input(t, op, K, 0, i);
		for (uint32_t q = 1; q < K; q++) {
			struct pd_val x = pd_input(t, op, K, q, i);
			if (op == PD_MAXLOC ? pd_less(vt, acc, x) : pd_less(vt, x, acc))
				acc = x;
		}
		return acc;
	}
	if (op >= PD_LAND) { /* 1 or 0, from each value's truth */
		uint32_t n = 0;
		for (uint32_t q = 0; q < K; q++)
			n += pd_input(t, op, K, q, i).i != 0;
		int r = op == PD_LAND ? n == K : op == PD_LOR ? n > 0 : (int)(n & 1);
		struct pd_val b = {(uint64_t)r, (double)r, 0};
		return b;
	}
	struct pd_val acc = pd_input(t, op, K, 0, i);
	for (uint32_t q = 1; q < K; q++) {
		struct pd_val x = pd_input(t, op, K, q, i);
		switch (op) {
		case PD_SUM:
		case PD_AVG:
			acc.i += x.i;
			acc.f += x.f;
			break;
		case PD_PROD:
			acc.i *= x.i;
			acc.f *= x.f;
			break;
		case PD_MIN:
			if (pd_less(t, x, acc))
				acc = x;
			break;
		case PD_MAX:
			if (pd_less(t, acc, x))
				acc = x;
			break;
		case PD_BAND: acc.i &= x.i; break;
		case PD_BOR: acc.i |= x.i; break;
		case PD_BXOR: acc.i ^= x.i; break;
		}
		acc.i = pd_wrap(t, acc.i);
	}
	if (op == PD_AVG) {
		/* Integers: C's truncating division of the wrapped sum.
		 * Floats: the exact sum divided once; rounding to the type
		 * happens when the value is encoded (see pd_encode). */
		if (pd_types[t].is_signed)
			acc.i = pd_wrap(t, (uint64_t)((int64_t)acc.i / (int64_t)K));
		else
			acc.i = acc.i / K;
		acc.f /= (double)K;
	}
	return acc;
}

/* IEEE binary16 from float, rounding to nearest even. */
static inline uint16_t pd_float_to_half(float f)
{
	uint32_t x, sign, ax;
	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	ax = x & 0x7fffffff;
	if (ax >= 0x7f800000) /* infinity, NaN */
		return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
	if (ax >= 0x477ff000) /* 65520 and up round to infinity */
		return (uint16_t)(sign | 0x7c00);
	if (ax <= 0x33000000) /* 2^-25 and below round to zero */
		return (uint16_t)sign;
	if (ax < 0x38800000) { /* a subnormal half: units of 2^-24 */
		uint32_t m = (ax & 0x7fffff) | 0x800000, shift = 126 - (ax >> 23);
		uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

static inline float pd_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
	float f;
	if (e == 0x1f)
		x = sign | 0x7f800000 | (m << 13);
	else if (e)
		x = sign | ((e + 112) << 23) | (m << 13);
	else {
		f = (float)m * 0x1p-24f; /* zero or subnormal: exact */
		return sign ? -f : f;
	}
	memcpy(&f, &x, 4);
	return f;
}

static inline uint16_t pd_float_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((x >> 16) | 0x40); /* a quiet NaN */
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static inline float pd_bf16_to_float(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* Store v as element idx of buf.  Doubles round to float first: for the
 * exact values here, and for one division, that equals rounding once
 * (53 >= 2 * 24 + 2 and 24 >= 2 * 11 + 2 bits). */
static inline void pd_store(int t, void *buf, size_t idx, struct pd_val v)
{
	char *p = (char *)buf + idx * pd_types[t].size;
	if (pd_is_pair(t)) { /* the value, the padding zero, the index */
		int32_t x = (int32_t)v.idx;
		memset(p, 0, pd_types[t].size);
		pd_store(pd_types[t].val, p, 0, v);
		memcpy(p + pd_types[t].idx_off, &x, 4);
		return;
	}
	float f = (float)v.f;
	uint16_t h;
	switch (t) {
	case PD_HALF:
		h = pd_float_to_half(f);
		memcpy(p, &h, 2);
		break;
	case PD_BF16:
		h = pd_float_to_bf16(f);
		memcpy(p, &h, 2);
		break;
	case PD_FLOAT: memcpy(p, &f, 4); break;
	case PD_DOUBLE: memcpy(p, &v.f, 8); break;
	default: {
		/* little- or big-endian: copy the low bytes of the integer */
		uint8_t b1 = (uint8_t)v.i;
		uint16_t b2 = (uint16_t)v.i;
		uint32_t b4 = (uint32_t)v.i;
		switch (pd_types[t].size) {
		case 1: memcpy(p, &b1, 1); break;
		case 2: memcpy(p, &b2, 2); break;
		case 4: memcpy(p, &b4, 4); break;
		default: memcpy(p, &v.i, 8); break;
		}
	}
	}
}

/* Element idx of buf as a value. */
static inline struct pd_val pd_load(int t, const void *buf, size_t idx)
{
	const char *p = (const char *)buf + idx * pd_types[t].size;
	struct pd_val v = {0, 0, 0};
	if (pd_is_pair(t)) {
		int32_t x;
		v = pd_load(pd_types[t].val, p, 0);
		memcpy(&x, p + pd_types[t].idx_off, 4);
		v.idx = x;
		return v;
	}
	uint8_t b1;
	uint16_t b2;
	uint32_t b4;
	float f;
	switch (t) {
	case PD_HALF:
		memcpy(&b2, p, 2);
		v.f = pd_half_to_float(b2);
		break;
	case PD_BF16:
		memcpy(&b2, p, 2);
		v.f = pd_bf16_to_float(b2);
		break;
	case PD_FLOAT:
		memcpy(&f, p, 4);
		v.f = f;
		break;
	case PD_DOUBLE: memcpy(&v.f, p, 8); break;
	default:
		switch (pd_types[t].size) {
		case 1:
			memcpy(&b1, p, 1);
			v.i = b1;
			break;
		case 2:
			memcpy(&b2, p, 2);
			v.i = b2;
			break;
		case 4:
			memcpy(&b4, p, 4);
			v.i = b4;
			break;
		default: memcpy(&v.i, p, 8); break;
		}
		v.i = pd_wrap(t, v.i);
	}
	return v;
}

/* Does element idx of buf hold exactly v (v rounded to the type)? */
static inline int pd_matches(int t, const void *buf, size_t idx, struct pd_val v)
{
	if (pd_is_pair(t)) /* the value and the index; the padding may be anything */
		return pd_matches(pd_types[t].val, (const char *)buf + idx * pd_types[t].size, 0,
				  v) &&
		       pd_load(t, buf, idx).idx == v.idx;
	struct pd_val got = pd_load(t, buf, idx);
	if (!pd_types[t].is_float)
		return got.i == v.i;
	char tmp[8];
	pd_store(t, tmp, 0, v);
	return memcmp(tmp, (const char *)buf + idx * pd_types[t].size, pd_types[t].size) == 0 ||
	       got.f == pd_load(t, tmp, 0).f;
}

#endif /* IBVC_PERF_DATA_H */
