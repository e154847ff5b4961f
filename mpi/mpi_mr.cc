// The drop-in's registration cache (coll_mpi.h): calls whose buffers do
// not fit a bounce slot register them, and a registration per call cost
// most of a 64 KiB allreduce on the host's shared device, where each is a
// round trip to the daemon (497 us against 71 at 32 KiB, copied through a
// slot).  The devices reach registered memory by its address (in the
// process, or with process_vm_readv/writev from the shared device's
// daemon), never by pages pinned at registration, so a registration stays
// good for its range whatever the program does with the memory between
// calls: a cached one serves any later call whose buffer it covers.
#include "coll_mpi.h"

#include <vector>

namespace ibv_coll::mpi {

namespace {

constexpr size_t kMrCache = 32; // kept when no request uses them
constexpr uintptr_t kPage = 4096;

struct CachedMr {
	ibv_coll_mr *mr;
	uintptr_t lo, hi; // [lo, hi)
	uint32_t refs;	  // requests that use it
	uint64_t used;	  // when last taken (g_clock)
};

std::vector<CachedMr> g_mrs;
uint64_t g_clock;

// Deregister the least recently used ones no request uses, down to the
// cache's size.
void trim()
{
	while (g_mrs.size() > kMrCache) {
		size_t lru = g_mrs.size();
		for (size_t i = 0; i < g_mrs.size(); i++)
			if (!g_mrs[i].refs &&
			    (lru == g_mrs.size() || g_mrs[i].used < g_mrs[lru].used))
				lru = i;
		if (lru == g_mrs.size())
			return; // every one in use
		ibv_dereg_coll_mr(g_mrs[lru].mr);
		g_mrs[lru] = g_mrs.back();
		g_mrs.pop_back();
	}
}

} // namespace

ibv_coll_mr *mr_get(ibv_coll_pd *pd, const void *p, size_t n)
{
	const uintptr_t lo = uintptr_t(p), hi = lo + (n ? n : 1);
	for (CachedMr &c : g_mrs)
		if (c.lo <= lo && hi <= c.hi) {
			c.refs++;
			c.used = ++g_clock;
			return c.mr;
		}
	// Whole pages: a buffer next to this one, or this one grown a little,
	// hits next time (the pages are the program's, being its buffer's).
	const uintptr_t plo = lo & ~(kPage - 1), phi = (hi + kPage - 1) & ~(kPage - 1);
	ibv_coll_mr *mr = ibv_reg_coll_mr(pd, reinterpret_cast<void *>(plo), size_t(phi - plo),
					  IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return nullptr;
	g_mrs.push_back(CachedMr{mr, plo, phi, 1, ++g_clock});
	trim();
	return mr;
}

void mr_put(ibv_coll_mr *mr)
{
	for (CachedMr &c : g_mrs)
		if (c.mr == mr) {
			if (c.refs)
				c.refs--;
			break;
		}
	trim();
}

void mr_flush()
{
	for (CachedMr &c : g_mrs)
		ibv_dereg_coll_mr(c.mr);
	g_mrs.clear();
}

} // namespace ibv_coll::mpi
