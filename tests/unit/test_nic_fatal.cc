// An internal error in the engine (an exception out of a progress pass,
// such as memory running out) fails the device, not the process: every QP
// in error, its WQEs flushed, the armed CQ's event delivered, on_fatal
// called once, from the application's thread or the engine's.
#include "nic/nic.h"
#include "nic/qp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

using namespace ibv_coll::emu;

namespace {

struct Fatal {
	std::atomic<int> calls{0}, cq_events{0};
	std::atomic<bool> armed{false};
	std::thread::id only_other; // set: throw only on a thread other than this
};

void on_fatal(void *arg)
{
	static_cast<Fatal *>(arg)->calls++;
}
void on_cq_event(void *arg)
{
	static_cast<Fatal *>(arg)->cq_events++;
}

struct Rig {
	Fatal f;
	Queue cq_ring{64, sizeof(Cqe)};
	Queue sq{16, send_wqe_stride(1)}, rq{16, recv_wqe_stride(1)};
	std::unique_ptr<Nic> nic;
	Cq *cq = nullptr;
	Qp *qp = nullptr;
	uint32_t pd = 0;
	std::vector<uint8_t> buf = std::vector<uint8_t>(4096, 0x5a);
	uint32_t key = 0;

	explicit Rig(bool engine_thread_only)
	{
		if (engine_thread_only)
			f.only_other = std::this_thread::get_id();
		NicParams p;
		p.name = "fatal";
		p.gids.push_back(IpAddr::from_v4(htonl(0x7f000001)));
		p.udp_port = 0;
		p.cfg.seg_units = 64;
		p.on_fatal = on_fatal;
		p.fatal_arg = &f;
		Fatal *fp = &f;
		p.fault = [fp] {
			if (fp->armed.load() && (fp->only_other == std::thread::id() ||
						 std::this_thread::get_id() != fp->only_other))
				throw std::bad_alloc();
		};
		EXPECT_EQ(Nic::create(p, &nic), 0);
		EXPECT_EQ(nic->alloc_pd(&pd), 0);
		uint32_t cqn, qpn;
		EXPECT_EQ(nic->create_cq(&cq_ring, on_cq_event, &f, &cq, &cqn), 0);
		EXPECT_EQ(nic->reg_mr(pd, buf.data(), buf.size(), kAccLocalWrite, &key), 0);
		QpCreate c;
		c.pdn = pd;
		c.sq = &sq;
		c.rq = &rq;
		c.send_cq = c.recv_cq = cq;
		EXPECT_EQ(nic->create_qp(c, &qp, &qpn), 0);
		// Connected to a port where nothing answers: what it sends
		// stays unacknowledged, its retransmission timer armed.
		QpAttr a;
		a.state = QpState::init;
		a.access = kAccLocalWrite;
		EXPECT_EQ(nic->modify_qp(qp, a, kQpState | kQpAccess | kQpPort), 0);
		a.state = QpState::rtr;
		a.path_mtu = 1024;
		a.remote.ip = IpAddr::from_v4(htonl(0x7f000001));
		a.remote.port = 9; // discard
		a.dest_qpn = 0x99;
		EXPECT_EQ(nic->modify_qp(qp, a,
					 kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn),
			  0);
		a.state = QpState::rts;
		a.timeout = 12;
		EXPECT_EQ(nic->modify_qp(qp, a, kQpState | kQpSqPsn | kQpTimeout), 0);
	}
	~Rig()
	{
		if (qp)
			nic->destroy_qp(qp);
	}
	void post_recv(uint64_t id)
	{
		auto *w = rq.at<RecvWqe>(rq.prod_relaxed());
		memset(w, 0, rq.stride());
		w->wr_id = id;
		w->num_sge = 1;
		w->length = 64;
		w->sges()[0] = Sge{reinterpret_cast<uint64_t>(buf.data()), 64, key};
		rq.publish(rq.prod_relaxed() + 1);
		nic->rq_doorbell(qp);
	}
	void post_send(uint64_t id)
	{
		auto *w = sq.at<SendWqe>(sq.prod_relaxed());
		memset(w, 0, sq.stride());
		w->wr_id = id;
		w->opcode = uint8_t(WrOpcode::send);
		w->flags = kWqeSignaled;
		w->num_sge = 1;
		w->length = 64;
		w->sges()[0] = Sge{reinterpret_cast<uint64_t>(buf.data()), 64, key};
		sq.publish(sq.prod_relaxed() + 1);
		nic->sq_doorbell(qp);
	}
	// Every completion in the CQ, by wr_id and status.
	std::vector<std::pair<uint64_t, uint8_t>> drain()
	{
		std::vector<std::pair<uint64_t, uint8_t>> out;
		for (uint32_t c = cq_ring.cons(); c != cq_ring.prod(); c++) {
			Cqe e;
			memcpy(&e, cq_ring.slot(c), sizeof(e));
			out.emplace_back(e.wr_id, e.status);
		}
		cq_ring.consume(cq_ring.prod());
		return out;
	}
};

void expect_flushed(Rig &r)
{
	// Whichever thread found the error calls on_fatal last.
	const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while (r.f.calls.load() == 0 && std::chrono::steady_clock::now() < until)
		std::this_thread::sleep_for(std::chrono::milliseconds(1));
	EXPECT_TRUE(r.nic->fatal());
	EXPECT_EQ(r.f.calls.load(), 1);
	EXPECT_EQ(r.f.cq_events.load(), 1); // the armed CQ's event
	auto got = r.drain();
	ASSERT_EQ(got.size(), 2u);
	for (auto &g : got)
		EXPECT_EQ(g.second, uint8_t(WcStatus::wr_flush_err)) << "wr_id " << g.first;
	QpAttr a;
	EXPECT_EQ(r.nic->query_qp(r.qp, &a), 0);
	EXPECT_EQ(a.state, QpState::err);
}

} // namespace

// The pass that throws runs on the application's thread (its poll).
TEST(NicFatal, ThrowInTheCallersPassFailsTheDevice)
{
	Rig r(false);
	r.post_recv(1);
	r.post_send(2);
	r.nic->cq_arm(r.cq, false);
	r.f.armed = true;
	r.nic->progress(r.cq);
	expect_flushed(r);
	// A dead device runs no more passes, and says so again without harm;
	// what needs the device fails with EIO, destroying succeeds.
	r.nic->progress(r.cq);
	EXPECT_EQ(r.f.calls.load(), 1);
	uint32_t pd;
	EXPECT_EQ(r.nic->alloc_pd(&pd), EIO);
	QpAttr a;
	a.state = QpState::reset;
	EXPECT_EQ(r.nic->modify_qp(r.qp, a, kQpState), EIO);
	EXPECT_EQ(r.nic->destroy_qp(r.qp), 0);
	r.qp = nullptr;
}

// The pass that throws runs on the engine thread (the send's
// retransmission timer wakes it): the process lives on, the device fails.
TEST(NicFatal, ThrowInTheEngineThreadFailsTheDevice)
{
	Rig r(true);
	r.post_recv(1);
	r.post_send(2);
	r.nic->cq_arm(r.cq, false);
	r.f.armed = true;
	const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	while (!r.nic->fatal() && std::chrono::steady_clock::now() < until)
		std::this_thread::sleep_for(std::chrono::milliseconds(5));
	ASSERT_TRUE(r.nic->fatal());
	expect_flushed(r);
}
