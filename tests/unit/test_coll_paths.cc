// The collective unit's strategies (ring, switch, AUTO's fallback) driven
// without processes or sockets: several nodes' CollServices in one process,
// each on a fake host (nic/coll_iface.h), exchanging packets through an
// in-memory network that loses, duplicates, reorders and delays them from
// a seed, under a fake clock.  Results are checked against a scalar loop
// in the test (int32 sum, wrapping), completions against what the fault
// means.
#include "coll/coll_job.h"
#include "wire/swproto.h"
#include "nic/coll_iface.h"
#include "nic/nic.h"
#include "nic/qp.h"
#include "wire/ceth.h"
#include "wire/icrc.h"
#include "wire/roce.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace ibv_coll::emu;

namespace {

constexpr uint32_t kQpn = 0x11;
constexpr uint32_t kPartQpn = 0x12; // a QP joining node's lead (Cluster's split)
constexpr uint16_t kPort = 4791;
constexpr uint64_t kMs = 1000000;

IpAddr node_ip(uint32_t i)
{
	return IpAddr::from_v4(htonl(0x0a000001u + i));
}

struct Pkt {
	Endpoint src, dst;
	std::vector<uint8_t> bytes; // BTH to the end of the pad (no ICRC)
	uint64_t due = 0;	    // with a delay: when it arrives
};

struct Faults {
	double loss = 0, dup = 0;
	bool reorder = false;
	std::vector<Endpoint> dead; // nothing reaches or leaves these
	// One way only: what goes from first to second is lost.
	std::vector<std::pair<Endpoint, Endpoint>> cut;
	// Packets of this BTH opcode from a member (not from the switch) are
	// lost (0: none).
	uint8_t drop_member_kind = 0;
	// Packets for which this says true are lost.
	std::function<bool(const Pkt &)> drop_if;
	// A one-way delay, varying uniformly by up to jitter either way; a
	// sender's packets keep their order (as IBV_COLL_EMU_IMPAIR's).
	uint64_t delay_ns = 0, jitter_ns = 0;
	// Each sender's link rate (0: none): a packet leaves when the link
	// has sent what went before it (no queue limit), then the delay.
	uint64_t rate_bps = 0;
	std::map<uint8_t, uint64_t> rate_of; // a sender's own rate, by its address's last byte
};

class Net {
public:
	explicit Net(uint64_t seed) : rng_(seed) {}
	Faults f;
	std::vector<Pkt> queue;
	uint64_t sent = 0, dropped = 0, duplicated = 0;
	uint64_t partials_lost = 0;	 // dropped DATA packets with a payload (a block's partial)
	const uint64_t *clock = nullptr; // the fake clock, for the delay

	void send(Pkt &&p)
	{
		sent++;
		if (f.delay_ns) {
			const double j = f.jitter_ns * (2 * u_(rng_) - 1);
			uint64_t start = *clock;
			if (f.rate_bps) {
				uint64_t &busy = link_free_[p.src.ip.b[15]];
				auto r = f.rate_of.find(p.src.ip.b[15]);
				const uint64_t bps = r == f.rate_of.end() ? f.rate_bps : r->second;
				busy = std::max(busy, *clock) +
				       (p.bytes.size() + 50) * 8 * 1000000000ull / bps;
				start = busy;
			}
			p.due = start + uint64_t(double(f.delay_ns) + j);
			bool known = false;
			for (auto &l : last_due_) {
				if (l.first == p.src) {
					p.due = l.second = std::max(p.due, l.second);
					known = true;
				}
			}
			if (!known)
				last_due_.emplace_back(p.src, p.due);
		}
		for (const Endpoint &d : f.dead)
			if (d == p.src || d == p.dst) {
				dropped++;
				return;
			}
		for (const auto &c : f.cut)
			if (c.first == p.src && c.second == p.dst) {
				dropped++;
				return;
			}
		if (f.drop_member_kind && p.bytes[0] == f.drop_member_kind &&
		    wire::Ceth::load(p.bytes.data() + wire::kBthBytes).src_node !=
			    sw::kNodeSwitch) {
			dropped++;
			return;
		}
		if (f.drop_if && f.drop_if(p)) {
			dropped++;
			return;
		}
		if (f.loss > 0 && u_(rng_) < f.loss) {
			dropped++;
			if (p.bytes.size() > wire::kBthBytes + wire::kCethBytes + sw::kTaskBytes &&
			    wire::Bth::load(p.bytes.data()).opcode == wire::kCollData)
				partials_lost++;
			return;
		}
		if (f.dup > 0 && u_(rng_) < f.dup) {
			duplicated++;
			queue.push_back(p);
		}
		queue.push_back(std::move(p));
	}
	// What is in flight, in the order it arrives.
	std::vector<Pkt> take()
	{
		std::vector<Pkt> out;
		if (f.delay_ns) {
			// What is due, in the order it arrives.
			std::stable_sort(queue.begin(), queue.end(),
					 [](const Pkt &a, const Pkt &b) { return a.due < b.due; });
			size_t n = 0;
			while (n < queue.size() && queue[n].due <= *clock)
				n++;
			out.assign(std::make_move_iterator(queue.begin()),
				   std::make_move_iterator(queue.begin() + long(n)));
			queue.erase(queue.begin(), queue.begin() + long(n));
			return out;
		}
		out.swap(queue);
		if (f.reorder)
			std::shuffle(out.begin(), out.end(), rng_);
		return out;
	}

private:
	std::vector<std::pair<Endpoint, uint64_t>> last_due_;
	std::map<uint8_t, uint64_t> link_free_; // per sender (its address's last byte)
	std::mt19937_64 rng_;
	std::uniform_real_distribution<double> u_{0.0, 1.0};
};

NicParams make_params(uint32_t i, uint32_t timeout_ms, uint32_t rto_us)
{
	NicParams p;
	p.name = "fake" + std::to_string(i);
	p.gids = {node_ip(i)};
	p.udp_port = kPort;
	p.cfg.coll_timeout_ms = timeout_ms;
	p.cfg.coll_rto_us = rto_us;
	p.cfg.sw_config_ms = 50;
	return p;
}

// One NIC as the collective unit sees it.
class FakeHost final : public CollHost {
public:
	FakeHost(const NicParams &p, Net &net, const uint64_t &clock, Endpoint self)
		: CollHost(p), net_(net), clock_(clock), self_(self)
	{
	}
	std::map<uint32_t, Qp *> qps;
	std::vector<Cqe> cqes;
	uint64_t no_qp = 0, bad_state = 0, errors = 0, tx = 0, bad_tail_crc = 0;

	uint64_t now() const override { return clock_; }
	Qp *find_qp(uint32_t qpn) override
	{
		auto it = qps.find(qpn);
		return it == qps.end() ? nullptr : it->second;
	}
	bool push_cqe(Cq *, const Cqe &c) override
	{
		cqes.push_back(c);
		cqe_at.push_back(clock_);
		return true;
	}
	std::vector<uint64_t> cqe_at; // when each completion came
	void qp_to_error(Qp &qp, const char *) override
	{
		errors++;
		qp.state = QpState::err;
	}
	bool dma_ok(uint32_t, uint32_t, uint64_t addr, uint64_t, uint32_t) override
	{
		return addr != 0;
	}
	// The address space of each protection domain (none: this process's
	// own, kLocalSpace): a pid makes the engine reach it as it reaches a
	// client of the shared device, with process_vm_readv/writev.
	std::map<uint32_t, DmaSpace> spaces;
	DmaSpace pd_space(uint32_t pdn) const override
	{
		auto it = spaces.find(pdn);
		return it == spaces.end() ? kLocalSpace : it->second;
	}
	uint16_t udp_port() const override { return kPort; }
	bool ipv6() const override { return false; }
	uint8_t *tx_buf() override { return buf_; }
	void tx_to(const Endpoint &dst, const IpAddr &, uint8_t *pkt, size_t hdr_len,
		   uint32_t paylen) override
	{
		const uint32_t pad = (4 - (paylen & 3)) & 3;
		memset(pkt + hdr_len + paylen, 0, pad);
		pkt[1] = uint8_t((pkt[1] & ~0x30) | pad << 4);
		Pkt p{self_, dst, std::vector<uint8_t>(pkt, pkt + hdr_len + paylen + pad)};
		tx++;
		net_.send(std::move(p));
	}
	void tx_split(const Endpoint &dst, const IpAddr &, uint8_t *pkt, size_t hdr_len,
		      const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc) override
	{
		const uint32_t pad = (4 - (paylen & 3)) & 3;
		pkt[1] = uint8_t((pkt[1] & ~0x30) | pad << 4);
		Pkt p{self_, dst, std::vector<uint8_t>(pkt, pkt + hdr_len)};
		p.bytes.insert(p.bytes.end(), payload, payload + paylen);
		p.bytes.resize(p.bytes.size() + pad, 0);
		// A CRC handed on must be the payload's own.
		if (tail_crc &&
		    *tail_crc != wire::crc32_update(0, p.bytes.data() + hdr_len, paylen + pad))
			bad_tail_crc++;
		tx++;
		net_.send(std::move(p));
	}
	uint64_t tx_lend_mark() const override { return 0; }
	void tx_reclaim(uint64_t) override {}
	void tx_flush() override {}
	uint64_t tx_packets() const override { return tx; }
	void count_no_qp() override { no_qp++; }
	void count_bad_state() override { bad_state++; }
	void send_cnp(const Endpoint &, const IpAddr &, uint32_t, uint64_t *, uint64_t) override
	{
		cnps++;
	}
	CcCounters &cc_counters() override { return cc; }
	uint64_t cnps = 0;
	CcCounters cc;

private:
	Net &net_;
	const uint64_t &clock_;
	Endpoint self_;
	alignas(64) uint8_t buf_[Transport::kMaxPacket + 64];
};

// A minimal aggregation switch for the switch strategy: one plane, int32
// sum; inline task mode, or (configured) CONFIG answered with PENDING until
// every member has sent one, then a grant to each.  A repeat of a block it
// finished is answered from its copy of the result, and an ASK
// (wire/swproto.h, Loss) with the result, or with NAKs to the members whose
// partials it lacks.
class FakeSwitch {
public:
	FakeSwitch(Net &net, Endpoint self, std::vector<Endpoint> members, bool configured = false)
		: net_(net), self_(self), members_(std::move(members)), configured_(configured)
	{
	}
	uint64_t folded = 0, asks = 0, naks = 0, dup_partials = 0, releases = 0;
	// A broken switch: every partial and ASK is answered with a NAK naming
	// its sender, no block ever completes.
	bool nak_only = false;
	// Time division (configured): grants say so, and the admission of
	// message tdm_refuse_mid is refused (0: no time division).
	uint32_t tdm_refuse_mid = 0;
	// The first lose_grants grants to member lose_grants_to are lost.
	uint16_t lose_grants_to = 0;
	uint32_t lose_grants = 0;
	// Results chain (CETH rank_map: the block whose results went before,
	// plus 1), as a switch of one worker's do; else 0, as several
	// workers' (each sends its results in its own time).
	bool chain = false;

