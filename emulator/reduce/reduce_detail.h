// Internal glue between the ISA-specific kernel translation units and the dispatcher (reduce.cc).
// Not part of the project-facing interface; tests may include it to reach choose_isa().
#pragma once

#include "reduce/reduce.h"

namespace ibv_coll::emu::detail {

// One function pointer per (op, dtype); nullptr where !op_supported. Tables are immutable after construction
// so they can be shared between threads without synchronisation.
struct KernelTable {
	ReduceFn fn[kNumRedOps][kNumDtypes];
};

const KernelTable &scalar_kernels();
#if IBVC_REDUCE_X86
const KernelTable &avx2_kernels();
const KernelTable &avx512_kernels();
#endif
#if IBVC_REDUCE_AVX512FP16
// Native AVX512-FP16 float16 kernels layered over the AVX-512 table where the CPU has the extension
// (sum/prod/avg only; everything else returns nullptr and keeps the generic AVX-512 kernel).
ReduceFn avx512fp16_kernel(RedOp);
#endif

// Resolves an IBV_COLL_EMU_ISA value (nullptr = unset) to the ISA that will be used on this CPU.
// Unknown values mean auto; a forced but unavailable ISA falls back to the best available one.
Isa choose_isa(const char *env_value);

} // namespace ibv_coll::emu::detail
