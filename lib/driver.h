// The interface between the core library and its providers (as rdma-core's
// <infiniband/driver.h>): the core's objects, which providers extend, and
// the ops table each provider fills.
#pragma once

#include "ibv_coll/ibv_coll.h"
#include "util/config.h"

#include <atomic>
#include <cerrno>
#include <mutex>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace ibv_coll::core {
struct ProviderOps;
}

// Opaque to applications.  Reference counted: the device list holds one
// reference per device, each open context another.
struct ibv_coll_device {
	const ibv_coll::core::ProviderOps *ops = nullptr;
	std::string name;
	std::atomic<int> refs{1};
	virtual ~ibv_coll_device() = default;
};

namespace ibv_coll::core {

// Each core object embeds its public struct first (standard layout, so the
// public pointer converts back), plus a count of live children that makes
// its destruction fail with EBUSY.  Providers derive from these.
// A context's asynchronous events: the provider queues them
// (async_event()), ibv_get_coll_async_event() takes them in order.  fd is
// a semaphore eventfd whose count is the number queued, so that it polls
// readable exactly while one waits; it is made at open (events a provider
// queues before are counted in then) and closed with the context.
struct AsyncQueue {
	static constexpr uint32_t kDepth = 64;
	std::mutex mu;
	int fd = -1;
	uint32_t head = 0, tail = 0; // run free; slot i % kDepth
	ibv_coll_async_event ev[kDepth]{};
	~AsyncQueue();
};

struct Context {
	ibv_coll_context pub{};
	std::atomic<int> children{0};
	AsyncQueue async;
	// IBV_EVENT_DEVICE_FATAL was delivered: posts fail with EIO.
	std::atomic<bool> fatal{false};
};
struct Pd {
	ibv_coll_pd pub{};
	std::atomic<int> children{0};
};
struct Mr {
	ibv_coll_mr pub{};
};
struct CompChannel {
	ibv_coll_comp_channel pub{};
	int wfd = -1; // write end of the event pipe
	std::atomic<int> users{0};
};
struct Cq {
	ibv_coll_cq pub{};
	std::atomic<int> users{0};		 // QPs reporting here
	std::atomic<uint64_t> events_written{0}; // events put in the channel
	std::atomic<uint64_t> events_acked{0};
};
struct Qp {
	ibv_coll_qp pub{};
};

static_assert(std::is_standard_layout_v<Context> && std::is_standard_layout_v<Pd> &&
	      std::is_standard_layout_v<Mr> && std::is_standard_layout_v<CompChannel> &&
	      std::is_standard_layout_v<Cq> && std::is_standard_layout_v<Qp>);

// The integer inside an enum field an application filled: C lets any int
// through, and C++ must not load an out-of-range value as the enum type.
template <class E> inline int raw_enum(const E &e)
{
	static_assert(sizeof(E) == sizeof(int));
	int v;
	memcpy(&v, &e, sizeof(v));
	return v;
}

inline Context *to_core(ibv_coll_context *p)
{
	return reinterpret_cast<Context *>(p);
}
inline Pd *to_core(ibv_coll_pd *p)
{
	return reinterpret_cast<Pd *>(p);
}
inline Mr *to_core(ibv_coll_mr *p)
{
	return reinterpret_cast<Mr *>(p);
}
inline CompChannel *to_core(ibv_coll_comp_channel *p)
{
	return reinterpret_cast<CompChannel *>(p);
}
inline Cq *to_core(ibv_coll_cq *p)
{
	return reinterpret_cast<Cq *>(p);
}
inline Qp *to_core(ibv_coll_qp *p)
{
	return reinterpret_cast<Qp *>(p);
}

// A provider's operations.  Entries left null are filled by the core with
// functions that fail with EOPNOTSUPP, so a call site never meets a null.
// Creators return null with errno set; the core fills the public fields it
// owns (context, pd, cq pointers, handles) after a successful create and
// has already checked arguments common to every provider.
struct ProviderOps {
	Context *(*open_device)(ibv_coll_device *dev);
	int (*close_device)(Context *ctx);
	int (*query_device)(Context *ctx, ibv_coll_device_attr *attr);
	int (*query_port)(Context *ctx, uint8_t port, ibv_coll_port_attr *attr);
	int (*query_gid)(Context *ctx, uint8_t port, int index, ibv_gid *gid);
	Pd *(*alloc_pd)(Context *ctx);
	int (*dealloc_pd)(Pd *pd);
	Mr *(*reg_mr)(Pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(Mr *mr);
	Cq *(*create_cq)(Context *ctx, int cqe, CompChannel *ch);
	int (*destroy_cq)(Cq *cq);
	int (*poll_cq)(Cq *cq, int n, ibv_coll_wc *wc);
	int (*req_notify_cq)(Cq *cq, int solicited_only);
	Qp *(*create_qp)(Pd *pd, ibv_coll_qp_init_attr *attr);
	int (*destroy_qp)(Qp *qp);
	int (*modify_qp)(Qp *qp, ibv_coll_qp_attr *attr, int mask);
	int (*query_qp)(Qp *qp, ibv_coll_qp_attr *attr, int mask, ibv_coll_qp_init_attr *init);
	int (*post_send)(Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad);
	int (*post_recv)(Qp *qp, ibv_coll_recv_wr *wr, ibv_coll_recv_wr **bad);
	int (*query_caps)(Context *ctx, ibv_coll_caps *caps);
	int (*query_counters)(Context *ctx, ibv_coll_counters *c);
};

struct Provider {
	const char *name;
	// Append one device per thing the provider can drive.
	void (*discover)(std::vector<ibv_coll_device *> &out);
	const ProviderOps *ops;
	// Its configuration table registers itself (util::ConfigRegistrar).
};

// Called by a provider when an armed CQ gets a completion: queues the CQ
// on its completion channel.
void cq_event(Cq *cq);

// Called by a provider (any thread) to deliver an asynchronous event to
// the context's application.  Events naming a CQ or QP must name the
// public object.
void async_event(Context *ctx, const ibv_coll_async_event &ev);

// Legal QP state transitions and the attributes each requires and allows
// (IBTA vol. 1 table 91, RC subset).  0 or EINVAL.
int check_qp_transition(ibv_coll_qp_type type, ibv_qp_state cur, ibv_qp_state next, int mask);

} // namespace ibv_coll::core
