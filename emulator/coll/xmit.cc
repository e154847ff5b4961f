// Data transmission: the chain of block descriptors built once per
// message, the DMA between blocks and the local ranks' buffers (every
// access checked against the MR table first), and sending collective
// packets (BTH + CETH + extension + payload) through the host's port.
#include "coll/coll_engine.h"

#include "nic/mr_table.h"
#include "wire/swproto.h"
#include "nic/nic.h"
#include "wire/coll_codec.h"
#include "util/log.h"

#include <algorithm>
#include <cstring>

#include <immintrin.h>
#include <mutex>

namespace ibv_coll::emu {

namespace {

uint64_t first_rank_elem(const JobConfig &c, uint16_t node, uint64_t count)
{
	return uint64_t(c.members[node].first_rank) * count;
}

} // namespace

// The layout itself, into chain and chunks.
static void lay_out(const JobConfig &c, const Message &m, uint32_t path_mtu,
		    std::vector<BlockDesc> &chain, std::vector<ChunkRole> &chunks)
{
	const uint16_t N = c.nodes();
	uint32_t bytes = path_mtu;
	if (c.block_len && c.block_len < bytes)
		bytes = c.block_len;
	uint32_t block_elems = std::max<uint32_t>(bytes / m.es, 1);

	// Through switches a chunk is a run of whole blocks, so no chunk ends
	// in a short block (one more packet, and a partial one, per chunk and
	// node: at 1,024 nodes and 1 MiB every chunk's block was cut in two).
	// The layout follows the job's configuration alone, so that every
	// member agrees, also when AUTO's message turns to the ring.
	const bool whole = c.sw.on && c.topology != Topology::ring;
	const uint64_t B = (m.count + block_elems - 1) / block_elems;
	// Only the chunks that have blocks are kept (a block names its chunk
	// by its place among them): through switches a message of B < N
	// blocks leaves most nodes' chunks empty, and at 65,536 nodes a table
	// of N chunks per message on every node was O(N^2) in a simulation.
	auto add_blocks = [&](uint64_t b, uint64_t e) {
		for (uint64_t v = b; v < e; v += block_elems)
			chain.push_back(BlockDesc{v,
						  uint32_t(std::min<uint64_t>(block_elems, e - v)),
						  uint16_t(chunks.size()), uint8_t(m.op), 0});
	};
	// Where B < N only B chunks have blocks: the loop jumps from one to the
	// next (chunk c holds blocks [B c / N, B (c + 1) / N)), so each node's
	// layout costs O(B), not O(N) (O(N^2) over a simulated job).
	const bool sparse = whole && B < N &&
			    (m.coll == CollOp::allreduce || m.coll == CollOp::reduce);
	auto next_chunk = [&](uint32_t ch) -> uint32_t {
		if (!sparse)
			return ch + 1;
		const uint64_t b = B * (ch + 1) / N; // the first block after chunk ch
		return b >= B ? N : uint32_t(((b + 1) * N + B - 1) / B - 1);
	};
	for (uint32_t ch = 0; ch < N; ch = next_chunk(ch)) {
		ChunkRole r;
		r.first_sid = uint32_t(chain.size());
		switch (m.coll) {
		case CollOp::allreduce:
		case CollOp::reduce:
		case CollOp::barrier: {
			// N near-equal chunks (of whole blocks through switches); chunk
			// ch starts at node ch and is complete at the node before it.
			uint64_t L = m.coll == CollOp::barrier ? N : m.count;
			if (whole && m.coll != CollOp::barrier) {
				r.vbegin = std::min<uint64_t>(L, B * ch / N * block_elems);
				r.vend = std::min<uint64_t>(L, B * (ch + 1) / N * block_elems);
			} else {
				r.vbegin = L * ch / N;
				r.vend = L * (ch + 1) / N;
			}
			r.rs = true;
			r.origin = uint16_t(ch);
			r.fin = uint16_t((ch + N - 1) % N);
			add_blocks(r.vbegin, r.vend);
			break;
		}
		case CollOp::reduce_scatter:
		case CollOp::allgather: {
			// Chunk ch is node ch's ranks' part of the vector: reduce-scatter
			// ends it at node ch, allgather starts it there.
			r.vbegin = first_rank_elem(c, ch, m.count);
			r.vend = r.vbegin + uint64_t(c.members[ch].ranks) * m.count;
			r.fin = uint16_t(ch);
			r.rs = m.coll == CollOp::reduce_scatter;
			r.origin = r.rs ? uint16_t((ch + 1) % N) : uint16_t(ch);
			// Blocks never straddle two ranks' parts.
			for (uint64_t v = r.vbegin; v < r.vend; v += m.count)
				add_blocks(v, v + m.count);
			break;
		}
		case CollOp::bcast:
			r.fin = r.origin = uint16_t(ch);
			if (ch == m.root_node) {
				r.vbegin = 0;
				r.vend = m.count;
				add_blocks(0, m.count);
			}
			break;
		case CollOp::query: break;
		}
		r.nblocks = uint32_t(chain.size()) - r.first_sid;
		if (r.nblocks)
			chunks.push_back(r);
	}
	if (!chain.empty())
		chain.back().end = 1;
}

// What a layout depends on besides the member lists.
struct LayoutKey {
	CollOp coll;
	RedOp op;
	uint32_t es, path_mtu, block_len;
	uint64_t count;
	uint16_t root_node;
	bool sw;
	Topology topology;
	bool operator==(const LayoutKey &o) const
	{
		return coll == o.coll && op == o.op && es == o.es && path_mtu == o.path_mtu &&
		       block_len == o.block_len && count == o.count && root_node == o.root_node &&
		       sw == o.sw && topology == o.topology;
	}
};

// The last layout made for a job's member lists, shared by every copy of
// its configuration (JobShape): the next message of the same shape, on
// this node or (in a simulation) on any other, takes it, one array for
// all of them.
struct LayoutCache {
	std::mutex mu;
	bool valid = false;
	LayoutKey key{};
	util::CowVector<BlockDesc> chain;
	util::CowVector<ChunkRole> chunks;
};

std::shared_ptr<LayoutCache> new_layout_cache()
{
	return std::make_shared<LayoutCache>();
}

void build_chain(const JobConfig &c, Message &m, uint32_t path_mtu)
{
	m.result_data = m.coll != CollOp::reduce_scatter;
	const LayoutKey key{m.coll,  m.op,	  m.es,	   path_mtu,  c.block_len,
			    m.count, m.root_node, c.sw.on, c.topology};
	LayoutCache *cache = c.shape ? c.shape->layout.get() : nullptr;
	std::unique_lock<std::mutex> hold;
	if (cache) {
		hold = std::unique_lock<std::mutex>(cache->mu);
		if (cache->valid && cache->key == key) {
			m.chain = cache->chain;
			m.chunks = cache->chunks;
			m.nblocks = uint32_t(m.chain.size());
			return;
		}
	}
	std::vector<BlockDesc> chain;
	std::vector<ChunkRole> chunks;
	lay_out(c, m, path_mtu, chain, chunks);
	m.chain = std::move(chain);
	m.chunks = std::move(chunks);
	m.nblocks = uint32_t(m.chain.size());
	if (cache) {
		cache->valid = true;
		cache->key = key;
		cache->chain = m.chain;
		cache->chunks = m.chunks;
	}
}

void CollEngine::one_block(const CollJob &job, Message &m)
{
	const uint64_t n = m.coll == CollOp::barrier ? 0 : m.count;
	ChunkRole r;
	r.vend = n;
	r.nblocks = 1;
	r.origin = r.fin = job.cfg.node;
	r.rs = true;
	m.chunks = {r};
	m.chain = {BlockDesc{0, uint32_t(n), 0, uint8_t(m.op), 1}};
	m.result_data = true;
	m.nblocks = 1;
}

// Check one local buffer access.
static bool dma_ok(CollHost &e, uint32_t pdn, const Sge &s, uint64_t off, uint64_t len,
		   uint32_t need)
{
	if (!len)
		return true;
	if (off + len > s.length)
		return false;
	return e.dma_ok(s.lkey, pdn, s.addr + off, len, need);
}

// How many bytes one copy to or from another process moves at most when
// it reads ahead or writes a run of results: a system call and the page
// walk behind it cost what a 16 KiB memcpy does, so one per 1 KiB block
// moved 0.37 GB/s and one per 64 KiB 4.3 GB/s (process_vm_readv, 2-core
// host, 8 GB/s memcpy).
constexpr uint64_t kDmaRunBytes = 64 * 1024;

// The elements of block b's run: from b on, up to kDmaRunBytes, within
// its chunk and (allgather) the rank's part of the vector.
static uint64_t run_end(const Message &m, const BlockDesc &b)
{
	uint64_t e = std::min<uint64_t>(m.chunks[b.chunk].vend,
					b.voff + std::max<uint64_t>(kDmaRunBytes / m.es, 1));
	if (m.coll == CollOp::allgather || m.coll == CollOp::reduce_scatter)
		e = std::min<uint64_t>(e, (b.voff / m.count + 1) * m.count);
	return std::max<uint64_t>(e, b.voff + b.elems);
}

bool CollCore::read_ahead(Message &m, const BlockDesc &b)
{
	if (b.voff >= m.ahead_b && b.voff + b.elems <= m.ahead_e)
		return true;
	uint64_t e = run_end(m, b);
	for (uint16_t r = 0; r < m.ranks; r++)
		if (m.rank[r].space != kLocalSpace &&
		    !dma_ok(e_, m.rank[r].pdn, m.rank[r].src, b.voff * m.es, (e - b.voff) * m.es,
			    0))
			e = b.voff + b.elems; // the caller checked the block itself
	const uint64_t stride = (e - b.voff) * m.es;
	if (m.ahead.size() < stride * m.ranks)
		m.ahead.resize(stride * m.ranks);
	m.ahead_b = m.ahead_e = 0; // nothing valid while it is refilled
	for (uint16_t r = 0; r < m.ranks; r++)
		if (m.rank[r].space != kLocalSpace &&
		    !dma_read(m.rank[r].space, m.ahead.data() + stride * r,
			      m.rank[r].src.addr + b.voff * m.es, stride))
			return false;
	m.ahead_b = b.voff;
	m.ahead_e = e;
	m.ahead_stride = stride;
	return true;
}

// Rank r's source of block b, read ahead (read_ahead() just said yes).
static const uint8_t *ahead_at(const Message &m, const BlockDesc &b, uint16_t r)
{
	return m.ahead.data() + m.ahead_stride * r + (b.voff - m.ahead_b) * m.es;
}

bool CollCore::local_partial(const CollJob &job, Message &m, uint32_t sid, uint8_t *out)
{
	(void)job;
	const BlockDesc &b = m.chain[sid];
	const uint64_t len = uint64_t(b.elems) * m.es;
	const void *srcs[kMaxCollRanks];
	for (uint16_t r = 0; r < m.ranks; r++) {
		if (m.coll == CollOp::barrier) {
			srcs[r] = m.zeros.data() + b.voff;
			continue;
		}
		if (!dma_ok(e_, m.rank[r].pdn, m.rank[r].src, b.voff * m.es, len, 0))
			return false;
		srcs[r] = reinterpret_cast<const void *>(m.rank[r].src.addr + b.voff * m.es);
	}
	if (m.remote && m.coll != CollOp::barrier) {
		if (!read_ahead(m, b))
			return false;
		for (uint16_t r = 0; r < m.ranks; r++)
			if (m.rank[r].space != kLocalSpace)
				srcs[r] = ahead_at(m, b, r);
	}
	reduce_many(m.op, m.dtype, out, srcs, m.ranks, b.elems);
	ctr.reductions += m.ranks > 1 ? m.ranks - 1 : 0;
	return true;
}

bool CollCore::local_data(const CollJob &job, Message &m, uint32_t sid, uint8_t *scratch,
			  const uint8_t **out)
{
	if (m.ranks != 1) {
		*out = scratch;
		return local_partial(job, m, sid, scratch);
	}
	const BlockDesc &b = m.chain[sid];
	const uint64_t len = uint64_t(b.elems) * m.es;
	if (m.coll == CollOp::barrier) {
		*out = m.zeros.data() + b.voff;
		return true;
	}
	if (!dma_ok(e_, m.rank[0].pdn, m.rank[0].src, b.voff * m.es, len, 0))
		return false;
	if (m.rank[0].space != kLocalSpace) {
		// Copied on: the window is read again while packets lent
		// scratch may still be queued.
		if (!read_ahead(m, b))
			return false;
		memcpy(scratch, ahead_at(m, b, 0), len);
		*out = scratch;
		return true;
	}
	*out = reinterpret_cast<const uint8_t *>(m.rank[0].src.addr + b.voff * m.es);
	return true;
}

// A block's result into a destination.  A message larger than the caches
// would push the destination's lines out before anyone reads them: write
// those around the cache (non-temporal), saving the read of each line
// that an ordinary store costs first.
__attribute__((target("avx2"))) static void copy_nt(uint8_t *d, const uint8_t *s, uint64_t len)
{
	while (len && (reinterpret_cast<uintptr_t>(d) & 31)) {
		*d++ = *s++;
		len--;
	}
	for (; len >= 128; d += 128, s += 128, len -= 128) {
		__m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s));
		__m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + 32));
		__m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + 64));
		__m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + 96));
		_mm256_stream_si256(reinterpret_cast<__m256i *>(d), a);
		_mm256_stream_si256(reinterpret_cast<__m256i *>(d + 32), b);
		_mm256_stream_si256(reinterpret_cast<__m256i *>(d + 64), c);
		_mm256_stream_si256(reinterpret_cast<__m256i *>(d + 96), e);
	}
	_mm_sfence();
	memcpy(d, s, len);
}

