// libibv_coll_mpi configuration (IBV_COLL_MPI_*, read once at the first
// collective) and the per-rank statistics printed at MPI_Finalize.
#include "coll_mpi.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ibv_coll::mpi {

const char *const kCollNames[kNumColls] = {
	"allreduce", "reduce",	  "bcast", "allgather", "reduce_scatter_block",
	"barrier",   "iallreduce"};
const char *const kWhyNames[kNumWhy] = {"disabled", "comm", "datatype", "op", "size", "setup"};

Config g_cfg;
Stats g_stats;
int g_world_rank = -1;

void log_line(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ibv_coll_mpi: rank %d: %s\n", g_world_rank, buf);
}

namespace {

// A size with an optional K, M or G suffix (powers of 1024).
bool parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-')
		return false;
	switch (*end) {
	case 'K':
	case 'k':
		v <<= 10;
		end++;
		break;
	case 'M':
	case 'm':
		v <<= 20;
		end++;
		break;
	case 'G':
	case 'g':
		v <<= 30;
		end++;
		break;
	default: break;
	}
	if (*end)
		return false;
	*out = size_t(v);
	return true;
}

// HOST:PORT with an IPv4 or IPv6 host ([v6]:port), as a switch address.
bool parse_switch(const std::string &w, ibv_coll_switch_addr *a)
{
	size_t colon = w.rfind(':');
	if (colon == std::string::npos || colon == 0)
		return false;
	std::string host = w.substr(0, colon);
	if (host.size() > 2 && host.front() == '[' && host.back() == ']')
		host = host.substr(1, host.size() - 2);
	*a = {};
	in_addr v4;
	if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
		a->gid.raw[10] = a->gid.raw[11] = 0xff; // IPv4-mapped
		memcpy(&a->gid.raw[12], &v4, 4);
	} else if (inet_pton(AF_INET6, host.c_str(), a->gid.raw) != 1)
		return false;
	size_t port;
	if (!parse_size(w.c_str() + colon + 1, &port) || port > 65535)
		return false;
	a->udp_port = uint16_t(port);
	return true;
}

std::vector<std::string> words(const char *s)
{
	std::vector<std::string> out;
	std::stringstream ss(s);
	std::string w;
	while (std::getline(ss, w, ','))
		if (!w.empty())
			out.push_back(w);
	return out;
}

bool parse_bool(const char *s, bool *out)
{
	if (!strcmp(s, "1") || !strcasecmp(s, "y") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
		*out = true;
	else if (!strcmp(s, "0") || !strcasecmp(s, "n") || !strcasecmp(s, "no") ||
		 !strcasecmp(s, "off"))
		*out = false;
	else
		return false;
	return true;
}

} // namespace

