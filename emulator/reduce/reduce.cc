// Project-facing API: type metadata, ISA selection/dispatch, reduce_many and avg_finalize.
// Compiled for the baseline target; it only calls into ISA-specific code through the kernel tables after
// checking the CPU.
#include "reduce/reduce.h"
#include "util/config.h"
#include "util/log.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "reduce/reduce_detail.h"
#include "reduce/scalar_ops.h"

namespace ibv_coll::emu {

namespace {

constexpr const char *kDtypeNames[kNumDtypes] = {
	"int8",		 "int16",	  "int32",	 "int64",	"uint8",      "uint16",
	"uint32",	 "uint64",	  "float16",	 "bfloat16",	"float32",    "float64",
	"float32_int32", "float64_int32", "int64_int32", "int32_int32", "int16_int32"};
constexpr size_t kDtypeSizes[kNumDtypes] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16, 16, 8, 8};
constexpr const char *kRedOpNames[kNumRedOps] = {"sum",	 "prod", "min",	 "max",	   "avg",
						 "band", "bor",	 "bxor", "maxloc", "minloc",
						 "land", "lor",	 "lxor"};

// reduce_many works on blocks of this many bytes per source: the dst block is re-read once per source and
// stays in L1 (32 KiB or more on every x86 core of interest) next to the streaming source block.
constexpr size_t kManyBlockBytes = 8 * 1024;

bool cpu_has_avx2()
{
#if IBVC_REDUCE_X86
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
	return false;
#endif
}

bool cpu_has_avx512()
{
#if IBVC_REDUCE_X86
	// __builtin_cpu_supports also checks that the OS saves the AVX-512 register state (XCR0).
	return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512dq");
#else
	return false;
#endif
}

Isa best_available()
{
	if (cpu_has_avx512())
		return Isa::avx512;
	if (cpu_has_avx2())
		return Isa::avx2;
	return Isa::scalar;
}

// Parses an IBV_COLL_EMU_ISA value. Returns false for an unknown value; *forced is false for "auto"/empty.
bool parse_isa(const char *value, bool *forced, Isa *isa)
{
	*forced = false;
	if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0)
		return true;
	for (Isa candidate : {Isa::scalar, Isa::avx2, Isa::avx512}) {
		if (std::strcmp(value, isa_name(candidate)) == 0) {
			*forced = true;
			*isa = candidate;
			return true;
		}
	}
	return false;
}

const char *check_isa(const char *value)
{
	bool forced;
	Isa isa;
	return parse_isa(value, &forced, &isa) ? nullptr : "expected auto, scalar, avx2 or avx512";
}

// Read once per process, at the first reduction (current_isa).
const util::ConfigVar kVars[] = {
	{"IBV_COLL_EMU_ISA", "auto",
	 "vector instructions for the reduce kernels: auto, scalar, avx2 or avx512 (read once per "
	 "process; one the CPU lacks falls back to the best it has)",
	 util::ConfigKind::string, 0, UINT64_MAX, check_isa},
};
const util::ConfigRegistrar kRegistrar({"emu reduce (kernels)", kVars}, 130);

// -1 until the first use resolves the environment; afterwards an Isa value. Atomic because reduce_fn may be
// called from several emulator threads while a test or benchmark calls set_reduce_isa.
std::atomic<int> g_isa{-1};

Isa current_isa()
{
	int v = g_isa.load(std::memory_order_acquire);
	if (v < 0) {
		const std::string value = util::config_text(kVars[0]);
		const std::string why = util::config_problem(kVars[0]);
		if (!why.empty())
			IBVC_WARN("reduce", "ignoring IBV_COLL_EMU_ISA=\"{}\": {}; using auto",
				  value, why);
		int expected = -1;
		const int chosen = static_cast<int>(detail::choose_isa(value.c_str()));
		// Another thread may have won the race (or called set_reduce_isa); its value stands.
		v = g_isa.compare_exchange_strong(expected, chosen, std::memory_order_acq_rel)
			    ? chosen
			    : expected;
	}
	return static_cast<Isa>(v);
}

