// The few calls of the CUDA driver API the plugin's staging uses
// (cuda_stage.cc), declared from the driver API's reference: CUresult,
// CUpointer_attribute and the flags are C enums (int-sized), CUdeviceptr
// a 64-bit unsigned integer, streams, events and contexts opaque
// pointers.  The names are the symbols libcuda.so.1 exports (the _v2 ones
// for the 64-bit interface).  tests/nccl/test_nccl_cuda_abi.cc checks
// these against cuda.h where the CUDA headers are found at build time;
// tests/nccl/fake_cuda.cc implements them for the tests without a GPU.
#pragma once

#include <dlfcn.h>

#include <cstddef>

namespace ibv_coll::nccl::cuda {

using CUresult = int;
using CuDevPtr = unsigned long long;

constexpr CUresult kCuNotReady = 600;	      // CUDA_ERROR_NOT_READY
constexpr int kCuPointerAttrContext = 1;      // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kCuPointerAttrMemoryType = 2;   // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kCuMemoryTypeDevice = 2;   // CU_MEMORYTYPE_DEVICE
constexpr unsigned kCuStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
constexpr unsigned kCuEventDisableTiming = 2; // CU_EVENT_DISABLE_TIMING

struct CuApi {
	CUresult (*init)(unsigned flags);
	CUresult (*device_count)(int *count);
	CUresult (*pointer_attr)(void *data, int attribute, CuDevPtr ptr);
	CUresult (*host_alloc)(void **p, size_t bytes);
	CUresult (*host_free)(void *p);
	CUresult (*stream_create)(void **stream, unsigned flags);
	CUresult (*stream_destroy)(void *stream);
	CUresult (*stream_sync)(void *stream);
	CUresult (*dtoh_async)(void *dst, CuDevPtr src, size_t bytes, void *stream);
	CUresult (*htod_async)(CuDevPtr dst, const void *src, size_t bytes, void *stream);
	CUresult (*event_create)(void **event, unsigned flags);
	CUresult (*event_record)(void *event, void *stream);
	CUresult (*event_query)(void *event);
	CUresult (*event_destroy)(void *event);
	CUresult (*ctx_push)(void *ctx);
	CUresult (*ctx_pop)(void **ctx);
	CUresult (*ctx_current)(void **ctx);
	CUresult (*error_string)(CUresult error, const char **str);
};

// The driver's symbol of each entry, in CuApi's order.
inline constexpr const char *kCuSymbols[] = {"cuInit",
					     "cuDeviceGetCount",
					     "cuPointerGetAttribute",
					     "cuMemAllocHost_v2",
					     "cuMemFreeHost",
					     "cuStreamCreate",
					     "cuStreamDestroy_v2",
					     "cuStreamSynchronize",
					     "cuMemcpyDtoHAsync_v2",
					     "cuMemcpyHtoDAsync_v2",
					     "cuEventCreate",
					     "cuEventRecord",
					     "cuEventQuery",
					     "cuEventDestroy_v2",
					     "cuCtxPushCurrent_v2",
					     "cuCtxPopCurrent_v2",
					     "cuCtxGetCurrent",
					     "cuGetErrorString"};
static_assert(sizeof(CuApi) == sizeof(kCuSymbols) / sizeof(kCuSymbols[0]) * sizeof(void *));

// Every entry from the library, or false when one is missing.
inline bool cu_resolve(void *lib, CuApi *api)
{
	void **slot = reinterpret_cast<void **>(api);
	for (const char *name : kCuSymbols)
		if (!(*slot++ = dlsym(lib, name)))
			return false;
	return true;
}

} // namespace ibv_coll::nccl::cuda
