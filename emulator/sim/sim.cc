// The simulator's events: packets through links and switches, the passes
// of hosts and switches, the run (sim/sim.h).
#include "sim/sim_fabric.h"

namespace ibv_coll::sim {

PktPtr new_pkt(Fabric &f)
{
	return f.pool.get();
}

PktPtr split_pkt(Fabric &f, const uint8_t *hdr, size_t hdr_len, const uint8_t *payload,
		 size_t paylen, size_t trailer)
{
	PktPtr p = new_pkt(f);
	if (f.share_bodies && paylen) {
		p->bytes.assign(hdr, hdr + hdr_len + trailer);
		p->at = uint32_t(hdr_len);
		p->body = f.pool.bodies.get(payload, paylen);
		return p;
	}
	p->bytes.reserve(hdr_len + paylen + trailer);
	p->bytes.assign(hdr, hdr + hdr_len);
	p->bytes.insert(p->bytes.end(), payload, payload + paylen);
	p->bytes.insert(p->bytes.end(), hdr + hdr_len, hdr + hdr_len + trailer);
	return p;
}

bool SimHost::push_cqe(emu::Cq *cq, const emu::Cqe &c)
{
	f_.on_cqe(*static_cast<JobQp *>(cq->arg), c);
	return true;
}

void SimHost::out(PktPtr p, const Endpoint &dst, const IpAddr &src)
{
	tx_++;
	p->src = Endpoint{src, kPort, 0};
	p->dst = dst.ip;
	f_.send_from(dev_, std::move(p));
}

void SimPort::tx_commit(size_t len, const Endpoint &dst, const IpAddr &src)
{
	PktPtr p = new_pkt(f_);
	p->bytes.assign(buf_, buf_ + len);
	p->src = Endpoint{src, kPort, 0};
	p->dst = dst.ip;
	ctr_.tx_packets++;
	ctr_.tx_bytes += len;
	f_.send_from(dev_, std::move(p));
}

void SimPort::tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
			      size_t trailer_len, const Endpoint &dst, const IpAddr &src)
{
	PktPtr p = split_pkt(f_, buf_, hdr_len, payload, paylen, trailer_len);
	p->src = Endpoint{src, kPort, 0};
	p->dst = dst.ip;
	ctr_.tx_packets++;
	ctr_.tx_bytes += hdr_len + paylen + trailer_len;
	f_.send_from(dev_, std::move(p));
}

void Fabric::host_pass(uint32_t hi)
{
	Host &h = hosts[hi];
	const uint64_t now = clock.now();
	if (h.pass_at != now)
		return; // superseded by an earlier one
	h.pass_at = 0;
	for (const FabricSpec::Stall &st : spec.stalls)
		if (st.host == hi && now >= kStart + st.at_ns &&
		    now < kStart + st.at_ns + st.for_ns) {
			schedule_host(hi, kStart + st.at_ns + st.for_ns);
			return;
		}
	while (!h.inbox.empty()) {
		PktPtr p = std::move(h.inbox.front());
		h.inbox.pop_front();
		const wire::UdpEndpoints ep = udp_endpoints(p->src, p->dst, kPort);
		emu::InPacket ip{};
		const uint8_t *b = p->flat(rx_scratch);
		size_t len = p->size() - wire::kIcrcBytes;
		if (b[0] == emu::kOpCnp) {
			if (wire::icrc(ep, b, len) != wire::load_icrc(b + len))
				continue;
			const wire::Bth bth = wire::Bth::load(b);
			if (emu::Qp *qp = h.nic->find_qp(bth.dqpn))
				h.svc->on_cnp(*qp, p->src, now);
			continue;
		}
		if (wire::coll_check_icrc(ep, b, p->size(), &len, &ip.tail_crc) !=
		    wire::CollError::ok)
			continue;
		ip.data = b;
		ip.len = len;
		ip.src = p->src;
		ip.ecn = p->ecn;
		ip.rx_ns = p->rx_ns;
		ip.bth = wire::Bth::load(b);
		h.svc->on_packet(ip);
	}
	for (int pass = 0; pass < 64; pass++) {
		bool did = false;
		for (auto &q : h.qps) {
			if (q->qp.state == emu::QpState::rts)
				did |= h.svc->progress(q->qp, now);
			else if (q->qp.state == emu::QpState::err)
				did |= h.svc->flush(q->qp);
		}
		if (!did)
			break;
	}
	uint64_t d = 0;
	for (auto &q : h.qps) {
		uint64_t t = q->qp.state == emu::QpState::rts ? h.svc->next_deadline(q->qp) : 0;
		if (t && (!d || t < d))
			d = t;
	}
	if (d)
		schedule_host(hi, std::max(d, now + 1));
}

