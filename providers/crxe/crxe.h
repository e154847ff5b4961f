// crxe: the soft-RoCE-like provider.  Private objects extend the core's,
// and talk to the emulated NIC only through its command interface,
// queues, doorbells and CQ rings.
#pragma once

#include "coll/coll_job.h"
#include "devd/devd_client.h"
#include "drv.h"
#include "nic/nic.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ibv_coll::crxe {

// The objects are the driver layer's, shared with the verbs provider.
using drv::Cq;
using drv::kMaxCqe;
using drv::kMaxMsg;
using drv::kMaxQpWr;
using drv::kMaxSge;
using drv::Mr;
using drv::Pd;
using drv::Qp;

struct Netdev {
	std::string name;
	int ifindex = 0;
	uint32_t mtu = 0;
	bool up = false; // administratively up and carrier on
	bool loopback = false;
	std::vector<emu::IpAddr> addrs; // IPv4 (mapped) first, then IPv6, no link-local
};

// All netdevs, or errno.
int list_netdevs(std::vector<Netdev> *out);
// Re-read one netdev's link state (the port state follows it).
int netdev_state(const std::string &name, Netdev *out);

struct CrxeConfig {
	std::vector<std::string> devices; // netdev names; empty: all
	uint16_t udp_port = 4791;
	bool port_fallback = true;
	// Contexts are clients of the host's shared device (ibv_coll_devd).
	// Read here only; programs learn it from the context's capabilities
	// (IBV_COLL_CAPS_SHARED_DEVICE), never from the variable.
	bool shared = false;
};
std::span<const util::ConfigVar> config_vars();
int load_config(CrxeConfig *out);

// The emulated NIC's parameters for a netdev (by name), from the
// configuration and the netdev's state: what the in-process device and
// ibv_coll_devd create a NIC with.  0 or errno.
int nic_params(const std::string &netdev, emu::NicParams *out);
// The daemon started when none serves a netdev (IBV_COLL_CRXE_DEVD): the
// path it names, or with "auto" (the default) the first executable of
// devd_candidates(); and what to set when that fails.
devd::DevdStart devd_start(const std::string &netdev);
std::vector<std::string> devd_candidates();

// The largest IBTA MTU (bytes) whose packets fit a netdev MTU.
uint32_t active_mtu_for(uint32_t netdev_mtu);

struct Device : ibv_coll_device {
	Netdev nd;
};

struct Context : core::Context {
	Device *dev = nullptr;
	// The NIC: this process's own, or the host's shared one in
	// ibv_coll_devd (IBV_COLL_CRXE_SHARED=1) reached through a client.
	std::unique_ptr<emu::Device> nic;
	bool shared = false; // nic is the shared device's client
	std::vector<emu::IpAddr> gids;
};

inline Context *to_crxe(core::Context *c)
{
	return static_cast<Context *>(c);
}
inline Context *ctx_of(ibv_coll_context *c)
{
	return to_crxe(core::to_core(c));
}

// The device's own operations (crxe_device.cc, crxe.cc); the objects'
// operations are the driver layer's (drv.h).
void discover(std::vector<ibv_coll_device *> &out);
core::Context *open_device(ibv_coll_device *dev);
int close_device(core::Context *ctx);
int query_device(core::Context *ctx, ibv_coll_device_attr *attr);
int query_port(core::Context *ctx, uint8_t port, ibv_coll_port_attr *attr);
int query_gid(core::Context *ctx, uint8_t port, int index, ibv_gid *gid);
core::Pd *alloc_pd(core::Context *ctx);
core::Cq *create_cq(core::Context *ctx, int cqe, core::CompChannel *ch);
int query_caps(core::Context *ctx, ibv_coll_caps *caps);
int query_counters(core::Context *ctx, ibv_coll_counters *c);

extern const core::Provider provider;

} // namespace ibv_coll::crxe
