// libibv_coll_mpi jobs: one collective QP (one job) per communicator, each
// MPI process serving one local rank, brought up on the communicator's
// first offloaded call with its own PMPI_Allgather of addresses, torn down
// when the communicator is freed or at MPI_Finalize.  Each process is a
// node of its own, unless the device opened is the host's shared device
// (IBV_COLL_CRXE_SHARED=y, which the device's capabilities report as
// IBV_COLL_CAPS_SHARED_DEVICE): then the ranks of one host (MPI's shared-memory
// domain) are one node, the QP of the lowest of them leads it and the
// others join it (IBV_COLL_JOB_ATTR_LOCAL), so that the NIC reduces the
// host's ranks and sends one partial.
#include "coll_mpi.h"
#include "seg_range.h"

#include <poll.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>

namespace ibv_coll::mpi {

namespace {

constexpr int kSlots = 16;	     // bounce slots per communicator (more in flight: registered)
constexpr size_t kBounce = 32 << 10; // per slot and direction: small calls copy
// Requests a communicator's send queue holds; more wait in the library
// until a wait or test of ours posts them, so the deep queue keeps that
// rare (a rank blocked in a point-to-point call meanwhile posts none).
constexpr uint32_t kSendQueue = 256;

struct Slot {
	char *src, *dst;
	bool busy;
};

} // namespace

struct Job {
	MPI_Comm comm = MPI_COMM_NULL;
	int rank = 0, size = 0;
	bool failed = false;		     // setup failed on some member: PMPI from now on
	ibv_coll_comp_channel *ch = nullptr; // to sleep on when polling took too long
	bool armed = false;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	char *arena = nullptr;
	ibv_coll_mr *arena_mr = nullptr;
	Slot slots[kSlots] = {};
	std::vector<Op *> pending; // posted and not yet finished (done or not)
	std::deque<Op *> backlog;  // posted by the application, not yet to the full send queue
	uint64_t next_wr = 1;
	size_t max_bytes = 0;
	uint64_t range = 0; // its granules in g_granules_busy
};

namespace {

ibv_coll_context *g_ctx;
ibv_coll_pd *g_pd;
ibv_coll_caps g_caps;
bool g_dev_tried, g_cfg_loaded, g_cfg_bad;
int g_keyval = MPI_KEYVAL_INVALID;
std::list<Job *> g_jobs;
uint32_t g_comm_counter;
size_t g_backlogged; // ops of all jobs waiting for room in a send queue
// The Seg units of this process's live jobs, a bit per granule of the
// device's (addon/seg_range.h; Job::range).
uint64_t g_granules_busy;

// What each member contributes to the communicator's allgather.
struct Blob {
	ibv_coll_member m;
	uint32_t ok;
	uint32_t lead;	// the rank (in the communicator) leading this one's node
	uint32_t local; // this one's place in its node
	uint32_t jid;	// member 0's is the job's
	uint64_t job_key;
	addon::SegAsk ask; // member 0's: the job's Seg units
	uint64_t free;	   // the granules no live job of this process has
};

// The default device: the loopback one when the whole job is on this host
// (Open MPI says so), else the first other crxe device.
const char *default_device()
{
	const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *ws = getenv("OMPI_COMM_WORLD_SIZE");
	return ls && ws && !strcmp(ls, ws) ? "crxe_lo" : nullptr;
}

void open_device()
{
	g_dev_tried = true;
	int n = 0;
	const char *want = g_cfg.device.empty() ? default_device() : g_cfg.device.c_str();
	ibv_coll_device **list = ibv_get_coll_device_list(&n);
	ibv_coll_device *pick = nullptr, *lo = nullptr;
	for (int i = 0; list && i < n; i++) {
		const char *name = ibv_get_coll_device_name(list[i]);
		if (want ? !strcmp(name, want)
			 : (!pick && strncmp(name, "crxe_", 5) == 0 &&
			    strcmp(name, "crxe_lo") != 0))
			pick = list[i];
		if (!strcmp(name, "crxe_lo"))
			lo = list[i];
	}
	if (!pick && !want)
		pick = lo;
	if (pick)
		g_ctx = ibv_open_coll_device(pick);
	int err = errno;
	ibv_free_coll_device_list(list);
	if (!g_ctx) {
		log_line("cannot open device %s: %s; collectives go to MPI", want ? want : "crxe_*",
			 pick ? strerror(err) : "no such device");
		return;
	}
	if (!(g_pd = ibv_alloc_coll_pd(g_ctx)) || ibv_query_coll_caps(g_ctx, &g_caps)) {
		log_line("device setup: %s; collectives go to MPI", strerror(errno));
		ibv_close_coll_device(g_ctx);
		g_ctx = nullptr;
	}
}

void destroy(Job *j)
{
	if (j->qp)
		ibv_destroy_coll_qp(j->qp);
	if (j->arena_mr)
		ibv_dereg_coll_mr(j->arena_mr);
	if (j->cq)
		ibv_destroy_coll_cq(j->cq);
	if (j->ch)
		ibv_destroy_coll_comp_channel(j->ch);
	g_backlogged -= j->backlog.size();
	g_granules_busy &= ~j->range;
	// A request the device finished keeps its result: one that went
	// through a bounce slot is copied out now, before the slots go.  One
	// it did not (MPI_Comm_free waits for them, so only at MPI_Finalize
	// or when MPI frees a communicator behind our back) is reported as
	// failed when waited for.
	for (Op *op : j->pending) {
		if (op->done && op->status == IBV_WC_SUCCESS && op->copy_bytes)
			memcpy(op->copy_to, op->copy_from, op->copy_bytes);
		op->copy_bytes = 0;
		op->tmp = nullptr;
		op->job = nullptr;
	}
	free(j->arena);
	g_jobs.remove(j);
	delete j;
}

int delete_fn(MPI_Comm, int, void *attr, void *)
{
	destroy(static_cast<Job *>(attr));
	return MPI_SUCCESS;
}

// Local half of the setup: CQ, QP in INIT, bounce slots.  false on failure.
bool create_local(Job *j)
{
	if (!g_ctx)
		return false;
	ibv_coll_qp_init_attr ia{};
	ibv_coll_qp_attr a{};
	if (!(j->ch = ibv_create_coll_comp_channel(g_ctx)) ||
	    !(j->cq = ibv_create_coll_cq(g_ctx, 2 * kSendQueue, nullptr, j->ch, 0)))
		return false;
	ia.send_cq = ia.recv_cq = j->cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = kSendQueue;
	ia.cap.max_send_sge = 1;
	if (!(j->qp = ibv_create_coll_qp(g_pd, &ia)))
		return false;
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if (ibv_modify_coll_qp(j->qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT))
		return false;
	size_t bytes = 2 * kBounce * kSlots;
	if (!(j->arena = static_cast<char *>(aligned_alloc(4096, bytes))) ||
	    !(j->arena_mr = ibv_reg_coll_mr(g_pd, j->arena, bytes, IBV_ACCESS_LOCAL_WRITE)))
		return false;
	for (int i = 0; i < kSlots; i++)
		j->slots[i] = {j->arena + 2 * kBounce * size_t(i),
			       j->arena + 2 * kBounce * size_t(i) + kBounce, false};
	j->max_bytes = g_caps.max_count_bytes ? size_t(g_caps.max_count_bytes) : UINT32_MAX;
	if (j->max_bytes > UINT32_MAX)
		j->max_bytes = UINT32_MAX; // an sge's length
	return true;
}

// Whether every member's device is the host's shared device, as the
// provider says (it alone reads IBV_COLL_CRXE_SHARED).  Decided together:
// the split below is a collective call, which the members must all make
// or all skip, and a member whose device did not open has no caps.
bool shared_device(MPI_Comm comm)
{
	int mine = g_ctx && (g_caps.comp_mask & IBV_COLL_CAPS_FLAGS) &&
		   (g_caps.flags & IBV_COLL_CAPS_SHARED_DEVICE),
	    all = 0;
	return PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS && all;
}

// With the shared device: the communicator rank that leads this process's
// node (the lowest of its host's) and its place there.  Else each its own.
void host_place(MPI_Comm comm, int rank, uint32_t *lead, uint32_t *local)
{
	MPI_Comm host;
	int lr = 0, low = rank;
	*lead = uint32_t(rank);
	*local = 0;
	if (!shared_device(comm) || PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank,
							 MPI_INFO_NULL, &host) != MPI_SUCCESS)
		return;
	if (PMPI_Comm_rank(host, &lr) == MPI_SUCCESS &&
	    PMPI_Allreduce(&rank, &low, 1, MPI_INT, MPI_MIN, host) == MPI_SUCCESS) {
		*lead = uint32_t(low);
		*local = uint32_t(lr);
	}
	PMPI_Comm_free(&host);
}

// The job's nodes from the blobs: node_of[r] for every rank, true when the
// hosts' ranks can form nodes.  A node's ranks must be consecutive in the
// communicator (ranks are the job's in node order), and the job within
// the device's limits; else every rank is a node of its own (what all
// members conclude alike, from the same blobs).
bool group(const std::vector<Blob> &all, std::vector<uint32_t> *node_of, uint32_t *nodes)
{
	uint32_t n = 0, in_node = 0;
	bool ok = true;
	node_of->assign(all.size(), 0);
	for (size_t r = 0; r < all.size(); r++) {
		bool starts = all[r].lead == r && all[r].local == 0;
		bool follows = r > 0 && all[r].lead == all[r - 1].lead &&
			       all[r].local == all[r - 1].local + 1;
		if (starts) {
			n++;
			in_node = 0;
		}
		ok = ok && (starts || follows) && ++in_node <= 64;
		(*node_of)[r] = n - 1;
	}
	ok = ok && n <= 64;
	if (!ok)
		for (size_t r = 0; r < all.size(); r++)
			(*node_of)[r] = uint32_t(r);
	*nodes = ok ? n : uint32_t(all.size());
	return ok;
}

// Bring the QP to RTS with the members' blobs.  false on failure.
bool connect(Job *j, const std::vector<Blob> &all)
{
	std::vector<uint32_t> node_of;
	uint32_t nodes = 0;
	bool grouped = group(all, &node_of, &nodes);
	// One member per node: its lead's address and QP, the node's ranks.
	std::vector<ibv_coll_member> members(nodes);
	for (size_t i = 0; i < all.size(); i++) {
		uint32_t k = node_of[i];
		if (!grouped || all[i].local == 0) {
			members[k] = all[i].m;
			members[k].num_ranks = 0;
		}
		members[k].num_ranks++;
	}
	const uint32_t me = node_of[size_t(j->rank)];
	const bool joins = grouped && members[me].num_ranks > 1;
	ibv_coll_port_attr pa{};
	ibv_coll_switch_attr sw{};
	ibv_coll_job_attr job{};
	ibv_coll_qp_attr a{};
	// No return before the barrier below: the others would wait there.
	int qerr = ibv_query_coll_port(g_ctx, 1, &pa);
	job.jid = all[0].jid;
	job.node_index = me;
	job.num_nodes = nodes;
	if (joins) { // the node's other ranks are other processes' QPs
		job.comp_mask |= IBV_COLL_JOB_ATTR_LOCAL;
		job.local_first = all[size_t(j->rank)].local;
		job.local_count = 1;
	}
	job.members = members.data();
	job.topology = ibv_coll_topology(g_cfg.topology);
	// Nodes whose leads share a device (the shared device, when a host's
	// ranks could not form one node) split the communicator's Seg units.
	uint32_t devs = 0, idx = 0;
	for (uint32_t k = 0; k < nodes; k++)
		if (!memcmp(&members[k].gid, &members[me].gid, sizeof(members[k].gid)) &&
		    members[k].udp_port == members[me].udp_port) {
			idx += k < me;
			devs++;
		}
	job.seg_count = addon::seg_count(all[0].ask, devs);
	job.seg_base = addon::seg_base(all[0].ask, j->range, devs, idx);
	job.job_key = all[0].job_key;
	job.timeout_ms = g_cfg.timeout_ms;
	if (!g_cfg.switches.empty() && g_cfg.topology != IBV_COLL_TOPO_RING) {
		sw.num_planes = uint32_t(g_cfg.switches.size());
		sw.num_leaves = 1;
		sw.leaves = g_cfg.switches.data();
		job.comp_mask |= IBV_COLL_JOB_ATTR_SWITCH;
		job.sw = &sw;
	}
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa.active_mtu;
	a.job = &job;
	// The leads first: the others join a QP that has the job.  (Every
	// member takes part in the barrier when some node is grouped.)
	const bool lead = !grouped || all[size_t(j->rank)].local == 0;
	int err = qerr	 ? qerr
		  : lead ? ibv_modify_coll_qp(j->qp, &a,
					      IBV_COLL_QP_STATE | IBV_COLL_QP_JOB |
						      IBV_COLL_QP_PATH_MTU)
			 : 0;
	if (grouped && nodes < all.size() && PMPI_Barrier(j->comm) != MPI_SUCCESS && !err)
		err = EPROTO;
	if (!lead && !err)
		err = ibv_modify_coll_qp(
			j->qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU);
	if (!err) {
		a.qp_state = IBV_QPS_RTS;
		err = ibv_modify_coll_qp(j->qp, &a, IBV_COLL_QP_STATE);
	}
	if (err)
		log_line("job 0x%x on a communicator of %d (%u nodes%s): %s; its collectives go to "
			 "MPI",
			 job.jid, j->size, nodes, joins ? ", this host's ranks one node" : "",
			 strerror(err));
	return !err;
}

// The collective part: every member of comm calls this once.
Job *setup(MPI_Comm comm)
{
	Job *j = new Job;
	j->comm = comm;
	PMPI_Comm_rank(comm, &j->rank);
	PMPI_Comm_size(comm, &j->size);
	Blob me{};
	me.ok = create_local(j);
	if (me.ok) {
		ibv_coll_port_attr pa;
		me.ok = !ibv_query_coll_port(g_ctx, 1, &pa) &&
			!ibv_query_coll_gid(g_ctx, 1, 0, &me.m.gid);
		me.m.udp_port = pa.udp_port;
		me.m.num_ranks = 1;
		me.m.qp_num = j->qp->qp_num;
	}
	host_place(comm, j->rank, &me.lead, &me.local);
	if (j->rank == 0) {
		// Jobs one after another (and other programs') through one switch
		// must differ: the process id and a count of communicators.
		uint32_t c = g_comm_counter++;
		me.jid = ((uint32_t(getpid()) << 10) ^ (c * 0x9e3779b1u)) | 1u;
		me.job_key = (uint64_t(me.jid) << 32) ^ 0x1bc0317ull ^ uint64_t(c);
		me.ask = addon::seg_ask(g_caps.max_seg_units, g_cfg.seg_units, j->size);
	}
	me.free = ~g_granules_busy;
	std::vector<Blob> all(size_t(j->size));
	int rc = PMPI_Allgather(&me, sizeof(me), MPI_BYTE, all.data(), sizeof(me), MPI_BYTE, comm);
	bool ok = rc == MPI_SUCCESS;
	for (const Blob &b : all)
		ok = ok && b.ok;
	// The lowest run of granules free at every member (all conclude
	// alike): none when other live communicators hold too many.
	uint64_t avail = ~0ull;
	for (const Blob &b : all)
		avail &= b.free;
	j->range = ok ? addon::seg_pick(all[0].ask, avail) : 0;
	if (ok && !j->range && j->rank == 0)
		log_line(
			"a communicator of %d: no %u Seg units free at every member (live "
			"communicators hold them; IBV_COLL_MPI_SEG_UNITS); its collectives go to MPI",
			j->size, all[0].ask.granules * all[0].ask.granule);
	ok = ok && j->range;
	g_granules_busy |= j->range;
	int up = ok && connect(j, all), every = 0;
	// Everyone at RTS (or everyone told that someone is not) before the
	// first post, so that no data block reaches a QP still in INIT.
	if (PMPI_Allreduce(&up, &every, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
		every = 0;
	if (!every) {
		if (j->qp) {
			ibv_destroy_coll_qp(j->qp);
			j->qp = nullptr;
		}
		g_granules_busy &= ~j->range;
		j->range = 0;
		j->failed = true;
	}
	g_jobs.push_back(j);
	return j;
}

int post_wr(Job *j, Op *op)
{
	ibv_coll_send_wr *bad;
	return ibv_post_coll_send(j->qp, &op->wr, &bad);
}

// Post what waited for room in the send queue, oldest first.  A post that
// fails otherwise fails its op, as the device would have.
void post_backlog(Job *j)
{
	while (!j->backlog.empty()) {
		Op *op = j->backlog.front();
		int err = post_wr(j, op);
		if (err == ENOMEM)
			return;
		j->backlog.pop_front();
		g_backlogged--;
		if (err) {
			log_line("%s: post: %s", kCollNames[op->coll], strerror(err));
			op->done = true;
			op->status = IBV_WC_GENERAL_ERR;
			op->coll_status = IBV_COLL_STATUS_SUCCESS;
		}
	}
}

void progress(Job *j)
{
	if (!j->backlog.empty())
		post_backlog(j);
	ibv_coll_wc wc[8];
	int n = ibv_poll_coll_cq(j->cq, 8, wc);
	for (int i = 0; i < n; i++)
		for (Op *op : j->pending)
			if (!op->done && op->wr_id == wc[i].wr_id) {
				op->done = true;
				op->status = wc[i].status;
				op->coll_status = wc[i].coll_status;
				op->flags = wc[i].wc_flags;
			}
}

} // namespace

void lib_init()
{
	if (g_world_rank < 0)
		PMPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank);
	if (!g_cfg_loaded) {
		std::string err;
		g_cfg_loaded = true;
		int level = MPI_THREAD_SINGLE;
		if (load_config(&g_cfg, &err)) {
			log_line("%s; collectives go to MPI", err.c_str());
			g_cfg.enable = false;
			g_cfg_bad = true;
		} else if (PMPI_Query_thread(&level) == MPI_SUCCESS &&
			   level == MPI_THREAD_MULTIPLE && g_cfg.enable) {
			// Our job table and counters are not shared between threads.
			log_line("MPI_THREAD_MULTIPLE: collectives go to MPI");
			g_cfg.enable = false;
		}
	}
}

Job *job_of(MPI_Comm comm, bool may_setup)
{
	if (!g_dev_tried)
		open_device();
	if (g_keyval == MPI_KEYVAL_INVALID &&
	    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &g_keyval, nullptr) !=
		    MPI_SUCCESS)
		return nullptr;
	void *attr = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, g_keyval, &attr, &found);
	Job *j = found ? static_cast<Job *>(attr) : nullptr;
	if (!j && may_setup) {
		j = setup(comm);
		PMPI_Comm_set_attr(comm, g_keyval, j);
	}
	return j;
}