int load_config(Config *c, std::string *err)
{
	Config n;
	const char *v;
	auto bad = [&](const char *name, const char *val) {
		*err = std::string(name) + "=" + val + ": not understood";
		return EINVAL;
	};
	if ((v = getenv("IBV_COLL_MPI_ENABLE")) && !parse_bool(v, &n.enable))
		return bad("IBV_COLL_MPI_ENABLE", v);
	if ((v = getenv("IBV_COLL_MPI_STATS")) && !parse_bool(v, &n.stats))
		return bad("IBV_COLL_MPI_STATS", v);
	if ((v = getenv("IBV_COLL_MPI_DEVICE")))
		n.device = v;
	if ((v = getenv("IBV_COLL_MPI_COLLS"))) {
		n.colls = 0;
		for (const std::string &w : words(v)) {
			int i = 0;
			while (i < kNumColls && w != kCollNames[i])
				i++;
			if (w == "all")
				n.colls = (1u << kNumColls) - 1;
			else if (i == kNumColls)
				return bad("IBV_COLL_MPI_COLLS", v);
			else
				n.colls |= 1u << i;
		}
	}
	if ((v = getenv("IBV_COLL_MPI_SWITCH")))
		for (const std::string &w : words(v)) {
			ibv_coll_switch_addr a;
			if (!parse_switch(w, &a) || n.switches.size() == 8)
				return bad("IBV_COLL_MPI_SWITCH", v);
			n.switches.push_back(a);
		}
	if ((v = getenv("IBV_COLL_MPI_TOPOLOGY"))) {
		n.topology = !strcmp(v, "ring")	    ? IBV_COLL_TOPO_RING
			     : !strcmp(v, "switch") ? IBV_COLL_TOPO_SWITCH
			     : !strcmp(v, "auto")   ? IBV_COLL_TOPO_AUTO
						    : -2;
		if (n.topology == -2 || (n.topology != IBV_COLL_TOPO_RING && n.switches.empty()))
			return bad(
				"IBV_COLL_MPI_TOPOLOGY (switch and auto need IBV_COLL_MPI_SWITCH)",
				v);
	}
	if (n.topology == -1)
		n.topology = n.switches.empty() ? IBV_COLL_TOPO_RING : IBV_COLL_TOPO_AUTO;
	if ((v = getenv("IBV_COLL_MPI_MIN_BYTES")) && !parse_size(v, &n.min_bytes))
		return bad("IBV_COLL_MPI_MIN_BYTES", v);
	if ((v = getenv("IBV_COLL_MPI_MAX_BYTES")) && !parse_size(v, &n.max_bytes))
		return bad("IBV_COLL_MPI_MAX_BYTES", v);
	size_t x;
	if ((v = getenv("IBV_COLL_MPI_MIN_RANKS"))) {
		if (!parse_size(v, &x) || x < 1 || x > 64)
			return bad("IBV_COLL_MPI_MIN_RANKS", v);
		n.min_ranks = int(x);
	}
	if ((v = getenv("IBV_COLL_MPI_SEG_UNITS"))) {
		if (!parse_size(v, &x) || x < 1 || x > (1u << 20))
			return bad("IBV_COLL_MPI_SEG_UNITS", v);
		n.seg_units = uint32_t(x);
	}
	if ((v = getenv("IBV_COLL_MPI_TIMEOUT_MS"))) {
		if (!parse_size(v, &x) || x > 3600000)
			return bad("IBV_COLL_MPI_TIMEOUT_MS", v);
		n.timeout_ms = uint32_t(x);
	}
	if ((v = getenv("IBV_COLL_MPI_SPIN_US"))) {
		if (!strcmp(v, "-1"))
			n.spin_us = -1;
		else if (!parse_size(v, &x) || x > 10000000)
			return bad("IBV_COLL_MPI_SPIN_US", v);
		else
			n.spin_us = int(x);
	}
	*c = std::move(n);
	return 0;
}

void print_stats()
{
	const Stats &s = g_stats;
	uint64_t off = 0, fell = 0;
	char per[512] = "", why[256] = "";
	size_t p = 0, w = 0;
	for (int i = 0; i < kNumColls; i++) {
		off += s.offloaded[i];
		fell += s.fell[i];
		if (s.offloaded[i] || s.fell[i])
			p += size_t(snprintf(per + p, sizeof(per) - p, " %s %lu/%lu", kCollNames[i],
					     (unsigned long)s.offloaded[i],
					     (unsigned long)s.fell[i]));
		if (p >= sizeof(per))
			p = sizeof(per) - 1;
	}
	for (int i = 0; i < kNumWhy; i++) {
		if (s.why[i])
			w += size_t(snprintf(why + w, sizeof(why) - w, "%s%s %lu", w ? ", " : "",
					     kWhyNames[i], (unsigned long)s.why[i]));
		if (w >= sizeof(why))
			w = sizeof(why) - 1;
	}
	// One line per rank, so that mpirun's interleaving cannot tear it.
	fprintf(stderr,
		"ibv_coll_mpi: rank %d: offloaded %lu (switch %lu, hierarchy %lu, ring %lu, "
		"fallback %lu, local %lu, failed %lu); fell through %lu (%s);%s\n",
		g_world_rank, (unsigned long)off, (unsigned long)s.ran_switch,
		(unsigned long)s.ran_hier, (unsigned long)s.ran_ring, (unsigned long)s.ran_fallback,
		(unsigned long)s.ran_local, (unsigned long)s.errors, (unsigned long)fell,
		w ? why : "none", p ? per : " no collectives");
}

} // namespace ibv_coll::mpi