	void on_packet(const Pkt &in)
	{
		wire::Bth bth = wire::Bth::load(in.bytes.data());
		wire::Ceth h = wire::Ceth::load(in.bytes.data() + wire::kBthBytes);
		if (bth.opcode == wire::kCollRelease) {
			releases++;
			return;
		}
		if (bth.opcode == wire::kCollConfig && configured_)
			return on_config(h);
		ASSERT_EQ(bth.opcode, wire::kCollData);
		ASSERT_EQ(bool(h.flags & wire::kCethInline), !configured_);
		if (configured_ && configs_ != full())
			return; // not granted: dropped, as a switch drops it (drop_busy)
		const uint32_t task = configured_ ? 0 : uint32_t(sw::kTaskBytes);
		const size_t off = wire::kBthBytes + wire::kCethBytes + task;
		const uint32_t len = h.len - task;
		if (nak_only) {
			asks += (h.flags & wire::kCethAsk) != 0;
			send_nak(h, h.src_node, 1ull << h.src_node);
			return;
		}
		Block &b = blocks_[h.seq];
		if (b.have == full()) { // done: answer the repeat
			send_result(h, b, h.src_node);
			return;
		}
		if (h.flags & wire::kCethAsk) {
			ASSERT_EQ(len, 0u);
			asks++;
			const uint64_t me = 1ull << h.src_node;
			send_nak(h, h.src_node, b.have & me ? full() & ~b.have : me);
			// The members the block waits for are told too, as the
			// real switch does (switch_fold.cc, on_ask).
			if (b.have & me)
				for (uint16_t n = 0; n < members_.size(); n++)
					if (!(b.have >> n & 1))
						send_nak(h, n, 1ull << n);
			return;
		}
		if (b.have & (1ull << h.src_node)) {
			dup_partials++;
			return;
		}
		if (b.sum.empty())
			b.sum.assign(len / 4, 0);
		ASSERT_EQ(b.sum.size() * 4, len);
		for (size_t i = 0; i < b.sum.size(); i++) {
			int32_t v;
			memcpy(&v, in.bytes.data() + off + 4 * i, 4);
			b.sum[i] = int32_t(uint32_t(b.sum[i]) + uint32_t(v));
		}
		b.have |= 1ull << h.src_node;
		b.arrived[h.src_node] = *net_.clock;
		folded++;
		if (b.have == full()) {
			for (uint16_t n = 0; n < members_.size(); n++)
				send_result(h, b, n, chain ? last_result_ : 0);
			last_result_ = uint64_t(h.seq) + 1;
		}
	}

private:
	struct Block {
		uint64_t have = 0;
		std::vector<int32_t> sum;
		uint64_t arrived[64] = {}; // when each member's partial came
	};
	uint64_t full() const { return (1ull << members_.size()) - 1; }
	void on_config(const wire::Ceth &in)
	{
		if (in.flags & wire::kCethAdmit) {
			// Time division: message tdm_refuse_mid is refused (the
			// pool is busy), every other admitted, the same to all.
			send_admit(in.src_node, in.mid, in.mid == tdm_refuse_mid);
			return;
		}
		const bool granted = configs_ == full();
		configs_ |= 1ull << in.src_node;
		if (configs_ != full()) {
			send_config_ack(in.src_node, wire::kCethPending);
		} else if (granted) {
			send_config_ack(in.src_node, 0); // a repeat
		} else {
			for (uint16_t n = 0; n < members_.size(); n++)
				send_config_ack(n, 0);
		}
	}
	// A CONFIG_ACK to member `to`: the job's identity, then what the
	// caller sets in h.
	void send_ack(uint16_t to, wire::Ceth h)
	{
		std::vector<uint8_t> pkt(wire::kBthBytes + wire::kCethBytes);
		wire::Bth bth;
		bth.opcode = wire::kCollConfigAck;
		bth.dqpn = kQpn;
		bth.store(pkt.data());
		h.src_node = sw::kNodeSwitch;
		h.jid = jid_;
		h.job_key = key_;
		h.inc = 1;
		h.node_map = 1ull << to;
		h.store(pkt.data() + wire::kBthBytes);
		net_.send(Pkt{self_, members_[to], std::move(pkt)});
	}
	void send_admit(uint16_t to, uint32_t mid, bool refuse)
	{
		wire::Ceth h;
		h.mid = mid;
		h.flags = wire::kCethAdmit;
		h.status = refuse ? uint8_t(CollStatus::denied) : 0;
		h.phase = refuse ? sw::kAdmitBusy : 0;
		send_ack(to, h);
	}
	void send_config_ack(uint16_t to, uint8_t flags)
	{
		if (!flags && to == lose_grants_to && lose_grants) {
			lose_grants--; // lost on its way
			return;
		}
		const bool grant = !flags;
		if (grant && tdm_refuse_mid)
			flags = wire::kCethAdmit; // the grant of a switch sharing by time
		wire::Ceth h;
		h.flags = flags;
		h.seg = grant ? 64 : 0;
		send_ack(to, h);
	}
	void send_result(const wire::Ceth &in, const Block &b, uint16_t to, uint64_t prev = 0)
	{
		std::vector<uint8_t> pkt(wire::kBthBytes + wire::kCethBytes + b.sum.size() * 4);
		wire::Bth bth;
		bth.opcode = wire::kCollResult;
		bth.dqpn = kQpn;
		bth.store(pkt.data());
		wire::Ceth h = in;
		h.src_node = sw::kNodeSwitch;
		h.flags = 0;
		h.node_map = full();
		h.rank_map = prev;
		h.len = uint16_t(b.sum.size() * 4);
		// Held since the member's partial came (the CETH hold: what it
		// waited for the others), queued for none of it.
		h.hold = uint32_t(*net_.clock - b.arrived[to]);
		h.queue = 0;
		h.store(pkt.data() + wire::kBthBytes);
		memcpy(pkt.data() + wire::kBthBytes + wire::kCethBytes, b.sum.data(),
		       b.sum.size() * 4);
		net_.send(Pkt{self_, members_[to], std::move(pkt)});
	}
	void send_nak(const wire::Ceth &in, uint16_t to, uint64_t missing)
	{
		std::vector<uint8_t> pkt(wire::kBthBytes + wire::kCethBytes);
		wire::Bth bth;
		bth.opcode = wire::kCollResult;
		bth.dqpn = kQpn;
		bth.store(pkt.data());
		wire::Ceth h = in;
		h.src_node = sw::kNodeSwitch;
		h.flags = wire::kCethNak;
		h.node_map = missing;
		h.rank_map = 0;
		h.len = 0;
		h.store(pkt.data() + wire::kBthBytes);
		naks++;
		net_.send(Pkt{self_, members_[to], std::move(pkt)});
	}
	Net &net_;
	Endpoint self_;
	std::vector<Endpoint> members_;
	std::map<uint32_t, Block> blocks_;
	uint64_t last_result_ = 0;
	bool configured_;
	uint64_t configs_ = 0; // members whose CONFIG came

public:
	uint32_t jid_ = 0;
	uint64_t key_ = 0;
};

struct Node {
	NicParams params;
	std::unique_ptr<FakeHost> host;
	std::unique_ptr<CollService> svc;
	std::unique_ptr<Queue> sq;
	Cq cq;
	Qp qp;
	// A node split between two QPs (Cluster's split): the lead (qp) serves
	// all ranks but the last, this QP (kPartQpn, protection domain 2)
	// joins it with the last, as another process of the node would.
	std::unique_ptr<Queue> part_sq;
	Qp part;
	bool split() const { return part_sq != nullptr; }
	// Descheduled (Cluster's stalls): runs no pass until then, and what
	// reaches it waits here.
	uint64_t stalled_until = 0;
	std::vector<Pkt> backlog;
	uint16_t ranks = 1;
	uint64_t rx = 0;			    // packets the network handed it
	std::vector<std::vector<int32_t>> src, dst; // per local rank
	Endpoint host_ep() const { return Endpoint{params.gids[0], kPort, 0}; }
};

class Cluster {
public:
	// with_switch: a FakeSwitch, inline, or with configured a configuration
	// step (CONFIG, PENDING, grant).
	// split: this node (if any) is served by two QPs, the lead and a QP
	// that joins it with the node's last rank (its ranks must be 2 or more).
	Cluster(const std::vector<uint16_t> &ranks, Topology topo, uint64_t seed, bool with_switch,
		uint32_t timeout_ms = 200, uint32_t rto_us = 2000, bool configured = false,
		int split = -1, uint32_t seg_count = 64)
		: net(seed)
	{
		net.clock = &clock;
		const uint32_t n = uint32_t(ranks.size());
		JobConfig cfg;
		cfg.jid = 7;
		cfg.key = 0x5eed0000ull + seed;
		cfg.topology = topo;
		cfg.seg_base = 0;
		cfg.seg_count = seg_count;
		for (uint32_t i = 0; i < n; i++) {
			JobMember m;
			m.ep = Endpoint{node_ip(i), kPort, 0};
			m.qpn = kQpn;
			m.ranks = ranks[i];
			cfg.members.push_back(m);
		}
		sw_ep = Endpoint{node_ip(100), kPort, 0};
		if (topo != Topology::ring) {
			cfg.sw.on = true;
			cfg.sw.leaf = {sw_ep};
			// Without configured, the fake switch has no configuration step.
			cfg.sw.inline_task = with_switch && !configured;
		}
		std::vector<Endpoint> eps;
		for (auto &m : cfg.members)
			eps.push_back(m.ep);
		if (with_switch) {
			fsw = std::make_unique<FakeSwitch>(net, sw_ep, eps, configured);
			fsw->jid_ = cfg.jid;
			fsw->key_ = cfg.key;
		}
		for (uint32_t i = 0; i < n; i++) {
			auto nd = std::make_unique<Node>();
			nd->params = make_params(i, timeout_ms, rto_us);
			nd->ranks = ranks[i];
			nd->host = std::make_unique<FakeHost>(nd->params, net, clock, eps[i]);
			nd->svc = make_coll_service(*nd->host, std::max(128u, seg_count),
						    kSegUnitBytes);
			nd->sq = std::make_unique<Queue>(8, coll_wqe_stride(ranks[i]));
			nd->qp.qpn = kQpn;
			nd->qp.pdn = 1;
			nd->qp.coll = true;
			nd->qp.sq = nd->sq.get();
			nd->qp.scq = &nd->cq;
			nd->qp.meta.assign(nd->sq->slots(), WqeMeta{});
			nd->qp.attr.path_mtu = 256; // many blocks from a small vector
			nd->host->qps[kQpn] = &nd->qp;
			cfg.node = uint16_t(i);
			cfg.local_first = cfg.local_count = 0;
			if (int(i) == split) {
				nd->part_sq = std::make_unique<Queue>(8, coll_wqe_stride(1));
				nd->part.qpn = kPartQpn;
				nd->part.pdn = 2;
				nd->part.coll = true;
				nd->part.sq = nd->part_sq.get();
				nd->part.scq = &nd->cq;
				nd->part.meta.assign(nd->part_sq->slots(), WqeMeta{});
				nd->part.attr.path_mtu = 256;
				nd->host->qps[kPartQpn] = &nd->part;
				JobConfig pc = cfg;
				pc.local_first = uint16_t(ranks[i] - 1);
				pc.local_count = 1;
				EXPECT_EQ(nd->svc->configure(nd->part, pc), 0);
				nd->part.state = QpState::rts;
				cfg.local_count = uint16_t(ranks[i] - 1);
			}
			EXPECT_EQ(nd->svc->configure(nd->qp, cfg), 0);
			nd->qp.state = QpState::rts;
			nodes.push_back(std::move(nd));
		}
	}
	~Cluster()
	{
		for (auto &nd : nodes) {
			if (nd->split())
				nd->svc->release(nd->part);
			nd->svc->release(nd->qp);
		}
	}

	// Post an int32 SUM allreduce of count elements on every node (on a
	// split node, the joined QP's with part_count elements: another
	// collective than its lead's when that is not count).
	void post_allreduce(uint32_t mid, uint64_t count, uint64_t seed, uint64_t part_count = 0)
	{
		std::mt19937 rng{uint32_t(seed)};
		for (auto &nd : nodes) {
			const uint16_t r = nd->ranks;
			nd->src.assign(r, std::vector<int32_t>(count));
			nd->dst.assign(r, std::vector<int32_t>(count, 0x7a7a7a7a));
			for (auto &s : nd->src)
				for (auto &v : s)
					v = int32_t(rng());
			if (!nd->split()) {
				post(*nd->sq, mid, count, nd->src.data(), nd->dst.data(), r);
				continue;
			}
			post(*nd->sq, mid, count, nd->src.data(), nd->dst.data(), uint16_t(r - 1));
			post(*nd->part_sq, mid, part_count ? part_count : count, &nd->src[r - 1],
			     &nd->dst[r - 1], 1);
		}
		// The reference: a scalar loop over every rank's source.
		want.assign(count, 0);
		for (auto &nd : nodes)
			for (auto &s : nd->src)
				for (uint64_t i = 0; i < count; i++)
					want[i] = int32_t(uint32_t(want[i]) + uint32_t(s[i]));
	}

	// A broadcast of count int32 from global rank root (nodes not split).
	void post_bcast(uint32_t mid, uint64_t count, uint32_t root, uint64_t seed)
	{
		std::mt19937 rng{uint32_t(seed)};
		uint32_t g = 0;
		for (auto &nd : nodes) {
			const uint16_t r = nd->ranks;
			nd->src.assign(r, std::vector<int32_t>(count));
			nd->dst.assign(r, std::vector<int32_t>(count, 0x7a7a7a7a));
			for (auto &sv : nd->src) {
				for (auto &v : sv)
					v = int32_t(rng());
				if (g++ == root)
					want = sv; // the reference: the root's source
			}
			post(*nd->sq, mid, count, nd->src.data(), nd->dst.data(), r, CollOp::bcast,
			     root);
		}
	}

	static void post(Queue &q, uint32_t mid, uint64_t count, std::vector<int32_t> *src,
			 std::vector<int32_t> *dst, uint16_t n, CollOp coll = CollOp::allreduce,
			 uint32_t root = 0)
	{
		const uint32_t idx = q.prod_relaxed();
		CollWqe *w = q.at<CollWqe>(idx);
		memset(w, 0, q.stride());
		w->wr_id = mid;
		w->opcode = uint8_t(coll);
		w->root = root;
		w->flags = kWqeSignaled;
		w->num_sge = n;
		w->op = uint8_t(RedOp::sum);
		w->dtype = uint8_t(Dtype::int32);
		w->mid = mid;
		w->count = count;
		for (uint16_t i = 0; i < n; i++) {
			w->srcs()[i] = Sge{uint64_t(uintptr_t(src[i].data())), uint32_t(count * 4),
					   1};
			w->dsts()[i] = Sge{uint64_t(uintptr_t(dst[i].data())), uint32_t(count * 4),
					   1};
		}
		q.publish(idx + 1);
	}

	// Run until every node has `cqes` completions or limit_ns of fake time
	// (or max_passes passes, if not negative) pass; returns whether they
	// all did.
	// Descheduled hosts: every stall_every_ns of fake time on average a
	// node, drawn from the seed, does not run for stall_ns: no progress
	// pass, and what reaches it waits in its socket until it runs again
	// (InPacket::rx_ns says when it arrived).
	uint64_t stall_every_ns = 0, stall_ns = 0;
	uint64_t stalls = 0;

	bool stalled(const Node &nd) const { return clock < nd.stalled_until; }

	bool run(size_t cqes, uint64_t limit_ns, int max_passes = -1)
	{
		const uint64_t end = clock + limit_ns;
		while (clock < end && max_passes-- != 0) {
			stall_some();
			for (auto &nd : nodes) {
				if (is_dead(*nd))
					continue;
				if (stalled(*nd))
					continue;
				for (Pkt &p : nd->backlog)
					deliver(p);
				nd->backlog.clear();
				for (Qp *q : {&nd->qp, &nd->part}) {
					if (q == &nd->part && !nd->split())
						continue;
					if (q->state == QpState::rts)
						nd->svc->progress(*q, clock);
					else if (q->state == QpState::err)
						nd->svc->flush(*q);
				}
			}
			std::vector<Pkt> batch = net.take();
			for (Pkt &p : batch)
				deliver(p);
			bool all = true;
			for (auto &nd : nodes)
				all &= is_dead(*nd) ||
				       nd->host->cqes.size() >= (nd->split() ? 2 * cqes : cqes);
			if (all && net.queue.empty())
				return true;
			if (batch.empty()) {
				// Quiet: let the timers run, or the next packet arrive.
				uint64_t step = 100000;
				for (auto &nd : nodes)
					if (stalled(*nd))
						step = std::min(step, nd->stalled_until - clock);
				for (const Pkt &q : net.queue)
					if (q.due > clock)
						step = std::min(step, q.due - clock);
				clock += net.f.rate_bps ? std::max<uint64_t>(step, 1000) : step;
			}
		}
		return false;
	}

	bool is_dead(const Node &nd) const
	{
		for (const Endpoint &d : net.f.dead)
			if (d == nd.host_ep())
				return true;
		return false;
	}

	uint64_t clock = 1000 * kMs;
	std::mt19937_64 stall_rng_{77};
	uint64_t next_stall_ = 0;
	Net net;
	Endpoint sw_ep;
	std::unique_ptr<FakeSwitch> fsw;
	std::vector<std::unique_ptr<Node>> nodes;
	std::vector<int32_t> want;

private:
	void stall_some()
	{
		if (!stall_every_ns || clock < next_stall_)
			return;
		std::uniform_int_distribution<uint64_t> gap(0, 2 * stall_every_ns);
		if (next_stall_) {
			Node &nd = *nodes[stall_rng_() % nodes.size()];
			nd.stalled_until = std::max(nd.stalled_until, clock + stall_ns);
			stalls++;
		}
		next_stall_ = clock + gap(stall_rng_);
	}

	void deliver(const Pkt &p)
	{
		if (fsw && p.dst == sw_ep) {
			fsw->on_packet(p);
			return;
		}
		for (auto &nd : nodes) {
			if (!(nd->host_ep() == p.dst))
				continue;
			if (stalled(*nd)) {
				nd->backlog.push_back(p);
				nd->backlog.back().due = clock; // when it reached the host
				continue;
			}
			InPacket ip{};
			ip.rx_ns = p.due && p.due < clock ? p.due : clock;
			ip.data = p.bytes.data();
			ip.len = p.bytes.size();
			ip.src = p.src;
			ip.bth = wire::Bth::load(p.bytes.data());
			const size_t split = wire::kBthBytes + wire::kCethBytes;
			ip.tail_crc = ip.bth.opcode == wire::kCollResult && p.bytes.size() >= split
					      ? wire::crc32_update(0, p.bytes.data() + split,
								   p.bytes.size() - split)
					      : 0;
			nd->rx++;
			nd->svc->on_packet(ip);
		}
	}
};

} // namespace

