// Tests for emulator/reduce: every (op, dtype) on every ISA path against a scalar reference written here from
// the IEEE 754 / C definitions. The reference deliberately shares no code with the implementation: fp16/bf16 are
// encoded and decoded with double arithmetic (ldexp/nearbyint) instead of bit manipulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reduce/reduce.h"
#include "reduce/reduce_detail.h"

namespace {

using namespace ibv_coll::emu;

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512};
constexpr size_t kCounts[] = {0,  1,  2,  3,  7,   15,	16,  17,   31,
			      33, 63, 64, 65, 127, 129, 255, 1000, 4097};

Dtype dtype_at(unsigned i)
{
	return static_cast<Dtype>(i);
}
RedOp redop_at(unsigned i)
{
	return static_cast<RedOp>(i);
}

bool is_integer(Dtype d)
{
	return static_cast<unsigned>(d) <= static_cast<unsigned>(Dtype::uint64);
}
bool is_bitwise(RedOp op)
{
	return op == RedOp::band || op == RedOp::bor || op == RedOp::bxor;
}
bool is_logical(RedOp op)
{
	return op == RedOp::land || op == RedOp::lor || op == RedOp::lxor;
}
bool is_loc(RedOp op)
{
	return op == RedOp::maxloc || op == RedOp::minloc;
}
bool is_pair(Dtype d)
{
	return static_cast<unsigned>(d) >= 12 && static_cast<unsigned>(d) <= 16;
}
// The numeric types (avg_finalize's, and sum's).
std::vector<Dtype> numeric_dtypes()
{
	std::vector<Dtype> v;
	for (unsigned i = 0; i < 12; ++i)
		v.push_back(static_cast<Dtype>(i));
	return v;
}

Isa best_isa()
{
	if (isa_available(Isa::avx512))
		return Isa::avx512;
	if (isa_available(Isa::avx2))
		return Isa::avx2;
	return Isa::scalar;
}

// Selects an ISA for the duration of a test and restores the previous one.
class ScopedIsa {
public:
	explicit ScopedIsa(Isa isa) : saved_(reduce_isa()) { set_reduce_isa(isa); }
	~ScopedIsa() { set_reduce_isa(saved_); }
	ScopedIsa(const ScopedIsa &) = delete;
	ScopedIsa &operator=(const ScopedIsa &) = delete;

private:
	Isa saved_;
};

#define SKIP_IF_ISA_UNAVAILABLE(isa)                                                    \
	do {                                                                            \
		if (!isa_available(isa))                                                \
			GTEST_SKIP() << isa_name(isa)                                   \
				     << " not available on this CPU (path NOT tested)"; \
	} while (0)

// ---------------------------------------------------------------------------------------------------------------
// Independent reference
// ---------------------------------------------------------------------------------------------------------------

// Small binary float format: p significand bits (incl. implicit), exponent bias emax, ebits exponent bits.
struct SmallFormat {
	int p, emax, ebits;
};
constexpr SmallFormat kHalf{11, 15, 5};
constexpr SmallFormat kBf16{8, 127, 8};

float ref_decode(SmallFormat f, uint16_t h)
{
	const bool neg = (h >> 15) != 0;
	const int e = (h >> (f.p - 1)) & ((1 << f.ebits) - 1);
	const int m = h & ((1 << (f.p - 1)) - 1);
	double v;
	if (e == (1 << f.ebits) - 1)
		v = m != 0 ? std::numeric_limits<double>::quiet_NaN()
			   : std::numeric_limits<double>::infinity();
	else if (e == 0)
		v = std::ldexp(m, 1 - f.emax - (f.p - 1));
	else
		v = std::ldexp(m + (1 << (f.p - 1)), e - f.emax - (f.p - 1));
	return static_cast<float>(neg ? -v : v);
}

// Round to nearest even by scaling to an integer multiple of the format's quantum at that magnitude.
uint16_t ref_encode(SmallFormat f, float x)
{
	const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
	const uint16_t inf = static_cast<uint16_t>(((1 << f.ebits) - 1) << (f.p - 1));
	if (std::isnan(x))
		return static_cast<uint16_t>(sign | inf | (1 << (f.p - 2)));
	if (std::isinf(x))
		return sign | inf;
	const double a = std::fabs(static_cast<double>(x));
	const int emin = 1 - f.emax;
	const int e = a == 0 ? emin : std::max(std::ilogb(a), emin);
	const double quantum = std::ldexp(1.0, e - (f.p - 1));
	const double n = std::nearbyint(
		a / quantum); // exact scaling by a power of two; default mode is RNE
	const double r = n * quantum;
	if (r >= std::ldexp(1.0, f.emax + 1))
		return sign | inf;
	if (r <
	    std::ldexp(1.0, emin)) // denormal (or zero): the integer multiple is the mantissa field
		return static_cast<uint16_t>(sign | static_cast<uint16_t>(n));
	const int re = std::ilogb(r);
	const int mant = static_cast<int>(std::ldexp(r, (f.p - 1) - re)) - (1 << (f.p - 1));
	return static_cast<uint16_t>(sign | ((re + f.emax) << (f.p - 1)) | mant);
}

bool small_is_nan(SmallFormat f, uint16_t h)
{
	return (h & 0x7FFF) > static_cast<uint16_t>(((1 << f.ebits) - 1) << (f.p - 1));
}

template <class T> T ref_int(RedOp op, T a, T b)
{
	// Conversions to/from uint64_t are modular (C++20), which is exactly the wrap-around contract.
	switch (op) {
	case RedOp::sum:
	case RedOp::avg: return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
	case RedOp::prod:
		return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
	case RedOp::min: return std::min(a, b);
	case RedOp::max: return std::max(a, b);
	case RedOp::band: return static_cast<T>(a & b);
	case RedOp::bor: return static_cast<T>(a | b);
	case RedOp::bxor: return static_cast<T>(a ^ b);
	case RedOp::land: return (a && b) ? 1 : 0;
	case RedOp::lor: return (a || b) ? 1 : 0;
	case RedOp::lxor: return (!a != !b) ? 1 : 0;
	default: break;
	}
	ADD_FAILURE() << "bad op";
	return 0;
}

template <class F> F ref_float(RedOp op, F a, F b)
{
	switch (op) {
	case RedOp::sum:
	case RedOp::avg: return a + b;
	case RedOp::prod: return a * b;
	case RedOp::min:
	case RedOp::max: {
		if (std::isnan(a))
			return a;
		if (std::isnan(b))
			return b;
		const bool want_min = op == RedOp::min;
		if (a == b) {
			if (std::signbit(a) == std::signbit(b))
				return a;
			// -0 vs +0: min takes the negative one, max the positive one.
			return std::signbit(a) == want_min ? a : b;
		}
		return want_min ? (a < b ? a : b) : (a > b ? a : b);
	}
	default: ADD_FAILURE() << "bad float op"; return a;
	}
}

template <class T> T load_at(const void *p, size_t i)
{
	T v;
	std::memcpy(&v, static_cast<const unsigned char *>(p) + i * sizeof(T), sizeof(T));
	return v;
}
template <class T> void store_at(void *p, size_t i, T v)
{
	std::memcpy(static_cast<unsigned char *>(p) + i * sizeof(T), &v, sizeof(T));
}

template <class T> void ref_int_loop(RedOp op, void *out, const void *a, const void *b, size_t n)
{
	for (size_t i = 0; i < n; ++i)
		store_at<T>(out, i, ref_int<T>(op, load_at<T>(a, i), load_at<T>(b, i)));
}
template <class F> void ref_float_loop(RedOp op, void *out, const void *a, const void *b, size_t n)
{
	for (size_t i = 0; i < n; ++i)
		store_at<F>(out, i, ref_float<F>(op, load_at<F>(a, i), load_at<F>(b, i)));
}
void ref_small_loop(SmallFormat f, RedOp op, void *out, const void *a, const void *b, size_t n)
{
	for (size_t i = 0; i < n; ++i) {
		const float x = ref_decode(f, load_at<uint16_t>(a, i));
		const float y = ref_decode(f, load_at<uint16_t>(b, i));
		store_at<uint16_t>(out, i, ref_encode(f, ref_float<float>(op, x, y)));
	}
}

