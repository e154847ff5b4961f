// libnccl-net-ibv_coll.so: the configuration table, the logger and the
// process's device (plugin.h).
#include "plugin.h"

#include "switch_list.h"
#include "util/config.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ibv_coll::nccl {

namespace {

using util::ConfigKind;
using util::ConfigVar;

enum { kDevice, kSwitch, kTopology, kSegUnits, kTimeoutMs, kMaxBytes, kCudaLib, kCount };

const ConfigVar kVars[kCount] = {
	{"IBV_COLL_NCCL_DEVICE", "",
	 "the device the plugin opens (empty: the first crxe device of another interface, else "
	 "crxe_lo)",
	 ConfigKind::string},
	{"IBV_COLL_NCCL_SWITCH", "",
	 "HOST:PORT[,HOST:PORT...]: the aggregation switches (ibv_coll_switchd) CollNet "
	 "communicators reduce through, one per plane (empty: round the ring)",
	 ConfigKind::string, 0, UINT64_MAX, addon::check_switches},
	{"IBV_COLL_NCCL_TOPOLOGY", "",
	 "ring, switch or auto; switch and auto need IBV_COLL_NCCL_SWITCH (empty: auto with a "
	 "switch, ring without)",
	 ConfigKind::string, 0, UINT64_MAX, addon::check_topology},
	{"IBV_COLL_NCCL_SEG_UNITS", "0",
	 "Seg units each CollNet communicator takes in the NIC and the switch (0: 64 per other "
	 "rank, 128 to 512)",
	 ConfigKind::size, 0, 1u << 20},
	{"IBV_COLL_NCCL_TIMEOUT_MS", "3600000",
	 "a collective that makes no progress this long fails, a rank that comes this late to "
	 "it included (0: the device's default)",
	 ConfigKind::size, 0, 3600000},
	{"IBV_COLL_NCCL_MAX_BYTES", "0",
	 "the most bytes per rank NCCL may give one CollNet request (maxCollBytes; 0: what the "
	 "device takes)",
	 ConfigKind::size},
	{"IBV_COLL_NCCL_CUDA_LIB", "",
	 "the CUDA driver library the plugin stages GPU memory with (empty: libcuda.so.1; none "
	 "found: host memory only)",
	 ConfigKind::string},
};

// Into libibv_coll's registry (as libibv_coll_mpi does: util/config.h).
const util::ConfigTable kTable{"nccl (libnccl-net-ibv_coll)", kVars};
const struct Registrar {
	Registrar() { ibv_coll_private_register_config(&kTable, 310); }
} kRegistrar;

std::mutex g_lock;
ncclDebugLogger_t g_logger;
bool g_ready;
unsigned g_users; // successful setup() calls not yet released
Config g_cfg;
Device g_dev;

void vlog(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt,
	  va_list ap)
{
	char buf[512];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	if (g_logger)
		g_logger(level, flags, file, line, "NET/ibv_coll: %s", buf);
	else if (level == NCCL_LOG_WARN)
		fprintf(stderr, "NET/ibv_coll: %s\n", buf);
}

int load_config(Config *c, std::string *err)
{
	addon::VarReader r(kVars);
	if (int e = r.check(err))
		return e;
	Config n;
	n.device = r.text(kDevice);
	addon::parse_switches(r.text(kSwitch).c_str(), &n.switches);
	if (!addon::topology_for(r.text(kTopology).c_str(), !n.switches.empty(), &n.topology)) {
		*err = "IBV_COLL_NCCL_TOPOLOGY=" + r.text(kTopology) +
		       ": not understood (switch and auto need IBV_COLL_NCCL_SWITCH)";
		return EINVAL;
	}
	n.seg_units = uint32_t(r.size(kSegUnits));
	n.timeout_ms = uint32_t(r.size(kTimeoutMs));
	n.max_bytes = r.size(kMaxBytes);
	n.cuda_lib = r.text(kCudaLib);
	*c = std::move(n);
	return 0;
}

// The named device, else the first crxe device of another interface,
// else crxe_lo (as libibv_coll_mpi picks).
ibv_coll_context *open_named(const std::string &want, std::string *name)
{
	int n = 0;
	ibv_coll_device **list = ibv_get_coll_device_list(&n);
	ibv_coll_device *pick = nullptr, *lo = nullptr;
	for (int i = 0; list && i < n; i++) {
		const char *nm = ibv_get_coll_device_name(list[i]);
		if (!want.empty() ? want == nm
				  : (!pick && !strncmp(nm, "crxe_", 5) && strcmp(nm, "crxe_lo")))
			pick = list[i];
		if (!strcmp(nm, "crxe_lo"))
			lo = list[i];
	}
	if (!pick && want.empty())
		pick = lo;
	ibv_coll_context *ctx = pick ? ibv_open_coll_device(pick) : nullptr;
	int err = pick ? errno : ENODEV;
	if (pick)
		*name = ibv_get_coll_device_name(pick);
	ibv_free_coll_device_list(list);
	errno = err;
	return ctx;
}

ncclResult_t open_device()
{
	Device d;
	const std::string &want = g_cfg.device;
	if (!(d.ctx = open_named(want, &d.name))) {
		NCCL_PLUGIN_WARN("cannot open device %s: %s",
				 want.empty() ? "crxe_*" : want.c_str(), strerror(errno));
		return ncclSystemError;
	}
	ibv_coll_device_attr da{};
	if (!(d.pd = ibv_alloc_coll_pd(d.ctx)) || ibv_query_coll_caps(d.ctx, &d.caps) ||
	    ibv_query_coll_port(d.ctx, 1, &d.port) || ibv_query_coll_gid(d.ctx, 1, 0, &d.gid) ||
	    ibv_query_coll_device(d.ctx, &da)) {
		NCCL_PLUGIN_WARN("device %s: setup: %s", d.name.c_str(), strerror(errno));
		if (d.pd)
			ibv_dealloc_coll_pd(d.pd);
		ibv_close_coll_device(d.ctx);
		return ncclSystemError;
	}
	d.guid = da.node_guid;
	g_dev = std::move(d);
	return ncclSuccess;
}

} // namespace