// Every rank's destination holds the reference, and every node one
// successful completion of the message.
static void expect_results(Cluster &c, uint32_t mid)
{
	for (size_t n = 0; n < c.nodes.size(); n++) {
		Node &nd = *c.nodes[n];
		ASSERT_FALSE(nd.host->cqes.empty()) << "node " << n;
		const Cqe &q = nd.host->cqes.back();
		EXPECT_EQ(q.status, uint8_t(WcStatus::success)) << "node " << n;
		EXPECT_EQ(q.mid, mid) << "node " << n;
		EXPECT_EQ(q.blocks_done, q.blocks_total) << "node " << n;
		for (uint16_t r = 0; r < nd.ranks; r++)
			ASSERT_EQ(nd.dst[r], c.want) << "node " << n << " rank " << r;
		EXPECT_EQ(nd.host->bad_tail_crc, 0u) << "node " << n;
	}
}

// Every packet a node was handed is counted exactly once: delivered, or
// dropped for one reason (nic/coll_iface.h, CollCounters).
static void expect_accounted(const Node &nd, size_t n)
{
	const CollCounters k = nd.svc->counters();
	EXPECT_EQ(k.rx_packets, nd.rx) << "node " << n;
	EXPECT_EQ(k.rx_packets, k.delivered + k.dup_dropped + k.stale_dropped + k.early_stored +
					k.early_dropped + k.bad_key + k.bad_job + k.bad_block +
					k.bad_node + k.malformed + k.host_dropped)
		<< "node " << n;
	EXPECT_EQ(k.host_dropped, nd.host->no_qp + nd.host->bad_state) << "node " << n;
	EXPECT_GT(k.delivered, 0u) << "node " << n;
}

struct PathCase {
	const char *name;
	Topology topo;
	double loss, dup;
	bool reorder;
};

class CollPaths : public ::testing::TestWithParam<PathCase> {};

TEST_P(CollPaths, AllreduceMatchesTheReference)
{
	const PathCase &pc = GetParam();
	for (uint64_t seed = 1; seed <= 3; seed++) {
		Cluster c({2, 1, 3, 1}, pc.topo, seed, pc.topo != Topology::ring);
		c.net.f.loss = pc.loss;
		c.net.f.dup = pc.dup;
		c.net.f.reorder = pc.reorder;
		for (uint32_t mid = 1; mid <= 3; mid++) {
			c.post_allreduce(mid, 9000 + 333 * mid, seed * 10 + mid);
			ASSERT_TRUE(c.run(mid, 5000 * kMs)) << "seed " << seed << " mid " << mid;
			expect_results(c, mid);
			if (::testing::Test::HasFailure())
				return;
		}
		if (pc.loss > 0) {
			EXPECT_GT(c.net.dropped, 0u);
		}
		if (pc.dup > 0) {
			EXPECT_GT(c.net.duplicated, 0u);
		}
		for (size_t n = 0; n < c.nodes.size(); n++)
			expect_accounted(*c.nodes[n], n);
		// Under loss blocks were sent again: round the ring by every node;
		// through the switch by the nodes whose partials were lost (a node
		// that lost none sends none again).
		uint64_t again = 0;
		for (auto &nd : c.nodes) {
			CollCounters k = nd->svc->counters();
			EXPECT_EQ(k.messages, 3u);
			EXPECT_EQ(k.failed, 0u);
			if (pc.loss > 0 && pc.topo == Topology::ring) {
				EXPECT_GT(k.retrans_data + k.retrans_result, 0u);
			}
			again += k.retrans_data + k.retrans_result;
		}
		if (pc.loss > 0) {
			EXPECT_GT(again, 0u);
		}
	}
}

INSTANTIATE_TEST_SUITE_P(
	Faults, CollPaths,
	::testing::Values(PathCase{"ring_clean", Topology::ring, 0, 0, false},
			  PathCase{"ring_loss", Topology::ring, 0.05, 0, false},
			  PathCase{"ring_dup", Topology::ring, 0, 0.1, false},
			  PathCase{"ring_reorder", Topology::ring, 0, 0, true},
			  PathCase{"ring_all", Topology::ring, 0.05, 0.05, true},
			  PathCase{"switch_clean", Topology::sw, 0, 0, false},
			  PathCase{"switch_loss", Topology::sw, 0.05, 0, false},
			  PathCase{"switch_dup_reorder", Topology::sw, 0, 0.1, true},
			  PathCase{"switch_all", Topology::sw, 0.05, 0.05, true}),
	[](const ::testing::TestParamInfo<PathCase> &i) { return std::string(i.param.name); });

// Small allreduces (at most IBV_COLL_EMU_XCHG_BYTES) run as the pairwise
// exchange, for every shape of it (a power of two, and the pairs before
// one), with loss, duplicates and reordering: each node's result is the
// reference's, and what was lost went again, unacknowledged.
TEST(CollPathsExchange, EveryShapeUnderLossMatchesTheReference)
{
	const std::vector<std::vector<uint16_t>> shapes = {{1, 1},
							   {2, 1, 3},
							   {1, 1, 1, 1},
							   {1, 2, 1, 1, 1},
							   {1, 1, 1, 1, 1, 1, 2},
							   {1, 1, 1, 1, 1, 1, 1, 1}};
	uint64_t dropped = 0, again = 0; // under loss, all shapes
	for (const auto &shape : shapes) {
		for (const double loss : {0.0, 0.1}) {
			Cluster c(shape, Topology::ring, 7 + shape.size(), false);
			c.net.f.loss = loss;
			c.net.f.dup = loss / 2;
			c.net.f.reorder = loss > 0;
			uint32_t mid = 0;
			// Pieces of the path MTU, 256 bytes here: 1024, 1025 and
			// 4000 int32 make partials of 16, 17 and 63 pieces.
			for (const uint64_t count : {1, 7, 100, 1024, 1025, 4000, 3, 1}) {
				mid++;
				c.post_allreduce(mid, count, mid * 31 + shape.size());
				ASSERT_TRUE(c.run(mid, 5000 * kMs))
					<< shape.size() << " nodes, loss " << loss << ", mid "
					<< mid;
				expect_results(c, mid);
				if (::testing::Test::HasFailure())
					return;
			}
			for (size_t n = 0; n < c.nodes.size(); n++) {
				expect_accounted(*c.nodes[n], n);
				const CollCounters k = c.nodes[n]->svc->counters();
				EXPECT_EQ(k.messages, mid);
				EXPECT_EQ(k.failed, 0u);
				EXPECT_EQ(k.tx_result, 0u) << "a result went round the ring";
				EXPECT_TRUE(loss > 0 || k.retrans_data == 0)
					<< "sent again without loss";
				again += loss > 0 ? k.retrans_data : 0;
			}
			dropped += c.net.dropped;
		}
	}
	EXPECT_GT(dropped, 0u);
	EXPECT_GT(again, 0u);
}

// Small broadcasts (at most IBV_COLL_EMU_XCHG_BYTES) go down a binomial
// tree from the root, from every root in turn, with loss, duplicates,
// reordering and descheduled hosts: every rank gets the root's data.
// (Here each message is posted when the last completed everywhere; the
// loopback matrices, whose nodes post on their own, let a leaf run two
// messages ahead of a node: coll.Loopback/Coll n3k1_full failed so before
// the slot for a later message's partials kept the first it took.)
TEST(CollPathsExchange, BroadcastTreesFromEveryRootUnderLoss)
{
	const std::vector<std::vector<uint16_t>> shapes = {{1, 1},
							   {1, 1, 1},
							   {2, 1, 1, 1, 1},
							   {1, 1, 1, 1, 1, 1, 1, 1},
							   {1, 2, 1, 1, 1, 1, 1, 1, 1}};
	uint64_t again = 0;
	for (const auto &shape : shapes) {
		for (const double loss : {0.0, 0.1}) {
			Cluster c(shape, Topology::ring, 3 + shape.size(), false);
			c.net.f.loss = loss;
			c.net.f.dup = loss / 2;
			c.net.f.reorder = loss > 0;
			// Hosts descheduled now and then: the others run ahead.
			c.stall_every_ns = kMs / 4;
			c.stall_ns = 2 * kMs;
			uint32_t ranks = 0;
			for (uint16_t k : shape)
				ranks += k;
			uint32_t mid = 0;
			for (uint32_t root = 0; root < ranks; root++) {
				for (const uint64_t count : {1, 300, 3900}) { // up to 61 pieces
					mid++;
					c.post_bcast(mid, count, root, mid * 7 + shape.size());
					ASSERT_TRUE(c.run(mid, 5000 * kMs))
						<< shape.size() << " nodes, loss " << loss
						<< ", root " << root;
					expect_results(c, mid);
					if (::testing::Test::HasFailure())
						return;
				}
			}
			for (size_t n = 0; n < c.nodes.size(); n++) {
				expect_accounted(*c.nodes[n], n);
				const CollCounters k = c.nodes[n]->svc->counters();
				EXPECT_EQ(k.failed, 0u);
				EXPECT_EQ(k.tx_result, 0u) << "a result went round the ring";
				again += loss > 0 ? k.retrans_data : 0;
			}
		}
	}
	EXPECT_GT(again, 0u);
}

// A member of the exchange completes on its result and keeps sending what
// no peer acknowledged, after it completed: with its partials to the
// others cut, node 1 has every partial it needs and completes, the others
// do not, and node 1's job would not leave its QP yet (leaving(): a
// destroy waits for that); once the cut heals, its partials go again
// though node 1 posts nothing more, every node completes with the
// reference, and node 1's job may leave.  For two nodes (one phase) and
// three (node 1 takes node 0's partial in phase 0 and returns the result
// in the last).
TEST(CollPathsExchange, AMemberThatCompletesSendsUntilAcknowledged)
{
	for (const size_t n : {2, 3}) {
		Cluster c(std::vector<uint16_t>(n, 1), Topology::ring, 5, false);
		for (size_t to = 0; to < n; to++)
			if (to != 1)
				c.net.f.cut.emplace_back(c.nodes[1]->host_ep(),
							 c.nodes[to]->host_ep());
		c.post_allreduce(1, 16, 9);
		EXPECT_FALSE(c.run(1, 50 * kMs)) << n << " nodes";
		for (size_t k = 0; k < n; k++)
			EXPECT_EQ(c.nodes[k]->host->cqes.size(), k == 1 ? 1u : 0u)
				<< n << " nodes: node " << k;
		Node &one = *c.nodes[1];
		EXPECT_TRUE(one.svc->leaving(one.qp, c.clock)) << n << " nodes";
		c.net.f.cut.clear();
		ASSERT_TRUE(c.run(1, 5000 * kMs)) << n << " nodes";
		expect_results(c, 1);
		EXPECT_GT(one.svc->counters().retrans_data, 0u) << n << " nodes";
		EXPECT_FALSE(one.svc->leaving(one.qp, c.clock)) << n << " nodes";
	}
}

// A job that leaves its QP (reset, or destroyed) sends the
// acknowledgements it held back: two nodes, one allreduce; each holds the
// other's acknowledgement (nothing follows to carry it), and once node 1's
// job is released, node 0 has all it sent acknowledged, where it would
// otherwise go on sending to a node that never answers.
TEST(CollPathsExchange, AJobThatLeavesSendsWhatItHeldBack)
{
	Cluster c({1, 1}, Topology::ring, 8, false);
	c.post_allreduce(1, 4, 3);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	expect_results(c, 1);
	Node &zero = *c.nodes[0], &one = *c.nodes[1];
	EXPECT_TRUE(zero.svc->leaving(zero.qp, c.clock)) << "node 1 answered at once";
	one.svc->release(one.qp);
	EXPECT_FALSE(c.run(2, kMs));
	EXPECT_FALSE(zero.svc->leaving(zero.qp, c.clock));
}

// Acknowledgements ride on what a member sends next: in a run of small
// allreduces on four nodes without loss, each member's partials of the
// next message say it finished the last (rank_map), so a member sends
// its two partials a message and almost nothing else, where every partial
// had an acknowledgement of its own (four packets a message); the last
// message's are acknowledged alone, after the wait, and nothing goes
// twice.
TEST(CollPathsExchange, AcknowledgementsRideOnTheNextPartials)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 4, false);
	constexpr uint32_t kMsgs = 40;
	for (uint32_t mid = 1; mid <= kMsgs; mid++) {
		c.post_allreduce(mid, 2, mid);
		ASSERT_TRUE(c.run(mid, 5000 * kMs)) << "mid " << mid;
		expect_results(c, mid);
	}
	EXPECT_FALSE(c.run(kMsgs + 1, 2 * kMs)); // the last acknowledgements, after their wait
	for (size_t n = 0; n < c.nodes.size(); n++) {
		Node &nd = *c.nodes[n];
		const CollCounters k = nd.svc->counters();
		EXPECT_EQ(k.tx_data, 2u * kMsgs) << "node " << n;
		EXPECT_EQ(k.retrans_data, 0u) << "node " << n;
		EXPECT_LE(nd.host->tx, 2u * kMsgs + kMsgs / 4) << "node " << n;
		EXPECT_FALSE(nd.svc->leaving(nd.qp, c.clock)) << "node " << n;
	}
}

// A blocking loop of exchanges: each message opens while the one before
// it still waits for its acknowledgement (they ride on this one's
// partials), so the buffer its partials go from must come from one that
// is acknowledged.  Each message that completes leaves such a buffer with
// the job; it once went away with the message, and every message of a
// 32 KiB allreduce allocated and cleared 128 KiB anew (4 nodes: a
// partial per phase).  So does the buffer its peers' partials came into,
// which a later message's early partial may have left its slot for.
TEST(CollPathsExchange, APartialsBufferIsKeptForTheNextMessage)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 5, false);
	constexpr uint32_t kMsgs = 12;
	constexpr uint64_t kCount = 1000; // 4000 bytes a rank: 16 pieces of 256
	for (uint32_t mid = 1; mid <= kMsgs; mid++) {
		c.post_allreduce(mid, kCount, mid);
		ASSERT_TRUE(c.run(mid, 5000 * kMs)) << "mid " << mid;
		expect_results(c, mid);
		if (mid < 2)
			continue; // the first message's buffer is still in use
		for (size_t n = 0; n < c.nodes.size(); n++) {
			const CollJob &job = *c.nodes[n]->qp.job;
			size_t spare = 0, spare_in = 0;
			for (const XchgOut &o : job.xchg.outs)
				spare += !o.sent.on && o.sent.data.size() >= kCount * 4;
			for (const XchgSlots &e : job.xchg.early)
				spare_in += !e.on && e.data.size() >= kCount * 4;
			EXPECT_GE(spare, 1u) << "node " << n << ", after message " << mid;
			EXPECT_GE(spare_in, 1u) << "node " << n << ", after message " << mid
						<< ": the buffer its peers' partials came into";
		}
	}
}