// maxloc/minloc on the C struct { V value; int32_t index; }: written as MPI states it (the larger/smaller value,
// the lower index on equal values), with the documented order on what MPI leaves open: NaN above every number in
// maxloc and below every number in minloc (NaN propagates), NaNs equal to each other, -0.0 below +0.0. The result
// is the winning struct with zero padding.
template <class V> void ref_loc_loop(RedOp op, void *out, const void *a, const void *b, size_t n)
{
	struct P {
		V v;
		int32_t k;
	};
	const bool want_max = op == RedOp::maxloc;
	for (size_t i = 0; i < n; ++i) {
		const P x = load_at<P>(a, i), y = load_at<P>(b, i);
		// rank: +1 when x's value is the better one, -1 when y's, 0 when they are equal.
		int rank;
		bool xn = false, yn = false;
		if constexpr (std::is_floating_point_v<V>) {
			xn = std::isnan(x.v);
			yn = std::isnan(y.v);
		}
		if (xn && yn)
			rank = 0;
		else if (xn)
			rank = 1;
		else if (yn)
			rank = -1;
		else if (x.v > y.v)
			rank = want_max ? 1 : -1;
		else if (x.v < y.v)
			rank = want_max ? -1 : 1;
		else if (std::signbit(static_cast<double>(x.v)) ==
			 std::signbit(static_cast<double>(y.v)))
			rank = 0;
		else // -0.0 against +0.0
			rank = std::signbit(static_cast<double>(x.v)) == want_max ? -1 : 1;
		const P &w = rank > 0 ? x : rank < 0 ? y : (y.k < x.k ? y : x);
		unsigned char bytes[sizeof(P)] = {};
		std::memcpy(bytes, &w.v, sizeof(V));
		std::memcpy(bytes + offsetof(P, k), &w.k, sizeof(int32_t));
		std::memcpy(static_cast<unsigned char *>(out) + i * sizeof(P), bytes, sizeof(P));
	}
}

// out[i] = op(a[i], b[i]) by the reference rules. out may alias a or b.
void ref_reduce(RedOp op, Dtype d, void *out, const void *a, const void *b, size_t n)
{
	switch (d) {
	case Dtype::int8: return ref_int_loop<int8_t>(op, out, a, b, n);
	case Dtype::int16: return ref_int_loop<int16_t>(op, out, a, b, n);
	case Dtype::int32: return ref_int_loop<int32_t>(op, out, a, b, n);
	case Dtype::int64: return ref_int_loop<int64_t>(op, out, a, b, n);
	case Dtype::uint8: return ref_int_loop<uint8_t>(op, out, a, b, n);
	case Dtype::uint16: return ref_int_loop<uint16_t>(op, out, a, b, n);
	case Dtype::uint32: return ref_int_loop<uint32_t>(op, out, a, b, n);
	case Dtype::uint64: return ref_int_loop<uint64_t>(op, out, a, b, n);
	case Dtype::float16: return ref_small_loop(kHalf, op, out, a, b, n);
	case Dtype::bfloat16: return ref_small_loop(kBf16, op, out, a, b, n);
	case Dtype::float32: return ref_float_loop<float>(op, out, a, b, n);
	case Dtype::float64: return ref_float_loop<double>(op, out, a, b, n);
	case Dtype::float32_int32: return ref_loc_loop<float>(op, out, a, b, n);
	case Dtype::float64_int32: return ref_loc_loop<double>(op, out, a, b, n);
	case Dtype::int64_int32: return ref_loc_loop<int64_t>(op, out, a, b, n);
	case Dtype::int32_int32: return ref_loc_loop<int32_t>(op, out, a, b, n);
	case Dtype::int16_int32: return ref_loc_loop<int16_t>(op, out, a, b, n);
	}
}

// Elements match if bit-identical, or if both are NaN (NaN payloads are not part of the contract).
bool element_matches(Dtype d, const void *x, const void *y, size_t i)
{
	switch (d) {
	case Dtype::float16: {
		const uint16_t p = load_at<uint16_t>(x, i), q = load_at<uint16_t>(y, i);
		return p == q || (small_is_nan(kHalf, p) && small_is_nan(kHalf, q));
	}
	case Dtype::bfloat16: {
		const uint16_t p = load_at<uint16_t>(x, i), q = load_at<uint16_t>(y, i);
		return p == q || (small_is_nan(kBf16, p) && small_is_nan(kBf16, q));
	}
	case Dtype::float32: {
		const float p = load_at<float>(x, i), q = load_at<float>(y, i);
		return std::memcmp(&p, &q, sizeof p) == 0 || (std::isnan(p) && std::isnan(q));
	}
	case Dtype::float64: {
		const double p = load_at<double>(x, i), q = load_at<double>(y, i);
		return std::memcmp(&p, &q, sizeof p) == 0 || (std::isnan(p) && std::isnan(q));
	}
	default: {
		const size_t s = dtype_size(d);
		return std::memcmp(static_cast<const unsigned char *>(x) + i * s,
				   static_cast<const unsigned char *>(y) + i * s, s) == 0;
	}
	}
}

std::string hex_element(Dtype d, const void *p, size_t i)
{
	const size_t s = dtype_size(d);
	const auto *e = static_cast<const unsigned char *>(p) + i * s;
	std::string out = "0x";
	char buf[4];
	for (size_t j = s; j-- > 0;) { // little-endian: the last byte first
		std::snprintf(buf, sizeof buf, "%02x", e[j]);
		out += buf;
	}
	return out;
}

