// Portable kernels, compiled for the baseline target: the fallback on every CPU and the reference the SIMD
// paths must match bit for bit.
#include "reduce/reduce_detail.h"
#include "reduce/scalar_ops.h"

namespace ibv_coll::emu::detail {

const KernelTable &scalar_kernels()
{
	static constexpr KernelTable table = make_table<ScalarKernel>();
	return table;
}

} // namespace ibv_coll::emu::detail
