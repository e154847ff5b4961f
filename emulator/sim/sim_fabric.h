// ibv_coll_sim's insides (sim/sim.h): the fabric's links and events, a
// host's NIC and a switch's port as the engine and the switch see them,
// and the jobs.  sim.cc runs the events, sim_jobs.cc the jobs.
#pragma once

#include "sim/sim.h"
#include "sim/sim_pcap.h"
#include "sim/sim_pkt.h"

#include "coll/coll_job.h"
#include "net/transport.h"
#include "nic/cc.h"
#include "nic/coll_iface.h"
#include "nic/nic.h"
#include "nic/qp.h"
#include "switch/switch.h"
#include "util/clock.h"
#include "wire/coll_codec.h"
#include "wire/icrc.h"
#include "wire/roce.h"
#include "wire/swproto.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <queue>
#include <random>

namespace ibv_coll::sim {

using emu::Endpoint;
using emu::IpAddr;
namespace wire = emu::wire;


constexpr uint16_t kPort = 4791;
constexpr uint64_t kStart = 1000000000ull; // the virtual clock starts at 1 s

inline IpAddr host_ip(uint32_t i)
{
	return IpAddr::from_v4(htonl(0x0a000000u + i + 1)); // 10.0.0.1 ...
}
inline IpAddr switch_ip(uint32_t i)
{
	return IpAddr::from_v4(htonl(0x0b000000u + i + 1)); // 11.0.0.1 ...
}
inline uint32_t v4(const IpAddr &a)
{
	uint32_t x;
	memcpy(&x, a.b + 12, 4);
	return ntohl(x);
}

PktPtr new_pkt(Fabric &f);
// A packet of headers, payload and trailer (pad and ICRC); the payload
// shared with the packets in flight that carry the same (phantom jobs).
PktPtr split_pkt(Fabric &f, const uint8_t *hdr, size_t hdr_len, const uint8_t *payload,
		 size_t paylen, size_t trailer);

struct Link {
	LinkSpec spec;
	uint32_t to = 0; // the device at its far end
	std::deque<PktPtr> q;
	uint64_t qbytes = 0;
	bool busy = false;
	bool waits = false; // a NIC's own queue: never drops (FabricSpec::port_wait)
	uint64_t tx_bytes = 0, tx_packets = 0, drops = 0, marks = 0;
};

enum class Ev : uint8_t { link_done, arrive, held, pass, job, late, trace };

struct Event {
	uint64_t t, seq;
	Ev kind;
	uint32_t id;
	bool operator>(const Event &o) const { return t != o.t ? t > o.t : seq > o.seq; }
};


// A host's NIC as its collective unit sees it: packets go onto the host's
// link, completions to the job that posted.
class SimHost final : public emu::CollHost {
public:
	SimHost(const emu::NicParams &p, Fabric &f, uint32_t dev) : CollHost(p), f_(f), dev_(dev) {}
	std::map<uint32_t, emu::Qp *> qps;
	emu::CcCounters cc;