// Compares n elements; reports the first few mismatches with operands.
::testing::AssertionResult matches_reference(Dtype d, const void *got, const void *want,
					     const void *a, const void *b, size_t n)
{
	size_t bad = 0;
	std::string msg;
	for (size_t i = 0; i < n; ++i) {
		if (element_matches(d, got, want, i))
			continue;
		if (++bad <= 5)
			msg += "\n  [" + std::to_string(i) + "] a=" + hex_element(d, a, i) +
			       " b=" + hex_element(d, b, i) + " got=" + hex_element(d, got, i) +
			       " want=" + hex_element(d, want, i);
	}
	if (bad == 0)
		return ::testing::AssertionSuccess();
	return ::testing::AssertionFailure()
	       << bad << " of " << n << " elements differ (" << dtype_name(d) << ")" << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// Buffers and inputs
// ---------------------------------------------------------------------------------------------------------------

// 64-byte aligned byte buffer, so element offsets give controlled misalignment relative to vector width.
class Buffer {
public:
	explicit Buffer(size_t bytes)
		: size_(bytes),
		  p_(static_cast<unsigned char *>(std::aligned_alloc(64, round_up(bytes))))
	{
		if (!p_)
			throw std::bad_alloc();
	}
	unsigned char *data() { return p_.get(); }
	const unsigned char *data() const { return p_.get(); }
	size_t size() const { return size_; }

private:
	static size_t round_up(size_t n)
	{
		return (n + 64) / 64 * 64;
	} // never 0, a multiple of the alignment
	struct Free {
		void operator()(unsigned char *p) const { std::free(p); }
	};
	size_t size_;
	std::unique_ptr<unsigned char, Free> p_;
};

// Mix of arbitrary bit patterns (NaN, Inf, denormals, ...) and tame values whose sums/products stay finite and
// exercise rounding.
void fill_random(Dtype d, void *dst, size_t n, std::mt19937_64 &rng);

// Pairs: values drawn often from a few (ties, NaN, -0/+0) and otherwise at random; indices from a few (so
// equal values meet equal and unequal indices) or at random. Padding bytes random too: they must not matter.
void fill_random_pairs(Dtype d, void *dst, size_t n, std::mt19937_64 &rng)
{
	static const Dtype value_type[] = {Dtype::float32, Dtype::float64, Dtype::int64,
					   Dtype::int32, Dtype::int16};
	const Dtype vd = value_type[static_cast<unsigned>(d) - 12];
	const size_t vs = dtype_size(vd), s = dtype_size(d);
	auto *p = static_cast<unsigned char *>(dst);
	for (size_t i = 0; i < n; ++i) {
		unsigned char *e = p + i * s;
		for (size_t j = 0; j < s; ++j)
			e[j] = static_cast<unsigned char>(rng());
		uint64_t bits;
		switch (rng() % 4) {
		case 0: fill_random(vd, &bits, 1, rng); break;
		case 1: bits = rng() % 3; break;
		default:
			if (vd == Dtype::float32)
				bits = std::vector<uint64_t>{0x7FC00000, 0x80000000, 0, 0x3F800000,
							     0xFF800000}[rng() % 5];
			else if (vd == Dtype::float64)
				bits = std::vector<uint64_t>{0x7FF8000000000000, 0x8000000000000000,
							     0, 0x3FF0000000000000,
							     0xFFF0000000000000}[rng() % 5];
			else
				bits = rng() % 2 ? uint64_t(-1) : 5;
		}
		std::memcpy(e, &bits, vs);
		const int32_t k = rng() % 2 ? static_cast<int32_t>(rng() % 3)
					    : static_cast<int32_t>(static_cast<uint32_t>(rng()));
		std::memcpy(e + std::max<size_t>(vs, 4), &k, 4); // the C layout: after the value
	}
}

void fill_random(Dtype d, void *dst, size_t n, std::mt19937_64 &rng)
{
	if (is_pair(d))
		return fill_random_pairs(d, dst, n, rng);
	auto *p = static_cast<unsigned char *>(dst);
	const size_t s = dtype_size(d);
	for (size_t i = 0; i < n; ++i) {
		uint64_t bits = rng();
		const bool tame = (rng() & 1) != 0;
		if (tame) {
			const uint64_t sign = rng() & 1;
			switch (d) {
			case Dtype::float16:
				bits = (sign << 15) | ((8 + rng() % 16) << 10) | (bits & 0x3FF);
				break;
			case Dtype::bfloat16:
				bits = (sign << 15) | ((110 + rng() % 32) << 7) | (bits & 0x7F);
				break;
			case Dtype::float32:
				bits = (sign << 31) | ((110 + rng() % 32) << 23) |
				       (bits & 0x7FFFFF);
				break;
			case Dtype::float64:
				bits = (sign << 63) | ((1000 + rng() % 48) << 52) |
				       (bits & 0xFFFFFFFFFFFFFull);
				break;
			default:
				bits = rng() % 7 - 3;
				break; // small integers: products and sums near zero
			}
		}
		std::memcpy(p + i * s, &bits, s);
	}
}

std::vector<Dtype> all_dtypes()
{
	std::vector<Dtype> v;
	for (unsigned i = 0; i < kNumDtypes; ++i)
		v.push_back(dtype_at(i));
	return v;
}

// ---------------------------------------------------------------------------------------------------------------
// Parameterised kernel tests: every supported (op, dtype) x every ISA
// ---------------------------------------------------------------------------------------------------------------

struct KernelCase {
	RedOp op;
	Dtype dtype;
	Isa isa;
};

std::vector<KernelCase> all_kernel_cases()
{
	std::vector<KernelCase> v;
	for (Isa isa : kAllIsas)
		for (unsigned o = 0; o < kNumRedOps; ++o)
			for (unsigned d = 0; d < kNumDtypes; ++d)
				if (op_supported(redop_at(o), dtype_at(d)))
					v.push_back({redop_at(o), dtype_at(d), isa});
	return v;
}

std::string case_name(const ::testing::TestParamInfo<KernelCase> &info)
{
	return std::string(redop_name(info.param.op)) + "_" + dtype_name(info.param.dtype) + "_" +
	       isa_name(info.param.isa);
}

class KernelTest : public ::testing::TestWithParam<KernelCase> {
protected:
	void SetUp() override
	{
		SKIP_IF_ISA_UNAVAILABLE(GetParam().isa);
		isa_ = std::make_unique<ScopedIsa>(GetParam().isa);
		ASSERT_EQ(reduce_isa(), GetParam().isa);
		fn_ = reduce_fn(op(), dtype());
		ASSERT_NE(fn_, nullptr);
		rng_.seed(0x1bc0 + 131 * static_cast<unsigned>(op()) +
			  static_cast<unsigned>(dtype()));
	}
	RedOp op() const { return GetParam().op; }
	Dtype dtype() const { return GetParam().dtype; }
	size_t esize() const { return dtype_size(dtype()); }

	std::unique_ptr<ScopedIsa> isa_;
	ReduceFn fn_ = nullptr;
	std::mt19937_64 rng_;
};

TEST_P(KernelTest, MatchesReferenceAllCounts)
{
	constexpr size_t kGuard = 64;
	for (size_t n : kCounts) {
		SCOPED_TRACE("count=" + std::to_string(n));
		const size_t bytes = n * esize();
		Buffer a(bytes), b(bytes), dst(bytes + kGuard), want(bytes);
		fill_random(dtype(), a.data(), n, rng_);
		fill_random(dtype(), b.data(), n, rng_);
		std::vector<unsigned char> a0(a.data(), a.data() + bytes),
			b0(b.data(), b.data() + bytes);
		std::memset(dst.data(), 0xA5, bytes + kGuard);

		fn_(dst.data(), a.data(), b.data(), n);
		ref_reduce(op(), dtype(), want.data(), a0.data(), b0.data(), n);

		EXPECT_TRUE(matches_reference(dtype(), dst.data(), want.data(), a0.data(),
					      b0.data(), n));
		for (size_t i = bytes; i < bytes + kGuard; ++i)
			ASSERT_EQ(dst.data()[i], 0xA5) << "write past count at byte " << i;
		EXPECT_TRUE(std::equal(a0.begin(), a0.end(), a.data())) << "input a modified";
		EXPECT_TRUE(std::equal(b0.begin(), b0.end(), b.data())) << "input b modified";
	}
}

TEST_P(KernelTest, Aliasing)
{
	for (size_t n : {size_t{1}, size_t{17}, size_t{129}, size_t{4097}}) {
		SCOPED_TRACE("count=" + std::to_string(n));
		const size_t bytes = n * esize();
		std::vector<unsigned char> a(bytes), b(bytes), want(bytes), want_same(bytes);
		fill_random(dtype(), a.data(), n, rng_);
		fill_random(dtype(), b.data(), n, rng_);
		ref_reduce(op(), dtype(), want.data(), a.data(), b.data(), n);
		ref_reduce(op(), dtype(), want_same.data(), a.data(), a.data(), n);

		std::vector<unsigned char> buf = a; // dst == a
		fn_(buf.data(), buf.data(), b.data(), n);
		EXPECT_TRUE(
			matches_reference(dtype(), buf.data(), want.data(), a.data(), b.data(), n))
			<< "dst == a";

		buf = b; // dst == b
		fn_(buf.data(), a.data(), buf.data(), n);
		EXPECT_TRUE(
			matches_reference(dtype(), buf.data(), want.data(), a.data(), b.data(), n))
			<< "dst == b";

		buf = a; // dst == a == b
		fn_(buf.data(), buf.data(), buf.data(), n);
		EXPECT_TRUE(matches_reference(dtype(), buf.data(), want_same.data(), a.data(),
					      a.data(), n))
			<< "dst == a == b";
	}
}

TEST_P(KernelTest, UnalignedPointers)
{
	constexpr size_t n = 1000;
	const size_t offsets[][3] = {{1, 2, 3}, {3, 0, 5}, {0, 7, 1}, {5, 5, 5}, {13, 1, 0}};
	for (const auto &off : offsets) {
		SCOPED_TRACE("element offsets a/b/dst=" + std::to_string(off[0]) + "/" +
			     std::to_string(off[1]) + "/" + std::to_string(off[2]));
		const size_t bytes = (n + 16) * esize();
		Buffer a(bytes), b(bytes), dst(bytes), want(n * esize());
		unsigned char *pa = a.data() + off[0] * esize();
		unsigned char *pb = b.data() + off[1] * esize();
		unsigned char *pd = dst.data() + off[2] * esize();
		fill_random(dtype(), pa, n, rng_);
		fill_random(dtype(), pb, n, rng_);
		ref_reduce(op(), dtype(), want.data(), pa, pb, n);
		fn_(pd, pa, pb, n);
		EXPECT_TRUE(matches_reference(dtype(), pd, want.data(), pa, pb, n));
		// In place on a misaligned buffer as well.
		fn_(pa, pa, pb, n);
		EXPECT_TRUE(matches_reference(dtype(), pa, want.data(), want.data(), pb, n))
			<< "in place";
	}
}

// Special values of each type; every ordered pair is reduced, laid out so both SIMD bodies and tails see them.
std::vector<uint64_t> special_values(Dtype d)
{
	switch (d) {
	case Dtype::int8:
	case Dtype::uint8: return {0, 1, 0x7F, 0x80, 0x81, 0xFF, 0xFE, 0x40, 0x10};
	case Dtype::int16:
	case Dtype::uint16: return {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x0100, 0x00FF, 0xFF00};
	case Dtype::int32:
	case Dtype::uint32:
		return {0,	    1,	     0x7FFFFFFF, 0x80000000, 0x80000001,
			0xFFFFFFFF, 0x10000, 0xFFFF,	 0x12345678};
	case Dtype::int64:
	case Dtype::uint64:
		return {0,
			1,
			0x7FFFFFFFFFFFFFFF,
			0x8000000000000000,
			0x8000000000000001,
			0xFFFFFFFFFFFFFFFF,
			0x100000000,
			0xFFFFFFFF,
			0x00000001FFFFFFFF,
			0xFFFFFFFF00000000};
	case Dtype::float16:
		return {0x0000, 0x8000,		 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00,
			0xFE00, 0x7D00 /*sNaN*/, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF,
			0xFBFF, 0x3C01,		 0x1000, 0x3555, 0x0200};
	case Dtype::bfloat16:
		return {0x0000, 0x8000,		 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0,
			0xFFC0, 0x7FA0 /*sNaN*/, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F,
			0xFF7F, 0x3F81,		 0x3B80, 0x3EAB, 0x0040};
	case Dtype::float32:
		return {0x00000000, 0x80000000, 0x3F800000, 0xBF800000,		 0x7F800000,
			0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FA00000 /*sNaN*/, 0x00000001,
			0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,		 0xFF7FFFFF,
			0x3F800001, 0x33800000, 0x3EAAAAAB};
	case Dtype::float64:
		return {0x0000000000000000, 0x8000000000000000, 0x3FF0000000000000,
			0xBFF0000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
			0x7FF8000000000000, 0xFFF8000000000000, 0x7FF4000000000000 /*sNaN*/,
			0x0000000000000001, 0x8000000000000001, 0x000FFFFFFFFFFFFF,
			0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
			0x3FF0000000000001, 0x3CA0000000000000, 0x3FD5555555555555};
	default: break; // the pairs: special_pairs()
	}
	return {};
}

// The value part of a pair's special values, with indices that tie and that do not.
std::vector<std::vector<unsigned char>> special_pairs(Dtype d)
{
	static const Dtype value_type[] = {Dtype::float32, Dtype::float64, Dtype::int64,
					   Dtype::int32, Dtype::int16};
	const Dtype vd = value_type[static_cast<unsigned>(d) - 12];
	const size_t s = dtype_size(d);
	std::vector<std::vector<unsigned char>> v;
	for (uint64_t bits : special_values(vd)) {
		for (int32_t k : {0, 1, INT32_MIN, INT32_MAX}) {
			std::vector<unsigned char> e(s, 0);
			std::memcpy(e.data(), &bits, dtype_size(vd));
			std::memcpy(e.data() + std::max<size_t>(dtype_size(vd), 4), &k, 4);
			v.push_back(e);
		}
	}
	return v;
}

TEST_P(KernelTest, SpecialValuePairs)
{
	if (is_pair(dtype())) {
		const auto sp = special_pairs(dtype());
		const size_t n = sp.size() * sp.size(), es = esize();
		std::vector<unsigned char> a(n * es), b(n * es), got(n * es), want(n * es);
		for (size_t i = 0; i < sp.size(); ++i)
			for (size_t j = 0; j < sp.size(); ++j) {
				std::memcpy(&a[(i * sp.size() + j) * es], sp[i].data(), es);
				std::memcpy(&b[(i * sp.size() + j) * es], sp[j].data(), es);
			}
		fn_(got.data(), a.data(), b.data(), n);
		ref_reduce(op(), dtype(), want.data(), a.data(), b.data(), n);
		EXPECT_TRUE(
			matches_reference(dtype(), got.data(), want.data(), a.data(), b.data(), n));
		return;
	}
	const std::vector<uint64_t> s = special_values(dtype());
	const size_t n = s.size() * s.size();
	const size_t es = esize();
	std::vector<unsigned char> a(n * es), b(n * es), got(n * es), want(n * es);
	for (size_t i = 0; i < s.size(); ++i) {
		for (size_t j = 0; j < s.size(); ++j) {
			std::memcpy(&a[(i * s.size() + j) * es], &s[i], es);
			std::memcpy(&b[(i * s.size() + j) * es], &s[j], es);
		}
	}
	fn_(got.data(), a.data(), b.data(), n);
	ref_reduce(op(), dtype(), want.data(), a.data(), b.data(), n);
	EXPECT_TRUE(matches_reference(dtype(), got.data(), want.data(), a.data(), b.data(), n));
}

INSTANTIATE_TEST_SUITE_P(AllOpsDtypesIsas, KernelTest, ::testing::ValuesIn(all_kernel_cases()),
			 case_name);

// ---------------------------------------------------------------------------------------------------------------
// Hand-computed expectations (not via the reference), on every ISA. Each pair is replicated over 4097 elements
// so vector bodies and the tail both produce it.
// ---------------------------------------------------------------------------------------------------------------

class IsaTest : public ::testing::TestWithParam<Isa> {
protected:
	void SetUp() override
	{
		SKIP_IF_ISA_UNAVAILABLE(GetParam());
		isa_ = std::make_unique<ScopedIsa>(GetParam());
	}

	template <class T> void expect_all(RedOp op, Dtype d, T a, T b, T want)
	{
		constexpr size_t n = 4097;
		std::vector<T> va(n, a), vb(n, b), out(n);
		ReduceFn fn = reduce_fn(op, d);
		ASSERT_NE(fn, nullptr);
		fn(out.data(), va.data(), vb.data(), n);
		for (size_t i = 0; i < n; ++i) {
			if (std::memcmp(&out[i], &want, sizeof(T)) != 0) {
				ADD_FAILURE() << redop_name(op) << "/" << dtype_name(d) << " at ["
					      << i << "]: got " << hex_element(d, out.data(), i)
					      << " want " << hex_element(d, &want, 0);
				return;
			}
		}
	}
	template <class T> void expect_nan(RedOp op, Dtype d, T a, T b)
	{
		constexpr size_t n = 4097;
		std::vector<T> va(n, a), vb(n, b), out(n);
		reduce_fn(op, d)(out.data(), va.data(), vb.data(), n);
		for (size_t i = 0; i < n; ++i) {
			bool nan;
			if constexpr (sizeof(T) == 2)
				nan = small_is_nan(d == Dtype::float16 ? kHalf : kBf16, out[i]);
			else
				nan = std::isnan(out[i]);
			if (!nan) {
				ADD_FAILURE() << redop_name(op) << "/" << dtype_name(d) << " at ["
					      << i << "] not NaN";
				return;
			}
		}
	}

	std::unique_ptr<ScopedIsa> isa_;
};

TEST_P(IsaTest, IntegerWrapAround)
{
	expect_all<int32_t>(RedOp::sum, Dtype::int32, INT32_MAX, 1, INT32_MIN);
	expect_all<int32_t>(RedOp::prod, Dtype::int32, INT32_MIN, -1, INT32_MIN);
	expect_all<int32_t>(RedOp::prod, Dtype::int32, 65536, 65536, 0);
	expect_all<int8_t>(RedOp::sum, Dtype::int8, 127, 1, -128);
	expect_all<int8_t>(RedOp::prod, Dtype::int8, -128, -1, -128);
	expect_all<int8_t>(RedOp::prod, Dtype::int8, 16, 17, 16); // 272 mod 256
	expect_all<uint8_t>(RedOp::sum, Dtype::uint8, 255, 1, 0);
	expect_all<uint8_t>(RedOp::prod, Dtype::uint8, 255, 255, 1);
	expect_all<int16_t>(RedOp::prod, Dtype::int16, 256, 256, 0);
	expect_all<uint16_t>(RedOp::prod, Dtype::uint16, 65535, 65535, 1);
	expect_all<int64_t>(RedOp::sum, Dtype::int64, INT64_MAX, 1, INT64_MIN);
	expect_all<int64_t>(RedOp::prod, Dtype::int64, INT64_MIN, -1, INT64_MIN);
	expect_all<uint64_t>(RedOp::prod, Dtype::uint64, 1ull << 63, 2, 0);
	expect_all<uint64_t>(RedOp::prod, Dtype::uint64, 0x100000001ull, 0x100000001ull,
			     0x200000001ull);
	expect_all<uint64_t>(RedOp::prod, Dtype::uint64, 0xFFFFFFFFFFFFFFFFull,
			     0xFFFFFFFFFFFFFFFFull, 1);
	expect_all<uint32_t>(RedOp::sum, Dtype::uint32, 0xFFFFFFFFu, 2, 1);
}

TEST_P(IsaTest, IntegerMinMaxSignedness)
{
	expect_all<int64_t>(RedOp::min, Dtype::int64, INT64_MIN, INT64_MAX, INT64_MIN);
	expect_all<int64_t>(RedOp::max, Dtype::int64, INT64_MIN, INT64_MAX, INT64_MAX);
	expect_all<uint64_t>(RedOp::min, Dtype::uint64, 0, UINT64_MAX, 0);
	expect_all<uint64_t>(RedOp::max, Dtype::uint64, 1ull << 63, 1, 1ull << 63);
	expect_all<uint64_t>(RedOp::min, Dtype::uint64, 1ull << 63, 1, 1);
	expect_all<uint32_t>(RedOp::max, Dtype::uint32, 0x80000000u, 1, 0x80000000u);
	expect_all<int32_t>(RedOp::max, Dtype::int32, INT32_MIN, 1, 1);
	expect_all<int8_t>(RedOp::min, Dtype::int8, -128, 127, -128);
	expect_all<uint8_t>(RedOp::min, Dtype::uint8, 0x80, 0x7F, 0x7F);
	expect_all<int16_t>(RedOp::max, Dtype::int16, -1, 0, 0);
	expect_all<uint16_t>(RedOp::max, Dtype::uint16, 0xFFFF, 0, 0xFFFF);
}

TEST_P(IsaTest, FloatSignedZeroMinMax)
{
	for (int swap = 0; swap < 2; ++swap) {
		const float fz[2] = {-0.0f, 0.0f};
		const double dz[2] = {-0.0, 0.0};
		const uint16_t hz[2] = {0x8000, 0x0000};
		const int i = swap, j = 1 - swap;
		expect_all<float>(RedOp::min, Dtype::float32, fz[i], fz[j], -0.0f);
		expect_all<float>(RedOp::max, Dtype::float32, fz[i], fz[j], 0.0f);
		expect_all<double>(RedOp::min, Dtype::float64, dz[i], dz[j], -0.0);
		expect_all<double>(RedOp::max, Dtype::float64, dz[i], dz[j], 0.0);
		for (Dtype d : {Dtype::float16, Dtype::bfloat16}) {
			expect_all<uint16_t>(RedOp::min, d, hz[i], hz[j], 0x8000);
			expect_all<uint16_t>(RedOp::max, d, hz[i], hz[j], 0x0000);
		}
	}
	expect_all<float>(RedOp::min, Dtype::float32, -0.0f, -0.0f, -0.0f);
	expect_all<float>(RedOp::max, Dtype::float32, 0.0f, 0.0f, 0.0f);
	expect_all<float>(RedOp::min, Dtype::float32, 1.0f, 2.0f, 1.0f);
	expect_all<float>(RedOp::max, Dtype::float32, -INFINITY, -2.0f, -2.0f);
	expect_all<double>(RedOp::min, Dtype::float64, -0.0, 5e-324, -0.0);
}

TEST_P(IsaTest, FloatNanAndInf)
{
	const float fnan = std::numeric_limits<float>::quiet_NaN();
	const double dnan = std::numeric_limits<double>::quiet_NaN();
	for (RedOp op : {RedOp::sum, RedOp::prod, RedOp::min, RedOp::max}) {
		expect_nan<float>(op, Dtype::float32, fnan, 1.0f);
		expect_nan<float>(op, Dtype::float32, 1.0f, fnan);
		expect_nan<double>(op, Dtype::float64, dnan, -0.0);
		expect_nan<double>(op, Dtype::float64, -0.0, dnan);
		for (Dtype d : {Dtype::float16, Dtype::bfloat16}) {
			const uint16_t nan = d == Dtype::float16 ? 0x7E00 : 0x7FC0;
			expect_nan<uint16_t>(op, d, nan, 0x0000);
			expect_nan<uint16_t>(op, d, 0x8000, nan);
		}
	}
	expect_nan<float>(RedOp::sum, Dtype::float32, INFINITY, -INFINITY);
	expect_nan<float>(RedOp::prod, Dtype::float32, 0.0f, INFINITY);
	expect_nan<uint16_t>(RedOp::sum, Dtype::float16, 0x7C00, 0xFC00);
	expect_nan<uint16_t>(RedOp::prod, Dtype::bfloat16, 0x0000, 0xFF80);
	expect_all<float>(RedOp::sum, Dtype::float32, FLT_MAX, FLT_MAX, INFINITY);
	expect_all<double>(RedOp::prod, Dtype::float64, -DBL_MAX, 2.0, -INFINITY);
	expect_all<float>(RedOp::sum, Dtype::float32, std::ldexp(1.0f, -149),
			  std::ldexp(1.0f, -149),
			  std::ldexp(1.0f, -148)); // denormals are not flushed
	expect_all<double>(RedOp::prod, Dtype::float64, 5e-324, 0.5,
			   0.0); // 2^-1075 ties to even (0)
}

TEST_P(IsaTest, HalfAndBf16Rounding)
{
	// fp16: overflow, denormal arithmetic, ties to even at 1 + 2^-11.
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x7BFF, 0x7BFF, 0x7C00);
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x7BFF, 0x5000,
			     0x7C00); // 65504 + 32 = 65536 tie -> Inf
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x7BFF, 0x4B80,
			     0x7BFF); // 65504 + 15 rounds down
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x0001, 0x0001, 0x0002);
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x0400, 0x8001, 0x03FF);
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x3C00, 0x1000, 0x3C00);
	expect_all<uint16_t>(RedOp::sum, Dtype::float16, 0x3C01, 0x1000, 0x3C02);
	expect_all<uint16_t>(RedOp::prod, Dtype::float16, 0x0001, 0x3800,
			     0x0000); // 2^-25: tie -> 0
	expect_all<uint16_t>(RedOp::prod, Dtype::float16, 0x0003, 0x3800,
			     0x0002); // 1.5 * 2^-24: tie -> 2
	expect_all<uint16_t>(RedOp::prod, Dtype::float16, 0x3E00, 0x3E00,
			     0x4080); // 1.5 * 1.5 = 2.25
	// bf16: the same structure; denormals must survive (VCVTNEPS2BF16 would flush them).
	expect_all<uint16_t>(RedOp::sum, Dtype::bfloat16, 0x3F80, 0x3B80, 0x3F80);
	expect_all<uint16_t>(RedOp::sum, Dtype::bfloat16, 0x3F81, 0x3B80, 0x3F82);
	expect_all<uint16_t>(RedOp::sum, Dtype::bfloat16, 0x0001, 0x0001, 0x0002);
	expect_all<uint16_t>(RedOp::sum, Dtype::bfloat16, 0x0080, 0x8001, 0x007F);
	expect_all<uint16_t>(RedOp::prod, Dtype::bfloat16, 0x0001, 0x3F80, 0x0001);
	expect_all<uint16_t>(RedOp::sum, Dtype::bfloat16, 0x7F7F, 0x7F7F, 0x7F80);
	expect_all<uint16_t>(RedOp::min, Dtype::bfloat16, 0x0001, 0x8001, 0x8001);
	expect_all<uint16_t>(RedOp::max, Dtype::float16, 0x0001, 0x8001, 0x0001);
}