static bool copies_around_cache(const Message &m)
{
	static const bool avx2 = __builtin_cpu_supports("avx2");
	return avx2 && m.count * m.es >= (8u << 20);
}

static void copy_out(const Message &m, uint64_t dst, const uint8_t *src, uint64_t len)
{
	uint8_t *d = reinterpret_cast<uint8_t *>(dst);
	if (d == src)
		return;
	if (copies_around_cache(m) && len >= 1024)
		copy_nt(d, src, len);
	else
		memcpy(d, src, len);
}

// A result into a destination of another process.
static bool put_result(DmaSpace space, const Message &m, uint64_t dst, const uint8_t *src,
		       uint64_t len)
{
	if (space == kLocalSpace) {
		copy_out(m, dst, src, len);
		return true;
	}
	return dma_write(space, dst, src, len);
}

// Where block b is kept in the message's bounce buffer (made on first use).
static uint8_t *bounce_at(Message &m, const BlockDesc &b)
{
	if (m.in_bounce.size() != m.nblocks) {
		uint64_t end = 0;
		for (const BlockDesc &d : m.chain)
			end = std::max<uint64_t>(end, d.voff + d.elems);
		m.bounce.resize(end * m.es); // perhaps the job's last one
		m.in_bounce.assign(m.nblocks, 0);
	}
	return m.bounce.data() + b.voff * m.es;
}