void job_world()
{
	lib_init();
	int size = 0;
	if (g_cfg.enable && g_cfg.colls && PMPI_Comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS &&
	    offload_size(size))
		job_of(MPI_COMM_WORLD, true);
}

bool job_failed(const Job *j)
{
	return j->failed;
}

size_t job_max_bytes(const Job *j)
{
	return j->max_bytes;
}

namespace {

// Give back what the op held; its slot only while the job (and so the
// slot's memory) still exists.
void release(Op *op)
{
	if (op->job) {
		if (op->tmp)
			static_cast<Slot *>(op->tmp)->busy = false;
		std::erase(op->job->pending, op);
	}
	for (ibv_coll_mr *mr : op->mrs)
		if (mr)
			mr_put(mr);
	free(op->owned);
	delete op;
}

} // namespace

int job_post(Job *j, const Request &r, Coll coll, Op **out)
{
	Op *op = new Op;
	op->job = j;
	op->coll = coll;
	op->wr_id = j->next_wr++;
	ibv_sge s{}, d{};
	bool small = r.src_bytes <= kBounce && r.dst_bytes <= kBounce;
	Slot *slot = nullptr;
	for (int i = 0; small && i < kSlots && !slot; i++)
		if (!j->slots[i].busy)
			slot = &j->slots[i];
	// Every slot in flight: register the caller's buffers instead (never
	// wait here: a slot comes back only when its request completes, which
	// may take a call this rank has yet to make).
	// No destination (a reduce's non-root): the device writes none there,
	// so the source stands in for it.
	const bool no_dst = !r.dst;
	void *dst = no_dst ? const_cast<void *>(r.src) : r.dst;
	size_t dst_bytes = no_dst ? r.src_bytes : r.dst_bytes;
	if (slot) {
		slot->busy = true;
		if (r.src_bytes)
			memcpy(slot->src, r.src, r.src_bytes);
		s = {uintptr_t(slot->src), uint32_t(r.src_bytes), j->arena_mr->lkey};
		d = {uintptr_t(no_dst ? slot->src : slot->dst), uint32_t(dst_bytes),
		     j->arena_mr->lkey};
		op->copy_to = r.dst;
		op->copy_from = slot->dst;
		op->copy_bytes = no_dst ? 0 : r.dst_bytes;
		op->tmp = slot; // released at finish
	} else {
		op->mrs[0] = mr_get(g_pd, r.src, r.src_bytes);
		op->mrs[1] = dst == r.src ? nullptr : mr_get(g_pd, dst, dst_bytes);
		if (!op->mrs[0] || (dst != r.src && !op->mrs[1])) {
			log_line("%s: register %zu bytes: %s", kCollNames[coll], r.src_bytes,
				 strerror(errno));
			release(op);
			return MPI_ERR_NO_MEM;
		}
		ibv_coll_mr *dm = op->mrs[1] ? op->mrs[1] : op->mrs[0];
		s = {uintptr_t(r.src), uint32_t(r.src_bytes), op->mrs[0]->lkey};
		d = {uintptr_t(dst), uint32_t(dst_bytes), dm->lkey};
	}
	ibv_coll_send_wr &wr = op->wr;
	op->sge[0] = s;
	op->sge[1] = d;
	wr.wr_id = op->wr_id;
	wr.opcode = r.opcode;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = &op->sge[0];
	wr.num_sge = r.opcode == IBV_COLL_WR_BARRIER ? 0 : 1;
	wr.wr.coll.dst_list = &op->sge[1];
	wr.wr.coll.count = r.count;
	wr.wr.coll.op = r.op;
	wr.wr.coll.dtype = r.dtype;
	wr.wr.coll.root = r.root;
	// Behind those still waiting for the send queue, or waiting itself
	// when the queue is full: the device takes them in the order posted,
	// as every rank posts them.
	int err = j->backlog.empty() ? post_wr(j, op) : ENOMEM;
	if (err == ENOMEM) {
		j->backlog.push_back(op);
		g_backlogged++;
	} else if (err) {
		log_line("%s: post: %s", kCollNames[coll], strerror(err));
		release(op);
		return MPI_ERR_OTHER;
	}
	j->pending.push_back(op);
	*out = op;
	return MPI_SUCCESS;
}