TEST_P(IsaTest, BitwiseUnsupportedOnFloats)
{
	for (Dtype d : all_dtypes()) {
		for (RedOp op :
		     {RedOp::band, RedOp::bor, RedOp::bxor, RedOp::land, RedOp::lor, RedOp::lxor}) {
			EXPECT_EQ(op_supported(op, d), is_integer(d))
				<< redop_name(op) << "/" << dtype_name(d);
			EXPECT_EQ(reduce_fn(op, d) != nullptr, is_integer(d))
				<< redop_name(op) << "/" << dtype_name(d);
		}
		for (RedOp op : {RedOp::sum, RedOp::prod, RedOp::min, RedOp::max, RedOp::avg}) {
			EXPECT_EQ(op_supported(op, d), !is_pair(d));
			EXPECT_EQ(reduce_fn(op, d) != nullptr, !is_pair(d))
				<< redop_name(op) << "/" << dtype_name(d);
		}
		for (RedOp op : {RedOp::maxloc, RedOp::minloc}) {
			EXPECT_EQ(op_supported(op, d), is_pair(d));
			EXPECT_EQ(reduce_fn(op, d) != nullptr, is_pair(d))
				<< redop_name(op) << "/" << dtype_name(d);
		}
	}
	EXPECT_EQ(reduce_fn(static_cast<RedOp>(13), Dtype::int32), nullptr);
	EXPECT_EQ(reduce_fn(RedOp::sum, static_cast<Dtype>(17)), nullptr);
	EXPECT_EQ(reduce_fn(static_cast<RedOp>(255), static_cast<Dtype>(255)), nullptr);
}