void Fabric::switch_pass(uint32_t s)
{
	SwitchDev &d = sws[s];
	const uint64_t now = clock.now();
	if (d.pass_at != now)
		return;
	d.pass_at = 0;
	while (d.sw->poll_once() || !d.port->rx.empty()) {
	}
	d.peak_collecting = std::max(d.peak_collecting, d.sw->units_collecting());
	if (uint64_t t = d.sw->next_deadline())
		schedule_switch(s, std::max(t, now + 1));
}

// Deterministic small integers: exact in float too, whatever the order
// of the reduction.
std::string Fabric::state() const
{
	std::string s;
	for (const auto &jp : jobs) {
		const Job &j = *jp;
		if (j.finished)
			continue;
		s += "job " + j.spec.name + ": size " + std::to_string(j.spec.sizes[j.size_idx]) +
		     " iteration " + std::to_string(j.iter) + " message " + std::to_string(j.mid) +
		     ", " + std::to_string(j.done) + "/" + std::to_string(j.qps.size()) +
		     " hosts completed\n";
		for (const JobQp *q : j.qps) {
			const emu::CollCounters c = hosts[q->host].svc->counters();
			s += "  host " + std::to_string(q->host) + ": qp state " +
			     std::to_string(int(q->qp.state)) + ", completions " +
			     std::to_string(q->cqes) + ", tx data " + std::to_string(c.tx_data) +
			     " result " + std::to_string(c.tx_result) + ", retrans " +
			     std::to_string(c.retrans_data + c.retrans_result) + ", timeouts " +
			     std::to_string(c.timeouts) + ", next deadline " +
			     std::to_string(hosts[q->host].svc->next_deadline(q->qp)) + "\n";
		}
	}
	for (size_t i = 0; i < sws.size(); i++) {
		const emu::SwitchCounters c = sws[i].sw->totals();
		s += "  switch " + std::to_string(i) + ": units in use " +
		     std::to_string(sws[i].sw->units_in_use()) + ", partials " +
		     std::to_string(c.data) + ", results " + std::to_string(c.results) +
		     ", grants " + std::to_string(c.grants) + "\n";
	}
	return s;
}

void Fabric::sample(std::vector<TraceRow> *out)
{
	TraceRow row;
	row.t_ns = clock.now() - kStart;
	for (const SwitchDev &d : sws)
		row.switch_units.push_back(d.sw->units_busy());
	for (const auto &j : jobs) {
		const emu::CollJob *cj = j->qps.empty() ? nullptr : j->qps[0]->qp.job.get();
		double w = 0;
		if (cj && !j->finished)
			w = j->spec.topology == SimTopology::ring ? cj->cc.cwnd()
								  : cj->sw.cc.cwnd();
		row.cwnd.push_back(w);
	}
	out->push_back(std::move(row));
}