// Eight collectives posted at once on every node of shape, each into
// buffers of its own (coll_of and count_of say what message i is; a
// broadcast's root varies), with loss, duplicates, reordering and
// descheduled hosts, at the given depth (IBV_COLL_EMU_COLL_DEPTH).  Each
// must complete in MID order with the scalar loop's result; with depth 1
// none starts beside another (coll_beside), with more some do.  Returns
// the nodes' counters, summed.
template <class CollOf, class CountOf>
static CollCounters run_in_flight(const std::vector<uint16_t> &shape, uint32_t depth, uint64_t seed,
				  CollOf coll_of, CountOf count_of, bool with_switch = false,
				  double loss = 0.1, uint32_t timeout_ms = 200)
{
	constexpr uint32_t kMsgs = 8; // the fake SQ's slots
	CollCounters sum{};
	Cluster c(shape, with_switch ? Topology::sw : Topology::ring, seed + 10 * shape.size(),
		  with_switch, timeout_ms);
	c.net.f.loss = loss;
	c.net.f.dup = 0.05;
	c.net.f.reorder = true;
	c.stall_every_ns = kMs / 2;
	c.stall_ns = kMs;
	for (auto &nd : c.nodes)
		nd->params.cfg.coll_depth = depth;
	uint32_t ranks = 0;
	for (uint16_t k : shape)
		ranks += k;
	// Per message and rank: source and destination.
	std::vector<std::vector<std::vector<std::vector<int32_t>>>> src(kMsgs), dst(kMsgs);
	std::vector<std::vector<int32_t>> want(kMsgs);
	std::mt19937 rng{uint32_t(seed)};
	for (uint32_t i = 0; i < kMsgs; i++) {
		const CollOp coll = coll_of(i);
		const uint64_t count = coll == CollOp::barrier ? 0 : count_of(i);
		const uint32_t root = (i * 3) % ranks;
		want[i].assign(count, 0);
		src[i].resize(c.nodes.size());
		dst[i].resize(c.nodes.size());
		uint32_t g = 0;
		for (size_t n = 0; n < c.nodes.size(); n++) {
			const uint16_t r = c.nodes[n]->ranks;
			src[i][n].assign(r, std::vector<int32_t>(count));
			dst[i][n].assign(r, std::vector<int32_t>(count, 0x7a7a));
			for (auto &sv : src[i][n]) {
				for (auto &v : sv)
					v = int32_t(rng());
				for (uint64_t e = 0; e < count; e++)
					if (coll == CollOp::allreduce)
						want[i][e] = int32_t(uint32_t(want[i][e]) +
								     uint32_t(sv[e]));
				if (coll == CollOp::bcast && g == root)
					want[i] = sv;
				g++;
			}
		}
		for (size_t n = 0; n < c.nodes.size(); n++) {
			Node &nd = *c.nodes[n];
			Cluster::post(*nd.sq, i + 1, count, src[i][n].data(), dst[i][n].data(),
				      nd.ranks, coll, root);
		}
	}
	EXPECT_TRUE(c.run(kMsgs, 20000 * kMs)) << shape.size() << " nodes, depth " << depth;
	for (size_t n = 0; n < c.nodes.size(); n++) {
		Node &nd = *c.nodes[n];
		EXPECT_EQ(nd.host->cqes.size(), kMsgs);
		for (uint32_t i = 0; i < kMsgs && i < nd.host->cqes.size(); i++) {
			const Cqe &q = nd.host->cqes[i];
			EXPECT_EQ(q.status, uint8_t(WcStatus::success))
				<< "node " << n << " message " << i + 1;
			EXPECT_EQ(q.mid, i + 1) << "node " << n;
			for (uint16_t r = 0; r < nd.ranks; r++)
				EXPECT_EQ(dst[i][n][r], want[i])
					<< "node " << n << " message " << i + 1 << " rank " << r
					<< " depth " << depth;
		}
		expect_accounted(nd, n);
		const CollCounters k = nd.svc->counters();
		EXPECT_EQ(k.failed, 0u);
		if (depth == 1)
			EXPECT_EQ(k.beside, 0u) << "node " << n;
		else
			EXPECT_GT(k.beside, 0u) << "node " << n;
		sum.beside += k.beside;
		sum.tx_result += k.tx_result;
		sum.tx_data += k.tx_data;
	}
	EXPECT_GT(c.net.dropped, 0u);
	return sum;
}

// Several small collectives in flight per job (IBV_COLL_EMU_COLL_DEPTH):
// allreduces of several sizes, broadcasts from several roots and a
// barrier, all as the exchange (no result goes round the ring).
TEST(CollPathsDepth, SmallCollectivesInFlightCompleteInOrder)
{
	const std::vector<std::vector<uint16_t>> shapes = {{1, 1, 1, 1}, {1, 2, 1, 1, 1}};
	for (const auto &shape : shapes) {
		for (const uint32_t depth : {1u, 4u, 16u}) {
			for (uint64_t seed = 1; seed <= 2; seed++) {
				const CollCounters k = run_in_flight(
					shape, depth, seed,
					[](uint32_t i) {
						return i == 5	    ? CollOp::barrier
						       : i % 3 == 1 ? CollOp::bcast
								    : CollOp::allreduce;
					},
					[](uint32_t i) { return i % 2 ? 1 + i * 37 : 1024 - i; });
				EXPECT_EQ(k.tx_result, 0u) << "a result went round the ring";
				if (::testing::Test::HasFailure())
					return;
			}
		}
	}
}

// Large collectives in flight round the ring, as NCCL's CollNet proxy
// keeps its requests (each a step of 512 KiB): a message's blocks go as
// soon as those of the messages before it have all started, in one
// window, and the messages complete in MID order.  Allreduces and
// broadcasts beyond the exchange's size, several sizes; and runs of small
// ones (the exchange) before and after a run of large ones: those of one
// kind run side by side, and a message of the other kind waits for them.
TEST(CollPathsDepth, LargeCollectivesInFlightGoRoundTheRing)
{
	const std::vector<std::vector<uint16_t>> shapes = {{1, 1, 1}, {1, 2, 1, 1}};
	for (const auto &shape : shapes) {
		for (const uint32_t depth : {1u, 4u}) {
			for (uint64_t seed = 1; seed <= 4; seed++) {
				const bool mixed = seed > 2;
				const CollCounters k = run_in_flight(
					shape, depth, seed,
					[](uint32_t i) {
						return i % 3 == 1 ? CollOp::bcast
								  : CollOp::allreduce;
					},
					[mixed](uint32_t i) -> uint64_t {
						if (mixed && (i < 3 || i > 5))
							return 100 + i * 37; // the exchange
						return 5000 + i * 611;
					});
				EXPECT_GT(k.tx_result, 0u) << "no result went round the ring";
				if (::testing::Test::HasFailure())
					return;
			}
		}
	}
}

// Messages in flight round the ring each make their copies' slots
// (RingMsg::kept) as their blocks need them; the job keeps each one's
// memory when it completes, one for each message that may run at once,
// and the next messages run in it.  With one kept, a depth of 8 (NCCL's
// requests in flight) allocated and cleared about 128 KiB for a third of
// its 512 KiB messages.
TEST(CollPathsDepth, MessagesInFlightRoundTheRingRunInTheMemoryOfThoseBefore)
{
	constexpr uint32_t kDepth = 4, kMsgs = 2 * kDepth;
	constexpr uint64_t kCount = 6000; // beyond the exchange: round the ring
	Cluster c({1, 1, 1}, Topology::ring, 11, false);
	for (auto &nd : c.nodes)
		nd->params.cfg.coll_depth = kDepth;
	const size_t nn = c.nodes.size();
	std::vector<std::vector<int32_t>> src(kMsgs * nn), dst(kMsgs * nn);
	std::vector<std::set<const uint8_t *>> kept(nn);
	for (uint32_t batch = 0; batch < 2; batch++) {
		for (uint32_t i = batch * kDepth; i < (batch + 1) * kDepth; i++)
			for (size_t n = 0; n < nn; n++) {
				std::vector<int32_t> &sv = src[i * nn + n];
				sv.resize(kCount);
				for (uint64_t e = 0; e < kCount; e++)
					sv[e] = int32_t(e * 13 + n * 1000 + i);
				dst[i * nn + n].assign(kCount, 0x7a7a);
				Cluster::post(*c.nodes[n]->sq, i + 1, kCount, &sv, &dst[i * nn + n],
					      1);
			}
		ASSERT_TRUE(c.run((batch + 1) * kDepth, 5000 * kMs)) << "batch " << batch;
		for (uint32_t i = batch * kDepth; i < (batch + 1) * kDepth; i++)
			for (size_t n = 0; n < nn; n++)
				for (uint64_t e = 0; e < kCount; e += 97) {
					int64_t want = 0;
					for (size_t k = 0; k < nn; k++)
						want += int64_t(e * 13 + k * 1000 + i);
					ASSERT_EQ(dst[i * nn + n][e], int32_t(want))
						<< "message " << i + 1 << ", node " << n
						<< ", element " << e;
				}
		for (size_t n = 0; n < nn; n++) {
			const CollJob &job = *c.nodes[n]->qp.job;
			EXPECT_EQ(job.spare_rings.size(), kDepth) << "node " << n;
			std::set<const uint8_t *> now;
			for (const RingMsg &g : job.spare_rings)
				if (!g.kept.empty())
					now.insert(g.kept.data());
			if (batch == 0)
				kept[n] = now;
			else // the same memory, none made again
				EXPECT_EQ(now, kept[n]) << "node " << n;
		}
	}
}

// Collectives in flight through the switch, as SHARP keeps several
// transactions outstanding: the job numbers the blocks of all its
// messages in one sequence, a message's blocks go once those of the
// messages before it have all gone, and they complete in MID order.
// Allreduces (what the fake switch reduces) of one block and of many,
// under loss, duplicates, reordering and descheduled hosts; every result
// against the scalar sum.  At depth 4 every later message starts beside
// the others, at depth 1 none does.
TEST(CollPathsDepth, CollectivesInFlightGoThroughTheSwitch)
{
	const std::vector<std::vector<uint16_t>> shapes = {{1, 1, 1}, {1, 2, 1, 1}};
	for (const auto &shape : shapes) {
		for (const uint32_t depth : {1u, 4u}) {
			for (uint64_t seed = 1; seed <= 3; seed++) {
				const CollCounters k = run_in_flight(
					shape, depth, seed,
					[](uint32_t) { return CollOp::allreduce; },
					[seed](uint32_t i) -> uint64_t {
						return seed == 1 ? 1 + i
						       : i % 2	 ? 3 + i * 7
								 : 900 + i * 211;
					},
					true);
				EXPECT_EQ(k.tx_result, 0u) << "a result went round the ring";
				EXPECT_GT(k.tx_data, 0u);
				if (::testing::Test::HasFailure())
					return;
			}
		}
	}
}

// Through a switch of one worker (its results chain), a lost result of an
// older message whose later messages all completed is asked for a round
// trip after its partial went (SwitchPath::overtaken, chained), not at
// the probe: four 1-element
// allreduces warm the round trip up (60 us each way), then four more are
// posted at once on four nodes (depth 4, 20 us each way, probe and
// timeout 2 ms), the
// result of the first of them to node 1 lost.  Node 1 gets every later
// result and posts nothing more: only its own timers can find the loss.
// Every result is the scalar sum, and the four complete within 1 ms.
// Returns the time the four took; CHAIN: the switch's results chain.
static uint64_t lost_result_of_older_message(bool chain)
{
	Cluster c({1, 1, 1, 1}, Topology::sw, 8, true);
	c.fsw->chain = chain;
	for (auto &nd : c.nodes) {
		nd->params.cfg.coll_depth = 4;
		nd->params.cfg.coll_probe_us = 2000;
	}
	const Endpoint to = c.nodes[1]->host_ep();
	bool lost = false;
	c.net.f.drop_if = [&](const Pkt &p) {
		const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
		if (lost || p.bytes[0] != wire::kCollResult || !(p.dst == to) || h.mid != 5)
			return false;
		return lost = true;
	};
	constexpr uint32_t kMsgs = 8;
	std::vector<std::vector<std::vector<int32_t>>> src(kMsgs), dst(kMsgs);
	std::vector<std::vector<int32_t>> want(kMsgs, std::vector<int32_t>(1, 0));
	for (uint32_t i = 0; i < kMsgs; i++)
		for (uint32_t n = 0; n < 4; n++) {
			src[i].emplace_back(1, int32_t(1000 * i + 10 * n + 3));
			dst[i].emplace_back(1, -1);
			want[i][0] += src[i][n][0];
		}
	uint64_t start = 0;
	for (uint32_t half = 0; half < 2; half++) {
		// The path is faster than the round trip learnt: the later
		// results come before a round trip passed, so none of them
		// shows the loss (find_gaps) by itself.
		c.net.f.delay_ns = (half ? 20 : 60) * 1000;
		start = c.clock;
		for (uint32_t i = 4 * half; i < 4 * half + 4; i++)
			for (uint32_t n = 0; n < 4; n++)
				Cluster::post(*c.nodes[n]->sq, i + 1, 1, &src[i][n], &dst[i][n], 1);
		EXPECT_TRUE(c.run(4 * half + 4, 20000 * kMs));
	}
	EXPECT_TRUE(lost);
	for (uint32_t n = 0; n < 4; n++)
		for (uint32_t i = 0; i < kMsgs; i++) {
			EXPECT_EQ(c.nodes[n]->host->cqes[i].status, uint8_t(WcStatus::success));
			EXPECT_EQ(dst[i][n], want[i]) << "node " << n << " message " << i + 1;
		}
	EXPECT_GT(c.nodes[1]->svc->counters().beside, 0u);
	return c.clock - start;
}

TEST(CollPathsDepth, ALostResultIsAskedForOnceLaterMessagesCompleted)
{
	EXPECT_LT(lost_result_of_older_message(true), 1000 * 1000u) << "waited for the probe";
	// Results that do not chain (a switch of several workers sends each
	// worker's in its own time) say nothing of an older message's: the
	// probe finds the loss, and no ASK went a round trip after the
	// partial (it overtook partials in a busy worker's queue, and had
	// the switch NAK them: tools.perf_wire_switch with 4 workers).
	EXPECT_GE(lost_result_of_older_message(false), 2000 * 1000u);
}