	uint64_t now() const override { return params.clock->now(); }
	emu::Qp *find_qp(uint32_t qpn) override
	{
		auto it = qps.find(qpn);
		return it == qps.end() ? nullptr : it->second;
	}
	bool push_cqe(emu::Cq *cq, const emu::Cqe &c) override;
	void qp_to_error(emu::Qp &qp, const char *) override { qp.state = emu::QpState::err; }
	bool dma_ok(uint32_t, uint32_t, uint64_t addr, uint64_t, uint32_t) override
	{
		return addr != 0;
	}
	uint16_t udp_port() const override { return kPort; }
	bool ipv6() const override { return false; }
	uint8_t *tx_buf() override { return buf_; }
	void tx_to(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		   uint32_t paylen) override
	{
		const size_t n = wire::roce_seal(udp_endpoints(src, kPort, dst), pkt, hdr_len,
						 paylen);
		send(dst, src, pkt, n);
	}
	void tx_split(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		      const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc) override
	{
		const uint32_t trailer = wire::roce_seal_split(udp_endpoints(src, kPort, dst), pkt,
							       hdr_len, payload, paylen, tail_crc);
		out(split_pkt(f_, pkt, hdr_len, payload, paylen, trailer), dst, src);
	}
	uint64_t tx_lend_mark() const override { return 0; }
	void tx_reclaim(uint64_t) override {}
	void tx_flush() override {}
	uint64_t tx_packets() const override { return tx_; }
	void count_no_qp() override { no_qp++; }
	void count_bad_state() override { bad_state++; }
	void send_cnp(const Endpoint &dst, const IpAddr &src, uint32_t dqpn, uint64_t *last,
		      uint64_t now) override
	{
		const uint64_t gap = uint64_t(params.cfg.cnp_interval_us) * util::kNsPerUs;
		if (*last && now - *last < gap)
			return;
		*last = now;
		wire::Bth bth;
		bth.opcode = emu::kOpCnp;
		bth.mig = false;
		bth.dqpn = dqpn;
		bth.store(buf_);
		buf_[4] = emu::kBthBecn;
		memset(buf_ + wire::kBthBytes, 0, emu::kCnpRsvdBytes);
		tx_to(dst, src, buf_, wire::kBthBytes + emu::kCnpRsvdBytes, 0);
		cc.cnp_sent++;
	}
	emu::CcCounters &cc_counters() override { return cc; }
	uint64_t no_qp = 0, bad_state = 0;

private:
	void send(const Endpoint &dst, const IpAddr &src, const uint8_t *pkt, size_t n)
	{
		PktPtr p = new_pkt(f_);
		p->bytes.assign(pkt, pkt + n);
		out(std::move(p), dst, src);
	}
	void out(PktPtr p, const Endpoint &dst, const IpAddr &src);
	Fabric &f_;
	uint32_t dev_;
	uint64_t tx_ = 0;
	alignas(64) uint8_t buf_[emu::Transport::kMaxPacket + 64];
};

// A switch's port: what the real Switch sends enters the fabric at the
// switch; what reaches the switch's own address waits in rx until its pass.
class SimPort final : public emu::Transport {
public:
	SimPort(Fabric &f, uint32_t dev) : f_(f), dev_(dev) {}
	std::deque<PktPtr> rx;
	int fd() const override { return -1; }
	uint16_t port() const override { return kPort; }
	bool ipv6() const override { return false; }
	uint8_t *tx_buf() override { return buf_; }
	void tx_commit(size_t len, const Endpoint &dst, const IpAddr &src) override;
	void tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
			     size_t trailer_len, const Endpoint &dst, const IpAddr &src) override;
	void tx_flush() override {}
	unsigned rx_batch(emu::RxPacket *out) override
	{
		held_.clear();
		flat_.resize(kBatch);
		unsigned n = 0;
		while (n < kBatch && !rx.empty()) {
			held_.push_back(std::move(rx.front()));
			rx.pop_front();
			Pkt &p = *held_.back();
			out[n] = emu::RxPacket{p.flat(flat_[n]), p.size(), p.src, p.dst, p.ecn,
					       p.rx_ns};
			ctr_.rx_packets++;
			ctr_.rx_bytes += p.size();
			n++;
		}
		return n;
	}
	const emu::PortCounters &counters() const override { return ctr_; }
	const char *kind() const override { return "sim"; }

private:
	Fabric &f_;
	uint32_t dev_;
	std::vector<PktPtr> held_;
	std::vector<std::vector<uint8_t>> flat_; // held_'s packets put together
	emu::PortCounters ctr_;
	alignas(64) uint8_t buf_[kMaxPacket + 64];
};

// One job's QP on one host, with its ranks' buffers.
struct JobQp {
	std::unique_ptr<emu::Queue> sq;
	emu::Cq cq;
	emu::Qp qp;
	// Per message in flight (JobSpec::depth) and local rank: slot * ranks + rank.
	std::vector<std::vector<uint8_t>> src, dst;
	uint32_t job = 0, host = 0;
	uint64_t cqes = 0;
	uint64_t last_cqe_ns = 0;
	uint32_t late_prod = 0; // its post waits until the late event (JobSpec::late_ns)
	bool failed = false;
};

