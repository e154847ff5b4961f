// The device's engine: object tables, packet dispatch, QP life cycle and
// completion writing (engine_wait.cc: the engine thread's loop and its
// wake-up protocol).
#include "nic/engine.h"

#include "util/clock.h"
#include "util/fence.h"
#include "util/log.h"
#include "wire/ceth.h"
#include "wire/coll_codec.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace ibv_coll::emu {

// What the collective unit sees of this engine.
class EngineCollHost final : public CollHost {
public:
	explicit EngineCollHost(Engine &e) : CollHost(e.params), e_(e) {}
	uint64_t now() const override { return e_.params.clock->now(); }
	Qp *find_qp(uint32_t qpn) override
	{
		auto it = e_.qps.find(qpn);
		return it == e_.qps.end() ? nullptr : it->second.get();
	}
	bool push_cqe(Cq *cq, const Cqe &c) override { return e_.push_cqe(cq, c); }
	void qp_to_error(Qp &qp, const char *why) override { e_.qp_to_error(qp, why); }
	bool dma_ok(uint32_t lkey, uint32_t pdn, uint64_t addr, uint64_t len,
		    uint32_t need) override
	{
		return e_.mrs.check(lkey, pdn, addr, len, need) == DmaErr::ok;
	}
	DmaSpace pd_space(uint32_t pdn) const override { return e_.pd_space(pdn); }
	uint16_t udp_port() const override { return e_.port->port(); }
	bool ipv6() const override { return e_.port->ipv6(); }
	uint8_t *tx_buf() override { return e_.port->tx_buf(); }
	void tx_to(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		   uint32_t paylen) override
	{
		e_.tx_to(dst, src, pkt, hdr_len, paylen);
	}
	void tx_split(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		      const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc) override
	{
		e_.tx_split(dst, src, pkt, hdr_len, payload, paylen, tail_crc);
	}
	uint64_t tx_lend_mark() const override { return e_.port->tx_lend_mark(); }
	void tx_reclaim(uint64_t mark) override { e_.port->tx_reclaim(mark); }
	void tx_flush() override { e_.port->tx_flush(); }
	uint64_t tx_packets() const override { return e_.port->counters().tx_packets; }
	void count_no_qp() override { e_.ctr.rx_no_qp++; }
	void count_bad_state() override { e_.ctr.rx_bad_state++; }
	void send_cnp(const Endpoint &dst, const IpAddr &src, uint32_t dqpn, uint64_t *last,
		      uint64_t now) override
	{
		e_.maybe_send_cnp(dst, src, dqpn, last, now);
	}
	CcCounters &cc_counters() override { return e_.ctr.cc; }

private:
	Engine &e_;
};

Engine::Engine(const NicParams &p) : params(p) {}

Engine::~Engine()
{
	stop_.store(true);
	if (thread_.joinable()) {
		wake();
		thread_.join();
	}
	if (coll) {
		const NicCounters n = snapshot_locked();
		const CollCounters &c = n.coll;
		const PortCounters &pc = n.port;
		IBVC_INFO(
			"emu",
			"{}: tx {} pkts {} B {} calls {} gso {} waits for a full queue ({} us), rx {} pkts {} B {} calls {} gro {} ce, icrc errors {}, malformed {}, no qp {}, "
			"bad source {}, bad state {}, rc: tx {} pkts {} B rx {} pkts {} B retrans {} timeouts {} "
			"seq naks {}/{} rnr naks {}/{} dup {}, coll: msgs {} failed {} fallbacks {} blocks {} data {}/{} "
			"result {}/{} retrans {}/{} dup {} early {}/{} stale {} bad key {} job {} "
			"block {} node {} malformed {} seg busy {} aborts {}/{} timeouts {} naks {}/{} "
			"probes {}",
			params.name, pc.tx_packets, pc.tx_bytes, pc.tx_syscalls, pc.tx_gso,
			pc.tx_full_waits, pc.tx_full_wait_us, pc.rx_packets, pc.rx_bytes,
			pc.rx_syscalls, pc.rx_gro, pc.rx_ce, n.rx_icrc_err, n.rx_malformed,
			n.rx_no_qp, n.rx_bad_src, n.rx_bad_state, n.rc_tx_packets, n.rc_tx_bytes,
			n.rc_rx_packets, n.rc_rx_bytes, n.tx_retransmits, n.timeouts,
			n.seq_naks_sent, n.seq_naks_rcvd, n.rnr_naks_sent, n.rnr_naks_rcvd,
			n.rx_dup, c.messages, c.failed, c.fallbacks, c.blocks, c.tx_data, c.rx_data,
			c.tx_result, c.rx_result, c.retrans_data, c.retrans_result, c.dup_dropped,
			c.early_stored, c.early_dropped, c.stale_dropped, c.bad_key, c.bad_job,
			c.bad_block, c.bad_node, c.malformed, c.seg_busy, c.aborts_sent,
			c.aborts_rcvd, c.timeouts, c.naks_sent, c.naks_rcvd, c.probes);
		IBVC_INFO(
			"emu",
			"{}: cc: cnps {}/{} cuts {} (delay {} loss {} cnp {} host {}) rebases {} loss without a "
			"queue {} fast retrans {} retrans bytes {}, host delay {} us in {} "
			"samples, impairment: dropped {} duplicated {} reordered {}",
			params.name, n.cc.cnp_sent, n.cc.cnp_rcvd, n.cc.rate_cuts, n.cc.delay_cuts,
			n.cc.loss_cuts, n.cc.cnp_cuts, n.cc.host_cuts, n.cc.rebases,
			n.cc.loss_no_queue, n.cc.fast_retrans, n.cc.retrans_bytes,
			n.cc.host_delay_us, n.cc.host_delay_samples, pc.impair_dropped,
			pc.impair_duplicated, pc.impair_reordered);
	}
}