// The exchange times its round trips (a partial to its acknowledgement,
// Karn's rule) and repeats a partial only after twice that: on a path of
// 400 us each way, beyond the 500 us probe time, no partial goes twice
// (each went twice before it did), and with loss on that path what was
// lost still goes again and every result is right.
TEST(CollPathsDepth, ExchangeRepeatsOnlyAfterItsRoundTrip)
{
	for (const double loss : {0.0, 0.1}) {
		Cluster c({1, 1, 1, 1, 1}, Topology::ring, 9, false);
		c.net.f.delay_ns = 400 * 1000;
		c.net.f.loss = loss;
		for (auto &nd : c.nodes)
			nd->params.cfg.coll_probe_us = 500;
		for (uint32_t mid = 1; mid <= 20; mid++) {
			c.post_allreduce(mid, 2, mid);
			ASSERT_TRUE(c.run(mid, 20000 * kMs)) << "loss " << loss << " mid " << mid;
			expect_results(c, mid);
		}
		uint64_t again = 0;
		for (auto &nd : c.nodes)
			again += nd->svc->counters().retrans_data;
		// The first message has no round trip yet: its partials may go twice.
		if (loss == 0)
			EXPECT_LE(again, 2u * c.nodes.size()) << "repeats without loss";
		else
			EXPECT_GT(again, 0u);
	}
}

// On a slow path the exchange's round trip is mostly its partials' time
// on the links: 400 Mbit/s, 16 KiB in 64 pieces, both phases' on one
// link and the acknowledgement behind the peer's: over a millisecond,
// where the first repeat comes after 625 us (no round trip is timed
// yet).  A repeat of a partial of which nothing was acknowledged is its
// last piece alone (a tail loss probe); the pieces the probe's
// acknowledgement does not name go then.  Before, every partial of the
// first message went twice whole (512 pieces again here; on
// bench-fabric.sh's 400 Mbit/s links, with descheduled hosts, partials
// went twice message after message: 2.5 x the ring's time), and at 2 %
// loss 1,091 pieces went again where 245 do now.  What was lost still
// goes again, every result right.
TEST(CollPathsDepth, ExchangeOnASlowPathRepeatsAPieceNotThePartial)
{
	for (const double loss : {0.0, 0.02}) {
		SCOPED_TRACE("loss " + std::to_string(loss));
		Cluster c({1, 1, 1, 1}, Topology::ring, 31, false, 2000);
		c.net.f.delay_ns = 20 * 1000;
		c.net.f.rate_bps = 400000000;
		c.net.f.loss = loss;
		c.stall_every_ns = 2 * kMs;
		c.stall_ns = kMs / 2;
		for (auto &nd : c.nodes)
			nd->params.cfg.coll_probe_us = 500;
		constexpr uint64_t kCount = 4096; // 16 KiB: 64 pieces of 256 bytes
		uint64_t sent = 0;
		for (uint32_t mid = 1; mid <= 20; mid++) {
			c.post_allreduce(mid, kCount, mid);
			ASSERT_TRUE(c.run(mid, 20000 * kMs)) << "mid " << mid;
			expect_results(c, mid);
		}
		uint64_t again = 0;
		for (auto &nd : c.nodes) {
			const CollCounters k = nd->svc->counters();
			EXPECT_EQ(k.failed, 0u);
			again += k.retrans_data;
			sent += k.tx_data;
		}
		if (loss == 0) {
			// The first message's probes: a piece per phase and node.
			EXPECT_LE(again, 2u * c.nodes.size()) << "repeats without loss";
		} else {
			EXPECT_GT(again, 0u);
			EXPECT_LT(again, sent / 10) << "whole partials went again";
		}
	}
}

// A member with every result of a message in, whose last packets to the
// next node are not acknowledged (lost, or the acknowledgement was), asks
// again (a tail probe) a few times within the job's timeout: the next
// node finished the message and answers only when asked.  The probes
// backed off without bound, and on 3 nodes at 10 % loss (5 % duplicates,
// reordering, descheduled hosts), seeds 78, 242 and 312 of eight
// collectives round the ring, one at a time, lost two probes or their
// answers; the third was due after the job's 200 ms and every member
// failed the collective (a hang until the timeout).
TEST(CollPathsDepth, ATailProbeGoesWithinTheJobsTimeout)
{
	for (const uint64_t seed : {78u, 242u, 312u}) {
		run_in_flight(
			{1, 1, 1}, 1, seed,
			[](uint32_t i) { return i % 3 == 1 ? CollOp::bcast : CollOp::allreduce; },
			[](uint32_t i) -> uint64_t { return 5000 + i * 611; });
		if (::testing::Test::HasFailure()) {
			ADD_FAILURE() << "seed " << seed;
			return;
		}
	}
}

// The sweep's mix round the ring (DISABLED_SeededSweep): every third
// message a broadcast, the sizes by seed (a few blocks, or one).
static CollOp ring_mix_coll(uint32_t i)
{
	return i % 3 == 1 ? CollOp::bcast : CollOp::allreduce;
}

static uint64_t ring_mix_count(uint64_t seed, uint32_t i)
{
	return seed % 2 && (i < 3 || i > 5) ? 100 + i * 37 : 5000 + i * 611;
}

// The sweep's allreduces through the switch: sizes by seed and message,
// of one block to several.
static uint64_t switch_mix_count(uint64_t seed, uint32_t i)
{
	return 1 + (seed * 7 + i * 211) % 2000;
}

// The sweep's mix, round the ring or through the switch, on the shape
// and at the depth given (1 unless said), seed by seed, at the loss and
// job timeout given; a failure names its seed.
static void mix_seeds(const std::vector<uint16_t> &shape, bool with_switch,
		      std::initializer_list<uint64_t> seeds, double loss, uint32_t timeout_ms,
		      uint32_t depth = 1)
{
	for (const uint64_t seed : seeds) {
		run_in_flight(
			shape, depth, seed,
			[with_switch](uint32_t i) {
				return with_switch ? CollOp::allreduce : ring_mix_coll(i);
			},
			[with_switch, seed](uint32_t i) {
				return with_switch ? switch_mix_count(seed, i)
						   : ring_mix_count(seed, i);
			},
			with_switch, loss, timeout_ms);
		if (::testing::Test::HasFailure()) {
			ADD_FAILURE() << "seed " << seed;
			return;
		}
	}
}

static const std::vector<uint16_t> kMix8 = {1, 2, 1, 1, 1, 1, 1, 1}, kMix5 = {1, 2, 1, 1, 1};

// A result lost on the way into a node after its predecessor had ended
// the message (passed on unnumbered: no gap shows it) came only by its
// finisher's probe round the nodes where the message was over, unrepaired
// there: at 20 % loss on 8 nodes these seeds timed out at 2 s.  The node
// now asks its predecessor, hears the message is over there and asks the
// finisher, which sends the result straight to it (RingPath::ask_prev,
// prev_over, resend_result); every result is still the reference's.
TEST(CollPathsDepth, AResultLostAfterThePreviousNodeEndedComesStraight)
{
	mix_seeds(kMix8, false, {24, 40, 117}, 0.2, 2000);
}

// A node with every result of a message in waits for its successor to
// ACK what it sent; a successor that has ended the message answers only
// its tail probes, which backed off, doubling from a hop's timeout: at
// 20 % loss, a few probes and answers lost in a row left these seeds of
// 8 nodes past the job's 200 ms.  With nothing else left of the message
// the probes went within four hop timeouts of each other; a probe and its
// answer both arrive 64 % of the time at 20 % loss, and at four (25 ms
// here) the seven or so tries within the timeout all failed in these
// runs of 3 and 4 nodes with four messages in flight (3 nodes, seed 430:
// six answers lost).  Now a hop's timeout apart, or an eighth of the wait
// since the message's last progress.
TEST(CollPathsDepth, AProbeForTheLastAckDoesNotBackOffFar)
{
	mix_seeds(kMix8, false, {4, 26, 38}, 0.2, 200);
	mix_seeds({1, 1, 1}, false, {430}, 0.2, 200, 4);
	mix_seeds({1, 2, 1, 1}, false, {472}, 0.2, 200, 4);
}

// A block's repeats and a message's probes back off, doubling, to at most
// an eighth of the job's timeout.  At a quarter, a member that waited
// long for a late one had its probes 50 ms apart when the result it then
// needed was lost, and a few probes and answers lost in a row (20 % loss
// each way) left too few tries before the job's 200 ms: these seeds of 8
// nodes round the ring and of 5 through the switch timed out.
TEST(CollPathsDepth, ABlockGoesSeveralTimesWithinTheTimeout)
{
	mix_seeds(kMix8, false, {67, 435, 508}, 0.2, 200);
	mix_seeds(kMix5, true, {25, 103, 142}, 0.2, 200);
}

// A partial lost among several small collectives in flight goes again as
// soon as its receiver has a later message's partial from the same peer
// (the acknowledgement of that one says an older one is missing, NAK),
// not after the repeat timer: eight broadcasts from node 0, then eight
// allreduces, posted at once on four nodes (depth 8, 20 us each way,
// probe 2 ms), the first partial of message 1 from node 0 to node 1 lost.
// Every result is the reference's, node 0 counts the fast repeat, and all
// eight complete well within one repeat timer.
TEST(CollPathsDepth, ALostPartialGoesAgainWhenALaterOneCame)
{
	for (const CollOp coll : {CollOp::bcast, CollOp::allreduce}) {
		Cluster c({1, 1, 1, 1}, Topology::ring, 6, false);
		c.net.f.delay_ns = 20 * 1000;
		for (auto &nd : c.nodes) {
			nd->params.cfg.coll_depth = 8;
			nd->params.cfg.coll_probe_us = 2000;
		}
		const Endpoint from = c.nodes[0]->host_ep(), to = c.nodes[1]->host_ep();
		bool lost = false;
		c.net.f.drop_if = [&](const Pkt &p) {
			const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
			if (lost || p.bytes[0] != wire::kCollXchg || !(p.src == from) ||
			    !(p.dst == to) || h.mid != 1 || (h.flags & wire::kCethXchgAck))
				return false;
			return lost = true;
		};
		constexpr uint32_t kMsgs = 8;
		constexpr uint64_t count = 16;
		std::vector<std::vector<std::vector<int32_t>>> src(kMsgs), dst(kMsgs);
		std::vector<std::vector<int32_t>> want(kMsgs, std::vector<int32_t>(count, 0));
		for (uint32_t i = 0; i < kMsgs; i++)
			for (uint32_t n = 0; n < 4; n++) {
				src[i].emplace_back(count);
				dst[i].emplace_back(count, -1);
				for (uint64_t e = 0; e < count; e++) {
					src[i][n][e] = int32_t(1000 * i + 100 * n + e);
					if (coll == CollOp::allreduce || n == 0)
						want[i][e] += src[i][n][e];
				}
			}
		const uint64_t start = c.clock;
		for (uint32_t i = 0; i < kMsgs; i++)
			for (uint32_t n = 0; n < 4; n++)
				Cluster::post(*c.nodes[n]->sq, i + 1, count, &src[i][n], &dst[i][n],
					      1, coll, 0);
		ASSERT_TRUE(c.run(kMsgs, 20000 * kMs));
		EXPECT_TRUE(lost);
		EXPECT_LT(c.clock - start, 1000 * 1000u) << "waited for the repeat timer";
		for (uint32_t n = 0; n < 4; n++)
			for (uint32_t i = 0; i < kMsgs; i++) {
				EXPECT_EQ(c.nodes[n]->host->cqes[i].status,
					  uint8_t(WcStatus::success));
				ASSERT_EQ(dst[i][n], want[i])
					<< "node " << n << " message " << i + 1;
			}
		EXPECT_GE(c.nodes[0]->svc->counters().fast_repeats, 1u);
	}
}

// A partial larger than a packet goes in pieces (XCHG's sid), and a
// lost piece is all that goes again: 32 KiB allreduces of 2 and 3 nodes
// (8 pieces a partial; with 3, the extra's partial and its result too),
// the fourth piece of node 0's first partial to node 1 lost once.  The
// result is the reference's, node 0 sends exactly one packet again, the
// acknowledgement named the 7 pieces that came (partial 0's timer sent
// only the missing one), and no other node sent anything again.
TEST(CollPathsExchange, OnlyTheLostPieceOfALargePartialGoesAgain)
{
	for (const size_t nodes : {2, 3}) {
		Cluster c(std::vector<uint16_t>(nodes, 1), Topology::ring, 11 + nodes, false);
		for (auto &nd : c.nodes) {
			nd->qp.attr.path_mtu = 4096;		// pieces of 4 KiB
			nd->params.cfg.coll_xchg_bytes = 32768; // default 16384
		}
		const Endpoint from = c.nodes[0]->host_ep(), to = c.nodes[1]->host_ep();
		bool lost = false;
		c.net.f.drop_if = [&](const Pkt &p) {
			const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
			if (lost || p.bytes[0] != wire::kCollXchg || !(p.src == from) ||
			    !(p.dst == to) || (h.flags & wire::kCethXchgAck) || h.sid != 3)
				return false;
			return lost = true;
		};
		constexpr uint64_t count = 8192; // 32 KiB of int32
		c.post_allreduce(1, count, 5 + nodes);
		ASSERT_TRUE(c.run(1, 5000 * kMs)) << nodes << " nodes";
		expect_results(c, 1);
		EXPECT_TRUE(lost);
		for (size_t n = 0; n < nodes; n++) {
			const CollCounters k = c.nodes[n]->svc->counters();
			EXPECT_EQ(k.failed, 0u);
			EXPECT_EQ(k.retrans_data, n == 0 ? 1u : 0u) << "node " << n;
			EXPECT_EQ(k.tx_result, 0u) << "a result went round the ring";
		}
		// Each partial was 8 packets: node 1 sent its 8 (and, of 3 nodes,
		// the 8 of the result to its extra, node 0).
		EXPECT_EQ(c.nodes[1]->svc->counters().tx_data, nodes == 2 ? 8u : 16u);
	}
}

