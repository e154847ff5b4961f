// The emulated in-network aggregation switch: a UDP port speaking the
// switch protocol (wire/swproto.h), a pool of Seg units (the NIC's
// SegPool), the reduce kernels, and a table of jobs.  Its workers each
// serve a socket of the port (SO_REUSEPORT; a steering program gives a
// block's packets to the worker of its unit, the rest to worker 0): the
// caller's thread is worker 0 (poll_once, run), the others are threads of
// their own (start).  Each blocks in epoll when there is nothing to do.
// The data path runs under a shared lock with one lock per Seg unit; what
// changes a job (configuration, admission, release, expiry, STATS) takes
// the lock exclusively.  With one worker there are no locks at all: its
// counters and stats are read in worker 0's thread, or once it stopped.
#pragma once

#include "net/transport.h"
#include "seg/seg_pool.h"
#include "util/clock.h"
#include "util/fd.h"
#include "wire/ceth.h"
#include "wire/swproto.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ibv_coll::emu {

// How jobs share the pool (ibv_coll_switchd(8) --policy).
enum class Policy : uint8_t {
	spatial,   // each job its own range, at most units / shares
	exclusive, // the first job holds the pool; the others are refused
	tdm,	   // the whole pool to one message at a time, decided per message
};
const char *policy_name(Policy p);
bool parse_policy(const char *s, Policy *p);

struct SwitchParams {
	std::string name = "switch";
	uint16_t port = 4791;
	uint32_t units = 4096;	      // Seg units
	uint32_t unit_bytes = 4096;   // bytes each
	uint32_t max_job_units = 0;   // most units one job gets (0: no limit)
	uint32_t job_idle_ms = 60000; // a job silent this long is forgotten
	// The least a message's newest block waits before what it lacks is
	// NAKed by its age, and before its results go again (0: as the
	// blocks arrive; switch_fold.cc, find_tail).  On real hosts the
	// members' own retransmission timeout's default: a member a busy
	// host deschedules is late, not lost, and each NAK for its partial
	// on the way cost a repeat (CI's ASan run: wire/S 1.067 at 64 KiB).
	// The simulator's hosts are late only by the fabric: 0 there.
	uint32_t tail_us = 20000;
	Policy policy = Policy::spatial;
	uint32_t shares = 0; // spatial: the pool split in this many (0: as asked)
	// A job gets every unit it asks for (at most max_job_units) or is
	// refused, as a switch that buffers whole messages must: a job asking
	// for its message's blocks then never reuses a unit within it.
	bool whole_grant = false;
	Impairment impair;
	// The clock of its timers and of the holds it reports: the host's,
	// or a simulator's virtual one (then its owner calls poll_once()).
	const util::Clock *clock = &util::host_clock();
	unsigned sockbuf = 8u << 20;
	bool gso = true;
	// Opens the transport (UdTransport on a verbs device); empty: a
	// UdpPort on port.  Called once per worker.
	TransportFactory transport;
	// Workers, each with its own socket of the port (SO_REUSEPORT), or
	// with its own transport from the factory (whoever gives it serves
	// them: poll_worker()).
	unsigned threads = 1;
	// A worker thread keeps polling (yielding the processor) this long
	// once idle before it blocks.
	uint32_t poll_us = 2000;
};

// The workers ibv_coll_switchd starts by default: the cores its CPU
// affinity allows, at most half the host's (the members of jobs on the
// same host need the rest: on 2 cores, 4 members and a second worker
// took 10-25 % off the switch's busbw and latency).
unsigned default_workers();

// A time that several workers may note at once (relaxed: one of them wins).
class SharedTime {
public:
	SharedTime(uint64_t t = 0) : v_(t) {}
	SharedTime(const SharedTime &o) : v_(uint64_t(o)) {}
	SharedTime &operator=(const SharedTime &o) { return *this = uint64_t(o); }
	SharedTime &operator=(uint64_t t)
	{
		v_.store(t, std::memory_order_relaxed);
		return *this;
	}
	operator uint64_t() const { return v_.load(std::memory_order_relaxed); }

private:
	std::atomic<uint64_t> v_;
};

