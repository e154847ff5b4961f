// ibv_coll_sim: the device's collective engine (coll/) and the aggregation
// switch (switch/) of many emulated hosts in one process, on one virtual
// clock, over a packet-level fabric of links with a rate, a propagation
// delay, a tail-drop queue and ECN marking, and random loss at the ports.  Every packet is a
// real RoCEv2 packet (BTH to ICRC) built and parsed by the same codec as
// on a real port; nothing of the protocol is modelled, only the wire.
//
// Discrete events, in (time, order of scheduling): a link finishes sending
// a packet, a packet reaches a host or a switch, a host or a switch runs a
// pass (CollService::progress, Switch::poll_once) when packets came or its
// next deadline is due, a job posts its next message.  The same
// description and seed give the same events, whatever the machine.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ibv_coll::emu {
enum class Policy : uint8_t; // switch/switch.h
}

namespace ibv_coll::sim {

// One direction of a link.
struct LinkSpec {
	uint64_t rate_bps = 100000000000ull; // bits per second
	uint64_t delay_ns = 1000;	     // propagation, one way
	uint64_t queue_bytes = 1u << 20;     // tail drop beyond
	uint64_t ecn_bytes = 0;		     // CE-mark when the queue holds more (0: never)
};

enum class Shape : uint8_t {
	star,  // every host on one switch
	tree2, // hosts on leaves, the leaves on one spine
	tree3, // hosts on leaves, leaves in pods under a spine each, the spines on one core
};

struct FabricSpec {
	uint32_t nodes = 0;
	Shape shape = Shape::star;
	uint32_t nodes_per_leaf = 0; // tree2, tree3: hosts under each leaf
	uint32_t leaves_per_pod = 0; // tree3: leaves under each spine
	LinkSpec host;		     // host <-> its leaf, each way
	LinkSpec up;		     // leaf <-> spine (rate 0: host rate x nodes_per_leaf)
	LinkSpec core;		     // tree3: spine <-> core (rate 0: up's rate x leaves_per_pod)
	// Planes (rails): that many copies of the switches side by side, each
	// host with a link of its own to each; a switch job spreads its blocks
	// over them (ibv_coll_switch_attr.num_planes).  Host-to-host traffic
	// (the ring) takes plane 0.
	uint32_t planes = 1;
	// Each host pass starts up to this much later than it is due,
	// uniformly drawn: a host that is busy with other work.
	uint64_t jitter_ns = 0;
	// Each packet a host or a switch sends is lost with this probability
	// (as IBV_COLL_EMU_IMPAIR drop= on every port).
	double loss = 0;
	// Each packet a host or a switch sends is held port_delay_ns, give or take
	// up to port_jitter_ns (uniformly drawn), before it reaches its link
	// (as IBV_COLL_EMU_IMPAIR delay=,jitter= on every port: packets that
	// leave one after the other may arrive in the other order).
	uint64_t port_delay_ns = 0, port_jitter_ns = 0;
	bool cc = true; // the hosts' congestion control (IBV_COLL_EMU_CC)
	// A host's link queue is its NIC's: it holds what the NIC sends and
	// never drops it, as the device's port waits for room in its
	// interface's queue (IBV_COLL_EMU_PORT_WAIT); false: it drops what
	// overflows, as the switches' queues do.
	bool port_wait = true;
	uint32_t mtu = 4096;	      // the collective QPs' path MTU
	uint32_t switch_units = 4096; // Seg units of each switch
	// How the jobs on a switch share its pool (ibv_coll_switchd --policy;
	// {} is spatial), and spatial's shares (0: as asked).
	emu::Policy switch_policy{};
	uint32_t switch_shares = 0;
	bool switch_whole_grant = false; // a job gets all it asks for or is refused
	uint32_t nic_units = 2048;	 // Seg units of each host's NIC, shared by its jobs
	uint32_t timeout_ms = 0;	 // collective timeout (0: the device default)
	// The least retransmission timeout and tail-loss probe time of the
	// collective engine (IBV_COLL_EMU_COLL_RTO_US, _PROBE_US; rto 0 and
	// probe -1: the device defaults, made for real hosts' scheduling).
	uint32_t rto_us = 0;
	int64_t probe_us = -1;
	// A ring job's allreduce of at most this many bytes per rank is the
	// pairwise exchange (IBV_COLL_EMU_XCHG_BYTES; 0: never).
	uint32_t xchg_bytes = 16384;
	// Collectives of a job its NIC runs at once, when each is such an
	// exchange or a broadcast tree (IBV_COLL_EMU_COLL_DEPTH).
	uint32_t coll_depth = 4;
	// A host descheduled: from at_ns for for_ns it runs no pass, and what
	// reaches it waits (a host the operating system or another job took).
	struct Stall {
		uint32_t host;
		uint64_t at_ns, for_ns;
	};
	std::vector<Stall> stalls;
	// Every trace_ns of virtual time while jobs run, the switches' Seg
	// units in use and each job's congestion window are sampled (0: not).
	uint64_t trace_ns = 0;
};

enum class SimTopology : uint8_t { ring, sw, autosel };
enum class SimType : uint8_t { int32, f32 };
enum class SimOp : uint8_t { sum, max, min };
enum class SimColl : uint8_t { allreduce, bcast, barrier };

struct JobSpec {
	std::string name;
	SimTopology topology = SimTopology::sw;
	SimColl coll = SimColl::allreduce;
	uint32_t root = 0; // a broadcast's: a global rank
	uint32_t ranks_per_node = 1;
	SimType type = SimType::f32;
	SimOp op = SimOp::sum;
	// Bytes per rank, each a multiple of the type's size (a barrier: 0).
	std::vector<uint64_t> sizes;
	uint32_t iters = 1, warmup = 0;
	uint64_t start_ns = 0;
	// Seg units of each of its hosts' NICs it holds: blocks in flight
	// (the ring's window is these units' bytes).
	uint32_t seg_units = 256;
	std::vector<uint32_t> nodes; // the hosts it runs on (empty: all)
	// Through switches: blocks a host keeps in flight (0: as the grant
	// allows), and windows that slide on node 0's end-to-end ACK instead
	// of on the result (ibv_coll_switch_attr's window, IBV_COLL_SWITCH_E2E_ACK).
	uint32_t window = 0;
	bool e2e_ack = false;
	// Each rank's result overwrites its source (one buffer per rank, as
	// MPI_IN_PLACE: half the memory of a large run).
	bool in_place = false;
	// Collectives posted at once (each into buffers of its own): the
	// next goes when the oldest completes everywhere, as a loop that
	// keeps depth requests outstanding does; small ones run side by side
	// (IBV_COLL_EMU_COLL_DEPTH, the hosts' coll_depth), others one after
	// another.  The time of a size is then from its first timed post to
	// its last completion, per collective.
	uint32_t depth = 1;
	// Phantom ranks: every rank sends the same source from one buffer of
	// the job's and writes its result into one buffer of the job's, so
	// the job's memory does not grow with its hosts (at 65,535 hosts two
	// buffers per rank would be 128 GiB at 1 MiB).  The packets carry and
	// the switches reduce real data all the same; the result is checked
	// once per message, on that shared buffer (every element as its last
	// writer left it), against the reduction of N equal vectors.
	bool phantom = false;
	// One member whose application posts each message late_ns after the
	// others (its NIC runs meanwhile, as a rank's does while the rank
	// writes a checkpoint): late_node indexes the job's nodes.
	uint64_t late_ns = 0;
	uint32_t late_node = 0;
};

// One size of one job: the mean of its timed iterations.
struct SizeResult {
	uint64_t bytes = 0, count = 0;
	uint64_t time_ns = 0;			// mean, post to the last host's completion
	double algbw = 0, busbw = 0, bound = 0; // GB/s; bound: what busbw could be
	double wire_s = 0;   // bytes the job's first host put on its link per message / S
	uint64_t wrong = 0;  // ranks whose result differs from the reference
	uint64_t failed = 0; // completions without success
};

struct JobResult {
	JobSpec spec;
	std::vector<SizeResult> sizes;
	bool done = false;
};

// One sample of the trace (FabricSpec::trace_ns).
struct TraceRow {
	uint64_t t_ns;
	std::vector<uint32_t> switch_units; // per switch: Seg units holding a block
	// Per job: its first host's congestion window in blocks (the switch
	// path's for switch jobs), 0 while it has none.
	std::vector<double> cwnd;
};

// What one switch's pool did over the run.
struct SwitchUse {
	uint32_t peak_collecting = 0; // most units waiting for partials at once
	// The bytes it took in (UDP payloads) over what its ports can take in
	// over the run: the share of its capacity the jobs used.
	double load = 0;
	// Admission per message (tdm): grants, refusals (busy, scored out or
	// refused), the most of one job's messages refused in a row, and the
	// time messages held the pool.
	uint64_t adm_grants = 0, adm_refusals = 0, adm_streak = 0, pool_us = 0;
	// ASKs it took in, and NAKs it sent (ibv_coll_switchd(8)'s asks, naks).
	uint64_t asks = 0, naks = 0;
};

struct SimReport {
	std::vector<JobResult> jobs;
	std::vector<TraceRow> trace;
	std::vector<uint32_t> switch_peak; // per switch: most Seg units holding blocks at once
	std::vector<SwitchUse> switch_use; // per switch
	uint64_t end_ns = 0, events = 0, packets = 0, drops = 0, marks = 0;
	// The hosts' congestion control and loss recovery, summed: window
	// cuts by signal, repeats before the timeout, NAKs waited out as
	// reordering, repeats found needless.
	uint64_t cc_cuts = 0, cc_delay_cuts = 0, cc_loss_cuts = 0, cc_cnp_cuts = 0;
	uint64_t fast_retrans = 0, reorder_waits = 0, spurious_retrans = 0;
	// The collective engines', summed: blocks sent again (by any cause),
	// NAKs sent, tail-loss probes, packets refused as malformed.
	uint64_t repeats = 0, naks = 0, probes = 0, malformed = 0;
	// Sending held by a full window on the switch path, and for how long
	// (CollCounters::win_holds), summed over the hosts.
	uint64_t win_holds = 0, win_held_ns = 0;
	bool stuck = false; // jobs left unfinished: no event was left, or the limit passed
	std::string state;  // then: what every host and switch holds
};

class Fabric;

class Simulator {
public:
	Simulator(const FabricSpec &f, uint64_t seed);
	~Simulator();
	// Checks a job against the fabric; false with *err naming the field.
	bool add_job(const JobSpec &j, std::string *err);
	// Writes every packet, as it leaves its sender, to a pcap file
	// (false with *err when it cannot be opened); close_pcap() finishes
	// it (false with *err when a write failed).
	bool open_pcap(const std::string &path, std::string *err);
	bool close_pcap(std::string *err);
	// Runs every job to its end, or until limit_ns of virtual time;
	// progress, when set, is called about every second of wall time.
	SimReport run(uint64_t limit_ns,
		      const std::function<void(uint64_t virt_ns, uint64_t events,
					       uint32_t jobs_done, uint32_t jobs)> &progress = {});

private:
	std::unique_ptr<Fabric> f_;
};

// The fabric's description checked: empty, or what is wrong (naming the field).
std::string check_fabric(const FabricSpec &f);

// A description file (JSON, ibv_coll_sim(1)): false with *err naming the
// field that is wrong.
bool parse_description(const std::string &text, FabricSpec *f, std::vector<JobSpec> *jobs,
		       uint64_t *seed, std::string *err);

// nccl-tests-style tables, one per job.
void print_report(FILE *out, const FabricSpec &f, const SimReport &r);
// The same as one JSON document (for plots).
std::string report_json(const FabricSpec &f, const SimReport &r);

} // namespace ibv_coll::sim
