// The ways a collective message runs, as strategy objects behind one
// interface: round the member NICs' ring (ring.cc), or through the job's
// aggregation switches (swpath.cc; a hierarchy is the same strategy with
// leaves under spines: a member NIC only ever talks to its own leaf).
// Execution control (exec_ctrl.cc) chooses one per message when it starts
// (Message::path) and drives it: start, then on_timer every pass and
// on_packet for each packet of the strategy's kinds, until done.  AUTO's
// fallback is a change of strategy made by execution control: the switch
// strategy only marks the message (Message::sw.on cleared while it is its
// path), and execution control starts the ring on it (CollEngine::settle).
//
// Packets are routed by what they are, not by the running message's
// strategy: DATA and RESULT from a member are the ring's (the ring also
// keeps those of messages not started here, whatever runs them here),
// packets from a switch and ACKs between members are the switch path's.
#pragma once

#include "nic/cc.h"
#include "wire/ceth.h"
#include "wire/swproto.h"

#include <cstdint>
#include <vector>

namespace ibv_coll::emu {

class CollCore;
class PendingSet;
struct CollJob;
struct Endpoint;
struct Message;
struct CollPacket;
struct Message;
struct Qp;
struct XchgOut;

class CollPath {
public:
	virtual ~CollPath() = default;
	virtual const char *name() const = 0;
	// The job's active message starts on this path.
	virtual void start(Qp &qp, CollJob &job, uint64_t now) = 0;
	// A packet of this path's kinds, already checked against the job.
	virtual void on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now) = 0;
	// Retransmission and failure timers of the active message, then what
	// its window lets go.
	virtual void on_timer(Qp &qp, CollJob &job, uint64_t now) = 0;
	// The active message is complete (every result here, nothing pending).
	virtual bool done(const CollJob &job) const = 0;
	// The active message's next timer.
	virtual uint64_t next_deadline(const CollJob &job) const = 0;
};

// Round the ring of member NICs (ring.cc).
class RingPath final : public CollPath {
public:
	explicit RingPath(CollCore &u) : u_(u) {}
	const char *name() const override { return "ring"; }
	void start(Qp &qp, CollJob &job, uint64_t now) override;
	void on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now) override;
	void on_timer(Qp &qp, CollJob &job, uint64_t now) override;
	bool done(const CollJob &job) const override;
	uint64_t next_deadline(const CollJob &job) const override;
	// m (the active message, or the newest in CollJob::flight) starts:
	// on_packet, on_timer and next_deadline see every message of the
	// job that runs round the ring.
	void start(Qp &qp, CollJob &job, Message &m, uint64_t now);

