// Device-side state of CQs and RC QPs (the driver never sees these).
#pragma once

#include "nic/nic.h"
#include "nic/packet.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace ibv_coll::emu {

struct Cq {
	uint32_t cqn = 0;
	Queue *ring = nullptr;
	CqEventFn fn = nullptr;
	void *arg = nullptr;
	std::atomic<uint8_t> arm{0}; // 0 off, 1 next completion, 2 next solicited
	bool event_due = false;
	bool overrun = false;
	unsigned users = 0; // QPs reporting here
};

enum { kArmOff = 0, kArmAny = 1, kArmSolicited = 2 };

// What the device keeps per send WQE, beside the WQE itself.
struct WqeMeta {
	uint32_t first_psn = 0;
	uint32_t npkts = 0;	// PSNs the WQE uses (read: response packets)
	uint32_t read_rcvd = 0; // read response packets placed
	bool started = false;
	bool done = false; // acknowledged or all read data placed
};

// An RDMA READ the responder is answering, paced over engine passes.
struct ReadJob {
	uint64_t va;
	uint32_t len;
	uint32_t psn;	// PSN of the next response packet
	uint32_t first; // PSN of the request
	uint64_t off = 0;
	uint32_t rkey;
};

// A request that arrived ahead of a missing one, kept by the responder
// until the gap fills (the reorder buffer): its bytes from the BTH on, and
// where its headers lie in them.
struct OooPacket {
	std::vector<uint8_t> bytes;
	wire::Bth bth;
	uint16_t flags = 0;
	uint32_t ext_off = 0, pay_off = 0, paylen = 0;
};

struct Qp {
	uint32_t qpn = 0;
	uint32_t pdn = 0;
	DmaSpace space = kLocalSpace; // its PD's address space
	QpState state = QpState::reset;
	Queue *sq = nullptr;
	Queue *rq = nullptr;
	Cq *scq = nullptr;
	Cq *rcq = nullptr;
	bool sig_all = false;
	QpAttr attr;
	IpAddr src_ip;
	bool coll = false;     // a collective QP
	CollJobPtr job;	       // its job, from INIT -> RTR (coll/)
	uint32_t coll_inc = 0; // jobs given it so far: the job's incarnation

	// Requester.  PSNs in [una, req_psn) are in flight; sent_psn is one past
	// the highest PSN ever sent (a retry moves req_psn back, not sent_psn).
	std::vector<WqeMeta> meta; // per SQ slot
	uint32_t req_idx = 0;	   // WQE being sent
	uint64_t req_off = 0;	   // its bytes already sent
	uint32_t req_psn = 0;
	uint32_t sent_psn = 0;
	uint32_t una = 0;
	uint32_t npsn = 0; // PSN the next new WQE starts at
	uint32_t retries_left = 7;
	uint32_t rnr_left = 7;
	uint64_t rto_ns = 0;
	uint64_t rto_deadline = 0; // 0: not armed
	// When a response naming a PSN in flight last came, and how many were
	// dropped as naming none (what the retries-exhausted line reports).
	uint64_t answered_at = 0;
	uint32_t stale_answers = 0;
	uint64_t rnr_deadline = 0; // 0: not waiting
	uint32_t rnr_psn = 0;
	uint32_t last_nak_psn = 0xffffffff;
	// Selective repeat: the one PSN sent again alone (on a sequence NAK or
	// a timeout) whose answer is awaited.  An ACK of exactly it, with more
	// outstanding, says the responder kept nothing after it (a standard
	// go-back-N peer): go back from there.  gbn_psn: where the last go-back
	// started, so that a NAK of it, already answered, starts no second one.
	// The probe timer (rc_requester.cc arm_probe): the oldest packet goes
	// again alone at sr_deadline if nothing was acknowledged meanwhile;
	// sr_probes: probes since the last progress.
	bool sr_active = false;
	uint32_t sr_psn = 0;
	uint32_t sr_probes = 0;
	uint64_t sr_deadline = 0;
	uint64_t srtt = 0; // smoothed round trip, congestion control on or off
	uint32_t gbn_psn = 0xffffffff;
	uint32_t pkts_since_ackreq = 0;
	// Congestion control (nic/cc.h): the window in packets, one timed
	// PSN at a time for round-trip samples (0 sent: none), and when the
	// responder last sent the remote a CNP.
	CongestionCtl cc;
	uint32_t cc_psn = 0;
	uint64_t cc_sent = 0;
	uint64_t cnp_at = 0;

	// Responder.
	uint32_t epsn = 0;
	uint32_t msn = 0;
	bool nak_sent = false; // a sequence NAK for epsn is out
	bool ack_due = false;  // coalesced ACK of epsn - 1 to send
	uint8_t in_msg = 0;    // 0, or the opcode class of a message in progress
	uint64_t msg_off = 0;  // bytes of that message placed
	uint64_t wr_va = 0;    // RDMA WRITE in progress
	uint32_t wr_rkey = 0;
	uint32_t wr_len = 0;
	std::deque<ReadJob> reads;
	// Requests ahead of epsn, by PSN (at most IBV_COLL_EMU_RC_OOO of them).
	std::unordered_map<uint32_t, OooPacket> ooo;

	uint32_t mtu() const { return attr.path_mtu; }
};

} // namespace ibv_coll::emu
