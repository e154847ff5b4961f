// The driver layer both providers share (as rdma-core's providers share
// libibverbs' driver helpers): the objects of the emulated NIC (PD, MR, CQ,
// QP, collective QP) and their operations, posting, the translation of the
// NIC's CQEs into work completions, caps, counters, the job attribute, and
// the protocol's overheads.  crxe uses it for whole devices; the verbs
// provider for the collective QPs it runs on the host in front of a
// libibverbs device.  It knows no provider.
#pragma once

#include "driver.h"
#include "coll/coll_job.h"
#include "nic/nic.h"

#include <cstdint>
#include <memory>
#include <mutex>

namespace ibv_coll::drv {

// Every object knows its device, so that the collective half also serves
// a provider that runs the engine in front of another device (verbs).
struct Pd : core::Pd {
	emu::Device *nic = nullptr;
	uint32_t pdn = 0;
};

struct Mr : core::Mr {
	emu::Device *nic = nullptr;
};

struct Cq : core::Cq {
	emu::Device *nic = nullptr;
	std::unique_ptr<emu::Ring> ring;
	emu::Cq *hw = nullptr;
	std::mutex mu; // pollers
};

struct Qp : core::Qp {
	emu::Device *nic = nullptr;
	uint32_t pdn = 0;
	std::unique_ptr<emu::Ring> sq, rq;
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

inline Pd *to_drv(core::Pd *p)
{
	return static_cast<Pd *>(p);
}
inline Mr *to_drv(core::Mr *p)
{
	return static_cast<Mr *>(p);
}
inline Cq *to_drv(core::Cq *p)
{
	return static_cast<Cq *>(p);
}
inline Qp *to_drv(core::Qp *p)
{
	return static_cast<Qp *>(p);
}

// Limits the device reports and enforces.
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxCqe = 65536;
constexpr uint32_t kMaxMsg = 1u << 31;

// The objects' operations (drv_verbs.cc, drv_qp.cc), as ProviderOps
// entries.
int dealloc_pd(core::Pd *pd);
core::Mr *reg_mr(core::Pd *pd, void *addr, size_t len, int access);
int dereg_mr(core::Mr *mr);
int destroy_cq(core::Cq *cq);
int poll_cq(core::Cq *cq, int n, ibv_coll_wc *wc);
int req_notify_cq(core::Cq *cq, int solicited_only);
core::Qp *create_qp(core::Pd *pd, ibv_coll_qp_init_attr *attr);
int destroy_qp(core::Qp *qp);
int modify_qp(core::Qp *qp, ibv_coll_qp_attr *attr, int mask);
int query_qp(core::Qp *qp, ibv_coll_qp_attr *attr, int mask, ibv_coll_qp_init_attr *init);
int post_send(core::Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad);
int post_recv(core::Qp *qp, ibv_coll_recv_wr *wr, ibv_coll_recv_wr **bad);
// The checks of an RC send WR that need only the WR and the QP's SGE
// limit (EINVAL for anything malformed), made before anything of a chain
// is posted; every provider's post_send makes them, the device the rest.
int check_send_wr(const ibv_coll_send_wr *wr, uint32_t max_send_sge);

// The NIC's objects made from the NIC alone.  Completions of a CQ made
// with event_to are announced as events of that (the caller's) CQ.
Pd *alloc_engine_pd(emu::Device *nic);
Cq *create_engine_cq(emu::Device *nic, int cqe, core::Cq *event_to);
// What the NIC supports, and its counters, as the public structs.
int engine_caps(emu::Device &nic, ibv_coll_caps *caps);
int engine_counters(emu::Device &nic, ibv_coll_counters *c);

// Collective QPs (drv_coll.cc).
int coll_job_from_attr(Qp *qp, const ibv_coll_job_attr *in, emu::JobConfig *out);
int post_coll(Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad);

// Bytes of headers and trailer around a collective block in one packet:
// BTH, CETH, the switch path's task information, pad (at most 3) and ICRC.
// A transport that carries a packet in one datagram of size n carries
// blocks of n - coll_packet_overhead() bytes.
uint32_t coll_packet_overhead();

} // namespace ibv_coll::drv
