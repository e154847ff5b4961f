// The device's engine: owns the port, the MR table, the QPs and CQs, the
// engine thread, and the RC transport (requester, responder, completer).
#pragma once

#include "net/transport.h"
#include "nic/coll_iface.h"
#include "nic/mr_table.h"
#include "nic/nic.h"
#include "nic/packet.h"
#include "nic/qp.h"
#include "nic/stats_shm.h"
#include "util/fd.h"
#include "wire/roce.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

namespace ibv_coll::emu {

class Engine {
public:
	explicit Engine(const NicParams &p);
	~Engine();
	int start();

	// Held by commands, the engine thread, and progress().
	std::mutex mu;
	NicParams params;
	std::unique_ptr<Transport> port; // UdpPort unless NicParams::transport says otherwise
	MrTable mrs;
	NicCounters ctr;

	// Objects.
	std::set<uint32_t> pds;
	// The protection domains whose memory is another process's (absent:
	// this process's, kLocalSpace).
	std::unordered_map<uint32_t, DmaSpace> pd_spaces;
	DmaSpace pd_space(uint32_t pdn) const
	{
		if (pd_spaces.empty())
			return kLocalSpace;
		auto it = pd_spaces.find(pdn);
		return it == pd_spaces.end() ? kLocalSpace : it->second;
	}
	uint32_t next_pdn = 1;
	std::unordered_map<uint32_t, std::unique_ptr<Qp>> qps;
	uint32_t next_qpn = 0x11;
	std::set<std::unique_ptr<Cq>> cqs_owner;
	std::vector<Cq *> cqs;
	uint32_t next_cqn = 1;

	// Wake-up protocol with the engine thread: see engine_wait.cc.
	std::atomic<bool> work_pending{false};
	std::atomic<bool> sleeping{false};
	std::atomic<uint64_t> armed_deadline{0};
	void wake();
	// Run progress now if the lock is free (again while it finds work and
	// WATCH, a CQ the caller polls, stays empty), else make sure someone
	// will.
	void kick(const Cq *watch = nullptr);
	void kick_locked(std::unique_lock<std::mutex> &lk, const Cq *watch);
	// An application thread polls: for the next IBV_COLL_EMU_APP_POLL_US
	// its polls run the NIC and the engine thread keeps off the port.
	void app_polled();
	// The application is about to sleep (it armed a CQ): the engine
	// thread takes the port back at once.
	void app_sleeps();
	std::atomic<uint64_t> app_until{0};
	// A word in memory shared with the processes that ring doorbells
	// (ibv_coll_devd's clients): 1 while the engine thread runs its passes,
	// 0 from just before it sleeps.  A client that stores a work queue's
	// producer index and then reads 1 needs no doorbell message: the
	// thread sees the queue in a pass, the last of them after the word
	// went to 0 (engine_wait.cc run_passes()).
	std::atomic<uint32_t> *awake_word = nullptr;

	bool progress_locked();
	bool pass_locked(); // progress_locked()'s pass
	// An internal error (an exception out of a pass): the device fails
	// for good, as NicParams::on_fatal says.  Without mu held.
	void fail(const char *why);
	std::atomic<bool> dead{false};		 // no pass runs (set under mu by a pass that threw)
	std::atomic<bool> fail_reported_{false}; // fail()'s work done once
	// Every counter, as one snapshot (the caller holds mu).
	NicCounters snapshot_locked() const;
	// Copy the counters into the shared-memory segment ibv_coll_stat(1)
	// reads: at most every millisecond from progress passes, and always
	// (force) before the engine thread sleeps.
	void publish_stats(uint64_t now, bool force);
	uint64_t next_deadline_locked() const;

	// RC transport (rc_requester.cc, rc_responder.cc).
	bool req_progress(Qp &qp, uint64_t now);
	void req_on_ack(Qp &qp, const InPacket &p);
	void req_on_read_resp(Qp &qp, const InPacket &p);
	void req_timers(Qp &qp, uint64_t now);
	void req_retry_from(Qp &qp, uint32_t psn);
	void req_resend(Qp &qp, uint32_t psn, uint64_t now);
	void resp_on_request(Qp &qp, const InPacket &p);
	bool resp_progress(Qp &qp);
	void send_ack(Qp &qp, uint8_t syndrome, uint32_t psn);

	// Congestion notification (nic/cc.h): a CNP to the sender QP dqpn at
	// dst, when *last (the flow's last CNP) is at least
	// IBV_COLL_EMU_CNP_INTERVAL_US ago; a CNP that arrived.
	void maybe_send_cnp(const Endpoint &dst, const IpAddr &src, uint32_t dqpn, uint64_t *last,
			    uint64_t now);
	void on_cnp(const InPacket &p);

	// QP life cycle (engine.cc).
	void qp_to_error(Qp &qp, const char *why);
	void qp_reset(Qp &qp);
	bool flush(Qp &qp);
	void complete_send(Qp &qp, uint32_t idx, WcStatus st, bool force);
	void complete_recv(Qp &qp, WcStatus st, WcOpcode op, uint64_t len, uint32_t imm,
			   uint8_t flags);
	bool push_cqe(Cq *cq, const Cqe &c);

	// The collective offload engine (coll/), and what it sees of this
	// engine (engine.cc).
	std::unique_ptr<CollHost> coll_host;
	std::unique_ptr<CollService> coll;
	void release_job(Qp &qp);

	// Send a packet built in port.tx_buf(): pad, ICRC, queue.
	void tx_to(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		   uint32_t paylen);
	// The same for a payload sent from where it is (Transport::
	// tx_commit_split): pkt holds the headers only.  tail_crc, when the
	// caller knows it, is crc32_update(0, payload || pad).
	void tx_split(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		      const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc);

	// Packet output: build the headers, the payload comes from the caller.
	// Returns the buffer to fill at *payload; finish with tx_finish().
	uint8_t *tx_begin(const Qp &qp, const wire::Bth &bth, size_t ext_len, uint8_t **ext);
	void tx_finish(const Qp &qp, uint8_t *pkt, size_t hdr_len, uint32_t paylen);

private:
	void run();
	void run_passes();
	// Asleep while an application thread polls (see engine_wait.cc).
	bool sleep_while_app_polls();
	bool sleep_on(int epfd, uint64_t timer); // true: the doorbell rang
	void handle_packet(const RxPacket &rx);

	// epfd_ watches the port, the doorbell and the timer; epq_ only the
	// last two (while an application thread polls the port itself).
	util::UniqueFd epfd_, epq_, evfd_, tfd_;
	stats::Segment stats_;
	uint64_t stats_at_ = 0;
	std::thread thread_;
	std::atomic<bool> stop_{false};
};

} // namespace ibv_coll::emu
