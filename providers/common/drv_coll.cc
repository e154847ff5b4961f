// The driver layer: collective QPs: the job attribute into the NIC's job table, and
// collective WRs checked in full (every buffer against the MR table) and
// written as collective WQEs.
#include "drv.h"

#include "reduce/reduce.h"
#include "wire/ceth.h"
#include "wire/roce.h"
#include "wire/seqnum.h"
#include "wire/swproto.h"

#include "util/log.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::drv {

uint32_t coll_packet_overhead()
{
	return uint32_t(emu::wire::kBthBytes + emu::wire::kCethBytes + emu::sw::kTaskBytes + 3 +
			emu::wire::kIcrcBytes);
}

int engine_caps(emu::Device &nic, ibv_coll_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->comp_mask = IBV_COLL_CAPS_FLAGS; // flags: the provider adds its own
	caps->opcodes = (1u << (IBV_COLL_WR_QUERY - IBV_COLL_WR_ALLREDUCE + 1)) - 1;
	caps->ops = (1u << (IBV_COLL_OP_LXOR + 1)) - 1;
	caps->dtypes = (1u << (IBV_COLL_DTYPE_INT16_INT32 + 1)) - 1;
	caps->topologies = 1u << IBV_COLL_TOPO_RING | 1u << IBV_COLL_TOPO_SWITCH |
			   1u << IBV_COLL_TOPO_HIERARCHY | 1u << IBV_COLL_TOPO_AUTO;
	caps->max_seg_units = nic.seg_units();
	caps->seg_unit_bytes = nic.seg_unit_bytes();
	caps->max_local_ranks = emu::kMaxCollRanks;
	caps->max_nodes = emu::kMaxCollNodes;
	caps->max_block_len = nic.seg_unit_bytes();
	caps->max_count_bytes = UINT32_MAX;
	return 0;
}

int engine_counters(emu::Device &nic, ibv_coll_counters *o)
{
	// Callers built against the first layout have room up to
	// seg_high_water only, and say nothing in comp_mask.
	const uint64_t mask = o->comp_mask;
	if (mask & ~uint64_t(IBV_COLL_COUNTERS_EXT | IBV_COLL_COUNTERS_EXT2))
		return EINVAL;
	emu::NicCounters n = nic.counters();
	memset(o, 0,
	       mask & IBV_COLL_COUNTERS_EXT2  ? sizeof(*o)
	       : mask & IBV_COLL_COUNTERS_EXT ? offsetof(ibv_coll_counters, coll_rx_packets)
					      : offsetof(ibv_coll_counters, rc_tx_packets));
	o->comp_mask = mask;
	o->tx_packets = n.port.tx_packets;
	o->tx_bytes = n.port.tx_bytes;
	o->rx_packets = n.port.rx_packets;
	o->rx_bytes = n.port.rx_bytes;
	o->rx_icrc_errors = n.rx_icrc_err;
	o->rx_malformed = n.rx_malformed;
	o->rx_no_qp = n.rx_no_qp;
	o->rx_bad_source = n.rx_bad_src;
	o->rx_bad_state = n.rx_bad_state;
	o->rx_duplicates = n.rx_dup;
	o->rc_retransmits = n.tx_retransmits;
	o->rc_timeouts = n.timeouts;
	o->rc_seq_naks_sent = n.seq_naks_sent;
	o->rc_seq_naks_rcvd = n.seq_naks_rcvd;
	o->rc_rnr_naks_sent = n.rnr_naks_sent;
	o->rc_rnr_naks_rcvd = n.rnr_naks_rcvd;
	const emu::CollCounters &k = n.coll;
	o->coll_tx_data = k.tx_data;
	o->coll_rx_data = k.rx_data;
	o->coll_tx_result = k.tx_result;
	o->coll_rx_result = k.rx_result;
	o->coll_tx_bytes = k.tx_bytes;
	o->coll_rx_bytes = k.rx_bytes;
	o->coll_retrans_data = k.retrans_data;
	o->coll_retrans_result = k.retrans_result;
	o->coll_duplicates = k.dup_dropped;
	o->coll_early = k.early_stored;
	o->coll_early_dropped = k.early_dropped;
	o->coll_stale = k.stale_dropped;
	o->coll_bad_key = k.bad_key;
	o->coll_bad_job = k.bad_job;
	o->coll_bad_block = k.bad_block;
	o->coll_bad_node = k.bad_node;
	o->coll_malformed = k.malformed;
	o->coll_seg_busy = k.seg_busy;
	o->coll_aborts_sent = k.aborts_sent;
	o->coll_aborts_rcvd = k.aborts_rcvd;
	o->coll_timeouts = k.timeouts;
	o->coll_reductions = k.reductions;
	o->seg_units = n.seg_units;
	o->seg_in_use = n.seg_in_use;
	o->seg_high_water = n.seg_high_water;
	if (mask & IBV_COLL_COUNTERS_EXT2) {
		o->coll_rx_packets = k.rx_packets;
		o->coll_delivered = k.delivered;
		o->coll_host_dropped = k.host_dropped;
		o->cc_cnp_sent = n.cc.cnp_sent;
		o->cc_cnp_rcvd = n.cc.cnp_rcvd;
		o->cc_rate_cuts = n.cc.rate_cuts;
		o->cc_retrans_bytes = n.cc.retrans_bytes;
	}
	if (mask & (IBV_COLL_COUNTERS_EXT | IBV_COLL_COUNTERS_EXT2)) {
		o->rc_tx_packets = n.rc_tx_packets;
		o->rc_tx_bytes = n.rc_tx_bytes;
		o->rc_rx_packets = n.rc_rx_packets;
		o->rc_rx_bytes = n.rc_rx_bytes;
		o->rc_acks_sent = n.acks_sent;
		o->coll_messages = k.messages;
		o->coll_failed = k.failed;
		o->coll_blocks = k.blocks;
		o->coll_fallbacks = k.fallbacks;
	}
	return 0;
}

