// A switch with several workers in one process: members played by plain
// UDP sockets (switch_peer.h) send a job's blocks over every unit, so that
// each worker's socket takes some (the steering program gives a block to
// the worker of its unit), interleaved with repeats, repeated CONFIGs,
// packets of an older incarnation, a RELEASE and a new incarnation.  Every
// result is checked against the sum computed here, and the switch's
// counters say that no partial was reduced twice and none was lost.
#include "switch_peer.h"

#include "switch/switch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace ibvc_test;
using ibv_coll::emu::Switch;
using ibv_coll::emu::SwitchCounters;
using ibv_coll::emu::SwitchParams;

namespace {

constexpr uint64_t kKey = 0x0123456789abcdefull;
// The Seg units the job asks for and gets (the whole pool): four runs of
// the 16 units one worker serves, so every worker of four takes some.
constexpr uint16_t kUnits = 64;

// Node n's task, asking for kUnits units.
std::vector<uint8_t> task_for(uint16_t n)
{
	Task t;
	t.node = n;
	t.qpn = 0x77 + n;
	t.seg_req = kUnits;
	return task(t);
}

// The switch served by its workers: worker 0 on a thread of the test.
class Served {
public:
	explicit Served(unsigned threads)
	{
		SwitchParams p;
		p.port = 0;
		p.units = kUnits;
		p.gso = false;
		p.threads = threads;
		p.poll_us = 200;
		sw_ = std::make_unique<Switch>(p);
		ok_ = sw_->open() == 0;
		if (ok_)
			th_ = std::thread([this] { sw_->run(stop_); });
	}
	~Served() { stop(); }
	// Worker 0 stops (its thread joined): with one worker, nothing else
	// may read the switch while it runs (only several workers lock).
	void stop()
	{
		stop_ = true;
		if (th_.joinable())
			th_.join();
	}
	bool ok() const { return ok_; }
	Switch &sw() { return *sw_; }

private:
	std::unique_ptr<Switch> sw_;
	std::atomic<bool> stop_{false};
	std::thread th_;
	bool ok_ = false;
};

// Both members introduce themselves in incarnation inc; true when both
// hear the grant of kUnits units.
bool configure(uint16_t to, const Peer &a, const Peer &b, uint32_t inc)
{
	const Peer *m[2] = {&a, &b};
	for (uint16_t n = 0; n < 2; n++) {
		Hdr h;
		h.opcode = 0xe4; // CONFIG
		h.key = kKey;
		h.inc = inc;
		h.src_node = n;
		h.node_map = 1u << n;
		m[n]->send(to, h, task_for(n));
	}
	for (const Peer *p : m) {
		Pkt pk;
		bool granted = false;
		while (!granted && p->recv(&pk, 2000))
			granted = pk.opcode == 0xe5 && pk.status == 0 && pk.seg == kUnits;
		if (!granted)
			return false;
	}
	return true;
}

// The partial of node n for block `seq` (on unit seq % kUnits).
Hdr partial(uint16_t n, uint32_t seq, uint32_t inc)
{
	Hdr h;
	h.key = kKey;
	h.inc = inc;
	h.src_node = n;
	h.node_map = 1u << n;
	h.mid = 1 + seq / 256;
	h.sid = seq;
	h.seq = seq;
	h.seg = uint16_t(seq % kUnits);
	return h;
}

int32_t value(uint16_t n, uint32_t seq, uint32_t inc)
{
	return int32_t(n ? 1000 * (seq + 1) + int32_t(inc) : seq + 7);
}

// Windows of kUnits blocks in incarnation inc, from block first on: each
// member's partials of a window, the first member's twice, a CONFIG
// repeated between them and a partial of the incarnation before; then
// every result of the window, at both members, checked.  Returns the
// blocks completed.
uint32_t run_windows(uint16_t to, const Peer &a, const Peer &b, uint32_t inc, uint32_t first,
		     uint32_t windows)
{
	uint32_t done = 0;
	for (uint32_t w = 0; w < windows; w++) {
		const uint32_t base = first + w * kUnits;
		for (uint32_t s = base; s < base + kUnits; s++)
			a.send(to, partial(0, s, inc), i32(value(0, s, inc)));
		Hdr cfg;
		cfg.opcode = 0xe4;
		cfg.key = kKey;
		cfg.inc = inc;
		cfg.src_node = 1;
		cfg.node_map = 2;
		b.send(to, cfg, task_for(1)); // a repeat: answered, changes nothing
		if (inc > 1)		      // the incarnation before: dropped
			b.send(to, partial(1, base, inc - 1), i32(-1000000));
		for (uint32_t s = base; s < base + kUnits; s++) {
			b.send(to, partial(1, s, inc), i32(value(1, s, inc)));
			a.send(to, partial(0, s, inc), i32(value(0, s, inc))); // a repeat
		}
		for (const Peer *p : {&a, &b}) {
			std::map<uint32_t, int32_t> got; // by block
			Pkt pk;
			while (got.size() < kUnits && p->recv(&pk, 3000)) {
				if (pk.opcode != 0xe1 || pk.payload.size() != 4)
					continue; // grants, NAKs
				const uint32_t s = pk.seq;
				EXPECT_EQ(pk.seg, s % kUnits);
				EXPECT_EQ(pk.value(), value(0, s, inc) + value(1, s, inc))
					<< "block " << s << " incarnation " << inc;
				if (s >= base && s < base + kUnits) // not a repeat's answer
					got[s] = pk.value();
			}
			EXPECT_EQ(got.size(), size_t(kUnits))
				<< "a result lost in window " << w << " of incarnation " << inc;
		}
		done += kUnits;
	}
	return done;
}

void interleaved(unsigned threads)
{
	Served s(threads);
	ASSERT_TRUE(s.ok());
	ASSERT_EQ(s.sw().workers(), threads);
	Peer a, b;
	const uint16_t to = s.sw().port();
	ASSERT_TRUE(configure(to, a, b, 1));
	uint32_t blocks = run_windows(to, a, b, 1, 0, 6);
	// Both leave; the job is configured again, in a new incarnation, and
	// its blocks start over.
	for (uint16_t n = 0; n < 2; n++) {
		Hdr r;
		r.opcode = 0xe6; // RELEASE
		r.key = kKey;
		r.src_node = n;
		r.node_map = 1u << n;
		(n ? b : a).send(to, r, {});
	}
	a.drain();
	b.drain();
	ASSERT_TRUE(configure(to, a, b, 2));
	blocks += run_windows(to, a, b, 2, 0, 6);
	// A new incarnation without a RELEASE: it takes the job's place.
	ASSERT_TRUE(configure(to, a, b, 3));
	blocks += run_windows(to, a, b, 3, 0, 6);

	s.stop();
	const SwitchCounters c = s.sw().totals();
	EXPECT_EQ(c.reductions, 2u * blocks) << "a partial reduced twice or lost";
	EXPECT_EQ(c.results, uint64_t(blocks));
	EXPECT_GE(c.duplicates, uint64_t(blocks)) << "the repeats were taken in";
	EXPECT_EQ(c.drop_incarnation, 12u);
	EXPECT_EQ(c.incarnations, 1u);
	EXPECT_EQ(c.rx_packets, c.delivered + c.drop_icrc + c.drop_malformed + c.drop_key +
					c.drop_job + c.drop_node + c.drop_block + c.drop_stale +
					c.drop_busy + c.drop_empty + c.drop_short + c.drop_kind +
					c.drop_incarnation + c.duplicates)
		<< "a datagram counted nowhere or twice";
	// Every worker's socket took some of them.
	const auto per = s.sw().worker_packets();
	ASSERT_EQ(per.size(), size_t(threads));
	uint64_t rx = 0;
	for (size_t k = 0; k < per.size(); k++) {
		EXPECT_GT(per[k].first, 0u) << "worker " << k << " took in nothing";
		rx += per[k].first;
	}
	// The batches the sockets really gave: at least a datagram and at most
	// a receive call's 32 on each call that gave any, and the packets over
	// the calls those the workers counted.
	char *text = nullptr;
	size_t text_len = 0;
	FILE *f = open_memstream(&text, &text_len);
	ASSERT_NE(f, nullptr);
	s.sw().print_stats(f, false);
	fclose(f);
	const std::string out(text, text_len);
	free(text);
	const size_t at = out.find("  per system call: in ");
	ASSERT_NE(at, std::string::npos) << out;
	double in = 0, dgrams = 0, tx = 0;
	unsigned long long calls = 0, tx_calls = 0;
	ASSERT_EQ(sscanf(out.c_str() + at,
			 "  per system call: in %lf packets (%lf datagrams) in %llu calls, out %lf "
			 "packets in %llu calls",
			 &in, &dgrams, &calls, &tx, &tx_calls),
		  5)
		<< out;
	EXPECT_GT(calls, 0u);
	EXPECT_GE(dgrams, 1.0);
	EXPECT_LE(dgrams, 32.0);
	EXPECT_GE(in, dgrams);
	EXPECT_NEAR(in * double(calls), double(rx), 0.05 * double(calls) + 1);
	EXPECT_GT(tx_calls, 0u);
	EXPECT_GE(tx, 1.0);
}

} // namespace

TEST(SwitchWorkers, OneWorker)
{
	interleaved(1);
}

TEST(SwitchWorkers, FourWorkersFoldEachPartialOnceAcrossConfigReleaseAndIncarnations)
{
	interleaved(4);
}