// Hand-computed maxloc/minloc and logical results: MPI's tie rule, and the NaN and signed-zero order.
TEST_P(IsaTest, LocAndLogical)
{
	struct FI {
		float v;
		int32_t k;
	};
	struct DI {
		double v;
		int32_t k;
		int32_t pad;
	};
	const float fnan = std::numeric_limits<float>::quiet_NaN();
	auto check_fi = [](RedOp op, FI a, FI b, uint32_t want_bits, int32_t want_k) {
		FI out[3] = {};
		FI va[3] = {a, a, a}, vb[3] = {b, b, b};
		reduce_fn(op, Dtype::float32_int32)(out, va, vb, 3);
		uint32_t bits;
		std::memcpy(&bits, &out[2].v, 4);
		EXPECT_EQ(bits, want_bits)
			<< redop_name(op) << " " << a.v << "/" << a.k << " , " << b.v << "/" << b.k;
		EXPECT_EQ(out[2].k, want_k) << redop_name(op);
	};
	for (int swap = 0; swap < 2; ++swap) {
		FI x{3.0f, 7}, y{3.0f, 2}; // tie: the lower index
		if (swap)
			std::swap(x, y);
		check_fi(RedOp::maxloc, x, y, 0x40400000, 2);
		check_fi(RedOp::minloc, x, y, 0x40400000, 2);
		FI p{1.0f, 0}, q{2.0f, 9};
		if (swap)
			std::swap(p, q);
		check_fi(RedOp::maxloc, p, q, 0x40000000, 9);
		check_fi(RedOp::minloc, p, q, 0x3F800000, 0);
		FI n{fnan, 5}, m{INFINITY, 1}; // NaN wins in both
		if (swap)
			std::swap(n, m);
		check_fi(RedOp::maxloc, n, m, 0x7FC00000, 5);
		check_fi(RedOp::minloc, n, m, 0x7FC00000, 5);
		FI z{-0.0f, 1}, pz{0.0f, 4}; // -0 below +0
		if (swap)
			std::swap(z, pz);
		check_fi(RedOp::maxloc, z, pz, 0x00000000, 4);
		check_fi(RedOp::minloc, z, pz, 0x80000000, 1);
	}
	// double_int: 16 bytes with 4 of padding, which comes out zero.
	DI a{-1.5, 3, 0x55555555}, b{-1.5, -4, 0x11111111}, out{};
	reduce_fn(RedOp::maxloc, Dtype::float64_int32)(&out, &a, &b, 1);
	EXPECT_EQ(out.v, -1.5);
	EXPECT_EQ(out.k, -4);
	EXPECT_EQ(out.pad, 0);
	struct SI {
		int16_t v;
		int32_t k;
	} s1{-3, 1}, s2{-3, 0}, s3{};
	reduce_fn(RedOp::minloc, Dtype::int16_int32)(&s3, &s1, &s2, 1);
	EXPECT_EQ(s3.v, -3);
	EXPECT_EQ(s3.k, 0);

	expect_all<int32_t>(RedOp::land, Dtype::int32, 5, -1, 1);
	expect_all<int32_t>(RedOp::land, Dtype::int32, 5, 0, 0);
	expect_all<uint8_t>(RedOp::lor, Dtype::uint8, 0, 0x80, 1);
	expect_all<uint8_t>(RedOp::lor, Dtype::uint8, 0, 0, 0);
	expect_all<int64_t>(RedOp::lxor, Dtype::int64, INT64_MIN, 2, 0);
	expect_all<int64_t>(RedOp::lxor, Dtype::int64, 0, 2, 1);
	expect_all<uint16_t>(RedOp::lxor, Dtype::uint16, 0, 0, 0);
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa> &info)
{
	return isa_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, IsaTest, ::testing::ValuesIn(kAllIsas), isa_param_name);

