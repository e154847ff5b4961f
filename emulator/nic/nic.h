// The emulated RoCEv2 NIC: what a driver sees of the device.  A command
// interface creates and changes objects; work arrives through queues and
// doorbells; completions leave through CQ rings and an event callback;
// application memory is reached only through the MR table.  An engine
// thread makes progress while the application sleeps, and the driver lends
// its own thread through progress() so that a polling application is not
// paying a wake-up per packet.
#pragma once

#include "net/transport.h"
#include "nic/device.h"
#include "nic/coll_iface.h"
#include "nic/emu_config.h"
#include "nic/mr_table.h"
#include "nic/queue.h"
#include "nic/wqe.h"
#include "util/clock.h"

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ibv_coll::emu {

struct Cq;
struct Qp;
struct JobConfig;
class Engine;

// Values of enum ibv_qp_state.
enum class QpState : uint8_t { reset = 0, init = 1, rtr = 2, rts = 3, sqd = 4, sqe = 5, err = 6 };

// Object limits of one device.
constexpr size_t kMaxPds = 1u << 16, kMaxCqs = 1u << 16, kMaxQps = 1u << 16;
constexpr uint32_t kMaxMrs = (1u << 24) - 1;

struct NicParams {
	std::string name;	  // for log lines
	std::vector<IpAddr> gids; // the port's addresses
	uint16_t udp_port = 4791;
	bool port_fallback = true;  // a busy port falls back to a free one
	uint32_t active_mtu = 1024; // bytes: the largest path MTU allowed
	EmuConfig cfg;
	// The clock of the device's timers (the RC and collective transports,
	// congestion control): the host's, or a simulator's virtual one.  The
	// engine thread sleeps on the host's clock: a device on another is
	// run by its owner's passes (CollService::progress), not the thread.
	const util::Clock *clock = &util::host_clock();
	// Called once, from the thread that found it, when the device fails
	// for good (an internal error such as memory running out in the
	// engine): by then every QP is in error, its WQEs completed with
	// IBV_WC_WR_FLUSH_ERR and every armed CQ's event delivered, and posts
	// fail with EIO (Device::fatal).  The provider turns it into
	// IBV_EVENT_DEVICE_FATAL.
	void (*on_fatal)(void *arg) = nullptr;
	void *fatal_arg = nullptr;
	// Fault injection, for tests: called at the start of every progress
	// pass, under the engine lock; what it throws fails the device.
	std::function<void()> fault;
	// Opens the transport packets go through; empty: a UdpPort bound as
	// udp_port, port_fallback and cfg say.
	TransportFactory transport;
};

// CqEventFn (device.h) is called (from the engine or a driver thread,
// never under a driver lock) when an armed CQ receives a completion.

struct QpCreate {
	uint32_t pdn = 0;
	Queue *sq = nullptr;
	Queue *rq = nullptr;
	Cq *send_cq = nullptr;
	Cq *recv_cq = nullptr;
	bool sig_all = false;
	bool coll = false; // a collective QP: the SQ holds CollWqe
};

// Bits of enum ibv_coll_qp_attr_mask.
enum QpAttrMask : uint32_t {
	kQpState = 1 << 0,
	kQpAccess = 1 << 3,
	kQpPort = 1 << 5,
	kQpAv = 1 << 7,
	kQpPathMtu = 1 << 8,
	kQpTimeout = 1 << 9,
	kQpRetryCnt = 1 << 10,
	kQpRnrRetry = 1 << 11,
	kQpRqPsn = 1 << 12,
	kQpMaxRdAtomic = 1 << 13,
	kQpMinRnrTimer = 1 << 15,
	kQpSqPsn = 1 << 16,
	kQpMaxDestRdAtomic = 1 << 17,
	kQpDestQpn = 1 << 20,
	kQpJob = 1 << 28,
};

struct QpAttr {
	QpState state = QpState::reset;
	uint32_t access = 0;
	uint32_t path_mtu = 0; // bytes
	Endpoint remote;
	uint8_t sgid_index = 0;
	uint32_t dest_qpn = 0;
	uint32_t rq_psn = 0;
	uint32_t sq_psn = 0;
	uint8_t timeout = 0;
	uint8_t retry_cnt = 7;
	uint8_t rnr_retry = 7;
	uint8_t min_rnr_timer = 0;
	uint8_t max_rd_atomic = 1;
	uint8_t max_dest_rd_atomic = 1;
	const JobConfig *job = nullptr; // kQpJob
};

struct NicCounters {
	PortCounters port;
	uint64_t rx_icrc_err = 0, rx_malformed = 0, rx_no_qp = 0, rx_bad_src = 0, rx_bad_state = 0,
		 rx_dup = 0;
	uint64_t tx_retransmits = 0, timeouts = 0, seq_naks_sent = 0, seq_naks_rcvd = 0,
		 rnr_naks_sent = 0, rnr_naks_rcvd = 0, acks_sent = 0, cq_overruns = 0;
	// RC traffic alone (the port counts collective packets too).
	uint64_t rc_tx_packets = 0, rc_tx_bytes = 0, rc_rx_packets = 0, rc_rx_bytes = 0;
	CollCounters coll;
	CcCounters cc; // congestion control, RC and collectives together
	uint32_t seg_units = 0, seg_in_use = 0, seg_high_water = 0;
};

// The counters by name, in one order: the shared-memory segment that
// ibv_coll_stat(8) reads (nic/stats_shm.h) lists these.
constexpr size_t kNicStatCount = 86;
std::vector<const char *> nic_stat_names();
void nic_stat_values(const NicCounters &c, uint64_t out[kNicStatCount]);

class Nic final : public Device {
public:
	// Bind the port and start the engine thread.
	static int create(const NicParams &p, std::unique_ptr<Nic> *out);
	~Nic() override;
	Nic(const Nic &) = delete;
	Nic &operator=(const Nic &) = delete;

	uint16_t udp_port() const override;
	const NicParams &params() const;

	// Command interface; each returns 0 or an errno value.
	int alloc_pd(uint32_t *pdn) override;
	// A protection domain whose memory (its MRs' addresses, its QPs' SGEs)
	// is in address space `space`: kLocalSpace (this process) or the pid of
	// another process this one may ptrace.  The key, PD, access and bounds
	// checks are the same; the copies go through process_vm_readv/writev.
	int alloc_pd_in(DmaSpace space, uint32_t *pdn);
	int dealloc_pd(uint32_t pdn) override;
	DmaSpace pd_space(uint32_t pdn) const;
	int reg_mr(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
		   uint32_t *key) override;
	// Register under a key chosen outside (a real device's lkey).
	int reg_mr_keyed(uint32_t pdn, const void *addr, uint64_t len, uint32_t access,
			 uint32_t key) override;
	int dereg_mr(uint32_t key) override;
	int create_cq(Queue *ring, CqEventFn fn, void *arg, Cq **cq, uint32_t *cqn) override;
	int destroy_cq(Cq *cq) override;
	int create_qp(const QpCreate &c, Qp **qp, uint32_t *qpn) override;
	// Apply attributes; the caller has checked the transition and mask.
	int modify_qp(Qp *qp, const QpAttr &a, uint32_t mask) override;
	int query_qp(Qp *qp, QpAttr *a) override;
	int destroy_qp(Qp *qp) override;
	// Waits up to kLeaveWaitMs for the peers of a collective QP's job.
	static constexpr uint64_t kLeaveWaitMs = 100;
	void settle_coll(Qp *qp);

	// Doorbells, from any thread.
	void sq_doorbell(Qp *qp) override;
	void rq_doorbell(Qp *qp) override;
	// Request an event for the next completion (solicited_only: the next
	// solicited or error completion).
	void cq_arm(Cq *cq, bool solicited_only) override;

	// Do whatever work is ready, without blocking, on the caller's thread,
	// which polls CQ.  A thread polling a CQ that is not armed keeps the
	// engine thread off the port for a while (IBV_COLL_EMU_APP_POLL_US);
	// one polling an armed CQ is about to sleep, and does not.
	void progress(const Cq *cq) override;

	NicCounters counters() override;

	// Collective engine.
	uint32_t seg_units() const override;
	uint32_t seg_unit_bytes() const override;
	uint32_t active_mtu() const override;
	int make_ring(uint32_t slots, uint32_t stride, std::unique_ptr<Ring> *out) override;
	// Check, as the DMA engine will, that sges[0..n) are registered in pdn
	// with `need` access and hold at least len[i] bytes: 0 or EINVAL.
	int check_local(uint32_t pdn, const Sge *sges, const uint64_t *len, uint32_t n,
			uint32_t need) override;

	// Keep *word at 1 while the engine thread is awake and 0 while it
	// sleeps (engine.h awake_word): memory shared with processes that may
	// then skip their doorbells.  Before the first doorbell.
	void share_awake_word(std::atomic<uint32_t> *word);

	// The engine failed (NicParams::on_fatal): posts fail with EIO.
	bool fatal() const override;

private:
	Nic();
	std::unique_ptr<Engine> e_;
};

} // namespace ibv_coll::emu