bool job_test(Op *op)
{
	if (!op->done && op->job)
		progress(op->job);
	return op->done || !op->job;
}

namespace {

double now_us()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

// Nothing came for a while: sleep until the CQ's channel says something did.
void sleep_on_cq(Job *j)
{
	if (!j->armed) {
		// Arm, then poll once more (the caller does): a completion that
		// came before arming raises no event.
		j->armed = !ibv_req_notify_coll_cq(j->cq, 0);
		return;
	}
	// Not long: MPI's own requests and other jobs' queued posts are
	// driven between sleeps (below).
	pollfd pf = {j->ch->fd, POLLIN, 0};
	if (poll(&pf, 1, 10) > 0) {
		ibv_coll_cq *ecq;
		void *ectx;
		if (!ibv_get_coll_cq_event(j->ch, &ecq, &ectx))
			ibv_ack_coll_cq_events(ecq, 1);
		j->armed = false;
	}
}

// While we wait, MPI's progress must go on as it would inside MPI_Wait:
// another rank may sit in a point-to-point call (a rendezvous send, a
// receive) that needs this one's MPI to answer before it reaches the
// collective we wait for.  A probe that matches nothing runs MPI's
// progress engine once (Open MPI's and MPICH's both do).  And the posts
// other jobs keep for a full send queue go out: a rank may wait for them
// before it joins ours.  Every kDriveUs of a wait, not every poll: each
// costs a system call or two.
constexpr double kDriveUs = 20;

void drive_others()
{
	int flag = 0;
	PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
	if (g_backlogged)
		for (Job *j : g_jobs)
			if (!j->backlog.empty())
				post_backlog(j);
}

} // namespace