// ---------------------------------------------------------------------------------------------------------------
// reduce_many
// ---------------------------------------------------------------------------------------------------------------

class ReduceManyTest : public KernelTest {};

TEST_P(ReduceManyTest, FixedOrderMatchesReference)
{
	// Counts cross reduce_many's internal block boundaries (8 KiB) for every element size.
	const std::pair<unsigned, size_t> cases[] = {
		{1, 20011}, {2, 20011}, {3, 20011}, {8, 9001}, {64, 3001}};
	for (const auto &[n, count] : cases) {
		SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count));
		const size_t bytes = count * esize();
		std::vector<std::vector<unsigned char>> srcs(n, std::vector<unsigned char>(bytes));
		std::vector<const void *> ptrs;
		for (auto &s : srcs) {
			fill_random(dtype(), s.data(), count, rng_);
			ptrs.push_back(s.data());
		}
		std::vector<unsigned char> want = srcs[0];
		for (unsigned k = 1; k < n; ++k)
			ref_reduce(op(), dtype(), want.data(), want.data(), srcs[k].data(), count);

		std::vector<unsigned char> out(bytes, 0x5A);
		reduce_many(op(), dtype(), out.data(), ptrs.data(), n, count);
		EXPECT_TRUE(matches_reference(dtype(), out.data(), want.data(), srcs[0].data(),
					      srcs[n - 1].data(), count))
			<< "separate dst";

		std::vector<unsigned char> src0 = srcs[0]; // dst == src[0]
		ptrs[0] = src0.data();
		reduce_many(op(), dtype(), src0.data(), ptrs.data(), n, count);
		EXPECT_TRUE(matches_reference(dtype(), src0.data(), want.data(), srcs[0].data(),
					      srcs[n - 1].data(), count))
			<< "dst == src[0]";
	}
}

