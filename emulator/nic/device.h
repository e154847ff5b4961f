// What a driver sees of a device, wherever the device runs: in this
// process (emu::Nic) or in a device process a client reaches over a socket
// (ibv_coll_devd, the host's shared device: devd/devd_client.h).  The
// driver layer (providers/common/drv*) talks to a Device only, so that one
// driver serves both.  Object handles (Cq *, Qp *) are the
// implementation's own and opaque to the driver.
#pragma once

#include "nic/queue.h"
#include "util/fd.h"

#include <sys/mman.h>

#include <cstdint>
#include <memory>

namespace ibv_coll::emu {

struct Cq;
struct Qp;
struct QpCreate;
struct QpAttr;
struct NicCounters;
struct Sge;
using CqEventFn = void (*)(void *arg);

// The memory of a ring: none (the queue's own), or a shared mapping of a
// memfd that the device process maps too.  A base of Ring so that the
// mapping outlives the queue placed in it.
struct RingMem {
	util::UniqueFd fd;
	void *map = nullptr;
	size_t bytes = 0;
	RingMem() = default;
	RingMem(util::UniqueFd f, void *m, size_t b) : fd(std::move(f)), map(m), bytes(b) {}
	RingMem(const RingMem &) = delete;
	RingMem &operator=(const RingMem &) = delete;
	~RingMem()
	{
		if (map)
			munmap(map, bytes);
	}
};

// A queue (SQ, RQ or CQ ring) as a Device makes it for its driver.
class Ring : private RingMem, public Queue {
public:
	Ring(uint32_t slots, uint32_t stride) : Queue(slots, stride) {}
	// In a shared mapping m of fd (bytes b >= region_bytes(slots,
	// stride)): formatted here (init), or as the other side formatted it.
	Ring(uint32_t slots, uint32_t stride, util::UniqueFd f, void *m, size_t b, bool init)
		: RingMem(std::move(f), m, b), Queue(slots, stride, m, init)
	{
	}
	// The memfd the ring lives in (-1: private memory).
	int mem_fd() const { return fd.get(); }
};

class Device {
public:
	virtual ~Device() = default;

	virtual uint16_t udp_port() const = 0;
	virtual uint32_t active_mtu() const = 0; // bytes

	// A ring the device can reach.
	virtual int make_ring(uint32_t slots, uint32_t stride, std::unique_ptr<Ring> *out) = 0;

	// Command interface (nic.h has the contract); 0 or an errno value.
	virtual int alloc_pd(uint32_t *pdn) = 0;
	virtual int dealloc_pd(uint32_t pdn) = 0;
	virtual int reg_mr(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
			   uint32_t *key) = 0;
	virtual int reg_mr_keyed(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
				 uint32_t key) = 0;
	virtual int dereg_mr(uint32_t key) = 0;
	virtual int create_cq(Queue *ring, CqEventFn fn, void *arg, Cq **cq, uint32_t *cqn) = 0;
	virtual int destroy_cq(Cq *cq) = 0;
	virtual int create_qp(const QpCreate &c, Qp **qp, uint32_t *qpn) = 0;
	virtual int modify_qp(Qp *qp, const QpAttr &a, uint32_t mask) = 0;
	virtual int query_qp(Qp *qp, QpAttr *a) = 0;
	virtual int destroy_qp(Qp *qp) = 0;
	virtual void sq_doorbell(Qp *qp) = 0;
	virtual void rq_doorbell(Qp *qp) = 0;
	virtual void cq_arm(Cq *cq, bool solicited_only) = 0;
	virtual void progress(const Cq *cq) = 0;
	virtual NicCounters counters() = 0;
	virtual uint32_t seg_units() const = 0;
	virtual uint32_t seg_unit_bytes() const = 0;
	virtual int check_local(uint32_t pdn, const Sge *sges, const uint64_t *len, uint32_t n,
				uint32_t need) = 0;
	// The device is gone for good (a shared device's daemon died): posts
	// fail with EIO, and the objects only wait to be destroyed.
	virtual bool fatal() const { return false; }
};

} // namespace ibv_coll::emu
