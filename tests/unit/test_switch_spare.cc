// The buffers a switch of several workers keeps for partials that wait
// their turn: a partial that comes before its turn in the fold (fp32: the
// fold keeps child order) is copied into a buffer of its unit's worker;
// when a later incarnation of the job takes its place, worker 0 frees
// those buffers and keeps them for its own next ones.  Worker 0 stashes
// nothing here, so before the bound it kept every buffer the others had
// taken: a switch of 4 workers grew by megabytes over a soak
// (scripts/soak.sh).  Driven in the test's thread, each packet by the
// worker the steering program would give it (fuzz_transport.h).
#include "fuzz_jobs.h"
#include "switch/switch.h"

#include <gtest/gtest.h>

using namespace ibvc_fuzz;
using namespace ibv_coll::emu;

TEST(SwitchSpare, WorkerZeroKeepsAtMostTheBoundOfBuffersOthersStashed)
{
	std::vector<FuzzTransport *> trs;
	SwitchParams p;
	p.name = "spare";
	p.port = kPort;
	p.units = 16;
	p.threads = 2;
	p.transport = [&](std::unique_ptr<Transport> *out) {
		auto t = std::make_unique<FuzzTransport>(kPort);
		trs.push_back(t.get());
		*out = std::move(t);
		return 0;
	};
	Switch sw(p);
	ASSERT_EQ(sw.open(), 0);
	ASSERT_EQ(trs.size(), 2u);
	const IpAddr self = v4_endpoint(kSelf, kPort).ip;
	auto serve = [&](unsigned k, const std::vector<uint8_t> &recs) {
		for_each_record(
			recs.data(), recs.size(), [&](uint8_t f, const uint8_t *d, size_t n) {
				const Endpoint src = peer(f);
				const std::vector<uint8_t> pkt = frame(f, d, n, src, self, kPort);
				trs[k]->put(pkt.data(), pkt.size(), src, self);
				sw.poll_worker(k);
			});
	};
	const float one = 1.0f;
	uint32_t be_one;
	memcpy(&be_one, &one, 4);
	be_one = __builtin_bswap32(be_one); // fp32 on the wire: big-endian
	const uint32_t rounds = 2 * Switch::kMaxSpare / 8;
	for (uint32_t inc = 0; inc < rounds; inc++) {
		// Both members in incarnation inc (worker 0): 8 units granted.
		std::vector<uint8_t> cfg;
		for (uint16_t n = 0; n < 2; n++)
			switch_config(cfg, kJidFlat, n, false, inc);
		serve(0, cfg);
		SwitchCounters c;
		ASSERT_TRUE(sw.job_counters(kJidFlat, &c));
		ASSERT_EQ(c.incarnations, inc);
		// Node 1's partial of each unit, on worker 1: each waits for
		// node 0's, in a buffer of worker 1's.
		std::vector<uint8_t> data;
		for (uint32_t q = 0; q < 8; q++) {
			wire::Ceth h;
			h.jid = kJidFlat;
			h.inc = inc;
			h.src_node = 1;
			h.node_map = 2;
			h.job_key = kKey;
			h.dtype = uint8_t(Dtype::float32);
			h.mid = 1;
			h.sid = h.seq = q;
			h.seg = uint16_t(q);
			h.len = 4;
			add_record(data, 1, coll_bth(wire::kCollData, kPeerQpn), &h, &be_one, 4);
		}
		serve(1, data);
	}
	SwitchCounters c;
	ASSERT_TRUE(sw.job_counters(kJidFlat, &c));
	EXPECT_EQ(c.delivered, 2 * rounds + 8 * rounds) << "CONFIGs and partials, each taken in";
	EXPECT_EQ(c.reductions, 0u) << "no partial went in before its turn";
	// Each later incarnation freed the 8 buffers on worker 0.
	EXPECT_LE(sw.spare_buffers(0), Switch::kMaxSpare);
	EXPECT_GE(sw.spare_buffers(0), Switch::kMaxSpare - 8);
}