int Engine::start()
{
	int err = open_transport(params.transport, &port, params.udp_port, params.port_fallback,
				 params.cfg.impair, params.cfg.sockbuf, params.cfg.gso);
	if (err)
		return err;
	// Several contexts may drive one netdev: name each by its port too.
	params.name += ":" + std::to_string(port->port());
	try {
		coll_host = std::make_unique<EngineCollHost>(*this);
		coll = make_coll_service(*coll_host, params.cfg.seg_units, kSegUnitBytes);
	} catch (const std::bad_alloc &) {
		IBVC_ERR("emu", "{}: no memory for {} Seg units", params.name,
			 params.cfg.seg_units);
		return ENOMEM;
	}
	stats_.open(params.name.substr(0, params.name.rfind(':')), port->port(), nic_stat_names());
	publish_stats(0, true);
	epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
	epq_.reset(epoll_create1(EPOLL_CLOEXEC));
	evfd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	tfd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	if (!epfd_ || !epq_ || !evfd_ || !tfd_) {
		err = errno;
		IBVC_ERR("emu", "{}: engine fds: {}", params.name, util::errstr(err));
		return err;
	}
	for (int fd : {port->fd(), evfd_.get(), tfd_.get(), -evfd_.get(), -tfd_.get()}) {
		epoll_event ev{};
		ev.events = EPOLLIN;
		ev.data.fd = fd < 0 ? -fd : fd;
		if (epoll_ctl(fd < 0 ? epq_.get() : epfd_.get(), EPOLL_CTL_ADD, ev.data.fd, &ev)) {
			err = errno;
			IBVC_ERR("emu", "{}: epoll_ctl: {}", params.name, util::errstr(err));
			return err;
		}
	}
	try {
		thread_ = std::thread(&Engine::run, this);
	} catch (const std::system_error &e) {
		IBVC_ERR("emu", "{}: engine thread: {}", params.name, e.what());
		return EAGAIN;
	}
	return 0;
}

void Engine::wake()
{
	uint64_t one = 1;
	ssize_t r = write(evfd_.get(), &one, sizeof(one));
	(void)r; // a full counter still wakes the reader
}

// Wake-up protocol.  Whoever changes device state outside the engine
// thread (a doorbell, or progress on an application thread) either runs
// progress itself or sets work_pending and wakes the engine if it sleeps.
// The engine clears work_pending before each pass and re-reads it after
// announcing sleep, so a change is never left unseen.  armed_deadline is
// the timer the engine will sleep with; a thread that creates an earlier
// one makes the engine re-arm.
void Engine::kick(const Cq *watch)
{
	if (dead.load())
		return;
	std::unique_lock lk(mu, std::try_to_lock);
	if (lk.owns_lock()) {
		// fail() takes mu itself: the guard is released first, whether
		// kick_locked() threw before or after it let go.
		try {
			kick_locked(lk, watch);
		} catch (const std::exception &e) {
			if (lk.owns_lock())
				lk.unlock();
			fail(e.what());
		} catch (...) {
			if (lk.owns_lock())
				lk.unlock();
			fail("an unknown exception");
		}
		return;
	}
	work_pending.store(true);
	if (sleeping.load())
		wake();
}