// A readers-writer lock that prefers its writer: the workers' data path
// reads, a control packet writes and must not wait out a stream of reads.
class RwLock {
public:
	RwLock();
	~RwLock() { pthread_rwlock_destroy(&l_); }
	RwLock(const RwLock &) = delete;
	RwLock &operator=(const RwLock &) = delete;
	void lock() { pthread_rwlock_wrlock(&l_); }
	void unlock() { pthread_rwlock_unlock(&l_); }
	void lock_shared() { pthread_rwlock_rdlock(&l_); }
	void unlock_shared() { pthread_rwlock_unlock(&l_); }

private:
	pthread_rwlock_t l_;
};

struct SwitchCounters {
	uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
	uint64_t data = 0;	       // partials taken in
	uint64_t reductions = 0;       // folds into a unit
	uint64_t results = 0;	       // blocks completed (or relayed from the parent)
	uint64_t duplicates = 0;       // repeated partials, never reduced again
	uint64_t retrans_answered = 0; // repeats answered from the shadow copy
	uint64_t resent_up = 0;	       // partials sent to the parent again
	uint64_t asks = 0;	       // ASKs taken in (a child lacks a result)
	uint64_t naks = 0;	       // NAKs sent (a child's partial is missing)
	uint64_t tail_naks = 0;	       // of those, for the newest block, by its age
	uint64_t results_again = 0;    // the newest block's results sent again, unasked
	uint64_t configs = 0, grants = 0, denials = 0, releases = 0;
	uint64_t drop_icrc = 0, drop_malformed = 0, drop_key = 0, drop_job = 0, drop_node = 0;
	uint64_t drop_block = 0, drop_stale = 0, drop_busy = 0;
	uint64_t drop_incarnation = 0; // another incarnation's packets (a job given again)
	uint64_t incarnations = 0;     // a new incarnation took the job's place
	// Every datagram at the port is counted once: delivered (taken in by
	// a job and acted on), or one drop reason above or here (duplicates
	// too: a repeat is answered, never taken in again).
	uint64_t delivered = 0;
	uint64_t drop_empty = 0, drop_short = 0, drop_kind = 0;
	// Admission per message (tdm) and per job: grants, refusals by
	// reason, and the time the job's messages held the pool.
	uint64_t adm_grants = 0, adm_busy = 0, adm_scored = 0, adm_refused = 0;
	uint64_t pool_us = 0;
	// The most messages of one job refused in a row (tdm): a maximum,
	// not a sum, in totals and STATS.
	uint64_t adm_streak = 0;
	void add(const SwitchCounters &o);
};

// Every counter by name, in one order: the text and JSON output and the
// STATS_REPLY records list them so.
using NamedCounter = std::pair<const char *, uint64_t>;
std::vector<NamedCounter> named_counters(const SwitchCounters &c);

// What a switch holds of one job: the incarnation it serves, its key and
// its members (children), each with the nodes it serves.
struct SwitchJobView {
	struct Member {
		Endpoint ep;
		uint32_t qpn = 0;
		uint64_t cover = 0;
	};
	uint32_t inc = 0;
	uint64_t key = 0;
	std::vector<Member> members;
};