// Node 0's first XCHG partial to node 1 (its piece sid; any piece if
// sid < 0) lost once, in one blocking allreduce of count int32 (20 us
// each way, probe 2 ms: the repeat timer waits 2.5 ms).  The result is
// the reference's, it completes well within that wait, and node 0 sent
// the lost packet again once, as a fast repeat.
static void expect_fast_repeat(Cluster &c, uint64_t count, uint32_t seed, int sid)
{
	c.net.f.delay_ns = 20 * 1000;
	for (auto &nd : c.nodes)
		nd->params.cfg.coll_probe_us = 2000;
	const Endpoint from = c.nodes[0]->host_ep(), to = c.nodes[1]->host_ep();
	// By value: the cluster outlives this function (its end sends).
	auto lost = std::make_shared<bool>(false);
	c.net.f.drop_if = [lost, from, to, sid](const Pkt &p) {
		const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
		if (*lost || p.bytes[0] != wire::kCollXchg || !(p.src == from) || !(p.dst == to) ||
		    (h.flags & wire::kCethXchgAck) || (sid >= 0 && h.sid != uint32_t(sid)))
			return false;
		return *lost = true;
	};
	const uint64_t start = c.clock;
	c.post_allreduce(1, count, seed);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	expect_results(c, 1);
	EXPECT_TRUE(*lost);
	EXPECT_LT(c.clock - start, 1000 * 1000u) << "waited for the repeat timer";
	const CollCounters k = c.nodes[0]->svc->counters();
	EXPECT_EQ(k.fast_repeats, 1u);
	EXPECT_EQ(k.retrans_data, 1u);
	for (size_t n = 1; n < c.nodes.size(); n++)
		EXPECT_EQ(c.nodes[n]->svc->counters().retrans_data, 0u) << "node " << n;
}

// A lost piece goes again as soon as a later piece of the same partial
// came (its acknowledgement, sent at once, says the piece before it is
// missing: NAK), not after the repeat timer: a 32 KiB allreduce of 4
// nodes (8 pieces a partial), the fourth piece of node 0's first partial
// to node 1 lost once (3.1 ms before this).
TEST(CollPathsExchange, ALostPieceGoesAgainWhenALaterPieceCame)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 23, false);
	for (auto &nd : c.nodes) {
		nd->qp.attr.path_mtu = 4096;		// pieces of 4 KiB
		nd->params.cfg.coll_xchg_bytes = 32768; // default 16384
	}
	expect_fast_repeat(c, 8192, 29, 3);
}

// The two partials of an exchange's phase cross: when one is lost, the
// acknowledgement of the other says that its sender sent its own before
// it (XCHG_SENT), and the node that lacks it NAKs at once, rather than
// wait for the sender's repeat timer: an 8-byte allreduce of 4 nodes,
// node 0's first partial to node 1 lost (2.6 ms before this).
TEST(CollPathsExchange, ALostPartialGoesAgainWhenTheOneItCrossedIsAcknowledged)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 31, false);
	expect_fast_repeat(c, 2, 37, -1);
}

// A piece goes on to the next phase as soon as it is folded, whatever
// else of its partial is missing (cut-through): a 32 KiB allreduce of 4
// nodes, the last piece of node 0's partial to node 1 lost once.  Node 1
// sends the other seven pieces of its next phase (to node 3) before the
// lost piece comes again; stored and forwarded whole, it sent none before.
TEST(CollPathsExchange, APieceGoesOnBeforeItsPartialIsWhole)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 17, false);
	for (auto &nd : c.nodes) {
		nd->qp.attr.path_mtu = 4096;		// pieces of 4 KiB
		nd->params.cfg.coll_xchg_bytes = 32768; // default 16384
	}
	const Endpoint n0 = c.nodes[0]->host_ep(), n1 = c.nodes[1]->host_ep();
	bool lost = false, repeated = false;
	uint32_t ahead = 0; // node 1's phase-2 pieces before the repeat
	c.net.f.drop_if = [&](const Pkt &p) {
		const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
		if (p.bytes[0] != wire::kCollXchg || (h.flags & wire::kCethXchgAck))
			return false;
		if (p.src == n1 && h.phase == 2 && !repeated)
			ahead++;
		if (!(p.src == n0) || !(p.dst == n1) || h.sid != 7)
			return false;
		repeated |= lost;
		return lost ? false : (lost = true);
	};
	c.post_allreduce(1, 8192, 3); // 32 KiB of int32: 8 pieces
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	expect_results(c, 1);
	EXPECT_TRUE(repeated);
	EXPECT_EQ(ahead, 7u) << "node 1 held its next phase for the missing piece";
}

// Not run by default (a search, not a check): run_in_flight over many
// seeds, each path on its own, every seed's failure printed (the seed
// reproduces it).  IBVC_SWEEP_SEEDS (200), IBVC_SWEEP_LOSS (0.1),
// IBVC_SWEEP_NODES (3; from 4 on, the second has two ranks, as the
// shapes above), IBVC_SWEEP_TIMEOUT_MS (the job's, 200), IBVC_SWEEP_PATH (ring, switch or exchange; all three),
// IBVC_SWEEP_FIRST (the first seed, 1: one failure again, alone):
//   IBVC_SWEEP_SEEDS=1000 build/tests/test_coll_paths
//       --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_SeededSweep'
// At 10 % loss each path passed 1,000 seeds of 3 and 4 nodes at depth 1
// and 4.  At 20 % with the job's 200 ms, runs of 3-8 nodes round the
// ring time out in 0-0.1 % (2-6 % before a result lost after the node
// before had ended the message came straight from its finisher, the last
// ACK's probes stopped backing off far, and every backoff stopped at an
// eighth of the timeout, not a quarter); none of 800 of 5 and 8 nodes
// through the switch or by the exchange; with 2 s, none of 1,200 round
// the ring and of 800 through the switch.
TEST(CollPathsDepth, DISABLED_SeededSweep)
{
	auto env = [](const char *k, const char *d) {
		const char *v = getenv(k);
		return std::string(v && *v ? v : d);
	};
	const uint64_t seeds = std::stoull(env("IBVC_SWEEP_SEEDS", "200"));
	const double loss = std::stod(env("IBVC_SWEEP_LOSS", "0.1"));
	const size_t nodes = std::max<size_t>(2, std::stoul(env("IBVC_SWEEP_NODES", "3")));
	const std::string only = env("IBVC_SWEEP_PATH", "");
	const uint32_t timeout_ms = uint32_t(std::stoul(env("IBVC_SWEEP_TIMEOUT_MS", "200")));
	const uint64_t first = std::max<uint64_t>(1, std::stoull(env("IBVC_SWEEP_FIRST", "1")));
	std::vector<uint16_t> shape(nodes, 1);
	if (nodes > 3)
		shape[1] = 2; // as {1, 2, 1, 1} above

	for (const std::string path : {"ring", "switch", "exchange"}) {
		if (!only.empty() && only != path)
			continue;
		for (const uint32_t depth : {1u, 4u})
			for (uint64_t seed = first; seed < first + seeds; seed++) {
				const auto *info =
					::testing::UnitTest::GetInstance()->current_test_info();
				const int before = info->result()->total_part_count();
				run_in_flight(
					shape, depth, seed,
					[&](uint32_t i) {
						return path == "ring" ? ring_mix_coll(i)
								      : CollOp::allreduce;
					},
					[&](uint32_t i) -> uint64_t {
						if (path == "exchange")
							return 1 + (seed * 7 + i * 13) % 9000;
						if (path == "switch")
							return switch_mix_count(seed, i);
						return ring_mix_count(seed, i);
					},
					path == "switch", loss, timeout_ms);
				if (info->result()->total_part_count() != before)
					printf("failed: %s, %zu nodes, depth %u, seed %llu\n",
					       path.c_str(), nodes, depth,
					       static_cast<unsigned long long>(seed));
			}
	}
}

// A collective that reads what one in flight writes waits for it: two
// in-place allreduces of one buffer, posted together, give N * S (the
// second sums the first's result), not S; and one whose destination
// another in flight writes waits too, so the later result is the one
// left.
TEST(CollPathsDepth, DependentCollectivesRunInTurn)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 3, false);
	const uint64_t count = 64;
	std::vector<std::vector<int32_t>> buf(4, std::vector<int32_t>(count));
	std::vector<std::vector<int32_t>> other(4, std::vector<int32_t>(count));
	std::vector<int32_t> sum(count, 0), sum2(count, 0);
	for (uint32_t n = 0; n < 4; n++)
		for (uint64_t e = 0; e < count; e++) {
			buf[n][e] = int32_t(n * 1000 + e);
			other[n][e] = int32_t(7 * n + e);
			sum[e] += buf[n][e];
			sum2[e] += other[n][e];
		}
	for (uint32_t n = 0; n < 4; n++) {
		Node &nd = *c.nodes[n];
		Cluster::post(*nd.sq, 1, count, &buf[n], &buf[n], 1);
		Cluster::post(*nd.sq, 2, count, &buf[n], &buf[n], 1);
	}
	ASSERT_TRUE(c.run(2, 5000 * kMs));
	for (uint32_t n = 0; n < 4; n++)
		for (uint64_t e = 0; e < count; e++)
			ASSERT_EQ(buf[n][e], 4 * sum[e]) << "node " << n << " element " << e;
	// Into one destination: first from buf (now 4 S), then from other.
	std::vector<std::vector<int32_t>> out(4, std::vector<int32_t>(count));
	for (uint32_t n = 0; n < 4; n++) {
		Node &nd = *c.nodes[n];
		Cluster::post(*nd.sq, 3, count, &buf[n], &out[n], 1);
		Cluster::post(*nd.sq, 4, count, &other[n], &out[n], 1);
	}
	ASSERT_TRUE(c.run(4, 5000 * kMs));
	for (uint32_t n = 0; n < 4; n++) {
		EXPECT_EQ(out[n], sum2) << "node " << n;
		EXPECT_EQ(c.nodes[n]->svc->counters().beside, 0u) << "node " << n;
	}
}

// The switch path at 5 % random loss (every packet, both ways): a member
// sends a block's partial again only when it is the one missing (the
// switch's NAK), and asks for a lost result without its payload, so the
// partials sent again stay within twice the partials lost.  (Before
// selective recovery, every member resent every block whose result was
// late: about N times the loss.)
TEST(CollPathsSwitchLoss, RetransmitsOnlyWhatWasLost)
{
	uint64_t resent = 0, lost = 0, asks = 0;
	for (uint64_t seed = 1; seed <= 3; seed++) {
		Cluster c({2, 1, 3, 1}, Topology::sw, seed, true);
		c.net.f.loss = 0.05;
		for (uint32_t mid = 1; mid <= 3; mid++) {
			c.post_allreduce(mid, 20000 + 333 * mid, seed * 10 + mid);
			ASSERT_TRUE(c.run(mid, 20000 * kMs)) << "seed " << seed << " mid " << mid;
			expect_results(c, mid);
			if (::testing::Test::HasFailure())
				return;
		}
		for (size_t n = 0; n < c.nodes.size(); n++) {
			expect_accounted(*c.nodes[n], n);
			resent += c.nodes[n]->svc->counters().retrans_data;
		}
		lost += c.net.partials_lost;
		asks += c.fsw->asks;
		std::cout << "dup partials " << c.fsw->dup_partials << " naks " << c.fsw->naks
			  << "\n";
	}
	EXPECT_GT(lost, 0u);
	EXPECT_GT(asks, 0u) << "no lost result was asked for";
	EXPECT_LE(resent, 2 * lost) << "partials sent again against partials lost";
	std::cout << "partials lost " << lost << ", sent again " << resent << ", asks " << asks
		  << "\n";
}

// A member's first lost result, before any block gave it a round trip
// (each went again, or its result was lost): its probe waited a quarter
// of the retransmission timeout (5 ms of 20).  The first answer to its
// one CONFIG (PENDING, or the grant that completed the job) comes at
// once, as does the switch's NAK to its ASK naming others: either is its
// first sample, as TCP's handshake gives its first, and the probe goes
// at the floor (500 us).  Configured: node 0's first result is lost, and
// the job is done within 3 ms, not 5.  Inline (no CONFIG): node 2 runs
// 6 ms late, nodes 0 and 1 ASK at 5 ms and hear that the switch waits
// for node 2; node 0's result is then lost, and it asks again within
// 2 ms of node 2's partial, not 5 ms after its first ASK.
TEST(CollPathsSwitchLoss, TheFirstAnswerTimesTheFirstProbe)
{
	for (const bool configured : {true, false}) {
		SCOPED_TRACE(configured ? "configured" : "inline");
		bool lost = false;
		Cluster c({1, 1, 1}, Topology::sw, 5, true, 1000, 20000, configured);
		c.net.f.delay_ns = 20 * 1000;
		const Endpoint sw = c.sw_ep, to = c.nodes[0]->host_ep();
		c.net.f.drop_if = [&lost, sw, to](const Pkt &p) {
			const wire::Ceth h = wire::Ceth::load(p.bytes.data() + wire::kBthBytes);
			if (lost || p.bytes[0] != wire::kCollResult || !(p.src == sw) ||
			    !(p.dst == to) || (h.flags & wire::kCethNak))
				return false;
			return lost = true;
		};
		if (!configured)
			c.nodes[2]->stalled_until = c.clock + 6 * kMs;
		const uint64_t t0 = c.clock;
		c.post_allreduce(1, 16, 1);
		ASSERT_TRUE(c.run(1, 1000 * kMs));
		expect_results(c, 1);
		EXPECT_TRUE(lost);
		EXPECT_LT(c.clock - t0, (configured ? 3 : 8) * kMs);
	}
}

// The switch path under a varying delay (5 ms +- 4 ms each way, no loss),
// as on a loaded machine: the delay signal cuts the windows below one
// block, but a member never waits for its pacing with nothing in flight
// (the result it waits for clocks it, as it clocks the others), so the
// members stay in step and the message goes at a block per round trip at
// least.  It used to crawl: a paced member held up every block, the
// others' round trips took in that wait and cut them too, and each block
// was ASKed as soon as it went (its probe overdue after the pause), so no
// round trip was ever sampled again and the windows never grew: a block
// every 8 round trips, ASKs and NAKs running (the rxe.vm coll_switch
// timeout).
TEST(CollPathsSwitchLoss, JitterDoesNotStallTheWindow)
{
	const uint32_t blocks = 300; // 256-byte blocks of int32
	for (uint64_t seed : {1, 41}) {
		// The timeout floor at its default (IBV_COLL_EMU_COLL_RTO_US).
		Cluster c({2, 1, 1}, Topology::sw, seed, true, 5000, 20000);
		c.net.f.delay_ns = 5 * kMs;
		c.net.f.jitter_ns = 4 * kMs;
		const uint64_t start = c.clock;
		c.post_allreduce(1, 64 * blocks, seed);
		ASSERT_TRUE(c.run(1, 60000 * kMs)) << "seed " << seed;
		expect_results(c, 1);
		const double secs = double(c.clock - start) / 1e9;
		std::cout << "seed " << seed << ": " << blocks << " blocks in " << secs
			  << " s of fake time, asks " << c.fsw->asks << "\n";
		// Round trips of 2 to 18 ms (10 on average): a block per round
		// trip takes about 3.3 s; the crawl took 15 to 23.
		EXPECT_LT(secs, 5.0) << "seed " << seed;
		// A member probes (ASKs, no payload) a block whose result is
		// later than its round trip and four times its variation allow,
		// the oldest first, whatever else completes: here the slowest
		// member's partial, up to 9 ms late, makes some of them.  The
		// crawl asked two to four times per block.
		EXPECT_LT(c.fsw->asks, blocks) << "seed " << seed;
		for (size_t n = 0; n < c.nodes.size(); n++) {
			expect_accounted(*c.nodes[n], n);
			EXPECT_EQ(c.nodes[n]->svc->counters().failed, 0u);
		}
	}
}