struct Host {
	emu::NicParams params;
	std::unique_ptr<SimHost> nic;
	std::unique_ptr<emu::CollService> svc;
	std::vector<std::unique_ptr<JobQp>> qps;
	std::deque<PktPtr> inbox;
	uint32_t up = 0;	   // its link to its leaf (of plane 0)
	std::vector<uint32_t> ups; // per plane
	uint32_t units_used = 0;   // Seg units the jobs configured so far took
	uint64_t pass_at = 0;	   // a pass is scheduled then (0: none)
};

struct SwitchDev {
	std::unique_ptr<emu::Switch> sw;
	SimPort *port = nullptr;
	uint32_t plane = 0;
	// Its level (0 a leaf, 1 a spine, 2 the core) and index at that level
	// in its plane.
	uint32_t level = 0, index = 0;
	uint32_t up = UINT32_MAX;   // link to its parent (a leaf of a tree, a spine of tree3)
	std::vector<uint32_t> down; // per host (leaf), leaf (spine) or spine (core): link
	uint64_t pass_at = 0;
	// Its units waiting for partials (they change only in its passes),
	// the most at once.
	uint32_t peak_collecting = 0;
};

struct Job {
	JobSpec spec;
	uint32_t qpn = 0;
	std::vector<uint32_t> hosts;
	std::vector<JobQp *> qps;
	size_t size_idx = 0;
	// Messages of this size completed everywhere (iter) and posted; the
	// newest MID; when the first timed one was posted (0: not yet); hosts
	// that completed the oldest in flight.
	uint32_t iter = 0, posted = 0, mid = 0;
	uint64_t posted_at = 0, done = 0;
	uint64_t sum_ns = 0;
	uint64_t wire0 = 0;	 // its first host's link bytes when timing began
	uint64_t wire_size0 = 0; // ... when the size's first message was posted
	// Per slot (MID mod depth): the reference, and the hosts that
	// completed its message.
	std::vector<std::vector<uint8_t>> want;
	std::vector<uint64_t> slot_done;
	uint32_t slot(uint32_t m) const { return m % spec.depth; }
	std::vector<uint8_t> psrc, pdst; // a phantom job's buffers, shared by its ranks
	JobResult res;
	bool finished = false;
};

class Fabric {
public:
	Fabric(const FabricSpec &f, uint64_t seed) : spec(f), rng(seed), clock(kStart) { build(); }

	PktPool pool; // first: destroyed after everything that holds packets
	// Phantom jobs' packets share their payloads (sim_pkt.h).
	bool share_bodies = false;
	// Packets put together for a host's pass and for the capture.
	std::vector<uint8_t> rx_scratch, pcap_scratch;
	PcapWriter pcap;
	FabricSpec spec;
	std::mt19937_64 rng;
	std::uniform_real_distribution<double> u{0.0, 1.0};
	util::ManualClock clock;
	std::deque<Link> links;
	std::deque<Host> hosts;
	std::deque<SwitchDev> sws;
	std::vector<std::unique_ptr<Job>> jobs;
	std::priority_queue<Event, std::vector<Event>, std::greater<Event>> evq;
	uint64_t seq = 0, events = 0, packets = 0, lost = 0;
	// Packets in flight on links' wires, by event id.
	std::vector<PktPtr> flying;
	std::vector<uint32_t> free_slots;

	uint32_t per_plane = 1; // switches of each plane: plane p's are [p * per_plane, +per_plane)
	uint32_t dev_of_switch(uint32_t s) const { return uint32_t(hosts.size()) + s; }
	// Bytes host h has sent, over its links to every plane.
	uint64_t host_tx(uint32_t h) const
	{
		uint64_t b = 0;
		for (uint32_t l : hosts[h].ups)
			b += links[l].tx_bytes;
		return b;
	}
	bool is_switch(uint32_t dev) const { return dev >= hosts.size(); }

	void at(uint64_t t, Ev k, uint32_t id) { evq.push(Event{t, seq++, k, id}); }

