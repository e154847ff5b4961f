// libnccl-net-ibv_coll.so: what the plugin's parts share (ibv_coll_nccl(7)).
// The point-to-point net (net_p2p.cc, RC QPs) and the collective net
// (collnet.cc, one collective QP per CollNet communicator) run on one
// device per process, opened at the first init and named by
// IBV_COLL_NCCL_DEVICE; they log through NCCL's logger.
#pragma once

#include "nccl_abi.h"

#include <ibv_coll/ibv_coll.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace ibv_coll::nccl {

// IBV_COLL_NCCL_*, read once (configuration registry, ibv_coll_nccl(7)).
struct Config {
	std::string device; // empty: the first crxe device of another interface, else crxe_lo
	std::vector<ibv_coll_switch_addr> switches; // one per plane
	int topology = IBV_COLL_TOPO_RING;
	uint32_t seg_units = 0;	       // each CollNet communicator's Seg units (0: by its size)
	uint32_t timeout_ms = 3600000; // a rank may come an hour late (a checkpoint): NCCL waits
	uint64_t max_bytes = 0;	       // 0: what the device takes per collective
	std::string cuda_lib;	       // empty: libcuda.so.1
};

// The process's device, opened by the first init of either net.
struct Device {
	ibv_coll_context *ctx = nullptr;
	ibv_coll_pd *pd = nullptr;
	ibv_coll_caps caps{};
	ibv_coll_port_attr port{};
	ibv_gid gid{};
	std::string name;
	uint64_t guid = 0;
};

// Open the device and read the configuration, once; ncclSuccess, or an
// error after one WARN line.  The logger may be NULL (stderr then).
ncclResult_t setup(ncclDebugLogger_t logger);
// What finalize (v11+) calls for each successful setup(): the last one
// closes the device when nothing of it is left (else it stays open until
// the process ends).
ncclResult_t release();
// The configuration and device after a successful setup().
const Config &config();
Device &device();
// The device is open (a setup() not yet released).
bool ready();

// Fill the fields every version's properties share.
template <typename Props> void fill_properties(Props *p);

void warn(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void info(unsigned long flags, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

} // namespace ibv_coll::nccl

#define NCCL_PLUGIN_WARN(...) ::ibv_coll::nccl::warn(__FILE__, __LINE__, __VA_ARGS__)
#define NCCL_PLUGIN_INFO(flags, ...) ::ibv_coll::nccl::info(flags, __FILE__, __LINE__, __VA_ARGS__)

namespace ibv_coll::nccl {

template <typename Props> void fill_properties(Props *p)
{
	Device &d = device();
	p->name = const_cast<char *>(d.name.c_str());
	p->pciPath = nullptr; // a software device: NCCL places it by the CPU
	p->guid = d.guid;
	p->ptrSupport = NCCL_PTR_HOST;
	p->regIsGlobal = 0;
	p->forceFlush = 0;
	// The port's rate when it has one, else what loopback UDP moves (~10 Gb/s).
	p->speed = 10000;
	p->port = 1;
	p->latency = 0;
	p->maxComms = 65536;
	p->maxRecvs = 1;
	p->netDeviceType = NCCL_NET_DEVICE_HOST;
	p->netDeviceVersion = 0;
	p->vProps.ndevs = 1;
	p->vProps.devs[0] = 0;
	uint64_t most = d.caps.max_count_bytes ? d.caps.max_count_bytes : UINT32_MAX;
	if (most > UINT32_MAX)
		most = UINT32_MAX; // an sge's length
	p->maxP2pBytes = size_t(most);
	p->maxCollBytes = size_t(
		config().max_bytes && config().max_bytes < most ? config().max_bytes : most);
}

// Fn as NCCL may call it: NCCL is C, so no exception leaves the plugin.
template <auto Fn> struct Entry;
template <typename... A, ncclResult_t (*Fn)(A...)> struct Entry<Fn> {
	static ncclResult_t call(A... a) noexcept
	{
		try {
			return Fn(a...);
		} catch (const std::bad_alloc &) {
			NCCL_PLUGIN_WARN("out of memory");
			return ncclSystemError;
		} catch (const std::exception &e) {
			NCCL_PLUGIN_WARN("unexpected error: %s", e.what());
			return ncclInternalError;
		} catch (...) {
			NCCL_PLUGIN_WARN("unexpected exception");
			return ncclInternalError;
		}
	}
};
// E<f>: f behind that guard, for the tables NCCL calls.
template <auto Fn> constexpr auto E = &Entry<Fn>::call;

// makeVDevice of every table: one physical device, no virtual ones.
template <typename VProps> ncclResult_t no_vdevice(int *, VProps *)
{
	NCCL_PLUGIN_INFO(NCCL_NET | NCCL_INIT, "makeVDevice: one device only, no virtual ones");
	return ncclInvalidUsage;
}

} // namespace ibv_coll::nccl