// The public attribute translated into the engine's job, once: what
// guards the reading of its arrays is checked here, the job's shape by
// emu::check_job, as every other path that makes a job does.
int coll_job_from_attr(Qp *qp, const ibv_coll_job_attr *in, emu::JobConfig *out)
{
	if (!in ||
	    (in->comp_mask & ~uint64_t(IBV_COLL_JOB_ATTR_SWITCH | IBV_COLL_JOB_ATTR_LOCAL |
				       IBV_COLL_JOB_ATTR_PODS)) ||
	    in->flags || !in->members || !in->num_nodes || in->num_nodes > emu::kMaxCollNodes ||
	    in->node_index >= in->num_nodes)
		return EINVAL;
	if ((in->comp_mask & IBV_COLL_JOB_ATTR_PODS) && !(in->comp_mask & IBV_COLL_JOB_ATTR_SWITCH))
		return EINVAL; // pods of what switches?
	int topo = core::raw_enum(in->topology);
	if (topo < IBV_COLL_TOPO_RING || topo > IBV_COLL_TOPO_AUTO)
		return EINVAL;
	emu::JobConfig c;
	c.jid = in->jid;
	c.node = uint16_t(in->node_index);
	c.topology = emu::Topology(topo);
	c.seg_base = in->seg_base;
	c.seg_count = in->seg_count;
	c.block_len = in->block_len;
	c.key = in->job_key;
	c.timeout_ms = in->timeout_ms;
	std::vector<emu::JobMember> &mem = c.members.mut();
	mem.resize(in->num_nodes);
	for (uint32_t i = 0; i < in->num_nodes; i++) {
		const ibv_coll_member &m = in->members[i];
		memcpy(mem[i].ep.ip.b, m.gid.raw, 16);
		mem[i].ep.port = m.udp_port ? m.udp_port : IBV_COLL_ROCE_UDP_PORT;
		mem[i].qpn = m.qp_num;
		mem[i].ranks = m.num_ranks;
	}
	// The ranks this QP serves: all of its node's, or a range of them
	// (the others' QPs join its node's lead QP).
	if (in->comp_mask & IBV_COLL_JOB_ATTR_LOCAL) {
		if (!in->local_count || in->local_first > UINT16_MAX ||
		    in->local_count > UINT16_MAX)
			return EINVAL;
		c.local_first = uint16_t(in->local_first);
		c.local_count = uint16_t(in->local_count);
	}
	if (in->comp_mask & IBV_COLL_JOB_ATTR_SWITCH) {
		const ibv_coll_switch_attr *s = in->sw;
		const ibv_coll_pods_attr *k = in->comp_mask & IBV_COLL_JOB_ATTR_PODS ? in->pods
										     : nullptr;
		const uint32_t max_leaves = k ? emu::sw::kMaxLeaves * emu::sw::kMaxLeaves
					      : emu::sw::kMaxLeaves;
		if (!s || !s->num_planes || s->num_planes > emu::sw::kMaxPlanes || !s->num_leaves ||
		    s->num_leaves > max_leaves || !s->leaves ||
		    (s->num_leaves > 1 &&
		     (!s->spines || !(s->member_leaf || (k && k->member_leaf)))) ||
		    (s->flags & ~uint32_t(IBV_COLL_SWITCH_INLINE | IBV_COLL_SWITCH_E2E_ACK)))
			return EINVAL;
		if ((in->comp_mask & IBV_COLL_JOB_ATTR_PODS) &&
		    (!k || k->num_pods < 2 || k->num_pods > emu::sw::kMaxLeaves || k->reserved ||
		     !k->leaf_pod || !k->cores))
			return EINVAL;
		auto ep = [](const ibv_coll_switch_addr &a) {
			emu::Endpoint e;
			memcpy(e.ip.b, a.gid.raw, 16);
			e.port = a.udp_port ? a.udp_port : IBV_COLL_ROCE_UDP_PORT;
			e.qpn = a.qp_num;
			return e;
		};
		c.sw.on = true;
		c.sw.planes = s->num_planes;
		c.sw.leaves = s->num_leaves;
		for (uint32_t i = 0; i < s->num_planes * s->num_leaves; i++)
			c.sw.leaf.push_back(ep(s->leaves[i]));
		if (s->num_leaves > 1) {
			const uint32_t pods = k ? k->num_pods : 1;
			for (uint32_t i = 0; i < s->num_planes * pods; i++)
				c.sw.spine.push_back(ep(s->spines[i]));
			if (k && k->member_leaf)
				c.sw.member_leaf.assign(k->member_leaf,
							k->member_leaf + in->num_nodes);
			else
				c.sw.member_leaf.assign(s->member_leaf,
							s->member_leaf + in->num_nodes);
		}
		if (k) {
			c.sw.pods = k->num_pods;
			c.sw.leaf_pod.assign(k->leaf_pod, k->leaf_pod + s->num_leaves);
			for (uint32_t p = 0; p < s->num_planes; p++)
				c.sw.core.push_back(ep(k->cores[p]));
		}
		c.sw.window = s->window;
		c.sw.inline_task = s->flags & IBV_COLL_SWITCH_INLINE;
		c.sw.e2e_ack = s->flags & IBV_COLL_SWITCH_E2E_ACK;
	}
	const char *why = nullptr;
	if (emu::check_job(c, &why)) {
		IBVC_WARN("drv", "QP {:#x}: job {} refused: {}", qp->pub.qp_num, in->jid, why);
		return EINVAL;
	}
	// The QP was sized for cap.max_send_sge local ranks.
	if (c.my_count() > qp->cap.max_send_sge) {
		IBVC_WARN("drv", "QP {:#x}: job {}: {} local ranks, the QP was made for {}",
			  qp->pub.qp_num, in->jid, c.my_count(), qp->cap.max_send_sge);
		return EINVAL;
	}
	*out = std::move(c);
	return 0;
}