// kick() with mu taken (lk); returns with it released.
void Engine::kick_locked(std::unique_lock<std::mutex> &lk, const Cq *watch)
{
	// While passes find work and the watched CQ stays empty, run
	// another: every return to the caller is, on a busy machine, a
	// yield and a context switch before the next pass.  A pass that
	// did work may have made more ready (a collective completed, the
	// next can start): unless a later pass found none, or a thread
	// that polls will run the next, the engine thread goes on from
	// there, as no one else may (a doorbell from a thread that then
	// waits, as ibv_coll_devd's request thread does, is the last call
	// before a wait).
	bool more = false;
	for (int pass = 0; pass < 8; pass++) {
		more = progress_locked();
		if (!more || !watch || watch->ring->prod() != watch->ring->cons())
			break;
	}
	uint64_t d = next_deadline_locked();
	lk.unlock();
	const bool polled = watch || app_until.load() > util::now_ns();
	if (!polled && (more || (d && d < armed_deadline.load()))) {
		work_pending.store(true);
		if (sleeping.load())
			wake();
	}
}

// The engine thread: an exception out of its passes (memory ran out in the
// engine) fails the device rather than the process.
void Engine::run()
{
	try {
		run_passes();
	} catch (const std::exception &e) {
		fail(e.what());
	} catch (...) {
		fail("an unknown exception");
	}
}

void Engine::fail(const char *why)
{
	dead.store(true);
	if (fail_reported_.exchange(true))
		return;
	IBVC_ERR("emu", "{}: internal error in the engine ({}): the device fails", params.name,
		 why);
	{
		std::lock_guard lk(mu);
		for (auto &kv : qps) {
			Qp &qp = *kv.second;
			if (qp.state == QpState::reset)
				continue;
			qp_to_error(qp, "the device failed");
			if (qp.coll)
				while (coll->flush(qp)) {
				}
			else
				flush(qp);
		}
		// A thread asleep on a CQ's channel wakes to find its WQEs
		// flushed, whatever it armed for.
		for (Cq *cq : cqs) {
			const bool armed = cq->arm.exchange(kArmOff) != kArmOff;
			if ((armed || cq->event_due) && cq->fn)
				cq->fn(cq->arg);
			cq->event_due = false;
		}
	}
	if (params.on_fatal)
		params.on_fatal(params.fatal_arg);
}

// A pass that throws (memory ran out) may leave a collective half set up:
// the device is marked failed before mu is let go, so that no other
// thread's pass runs on it; the catcher then calls fail().
bool Engine::progress_locked()
{
	if (dead.load())
		return false;
	try {
		return pass_locked();
	} catch (...) {
		dead.store(true);
		throw;
	}
}

bool Engine::pass_locked()
{
	if (params.fault)
		params.fault();
	bool did = false;
	RxPacket pkts[Transport::kBatch];
	for (int b = 0; b < 4; b++) {
		unsigned n = port->rx_batch(pkts);
		for (unsigned i = 0; i < n; i++)
			handle_packet(pkts[i]);
		if (n)
			did = true;
		if (n < Transport::kBatch)
			break;
	}
	uint64_t now = params.clock->now();
	for (auto &kv : qps) {
		Qp &qp = *kv.second;
		if (qp.coll) {
			if (qp.state == QpState::err)
				did |= coll->flush(qp);
			else if (qp.state == QpState::rts)
				did |= coll->progress(qp, now);
			continue;
		}
		switch (qp.state) {
		case QpState::err: did |= flush(qp); break;
		case QpState::rts:
			req_timers(qp, now);
			if (qp.state == QpState::rts)
				did |= req_progress(qp, now);
			if (qp.state == QpState::rts)
				did |= resp_progress(qp);
			break;
		case QpState::rtr: did |= resp_progress(qp); break;
		default: break;
		}
	}
	port->tx_flush();
	for (Cq *cq : cqs) {
		if (cq->event_due) {
			cq->event_due = false;
			cq->fn(cq->arg);
		}
	}
	publish_stats(now, false);
	return did;
}