TEST_P(ReduceManyTest, ZeroCountAndBadArguments)
{
	std::vector<unsigned char> a(8), b(8);
	const void *ptrs[] = {a.data(), b.data()};
	EXPECT_NO_THROW(reduce_many(op(), dtype(), a.data(), ptrs, 2, 0));
	EXPECT_THROW(reduce_many(op(), dtype(), a.data(), ptrs, 0, 1), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(AllOpsDtypesIsas, ReduceManyTest, ::testing::ValuesIn(all_kernel_cases()),
			 case_name);

TEST(ReduceMany, UnsupportedOpThrows)
{
	float a[4] = {}, b[4] = {};
	const void *ptrs[] = {a, b};
	EXPECT_THROW(reduce_many(RedOp::bxor, Dtype::float32, a, ptrs, 2, 4),
		     std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------------
// avg_finalize
// ---------------------------------------------------------------------------------------------------------------

TEST(AvgFinalize, IntegerTruncatesTowardZero)
{
	int32_t i32[] = {-7, 7, -1, 0, INT32_MIN, INT32_MAX, -6};
	avg_finalize(Dtype::int32, i32, 7, 2);
	const int32_t want32[] = {-3, 3, 0, 0, INT32_MIN / 2, INT32_MAX / 2, -3};
	for (int i = 0; i < 7; ++i)
		EXPECT_EQ(i32[i], want32[i]) << i;

	int8_t i8[] = {-128, 127, -5, 5};
	avg_finalize(Dtype::int8, i8, 4, 3);
	EXPECT_EQ(i8[0], -42);
	EXPECT_EQ(i8[1], 42);
	EXPECT_EQ(i8[2], -1);
	EXPECT_EQ(i8[3], 1);

	int8_t big[] = {-128};
	avg_finalize(Dtype::int8, big, 1,
		     1000); // divisor larger than the type: still a signed division
	EXPECT_EQ(big[0], 0);

	int64_t i64[] = {INT64_MIN, -9, INT64_MAX};
	avg_finalize(Dtype::int64, i64, 3, 4);
	EXPECT_EQ(i64[0], INT64_MIN / 4);
	EXPECT_EQ(i64[1], -2);
	EXPECT_EQ(i64[2], INT64_MAX / 4);

	int16_t i16[] = {-32768};
	avg_finalize(Dtype::int16, i16, 1, 0xFFFFFFFFu);
	EXPECT_EQ(i16[0], 0);

	uint8_t u8[] = {255, 1};
	avg_finalize(Dtype::uint8, u8, 2, 2);
	EXPECT_EQ(u8[0], 127);
	EXPECT_EQ(u8[1], 0);

	uint64_t u64[] = {UINT64_MAX};
	avg_finalize(Dtype::uint64, u64, 1, 3);
	EXPECT_EQ(u64[0], UINT64_MAX / 3);

	uint32_t u32[] = {0xFFFFFFFFu};
	avg_finalize(Dtype::uint32, u32, 1, 0xFFFFFFFFu);
	EXPECT_EQ(u32[0], 1u);
}

TEST(AvgFinalize, FloatDivision)
{
	float f[] = {1.0f, -3.0f, INFINITY, -0.0f, 1e-45f};
	avg_finalize(Dtype::float32, f, 5, 3);
	EXPECT_EQ(f[0], 1.0f / 3.0f);
	EXPECT_EQ(f[1], -1.0f);
	EXPECT_EQ(f[2], INFINITY);
	EXPECT_TRUE(f[3] == 0.0f && std::signbit(f[3]));
	EXPECT_EQ(f[4], 0.0f); // 2^-149 / 3 rounds to 0

	double d[] = {1.0, 10.0};
	avg_finalize(Dtype::float64, d, 2, 7);
	EXPECT_EQ(d[0], 1.0 / 7.0);
	EXPECT_EQ(d[1], 10.0 / 7.0);

	float nan[] = {NAN};
	avg_finalize(Dtype::float32, nan, 1, 2);
	EXPECT_TRUE(std::isnan(nan[0]));

	uint16_t h[] = {0x3C00, 0x0001, 0x7BFF, 0xC200}; // 1, 2^-24, 65504, -3
	avg_finalize(Dtype::float16, h, 4, 3);
	EXPECT_EQ(h[0], ref_encode(kHalf, 1.0f / 3.0f));
	EXPECT_EQ(h[0], 0x3555);
	EXPECT_EQ(h[1], 0x0000); // 2^-24 / 3 < half the smallest denormal
	EXPECT_EQ(h[2], ref_encode(kHalf, 65504.0f / 3.0f));
	EXPECT_EQ(h[3], 0xBC00);

	uint16_t bf[] = {0x3F80, 0x0003}; // 1, 3 * 2^-133
	avg_finalize(Dtype::bfloat16, bf, 2, 3);
	EXPECT_EQ(bf[0], 0x3EAB);
	EXPECT_EQ(bf[1], 0x0001);
}

// Reference avg division: C truncating division of the (signed or unsigned) value, or division in the float type.
template <class T> void ref_divide(void *buf, size_t n, uint32_t div)
{
	for (size_t i = 0; i < n; ++i) {
		const T v = load_at<T>(buf, i);
		if constexpr (std::is_floating_point_v<T>)
			store_at<T>(buf, i, v / static_cast<T>(div));
		else if constexpr (std::is_signed_v<T>)
			store_at<T>(buf, i,
				    static_cast<T>(static_cast<int64_t>(v) /
						   static_cast<int64_t>(div)));
		else
			store_at<T>(buf, i, static_cast<T>(static_cast<uint64_t>(v) / div));
	}
}
void ref_divide_small(SmallFormat f, void *buf, size_t n, uint32_t div)
{
	for (size_t i = 0; i < n; ++i)
		store_at<uint16_t>(buf, i,
				   ref_encode(f, ref_decode(f, load_at<uint16_t>(buf, i)) /
							 static_cast<float>(div)));
}

void ref_avg_finalize(Dtype d, void *buf, size_t n, uint32_t div)
{
	switch (d) {
	case Dtype::int8: return ref_divide<int8_t>(buf, n, div);
	case Dtype::int16: return ref_divide<int16_t>(buf, n, div);
	case Dtype::int32: return ref_divide<int32_t>(buf, n, div);
	case Dtype::int64: return ref_divide<int64_t>(buf, n, div);
	case Dtype::uint8: return ref_divide<uint8_t>(buf, n, div);
	case Dtype::uint16: return ref_divide<uint16_t>(buf, n, div);
	case Dtype::uint32: return ref_divide<uint32_t>(buf, n, div);
	case Dtype::uint64: return ref_divide<uint64_t>(buf, n, div);
	case Dtype::float16: return ref_divide_small(kHalf, buf, n, div);
	case Dtype::bfloat16: return ref_divide_small(kBf16, buf, n, div);
	case Dtype::float32: return ref_divide<float>(buf, n, div);
	case Dtype::float64: return ref_divide<double>(buf, n, div);
	default: ADD_FAILURE() << "avg of a pair";
	}
}

TEST(AvgFinalize, RandomAgainstReference)
{
	std::mt19937_64 rng(42);
	for (Dtype d : numeric_dtypes()) {
		for (uint32_t div : {1u, 2u, 3u, 7u, 1000u, 0xFFFFFFFFu}) {
			SCOPED_TRACE(std::string(dtype_name(d)) + " / " + std::to_string(div));
			constexpr size_t n = 257;
			std::vector<unsigned char> buf(n * dtype_size(d));
			fill_random(d, buf.data(), n, rng);
			const std::vector<unsigned char> orig = buf;
			std::vector<unsigned char> want = buf;
			ref_avg_finalize(d, want.data(), n, div);
			avg_finalize(d, buf.data(), n, div);
			EXPECT_TRUE(matches_reference(d, buf.data(), want.data(), orig.data(),
						      orig.data(), n));
		}
	}
}

// The engine finishes an average where the block travels: in a packet,
// 60 bytes after its start, so at no alignment of the element type.
TEST(AvgFinalize, AnyAlignment)
{
	std::mt19937_64 rng(43);
	for (Dtype d : numeric_dtypes()) {
		for (size_t off : {1u, 4u, 60u}) {
			SCOPED_TRACE(std::string(dtype_name(d)) + " at offset " +
				     std::to_string(off));
			constexpr size_t n = 100;
			const size_t bytes = n * dtype_size(d);
			std::vector<unsigned char> orig(bytes), want(bytes), space(bytes + 64);
			fill_random(d, orig.data(), n, rng);
			want = orig;
			ref_avg_finalize(d, want.data(), n, 3);
			unsigned char *buf = space.data() + off;
			std::memcpy(buf, orig.data(), bytes);
			avg_finalize(d, buf, n, 3);
			std::vector<unsigned char> got(buf, buf + bytes);
			EXPECT_TRUE(matches_reference(d, got.data(), want.data(), orig.data(),
						      orig.data(), n));
		}
	}
}

TEST(AvgFinalize, EndToEndWithReduceMany)
{
	// avg over 3 ranks = reduce_many(avg) (a sum) followed by one division.
	const int32_t r0[] = {-5, 10, INT32_MAX}, r1[] = {-5, 11, 1}, r2[] = {-4, 12, 0};
	const void *src[] = {r0, r1, r2};
	int32_t out[3];
	reduce_many(RedOp::avg, Dtype::int32, out, src, 3, 3);
	EXPECT_EQ(out[0], -14);
	avg_finalize(Dtype::int32, out, 3, 3);
	EXPECT_EQ(out[0], -4);
	EXPECT_EQ(out[1], 11);
	EXPECT_EQ(out[2], INT32_MIN / 3); // the wrapped sum is divided
}

TEST(AvgFinalize, RejectsZeroDivisorAndBadDtype)
{
	int32_t x[1] = {1};
	EXPECT_THROW(avg_finalize(Dtype::int32, x, 1, 0), std::invalid_argument);
	EXPECT_THROW(avg_finalize(static_cast<Dtype>(17), x, 1, 1), std::invalid_argument);
	EXPECT_THROW(avg_finalize(Dtype::float32_int32, x, 1, 1), std::invalid_argument);
	EXPECT_NO_THROW(avg_finalize(Dtype::int32, nullptr, 0, 1));
}

// ---------------------------------------------------------------------------------------------------------------
// fp16 / bf16 conversion helpers
// ---------------------------------------------------------------------------------------------------------------

uint32_t float_bits(float f)
{
	uint32_t u;
	std::memcpy(&u, &f, sizeof u);
	return u;
}
float bits_float(uint32_t u)
{
	float f;
	std::memcpy(&f, &u, sizeof f);
	return f;
}

void check_decode_exhaustive(SmallFormat fmt, float (*decode)(uint16_t), uint16_t (*encode)(float))
{
	int failures = 0;
	for (uint32_t h = 0; h <= 0xFFFF && failures < 10; ++h) {
		const uint16_t v = static_cast<uint16_t>(h);
		const float got = decode(v), want = ref_decode(fmt, v);
		if (small_is_nan(fmt, v)) {
			// NaN stays NaN, keeps its sign and comes out quiet; the round trip is still NaN.
			if (!std::isnan(got) || (float_bits(got) & 0x00400000u) == 0 ||
			    std::signbit(got) != ((v & 0x8000) != 0) ||
			    !small_is_nan(fmt, encode(got))) {
				ADD_FAILURE()
					<< "NaN 0x" << std::hex << h << " -> 0x" << float_bits(got);
				++failures;
			}
			continue;
		}
		if (float_bits(got) != float_bits(want) || encode(got) != v) {
			ADD_FAILURE() << "0x" << std::hex << h << ": decode 0x" << float_bits(got)
				      << " want 0x" << float_bits(want) << ", round trip 0x"
				      << encode(got);
			++failures;
		}
	}
}

TEST(Conversion, HalfExhaustiveDecodeAndRoundTrip)
{
	check_decode_exhaustive(kHalf, half_to_float, float_to_half);
}
TEST(Conversion, Bf16ExhaustiveDecodeAndRoundTrip)
{
	check_decode_exhaustive(kBf16, bf16_to_float, float_to_bf16);
}

// Floats that stress float -> small rounding: for every finite small value, the value itself, the exact midpoint
// to its successor (a tie) and the floats adjacent to both; plus a strided sweep over all 2^32 patterns.
std::vector<float> encode_test_floats(SmallFormat fmt)
{
	std::vector<float> v;
	for (uint32_t h = 0; h <= 0x7FFF; ++h) {
		const uint16_t x = static_cast<uint16_t>(h);
		if (small_is_nan(fmt, x) || std::isinf(ref_decode(fmt, x)))
			continue;
		const double lo = ref_decode(fmt, x);
		const uint16_t next = static_cast<uint16_t>(
			x + 1); // successor (Inf after the largest finite)
		const double hi =
			std::isinf(ref_decode(fmt, next))
				? std::ldexp(1.0,
					     fmt.emax + 1) // the value Inf stands for when rounding
				: static_cast<double>(ref_decode(fmt, next));
		const float mid = static_cast<float>((lo + hi) /
						     2); // exact: needs p + 1 <= 24 bits
		for (float f : {static_cast<float>(lo), mid}) {
			for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)}) {
				v.push_back(g);
				v.push_back(-g);
			}
		}
	}
	for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 1021)
		v.push_back(bits_float(static_cast<uint32_t>(u)));
	for (float f :
	     {FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, INFINITY, -INFINITY, 65504.0f, 65519.996f,
	      65520.0f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 8.940697e-8f})
		v.push_back(f);
	return v;
}