namespace {

// The op and type of a collective: one the engine computes (the pairs only
// with MAXLOC/MINLOC, bitwise and logical ops only on integers).
bool op_valid_for(int op, int dtype)
{
	return op >= 0 && op < int(emu::kNumRedOps) && dtype >= 0 && dtype < int(emu::kNumDtypes) &&
	       emu::op_supported(emu::RedOp(op), emu::Dtype(dtype));
}

size_t dtype_bytes(int dtype)
{
	return emu::dtype_size(emu::Dtype(dtype));
}

struct Need {
	uint64_t src[emu::kMaxCollRanks];
	uint64_t dst[emu::kMaxCollRanks];
};

// EINVAL unless the WR is a well-formed collective for this job; fills the
// bytes each buffer must hold.
int check_coll_wr(const Qp *qp, const ibv_coll_send_wr *wr, Need *need)
{
	const int op = core::raw_enum(wr->opcode);
	if (op < IBV_COLL_WR_ALLREDUCE || op > IBV_COLL_WR_QUERY)
		return EINVAL;
	if (wr->send_flags &
	    ~unsigned(IBV_COLL_SEND_SIGNALED | IBV_COLL_SEND_SOLICITED | IBV_COLL_SEND_FENCE))
		return EINVAL;
	const uint16_t k = qp->local_ranks;
	memset(need, 0, sizeof(*need));
	if (op == IBV_COLL_WR_QUERY)
		return 0;
	if (op == IBV_COLL_WR_BARRIER)
		return wr->num_sge == 0 || wr->num_sge == k ? 0 : EINVAL;
	if (wr->num_sge != k || !wr->sg_list || !wr->wr.coll.dst_list)
		return EINVAL;
	const int redop = core::raw_enum(wr->wr.coll.op);
	const int dtype = core::raw_enum(wr->wr.coll.dtype);
	if (!op_valid_for(redop, dtype))
		return EINVAL;
	const uint64_t es = dtype_bytes(dtype);
	const uint64_t count = wr->wr.coll.count;
	const uint64_t K = qp->total_ranks;
	if (count > UINT32_MAX / es)
		return EINVAL; // more than max_count_bytes per rank
	const uint64_t bytes = count * es;
	const uint32_t bl = wr->wr.coll.block_len;
	if (bl && (bl % es || bl > qp->path_mtu))
		return EINVAL;
	const uint32_t root = wr->wr.coll.root;
	if ((op == IBV_COLL_WR_REDUCE || op == IBV_COLL_WR_BCAST) && root >= K)
		return EINVAL;
	const bool root_here = root >= qp->first_rank && root < qp->first_rank + k;
	for (uint16_t r = 0; r < k; r++) {
		uint32_t g = qp->first_rank + r;
		switch (op) {
		case IBV_COLL_WR_ALLREDUCE: need->src[r] = need->dst[r] = bytes; break;
		case IBV_COLL_WR_REDUCE:
			need->src[r] = bytes;
			need->dst[r] = g == root ? bytes : 0;
			break;
		case IBV_COLL_WR_BCAST:
			need->src[r] = root_here && g == root ? bytes : 0;
			need->dst[r] = bytes;
			break;
		case IBV_COLL_WR_ALLGATHER:
			need->src[r] = bytes;
			need->dst[r] = bytes * K;
			break;
		case IBV_COLL_WR_REDUCE_SCATTER:
			need->src[r] = bytes * K;
			need->dst[r] = bytes;
			break;
		}
	}
	return 0;
}

} // namespace