private:
	// The services shared with the switch path (send, arm, fail, the DMA
	// helpers, the counters): the engine's core, not its execution control.
	CollCore &u_;

	void pump(Qp &qp, CollJob &job, uint64_t now);
	void cc_init(CollJob &job, uint32_t w);
	// endpoint: the round trip's holding at endpoints (CollPacket::holding;
	// not known: no round trip to sample).
	void acked(CollJob &job, PendingSet &pend, uint32_t sid, uint64_t now, Holding endpoint);
	void on_data(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	void on_result(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	void timers(Qp &qp, CollJob &job, Message &m, uint64_t now);
	Message *running(const CollJob &job, uint32_t mid) const;
	bool switch_runs(const CollJob &job, const CollPacket &p) const;
	bool deliver(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	// A block of a message not started here, kept for when it starts.
	void early(CollJob &job, const CollPacket &p);
	void adopt_early(Qp &qp, CollJob &job, Message &m);
	void data(CollJob &job, Message &m, const CollPacket &p, uint64_t now);
	void result(CollJob &job, Message &m, const CollPacket &p, uint64_t now);
	// hop_seq >= 0: sent again to the next node with that number
	// (ring_hop.cc), not for the block's whole way (no timer armed).
	void inject(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool again,
		    int64_t hop_seq = -1);
	// End-to-end recovery before the timeout (ring_loss.cc): blocks NAKed
	// to their origin or finisher (on_nak), a block whose later ones came
	// back first (acked), the oldest when nothing comes back (probe).
	void on_nak(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	// to: the node that NAKed a result, answered straight (resend_result).
	void again(CollJob &job, Message &m, PendingSet &pend, uint32_t sid, uint64_t now,
		   int32_t to = -1);
	// Each hop made reliable (ring_hop.cc): a number on every packet to
	// the next node (stamp; again_seq >= 0: the packet goes again with
	// that number), numbers taken in from the previous node (rx, take),
	// NAKed (nak) and ACKed (send_ack, on_ack), NAKed numbers sent
	// again (on_hop_nak, again_numbers, pass_again) or declared void
	// (send_void); the hop's timers.
	void stamp(CollJob &job, Message &m, wire::Ceth &h, uint8_t phase, uint32_t sid,
		   uint64_t now, int64_t again_seq = -1);
	void rx(CollJob &job, Message &m, const CollPacket &p, uint64_t now);
	void take(CollJob &job, Message &m, uint32_t q, uint8_t flags, uint64_t now);
	void nak(CollJob &job, Message &m, uint32_t s, uint32_t e, uint64_t now);
	void send_ack(CollJob &job, Message &m);
	void send_void(CollJob &job, const Message &m, uint32_t s, uint32_t e);
	void ack_all(CollJob &job);
	// Message mid is over here: what a neighbour asks of it is not sent
	// again from here (ACK flagged HOP, phase 2).
	void send_over(const CollJob &job, uint32_t mid, uint16_t to);
	void prev_over(CollJob &job, Message &m, uint64_t now);
	void nak_finishers(CollJob &job, Message &m, uint64_t now);
	uint64_t over_due(const CollJob &job, const Message &m) const;
	void ask_prev(CollJob &job, Message &m, uint64_t now);
	void on_ack(CollJob &job, const CollPacket &p, uint64_t now);
	void on_hop_nak(CollJob &job, Message &m, const CollPacket &p, uint64_t now);
	void again_numbers(CollJob &job, Message &m, uint32_t s, uint32_t e, uint64_t now);
	// What number q carried: sent again (sent), not to be sent from here
	// (relay: NAKed on to the block's finisher or origin), or needed no
	// more (moot: a partial whose result has passed here).
	enum class Again { sent, relay, moot };
	Again pass_again(CollJob &job, Message &m, uint32_t q, uint64_t now);
	Again forward_partial_again(CollJob &job, Message &m, uint32_t sid, uint64_t now,
				    uint32_t q);
	Again forward_result_again(CollJob &job, Message &m, uint32_t sid, uint64_t now,
				   uint32_t q);
	uint8_t *keep_slot(Message &m, uint32_t sid, uint32_t len);
	void kept_lent(Message &m, uint32_t sid);
	void unkeep(Message &m, uint32_t sid);
	void hop_timers(CollJob &job, Message &m, uint64_t now);
	uint64_t hop_deadline(const CollJob &job, const Message &m) const;
	uint64_t hop_rto(const CollJob &job) const;
	uint64_t tail_wait(const CollJob &job, uint32_t tries) const;
	uint64_t ack_wait(const CollJob &job, const Message &m, uint64_t now) const;
	uint64_t ack_delay(const CollJob &job) const;
	uint64_t renak_time(const CollJob &job) const;
	uint64_t probe_due(const CollJob &job, const Message &m) const;
	void probe(CollJob &job, Message &m, uint64_t now);
	void finish_block(CollJob &job, Message &m, uint32_t sid, uint8_t *data, uint64_t now,
			  uint32_t hold, uint32_t queue, uint8_t retrans, bool in_dst);
	void resend_result(CollJob &job, Message &m, uint32_t sid, uint64_t now,
			   int64_t hop_seq = -1, int32_t to = -1);
};

// A small message among the member NICs in about log2(N) packets in a
// row (xchg.cc): an allreduce or barrier by pairwise exchange (recursive
// doubling), where the ring takes 2(N-1) hops; a broadcast down a binomial
// tree, where the ring takes N-1.  Execution control chooses it for a
// message of at most IBV_COLL_EMU_XCHG_BYTES per rank on a job that runs
// round the ring.
class XchgPath final : public CollPath {
public:
	explicit XchgPath(CollCore &u) : u_(u) {}
	const char *name() const override { return "exchange"; }
	void start(Qp &qp, CollJob &job, uint64_t now) override;
	void on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now) override;
	void on_timer(Qp &qp, CollJob &job, uint64_t now) override;
	bool done(const CollJob &job) const override;
	uint64_t next_deadline(const CollJob &job) const override;
	// m (the newest in CollJob::flight) starts beside the messages that
	// run: on_timer, done and next_deadline see them all.
	void start(Qp &qp, CollJob &job, Message &m, uint64_t now);
	// The job's own timers, whether a message runs or not (xchg_ack.cc):
	// acknowledgements owed, and what messages done here sent that no
	// peer acknowledged yet (tend: true if it sent anything; due: the
	// next, 0: none).
	bool tend(CollJob &job, uint64_t now);
	uint64_t due(const CollJob &job) const;
	// The job is about to leave: every acknowledgement owed goes now;
	// true while what this node sent is not all acknowledged.
	bool leaving(CollJob &job, uint64_t now);
	// Every acknowledgement owed goes now (the job leaves the QP).
	void flush_owed(CollJob &job, uint64_t now);

private:
	CollCore &u_;
	enum class Kept { no, fresh, again };

	void advance(Qp &qp, CollJob &job, Message &m, uint64_t now);
	void advance_reduce(Qp &qp, CollJob &job, Message &m, uint64_t now);
	void advance_bcast(Qp &qp, CollJob &job, Message &m, uint64_t now);
	bool finish(Qp &qp, CollJob &job, Message &m);
	void open_out(CollJob &job, Message &m, uint32_t len, uint32_t phases, uint32_t tag);
	bool advance_piece(CollJob &job, Message &m, uint32_t piece);
	void send_piece(CollJob &job, Message &m, uint32_t phase, uint32_t piece);
	Kept keep(CollJob &job, const CollPacket &p);
	bool missing_before(const CollJob &job, const CollPacket &p) const;
	bool gap_before(CollJob &job, const CollPacket &p) const;
	void nak_crossed(CollJob &job, const CollPacket &p);
	bool sent_whole(CollJob &job, const wire::Ceth &p, uint16_t to);
	void repeat_older(CollJob &job, uint32_t mid, uint16_t peer, uint64_t sent_at,
			  uint64_t now);
	void repeat_gap(CollJob &job, XchgOut &o, uint32_t phase, uint32_t piece, uint64_t now);
	void arm(CollJob &job, Message &m, uint64_t now);
	// What is sent and acknowledged (xchg_ack.cc).
	void send_out(CollJob &job, XchgOut &o, uint32_t phase, bool again,
		      uint64_t pieces = ~0ull);
	void resend(CollJob &job, XchgOut &o, uint32_t phase, uint64_t now,
		    uint64_t pieces = ~0ull);
	uint64_t most_gap(const CollJob &job) const;
	void arm_out(const CollJob &job, XchgOut &o, uint64_t now);
	void again(CollJob &job, XchgOut &o, uint64_t now);
	void park(CollJob &job, Message &m, uint64_t now);
	// gap: an older message's partial from `to` of that phase is missing here.
	void acknowledge(CollJob &job, const wire::Ceth &p, uint16_t to, uint64_t held,
			 bool gap = false);
	void owe(CollJob &job, const wire::Ceth &p, uint64_t now);
	uint64_t pieces_here(CollJob &job, const wire::Ceth &p) const;
	void settle_owed(CollJob &job, uint16_t to, uint32_t mid, int phase = -1);
	void take_through(CollJob &job, const CollPacket &p);
	void on_ack(CollJob &job, const CollPacket &p, uint64_t now);
	uint64_t ack_wait(const CollJob &job) const;
};

// Through the job's switches, one or two levels (swpath.cc).
class SwitchPath final : public CollPath {
public:
	explicit SwitchPath(CollCore &u) : u_(u) {}
	const char *name() const override { return "switch"; }
	void start(Qp &qp, CollJob &job, uint64_t now) override;
	void on_packet(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now) override;
	void on_timer(Qp &qp, CollJob &job, uint64_t now) override;
	bool done(const CollJob &job) const override;
	uint64_t next_deadline(const CollJob &job) const override;

	// What execution control asks of the job's switches, whatever runs
	// its message: is the job for them, its keepalive (when due, 0:
	// never; send_config with all: to every plane), and leaving them.
	bool wanted(const CollJob &job) const;
	uint64_t keep_due(const CollJob &job) const;
	void send_config(CollJob &job, uint64_t now, bool all = false);
	void release(const CollJob &job);
	// Messages side by side (swpath_flight.cc): whether a WQE may start
	// beside those that run (execution control checks the rest), and m
	// (the newest in CollJob::flight) starting so.
	bool beside_ok(const CollJob &job) const;
	void start(Qp &qp, CollJob &job, Message &m, uint64_t now);
	// AUTO's agreement (swadmit.cc): a member's notice that it heard no
	// switch and runs the job round the ring; and a member's ring DATA
	// or RESULT of the message this node has on the switch path, which
	// says the same (false: the ring is still to take the packet).
	void on_member_fallback(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	bool ring_seen_answer(Qp &qp, CollJob &job, bool pending, uint64_t now);
	bool on_member_ring(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);

	// This node's leaf on a plane: the one switch it talks to there.
	const Endpoint &leaf(const CollJob &job, uint32_t plane) const;

private:
	uint32_t request(const CollJob &job) const;
	sw::Task task(const CollJob &job, uint32_t plane) const;
	bool above(const CollJob &job, uint32_t plane, sw::Above *a) const;
	// This node's bit at its leaf (wire/swproto.h), and the CETH phase of
	// a block whose result's data only node o needs (o < 0: every node).
	static uint64_t my_bit(const CollJob &job)
	{
		return 1ull << job.cfg.sw.member_bit[job.cfg.node];
	}
	static uint8_t phase(const CollJob &job, int o);
	void ready(CollJob &job);
	void launch(Qp &qp, CollJob &job, uint64_t now);
	void go(Qp &qp, CollJob &job, Message &m, uint64_t now);
	uint64_t next_out(const CollJob &job) const;
	Message *oldest_open(const CollJob &job) const;
	uint64_t span_end(const CollJob &job) const;
	uint32_t in_flight(const CollJob &job) const;
	Message *message_of(const CollJob &job, uint64_t gs, uint32_t *sid) const;
	bool repeat_due(CollJob &job, Message &m, uint64_t now);
	void overtaken(CollJob &job, const Message &later, uint64_t now);
	int owner(const Message &m, uint32_t sid) const;
	// Block sid's partial to its plane's switch; with ask, no payload:
	// a request for its result (wire/swproto.h, loss recovery).
	void send_block(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool again,
			bool ask = false);
	void pump(Qp &qp, CollJob &job, uint64_t now);
	void note_held(const CollJob &job, Message &m, bool sent, uint32_t flying, uint64_t now);
	void timers(Qp &qp, CollJob &job, uint64_t now);
	void config_timers(Qp &qp, CollJob &job, uint64_t now);
	bool all_heard(const CollJob &job) const;
	uint64_t config_interval(const CollJob &job) const;
	void release_block(CollJob &job, Message &m, uint32_t sid, uint64_t now, Holding endpoint);
	void send_ack(const CollJob &job, uint32_t mid, uint32_t sid, uint16_t to, bool ask);
	void on_ack(Qp &qp, CollJob &job, const CollPacket &p);
	void on_config_ack(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	void on_grant(Qp &qp, CollJob &job, const CollPacket &p, uint32_t plane, uint64_t now);
	void on_result(Qp &qp, CollJob &job, const CollPacket &p, uint64_t now);
	bool result_ok(const CollJob &job, const Message &m, const CollPacket &p) const;
	void on_nak(CollJob &job, Message &m, const CollPacket &p, uint64_t now);
	void spurious(CollJob &job, const PendingSet::Entry &e, Holding h, uint64_t now);
	void answered_twice(CollJob &job, const Message &m, uint32_t sid, uint64_t now);
	// The job's round trip through the switch, or unsampled() before it
	// has one.
	uint64_t round_trip(const CollJob &job) const;
	// Before the job has a round trip: a quarter of the retransmission
	// timeout, what an answer is taken to need and a probe waits.
	uint64_t unsampled(const CollJob &job) const;
	// rtt, of an answer that waited for nothing, as the job's first round
	// trip if it has none (swpath.cc: a CONFIG's, an ASK's).
	void first_sample(CollJob &job, uint64_t rtt);
	void find_gaps(CollJob &job, Message &m, uint32_t sid, uint64_t now, bool chain);
	bool crossed(const Message &m, const PendingSet::Entry &e, uint32_t sid,
		     uint64_t shown) const;
	void chained(CollJob &job, uint64_t prev, uint64_t now);
	bool late_within_window(const CollJob &job, const PendingSet::Entry &e, uint64_t now) const;
	uint64_t probe_due(const CollJob &job, const Message &m) const;
	void probe(CollJob &job, Message &m, uint64_t now);
	uint64_t blocked_due(const CollJob &job, const Message &m, bool urged) const;
	uint64_t least_answer(const CollJob &job) const;
	bool recently_sent(const CollJob &job, Message &m, uint32_t sid, uint64_t now,
			   bool partial);
	void admit_ask(CollJob &job, Message &m, uint64_t now);
	void on_admit(Qp &qp, CollJob &job, const CollPacket &p);
	void admit_timers(Qp &qp, CollJob &job, uint64_t now);
	void admit_done(const CollJob &job, const Message &m);
	void tell_fallback(const CollJob &job);
	void follow(Qp &qp, CollJob &job, const char *why, uint64_t now);

	CollCore &u_;
};

} // namespace ibv_coll::emu