class Switch {
public:
	explicit Switch(const SwitchParams &p);
	~Switch();
	// Open the port: one socket per worker.
	int open();
	// Start workers 1.. (threads serving their sockets until the switch
	// is destroyed); worker 0 is whoever calls poll_once() or run().
	void start();
	unsigned workers() const { return unsigned(w_.size()); }
	uint16_t port() const { return w_[0]->port->port(); }
	// Serve until stop becomes true (checked at least every 200 ms).
	void run(const std::atomic<bool> &stop);
	// One pass of worker 0: take in what has arrived, without blocking.
	bool poll_once();
	// One pass of worker k < workers() in the caller's thread, as that
	// worker: for transports given (SwitchParams::transport), which the
	// caller serves in turn (a fuzz target's several workers), not with
	// start().
	bool poll_worker(unsigned k);
	// Block until a packet for worker 0 arrives or ms milliseconds pass.
	void wait(int ms);
	// Packets each worker's socket took in and sent.
	std::vector<std::pair<uint64_t, uint64_t>> worker_packets() const;
	// Per-job and total counters, as text (or JSON).
	void print_stats(FILE *f, bool json) const;
	SwitchCounters totals() const;
	uint64_t now() const { return p_.clock->now(); }
	// When poll_once() must run next though no packet comes (its
	// timers: the pool's holder, the forgetting of idle jobs, packets an
	// impairment holds back); 0: nothing pending.
	uint64_t next_deadline() const;
	// One job's counters; false when the switch holds no such job.
	bool job_counters(uint32_t jid, SwitchCounters *out) const;
	// One job's incarnation, key and members; false when there is none.
	bool job_view(uint32_t jid, SwitchJobView *out) const;
	// Buffers of stashed partials worker k keeps for its next ones, at
	// most kMaxSpare (tests: not while worker k runs on another thread).
	static constexpr size_t kMaxSpare = 256;
	size_t spare_buffers(unsigned k) const { return w_[k]->spare.size(); }
	uint32_t units_in_use() const; // reserved by jobs
	// Seg units holding a block now, and the most that ever did at once.
	uint32_t units_busy() const { return uint32_t(pool_.in_use()); }
	uint32_t units_high_water() const { return uint32_t(pool_.high_water()); }
	// Of those, the units still waiting for partials (or for the parent's
	// result): a unit holding its result is kept only to answer repeats
	// and is taken by the next block at once.  Counted by the pool.
	uint32_t units_collecting() const;
	// What STATS_REPLY carries: the totals, then the Seg units and jobs.
	std::vector<NamedCounter> stat_records() const;

private:
	// A child is its endpoint and QPN, not its endpoint alone: the
	// nodes of one job on one shared device (ibv_coll_devd) share its
	// address and UDP port, and each has its own collective QP.
	struct Child {
		Endpoint ep;
		IpAddr local;	   // our address it sent to: the source of our replies
		uint32_t qpn = 0;  // its collective QP (a switch: 0), where our packets go
		uint16_t node = 0; // a member's node index (CETH src_node)
		uint64_t cover = 0;
		bool is_switch = false;
		bool released = false;
	};
	enum class State : uint8_t { collecting, waiting_parent, granted, denied };
	struct Stash {
		uint64_t cover;
		std::vector<uint8_t> data;
	};
	// A worker's counters of a job, on cache lines of their own.
	struct alignas(64) WorkerCounters : SwitchCounters {};
	static std::array<uint8_t, 64> filled_bits()
	{
		std::array<uint8_t, 64> a;
		a.fill(0xff);
		return a;
	}
	struct Job {
		uint32_t jid = 0;
		uint32_t inc = 0; // the incarnation it serves (wire::Ceth::inc)
		uint64_t key = 0;
		uint16_t nodes = 0;
		uint64_t members = 0, subtree = 0;
		uint8_t up = 0; // our bit at the parent (wire/swproto.h)
		uint16_t plane = 0;
		bool inline_mode = false;
		bool has_parent = false;
		Endpoint parent;
		IpAddr parent_local;
		// Three levels: our parent as a child of its own (wire/swproto.h).
		bool has_above = false;
		sw::Above above;
		std::vector<Child> children;
		// The child whose cover holds each node bit (its index in
		// children; 0xff: none): child_of's first look.
		std::array<uint8_t, 64> by_bit = filled_bits();
		uint64_t covered = 0;
		uint32_t seg_req = UINT32_MAX;
		State state = State::collecting;
		uint32_t seg_base = 0, granted = 0;
		bool have_units = false;
		bool tdm = false; // the whole pool, one message at a time
		// Partials that came before their turn, by unit (granted entries;
		// the vectors keep their capacity from block to block).
		std::vector<std::vector<Stash>> stash;
		// When each child's partial of each unit's block arrived (unit *
		// children + child): what the result to it then says it was held
		// here (the CETH hold, for the member's congestion control).
		std::vector<uint64_t> arrive;
		// The seq of the last block whose results went to the
		// children, plus 1 (0: none yet), told with the next block's
		// (one worker only: wire/swproto.h, Loss).
		uint64_t last_result = 0;
		// The tail (one worker only; switch_fold.cc, find_tail): the
		// unit of the newest block begun, when it is looked at if it is
		// still collecting (0: not), and how often it was; per unit,
		// whether its block was repaired (a NAK went, or a repeat was
		// its first copy here); and how far apart the first copies of
		// a clean block arrive (the largest of late, shrinking by an
		// eighth each block).
		uint32_t newest = UINT32_MAX;
		uint64_t tail_at = 0;
		uint32_t tail_tries = 0;
		std::vector<uint8_t> repaired;
		uint64_t skew = 0;
		// When the newest block began, and the mean time between the
		// beginnings of successive blocks (an eighth each).
		uint64_t begun_at = 0, pace = 0;
		// When the tail's last NAKs went (0: answered), and how long the
		// first repeat after them took (the members' round trip).
		uint64_t tail_nak_at = 0, nak_rtt = 0;
		// Clean blocks completed since the last repaired one (or ASK);
		// the newest block's results, sent again when due (0: not),
		// with the block whose results went before them.
		uint32_t calm = UINT32_MAX;
		static constexpr uint32_t kCalmBlocks = 64;
		uint64_t again_at = 0;
		uint32_t again_unit = 0, again_seq = 0;
		uint64_t again_prev = 0;
		SharedTime last_seen;
		uint32_t released = 0;		 // children that said goodbye
		std::vector<Child> retired;	 // the previous incarnation's children
		std::vector<WorkerCounters> ctr; // one per worker: Switch::ctr()
		// tdm: what the switch decided for each recent message (kept
		// until every child heard it, and a while after), and what it
		// observed of the job's messages (switch_admit.cc).
		struct Decision {
			uint32_t mid;
			uint8_t why;	// 0 granted, else a kRan* fallback reason
			uint64_t heard; // children (by cover) that were answered
			uint64_t done;	// children that finished it
		};
		std::vector<Decision> decided;
		uint32_t last_mid = 0;
		bool any_mid = false;
		uint64_t last_start = 0; // first request of the latest message
		double period_ns = 0;	 // EWMA of the time between messages
		double dur_ns = 0;	 // EWMA of the time a message held the pool
		double bytes = 0;	 // EWMA of a message's bytes
		uint32_t starved = 0;	 // refusals in a row
		uint32_t hold_ms = 0;	 // the members' collective timeout
	};
	// The message holding the pool (tdm).
	struct Holder {
		bool on = false;
		uint32_t jid = 0, mid = 0;
		uint64_t since = 0;
		SharedTime last;
	};
	// A worker: its socket of the port, and what only it touches.
	struct Worker {
		std::unique_ptr<Transport> port;
		util::UniqueFd epfd;
		// Buffers of stashed partials, kept for the next ones: a
		// partial that arrives before its turn costs a copy, not an
		// allocation.
		std::vector<std::vector<uint8_t>> spare; // at most kMaxSpare
		SwitchCounters gone;			 // packets of no job (or of jobs forgotten)
		// What a receive returns, made once (not 64 packets' worth on
		// every pass).
		std::vector<RxPacket> rx = std::vector<RxPacket>(Transport::kBatch);
		std::thread th;
	};
	struct alignas(64) UnitLock {
		std::mutex m;
	};
	// The lock a pass of a worker holds: shared for the data path,
	// exclusive for what changes a job; none with one worker.
	class Section;
	struct In {
		uint8_t kind;
		wire::Ceth h;
		const uint8_t *payload;
		uint32_t paylen;
		Endpoint src;
		IpAddr dst;
		uint32_t tail_crc; // crc32_update(0, payload || pad)
		uint64_t rx_ns;	   // RxPacket::rx_ns, or when it was taken in
	};