int post_coll(Qp *qp, ibv_coll_send_wr *wr, ibv_coll_send_wr **bad)
{
	emu::Device *nic = qp->nic;
	const uint32_t pdn = qp->pdn;
	if (nic->fatal()) {
		*bad = wr;
		return EIO;
	}
	std::unique_lock lk(qp->sq_mu);
	ibv_qp_state st = qp->pub.state;
	if ((st != IBV_QPS_RTS && st != IBV_QPS_ERR) || !qp->have_job) {
		*bad = wr;
		return EINVAL;
	}
	emu::Queue &sq = *qp->sq;
	uint32_t free = sq.free_slots(), n = 0, mid = qp->last_mid;
	Need need;
	for (ibv_coll_send_wr *w = wr; w; w = w->next, n++) {
		int err = check_coll_wr(qp, w, &need);
		const bool query = core::raw_enum(w->opcode) == IBV_COLL_WR_QUERY;
		if (!err && !query && w->wr.coll.mid) {
			// Every member posts the same messages in the same order, and
			// the device orders MIDs in serial-number arithmetic: one that
			// would not follow the last (2^31 or more ahead) is refused
			// rather than taken for an old message's.
			if (mid && !emu::seq_after(w->wr.coll.mid, mid)) {
				IBVC_WARN(
					"crxe",
					"qp {:#x}: message id {:#x} does not follow {:#x} (at most "
					"2^31 - 1 ahead): refused",
					qp->pub.qp_num, w->wr.coll.mid, mid);
				err = EINVAL;
			} else {
				mid = w->wr.coll.mid;
			}
		} else if (!err && !query) {
			mid = emu::next_mid(mid);
		}
		if (!err && w->num_sge && core::raw_enum(w->opcode) != IBV_COLL_WR_BARRIER &&
		    !query) {
			std::vector<emu::Sge> s(w->num_sge), d(w->num_sge);
			for (int i = 0; i < w->num_sge; i++) {
				s[i] = emu::Sge{w->sg_list[i].addr, w->sg_list[i].length,
						w->sg_list[i].lkey};
				d[i] = emu::Sge{w->wr.coll.dst_list[i].addr,
						w->wr.coll.dst_list[i].length,
						w->wr.coll.dst_list[i].lkey};
			}
			err = nic->check_local(pdn, s.data(), need.src, w->num_sge, 0);
			if (!err)
				err = nic->check_local(pdn, d.data(), need.dst, w->num_sge,
						       IBV_ACCESS_LOCAL_WRITE);
		}
		if (!err && n >= free)
			err = ENOMEM;
		if (err) {
			*bad = w;
			return err;
		}
	}
	uint32_t prod = sq.prod_relaxed();
	for (ibv_coll_send_wr *w = wr; w; w = w->next, prod++) {
		auto *e = sq.at<emu::CollWqe>(prod);
		memset(e, 0, sizeof(*e));
		const int op = core::raw_enum(w->opcode);
		e->wr_id = w->wr_id;
		e->opcode = uint8_t(op);
		e->flags = uint8_t(w->send_flags);
		if (op == IBV_COLL_WR_QUERY) {
			e->mid = w->wr.coll.mid;
			continue;
		}
		e->mid = w->wr.coll.mid ? w->wr.coll.mid : emu::next_mid(qp->last_mid);
		qp->last_mid = e->mid;
		if (op == IBV_COLL_WR_BARRIER)
			continue;
		e->num_sge = uint16_t(w->num_sge);
		e->op = uint8_t(core::raw_enum(w->wr.coll.op));
		e->dtype = uint8_t(core::raw_enum(w->wr.coll.dtype));
		e->root = w->wr.coll.root;
		e->block_len = w->wr.coll.block_len;
		e->count = w->wr.coll.count;
		for (int i = 0; i < w->num_sge; i++) {
			const ibv_sge &s = w->sg_list[i], &d = w->wr.coll.dst_list[i];
			e->srcs()[i] = emu::Sge{s.addr, s.length, s.lkey};
			e->dsts()[i] = emu::Sge{d.addr, d.length, d.lkey};
		}
	}
	sq.publish(prod);
	lk.unlock();
	nic->sq_doorbell(qp->hw);
	return 0;
}

} // namespace ibv_coll::drv