	void build()
	{
		const uint32_t n = spec.nodes, planes = std::max(spec.planes, 1u);
		hosts.resize(n);
		leaves = spec.shape == Shape::star
				 ? 1
				 : (n + spec.nodes_per_leaf - 1) / spec.nodes_per_leaf;
		pods = spec.shape == Shape::tree3
			       ? (leaves + spec.leaves_per_pod - 1) / spec.leaves_per_pod
			       : spec.shape == Shape::tree2;
		per_plane = leaves + pods + (spec.shape == Shape::tree3);
		sws.resize(size_t(per_plane) * planes);
		for (uint32_t s = 0; s < sws.size(); s++)
			make_switch(s);
		for (uint32_t i = 0; i < n; i++) {
			const uint32_t leaf = spec.shape == Shape::star ? 0
									: i / spec.nodes_per_leaf;
			Host &h = hosts[i];
			for (uint32_t p = 0; p < planes; p++) {
				h.ups.push_back(
					add_link(spec.host, dev_of_switch(p * per_plane + leaf)));
				links[h.ups.back()].waits = spec.port_wait;
				sws[p * per_plane + leaf].down.push_back(add_link(spec.host, i));
			}
			h.up = h.ups[0];
			h.params.name = "host" + std::to_string(i);
			h.params.gids = {host_ip(i)};
			h.params.udp_port = kPort;
			h.params.clock = &clock;
			if (spec.timeout_ms)
				h.params.cfg.coll_timeout_ms = spec.timeout_ms;
			if (spec.rto_us)
				h.params.cfg.coll_rto_us = spec.rto_us;
			if (spec.probe_us >= 0)
				h.params.cfg.coll_probe_us = uint32_t(spec.probe_us);
			h.params.cfg.coll_xchg_bytes = spec.xchg_bytes;
			h.params.cfg.coll_xchg_bytes_host = spec.xchg_bytes; // hosts of their own
			h.params.cfg.coll_depth = spec.coll_depth;
			h.params.cfg.cc.on = spec.cc;
			// A NIC paces new blocks to its own ports, as hardware
			// does (a job's blocks take the planes in turn).
			h.params.cfg.port_rate_bps = spec.host.rate_bps * planes;
			h.nic = std::make_unique<SimHost>(h.params, *this, i);
			h.svc = emu::make_coll_service(*h.nic, spec.nic_units, emu::kSegUnitBytes);
		}
		if (spec.shape == Shape::star)
			return;
		LinkSpec up = spec.up;
		if (!up.rate_bps)
			up.rate_bps = spec.host.rate_bps * spec.nodes_per_leaf;
		LinkSpec core = spec.core;
		if (!core.rate_bps)
			core.rate_bps = up.rate_bps * spec.leaves_per_pod;
		for (uint32_t p = 0; p < planes; p++) {
			const uint32_t base = p * per_plane;
			for (uint32_t l = 0; l < leaves; l++) {
				const uint32_t spine = base + leaves + pod_of_leaf(l);
				sws[base + l].up = add_link(up, dev_of_switch(spine));
				sws[spine].down.push_back(add_link(up, dev_of_switch(base + l)));
			}
			if (spec.shape != Shape::tree3)
				continue;
			const uint32_t top = base + leaves + pods;
			for (uint32_t k = 0; k < pods; k++) {
				sws[base + leaves + k].up = add_link(core, dev_of_switch(top));
				sws[top].down.push_back(
					add_link(core, dev_of_switch(base + leaves + k)));
			}
		}
	}

	uint32_t leaves = 1, pods = 0; // per plane
	uint32_t pod_of_leaf(uint32_t l) const
	{
		return spec.shape == Shape::tree3 ? l / spec.leaves_per_pod : 0;
	}

