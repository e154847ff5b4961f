// Element-wise reduction kernels for the emulated collective-offload NIC.
//
// The data cache & compute module combines "Seg units" of peers with these kernels. Results must be
// bit-identical whatever ISA a node happens to run on, because different ranks of one collective may be
// reduced on different machines; every ISA path therefore implements exactly the scalar semantics below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ibv_coll::util {
struct ConfigVar;
}

namespace ibv_coll::emu {

// Numeric values are part of the wire/verbs ABI of the emulated device: never renumber.
enum class Dtype : uint8_t {
	int8 = 0,
	int16 = 1,
	int32 = 2,
	int64 = 3,
	uint8 = 4,
	uint16 = 5,
	uint32 = 6,
	uint64 = 7,
	float16 = 8,
	bfloat16 = 9,
	float32 = 10,
	float64 = 11,
	// Value-index pairs for maxloc/minloc, laid out as the C struct { value; int32_t index; } (padded to the
	// value's alignment, as MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT and MPI_SHORT_INT are).
	float32_int32 = 12, // 8 bytes
	float64_int32 = 13, // 16 bytes, 4 of padding
	int64_int32 = 14,   // 16 bytes, 4 of padding
	int32_int32 = 15,   // 8 bytes
	int16_int32 = 16,   // 8 bytes, 2 of padding after the value
};

enum class RedOp : uint8_t {
	sum = 0,
	prod = 1,
	min = 2,
	max = 3,
	avg = 4,
	band = 5,
	bor = 6,
	bxor = 7,
	maxloc = 8, // value-index pairs only
	minloc = 9,
	land = 10, // logical ops: integer types only
	lor = 11,
	lxor = 12,
};

constexpr unsigned kNumDtypes = 17, kNumRedOps = 13;

size_t dtype_size(Dtype); // bytes per element; 0 for an invalid value
bool dtype_valid(uint8_t);
bool redop_valid(uint8_t);
// band/bor/bxor and land/lor/lxor only on integer types; maxloc/minloc only on (and only they on) the pairs;
// sum, prod, min, max and avg on the 12 numeric types.
bool op_supported(RedOp, Dtype);
bool dtype_is_pair(Dtype);
// Whether op's result on dtype has the same bits whatever the order its operands are combined in: integer
// arithmetic (it wraps), bitwise and logical ops, avg's integer sum, and maxloc/minloc on integer values (a total
// order on whole pairs).  Not floats: their sum and prod are not associative, and which NaN a result carries
// depends on which operand came first (also for the float pairs, whose NaNs tie).  The switch folds such
// partials as they arrive instead of in its fixed child order.
bool op_order_free(RedOp, Dtype);
const char *dtype_name(Dtype); // "int8", ..., "invalid" for out-of-range values
const char *redop_name(RedOp);

// dst[i] = op(a[i], b[i]) for i < count. dst may equal a or b (exact aliasing), otherwise the buffers do not
// overlap. Pointers need no alignment (applications' buffers may start at any byte). For avg this is the sum step (avg = sum, then avg_finalize
// once at the end).
//
// Semantics (identical on every ISA):
//  * integers: sum/prod wrap modulo 2^bits; min/max signed or unsigned as the type; band/bor/bxor bitwise.
//  * float32/float64: sum/prod are single IEEE operations (never contracted into FMA). min/max: a NaN a wins,
//    then a NaN b, else the smaller/larger value with -0.0 ordered below +0.0.
//  * float16/bfloat16: both operands converted to float exactly, the float32 rule applied, result rounded to
//    nearest even. NaN results are NaN, but their payload/sign is not part of the contract.
//  * land/lor/lxor: 1 or 0 in the type, from each operand's truth (non-zero).
//  * maxloc/minloc: the pair with the larger/smaller value; equal values give the lower index (MPI's rule). Values
//    order as in max/min (-0.0 below +0.0) except that a NaN value beats every number in both (NaN propagates,
//    as through max and min) and NaNs tie with each other. A full tie (the same value bits and index) keeps a.
//    The result's padding bytes are zero. This is a total order, so the result does not depend on the order in
//    which the network combines the ranks.
using ReduceFn = void (*)(void *dst, const void *a, const void *b, size_t count);
ReduceFn reduce_fn(RedOp, Dtype); // nullptr if !op_supported (or either value is out of range)

// avg finalisation: buf[i] = buf[i] / divisor. Integers: C truncating division (toward zero) of the wrapped sum;
// floats: division in the type's arithmetic (divisor converted to the type; fp16/bf16 via float, rounded to
// nearest even). Throws std::invalid_argument for divisor == 0 or an invalid dtype.
void avg_finalize(Dtype, void *buf, size_t count, uint32_t divisor);

// Reduces n >= 1 sources into dst in source order:
//   dst = op(...op(op(src[0], src[1]), src[2])..., src[n-1]).
// dst may equal src[0] (and only src[0]). One pass over memory, blocked so intermediates stay in cache.
// This is the NIC's intra-node aggregation of k local ranks; the fixed order is what makes results bit-identical.
// For avg only the sum is formed (the caller divides once, by the global rank count, with avg_finalize).
// Throws std::invalid_argument if n == 0 or !op_supported(op, dtype).
void reduce_many(RedOp, Dtype, void *dst, const void *const *src, unsigned n, size_t count);

// ISA selection: chosen once at first use from the CPU (__builtin_cpu_supports) and the environment variable
// IBV_COLL_EMU_ISA = auto|scalar|avx2|avx512 (default auto; a forced ISA the CPU lacks falls back to the best
// available one; an unknown value is logged and means auto), the one variable of reduce_config_vars(). avx2 needs AVX2 + F16C; avx512 needs AVX-512 F/BW/VL/DQ and additionally uses AVX512-FP16
// arithmetic for float16 sum/prod/avg where the CPU has it. scalar is portable C++ (compiler-vectorised at most
// for the baseline target).
enum class Isa : uint8_t { scalar, avx2, avx512 };
Isa reduce_isa(); // the ISA in use
bool isa_available(Isa);
void set_reduce_isa(
	Isa); // for tests/benchmarks; falls back to the best available ISA if unavailable
const char *isa_name(Isa);
// The reduce kernels' configuration table (IBV_COLL_EMU_ISA), registered in the configuration registry.
std::span<const util::ConfigVar> reduce_config_vars();

// fp16/bf16 helpers: scalar and exact. float -> half/bf16 rounds to nearest even, handles denormals and
// overflow to Inf exactly; NaN stays NaN (and becomes quiet) in both directions.
float half_to_float(uint16_t);
uint16_t float_to_half(float);
float bf16_to_float(uint16_t);
uint16_t float_to_bf16(float);

} // namespace ibv_coll::emu
