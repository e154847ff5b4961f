// libibv_coll_mpi - internal interfaces between the PMPI entry points
// (mpi_intercept.cc), the per-communicator jobs (mpi_job.cc) and the
// configuration and statistics (mpi_config.cc).
#pragma once

#include <ibv_coll/ibv_coll.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ibv_coll::mpi {

// The collectives this library can take over, in stats order.
enum Coll {
	kAllreduce,
	kReduce,
	kBcast,
	kAllgather,
	kReduceScatter,
	kBarrier,
	kIallreduce,
	kIbcast,
	kIreduce,
	kIallgather,
	kIreduceScatter,
	kIbarrier,
	kAllgatherv,	 // through the device's allgather, each share padded to the largest
	kReduceScatterV, // MPI_Reduce_scatter: reduce-scatter of padded shares
	kNumColls
};
extern const char *const kCollNames[kNumColls];

// Why a call went to PMPI instead (stats order).
enum Why {
	kDisabled, // IBV_COLL_MPI_ENABLE=0 or the collective not in IBV_COLL_MPI_COLLS
	kComm,	   // intercommunicator, too few or too many ranks
	kDatatype, // not a contiguous predefined type the device reduces
	kOp,	   // user op, or a predefined one the device lacks
	kSize,	   // outside IBV_COLL_MPI_MIN_BYTES..MAX_BYTES, or 0 elements
	kSetup,	   // the communicator's job could not be brought up
	kFirst,	   // nonblocking, before the communicator's first blocking call set its job up
	kNumWhy
};
extern const char *const kWhyNames[kNumWhy];

struct Config {
	bool enable = true;
	unsigned colls = (1u << kNumColls) - 1; // bit per Coll
	std::string device; // empty: the first non-loopback device, else crxe_lo
	std::vector<ibv_coll_switch_addr> switches; // one per plane
	int topology = -1;			    // -1: auto with a switch, ring without
	size_t min_bytes = 0, max_bytes = 0;	    // per rank; max 0: what the device takes
	int min_ranks = 2;
	uint32_t seg_units = 0;	       // each communicator's Seg units (0: by its size)
	uint32_t timeout_ms = 3600000; // a rank may come an hour late: MPI waits for it
	int spin_us = 2000;	       // poll this long before sleeping; -1: never sleep
	bool stats = false;
};

// Read IBV_COLL_MPI_* once.  0, or a message in *err.
int load_config(Config *c, std::string *err);

struct Stats {
	uint64_t offloaded[kNumColls] = {};
	uint64_t fell[kNumColls] = {};
	uint64_t why[kNumWhy] = {};
	uint64_t ran_switch = 0, ran_hier = 0, ran_ring = 0, ran_fallback = 0, ran_local = 0;
	uint64_t errors = 0;
};

extern Config g_cfg;
extern Stats g_stats;
extern int g_world_rank;

void print_stats();
// One line on stderr, prefixed with the library and the world rank.
void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// One operation posted on a communicator's collective QP.
struct Op {
	uint64_t wr_id = 0;
	bool done = false;
	ibv_wc_status status = IBV_WC_SUCCESS;
	ibv_coll_status coll_status = IBV_COLL_STATUS_SUCCESS;
	unsigned flags = 0;
	// Where the result lands when it went through a bounce buffer.
	void *copy_to = nullptr;
	const void *copy_from = nullptr;
	size_t copy_bytes = 0;
	ibv_coll_mr *mrs[2] = {}; // the registrations it uses (mr_get)
	void *tmp = nullptr;	  // a private copy of the input (in place)
	void *owned = nullptr;	  // the caller's copy of an in-place input, freed with the op
	struct Job *job = nullptr;
	// The work request, kept while the send queue is full (posted later,
	// in order, by the job's progress).
	ibv_coll_send_wr wr{};
	ibv_sge sge[2] = {};
	Coll coll = kAllreduce;
};

// What a collective asks of the device, in MPI terms already checked.
struct Request {
	ibv_coll_wr_opcode opcode;
	const void *src; // this rank's input
	void *dst;	 // this rank's output (may equal src)
	size_t src_bytes, dst_bytes;
	uint64_t count; // elements per rank, as ibv_coll_send_wr counts them
	ibv_coll_op op;
	ibv_coll_dtype dtype;
	uint32_t root;
};

struct Job;
// Read the configuration and this process's world rank (once).
void lib_init();
// Whether a communicator of size processes may be offloaded (the device's
// node bitmap holds 64).
inline bool offload_size(int size)
{
	return size >= g_cfg.min_ranks && size <= 64;
}
// The communicator's job, set up on first use when may_setup (a collective
// over comm of its own: only a blocking call may make it, since ranks may
// start nonblocking collectives on different communicators in different
// orders); nullptr when it cannot be or, without may_setup, is not yet.
Job *job_of(MPI_Comm comm, bool may_setup);
bool job_failed(const Job *j);
// MPI_COMM_WORLD's job, from MPI_Init, which every process makes together:
// a program whose first collective is nonblocking (OSU's osu_iallreduce)
// then has it offloaded too.
void job_world();
size_t job_max_bytes(const Job *j);
// Post; the Op is heap-allocated and owned by the caller after wait/test.
int job_post(Job *j, const Request &r, Coll coll, Op **out);
// Drive the device until op completes (block) or once (test).
int job_wait(Op *op);
bool job_test(Op *op);
// Release the op's buffers; returns 0 or an MPI error after logging it.
int job_finish(Op *op, MPI_Comm comm);

// The registration cache (mpi_mr.cc): a registration that covers
// [p, p + n), taken until mr_put (nullptr with errno on failure); at
// MPI_Finalize, before the protection domain goes, mr_flush.
ibv_coll_mr *mr_get(ibv_coll_pd *pd, const void *p, size_t n);
void mr_put(ibv_coll_mr *mr);
void mr_flush();

// Keyval plumbing: attach, and tear everything down at MPI_Finalize.
void jobs_finalize();
bool comm_free_hook(MPI_Comm comm);

} // namespace ibv_coll::mpi