bool CollCore::flush_results(Message &m)
{
	const uint64_t b = m.wrun_b, len = (m.wrun_e - m.wrun_b) * m.es;
	m.wrun_b = m.wrun_e = 0;
	if (!len)
		return true;
	for (uint16_t r = 0; r < m.ranks; r++)
		if (m.rank[r].space != kLocalSpace &&
		    !dma_write(m.rank[r].space, m.rank[r].dst.addr + b * m.es,
			       m.bounce.data() + b * m.es, len))
			return false;
	return true;
}

// Block sid's result (the same bytes for every rank, at its vector offset)
// for the ranks in other processes: kept in the bounce buffer and written
// with the blocks next to it, in one copy per rank.
bool CollCore::stage_result(Message &m, uint32_t sid, const uint8_t *data)
{
	const BlockDesc &b = m.chain[sid];
	const uint64_t len = uint64_t(b.elems) * m.es;
	if (m.wrun_e == m.wrun_b && len >= kDmaRunBytes) {
		// A block as large as a run (one node's): straight there.
		for (uint16_t r = 0; r < m.ranks; r++)
			if (m.rank[r].space != kLocalSpace &&
			    !dma_write(m.rank[r].space, m.rank[r].dst.addr + b.voff * m.es, data,
				       len))
				return false;
		return true;
	}
	uint8_t *at = bounce_at(m, b);
	if (at != data)
		memcpy(at, data, len);
	m.in_bounce[sid] = 1;
	if (m.wrun_e != m.wrun_b &&
	    (b.voff != m.wrun_e || (m.wrun_e - m.wrun_b) * m.es + len > kDmaRunBytes) &&
	    !flush_results(m))
		return false;
	if (m.wrun_e == m.wrun_b)
		m.wrun_b = b.voff;
	m.wrun_e = b.voff + b.elems;
	return (m.wrun_e - m.wrun_b) * m.es < kDmaRunBytes || flush_results(m);
}

