// Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/):
// packets as the NIC and the switch send them to each other, for the jobs
// and QPs the targets set up (fuzz_jobs.h), and typical values of the
// configuration variables and ibv_coll_perf's options.  Run by
// scripts/fuzz.sh --seed; the output is committed.
#include "fuzz_jobs.h"
#include "nic/cc.h"
#include "nic/wqe.h"
#include "reduce/reduce.h"

#include <sys/stat.h>

#include <cstdio>
#include <random>
#include <string>

using namespace ibvc_fuzz;
using namespace ibv_coll::emu;

namespace {

std::string g_root;

void put(const std::string &target, const std::string &name, const std::vector<uint8_t> &b)
{
	std::string dir = g_root + "/" + target;
	mkdir(dir.c_str(), 0755);
	FILE *f = fopen((dir + "/" + name).c_str(), "wb");
	if (!f) {
		perror(dir.c_str());
		exit(1);
	}
	fwrite(b.data(), 1, b.size(), f);
	fclose(f);
}

void put_text(const std::string &target, const std::string &name, const std::string &s)
{
	put(target, name, std::vector<uint8_t>(s.begin(), s.end()));
}

std::vector<uint8_t> i32s(uint32_t n, int32_t v)
{
	std::vector<uint8_t> b(n * 4);
	for (uint32_t i = 0; i < n; i++)
		memcpy(b.data() + 4 * i, &v, 4);
	return b;
}

wire::Ceth ceth(uint32_t jid, uint16_t src_node, uint32_t mid, uint32_t sid, uint64_t node_map,
		uint32_t len)
{
	wire::Ceth h;
	h.coll = 0x40; // allreduce
	h.op = uint8_t(RedOp::sum);
	h.dtype = uint8_t(Dtype::int32);
	h.jid = jid;
	h.src_node = src_node;
	h.mid = mid;
	h.sid = sid;
	h.node_map = node_map;
	h.rank_map = 1;
	h.len = uint16_t(len);
	h.job_key = kKey;
	h.inc = 1;   // the jobs' first incarnation (each QP is given its job once)
	h.seq = sid; // the block's number in the job: the seeds' messages are each a job's first
	return h;
}

void nic_seeds()
{
	const std::string t = "fuzz_nic_rx";
	std::vector<uint8_t> r;
	// RC: a SEND, a WRITE with RETH, a WRITE with immediate, a READ
	// request, an ACK and a NAK (AETH), from the connected peer.
	wire::Bth b;
	b.dqpn = kQpRc;
	b.opcode = wire::kSendOnly;
	std::vector<uint8_t> pl(100, 0x5a);
	add_record(r, 0, b, nullptr, pl.data(), pl.size());
	put(t, "rc_send", r);
	r.clear();
	uint8_t reth[16 + 100] = {};
	wire::Reth rh;
	rh.va = 0; // within the region only by the fuzzer's luck: the check is the point
	rh.rkey = 1;
	rh.len = 100;
	rh.store(reth);
	b.opcode = wire::kWriteOnly;
	add_record(r, 0, b, nullptr, reth, sizeof(reth));
	put(t, "rc_write", r);
	r.clear();
	uint8_t reth_imm[16 + 4 + 8] = {};
	rh.len = 8;
	rh.store(reth_imm);
	b.opcode = wire::kWriteOnlyImm;
	add_record(r, 0, b, nullptr, reth_imm, sizeof(reth_imm));
	put(t, "rc_write_imm", r);
	r.clear();
	b.opcode = wire::kReadRequest;
	rh.len = 64;
	rh.store(reth);
	add_record(r, 0, b, nullptr, reth, 16);
	put(t, "rc_read", r);
	r.clear();
	uint8_t aeth[4] = {wire::kSynAckNoCredit, 0, 0, 0};
	b.opcode = wire::kAck;
	add_record(r, 0, b, nullptr, aeth, 4);
	aeth[0] = wire::kSynNakSeqErr;
	add_record(r, 0, b, nullptr, aeth, 4);
	put(t, "rc_ack_nak", r);
	r.clear();
	b.opcode = wire::kReadRespOnly;
	std::vector<uint8_t> rr(4 + 64, 0);
	add_record(r, 0, b, nullptr, rr.data(), rr.size());
	put(t, "rc_read_resp", r);
	r.clear();
	// Congestion notifications (nic/cc.h): to the RC QP from its peer, to
	// the ring job's QP from a member, and to the switch job's QP from a
	// member (its ring flow never ran).
	uint8_t cnp_rsvd[kCnpRsvdBytes] = {};
	b.opcode = kOpCnp;
	add_record(r, 0, b, nullptr, cnp_rsvd, sizeof(cnp_rsvd));
	b.dqpn = kQpRing;
	add_record(r, 1, b, nullptr, cnp_rsvd, sizeof(cnp_rsvd));
	b.dqpn = kQpSw;
	add_record(r, 1, b, nullptr, cnp_rsvd, sizeof(cnp_rsvd));
	put(t, "cnp", r);
	r.clear();

	// Ring job (3 nodes, 600 int32 = 2400 bytes: chunks of 800 bytes):
	// node 1's and node 2's partials and results of the first blocks.
	for (uint16_t n = 1; n <= 2; n++) {
		for (uint32_t sid = 0; sid < 3; sid++) {
			wire::Ceth h = ceth(kJidRing, n, 1, sid, 1u << n, 800);
			h.phase = 1;
			auto p = i32s(200, int32_t(n));
			add_record(r, uint8_t(n - 1), coll_bth(wire::kCollData, kQpRing), &h,
				   p.data(), p.size());
		}
	}
	put(t, "ring_data", r);
	r.clear();
	for (uint32_t sid = 0; sid < 3; sid++) {
		wire::Ceth h = ceth(kJidRing, 2, 1, sid, 7, 800);
		h.phase = 1;
		auto p = i32s(200, 3);
		add_record(r, 1, coll_bth(wire::kCollResult, kQpRing), &h, p.data(), p.size());
		h.phase = 2;
		h.len = 0;
		add_record(r, 1, coll_bth(wire::kCollResult, kQpRing), &h, nullptr, 0);
	}
	put(t, "ring_result", r);
	r.clear();
	wire::Ceth ab = ceth(kJidRing, 1, 1, 0, 2, 0);
	ab.status = uint8_t(CollStatus::remote_abort);
	add_record(r, 0, coll_bth(wire::kCollAbort, kQpRing), &ab, nullptr, 0);
	put(t, "ring_abort", r);
	r.clear();

	// The exchange job (3 nodes, 100 int32): node 1 acknowledges this
	// node's phase-0 partial and sends the result (phase 2), twice; node
	// 2, no peer of this node's, sends a partial of phase 1.
	wire::Ceth x = ceth(kJidXchg, 1, 1, 0, 0, 0);
	x.flags = wire::kCethXchgAck;
	x.seq = 0;
	add_record(r, 0, coll_bth(wire::kCollXchg, kQpXchg), &x, nullptr, 0);
	x.flags = 0;
	x.phase = 2;
	x.len = 400;
	auto xp = i32s(100, 6);
	for (int i = 0; i < 2; i++)
		add_record(r, 0, coll_bth(wire::kCollXchg, kQpXchg), &x, xp.data(), xp.size());
	x.src_node = 2;
	x.phase = 1;
	add_record(r, 1, coll_bth(wire::kCollXchg, kQpXchg), &x, xp.data(), xp.size());
	put(t, "xchg", r);
	r.clear();

	// Switch job: results of blocks 0..2 from the switch (peer 2), and
	// an ACK.
	for (uint32_t sid = 0; sid < 3; sid++) {
		wire::Ceth h = ceth(kJidSw, sw::kNodeSwitch, 1, sid, 3, 1024);
		h.seg = uint16_t(sid);
		auto p = i32s(256, 5);
		add_record(r, 2, coll_bth(wire::kCollResult, kQpSw), &h, p.data(), p.size());
	}
	put(t, "sw_result", r);
	r.clear();
	wire::Ceth ack = ceth(kJidSw, 1, 1, 0, 2, 0);
	add_record(r, 0, coll_bth(wire::kCollAck, kQpSw), &ack, nullptr, 0);
	put(t, "sw_ack", r);
	r.clear();
	wire::Ceth deny = ceth(kJidSw, sw::kNodeSwitch, 0, 0, 1, 0);
	deny.status = uint8_t(CollStatus::denied);
	add_record(r, 2, coll_bth(wire::kCollConfigAck, kQpSw), &deny, nullptr, 0);
	put(t, "sw_denied", r);
	r.clear();
	// A result posing as a switch's, to the ring job (which has none).
	wire::Ceth fs = ceth(kJidRing, sw::kNodeSwitch, 1, 0, 7, 800);
	auto fp = i32s(200, 9);
	add_record(r, 2, coll_bth(wire::kCollResult, kQpRing), &fs, fp.data(), fp.size());
	put(t, "ring_forged_switch", r);
}

void switch_seeds()
{
	const std::string t = "fuzz_switch_rx";
	std::vector<uint8_t> r;
	// Both nodes' partials of the first blocks of job 1 (4 bytes each),
	// and a repeat.
	for (uint32_t sid = 0; sid < 3; sid++)
		for (uint16_t n = 0; n < 2; n++) {
			wire::Ceth h = ceth(kJidFlat, n, 1, sid, 1u << n, 16);
			h.seg = uint16_t(sid);
			auto p = i32s(4, n + 1);
			add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, p.data(),
				   p.size());
		}
	put(t, "flat_data", r);
	// ... then both RELEASE.
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidFlat, n, 0, 0, 1u << n, 0);
		add_record(r, uint8_t(n), coll_bth(wire::kCollRelease), &h, nullptr, 0);
	}
	put(t, "flat_data_release", r);
	r.clear();
	// Loss recovery: node 1's partial of block 0 is lost; blocks 1 and 2
	// complete, so the switch NAKs node 1 for block 0; both nodes ASK for
	// it (no payload), then node 1 sends it again and asks once more.
	for (uint32_t sid = 0; sid < 3; sid++)
		for (uint16_t n = 0; n < 2; n++) {
			if (sid == 0 && n == 1)
				continue;
			wire::Ceth h = ceth(kJidFlat, n, 1, sid, 1u << n, 16);
			h.seg = uint16_t(sid);
			auto p = i32s(4, n + 1);
			add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, p.data(),
				   p.size());
		}
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidFlat, n, 1, 0, 1u << n, 0);
		h.flags = wire::kCethAsk | wire::kCethRetrans;
		add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, nullptr, 0);
	}
	{
		wire::Ceth h = ceth(kJidFlat, 1, 1, 0, 2, 16);
		h.flags = wire::kCethRetrans;
		auto p = i32s(4, 2);
		add_record(r, 1, coll_bth(wire::kCollData), &h, p.data(), p.size());
		h = ceth(kJidFlat, 1, 1, 0, 2, 0);
		h.flags = wire::kCethAsk | wire::kCethRetrans;
		add_record(r, 1, coll_bth(wire::kCollData), &h, nullptr, 0);
	}
	put(t, "flat_loss_nak_ask", r);
	r.clear();
	// Time division (a tdm switch): both nodes ask for the pool for
	// message 2 (4 KiB, a 1 s timeout), then say they have its results.
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidFlat, n, 2, 0, 1u << n, 0);
		h.flags = wire::kCethAdmit;
		h.seq = 1000;
		h.rank_map = 4096;
		add_record(r, uint8_t(n), coll_bth(wire::kCollConfig), &h, nullptr, 0);
	}
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidFlat, n, 2, 0, 1u << n, 0);
		h.flags = wire::kCethAdmit;
		add_record(r, uint8_t(n), coll_bth(wire::kCollRelease), &h, nullptr, 0);
	}
	put(t, "tdm_admit", r);
	r.clear();
	// Job 2 below its parent: partials go up, the parent's result comes down.
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidTree, n, 1, 0, 1u << n, 16);
		auto p = i32s(4, 7);
		add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, p.data(), p.size());
	}
	wire::Ceth res = ceth(kJidTree, sw::kNodeSwitch, 1, 0, 3, 16);
	auto p = i32s(4, 14);
	add_record(r, 2, coll_bth(wire::kCollResult), &res, p.data(), p.size());
	put(t, "tree_data_result", r);
	r.clear();
	// Job 2: the partials go up, the parent NAKs the leaf (its partial is
	// lost), the leaf sends it up again.
	for (uint16_t n = 0; n < 2; n++) {
		wire::Ceth h = ceth(kJidTree, n, 1, 0, 1u << n, 16);
		auto d = i32s(4, 7);
		add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, d.data(), d.size());
	}
	wire::Ceth nak = ceth(kJidTree, sw::kNodeSwitch, 1, 0, 3, 0);
	nak.flags = wire::kCethNak;
	add_record(r, 2, coll_bth(wire::kCollResult), &nak, nullptr, 0);
	put(t, "tree_parent_nak", r);
	r.clear();
	// An inline job: DATA carrying its task.
	sw::Task task;
	task.node = 0;
	task.nodes = 2;
	task.qpn = kPeerQpn;
	task.members = task.subtree = 3;
	task.seg_req = 4;
	for (uint16_t n = 0; n < 2; n++) {
		task.node = n;
		std::vector<uint8_t> pl(sw::kTaskBytes);
		task.store(pl.data());
		auto d = i32s(4, 9);
		pl.insert(pl.end(), d.begin(), d.end());
		wire::Ceth h = ceth(5, n, 1, 0, 1u << n, uint32_t(pl.size()));
		h.flags = wire::kCethInline;
		add_record(r, uint8_t(n), coll_bth(wire::kCollData), &h, pl.data(), pl.size());
	}
	put(t, "inline_data", r);
	r.clear();
	// A new job's configuration from a stranger's address.
	switch_config(r, 3, 0, false);
	r[0] = 3;
	put(t, "config_new", r);
	r.clear();
	// Job 1 given again (incarnation 1 over the set-up's 0): node 0 from
	// the stranger's address (its process restarted on another port; the
	// key admits it), node 1 from its own.
	switch_config(r, kJidFlat, 0, false, 1);
	r[0] = 3;
	switch_config(r, kJidFlat, 1, false, 1);
	put(t, "config_moved", r);
	r.clear();
	// The moved member's CONFIG twice (its repeat, a member's now), then
	// node 1's.
	for (int i = 0; i < 2; i++) {
		const size_t at = r.size();
		switch_config(r, kJidFlat, 0, false, 1);
		r[at] = 3;
	}
	switch_config(r, kJidFlat, 1, false, 1);
	put(t, "config_moved_again", r);
	r.clear();
	// The key does not take a node its member holds: node 0's CONFIG of
	// the set-up's incarnation from the stranger's address is dropped.
	switch_config(r, kJidFlat, 0, false);
	r[0] = 3;
	put(t, "config_claims_held", r);
	r.clear();
	// A keyed CONFIG of a later incarnation whose sender names node 4 of
	// two: it neither joins nor ends the running incarnation.
	switch_config(r, kJidFlat, 4, false, 1, 1);
	r[0] = 3;
	put(t, "config_again_cannot_join", r);
	r.clear();
	// A three-level job: each node's CONFIG carries the Above record (its
	// leaf's spine as the core's child).
	for (uint16_t n = 0; n < 2; n++) {
		sw::Task tk;
		tk.node = n;
		tk.nodes = 2;
		tk.qpn = kPeerQpn;
		tk.members = 3;
		tk.subtree = 3;
		tk.seg_req = 8;
		const Endpoint p = peer(2);
		tk.parent_port = p.port;
		memcpy(tk.parent_ip, p.ip.b, 16);
		sw::Above a;
		a.subtree = 1;
		a.up = 1;
		a.parent_port = p.port;
		memcpy(a.parent_ip, p.ip.b, 16);
		std::vector<uint8_t> pl(sw::kTaskBytes + sw::kAboveBytes);
		tk.store(pl.data());
		a.store(pl.data() + sw::kTaskBytes);
		wire::Ceth h = ceth(6, n, 1, 0, 1u << n, uint32_t(pl.size()));
		add_record(r, uint8_t(n), coll_bth(wire::kCollConfig), &h, pl.data(), pl.size());
	}
	put(t, "config_three_levels", r);
}

