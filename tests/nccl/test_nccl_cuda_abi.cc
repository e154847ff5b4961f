// nccl/cuda_api.h against the CUDA headers, where the build finds them
// (CUDA is optional: this test is built only then).  Each call's shape —
// its return and parameters, with the driver's enums as the int they are
// passed as and its opaque handles as void * — must match cuda.h's
// declaration; the constants must be cuda.h's; and resolving the table
// from the toolkit's libcuda stub must give each field the symbol of its
// name, whatever order kCuSymbols lists them in.
#include "cuda_api.h"

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <type_traits>

namespace {

namespace ic = ibv_coll::nccl::cuda;

template <typename T> struct Arg {
	using type = std::conditional_t<std::is_enum_v<T>, int, T>;
};
template <typename T> struct Arg<T *> {
	using type = std::conditional_t<std::is_class_v<T>, void *, typename Arg<T>::type *>;
};
template <typename T> struct Arg<const T *> {
	using type = const typename Arg<T>::type *;
};
template <typename F> struct Shape;
template <typename R, typename... A> struct Shape<R (*)(A...)> {
	using type = typename Arg<R>::type (*)(typename Arg<A>::type...);
};

#define IBVC_SAME_SHAPE(field, fn)                                             \
	static_assert(std::is_same_v<Shape<decltype(&fn)>::type,               \
				     Shape<decltype(ic::CuApi::field)>::type>, \
		      #fn " does not match CuApi::" #field)

IBVC_SAME_SHAPE(init, cuInit);
IBVC_SAME_SHAPE(device_count, cuDeviceGetCount);
IBVC_SAME_SHAPE(pointer_attr, cuPointerGetAttribute);
IBVC_SAME_SHAPE(host_alloc, cuMemAllocHost_v2);
IBVC_SAME_SHAPE(host_free, cuMemFreeHost);
IBVC_SAME_SHAPE(stream_create, cuStreamCreate);
IBVC_SAME_SHAPE(stream_destroy, cuStreamDestroy_v2);
IBVC_SAME_SHAPE(stream_sync, cuStreamSynchronize);
IBVC_SAME_SHAPE(dtoh_async, cuMemcpyDtoHAsync_v2);
IBVC_SAME_SHAPE(htod_async, cuMemcpyHtoDAsync_v2);
IBVC_SAME_SHAPE(event_create, cuEventCreate);
IBVC_SAME_SHAPE(event_record, cuEventRecord);
IBVC_SAME_SHAPE(event_query, cuEventQuery);
IBVC_SAME_SHAPE(event_destroy, cuEventDestroy_v2);
IBVC_SAME_SHAPE(ctx_push, cuCtxPushCurrent_v2);
IBVC_SAME_SHAPE(ctx_pop, cuCtxPopCurrent_v2);
IBVC_SAME_SHAPE(ctx_current, cuCtxGetCurrent);
IBVC_SAME_SHAPE(error_string, cuGetErrorString);

static_assert(sizeof(CUresult) == sizeof(ic::CUresult) &&
	      sizeof(CUpointer_attribute) == sizeof(int));
static_assert(std::is_same_v<CUdeviceptr, ic::CuDevPtr>);
static_assert(CUDA_ERROR_NOT_READY == ic::kCuNotReady);
static_assert(CU_POINTER_ATTRIBUTE_CONTEXT == ic::kCuPointerAttrContext);
static_assert(CU_POINTER_ATTRIBUTE_MEMORY_TYPE == ic::kCuPointerAttrMemoryType);
static_assert(CU_MEMORYTYPE_DEVICE == ic::kCuMemoryTypeDevice);
static_assert(CU_STREAM_NON_BLOCKING == ic::kCuStreamNonBlocking);
static_assert(CU_EVENT_DISABLE_TIMING == ic::kCuEventDisableTiming);

TEST(NcclCudaAbi, EveryFieldResolvesToTheSymbolOfItsName)
{
	void *lib = dlopen(CUDA_STUB_PATH, RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	ic::CuApi a{};
	ASSERT_TRUE(ic::cu_resolve(lib, &a));
	const std::pair<void *, const char *> want[] = {
		{reinterpret_cast<void *>(a.init), "cuInit"},
		{reinterpret_cast<void *>(a.device_count), "cuDeviceGetCount"},
		{reinterpret_cast<void *>(a.pointer_attr), "cuPointerGetAttribute"},
		{reinterpret_cast<void *>(a.host_alloc), "cuMemAllocHost_v2"},
		{reinterpret_cast<void *>(a.host_free), "cuMemFreeHost"},
		{reinterpret_cast<void *>(a.stream_create), "cuStreamCreate"},
		{reinterpret_cast<void *>(a.stream_destroy), "cuStreamDestroy_v2"},
		{reinterpret_cast<void *>(a.stream_sync), "cuStreamSynchronize"},
		{reinterpret_cast<void *>(a.dtoh_async), "cuMemcpyDtoHAsync_v2"},
		{reinterpret_cast<void *>(a.htod_async), "cuMemcpyHtoDAsync_v2"},
		{reinterpret_cast<void *>(a.event_create), "cuEventCreate"},
		{reinterpret_cast<void *>(a.event_record), "cuEventRecord"},
		{reinterpret_cast<void *>(a.event_query), "cuEventQuery"},
		{reinterpret_cast<void *>(a.event_destroy), "cuEventDestroy_v2"},
		{reinterpret_cast<void *>(a.ctx_push), "cuCtxPushCurrent_v2"},
		{reinterpret_cast<void *>(a.ctx_pop), "cuCtxPopCurrent_v2"},
		{reinterpret_cast<void *>(a.ctx_current), "cuCtxGetCurrent"},
		{reinterpret_cast<void *>(a.error_string), "cuGetErrorString"}};
	for (auto [p, name] : want)
		EXPECT_EQ(p, dlsym(lib, name)) << name;
	dlclose(lib);
}

} // namespace