uint64_t Engine::next_deadline_locked() const
{
	if (dead.load())
		return 0; // a failed device runs no timers (its state may be half changed)
	// Packets a delay impairment holds leave when due, at the pass the
	// timer wakes.
	uint64_t d = port ? port->tx_next_due() : 0;
	for (const auto &kv : qps) {
		const Qp &qp = *kv.second;
		if (qp.state != QpState::rts)
			continue;
		if (qp.coll) {
			uint64_t t = coll->next_deadline(qp);
			if (t && (!d || t < d))
				d = t;
			continue;
		}
		// A paced window below one packet: when the next may leave.
		uint64_t pace = qp.req_idx != qp.sq->prod() ? qp.cc.next_send_time() : 0;
		if (pace && pace <= params.clock->now())
			pace = 0;
		for (uint64_t t : {qp.rto_deadline, qp.rnr_deadline, qp.sr_deadline, pace})
			if (t && (!d || t < d))
				d = t;
	}
	return d;
}

void Engine::handle_packet(const RxPacket &rx)
{
	using namespace wire;
	if (rx.len < kBthBytes + kIcrcBytes) {
		ctr.rx_malformed++;
		return;
	}
	size_t len = rx.len - kIcrcBytes;
	const UdpEndpoints ep = udp_endpoints(rx.src, rx.dst, port->port());
	// A collective packet's ICRC in two parts (wire/coll_codec.h), whose
	// payload part a result passed on reuses; an RC packet's in one.
	InPacket p;
	p.tail_crc = 0;
	const bool coll_kind = is_coll_opcode(rx.data[0]);
	const bool good = coll_kind ? coll_check_icrc(ep, rx.data, rx.len, &len, &p.tail_crc) ==
					      CollError::ok
				    : icrc(ep, rx.data, len) == load_icrc(rx.data + len);
	if (!good) {
		ctr.rx_icrc_err++;
		IBVC_DEBUG("emu", "{}: bad icrc from {}:{}", params.name, rx.src.ip.str(),
			   rx.src.port);
		return;
	}
	p.data = rx.data;
	p.len = len;
	p.src = rx.src;
	p.ecn = rx.ecn;
	p.rx_ns = rx.rx_ns;
	p.bth = Bth::load(rx.data);
	if (p.bth.opcode == kOpCnp) {
		on_cnp(p);
		return;
	}
	if (is_coll_opcode(p.bth.opcode) && Bth::tver(rx.data) == 0 && p.bth.pkey == kDefaultPkey) {
		coll->on_packet(p);
		return;
	}
	p.flags = opcode_flags(p.bth.opcode);
	if (Bth::tver(rx.data) != 0 || !p.flags || p.bth.pkey != kDefaultPkey) {
		ctr.rx_malformed++;
		return;
	}
	size_t ext = ext_header_bytes(p.flags);
	if (len < kBthBytes + ext + p.bth.pad) {
		ctr.rx_malformed++;
		return;
	}
	p.ext = rx.data + kBthBytes;
	p.payload = p.ext + ext;
	p.paylen = uint32_t(len - kBthBytes - ext - p.bth.pad);
	if (!(p.flags & kHasPayload) && p.paylen) {
		ctr.rx_malformed++;
		return;
	}
	auto it = qps.find(p.bth.dqpn);
	if (it == qps.end()) {
		ctr.rx_no_qp++;
		return;
	}
	Qp &qp = *it->second;
	if (qp.coll) {
		ctr.rx_malformed++; // RC opcodes never address a collective QP
		return;
	}
	if (!(p.src == qp.attr.remote)) {
		ctr.rx_bad_src++;
		return;
	}
	ctr.rc_rx_packets++;
	ctr.rc_rx_bytes += rx.len;
	if (p.flags & kRequest) {
		if (qp.state != QpState::rtr && qp.state != QpState::rts) {
			ctr.rx_bad_state++;
			return;
		}
		// Congestion on the way here: tell the requester (nic/cc.h).
		if ((p.ecn & kEcnMask) == kEcnCe)
			maybe_send_cnp(qp.attr.remote, qp.src_ip, qp.attr.dest_qpn, &qp.cnp_at,
				       params.clock->now());
		resp_on_request(qp, p);
		return;
	}
	if (qp.state != QpState::rts) {
		ctr.rx_bad_state++;
		return;
	}
	if (p.flags & kReadResp)
		req_on_read_resp(qp, p);
	else
		req_on_ack(qp, p);
}

