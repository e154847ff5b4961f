// libFuzzer target: the emulated NIC's receive path in process: the
// engine's packet handler (BTH and its checks, RETH/AETH/ImmDt, the RC
// responder and requester) and the collective engine's (CETH, and DATA,
// RESULT, ACK, ABORT, CONFIG_ACK on a ring job and on a switch job; XCHG
// on a ring job whose small allreduce is a pairwise exchange), on a device
// with an RC QP holding receive buffers and three collective QPs each with
// an allreduce under way.  See fuzz_transport.h for the input.
#include "coll/coll_job.h"
#include "fuzz_jobs.h"
#include "nic/nic.h"
#include "nic/queue.h"
#include "nic/wqe.h"

#include <cstdlib>

using namespace ibvc_fuzz;
using namespace ibv_coll::emu;

namespace {

constexpr uint32_t kAccess = 1 | 2 | 4; // local write, remote write, remote read
constexpr size_t kMem = 1 << 16;

void check(int err, const char *what)
{
	if (err) {
		fprintf(stderr, "fuzz_nic_rx: set-up failed: %s: %s\n", what, strerror(err));
		abort();
	}
}

struct FuzzNic {
	alignas(64) uint8_t mem[kMem] = {};
	Queue cq_ring{64, sizeof(Cqe)};
	Queue rc_sq{16, send_wqe_stride(1)}, rc_rq{16, recv_wqe_stride(1)};
	Queue ring_sq{4, coll_wqe_stride(1)}, sw_sq{4, coll_wqe_stride(1)};
	Queue xchg_sq{4, coll_wqe_stride(1)}, none{1, 64};
	FuzzTransport *tr = nullptr;
	std::unique_ptr<Nic> nic; // last: destroyed first, while the queues live
	Cq *cq = nullptr;
	uint32_t pd = 0, key = 0;

	Qp *make_qp(Queue *sq, Queue *rq, bool coll, uint32_t expect_qpn)
	{
		QpCreate c;
		c.pdn = pd;
		c.sq = sq;
		c.rq = rq;
		c.send_cq = c.recv_cq = cq;
		c.coll = coll;
		Qp *qp;
		uint32_t qpn;
		check(nic->create_qp(c, &qp, &qpn), "create_qp");
		if (qpn != expect_qpn)
			check(EINVAL, "qp number");
		QpAttr a;
		a.state = QpState::init;
		a.access = kAccess;
		check(nic->modify_qp(qp, a, kQpState | kQpAccess | kQpPort), "init");
		return qp;
	}
	void post_coll(Qp *qp, Queue &sq, uint32_t off, uint64_t count)
	{
		auto *w = sq.at<CollWqe>(sq.prod_relaxed());
		memset(w, 0, sq.stride());
		w->wr_id = off;
		w->opcode = uint8_t(CollOp::allreduce);
		w->flags = kWqeSignaled;
		w->num_sge = 1;
		w->op = uint8_t(RedOp::sum);
		w->dtype = uint8_t(Dtype::int32);
		w->mid = 1; // as the provider numbers a job's first message
		w->count = count;
		w->srcs()[0] = Sge{uint64_t(uintptr_t(mem + off)), uint32_t(count * 4), key};
		w->dsts()[0] = Sge{uint64_t(uintptr_t(mem + off + 8192)), uint32_t(count * 4), key};
		sq.publish(sq.prod_relaxed() + 1);
		nic->sq_doorbell(qp);
	}
	void job(Qp *qp, uint32_t jid, uint32_t qpn, uint16_t nodes, bool sw, uint32_t seg_base)
	{
		JobConfig j;
		j.jid = jid;
		j.key = kKey;
		j.seg_base = seg_base;
		j.seg_count = 8;
		j.topology = sw ? Topology::sw : Topology::ring;
		std::vector<JobMember> &mem = j.members.mut();
		mem.resize(nodes);
		mem[0].ep = v4_endpoint(kSelf, kPort);
		mem[0].qpn = qpn;
		for (uint16_t i = 0; i < nodes; i++) {
			if (i)
				mem[i].ep = peer(i - 1u);
			if (i)
				mem[i].qpn = kPeerQpn;
			mem[i].ranks = 1;
		}
		if (sw) {
			j.sw.on = true;
			j.sw.leaf.push_back(peer(2));
		}
		QpAttr a;
		a.state = QpState::rtr;
		a.path_mtu = 1024;
		a.job = &j;
		check(nic->modify_qp(qp, a, kQpState | kQpPathMtu | kQpJob), "job rtr");
		a.state = QpState::rts;
		check(nic->modify_qp(qp, a, kQpState), "job rts");
	}