int job_wait(Op *op)
{
	// As ibv_coll_perf waits: our polls run the NIC while the engine
	// thread sleeps, and yielding between them lets the other processes
	// of this machine (and its switch) have the processor; after
	// IBV_COLL_MPI_SPIN_US, sleep on the completion channel.
	const double start = now_us(), spin_end = start + g_cfg.spin_us;
	double drive_at = start + kDriveUs;
	while (!job_test(op)) {
		if (const double t = now_us(); t >= drive_at) {
			drive_others();
			drive_at = t + kDriveUs;
			if (job_test(op))
				break;
		}
		if (g_cfg.spin_us < 0 || now_us() < spin_end)
			sched_yield();
		else
			sleep_on_cq(op->job);
	}
	return MPI_SUCCESS;
}

int job_finish(Op *op, MPI_Comm comm)
{
	int rc = MPI_SUCCESS;
	bool ok = op->done && op->status == IBV_WC_SUCCESS;
	if (op->done && !ok) {
		log_line("%s failed: %s (%s)", kCollNames[op->coll],
			 ibv_coll_wc_status_str(op->status), ibv_coll_status_str(op->coll_status));
		g_stats.errors++;
		rc = MPI_ERR_OTHER;
	} else if (!op->done) {
		log_line("%s: its communicator was freed before it completed",
			 kCollNames[op->coll]);
		g_stats.errors++;
		rc = MPI_ERR_REQUEST;
	}
	if (ok && op->copy_bytes)
		memcpy(op->copy_to, op->copy_from, op->copy_bytes);
	if (ok) {
		unsigned f = op->flags;
		g_stats.offloaded[op->coll]++;
		if (f & IBV_COLL_WC_FALLBACK)
			g_stats.ran_fallback++;
		else if (f & IBV_COLL_WC_HIERARCHY)
			g_stats.ran_hier++;
		else if (f & IBV_COLL_WC_SWITCH)
			g_stats.ran_switch++;
		else if (f & IBV_COLL_WC_RING)
			g_stats.ran_ring++;
		else
			g_stats.ran_local++;
	}
	release(op);
	if (rc != MPI_SUCCESS && comm != MPI_COMM_NULL)
		PMPI_Comm_call_errhandler(comm, rc);
	return rc;
}