const detail::KernelTable &table_for(Isa isa)
{
#if IBVC_REDUCE_X86
	if (isa == Isa::avx512) {
		// Built once: the generic AVX-512 table, with native FP16 kernels swapped in where the CPU has them.
		static const detail::KernelTable table = [] {
			detail::KernelTable t = detail::avx512_kernels();
#if IBVC_REDUCE_AVX512FP16
			if (__builtin_cpu_supports("avx512fp16")) {
				for (unsigned op = 0; op < kNumRedOps; ++op) {
					if (ReduceFn fn = detail::avx512fp16_kernel(
						    static_cast<RedOp>(op)))
						t.fn[op][static_cast<unsigned>(Dtype::float16)] =
							fn;
				}
			}
#endif
			return t;
		}();
		return table;
	}
	if (isa == Isa::avx2)
		return detail::avx2_kernels();
#endif
	(void)isa;
	return detail::scalar_kernels();
}

// Like the kernels, no alignment is needed of buf: results are finished
// where they travel, inside packets (a payload starts 60 bytes in).
template <Dtype D> void finalize(void *buf, size_t count, uint32_t divisor)
{
	using S = detail::storage_t<D>;
	uint8_t *p = static_cast<uint8_t *>(buf);
	auto each = [&](auto f) {
		for (size_t i = 0; i < count; ++i, p += sizeof(S)) {
			S v;
			std::memcpy(&v, p, sizeof(v));
			v = f(v);
			std::memcpy(p, &v, sizeof(v));
		}
	};
	if constexpr (D == Dtype::float16) {
		const float d = static_cast<float>(divisor);
		each([d](S v) {
			return detail::float_to_half_bits(detail::half_bits_to_float(v) / d);
		});
	} else if constexpr (D == Dtype::bfloat16) {
		const float d = static_cast<float>(divisor);
		each([d](S v) {
			return detail::float_to_bf16_bits(detail::bf16_bits_to_float(v) / d);
		});
	} else if constexpr (D == Dtype::float32 || D == Dtype::float64) {
		const S d = static_cast<S>(divisor);
		each([d](S v) { return S(v / d); });
	} else if constexpr (std::is_signed_v<S>) {
		// Divide in int64: mixing a signed sum with the uint32_t divisor would convert the sum to unsigned.
		const int64_t d = divisor;
		each([d](S v) { return static_cast<S>(static_cast<int64_t>(v) / d); });
	} else {
		const uint64_t d = divisor;
		each([d](S v) { return static_cast<S>(static_cast<uint64_t>(v) / d); });
	}
}

} // namespace

std::span<const util::ConfigVar> reduce_config_vars()
{
	return kVars;
}

namespace detail {

Isa choose_isa(const char *env_value)
{
	bool forced = false;
	Isa isa = Isa::scalar;
	if (parse_isa(env_value, &forced, &isa) && forced && isa_available(isa))
		return isa;
	return best_available();
}

} // namespace detail

size_t dtype_size(Dtype d)
{
	const auto i = static_cast<unsigned>(d);
	return i < kNumDtypes ? kDtypeSizes[i] : 0;
}

bool dtype_valid(uint8_t v)
{
	return v < kNumDtypes;
}
bool redop_valid(uint8_t v)
{
	return v < kNumRedOps;
}
bool op_supported(RedOp op, Dtype d)
{
	return detail::supported(op, d);
}
bool dtype_is_pair(Dtype d)
{
	return detail::is_pair(d);
}
bool op_order_free(RedOp op, Dtype d)
{
	if (!detail::supported(op, d))
		return false;
	switch (d) {
	case Dtype::int64_int32:
	case Dtype::int32_int32:
	case Dtype::int16_int32: return true;
	default: return static_cast<unsigned>(d) <= static_cast<unsigned>(Dtype::uint64);
	}
}

const char *dtype_name(Dtype d)
{
	const auto i = static_cast<unsigned>(d);
	return i < kNumDtypes ? kDtypeNames[i] : "invalid";
}

const char *redop_name(RedOp op)
{
	const auto i = static_cast<unsigned>(op);
	return i < kNumRedOps ? kRedOpNames[i] : "invalid";
}