	// Switch s: plane s / per_plane; in it, the leaves, then the spines
	// (tree2: one), then (tree3) the core.
	void make_switch(uint32_t s)
	{
		SwitchDev &d = sws[s];
		const uint32_t in = s % per_plane;
		d.plane = s / per_plane;
		d.level = in < leaves ? 0 : in < leaves + pods ? 1 : 2;
		d.index = d.level == 0 ? in : d.level == 1 ? in - leaves : 0;
		emu::SwitchParams p;
		p.name = d.level == 0	? "leaf" + std::to_string(in)
			 : d.level == 2 ? std::string("core")
			 : pods == 1	? std::string("spine")
					: "spine" + std::to_string(d.index);
		if (spec.planes > 1)
			p.name = "plane" + std::to_string(d.plane) + "." + p.name;
		p.units = spec.switch_units;
		p.policy = spec.switch_policy;
		p.shares = spec.switch_shares;
		p.whole_grant = spec.switch_whole_grant;
		p.clock = &clock;
		p.tail_us = 0; // no host here is ever late but by the fabric
		const uint32_t dev = dev_of_switch(s);
		p.transport = [this, dev, &d](std::unique_ptr<emu::Transport> *out) {
			auto port = std::make_unique<SimPort>(*this, dev);
			d.port = port.get();
			*out = std::move(port);
			return 0;
		};
		d.sw = std::make_unique<emu::Switch>(p);
		d.sw->open();
	}

	uint32_t add_link(const LinkSpec &s, uint32_t to)
	{
		links.push_back(Link{});
		links.back().spec = s;
		links.back().to = to;
		return uint32_t(links.size() - 1);
	}

	// Where a packet at device `at` goes next toward dst: a link, or
	// UINT32_MAX when it has arrived.
	uint32_t route(uint32_t at, const IpAddr &dst) const
	{
		const uint32_t a = v4(dst);
		const bool to_switch = (a >> 24) == 0x0b;
		const uint32_t idx = (a & 0xffffff) - 1;
		if (!is_switch(at)) // to a switch: its plane's link; to a host: plane 0's
			return to_switch && idx < sws.size() ? hosts[at].ups[idx / per_plane]
							     : hosts[at].up;
		const uint32_t me = at - uint32_t(hosts.size());
		const SwitchDev &s = sws[me];
		if (to_switch) {
			if (idx == me)
				return UINT32_MAX;
			if (idx >= sws.size() || idx / per_plane != s.plane)
				return UINT32_MAX - 1; // planes are not connected
			// Down toward a switch below us, else up.
			const uint32_t in = idx % per_plane;
			const uint32_t lvl = in < leaves ? 0 : in < leaves + pods ? 1 : 2;
			if (lvl < s.level) {
				const uint32_t below = lvl == 0 ? in
								: in - leaves; // a leaf or a spine
				if (s.level == 2) // the core: down to the spine of its pod
					return s.down[lvl == 0 ? pod_of_leaf(below) : below];
				if (lvl == 0 &&
				    pod_of_leaf(below) == s.index) // a spine: its own leaf
					return s.down[below - s.index * spec.leaves_per_pod *
								      (spec.shape == Shape::tree3)];
			}
			return s.up != UINT32_MAX ? s.up : UINT32_MAX - 1;
		}
		if (idx >= hosts.size())
			return UINT32_MAX - 1;
		if (spec.shape == Shape::star)
			return s.down[idx];
		const uint32_t leaf = idx / spec.nodes_per_leaf;
		if (s.level == 0)
			return leaf == s.index ? s.down[idx % spec.nodes_per_leaf] : s.up;
		const uint32_t pod = pod_of_leaf(leaf);
		if (s.level == 2)
			return s.down[pod];
		if (pod != s.index)
			return s.up;
		return s.down[leaf - pod * spec.leaves_per_pod * (spec.shape == Shape::tree3)];
	}