// AUTO with a switch that never answers: the message changes strategy and
// runs round the ring, its completion saying so.
TEST(CollPathsFallback, SilentSwitchFallsBackToTheRing)
{
	Cluster c({1, 2, 1}, Topology::autosel, 11, false);
	c.net.f.loss = 0.03;
	c.net.f.reorder = true;
	for (uint32_t mid = 1; mid <= 2; mid++) {
		c.post_allreduce(mid, 777, mid);
		ASSERT_TRUE(c.run(mid, 5000 * kMs));
		expect_results(c, mid);
		for (auto &nd : c.nodes) {
			const Cqe &q = nd->host->cqes.back();
			EXPECT_TRUE(q.coll_flags & kRanRing);
			EXPECT_TRUE(q.coll_flags & kRanFallback);
			EXPECT_FALSE(q.coll_flags & kRanSwitch);
		}
	}
	for (size_t n = 0; n < c.nodes.size(); n++) {
		EXPECT_EQ(c.nodes[n]->svc->counters().fallbacks, 2u);
		expect_accounted(*c.nodes[n], n);
	}
}

// A switch that answers: the same job through it (no fallback).
TEST(CollPathsFallback, AnsweringSwitchIsUsed)
{
	Cluster c({1, 2, 1}, Topology::autosel, 12, true);
	c.post_allreduce(1, 777, 1);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	expect_results(c, 1);
	EXPECT_GT(c.fsw->folded, 0u);
	for (auto &nd : c.nodes) {
		const Cqe &q = nd->host->cqes.back();
		EXPECT_TRUE(q.coll_flags & kRanSwitch);
		EXPECT_FALSE(q.coll_flags & kRanFallback);
	}
}

// A member that dies: the others fail the collective with an error
// completion (timeout, or a member's abort), move their QPs to error, and
// flush what is queued behind it; none hangs.
TEST(CollPathsDeadPeer, OthersFailWithAnErrorCompletion)
{
	// The ring, the switch path, and a small message's exchange.
	for (const uint64_t first : {9000, 10})
		for (Topology t : {Topology::ring, Topology::sw}) {
			Cluster c({1, 1, 2, 1}, t, 21, t != Topology::ring);
			c.net.f.dead = {c.nodes[2]->host_ep()};
			c.post_allreduce(1, first, 5);
			c.post_allreduce(2, 10, 6); // queued behind: flushed
			ASSERT_TRUE(c.run(2, 2000 * kMs)) << int(t);
			bool timeout = false;
			for (size_t n = 0; n < c.nodes.size(); n++) {
				if (n == 2)
					continue;
				Node &nd = *c.nodes[n];
				ASSERT_EQ(nd.host->cqes.size(), 2u);
				const Cqe &a = nd.host->cqes[0], &b = nd.host->cqes[1];
				EXPECT_NE(a.status, uint8_t(WcStatus::success));
				EXPECT_TRUE(a.coll_status == uint8_t(CollStatus::timeout) ||
					    a.coll_status == uint8_t(CollStatus::remote_abort))
					<< int(a.coll_status);
				timeout |= a.coll_status == uint8_t(CollStatus::timeout);
				EXPECT_EQ(b.status, uint8_t(WcStatus::wr_flush_err));
				EXPECT_EQ(nd.qp.state, QpState::err);
			}
			EXPECT_TRUE(timeout); // someone noticed by itself
		}
}

// Packets for no QP, with a wrong key, or from a stranger are counted and
// never change the result.
TEST(CollPathsForged, CountedAndHarmless)
{
	// Messages larger than the exchange's: round the ring.
	Cluster c({1, 1, 1}, Topology::ring, 31, false);
	c.post_allreduce(1, 9000, 3);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	// Replay node 0's DATA packets with one thing wrong each.
	c.post_allreduce(2, 9000, 4);
	for (auto &nd : c.nodes)
		nd->svc->progress(nd->qp, c.clock);
	std::vector<Pkt> flight = c.net.take();
	uint64_t forged = 0;
	for (const Pkt &p : flight) {
		if (p.bytes[0] != wire::kCollData)
			continue;
		Pkt bad_key = p, no_qp = p, stranger = p, bad_hop = p;
		bad_key.bytes[wire::kBthBytes + 40] ^= 1;
		no_qp.bytes[7] ^= 0x40; // BTH dest QP
		stranger.src.ip = node_ip(50);
		bad_hop.bytes[wire::kBthBytes + 54] = 1; // CETH seq 256: not the phase's hop
		for (Pkt *q : {&bad_key, &no_qp, &stranger, &bad_hop})
			c.net.queue.push_back(*q);
		forged++;
	}
	for (Pkt &p : flight)
		c.net.queue.push_back(std::move(p));
	ASSERT_GT(forged, 0u);
	ASSERT_TRUE(c.run(2, 5000 * kMs));
	expect_results(c, 2);
	uint64_t key = 0, noqp = 0, node = 0, malformed = 0;
	for (auto &nd : c.nodes) {
		key += nd->svc->counters().bad_key;
		node += nd->svc->counters().bad_node;
		malformed += nd->svc->counters().malformed;
		noqp += nd->host->no_qp;
	}
	EXPECT_EQ(key, forged);
	EXPECT_EQ(noqp, forged);
	EXPECT_EQ(node, forged);
	EXPECT_EQ(malformed, forged);
	for (size_t n = 0; n < c.nodes.size(); n++)
		expect_accounted(*c.nodes[n], n);
}

// Ring packets of a message this node runs through the switch (a member
// that runs it round the ring: never, outside AUTO, unless forged) are
// counted and dropped; they once went into the switch path's message as
// if it ran round the ring.  Node 0's ring DATA of a 9000-element
// allreduce, replayed into the same job (same key, members, QPs) running
// the same message through a switch: every result still the sum.
TEST(CollPathsForged, RingPacketsOfASwitchMessageAreDropped)
{
	Cluster ring({1, 1, 1}, Topology::ring, 33, false);
	ring.post_allreduce(1, 9000, 5);
	for (auto &nd : ring.nodes)
		nd->svc->progress(nd->qp, ring.clock);
	std::vector<Pkt> replay;
	for (const Pkt &p : ring.net.take())
		if (p.bytes[0] == wire::kCollData)
			replay.push_back(p);
	ASSERT_FALSE(replay.empty());
	Cluster c({1, 1, 1}, Topology::sw, 33, true);
	c.post_allreduce(1, 9000, 5);
	for (auto &nd : c.nodes)
		nd->svc->progress(nd->qp, c.clock);
	for (const Pkt &p : replay)
		c.net.queue.push_back(p);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	expect_results(c, 1);
	uint64_t dropped = 0;
	for (auto &nd : c.nodes) {
		EXPECT_EQ(nd->svc->counters().tx_result, 0u);
		dropped += nd->svc->counters().malformed;
	}
	EXPECT_EQ(dropped, replay.size());
}

// A CNP from a member before any flow between members ran (a job on the
// switch path, or before its first message) only counts, and one from a
// stranger does not.  It once reached the counters of a congestion window
// not yet set up (a null pointer; found by fuzz_nic_rx).
TEST(CollPathsForged, ACnpBeforeAnyFlowOnlyCounts)
{
	for (Topology t : {Topology::ring, Topology::sw}) {
		Cluster c({1, 1, 1}, t, 41, t != Topology::ring);
		for (size_t n = 0; n < c.nodes.size(); n++) {
			Node &nd = *c.nodes[n];
			const Endpoint peer = c.nodes[(n + 1) % c.nodes.size()]->host_ep();
			EXPECT_TRUE(nd.svc->on_cnp(nd.qp, peer, c.clock));
			EXPECT_FALSE(
				nd.svc->on_cnp(nd.qp, Endpoint{node_ip(50), kPort, 0}, c.clock));
			EXPECT_EQ(nd.host->cc.cnp_rcvd, 1u);
			EXPECT_EQ(nd.host->cc.cnp_cuts, 0u);
		}
		c.post_allreduce(1, 500, 5);
		ASSERT_TRUE(c.run(1, 5000 * kMs));
		expect_results(c, 1);
	}
}

// Loss that costs what it should (loss recovery): at 5 % loss on every packet,
// both ways, a 1 MiB allreduce of 4 nodes takes at most 1.6 times its
// loss-free time, round the ring and through the switch, in the fake
// network's time (links of 400 Mbit/s, 20 us each way, the switch's link
// N times as fast, as on the shaped namespace fabric).  A lost block is
// found by the gaps it leaves and by tail-loss probes, not by its timeout,
// and a block waiting for its repeat holds up the others only once the
// Seg units run out.  (Before: the switch path took 14 times as long,
// most of it in a window stalled behind each lost block.)
TEST(CollPathsLoss, CostsAFractionOfTheLossFreeTime)
{
	for (Topology t : {Topology::ring, Topology::sw}) {
		double ms[2];
		for (int lossy = 0; lossy < 2; lossy++) {
			Cluster c({1, 1, 1, 1}, t, 5, t != Topology::ring, 5000, 20000, false, -1,
				  1024);
			c.net.f.delay_ns = 20000;
			c.net.f.rate_bps = 400000000;
			c.net.f.rate_of[c.sw_ep.ip.b[15]] = 4 * c.net.f.rate_bps;
			c.net.f.loss = lossy ? 0.05 : 0;
			const uint64_t start = c.clock;
			c.post_allreduce(1, 64 * 4096, 9);
			ASSERT_TRUE(c.run(1, 60000 * kMs));
			expect_results(c, 1);
			ms[lossy] = double(c.clock - start) / 1e6;
			uint64_t again = 0;
			for (auto &nd : c.nodes)
				again += nd->svc->counters().retrans_data +
					 nd->svc->counters().retrans_result;
			std::cout << (t == Topology::ring ? "ring" : "switch") << " loss "
				  << (lossy ? 5 : 0) << " %: " << ms[lossy]
				  << " ms of fake time, dropped " << c.net.dropped
				  << ", sent again " << again << "\n";
		}
		EXPECT_LE(ms[1], 1.6 * ms[0]) << (t == Topology::ring ? "ring" : "switch");
	}
}

// Regression: AUTO's members must run a message the same way.  A member that
// hears no switch (both ways cut) fell back to the ring alone after
// IBV_COLL_EMU_SW_CONFIG_MS, while the others, answered "wait" (PENDING),
// waited for the switch: every member failed, at its own timeout.  It now
// tells them; they have sent nothing to the switch and follow it round
// the ring, and the job's messages complete everywhere, flagged FALLBACK
// alike.  With its notices lost, its ring DATA tells them the same.
TEST(CollPathsFallback, MemberThatHearsNoSwitchTakesTheOthersToTheRing)
{
	for (bool notices : {true, false}) {
		SCOPED_TRACE(notices ? "with its notices" : "notices lost");
		Cluster c({1, 2, 1}, Topology::autosel, 13, true, 200, 2000, true);
		const Endpoint x = c.nodes[2]->host_ep();
		c.net.f.cut = {{x, c.sw_ep}, {c.sw_ep, x}};
		if (!notices)
			c.net.f.drop_member_kind = wire::kCollConfigAck;
		for (uint32_t mid = 1; mid <= 2; mid++) {
			c.post_allreduce(mid, 777, mid);
			ASSERT_TRUE(c.run(mid, 5000 * kMs));
			expect_results(c, mid);
			for (auto &nd : c.nodes) {
				const Cqe &q = nd->host->cqes.back();
				EXPECT_EQ(q.coll_flags, c.nodes[0]->host->cqes.back().coll_flags);
				EXPECT_TRUE(q.coll_flags & kRanRing);
				EXPECT_TRUE(q.coll_flags & kRanFallback);
				EXPECT_FALSE(q.coll_flags & kRanSwitch);
			}
		}
		EXPECT_EQ(c.fsw->folded, 0u);
		for (size_t n = 0; n < c.nodes.size(); n++) {
			EXPECT_EQ(c.nodes[n]->svc->counters().fallbacks, 2u);
			expect_accounted(*c.nodes[n], n);
		}
	}
}

// AUTO with a switch sharing its pool by time: one member's grant is lost,
// the others are granted, and the switch refuses their first message,
// which they run round the ring.  Its ring packets reach the member still
// waiting for its grant, which took them for a member that gave up on the
// switch and ran the whole job round the ring: the next message, which
// the switch admitted, ran through the switch at the others and round the
// ring at it, and every member failed it with REMOTE_ABORT
// (tools.switch_tenants, tdm, under load).  Now the member asks the
// switch again, is granted, and takes the switch's decision on each
// message as the others do.
TEST(CollPathsFallback, ALostGrantUnderTimeDivisionIsNoFallback)
{
	Cluster c({1, 2, 1}, Topology::autosel, 31, true, 1000, 2000, true);
	c.fsw->tdm_refuse_mid = 1;
	c.fsw->lose_grants_to = 1;
	c.fsw->lose_grants = 1;
	for (uint32_t mid = 1; mid <= 2; mid++) {
		c.post_allreduce(mid, 3000, mid);
		ASSERT_TRUE(c.run(mid, 5000 * kMs)) << "mid " << mid;
		for (size_t n = 0; n < c.nodes.size(); n++) {
			const Cqe &q = c.nodes[n]->host->cqes.back();
			ASSERT_EQ(q.coll_status, uint8_t(CollStatus::success))
				<< "node " << n << " mid " << mid;
			if (mid == 1) {
				EXPECT_TRUE(q.coll_flags & kRanRing) << "node " << n;
				EXPECT_TRUE(q.coll_flags & kRanBusy) << "node " << n;
			} else {
				EXPECT_TRUE(q.coll_flags & kRanSwitch) << "node " << n;
			}
		}
		expect_results(c, mid);
	}
	EXPECT_EQ(c.fsw->lose_grants, 0u);
}