ReduceFn reduce_fn(RedOp op, Dtype d)
{
	if (!detail::supported(op, d))
		return nullptr;
	return table_for(current_isa()).fn[static_cast<unsigned>(op)][static_cast<unsigned>(d)];
}

void avg_finalize(Dtype d, void *buf, size_t count, uint32_t divisor)
{
	if (divisor == 0)
		throw std::invalid_argument("avg_finalize: divisor must be non-zero");
	switch (d) {
	case Dtype::int8: return finalize<Dtype::int8>(buf, count, divisor);
	case Dtype::int16: return finalize<Dtype::int16>(buf, count, divisor);
	case Dtype::int32: return finalize<Dtype::int32>(buf, count, divisor);
	case Dtype::int64: return finalize<Dtype::int64>(buf, count, divisor);
	case Dtype::uint8: return finalize<Dtype::uint8>(buf, count, divisor);
	case Dtype::uint16: return finalize<Dtype::uint16>(buf, count, divisor);
	case Dtype::uint32: return finalize<Dtype::uint32>(buf, count, divisor);
	case Dtype::uint64: return finalize<Dtype::uint64>(buf, count, divisor);
	case Dtype::float16: return finalize<Dtype::float16>(buf, count, divisor);
	case Dtype::bfloat16: return finalize<Dtype::bfloat16>(buf, count, divisor);
	case Dtype::float32: return finalize<Dtype::float32>(buf, count, divisor);
	case Dtype::float64: return finalize<Dtype::float64>(buf, count, divisor);
	default: break; // the pairs: avg is not theirs
	}
	throw std::invalid_argument("avg_finalize: invalid dtype " +
				    std::to_string(static_cast<unsigned>(d)));
}

void reduce_many(RedOp op, Dtype d, void *dst, const void *const *src, unsigned n, size_t count)
{
	if (n == 0)
		throw std::invalid_argument("reduce_many: needs at least one source");
	const ReduceFn fn = reduce_fn(op, d);
	if (fn == nullptr)
		throw std::invalid_argument(std::string("reduce_many: unsupported op ") +
					    redop_name(op) + " on " + dtype_name(d));
	const size_t esize = dtype_size(d);
	if (n == 1) {
		if (dst != src[0] && count != 0)
			std::memcpy(dst, src[0], count * esize);
		return;
	}
	// Source-major within a block, block-major overall: every source is read once, dst is written once to
	// memory, and the fixed left-to-right order is preserved for every element.
	const size_t block = kManyBlockBytes / esize;
	auto *out = static_cast<unsigned char *>(dst);
	for (size_t first = 0; first < count; first += block) {
		const size_t n_elems = std::min(block, count - first);
		const size_t off = first * esize;
		auto at = [off](const void *p) {
			return static_cast<const unsigned char *>(p) + off;
		};
		fn(out + off, at(src[0]), at(src[1]), n_elems);
		for (unsigned s = 2; s < n; ++s)
			fn(out + off, out + off, at(src[s]), n_elems);
	}
}

Isa reduce_isa()
{
	return current_isa();
}

bool isa_available(Isa isa)
{
	switch (isa) {
	case Isa::scalar: return true;
	case Isa::avx2: return cpu_has_avx2();
	case Isa::avx512: return cpu_has_avx512();
	}
	return false;
}

void set_reduce_isa(Isa isa)
{
	g_isa.store(static_cast<int>(isa_available(isa) ? isa : best_available()),
		    std::memory_order_release);
}

const char *isa_name(Isa isa)
{
	switch (isa) {
	case Isa::scalar: return "scalar";
	case Isa::avx2: return "avx2";
	case Isa::avx512: return "avx512";
	}
	return "invalid";
}

float half_to_float(uint16_t h)
{
	return detail::half_bits_to_float(h);
}
uint16_t float_to_half(float f)
{
	return detail::float_to_half_bits(f);
}
float bf16_to_float(uint16_t h)
{
	return detail::bf16_bits_to_float(h);
}
uint16_t float_to_bf16(float f)
{
	return detail::float_to_bf16_bits(f);
}

} // namespace ibv_coll::emu