SimReport Simulator::run(
	uint64_t limit_ns,
	const std::function<void(uint64_t, uint64_t, uint32_t, uint32_t)> &progress)
{
	uint64_t next_report = progress ? util::now_ns() + 1000000000ull : UINT64_MAX;
	Fabric &f = *f_;
	SimReport r;
	const uint64_t end = kStart + limit_ns;
	if (f.spec.trace_ns)
		f.at(kStart, Ev::trace, 0);
	while (!f.evq.empty()) {
		const Event e = f.evq.top();
		if (e.t > end)
			break;
		f.evq.pop();
		f.clock.set(e.t);
		f.events++;
		switch (e.kind) {
		case Ev::link_done: f.link_done(e.id); break;
		case Ev::arrive: f.arrive(e.id); break;
		case Ev::held: f.held(e.id); break;
		case Ev::pass:
			if (f.is_switch(e.id))
				f.switch_pass(e.id - uint32_t(f.hosts.size()));
			else
				f.host_pass(e.id);
			break;
		case Ev::job: f.job_step(e.id); break;
		case Ev::late: f.late_post(e.id); break;
		case Ev::trace:
			f.sample(&r.trace);
			if (!f.evq.empty()) // else nothing is left to trace
				f.at(e.t + f.spec.trace_ns, Ev::trace, 0);
			break;
		}
		if ((f.events & 0xffff) == 0 && util::now_ns() >= next_report) {
			uint32_t done = 0;
			for (auto &j : f.jobs)
				done += j->finished;
			progress(f.clock.now() - kStart, f.events, done, uint32_t(f.jobs.size()));
			next_report = util::now_ns() + 1000000000ull;
		}
		bool all = true;
		if (e.kind == Ev::job) {
			for (auto &j : f.jobs)
				all &= j->finished;
			if (all)
				break;
		}
	}
	const uint64_t run_ns = f.clock.now() - kStart;
	for (const SwitchDev &d : f.sws) {
		r.switch_peak.push_back(d.sw->units_high_water());
		const emu::SwitchCounters c = d.sw->totals();
		SwitchUse u;
		u.peak_collecting = d.peak_collecting;
		double cap = 0; // bits per second its ports can take in
		for (uint32_t l : d.down)
			cap += double(f.links[l].spec.rate_bps);
		if (d.up != UINT32_MAX)
			cap += double(f.links[d.up].spec.rate_bps);
		u.load = cap > 0 && run_ns ? double(c.rx_bytes) * 8e9 / (cap * double(run_ns)) : 0;
		u.adm_grants = c.adm_grants;
		u.adm_refusals = c.adm_busy + c.adm_scored + c.adm_refused;
		u.adm_streak = c.adm_streak;
		u.pool_us = c.pool_us;
		u.asks = c.asks;
		u.naks = c.naks;
		r.switch_use.push_back(u);
	}
	for (auto &j : f.jobs) {
		r.jobs.push_back(j->res);
		if (!j->finished)
			r.stuck = true;
	}
	r.end_ns = f.clock.now() - kStart;
	r.events = f.events;
	r.packets = f.packets;
	r.drops = f.lost;
	for (const Link &l : f.links) {
		r.drops += l.drops;
		r.marks += l.marks;
	}
	for (const Host &h : f.hosts) {
		const emu::CcCounters &c = h.nic->cc;
		r.cc_cuts += c.rate_cuts;
		r.cc_delay_cuts += c.delay_cuts;
		r.cc_loss_cuts += c.loss_cuts;
		r.cc_cnp_cuts += c.cnp_cuts;
		r.fast_retrans += c.fast_retrans;
		r.reorder_waits += c.reorder_waits;
		r.spurious_retrans += c.spurious_retrans;
		const emu::CollCounters k = h.svc->counters();
		r.repeats += k.retrans_data + k.retrans_result;
		r.naks += k.naks_sent;
		r.probes += k.probes;
		r.win_holds += k.win_holds;
		r.win_held_ns += k.win_held_ns;
		r.malformed += k.malformed + k.bad_block;
	}
	if (r.stuck)
		r.state = f.state();
	return r;
}

} // namespace ibv_coll::sim
