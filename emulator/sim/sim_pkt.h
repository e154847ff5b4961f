// ibv_coll_sim's packets (sim/sim_fabric.h): recycled, and in phantom mode
// sharing their payloads.  Every rank of a phantom job sends the same
// source and every switch of a level folds the same partials, so the
// fabric's millions of packets in flight carry a few hundred distinct
// payloads: each is kept once (a Body, counted by the packets holding it)
// and a packet keeps only its headers and trailer.  Whoever reads a packet
// gets its bytes whole (flat()), as it would from a socket.
#pragma once

#include "net/transport.h"
#include "wire/roce.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ibv_coll::sim {

// A payload shared by the packets that carry the same bytes.
struct Body {
	std::vector<uint8_t> b;
	uint64_t hash = 0;
	uint32_t refs = 0;
};

// The payloads in flight, found by their bytes.
class BodyTable {
public:
	BodyTable() = default;
	BodyTable(const BodyTable &) = delete;
	BodyTable &operator=(const BodyTable &) = delete;
	~BodyTable()
	{
		for (auto &[h, b] : map_)
			delete b;
		for (Body *b : free_)
			delete b;
	}
	// The body holding these bytes, one more packet holding it.
	Body *get(const uint8_t *p, size_t n)
	{
		const uint64_t h = hash(p, n);
		auto [a, e] = map_.equal_range(h);
		for (; a != e; ++a)
			if (a->second->b.size() == n && !memcmp(a->second->b.data(), p, n)) {
				a->second->refs++;
				return a->second;
			}
		Body *b;
		if (free_.empty()) {
			b = new Body;
		} else {
			b = free_.back();
			free_.pop_back();
		}
		b->b.assign(p, p + n);
		b->hash = h;
		b->refs = 1;
		map_.emplace(h, b);
		return b;
	}
	// One packet fewer holds it.
	void put(Body *b)
	{
		if (--b->refs)
			return;
		auto [a, e] = map_.equal_range(b->hash);
		for (; a != e; ++a)
			if (a->second == b) {
				map_.erase(a);
				break;
			}
		free_.push_back(b);
	}
	size_t size() const { return map_.size(); }

private:
	// Eight bytes at a time, multiplied and folded: a hit is compared
	// byte by byte, so this only spreads the payloads over the table.
	static uint64_t hash(const uint8_t *p, size_t n)
	{
		uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
		size_t i = 0;
		for (; i + 8 <= n; i += 8) {
			uint64_t w;
			memcpy(&w, p + i, 8);
			h = (h ^ w) * 0xff51afd7ed558ccdull;
			h ^= h >> 29;
		}
		for (; i < n; i++)
			h = (h ^ p[i]) * 0x100000001b3ull;
		return h;
	}
	std::unordered_multimap<uint64_t, Body *> map_;
	std::vector<Body *> free_;
};

// Bytes a packet takes on a link beyond BTH..ICRC: Ethernet, IPv4, UDP
// (what tbf counts on a real link, without preamble and gap).
constexpr uint32_t kWireOverhead = uint32_t(emu::wire::kFrameBytes);

struct Pkt {
	// BTH .. ICRC; with a body, all of it but the payload, which goes
	// at `at`.
	std::vector<uint8_t> bytes;
	Body *body = nullptr;
	uint32_t at = 0;
	emu::Endpoint src;
	emu::IpAddr dst;
	uint8_t ecn = emu::kEcnEct0;
	uint64_t rx_ns = 0; // when it reached its host
	uint32_t link = 0;  // the link it is on
	size_t size() const { return bytes.size() + (body ? body->b.size() : 0); }
	uint32_t wire() const { return uint32_t(size()) + kWireOverhead; }
	// The whole packet: its bytes, or put together in `scratch`.
	uint8_t *flat(std::vector<uint8_t> &scratch)
	{
		if (!body)
			return bytes.data();
		scratch.resize(size());
		memcpy(scratch.data(), bytes.data(), at);
		memcpy(scratch.data() + at, body->b.data(), body->b.size());
		memcpy(scratch.data() + at + body->b.size(), bytes.data() + at, bytes.size() - at);
		return scratch.data();
	}
};

// Packets are recycled, their buffers with them: at 65,535 hosts the
// fabric holds millions of packets at once, and malloc's search for a
// 4 KiB block among them took most of a run.
struct PktPool;
struct PktRecycle {
	PktPool *pool = nullptr;
	void operator()(Pkt *p) const;
};
using PktPtr = std::unique_ptr<Pkt, PktRecycle>;
struct PktPool {
	BodyTable bodies; // last: every packet's body goes back to it first
	std::vector<Pkt *> free;
	PktPtr get()
	{
		if (free.empty())
			return PktPtr(new Pkt, PktRecycle{this});
		Pkt *p = free.back();
		free.pop_back();
		return PktPtr(p, PktRecycle{this});
	}
	~PktPool()
	{
		for (Pkt *p : free)
			delete p;
	}
};
inline void PktRecycle::operator()(Pkt *p) const
{
	if (p->body) {
		if (pool)
			pool->bodies.put(p->body);
		p->body = nullptr;
	}
	if (!pool) {
		delete p;
		return;
	}
	p->bytes.clear(); // its capacity stays for the next
	p->at = 0;
	p->ecn = emu::kEcnEct0;
	p->rx_ns = 0;
	p->link = 0;
	pool->free.push_back(p);
}

} // namespace ibv_coll::sim
