// crxe: the soft-RoCE-like provider.  Private objects extend the core's,
// and talk to the emulated NIC only through its command interface,
// queues, doorbells and CQ rings.
#pragma once

#include "driver.h"
#include "coll/coll_job.h"
#include "nic/nic.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ibv_coll::crxe {

struct Netdev {
	std::string name;
	int ifindex = 0;
	uint32_t mtu = 0;
	bool up = false;      // administratively up and carrier on
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
};
std::span<const util::ConfigVar> config_vars();
int load_config(CrxeConfig *out);

// The largest IBTA MTU (bytes) whose packets fit a netdev MTU.
uint32_t active_mtu_for(uint32_t netdev_mtu);

struct Device : ibv_coll_device {
	Netdev nd;
};

struct Context : core::Context {
	Device *dev = nullptr;
	std::unique_ptr<emu::Nic> nic;
};

// Every object knows its device, so that the collective half also serves
// a provider that runs the engine in front of another device (verbs).
struct Pd : core::Pd {
	emu::Nic *nic = nullptr;
	uint32_t pdn = 0;
};

struct Mr : core::Mr {
	emu::Nic *nic = nullptr;
};

struct Cq : core::Cq {
	emu::Nic *nic = nullptr;
	std::unique_ptr<emu::Queue> ring;
	emu::Cq *hw = nullptr;
	std::mutex mu; // pollers
};

struct Qp : core::Qp {
	emu::Nic *nic = nullptr;
	uint32_t pdn = 0;
	std::unique_ptr<emu::Queue> sq, rq;
	emu::Qp *hw = nullptr;
	ibv_coll_qp_init_attr init{};
	ibv_coll_qp_cap cap{}; // as allocated
	std::mutex sq_mu, rq_mu;
	// Collective QPs: what posting needs to know of the job.
	uint32_t path_mtu = 0;
	uint16_t local_ranks = 0;
	uint32_t first_rank = 0, total_ranks = 0;
	uint32_t last_mid = 0;
	bool have_job = false;
};

inline Context *to_crxe(core::Context *c) { return static_cast<Context *>(c); }
inline Pd *to_crxe(core::Pd *p) { return static_cast<Pd *>(p); }
inline Mr *to_crxe(core::Mr *p) { return static_cast<Mr *>(p); }
inline Cq *to_crxe(core::Cq *p) { return static_cast<Cq *>(p); }
inline Qp *to_crxe(core::Qp *p) { return static_cast<Qp *>(p); }
inline Context *ctx_of(ibv_coll_context *c) { return to_crxe(core::to_core(c)); }

// Limits the device reports and enforces.
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxCqe = 65536;
constexpr uint32_t kMaxMsg = 1u << 31;

// Per-object operations (crxe_device.cc, crxe_verbs.cc, crxe_qp.cc).
void discover(std::vector<ibv_coll_device *> &out);
core::Context *open_device(ibv_coll_device *dev);
int close_device(core::Context *ctx);
int query_device(core::Context *ctx, ibv_coll_device_attr *attr);
int query_port(core::Context *ctx, uint8_t port, ibv_coll_port_attr *attr);
int query_gid(core::Context *ctx, uint8_t port, int index, ibv_gid *gid);
core::Pd *alloc_pd(core::Context *ctx);
int dealloc_pd(core::Pd *pd);
core::Mr *reg_mr(core::Pd *pd, void *addr, size_t len, int access);
int dereg_mr(core::Mr *mr);
core::Cq *create_cq(core::Context *ctx, int cqe, core::CompChannel *ch);
int destroy_cq(core::Cq *cq);
int poll_cq(core::Cq *cq, int n, ibv_coll_wc *wc);
int req_notify_cq(core::Cq *cq, int solicited_only);
core::Qp *create_qp(core::Pd *pd, ibv_coll_qp_init_attr *attr);
int destroy_qp(core::Qp *qp);
int modify_qp(core::Qp *qp, ibv_coll_qp_attr *attr, int mask);
int query_qp(core::Qp *qp, ibv_coll_qp_attr *attr, int mask, ibv_coll_qp_init_attr *init);
int post_send(core::Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad);
int post_recv(core::Qp *qp, ibv_coll_recv_wr *wr, ibv_coll_recv_wr **bad);
int query_caps(core::Context *ctx, ibv_coll_caps *caps);
int query_counters(core::Context *ctx, ibv_coll_counters *c);
// The engine's objects without a crxe context: what the verbs provider
// builds its collective QPs from.  Completions of an engine CQ made by
// create_engine_cq are announced as events of event_to.
Pd *alloc_engine_pd(emu::Nic *nic);
Cq *create_engine_cq(emu::Nic *nic, int cqe, core::Cq *event_to);
int engine_caps(emu::Nic &nic, ibv_coll_caps *caps);
int engine_counters(emu::Nic &nic, ibv_coll_counters *c);

// Collective QPs (crxe_coll.cc).
int coll_job_from_attr(Qp *qp, const ibv_coll_job_attr *in, emu::JobConfig *out);
int post_coll(Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad);

extern const core::Provider provider;

} // namespace ibv_coll::crxe