uint8_t *CollCore::result_in_dst(Message &m, uint32_t sid)
{
	if (m.coll != CollOp::allreduce || m.ranks != 1 || m.inplace || m.remote ||
	    m.rank[0].space != kLocalSpace || copies_around_cache(m))
		return nullptr;
	const BlockDesc &b = m.chain[sid];
	const uint64_t off = b.voff * m.es, len = uint64_t(b.elems) * m.es;
	if (!dma_ok(e_, m.rank[0].pdn, m.rank[0].dst, off, len, kAccLocalWrite))
		return nullptr;
	return reinterpret_cast<uint8_t *>(m.rank[0].dst.addr + off);
}

bool CollCore::write_result(const CollJob &job, Message &m, uint32_t sid, const uint8_t *data)
{
	if (m.inplace)
		e_.tx_reclaim(m.src_lent[sid]);
	const JobConfig &c = job.cfg;
	const BlockDesc &b = m.chain[sid];
	const uint64_t len = uint64_t(b.elems) * m.es;
	const ChunkRole &cr = m.chunks[b.chunk];
	switch (m.coll) {
	case CollOp::allreduce:
	case CollOp::allgather:
	case CollOp::bcast:
		for (uint16_t r = 0; r < m.ranks; r++) {
			if (!dma_ok(e_, m.rank[r].pdn, m.rank[r].dst, b.voff * m.es, len,
				    kAccLocalWrite))
				return false;
			if (m.rank[r].space == kLocalSpace)
				copy_out(m, m.rank[r].dst.addr + b.voff * m.es, data, len);
		}
		if (m.remote && !stage_result(m, sid, data))
			return false;
		break;
	case CollOp::reduce:
		if (m.root_node == c.node) {
			const uint16_t r = m.root_local;
			const Sge &d = m.rank[r].dst;
			if (!dma_ok(e_, m.rank[r].pdn, d, b.voff * m.es, len, kAccLocalWrite))
				return false;
			if (!put_result(m.rank[r].space, m, d.addr + b.voff * m.es, data, len))
				return false;
		} else if (cr.fin == c.node) {
			// Keep what we finished: we answer retransmissions from it.
			memcpy(m.staging.data() + (b.voff - m.staging_voff) * m.es, data, len);
		}
		break;
	case CollOp::reduce_scatter: {
		if (cr.fin != c.node)
			break;
		uint64_t g = b.voff / m.count; // the global rank whose part this is
		uint64_t r = g - c.members[c.node].first_rank;
		uint64_t off = (b.voff - g * m.count) * m.es;
		if (!dma_ok(e_, m.rank[r].pdn, m.rank[r].dst, off, len, kAccLocalWrite))
			return false;
		if (!put_result(m.rank[r].space, m, m.rank[r].dst.addr + off, data, len))
			return false;
		break;
	}
	case CollOp::barrier:
		if (cr.fin == c.node)
			memcpy(m.staging.data() + (b.voff - m.staging_voff) * m.es, data, len);
		break;
	case CollOp::query: break;
	}
	return true;
}