void check_encode(SmallFormat fmt, uint16_t (*encode)(float))
{
	int failures = 0;
	size_t checked = 0;
	for (float f : encode_test_floats(fmt)) {
		++checked;
		const uint16_t got = encode(f), want = ref_encode(fmt, f);
		const bool ok = std::isnan(f) ? small_is_nan(fmt, got) &&
							((got & 0x8000) != 0) == std::signbit(f)
					      : got == want;
		if (!ok && ++failures <= 10)
			ADD_FAILURE() << "float 0x" << std::hex << float_bits(f) << " (" << f
				      << "): got 0x" << got << " want 0x" << want;
	}
	EXPECT_GT(checked, 4000000u);
}

TEST(Conversion, FloatToHalfRounding)
{
	check_encode(kHalf, float_to_half);
	EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
	EXPECT_EQ(float_to_half(65520.0f), 0x7C00); // tie at the overflow threshold -> Inf
	EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
	EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)),
		  0x0000); // tie between 0 and the smallest denormal
	EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
	EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002); // 1.5 ulp: tie -> even
	EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)),
		  0x0400); // rounds up to min normal
	EXPECT_EQ(float_to_half(-0.0f), 0x8000);
	EXPECT_EQ(float_to_half(-INFINITY), 0xFC00);
}

TEST(Conversion, FloatToBf16Rounding)
{
	check_encode(kBf16, float_to_bf16);
	EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7F80); // rounds past the largest bf16
	EXPECT_EQ(float_to_bf16(1e-45f), 0x0000);  // float denormal 2^-149 far below bf16's 2^-133
	EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001); // smallest bf16 denormal is exact
	EXPECT_EQ(float_to_bf16(std::ldexp(3.0f, -134)), 0x0002); // tie -> even
	EXPECT_EQ(float_to_bf16(bits_float(0x3F808000)), 0x3F80); // tie -> even (down)
	EXPECT_EQ(float_to_bf16(bits_float(0x3F818000)), 0x3F82); // tie -> even (up)
}

// ---------------------------------------------------------------------------------------------------------------
// Metadata and ISA selection
// ---------------------------------------------------------------------------------------------------------------

TEST(Metadata, EnumValuesSizesAndNames)
{
	EXPECT_EQ(static_cast<int>(Dtype::float16), 8);
	EXPECT_EQ(static_cast<int>(Dtype::float64), 11);
	EXPECT_EQ(static_cast<int>(RedOp::avg), 4);
	EXPECT_EQ(static_cast<int>(RedOp::bxor), 7);
	EXPECT_EQ(static_cast<int>(RedOp::maxloc), 8);
	EXPECT_EQ(static_cast<int>(RedOp::lxor), 12);
	EXPECT_EQ(static_cast<int>(Dtype::float32_int32), 12);
	EXPECT_EQ(static_cast<int>(Dtype::int16_int32), 16);
	const size_t sizes[kNumDtypes] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16, 16, 8, 8};
	for (unsigned i = 0; i < kNumDtypes; ++i) {
		EXPECT_EQ(dtype_size(dtype_at(i)), sizes[i]);
		EXPECT_TRUE(dtype_valid(static_cast<uint8_t>(i)));
	}
	EXPECT_FALSE(dtype_valid(17));
	EXPECT_FALSE(dtype_valid(255));
	EXPECT_TRUE(redop_valid(12));
	EXPECT_FALSE(redop_valid(13));
	EXPECT_EQ(dtype_size(static_cast<Dtype>(17)), 0u);
	EXPECT_STREQ(dtype_name(Dtype::bfloat16), "bfloat16");
	EXPECT_STREQ(dtype_name(Dtype::uint64), "uint64");
	EXPECT_STREQ(dtype_name(Dtype::float64_int32), "float64_int32");
	EXPECT_STREQ(redop_name(RedOp::bor), "bor");
	EXPECT_STREQ(redop_name(RedOp::minloc), "minloc");
	EXPECT_STREQ(redop_name(static_cast<RedOp>(13)), "invalid");
	EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
	for (unsigned o = 0; o < kNumRedOps; ++o)
		for (unsigned d = 0; d < kNumDtypes; ++d) {
			const RedOp op = redop_at(o);
			const Dtype t = dtype_at(d);
			const bool want = is_loc(op) || is_pair(t)
						  ? is_loc(op) && is_pair(t)
						  : !(is_bitwise(op) || is_logical(op)) ||
							    is_integer(t);
			EXPECT_EQ(op_supported(op, t), want)
				<< redop_name(op) << "/" << dtype_name(t);
		}
	EXPECT_FALSE(op_supported(static_cast<RedOp>(13), Dtype::int8));
	EXPECT_FALSE(op_supported(RedOp::sum, static_cast<Dtype>(17)));
}

// op_order_free: where it says the order does not matter, five operands
// folded in any order give the bits of folding them in order (operands
// drawn to tie often: 0, 1, 0x80, 0xff bytes); floats and float pairs are
// not order free, and the test can tell an order that matters (float sums).
TEST(OrderFree, AnyOrderGivesTheBitsOfTheFixedOrder)
{
	std::mt19937 rng{20261206};
	constexpr size_t kCount = 64;
	constexpr unsigned kOps = 5;
	const uint8_t ties[] = {0, 1, 0x80, 0xff};
	unsigned checked = 0;
	for (unsigned o = 0; o < kNumRedOps; ++o)
		for (unsigned d = 0; d < kNumDtypes; ++d) {
			const RedOp op = redop_at(o);
			const Dtype t = dtype_at(d);
			const bool want = op_supported(op, t) &&
					  (is_integer(t) || t == Dtype::int64_int32 ||
					   t == Dtype::int32_int32 || t == Dtype::int16_int32);
			ASSERT_EQ(op_order_free(op, t), want)
				<< redop_name(op) << "/" << dtype_name(t);
			if (!want)
				continue;
			const ReduceFn fn = reduce_fn(op, t);
			const size_t n = kCount * dtype_size(t);
			std::vector<std::vector<uint8_t>> in(kOps, std::vector<uint8_t>(n));
			for (auto &v : in)
				for (auto &b : v)
					b = rng() % 2 ? ties[rng() % 4] : uint8_t(rng());
			auto fold = [&](const std::vector<unsigned> &order) {
				std::vector<uint8_t> acc = in[order[0]];
				for (size_t k = 1; k < order.size(); k++)
					fn(acc.data(), acc.data(), in[order[k]].data(), kCount);
				return acc;
			};
			std::vector<unsigned> order{0, 1, 2, 3, 4};
			const std::vector<uint8_t> fixed = fold(order);
			for (int p = 0; p < 12; p++) {
				std::shuffle(order.begin(), order.end(), rng);
				ASSERT_EQ(fold(order), fixed)
					<< redop_name(op) << "/" << dtype_name(t);
			}
			checked++;
		}
	EXPECT_EQ(checked, 8u * 11u + 3u * 2u); // 8 integer types x 11 ops, 3 integer pairs x 2
	// An order that matters: 1e8 + 1 rounds back to 1e8 in float.
	const ReduceFn add = reduce_fn(RedOp::sum, Dtype::float32);
	float x = 1e8f, y = 1.0f, z = -1e8f, p = x, q = x;
	add(&p, &p, &y, 1);
	add(&p, &p, &z, 1); // (x + y) + z = 0
	add(&q, &q, &z, 1);
	add(&q, &q, &y, 1); // (x + z) + y = 1
	EXPECT_NE(p, q);
}

TEST(IsaSelection, EnvironmentValues)
{
	const Isa best = best_isa();
	EXPECT_TRUE(isa_available(Isa::scalar));
	EXPECT_EQ(detail::choose_isa(nullptr), best);
	EXPECT_EQ(detail::choose_isa(""), best);
	EXPECT_EQ(detail::choose_isa("auto"), best);
	EXPECT_EQ(detail::choose_isa("bogus"), best);
	EXPECT_EQ(detail::choose_isa("scalar"), Isa::scalar);
	for (Isa isa : {Isa::avx2, Isa::avx512})
		EXPECT_EQ(detail::choose_isa(isa_name(isa)), isa_available(isa) ? isa : best)
			<< isa_name(isa);
}

TEST(IsaSelection, SetFallsBackToBestAvailable)
{
	ScopedIsa restore(reduce_isa());
	for (Isa isa : kAllIsas) {
		set_reduce_isa(isa);
		EXPECT_EQ(reduce_isa(), isa_available(isa) ? isa : best_isa()) << isa_name(isa);
	}
	// Report which paths this run really exercised, so a silently narrower CI machine is visible in the log.
	for (Isa isa : kAllIsas)
		std::printf("[   INFO   ] ISA %-6s %s\n", isa_name(isa),
			    isa_available(isa) ? "available" : "NOT available");
}

} // namespace