// Regression: a member whose CONFIGs reach the switch but never its answers:
// the others were granted and ran the message through the switch, which
// waited for this member's partial, while it ran the ring: every member
// failed at its timeout (1 s here).  Now every member fails the message at
// once, with REMOTE_ABORT, soon after the deaf member gives up on the
// switch (IBV_COLL_EMU_SW_CONFIG_MS, 50 ms here): its notice (or, lost,
// its ring DATA) meets members that cannot undo what they sent.
TEST(CollPathsFallback, MemberDeafToTheGrantFailsEveryMemberAtOnce)
{
	for (bool notices : {true, false}) {
		SCOPED_TRACE(notices ? "with its notices" : "notices lost");
		Cluster c({1, 2, 1}, Topology::autosel, 14, true, 1000, 2000, true);
		const Endpoint x = c.nodes[2]->host_ep();
		c.net.f.cut = {{c.sw_ep, x}};
		if (!notices)
			c.net.f.drop_member_kind = wire::kCollConfigAck;
		const uint64_t t0 = c.clock;
		c.post_allreduce(1, 777, 1);
		ASSERT_TRUE(c.run(1, 5000 * kMs));
		EXPECT_GT(c.fsw->folded, 0u) << "the others did not run the switch";
		for (size_t n = 0; n < c.nodes.size(); n++) {
			Node &nd = *c.nodes[n];
			ASSERT_EQ(nd.host->cqes.size(), 1u) << "node " << n;
			const Cqe &q = nd.host->cqes[0];
			EXPECT_EQ(q.coll_status, uint8_t(CollStatus::remote_abort)) << "node " << n;
			EXPECT_EQ(q.status, uint8_t(WcStatus::rem_abort_err)) << "node " << n;
			// SW_CONFIG_MS, then a round trip or so: not the timeout.
			EXPECT_LT(nd.host->cqe_at[0] - t0, 60 * kMs) << "node " << n;
			EXPECT_EQ(nd.qp.state, QpState::err) << "node " << n;
		}
	}
}

namespace {

// A child that waits to be killed: a copy of this process's memory, so
// the buffers posted before it came are at the same addresses there, as a
// client's are for the shared device.
pid_t paused_child()
{
	pid_t pid = fork();
	if (pid == 0) {
		pause();
		_exit(0);
	}
	return pid;
}

void kill_child(pid_t pid)
{
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
}

// Node n's completions on QP qpn.
std::vector<Cqe> cqes_of(const Node &nd, uint32_t qpn)
{
	std::vector<Cqe> v;
	for (const Cqe &c : nd.host->cqes)
		if (c.qpn == qpn)
			v.push_back(c);
	return v;
}

} // namespace

// A node whose last rank is served by a QP of another process (its memory
// reached by process_vm_readv/writev, as the shared device reaches a
// client's): every rank's result is the reference, and both QPs complete.
TEST(CollPathsJoin, SplitNodeMatchesTheReference)
{
	Cluster c({1, 3, 2}, Topology::ring, 41, false, 200, 2000, false, 1);
	c.nodes[1]->host->spaces[2] = getpid();
	c.post_allreduce(1, 777, 1);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	for (size_t n = 0; n < c.nodes.size(); n++) {
		const Node &nd = *c.nodes[n];
		for (uint16_t r = 0; r < nd.ranks; r++)
			EXPECT_EQ(nd.dst[r], c.want) << "node " << n << " rank " << r;
		for (const Cqe &q : nd.host->cqes)
			EXPECT_EQ(q.status, uint8_t(WcStatus::success)) << "node " << n;
	}
	EXPECT_EQ(cqes_of(*c.nodes[1], kPartQpn).size(), 1u);
}

// Regression: the process of a joined QP dies mid-collective; its memory is
// gone before the shared device notices and destroys its QP.  The lead's
// next access to that rank failed, and the node's surviving QP got
// LOCAL_ERR ("a local buffer is not accessible"), where
// ibv_modify_coll_qp(3) says a QP whose process died fails the collective
// with REMOTE_ABORT on every member.  Now every QP of every node does.
TEST(CollPathsJoin, AJoinedProcessDyingMidCollectiveIsARemoteAbort)
{
	Cluster c({1, 3, 2}, Topology::ring, 42, false, 2000, 2000, false, 1);
	Node &split = *c.nodes[1];
	c.post_allreduce(1, 20000, 2);
	// The joined QP's ranks live in a child process; some blocks go round,
	// then it is killed.
	const pid_t child = paused_child();
	ASSERT_GT(child, 0);
	split.host->spaces[2] = child;
	const bool done = c.run(1, 5000 * kMs, 4);
	kill_child(child);
	ASSERT_FALSE(done) << "the collective ended before the process died";
	EXPECT_GT(split.host->tx, 0u);
	ASSERT_TRUE(c.run(1, 5000 * kMs));
	const std::vector<Cqe> lead = cqes_of(split, kQpn);
	ASSERT_EQ(lead.size(), 1u);
	EXPECT_EQ(lead[0].coll_status, uint8_t(CollStatus::remote_abort))
		<< "the surviving QP of the node: " << int(lead[0].coll_status);
	EXPECT_EQ(lead[0].status, uint8_t(WcStatus::rem_abort_err));
	for (size_t n : {size_t(0), size_t(2)}) {
		ASSERT_EQ(c.nodes[n]->host->cqes.size(), 1u) << "node " << n;
		EXPECT_EQ(c.nodes[n]->host->cqes[0].coll_status, uint8_t(CollStatus::remote_abort))
			<< "node " << n;
	}
}

// Regression: a QP that posts another collective than the rest of its node
// (here another count) got FLUSHED, where ibv_modify_coll_qp(3) says the
// node's QPs fail it with LOCAL_ERR: now it does, as does its lead; the
// other nodes are told (REMOTE_ABORT), and what is queued behind is
// flushed.
TEST(CollPathsJoin, AJoinedQpPostingAnotherCollectiveGetsLocalErr)
{
	Cluster c({1, 3, 2}, Topology::ring, 43, false, 2000, 2000, false, 1);
	c.post_allreduce(1, 777, 3, 778);
	c.post_allreduce(2, 777, 4); // queued behind: flushed
	ASSERT_TRUE(c.run(2, 5000 * kMs));
	Node &split = *c.nodes[1];
	for (uint32_t qpn : {kQpn, kPartQpn}) {
		const std::vector<Cqe> v = cqes_of(split, qpn);
		ASSERT_EQ(v.size(), 2u) << "qpn " << qpn;
		EXPECT_EQ(v[0].mid, 1u) << "qpn " << qpn;
		EXPECT_EQ(v[0].coll_status, uint8_t(CollStatus::local_err))
			<< "qpn " << qpn << ": " << int(v[0].coll_status);
		EXPECT_EQ(v[0].status, uint8_t(WcStatus::loc_prot_err)) << "qpn " << qpn;
		EXPECT_EQ(v[1].mid, 2u) << "qpn " << qpn;
		EXPECT_EQ(v[1].coll_status, uint8_t(CollStatus::flushed)) << "qpn " << qpn;
	}
	EXPECT_EQ(cqes_of(split, kPartQpn)[0].opcode, uint8_t(CollOp::allreduce));
	for (size_t n : {size_t(0), size_t(2)}) {
		ASSERT_GE(c.nodes[n]->host->cqes.size(), 1u) << "node " << n;
		EXPECT_EQ(c.nodes[n]->host->cqes[0].coll_status, uint8_t(CollStatus::remote_abort))
			<< "node " << n;
	}
}

// A host descheduled at random (liveness: more busy processes than
// processors): every 40 ms of fake time on average a node does not run for
// 50 ms, its packets waiting in its socket.  Round the ring and through
// the switch, every allreduce completes with the reference's result, the
// stalls cut the windows no more often than the network alone does (the
// hosts' delay is measured apart: the socket's receive timestamp, the
// CETH's hold), and the whole takes at most the stalls' time on top of
// what it takes without them.  Before: the stalls read as a queue, the
// windows were cut to an eighth of a block, and a paced node waited eight
// round trips a block.
TEST(CollPathsLiveness, DescheduledHostsStallNothing)
{
	for (Topology t : {Topology::ring, Topology::sw}) {
		const char *name = t == Topology::ring ? "ring" : "switch";
		double ms[2];
		uint64_t stalls[2] = {}, cuts[2] = {};
		for (int run = 0; run < 2; run++) {
			Cluster c({2, 1, 3, 1}, t, 17, t != Topology::ring, 2000, 20000, false, -1,
				  256);
			c.net.f.delay_ns = 20000;
			c.net.f.rate_bps = 200000000;
			c.net.f.rate_of[c.sw_ep.ip.b[15]] = 4 * c.net.f.rate_bps;
			if (run) {
				c.stall_every_ns = 40 * kMs;
				c.stall_ns = 50 * kMs;
			}
			const uint64_t start = c.clock;
			for (uint32_t mid = 1; mid <= 3; mid++) {
				c.post_allreduce(mid, 64 * 4096, 40 + mid);
				ASSERT_TRUE(c.run(mid, 60000 * kMs)) << name << " mid " << mid;
				expect_results(c, mid);
			}
			ms[run] = double(c.clock - start) / 1e6;
			stalls[run] = c.stalls;
			for (auto &nd : c.nodes)
				cuts[run] += nd->host->cc.delay_cuts + nd->host->cc.loss_cuts;
			std::cout << name << (run ? ", stalls: " : ", no stalls: ") << ms[run]
				  << " ms, " << stalls[run] << " stalls of 50 ms, " << cuts[run]
				  << " network delay and loss cuts\n";
		}
		EXPECT_GE(stalls[1], 4u) << name;
		// A stall may hold the whole job (every block crosses every
		// node): at worst their time added, not multiplied.
		EXPECT_LE(ms[1], ms[0] + 50.0 * double(stalls[1])) << name;
		EXPECT_LE(double(cuts[1]) / ms[1], double(cuts[0]) / ms[0] + 0.01)
			<< name << ": the stalls read as a queue";
	}
}

// A node that starts a message late keeps the blocks that came before it
// (early) and takes them in when it starts; the next live block of their
// chunk must not read them as a gap.  It did: adopted blocks did not move
// the chunk's gap mark, so the next block NAKed every block taken in, and
// each went round again (4 nodes x 2 ranks on loopback: 1 MiB allreduces
// put 2-8 % more on the wire in one run of three; tools.perf_wire_ring
// failed its bound).  Without loss nothing goes twice.
TEST(CollPathsLoss, BlocksKeptEarlyAreNoGap)
{
	for (uint32_t late : {1u, 2u, 3u}) {
		SCOPED_TRACE("late node " + std::to_string(late));
		Cluster c({2, 2, 2, 2}, Topology::ring, 23, false, 2000, 20000, false, -1, 256);
		c.net.f.delay_ns = 20000;
		c.net.f.rate_bps = 400000000;
		c.nodes[late]->stalled_until = c.clock + 5 * kMs;
		c.post_allreduce(1, 16 * 4096, 23);
		ASSERT_TRUE(c.run(1, 5000 * kMs));
		expect_results(c, 1);
		uint64_t early = 0;
		for (size_t n = 0; n < c.nodes.size(); n++) {
			const CollCounters &k = c.nodes[n]->svc->counters();
			early += k.early_stored;
			EXPECT_EQ(k.naks_sent, 0u) << "node " << n;
			EXPECT_EQ(k.retrans_data + k.retrans_result, 0u) << "node " << n;
			EXPECT_EQ(k.dup_dropped, 0u) << "node " << n;
		}
		EXPECT_GT(early, 0u) << "no block came early: the test tests nothing";
	}
}

// A member that keeps asking (ring: its predecessor's packets never reach
// it, so it NAKs and probes; switch: the switch answers every partial and
// ASK with a NAK, never a result) gets no progress from it: every member
// fails the collective with TIMEOUT or REMOTE_ABORT within the job's
// timeout and a tenth, and none hangs.  Repeats, NAKs and probes are not
// progress (ibv_coll(7), LIVENESS).
TEST(CollPathsLiveness, TalkWithoutProgressFailsWithinTheTimeout)
{
	constexpr uint32_t kTimeoutMs = 300;
	for (Topology t : {Topology::ring, Topology::sw}) {
		const char *name = t == Topology::ring ? "ring" : "switch";
		Cluster c({1, 2, 1, 1}, t, 23, t != Topology::ring, kTimeoutMs, 2000);
		c.net.f.delay_ns = 50000;
		if (t == Topology::ring)
			c.net.f.cut = {{c.nodes[1]->host_ep(), c.nodes[2]->host_ep()}};
		else
			c.fsw->nak_only = true;
		const uint64_t start = c.clock;
		c.post_allreduce(1, 64 * 200, 5);
		ASSERT_TRUE(c.run(1, 10 * kTimeoutMs * kMs)) << name << ": a member hangs";
		for (size_t n = 0; n < c.nodes.size(); n++) {
			const Cqe &q = c.nodes[n]->host->cqes[0];
			EXPECT_NE(q.status, uint8_t(WcStatus::success)) << name << " node " << n;
			EXPECT_TRUE(q.coll_status == uint8_t(CollStatus::timeout) ||
				    q.coll_status == uint8_t(CollStatus::remote_abort))
				<< name << " node " << n << ": " << int(q.coll_status);
		}
		const double ms = double(c.clock - start) / 1e6;
		std::cout << name << ": every member failed after " << ms << " ms of fake time\n";
		EXPECT_LE(ms, 1.1 * kTimeoutMs) << name;
		uint64_t talk = 0;
		for (auto &nd : c.nodes)
			talk += nd->svc->counters().naks_sent + nd->svc->counters().probes +
				nd->svc->counters().retrans_data;
		EXPECT_GT(talk + (c.fsw ? c.fsw->naks : 0), 10u) << name << ": nobody talked";
	}
}

// A node whose own blocks are all out is not in a silence while the other
// chunks' partials still pass through it (the ring is moving, only not yet
// to its answers), nor before its answers could have come through the
// queue the message built on the ring's links.  The tail-loss probe fired
// there and sent blocks still on their way again: on the shaped namespace
// fabric (4 nodes, 400 Mbit/s, 256 KB queues), loss-free, wire/S round the
// ring was 1.70-1.91 at 1.6 MiB against 1.54 before the probes existed,
// nearly all of it probes.  Here (4 KiB blocks, 800 KiB per rank) each
// node probed twice and sent 4 blocks again.  With no loss nothing goes
// again.
TEST(CollPathsLoss, PartialsPassingThroughAreNoSilence)
{
	Cluster c({1, 1, 1, 1}, Topology::ring, 31, false, 5000, 20000, false, -1, 1024);
	c.net.f.delay_ns = 20000;
	c.net.f.rate_bps = 400000000;
	for (auto &nd : c.nodes)
		nd->qp.attr.path_mtu = 4096;
	for (uint32_t mid = 1; mid <= 3; mid++) {
		c.post_allreduce(mid, 200 * 1024, 31 + mid);
		ASSERT_TRUE(c.run(mid, 60000 * kMs));
		expect_results(c, mid);
	}
	for (size_t n = 0; n < c.nodes.size(); n++) {
		const CollCounters &k = c.nodes[n]->svc->counters();
		EXPECT_EQ(k.probes, 0u) << "node " << n;
		EXPECT_EQ(k.retrans_data + k.retrans_result, 0u) << "node " << n;
		EXPECT_EQ(k.naks_sent, 0u) << "node " << n;
	}
}
