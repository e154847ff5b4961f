// verbs: the provider over libibverbs devices (kernel rxe, RDMA NICs).
// Each private object extends the core's and holds the libibverbs object
// it stands for; the verbs pass through, with our types translated.
#pragma once

#include "driver.h"
#include "verbs/ud_transport.h"

#include <infiniband/verbs.h>

#include <memory>

#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ibv_coll::emu {
class Device;
class Nic;
} // namespace ibv_coll::emu
namespace ibv_coll::drv {
struct Pd;
struct Cq;
} // namespace ibv_coll::drv

namespace ibv_coll::verbs {

struct VerbsConfig {
	std::vector<std::string> devices; // libibverbs names (rxe0); empty: all
	bool disable = false;
};
std::span<const util::ConfigVar> config_vars();
int load_config(VerbsConfig *out);
// Whether the filter admits the libibverbs device ibdev.
bool config_admits(const VerbsConfig &c, const std::string &ibdev);

struct Device : ibv_coll_device {
	std::string ibdev; // libibverbs' name: rxe0, mlx5_0
};

struct Context : core::Context {
	Device *dev = nullptr;
	ibv_context *vctx = nullptr;
	// What does not change while the device is open, per port (index
	// port - 1), read at open.
	struct Port {
		uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
		int gid_tbl_len = 0;
	};
	std::vector<Port> ports;
	// Every CQ that has a completion channel is created on this one real
	// channel; the event thread forwards its events into ours.
	ibv_comp_channel *vch = nullptr;
	// Held while the event thread forwards a CQ event, and by destroy_cq:
	// a CQ is never freed between the real event and ours.
	std::mutex ev_mu;
	int stop_fd = -1; // eventfd: tells the event thread to leave
	std::thread ev_thread;
	// The collective engine in front of the device (verbs_coll.cc); null
	// when the device cannot carry it (no RoCE port, no UD, no SRQ).
	std::unique_ptr<emu::Nic> nic;
	~Context();
};

// Each object below has its counterpart in the engine when there is one.
struct Pd : core::Pd {
	ibv_pd *vpd = nullptr;
	drv::Pd *epd = nullptr;
};

struct Mr : core::Mr {
	ibv_mr *vmr = nullptr;
	int access = 0;
	emu::Device *engine = nullptr; // entered in its MR table under vmr->lkey
};

struct Cq : core::Cq {
	ibv_cq *vcq = nullptr;
	drv::Cq *ecq = nullptr; // collective completions
};

struct Qp : core::Qp {
	ibv_qp *vqp = nullptr;
	ibv_coll_qp_init_attr init{}; // as created, cap as allocated
	uint8_t port = 1;	      // the port given at RESET -> INIT
};

inline Context *to_verbs(core::Context *c)
{
	return static_cast<Context *>(c);
}
inline Pd *to_verbs(core::Pd *p)
{
	return static_cast<Pd *>(p);
}
inline Mr *to_verbs(core::Mr *p)
{
	return static_cast<Mr *>(p);
}
inline Cq *to_verbs(core::Cq *p)
{
	return static_cast<Cq *>(p);
}
inline Qp *to_verbs(core::Qp *p)
{
	return static_cast<Qp *>(p);
}
inline Context *ctx_of(ibv_coll_context *c)
{
	return to_verbs(core::to_core(c));
}

// The UDP port RoCEv2 devices use; reported for Ethernet ports, where the
// kernel or the NIC owns it and the QP's udp_port has no meaning.
constexpr uint16_t kRoceUdpPort = IBV_COLL_ROCE_UDP_PORT;
// Our timeout 0 means "the device default"; libibverbs' 0 means "wait
// forever".  4.096 us * 2^14, about 67 ms, as crxe's default.
constexpr uint8_t kDefaultTimeout = 14;
// Hop limit of the GRH (the IP TTL of RoCEv2 packets).
constexpr uint8_t kHopLimit = 64;

// libibverbs' error returns as a positive errno (shared with the engine's
// UD transport).
using emu::verr;

// The event thread (verbs_event.cc): started by open_device.
int start_events(Context *ctx);
void stop_events(Context *ctx);

// Per-object operations (verbs_device.cc, verbs_verbs.cc, verbs_qp.cc).
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

// The collective engine (verbs_coll.cc).
void start_engine(Context *ctx);
int coll_caps(Context *ctx, ibv_coll_caps *caps);
int coll_counters(Context *ctx, ibv_coll_counters *c);
int engine_pd(Context *ctx, Pd *pd);
void engine_pd_free(Pd *pd);
int engine_mr(Pd *pd, Mr *mr, void *addr, size_t len, int access);
void engine_mr_free(Mr *mr);
int engine_cq(Context *ctx, Cq *cq, int cqe);
void engine_cq_free(Cq *cq);
core::Qp *create_coll_qp(Pd *pd, ibv_coll_qp_init_attr *ia);
int modify_coll_qp(core::Qp *qp, ibv_coll_qp_attr *a, int mask);
int query_coll_qp(core::Qp *qp, ibv_coll_qp_attr *a, int mask, ibv_coll_qp_init_attr *init);

extern const core::Provider provider;

} // namespace ibv_coll::verbs
