// The jobs the receive-path fuzz targets set up before each input, and
// the addresses their packets come from: shared with the seed generator,
// so that seeds name QPs, jobs and keys that exist.
#pragma once

#include "fuzz_transport.h"
#include "wire/swproto.h"

namespace ibvc_fuzz {

constexpr uint16_t kPort = 4791; // the device's or switch's own port
constexpr uint8_t kSelf = 1;	 // 127.0.0.1
constexpr uint64_t kKey = 0x6b65796b65796b65ull;
constexpr uint32_t kJidFlat = 1, kJidTree = 2;		   // the switch's jobs (tree: has a parent)
constexpr uint32_t kJidRing = 7, kJidSw = 8, kJidXchg = 9; // the NIC's collective jobs
// as the NIC numbers them
constexpr uint32_t kQpRc = 0x11, kQpRing = 0x12, kQpSw = 0x13, kQpXchg = 0x14;
// The NIC runs a ring job's allreduce of at most this many bytes as the
// pairwise exchange: the ring job's 2400 go round the ring, the exchange
// job's 400 do not.
constexpr uint32_t kXchgBytes = 2048;
constexpr uint32_t kPeerQpn = 0x99;

// Framing byte low bits: 0 node 1 (switch: node 0), 1 node 2 (switch:
// node 1), 2 the switch (switch: its parent), 3 a stranger.
inline Endpoint peer(unsigned i)
{
	static const uint8_t last[4] = {2, 3, 4, 5};
	static const uint16_t port[4] = {5000, 5001, kPort, 6000};
	return v4_endpoint(last[i & 3], port[i & 3]);
}

inline ibv_coll::emu::wire::Bth coll_bth(uint8_t kind, uint32_t dqpn = 0)
{
	ibv_coll::emu::wire::Bth b;
	b.opcode = kind;
	b.dqpn = dqpn;
	return b;
}

// CONFIG from node `node` of a two-node job, its task naming the parent
// switch (peer 2) when tree; its node map `node_map` (0: the node's bit).
inline void switch_config(std::vector<uint8_t> &out, uint32_t jid, uint16_t node, bool tree,
			  uint32_t inc = 0, uint64_t node_map = 0)
{
	using namespace ibv_coll::emu;
	wire::Ceth h;
	h.jid = jid;
	h.inc = inc;
	h.src_node = node;
	h.node_map = node_map ? node_map : 1ull << node;
	h.job_key = kKey;
	h.len = sw::kTaskBytes;
	sw::Task t;
	t.node = node;
	t.nodes = 2;
	t.qpn = kPeerQpn;
	t.members = t.subtree = 3;
	t.seg_req = 8;
	if (tree) {
		Endpoint p = peer(2);
		t.parent_port = p.port;
		memcpy(t.parent_ip, p.ip.b, 16);
	}
	uint8_t tb[sw::kTaskBytes];
	t.store(tb);
	add_record(out, uint8_t(node), coll_bth(wire::kCollConfig), &h, tb, sizeof(tb));
}

// The switch's set-up: job 1 with both nodes configured (granted), job 2
// the same below a parent that then grants it.
inline std::vector<uint8_t> switch_setup()
{
	using namespace ibv_coll::emu;
	std::vector<uint8_t> r;
	for (uint16_t n = 0; n < 2; n++)
		switch_config(r, kJidFlat, n, false);
	for (uint16_t n = 0; n < 2; n++)
		switch_config(r, kJidTree, n, true);
	wire::Ceth h;
	h.jid = kJidTree;
	h.src_node = sw::kNodeSwitch;
	h.seg = 8;
	h.node_map = 3;
	h.job_key = kKey;
	add_record(r, 2, coll_bth(wire::kCollConfigAck), &h, nullptr, 0);
	return r;
}

} // namespace ibvc_fuzz