	FuzzNic()
	{
		NicParams p;
		p.name = "fuzz";
		p.gids.push_back(v4_endpoint(kSelf, 0).ip);
		p.udp_port = kPort;
		p.cfg.poll_us = 0;    // the engine thread sleeps: the fuzzer's thread drives
		p.cfg.seg_units = 64; // the jobs take 24; 4096 would cost 16 MiB per input
		p.cfg.coll_xchg_bytes = kXchgBytes;
		p.cfg.coll_xchg_bytes_host = kXchgBytes;
		p.transport = [this](std::unique_ptr<Transport> *out) {
			auto t = std::make_unique<FuzzTransport>(kPort);
			tr = t.get();
			*out = std::move(t);
			return 0;
		};
		check(Nic::create(p, &nic), "nic");
		check(nic->alloc_pd(&pd), "pd");
		check(nic->reg_mr(pd, mem, kMem, kAccess, &key), "mr");
		uint32_t cqn;
		check(nic->create_cq(&cq_ring, nullptr, nullptr, &cq, &cqn), "cq");

		// RC, connected to peer 0, with receive buffers posted.
		Qp *rc = make_qp(&rc_sq, &rc_rq, false, kQpRc);
		QpAttr a;
		a.state = QpState::rtr;
		a.path_mtu = 1024;
		a.remote = peer(0);
		a.dest_qpn = kPeerQpn;
		check(nic->modify_qp(rc, a, kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn),
		      "rc rtr");
		a.state = QpState::rts;
		check(nic->modify_qp(rc, a, kQpState | kQpSqPsn), "rc rts");
		for (uint32_t i = 0; i < 8; i++) {
			auto *w = rc_rq.at<RecvWqe>(i);
			w->wr_id = i;
			w->num_sge = 1;
			w->length = 1024;
			w->sges()[0] = Sge{uint64_t(uintptr_t(mem + 16384 + i * 1024)), 1024, key};
		}
		rc_rq.publish(8);
		nic->rq_doorbell(rc);

		// A three-node ring job and a two-node switch job (peer 2 the
		// switch), each running an allreduce of 600 int32.
		Qp *ring = make_qp(&ring_sq, &none, true, kQpRing);
		job(ring, kJidRing, kQpRing, 3, false, 0);
		post_coll(ring, ring_sq, 0, 600);
		Qp *swq = make_qp(&sw_sq, &none, true, kQpSw);
		job(swq, kJidSw, kQpSw, 2, true, 8);
		post_coll(swq, sw_sq, 32768, 600);
		// A three-node ring job whose 100 int32 go as the pairwise
		// exchange: this node (0) is its extra, node 1 its partner.
		Qp *xq = make_qp(&xchg_sq, &none, true, kQpXchg);
		job(xq, kJidXchg, kQpXchg, 3, false, 16);
		post_coll(xq, xchg_sq, 49152, 100);
	}

	// What a packet taken in by a job or an RC QP moves.
	static std::vector<uint64_t> taken(const NicCounters &c)
	{
		return {c.coll.rx_data,
			c.coll.rx_result,
			c.coll.reductions,
			c.coll.early_stored,
			c.coll.aborts_rcvd,
			c.coll.dup_dropped,
			c.coll.seg_busy,
			c.acks_sent,
			c.seq_naks_sent,
			c.rnr_naks_sent,
			c.rx_dup};
	}

	void feed(const uint8_t *d, size_t n)
	{
		const IpAddr self = v4_endpoint(kSelf, kPort).ip;
		for_each_record(d, n, [&](uint8_t f, const uint8_t *p, size_t len) {
			Endpoint src = peer(f);
			std::vector<uint8_t> pkt = frame(f, p, len, src, self, kPort);
			// Peer 3 is no member of any job and not the RC peer:
			// whatever it sends, no job or QP takes it in.
			const bool stranger = (f & 3) == 3;
			std::vector<uint64_t> before;
			if (stranger)
				before = taken(nic->counters());
			tr->put(pkt.data(), pkt.size(), src, self);
			while (tr->pending())
				nic->progress(cq);
			if (stranger && taken(nic->counters()) != before) {
				fprintf(stderr,
					"fuzz_nic_rx: a packet from a non-member was taken in\n");
				abort();
			}
		});
	}
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	auto d = std::make_unique<FuzzNic>();
	// The switch grants the switch job, as it would.
	std::vector<uint8_t> grant;
	wire::Ceth h;
	h.jid = kJidSw;
	h.src_node = sw::kNodeSwitch;
	h.seg = 8;
	h.node_map = 1;
	h.job_key = kKey;
	add_record(grant, 2, coll_bth(wire::kCollConfigAck, kQpSw), &h, nullptr, 0);
	d->feed(grant.data(), grant.size());
	d->feed(data, size);
	return 0;
}