bool CollCore::result_source(const CollJob &job, Message &m, uint32_t sid, const uint8_t **out)
{
	const JobConfig &c = job.cfg;
	const BlockDesc &b = m.chain[sid];
	const uint64_t len = uint64_t(b.elems) * m.es;
	const Sge *s = nullptr;
	uint16_t r = 0; // whose buffer s is
	uint64_t off = b.voff * m.es;
	switch (m.coll) {
	case CollOp::allreduce: s = &m.rank[0].dst; break;
	case CollOp::reduce:
		if (m.root_node == c.node)
			s = &m.rank[r = m.root_local].dst;
		break;
	case CollOp::allgather: {
		uint64_t g = b.voff / m.count;
		r = uint16_t(g - c.members[c.node].first_rank);
		s = &m.rank[r].src;
		off = (b.voff - g * m.count) * m.es;
		break;
	}
	case CollOp::bcast: s = &m.rank[r = m.root_local].src; break;
	case CollOp::reduce_scatter: // the result travels as a token
		*out = nullptr;
		return true;
	default: break;
	}
	if (!s) {
		*out = m.staging.data() + (b.voff - m.staging_voff) * m.es;
		return true;
	}
	if (!dma_ok(e_, m.rank[r].pdn, *s, off, len, 0))
		return false;
	const DmaSpace space = m.rank[r].space;
	if (space == kLocalSpace) {
		*out = reinterpret_cast<const uint8_t *>(s->addr + off);
		return true;
	}
	// Kept by vector offset until the message completes: what is
	// returned may be lent to a queued packet.
	uint8_t *d = bounce_at(m, b);
	*out = d;
	if (m.in_bounce[sid])
		return true; // a result staged here, or a source read ahead
	if (m.coll != CollOp::allgather && m.coll != CollOp::bcast)
		return dma_read(space, d, s->addr + off, len);
	// A source, which does not change: the blocks after it too, in one copy.
	uint64_t e = run_end(m, b);
	if (!dma_ok(e_, m.rank[r].pdn, *s, off, (e - b.voff) * m.es, 0))
		e = b.voff + b.elems;
	if (!dma_read(space, d, s->addr + off, (e - b.voff) * m.es))
		return false;
	for (uint32_t k = sid; k < m.nblocks && m.chain[k].voff < e; k++)
		m.in_bounce[k] = 1;
	return true;
}