void text_seeds()
{
	// fuzz_config: variable index, then value.
	const char *cfg[] = {"\x00"
			     "2000",
			     "\x01"
			     "0x10",
			     "\x02"
			     "yes",
			     "\x03"
			     "0.5",
			     "\x04"
			     "drop=0.05,dup=0.01,reorder=0.01,seed=7",
			     "\x05"
			     "off",
			     "\x06"
			     "18446744073709551615",
			     "\x07"
			     "loss=1"};
	int i = 0;
	for (const char *c : cfg)
		put_text("fuzz_config", "v" + std::to_string(i++), std::string(c, 1) + (c + 1));
	// fuzz_perf_opts: arguments separated by NUL.
	const std::vector<std::vector<std::string>> opts = {
		{"-b", "8", "-e", "1M", "-f", "2", "-d", "int32", "-o", "max"},
		{"-C", "bcast", "-r", "0", "-k", "4", "-t", "switch", "-s", "127.0.0.1:4791", "-s",
		 "[::1]:4792/17"},
		{"--boot", "unix:/tmp/x", "--node", "1", "--nodes", "4", "-D", "crxe_%d"},
		{"--topology", "auto", "--e2e-ack", "--window", "8", "-s", "10.0.0.1:5000", "-z",
		 "1"},
		{"-C", "reduce_scatter", "-d", "float16", "-o", "avg", "-n", "5", "-w", "0", "-c",
		 "0", "--spin-us", "10", "--gid-index", "1"},
	};
	i = 0;
	for (const auto &args : opts) {
		std::string o;
		for (const std::string &a : args)
			o += a + '\0';
		o.pop_back();
		put_text("fuzz_perf_opts", "o" + std::to_string(i++), o);
	}
}

// fuzz_coll_api reads its input with FuzzedDataProvider, which takes
// any bytes: seeds of fixed pseudo-random bytes, long enough for a job of
// a few members and a chain of WRs.
void api_seeds()
{
	std::mt19937 rng(15);
	for (int i = 0; i < 8; i++) {
		std::vector<uint8_t> b(size_t(200 + 100 * i));
		for (uint8_t &x : b)
			x = uint8_t(rng());
		put("fuzz_coll_api", "r" + std::to_string(i), b);
	}
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	g_root = argv[1];
	mkdir(g_root.c_str(), 0755);
	nic_seeds();
	switch_seeds();
	text_seeds();
	api_seeds();
	return 0;
}
