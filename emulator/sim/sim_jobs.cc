// The simulator's jobs: their QPs on the hosts, their messages, sources
// and reference, their timing (sim/sim.h).
#include "sim/sim_fabric.h"

#include <cstring>

namespace ibv_coll::sim {

static int32_t value_of(uint32_t job, uint32_t rank, uint64_t i, uint32_t iter)
{
	uint64_t x = (uint64_t(job) << 48) ^ (uint64_t(rank) << 32) ^ (i * 0x9e3779b97f4a7c15ull) ^
		     (uint64_t(iter) << 20);
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return int32_t(x % 2001) - 1000;
}

// A phantom job's element i: every rank's the same, small enough that the
// sum of 65,535 of them is exact in float whatever the order.
static int32_t phantom_value(uint32_t job, uint64_t i, uint32_t iter)
{
	return value_of(job, 0, i, iter) % 256;
}

static void put_value(std::vector<uint8_t> &b, uint64_t i, int32_t v, SimType t)
{
	if (t == SimType::int32) {
		memcpy(b.data() + 4 * i, &v, 4);
	} else {
		const float fv = float(v);
		memcpy(b.data() + 4 * i, &fv, 4);
	}
}

// A phantom job's sources (one buffer) and reference: N equal vectors.
void Fabric::post_phantom(Job &j, uint64_t bytes)
{
	const uint64_t count = bytes / 4;
	const uint32_t ji = j.qpn - 0x100;
	const uint64_t ranks = uint64_t(j.spec.ranks_per_node) * j.qps.size();
	j.psrc.resize(bytes);
	j.pdst.assign(bytes, 0x7a);
	std::vector<uint8_t> &want = j.want[0]; // depth 1
	want.resize(bytes);
	for (uint64_t i = 0; i < count; i++) {
		const int32_t v = phantom_value(ji, i, j.mid);
		put_value(j.psrc, i, v, j.spec.type);
		const bool sum = j.spec.coll == SimColl::allreduce && j.spec.op == SimOp::sum;
		put_value(want, i, sum ? int32_t(v * int64_t(ranks)) : v, j.spec.type);
	}
}

void Fabric::post(Job &j)
{
	const uint64_t bytes = j.spec.sizes[j.size_idx];
	const uint64_t count = bytes / 4;
	j.mid++;
	const uint32_t sl = j.slot(j.mid), nr = j.spec.ranks_per_node;
	uint32_t rank = 0;
	const uint32_t ji = j.qpn - 0x100;
	// Sources and the reference (a scalar loop over every rank; a
	// broadcast's is the root's source).
	const bool bcast = j.spec.coll == SimColl::bcast;
	std::vector<int32_t> ref(j.spec.phantom ? 0 : count, 0);
	bool first = true;
	if (j.spec.phantom)
		post_phantom(j, bytes);
	for (JobQp *q : j.spec.phantom ? std::vector<JobQp *>{} : j.qps) {
		for (uint32_t r = 0; r < nr; r++, rank++) {
			q->src[sl * nr + r].resize(bytes);
			if (!j.spec.in_place)
				q->dst[sl * nr + r].assign(bytes, 0x7a);
			for (uint64_t i = 0; i < count; i++) {
				const int32_t v = value_of(ji, rank, i, j.mid);
				int32_t &w = ref[i];
				if (bcast)
					w = rank == j.spec.root ? v : w;
				else if (first)
					w = v;
				else if (j.spec.op == SimOp::sum)
					w += v;
				else if (j.spec.op == SimOp::max)
					w = std::max(w, v);
				else
					w = std::min(w, v);
				put_value(q->src[sl * nr + r], i, v, j.spec.type);
			}
			first = false;
		}
	}
	if (!j.spec.phantom) {
		j.want[sl].resize(bytes);
		for (uint64_t i = 0; i < count; i++)
			put_value(j.want[sl], i, ref[i], j.spec.type);
	}
	j.slot_done[sl] = 0;
	if (!j.posted)
		j.wire_size0 = host_tx(j.hosts[0]);
	// Timing starts with the first timed message's post.
	if (j.posted++ == j.spec.warmup) {
		j.posted_at = clock.now();
		j.wire0 = host_tx(j.hosts[0]);
	}
	for (JobQp *q : j.qps) {
		const bool late = j.spec.late_ns && q == j.qps[j.spec.late_node];
		emu::Queue &sq = *q->sq;
		const uint32_t idx = sq.prod_relaxed();
		auto *w = sq.at<emu::CollWqe>(idx);
		memset(w, 0, sq.stride());
		w->wr_id = j.mid;
		w->opcode = uint8_t(j.spec.coll == SimColl::bcast     ? emu::CollOp::bcast
				    : j.spec.coll == SimColl::barrier ? emu::CollOp::barrier
								      : emu::CollOp::allreduce);
		w->root = j.spec.root;
		w->flags = emu::kWqeSignaled;
		w->num_sge = uint16_t(j.spec.ranks_per_node);
		w->op = uint8_t(j.spec.op == SimOp::sum	  ? emu::RedOp::sum
				: j.spec.op == SimOp::max ? emu::RedOp::max
							  : emu::RedOp::min);
		w->dtype = uint8_t(j.spec.type == SimType::int32 ? emu::Dtype::int32
								 : emu::Dtype::float32);
		w->mid = j.mid;
		w->count = count;
		for (uint32_t r = 0; r < nr; r++) {
			std::vector<uint8_t> &s = j.spec.phantom ? j.psrc : q->src[sl * nr + r];
			w->srcs()[r] = emu::Sge{uint64_t(uintptr_t(s.data())), uint32_t(bytes), 1};
			std::vector<uint8_t> &d = j.spec.phantom    ? j.pdst
						  : j.spec.in_place ? q->src[sl * nr + r]
								    : q->dst[sl * nr + r];
			w->dsts()[r] = emu::Sge{uint64_t(uintptr_t(d.data())), uint32_t(bytes), 1};
		}
		if (late) {
			q->late_prod = idx + 1;
			at(clock.now() + j.spec.late_ns, Ev::late, q->job);
			continue;
		}
		sq.publish(idx + 1);
		schedule_host(q->host, clock.now());
	}
}

// The late member's application posts what it wrote at post().
void Fabric::late_post(uint32_t ji)
{
	Job &j = *jobs[ji];
	JobQp &q = *j.qps[j.spec.late_node];
	q.sq->publish(q.late_prod);
	schedule_host(q.host, clock.now());
}

void Fabric::on_cqe(JobQp &q, const emu::Cqe &c)
{
	Job &j = *jobs[q.job];
	q.cqes++;
	q.last_cqe_ns = clock.now();
	SizeResult &sr = j.res.sizes[j.size_idx];
	// Its message's place among this size's: the newest posted is j.mid.
	const uint32_t sl = j.slot(c.mid), nr = j.spec.ranks_per_node;
	const bool timed = j.posted - (j.mid - c.mid) - 1 >= j.spec.warmup;
	if (c.status != uint8_t(emu::WcStatus::success)) {
		q.failed = true;
		if (timed)
			sr.failed++;
	} else if (timed && !j.spec.phantom) {
		auto &bufs = j.spec.in_place ? q.src : q.dst;
		for (uint32_t r = 0; r < nr; r++)
			sr.wrong += bufs[sl * nr + r] != j.want[sl];
	}
	if (++j.slot_done[sl] == j.qps.size())
		at(clock.now(), Ev::job, q.job);
}

// A message of job ji completed on every host (or the job starts): the
// oldest messages that did are counted, a size that is done is summed
// up, and messages are posted up to the job's depth.
void Fabric::job_step(uint32_t ji)
{
	Job &j = *jobs[ji];
	// Several messages that complete at once each step the job: the
	// first may have finished it.
	if (j.finished)
		return;
	const uint64_t now = clock.now();
	const uint32_t all = j.spec.warmup + j.spec.iters;
	while (j.iter < j.posted) {
		const uint32_t oldest = j.mid - (j.posted - j.iter) + 1;
		if (j.slot_done[j.slot(oldest)] < j.qps.size())
			break;
		SizeResult &sr = j.res.sizes[j.size_idx];
		// A phantom job's one result buffer, as its ranks left it.
		if (j.spec.phantom && j.iter >= j.spec.warmup && j.pdst != j.want[0])
			sr.wrong++;
		if (++j.iter < all)
			continue;
		const uint32_t n = uint32_t(j.hosts.size());
		sr.time_ns = (now - j.posted_at) / j.spec.iters;
		const double t = double(sr.time_ns);
		sr.algbw = t > 0 ? double(sr.bytes) / t : 0;
		// As NCCL's tests count them: a broadcast's bus carries S.
		const double f = j.spec.coll == SimColl::bcast ? 1.0 : 2.0 * (n - 1) / n;
		sr.busbw = sr.algbw * f;
		const double r = double(spec.host.rate_bps) / 8 / 1e9;
		// Through the switches, every plane's link; round the ring, plane 0's.
		sr.bound = j.spec.topology == SimTopology::ring ? r
								: r * std::max(spec.planes, 1u) * f;
		// With several in flight, warm-up messages still run when timing
		// starts: every message of the size is counted instead.
		const uint64_t tx = j.spec.depth > 1 ? host_tx(j.hosts[0]) - j.wire_size0
						     : host_tx(j.hosts[0]) - j.wire0;
		const uint32_t msgs = j.spec.depth > 1 ? all : j.spec.iters;
		sr.wire_s = sr.bytes ? double(tx) / msgs / double(sr.bytes) : 0;
		for (JobQp *q : j.qps)
			for (auto &v : q->src)
				std::vector<uint8_t>().swap(v);
		for (JobQp *q : j.qps)
			for (auto &v : q->dst)
				std::vector<uint8_t>().swap(v);
		std::vector<uint8_t>().swap(j.psrc);
		std::vector<uint8_t>().swap(j.pdst);
		j.size_idx++;
		j.iter = j.posted = 0;
		if (j.size_idx == j.spec.sizes.size()) {
			j.finished = true;
			j.res.done = true;
			return;
		}
	}
	while (j.posted < all && j.posted - j.iter < j.spec.depth)
		post(j);
	j.done = j.posted > j.iter ? j.slot_done[j.slot(j.mid - (j.posted - j.iter) + 1)] : 0;
}

std::string check_fabric(const FabricSpec &f)
{
	if (f.nodes < 2 || f.nodes > 65536)
		return "fabric.nodes: 2 to 65536 hosts";
	if (f.shape != Shape::star) {
		if (f.nodes_per_leaf < 1 || f.nodes_per_leaf > 4096)
			return "fabric.nodes_per_leaf: 1 to 4096 with shape tree2 or tree3";
		const uint32_t leaves = (f.nodes + f.nodes_per_leaf - 1) / f.nodes_per_leaf;
		if (f.shape == Shape::tree2 && leaves > 4096)
			return "fabric.nodes_per_leaf: more leaves than the spine has ports (4096)";
		if (f.shape == Shape::tree3) {
			if (f.leaves_per_pod < 1 || f.leaves_per_pod > 4096)
				return "fabric.leaves_per_pod: 1 to 4096 with shape tree3";
			if ((leaves + f.leaves_per_pod - 1) / f.leaves_per_pod > 4096)
				return "fabric.leaves_per_pod: more pods than the core has ports (4096)";
		}
	} else if (f.nodes > 4096) {
		return "fabric.nodes: more hosts than one switch has ports (4096); use shape tree2";
	}
	if (f.planes < 1 || f.planes > 8)
		return "fabric.planes: 1 to 8";
	for (const LinkSpec *l : {&f.host, &f.up, &f.core}) {
		const char *n = l == &f.host ? "fabric.link"
				: l == &f.up ? "fabric.uplink"
					     : "fabric.corelink";
		if (l == &f.host && !l->rate_bps)
			return std::string(n) + ".rate: must be above 0";
		if (l->queue_bytes < 9000)
			return std::string(n) + ".queue: at least 9000 bytes";
	}
	if (f.loss < 0 || f.loss >= 1)
		return "fabric.loss: a probability in [0, 1)";
	if (f.mtu != 256 && f.mtu != 512 && f.mtu != 1024 && f.mtu != 2048 && f.mtu != 4096)
		return "fabric.mtu: 256, 512, 1024, 2048 or 4096";
	if (f.switch_units < 1 || f.switch_units > 1u << 20)
		return "fabric.switch_units: 1 to 1048576";
	return "";
}

Simulator::Simulator(const FabricSpec &f, uint64_t seed) : f_(std::make_unique<Fabric>(f, seed)) {}
Simulator::~Simulator() = default;

bool Simulator::open_pcap(const std::string &path, std::string *err)
{
	return f_->pcap.open(path, err);
}

bool Simulator::close_pcap(std::string *err)
{
	return f_->pcap.close(err);
}

// The switches of a job on the fabric: its hosts' leaves, the spine when
// they are several, and with pods (tree3) their spines and the core when
// the leaves are in several pods (false with *err naming the field).
static bool switch_config(const Fabric &f, const std::vector<uint32_t> &hosts,
			  const std::string &at, emu::JobConfig &cfg, std::string *err)
{
	cfg.sw.on = true;
	// The leaves of the job's hosts, in order of their first host (and
	// the pods of its leaves, in order of their first leaf): a job under
	// one leaf aggregates there, across leaves through the spine (a
	// hierarchy), across pods through the core.
	std::vector<uint32_t> leaves, pods;
	for (uint32_t h : hosts) {
		const uint32_t l = f.spec.shape == Shape::star ? 0 : h / f.spec.nodes_per_leaf;
		auto it = std::find(leaves.begin(), leaves.end(), l);
		cfg.sw.member_leaf.push_back(uint16_t(it - leaves.begin()));
		if (it == leaves.end())
			leaves.push_back(l);
	}
	for (uint32_t l : leaves) {
		const uint32_t k = f.pod_of_leaf(l);
		auto it = std::find(pods.begin(), pods.end(), k);
		cfg.sw.leaf_pod.push_back(uint8_t(it - pods.begin()));
		if (it == pods.end())
			pods.push_back(k);
	}
	const uint32_t max_leaves = pods.size() > 1 ? emu::sw::kMaxLeaves * emu::sw::kMaxLeaves
						    : emu::sw::kMaxLeaves;
	if (leaves.size() > max_leaves || pods.size() > emu::sw::kMaxLeaves) {
		*err = at + "nodes: the job spans " + std::to_string(leaves.size()) +
		       " leaves in " + std::to_string(pods.size()) +
		       " pods, a switch job at most 64 " +
		       (f.spec.shape == Shape::tree3 ? "pods of 64 leaves" : "leaves");
		return false;
	}
	// Plane p's leaf l at p * leaves + l, its spine of pod k at
	// p * pods + k, its core at p.
	const uint32_t planes = std::max(f.spec.planes, 1u);
	for (uint32_t p = 0; p < planes; p++)
		for (uint32_t l : leaves)
			cfg.sw.leaf.push_back(Endpoint{switch_ip(p * f.per_plane + l), kPort, 0});
	cfg.sw.planes = planes;
	cfg.sw.leaves = uint32_t(leaves.size());
	if (leaves.size() > 1) {
		cfg.topology = cfg.topology == emu::Topology::sw ? emu::Topology::hierarchy
								 : cfg.topology;
		cfg.sw.pods = uint32_t(pods.size());
		for (uint32_t p = 0; p < planes; p++)
			for (uint32_t k : pods)
				cfg.sw.spine.push_back(Endpoint{
					switch_ip(p * f.per_plane + f.leaves + k), kPort, 0});
		if (pods.size() > 1)
			for (uint32_t p = 0; p < planes; p++)
				cfg.sw.core.push_back(Endpoint{
					switch_ip(p * f.per_plane + f.leaves + f.pods), kPort, 0});
		else
			cfg.sw.leaf_pod.clear();
	} else {
		cfg.sw.member_leaf.clear();
		cfg.sw.leaf_pod.clear();
	}
	return true; // the node limit is check_job's
}

// A job's collective QP on one host, as a NIC sets it up.
static std::unique_ptr<JobQp> make_qp(uint32_t job, uint32_t host, uint32_t qpn, uint32_t ranks,
				      uint32_t mtu, uint32_t depth)
{
	auto q = std::make_unique<JobQp>();
	q->job = job;
	q->host = host;
	q->sq = std::make_unique<emu::Queue>(16, emu::coll_wqe_stride(ranks));
	q->cq.arg = q.get();
	q->qp.qpn = qpn;
	q->qp.pdn = 1;
	q->qp.coll = true;
	q->qp.sq = q->sq.get();
	q->qp.scq = &q->cq;
	q->qp.meta.assign(q->sq->slots(), emu::WqeMeta{});
	q->qp.attr.path_mtu = mtu;
	q->src.resize(size_t(ranks) * depth);
	q->dst.resize(size_t(ranks) * depth);
	return q;
}

// What a job asks of itself, alone (the field that is wrong, and why;
// empty when none is).
static std::string check_spec(const JobSpec &js)
{
	if (js.ranks_per_node < 1 || js.ranks_per_node > 64)
		return "ranks_per_node: 1 to 64";
	if (js.sizes.empty())
		return "sizes: at least one";
	const bool barrier = js.coll == SimColl::barrier;
	for (uint64_t s : js.sizes)
		if (barrier ? s != 0 : !s || s % 4 || s > (1ull << 32) - 4)
			return barrier ? "sizes: a barrier's is 0"
				       : "sizes: each a multiple of 4 bytes, up to 4 GiB";
	if (js.seg_units < 2)
		return "seg_units: at least 2";
	if (js.iters < 1)
		return "iters: at least 1";
	if (js.depth < 1 || js.depth > 16)
		return "depth: 1 to 16";
	if (js.depth > 1 && (js.phantom || js.in_place))
		return "depth: above 1 not with phantom or in_place (one buffer a rank)";
	return "";
}

bool Simulator::add_job(const JobSpec &js, std::string *err)
{
	Fabric &f = *f_;
	const std::string at = "jobs[" + std::to_string(f.jobs.size()) + "].";
	if (const std::string why = check_spec(js); !why.empty()) {
		*err = at + why;
		return false;
	}
	auto j = std::make_unique<Job>();
	j->spec = js;
	j->want.resize(js.depth);
	j->slot_done.assign(js.depth, 0);
	if (j->spec.name.empty())
		j->spec.name = "job" + std::to_string(f.jobs.size());
	if (js.nodes.empty())
		for (uint32_t i = 0; i < f.spec.nodes; i++)
			j->hosts.push_back(i);
	else
		j->hosts = js.nodes;
	std::vector<bool> seen(f.spec.nodes, false);
	for (uint32_t h : j->hosts) {
		if (h >= f.spec.nodes || seen[h]) {
			*err = at + "nodes: host " + std::to_string(h) +
			       (h >= f.spec.nodes ? " is not in the fabric" : " named twice");
			return false;
		}
		seen[h] = true;
	}
	if (j->hosts.size() < 2 || j->hosts.size() > emu::kMaxCollNodes) {
		*err = at + "nodes: " + std::to_string(j->hosts.size()) +
		       " hosts; a job has 2 to " + std::to_string(emu::kMaxCollNodes);
		return false;
	}
	if (js.coll == SimColl::bcast && js.root >= j->hosts.size() * js.ranks_per_node) {
		*err = at + "root: rank " + std::to_string(js.root) + " of " +
		       std::to_string(j->hosts.size() * js.ranks_per_node);
		return false;
	}
	uint64_t mem = 0;
	for (uint64_t s : js.sizes)
		mem = std::max(mem, s);
	mem *= js.phantom ? 2
			  : (js.in_place ? 1 : 2) * js.ranks_per_node * j->hosts.size() * js.depth;
	if (mem > (16ull << 30)) {
		*err = at + "sizes: " + std::to_string(mem >> 20) +
		       " MiB of buffers at the largest size, beyond the simulator's 16 GiB";
		return false;
	}
	if (js.late_ns && js.late_node >= j->hosts.size()) {
		*err = at + "late.node: the job has " + std::to_string(j->hosts.size()) + " nodes";
		return false;
	}
	const uint32_t ji = uint32_t(f.jobs.size());
	f.share_bodies |= js.phantom;
	j->qpn = 0x100 + ji;
	emu::JobConfig cfg;
	cfg.jid = 1 + ji;
	cfg.key = 0x51a0000000ull + ji;
	cfg.topology = js.topology == SimTopology::ring ? emu::Topology::ring
		       : js.topology == SimTopology::sw ? emu::Topology::sw
							: emu::Topology::autosel;
	cfg.seg_count = js.seg_units;
	uint32_t rank = 0;
	for (uint32_t h : j->hosts) {
		emu::JobMember m;
		m.ep = Endpoint{host_ip(h), kPort, 0};
		m.qpn = j->qpn;
		m.ranks = uint16_t(js.ranks_per_node);
		m.first_rank = rank;
		rank += js.ranks_per_node;
		cfg.members.push_back(m);
	}
	cfg.sw.window = js.window;
	cfg.sw.e2e_ack = js.e2e_ack;
	if (cfg.topology != emu::Topology::ring && !switch_config(f, j->hosts, at, cfg, err))
		return false;
	// The device's own check of the job's shape, with its reason (the
	// same on every host but for the node index).  Checked here, the
	// configuration's member list and bits are what every host's check
	// derives: every host's copy shares them (util/cow_vector.h), one
	// array for the job instead of one per host.
	const char *why = nullptr;
	if (emu::check_job(cfg, &why)) {
		*err = at + "nodes: the device refuses a job of " +
		       std::to_string(j->hosts.size()) + " hosts: " + (why ? why : "invalid");
		return false;
	}
	for (uint32_t k = 0; k < j->hosts.size(); k++) {
		Host &h = f.hosts[j->hosts[k]];
		auto q = make_qp(ji, j->hosts[k], j->qpn, js.ranks_per_node, f.spec.mtu, js.depth);
		h.nic->qps[j->qpn] = &q->qp;
		cfg.node = uint16_t(k);
		// Each job its own range of the host's Seg units.
		cfg.seg_base = h.units_used;
		if (uint64_t(h.units_used) + js.seg_units > f.spec.nic_units) {
			*err = at + "seg_units: host " + std::to_string(j->hosts[k]) + " has " +
			       std::to_string(f.spec.nic_units - h.units_used) +
			       " Seg units left (fabric.nic_units)";
			return false;
		}
		if (int e = h.svc->configure(q->qp, cfg)) {
			*err = at + "the device refused the job (" + strerror(e) + ")";
			return false;
		}
		q->qp.state = emu::QpState::rts;
		h.units_used += js.seg_units;
		j->qps.push_back(q.get());
		h.qps.push_back(std::move(q));
	}
	j->res.spec = j->spec;
	for (uint64_t s : js.sizes) {
		SizeResult r;
		r.bytes = s;
		r.count = s / 4;
		j->res.sizes.push_back(r);
	}
	f.jobs.push_back(std::move(j));
	f.at(kStart + js.start_ns, Ev::job, ji);
	return true;
}

} // namespace ibv_coll::sim