bool CollCore::written_result(Message &m, uint32_t sid, const uint8_t **out)
{
	if (sid >= m.nblocks || !m.final_[sid])
		return false;
	const BlockDesc &b = m.chain[sid];
	const uint64_t off = b.voff * m.es, len = uint64_t(b.elems) * m.es;
	switch (m.coll) {
	case CollOp::reduce_scatter: // the result travels as a token
		*out = nullptr;
		return true;
	case CollOp::allreduce:
	case CollOp::allgather:
	case CollOp::bcast: break;
	default: return false;
	}
	// Every rank's destination has it (write_result): one of this
	// process, else the bounce buffer it was staged in, else (written
	// straight there) the first rank's.
	for (uint16_t r = 0; r < m.ranks; r++) {
		if (m.rank[r].space != kLocalSpace)
			continue;
		if (!dma_ok(e_, m.rank[r].pdn, m.rank[r].dst, off, len, 0))
			return false;
		*out = reinterpret_cast<const uint8_t *>(m.rank[r].dst.addr + off);
		return true;
	}
	if (!m.ranks || !dma_ok(e_, m.rank[0].pdn, m.rank[0].dst, off, len, 0))
		return false;
	uint8_t *d = bounce_at(m, b);
	*out = d;
	return m.in_bounce[sid] || dma_read(m.rank[0].space, d, m.rank[0].dst.addr + off, len);
}

using namespace wire;

void CollCore::send(const CollJob &job, uint16_t to, uint8_t kind, const Ceth &h, const Payload &pl,
		    bool other_inc)
{
	const JobMember &dst = job.cfg.members[to];
	send_ep(job, dst.ep, dst.qpn, kind, h, nullptr, 0, pl, other_inc);
}

static_assert(sw::kTaskBytes % 4 == 0, "the pad depends on the payload alone");

void CollCore::reclaim()
{
	e_.tx_reclaim(lent_);
}

uint8_t *CollCore::tx_payload(uint32_t ext_len)
{
	return e_.tx_buf() + kBthBytes + kCethBytes + ext_len;
}

// ext (the task information, to a switch) goes between the CETH and the
// payload.
void CollCore::send_ep(const CollJob &job, const Endpoint &to, uint32_t qpn, uint8_t kind,
		       const Ceth &h0, const void *ext, uint32_t ext_len, const Payload &pl,
		       bool other_inc)
{
	uint8_t *buf = e_.tx_buf();
	Ceth h = h0;
	if (!other_inc)
		h.inc = job.inc;
	const size_t hdr = coll_encode(buf, kind, qpn, h.sid, h, ext, ext_len, pl.len);
	if (pl.len && pl.lend && pl.data != buf + hdr) {
		e_.tx_split(to, job.src_ip, buf, hdr, pl.data, pl.len, pl.crc);
		lent_ = e_.tx_lend_mark();
	} else {
		if (pl.len && pl.data != buf + hdr) // else built in place
			memcpy(buf + hdr, pl.data, pl.len);
		e_.tx_to(to, job.src_ip, buf, hdr, pl.len);
	}
	if (kind == kCollData)
		ctr.tx_data++;
	else if (kind == kCollResult)
		ctr.tx_result++;
	ctr.tx_bytes += pl.len;
	port_sent(uint32_t(hdr + pl.len));
}

// How far ahead of the port new blocks may go: four packets.
constexpr uint32_t kPortAheadBytes = 4 * kBlockWireBytes;

void CollCore::port_sent(uint32_t bytes)
{
	const uint64_t rate = e_.params.cfg.port_rate_bps;
	if (!rate)
		return;
	const uint64_t now = e_.now();
	// The packet on the wire: frame headers before it, pad and ICRC after.
	const uint64_t wire = uint64_t(bytes) + ((4 - bytes % 4) % 4) + kIcrcBytes + kFrameBytes;
	port_ahead_ = kPortAheadBytes * 8 * 1000000000ull / rate;
	port_free_ = std::max(port_free_, now) + wire * 8 * 1000000000ull / rate;
}

} // namespace ibv_coll::emu