uint8_t *Engine::tx_begin(const Qp &qp, const wire::Bth &bth, size_t, uint8_t **ext)
{
	uint8_t *buf = port->tx_buf();
	wire::Bth b = bth;
	b.dqpn = qp.attr.dest_qpn;
	b.store(buf);
	*ext = buf + wire::kBthBytes;
	return buf;
}

void Engine::tx_finish(const Qp &qp, uint8_t *pkt, size_t hdr_len, uint32_t paylen)
{
	// Only the RC transport sends through here; the bytes as the port
	// counts them (BTH to ICRC).
	ctr.rc_tx_packets++;
	ctr.rc_tx_bytes += hdr_len + paylen + ((4 - (paylen & 3)) & 3) + wire::kIcrcBytes;
	tx_to(qp.attr.remote, qp.src_ip, pkt, hdr_len, paylen);
}

void Engine::maybe_send_cnp(const Endpoint &dst, const IpAddr &src, uint32_t dqpn, uint64_t *last,
			    uint64_t now)
{
	const uint64_t gap = uint64_t(params.cfg.cnp_interval_us) * util::kNsPerUs;
	if (*last && now - *last < gap)
		return;
	*last = now;
	uint8_t *buf = port->tx_buf();
	wire::Bth bth;
	bth.opcode = kOpCnp;
	bth.mig = false;
	bth.dqpn = dqpn;
	bth.store(buf);
	buf[4] = kBthBecn;
	memset(buf + wire::kBthBytes, 0, kCnpRsvdBytes);
	tx_to(dst, src, buf, wire::kBthBytes + kCnpRsvdBytes, 0);
	ctr.cc.cnp_sent++;
}

// A CNP for one of our QPs: its sender cuts its window.  Only from a
// peer of the QP (its RC remote, a member of its job).
void Engine::on_cnp(const InPacket &p)
{
	if (p.len != wire::kBthBytes + kCnpRsvdBytes || wire::Bth::tver(p.data) != 0 ||
	    p.bth.pkey != wire::kDefaultPkey) {
		ctr.rx_malformed++;
		return;
	}
	auto it = qps.find(p.bth.dqpn);
	if (it == qps.end()) {
		ctr.rx_no_qp++;
		return;
	}
	Qp &qp = *it->second;
	const uint64_t now = params.clock->now();
	if (qp.job) {
		if (!coll->on_cnp(qp, p.src, now))
			ctr.rx_bad_src++;
		return;
	}
	if (qp.coll || !(p.src == qp.attr.remote)) {
		ctr.rx_bad_src++;
		return;
	}
	ctr.cc.cnp_rcvd++;
	qp.cc.on_cnp(now);
}

void Engine::tx_to(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		   uint32_t paylen)
{
	const wire::UdpEndpoints ep = udp_endpoints(src, port->port(), dst);
	port->tx_commit(wire::roce_seal(ep, pkt, hdr_len, paylen), dst, src);
}

void Engine::tx_split(const Endpoint &dst, const IpAddr &src, uint8_t *pkt, size_t hdr_len,
		      const uint8_t *payload, uint32_t paylen, const uint32_t *tail_crc)
{
	const wire::UdpEndpoints ep = udp_endpoints(src, port->port(), dst);
	const uint32_t trailer = wire::roce_seal_split(ep, pkt, hdr_len, payload, paylen, tail_crc);
	port->tx_commit_split(hdr_len, payload, paylen, trailer, dst, src);
}

// The collective unit releases a job's Seg units and switches.
void Engine::release_job(Qp &qp)
{
	if (qp.job)
		coll->release(qp);
}

bool Engine::push_cqe(Cq *cq, const Cqe &c)
{
	Queue *q = cq->ring;
	if (q->free_slots() == 0) {
		ctr.cq_overruns++;
		if (!cq->overrun)
			IBVC_ERR("emu", "{}: cq {:#x} overrun, completion of wr_id {:#x} lost",
				 params.name, cq->cqn, c.wr_id);
		cq->overrun = true;
		return false;
	}
	uint32_t idx = q->prod_relaxed();
	memcpy(q->slot(idx), &c, sizeof(c));
	q->publish(idx + 1);
	uint8_t a = cq->arm.load();
	bool fire = a == kArmAny ||
		    (a == kArmSolicited &&
		     ((c.flags & kCqeSolicited) || c.status != uint8_t(WcStatus::success)));
	if (fire && cq->arm.compare_exchange_strong(a, kArmOff))
		cq->event_due = true;
	return true;
}