	// Which worker this thread is (0 for any thread that is not one); no
	// thread-local look-up on every counter of a switch of one worker.
	unsigned me() const { return one_ ? 0 : me_threaded(); }
	unsigned me_threaded() const;
	Worker &wk() { return *w_[me()]; }
	Transport &tx() { return *wk().port; }
	SwitchCounters &ctr(Job &j) { return j.ctr[me()]; }
	SwitchCounters &gone() { return wk().gone; }
	static SwitchCounters job_total(const Job &j);
	bool multi() const { return !one_; }
	std::mutex *unit_lock(const Job &j, uint32_t unit)
	{
		return multi() ? &unit_mu_[j.seg_base + unit].m : nullptr;
	}
	void size_arrive(Job &j);
	bool touch(Job &j, uint64_t now); // notes the job alive; true when it wrote
	bool pass(unsigned k);		  // one pass of worker k
	void serve(unsigned k);		  // worker k's thread
	void wait_on(unsigned k, int ms);
	void timers(Section &s);
	SwitchCounters totals_locked() const;
	// The text output's line of the workers' receive and send batches.
	void print_batches(FILE *f) const;
	std::vector<NamedCounter> stat_records_locked() const;
	void handle(const RxPacket &rx, Section &s);
	static bool is_data(const In &p);
	bool parse(const RxPacket &rx, In &p); // switch_codec.cc
	Job *job_for(const In &p, const sw::Task *t, bool create, const sw::Above *above = nullptr);
	bool init_job(Job &j, const In &p, const sw::Task &t, const sw::Above *above);
	void tell_superseded(Job &j, const In &p, const sw::Task *t);
	void on_abort(const In &p);
	// The child that sent p: with a task, the one of that endpoint and
	// QPN; else the one of that endpoint that the CETH's src_node names
	// (the node its CONFIG bound to its QPN), or the switch there.
	static bool sent_by(const Child &c, const In &p, const sw::Task *t);
	Child *child_of(Job &j, const In &p, const sw::Task *t = nullptr);
	int add_child(Job &j, const In &p, const sw::Task &t);
	void on_config(const In &p);
	void on_config_ack(const In &p);
	void answer_pending(Job &j, const Child &c);
	void on_data(const In &p);
	void take_partial(Job &j, const Child &c, const In &p);
	void on_result(const In &p);
	void on_release(const In &p);
	void on_stats(const In &p); // switch_stats.cc
	void try_grant(Job &j);
	void grant_children(Job &j);
	void deny(Job &j, const char *why);
	bool alloc_units(Job &j, uint32_t want);
	void free_units(Job &j);
	void fold(Job &j, uint32_t unit, uint64_t cover, const uint8_t *data, uint32_t len);
	void unstash(Job &j, uint32_t unit); // drop a unit's waiting partials
	void keep_spare(std::vector<uint8_t> &&b);
	void complete_unit(Job &j, uint32_t unit);
	void send_up(Job &j, uint32_t unit);
	void send_result(Job &j, uint32_t unit, const Child &c, uint64_t now, uint64_t prev = 0);
	void send_results(Job &j, uint32_t unit, uint64_t now);
	void note_arrival(Job &j, uint32_t unit, const Child &c, uint64_t at);
	// Loss recovery (wire/swproto.h): NAK the children whose partials
	// the unit lacks, look for such units behind one just completed, and
	// answer a child's ASK.
	uint64_t lacking(const Job &j, uint32_t unit);
	void send_naks(Job &j, uint32_t unit, uint64_t only, uint64_t gap = 0);
	void find_missing(Job &j, uint32_t unit);
	void find_gap(Job &j, const Child &c, uint32_t unit, const In &p);
	uint64_t tail_wait(const Job &j) const;
	void arm_tail(Job &j, uint32_t unit, uint64_t first);
	void find_tail(Job &j, uint64_t now);
	void tail_answered(Job &j, uint64_t at);
	void tails(uint64_t now);
	void on_ask(Job &j, Child &c, const In &p);
	// A packet to dst; the payload is copied, or with lend_crc (its
	// crc32_update(0, payload || pad)) sent from where it is (a Seg unit,
	// which may change only after the port's tx_reclaim(unit.lent)).
	void send_to(Job &j, const Endpoint &dst, const IpAddr &src, uint32_t qpn, uint8_t kind,
		     const wire::Ceth &h, const void *task, const void *payload, uint32_t len,
		     const uint32_t *lend_crc = nullptr);
	void seal(SegUnit &u); // the unit holds a result: its CRC for the packets carrying it
	void send_config_up(Job &j);
	void expire(uint64_t now);
	// tdm admission (switch_admit.cc).
	void on_admit(const In &p);
	void on_admit_done(const In &p);
	uint8_t decide(Job &j, uint64_t now);
	double score(const Job &j, uint64_t now) const;
	void hold_end(uint64_t now, const char *why);
	void hold_expire(uint64_t now);
	bool tdm_holds(Job &j);
	Job::Decision *decision(Job &j, uint32_t mid);

	SwitchParams p_;
	std::vector<std::unique_ptr<Worker>> w_;
	SegPool pool_;
	std::vector<uint8_t> range_used_; // per unit: taken by a job
	std::map<uint32_t, Job> jobs_;
	uint64_t last_expire_ = 0;
	// The soonest a job's tail may be due (0: none armed; switch_fold.cc).
	uint64_t tail_next_ = 0;
	Holder hold_;
	mutable RwLock mu_;
	std::unique_ptr<UnitLock[]> unit_mu_; // with several workers
	std::atomic<bool> quit_{false};
	bool one_ = true; // one worker
};

} // namespace ibv_coll::emu