bool comm_free_hook(MPI_Comm comm)
{
	if (g_keyval == MPI_KEYVAL_INVALID)
		return false;
	void *attr = nullptr;
	int found = 0;
	PMPI_Comm_get_attr(comm, g_keyval, &attr, &found);
	if (!found)
		return false;
	// MPI: operations pending on a freed communicator complete normally.
	// Every member has started them (it frees the communicator after),
	// so they complete; their requests are finished when waited for.
	// (Waiting changes no job's list: requests leave it when finished.)
	Job *j = static_cast<Job *>(attr);
	for (Op *op : j->pending)
		if (!op->done)
			job_wait(op);
	return true;
}

void jobs_finalize()
{
	// Everyone done with every job before any QP goes: a peer may still
	// need a retransmission from us.
	// (Every rank, whether it has jobs or not: it is a collective.)
	PMPI_Barrier(MPI_COMM_WORLD);
	while (!g_jobs.empty()) {
		Job *j = g_jobs.front();
		PMPI_Comm_delete_attr(j->comm, g_keyval); // calls destroy()
		if (!g_jobs.empty() && g_jobs.front() == j)
			destroy(j); // the communicator is gone but we were not told
	}
	if (g_keyval != MPI_KEYVAL_INVALID)
		PMPI_Comm_free_keyval(&g_keyval);
	mr_flush();
	if (g_pd)
		ibv_dealloc_coll_pd(g_pd);
	if (g_ctx)
		ibv_close_coll_device(g_ctx);
	g_pd = nullptr;
	g_ctx = nullptr;
	if (g_cfg.stats && !g_cfg_bad)
		print_stats();
}

} // namespace ibv_coll::mpi