static WcOpcode wc_opcode_of(uint8_t wr_opcode)
{
	switch (WrOpcode(wr_opcode)) {
	case WrOpcode::rdma_write:
	case WrOpcode::rdma_write_imm: return WcOpcode::rdma_write;
	case WrOpcode::rdma_read: return WcOpcode::rdma_read;
	default: return WcOpcode::send;
	}
}

void Engine::complete_send(Qp &qp, uint32_t idx, WcStatus st, bool force)
{
	const SendWqe *w = qp.sq->at<SendWqe>(idx);
	bool cqe = force || qp.sig_all || (w->flags & kWqeSignaled) || st != WcStatus::success;
	Cqe c{};
	c.wr_id = w->wr_id;
	c.byte_len = w->length;
	c.qpn = qp.qpn;
	c.status = uint8_t(st);
	c.opcode = uint8_t(wc_opcode_of(w->opcode));
	// The slot is free before the completion is visible: an application
	// that reposts as soon as it polls must find room.
	qp.meta[idx & (qp.sq->slots() - 1)] = WqeMeta{};
	qp.sq->consume(idx + 1);
	if (cqe)
		push_cqe(qp.scq, c);
}

void Engine::complete_recv(Qp &qp, WcStatus st, WcOpcode op, uint64_t len, uint32_t imm,
			   uint8_t flags)
{
	uint32_t idx = qp.rq->cons();
	const RecvWqe *r = qp.rq->at<RecvWqe>(idx);
	Cqe c{};
	c.wr_id = r->wr_id;
	c.byte_len = len;
	c.qpn = qp.qpn;
	c.src_qp = qp.attr.dest_qpn;
	c.imm = imm;
	c.status = uint8_t(st);
	c.opcode = uint8_t(op);
	c.flags = flags;
	qp.rq->consume(idx + 1); // room first, as complete_send
	push_cqe(qp.rcq, c);
}

void Engine::qp_to_error(Qp &qp, const char *why)
{
	if (qp.state == QpState::err)
		return;
	IBVC_WARN("emu", "{}: qp {:#x} moves to error: {}", params.name, qp.qpn, why);
	qp.state = QpState::err;
	qp.rto_deadline = qp.rnr_deadline = qp.sr_deadline = 0;
	qp.reads.clear();
	qp.ack_due = false;
}

bool Engine::flush(Qp &qp)
{
	bool did = false;
	if (qp.sq) {
		uint32_t prod = qp.sq->prod();
		while (qp.sq->cons() != prod) {
			complete_send(qp, qp.sq->cons(), WcStatus::wr_flush_err, true);
			did = true;
		}
		qp.req_idx = prod;
	}
	if (qp.rq) {
		uint32_t prod = qp.rq->prod();
		while (qp.rq->cons() != prod) {
			complete_recv(qp, WcStatus::wr_flush_err, WcOpcode::recv, 0, 0, 0);
			did = true;
		}
	}
	return did;
}

void Engine::qp_reset(Qp &qp)
{
	// RESET discards every WQE without completing it.
	if (qp.sq)
		qp.sq->consume(qp.sq->prod());
	if (qp.rq)
		qp.rq->consume(qp.rq->prod());
	release_job(qp);
	Qp fresh;
	fresh.coll = qp.coll;
	fresh.coll_inc = qp.coll_inc; // the next job given it is a new incarnation
	fresh.qpn = qp.qpn;
	fresh.pdn = qp.pdn;
	fresh.sq = qp.sq;
	fresh.rq = qp.rq;
	fresh.scq = qp.scq;
	fresh.rcq = qp.rcq;
	fresh.sig_all = qp.sig_all;
	fresh.meta.assign(qp.meta.size(), WqeMeta{});
	if (fresh.sq)
		fresh.req_idx = fresh.sq->cons();
	qp = std::move(fresh);
}

} // namespace ibv_coll::emu