void warn(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(NCCL_LOG_WARN, ~0ul, file, line, fmt, ap);
	va_end(ap);
}

void info(unsigned long flags, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(NCCL_LOG_INFO, flags, file, line, fmt, ap);
	va_end(ap);
}

ncclResult_t setup(ncclDebugLogger_t logger)
{
	std::lock_guard<std::mutex> g(g_lock);
	if (logger)
		g_logger = logger;
	if (g_ready) {
		g_users++;
		return ncclSuccess;
	}
	std::string err;
	if (load_config(&g_cfg, &err)) {
		NCCL_PLUGIN_WARN("%s", err.c_str());
		return ncclInvalidArgument;
	}
	ncclResult_t r = open_device();
	if (r == ncclSuccess) {
		g_ready = true;
		g_users = 1;
		NCCL_PLUGIN_INFO(NCCL_INIT | NCCL_NET, "using %s (%s), %zu switch plane(s)",
				 g_dev.name.c_str(), ibv_coll_version(), g_cfg.switches.size());
	}
	return r;
}

ncclResult_t release()
{
	std::lock_guard<std::mutex> g(g_lock);
	if (!g_ready || !g_users || --g_users)
		return ncclSuccess;
	// A comm NCCL did not close keeps the PD (EBUSY) or the context busy:
	// then the device stays open, as it would without finalize.
	if (ibv_dealloc_coll_pd(g_dev.pd)) {
		NCCL_PLUGIN_INFO(NCCL_NET, "finalize: registrations left: the device stays open");
		return ncclSuccess;
	}
	if (ibv_close_coll_device(g_dev.ctx)) {
		NCCL_PLUGIN_INFO(NCCL_NET, "finalize: queue pairs left: the device stays open");
		g_dev.pd = ibv_alloc_coll_pd(g_dev.ctx);
		if (!g_dev.pd) {
			NCCL_PLUGIN_WARN("finalize: device %s: %s", g_dev.name.c_str(),
					 strerror(errno));
			return ncclSystemError;
		}
		return ncclSuccess;
	}
	g_dev = Device{};
	g_ready = false;
	return ncclSuccess;
}

bool ready()
{
	std::lock_guard<std::mutex> g(g_lock);
	return g_ready;
}

const Config &config()
{
	return g_cfg;
}

Device &device()
{
	return g_dev;
}

} // namespace ibv_coll::nccl