	// A packet a host or a switch sends leaves device `from`; it is lost
	// with the fabric's probability, as its port's impairment would.
	void send_from(uint32_t from, PktPtr p)
	{
		if (pcap.is_open())
			pcap.write(clock.now() - kStart, p->src, p->dst, kPort, p->ecn,
				   p->flat(pcap_scratch), p->size());
		if (spec.loss > 0 && u(rng) < spec.loss) {
			lost++;
			return;
		}
		if (spec.port_delay_ns) {
			// Held first, as the port's delay line holds it.
			uint64_t d = spec.port_delay_ns;
			if (spec.port_jitter_ns)
				d = d - spec.port_jitter_ns +
				    uint64_t(u(rng) * double(2 * spec.port_jitter_ns));
			p->link = from;
			at(clock.now() + d, Ev::held, park(std::move(p)));
			return;
		}
		forward(from, std::move(p));
	}
	// A packet's delay at the port it left is over.
	void held(uint32_t slot)
	{
		PktPtr p = std::move(flying[slot]);
		free_slots.push_back(slot);
		const uint32_t from = p->link;
		forward(from, std::move(p));
	}
	// A packet in flight (on a link, or held at a port) waits in a slot.
	uint32_t park(PktPtr p)
	{
		uint32_t slot;
		if (free_slots.empty()) {
			slot = uint32_t(flying.size());
			flying.emplace_back();
		} else {
			slot = free_slots.back();
			free_slots.pop_back();
		}
		flying[slot] = std::move(p);
		return slot;
	}
	void forward(uint32_t from, PktPtr p)
	{
		const uint32_t l = route(from, p->dst);
		if (l >= links.size())
			return; // no such address: lost
		enqueue(l, std::move(p));
	}

	void enqueue(uint32_t li, PktPtr p)
	{
		Link &l = links[li];
		const uint32_t w = p->wire();
		if (!l.waits && l.qbytes + w > l.spec.queue_bytes && !l.q.empty()) {
			l.drops++;
			return;
		}
		if (l.spec.ecn_bytes && l.qbytes > l.spec.ecn_bytes &&
		    (p->ecn & emu::kEcnMask) != 0) {
			p->ecn = emu::kEcnCe;
			l.marks++;
		}
		l.qbytes += w;
		l.q.push_back(std::move(p));
		if (!l.busy)
			start(li);
	}

	void start(uint32_t li)
	{
		Link &l = links[li];
		l.busy = true;
		const uint64_t w = l.q.front()->wire();
		at(clock.now() + (w * 8 * 1000000000ull + l.spec.rate_bps - 1) / l.spec.rate_bps,
		   Ev::link_done, li);
	}

	void link_done(uint32_t li)
	{
		Link &l = links[li];
		PktPtr p = std::move(l.q.front());
		l.q.pop_front();
		const uint32_t w = p->wire();
		l.qbytes -= w;
		l.tx_bytes += w;
		l.tx_packets++;
		packets++;
		p->link = li;
		at(clock.now() + l.spec.delay_ns, Ev::arrive, park(std::move(p)));
		if (!l.q.empty())
			start(li);
		else
			l.busy = false;
	}

	void arrive(uint32_t slot)
	{
		PktPtr p = std::move(flying[slot]);
		free_slots.push_back(slot);
		const uint32_t dev = links[p->link].to;
		const uint64_t now = clock.now();
		if (!is_switch(dev)) {
			p->rx_ns = now;
			hosts[dev].inbox.push_back(std::move(p));
			schedule_host(dev, now);
			return;
		}
		const uint32_t l = route(dev, p->dst);
		if (l == UINT32_MAX) {
			SwitchDev &s = sws[dev - hosts.size()];
			p->rx_ns = now;
			s.port->rx.push_back(std::move(p));
			schedule_switch(dev - uint32_t(hosts.size()), now);
			return;
		}
		if (l < links.size())
			enqueue(l, std::move(p));
	}

	void schedule_host(uint32_t h, uint64_t t)
	{
		Host &x = hosts[h];
		if (spec.jitter_ns && t == clock.now())
			t += uint64_t(u(rng) * double(spec.jitter_ns));
		if (x.pass_at && x.pass_at <= t)
			return;
		x.pass_at = t;
		at(t, Ev::pass, h);
	}
	void schedule_switch(uint32_t s, uint64_t t)
	{
		SwitchDev &d = sws[s];
		if (d.pass_at && d.pass_at <= t)
			return;
		d.pass_at = t;
		at(t, Ev::pass, dev_of_switch(s));
	}

	void host_pass(uint32_t hi);
	void sample(std::vector<TraceRow> *out);
	void switch_pass(uint32_t s);
	void job_step(uint32_t j);
	void post(Job &j);
	void late_post(uint32_t j);
	void post_phantom(Job &j, uint64_t bytes);
	void on_cqe(JobQp &q, const emu::Cqe &c);
	std::string state() const;
};

} // namespace ibv_coll::sim
