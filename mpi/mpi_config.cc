// libibv_coll_mpi configuration (IBV_COLL_MPI_*: a table in libibv_coll's
// registry, read once at the first collective) and the per-rank statistics
// printed at MPI_Finalize.
#include "coll_mpi.h"

#include "switch_list.h"
#include "util/config.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ibv_coll::mpi {

const char *const kCollNames[kNumColls] = {
	"allreduce",  "reduce",	       "bcast",	  "allgather",	"reduce_scatter_block",	 "barrier",
	"iallreduce", "ibcast",	       "ireduce", "iallgather", "ireduce_scatter_block", "ibarrier",
	"allgatherv", "reduce_scatter"};
const char *const kWhyNames[kNumWhy] = {"disabled", "comm",  "datatype", "op",
					"size",	    "setup", "first"};

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

using addon::check_switches;
using addon::check_topology;
using addon::parse_switches;
using addon::words;
using util::ConfigKind;
using util::ConfigVar;

// The string variables' syntaxes, each a parser and the registry's check
// (which lets ibv_coll_print_config mark a bad value).

bool parse_colls(const char *s, unsigned *out)
{
	unsigned colls = 0;
	for (const std::string &w : words(s)) {
		int i = 0;
		while (i < kNumColls && w != kCollNames[i])
			i++;
		if (w == "all")
			colls = (1u << kNumColls) - 1;
		else if (i == kNumColls)
			return false;
		else
			colls |= 1u << i;
	}
	*out = colls;
	return true;
}

const char *check_colls(const char *s)
{
	unsigned c;
	return parse_colls(s, &c)
		       ? nullptr
		       : "expected a comma-separated list of allreduce, reduce, bcast, "
			 "allgather, reduce_scatter_block, barrier, iallreduce, ibcast, "
			 "ireduce, iallgather, ireduce_scatter_block, ibarrier, allgatherv, "
			 "reduce_scatter or all";
}

constexpr uint64_t kMaxSpinUs = 10000000;

bool parse_spin(const char *s, int *out)
{
	uint64_t x;
	if (!strcmp(s, "-1"))
		*out = -1;
	else if (util::parse_size(s, &x) && x <= kMaxSpinUs)
		*out = int(x);
	else
		return false;
	return true;
}

const char *check_spin(const char *s)
{
	int us;
	return parse_spin(s, &us) ? nullptr : "expected -1 or an integer in [0, 10000000]";
}

enum {
	kEnable,
	kColls,
	kDevice,
	kSwitch,
	kTopology,
	kMinBytes,
	kMaxBytes,
	kMinRanks,
	kSegUnits,
	kTimeoutMs,
	kSpinUs,
	kStats,
	kCount
};

// As ibv_coll_mpi(7) documents them, in its order.  Numbers are decimal
// or 0x hex with an optional K, M or G suffix, as they always were here.
const ConfigVar kVars[kCount] = {
	{"IBV_COLL_MPI_ENABLE", "1", "0 sends every collective to PMPI", ConfigKind::boolean},
	{"IBV_COLL_MPI_COLLS", "all",
	 "comma-separated collectives to offload: allreduce, reduce, bcast, allgather, "
	 "reduce_scatter_block, barrier, iallreduce, ibcast, ireduce, iallgather, "
	 "ireduce_scatter_block, ibarrier, allgatherv, reduce_scatter, all",
	 ConfigKind::string, 0, UINT64_MAX, check_colls},
	{"IBV_COLL_MPI_DEVICE", "",
	 "the device each process opens (empty: crxe_lo when the whole job is on this host, else "
	 "the first crxe device of another interface, else crxe_lo)",
	 ConfigKind::string},
	{"IBV_COLL_MPI_SWITCH", "",
	 "HOST:PORT[,HOST:PORT...]: the aggregation switches (ibv_coll_switchd), one per plane, "
	 "IPv4 or [IPv6]:PORT (empty: none)",
	 ConfigKind::string, 0, UINT64_MAX, check_switches},
	{"IBV_COLL_MPI_TOPOLOGY", "",
	 "ring, switch or auto; switch and auto need IBV_COLL_MPI_SWITCH (empty: auto with a "
	 "switch, ring without)",
	 ConfigKind::string, 0, UINT64_MAX, check_topology},
	{"IBV_COLL_MPI_MIN_BYTES", "0",
	 "the smallest share per process, in bytes, that a call must have to be offloaded",
	 ConfigKind::size},
	{"IBV_COLL_MPI_MAX_BYTES", "0",
	 "the largest share per process, in bytes, that a call may have to be offloaded (0: no "
	 "bound but the device's)",
	 ConfigKind::size},
	{"IBV_COLL_MPI_MIN_RANKS", "2", "the smallest communicator offloaded", ConfigKind::size, 1,
	 64},
	{"IBV_COLL_MPI_SEG_UNITS", "0",
	 "Seg units each communicator's job takes in the NIC and the switch (0: 64 per other "
	 "rank, 128 to 512)",
	 ConfigKind::size, 0, 1u << 20},
	{"IBV_COLL_MPI_TIMEOUT_MS", "3600000",
	 "a collective that makes no progress this long fails, a rank that comes this late to "
	 "it included (0: the device's default, IBV_COLL_EMU_COLL_TIMEOUT_MS)",
	 ConfigKind::size, 0, 3600000},
	{"IBV_COLL_MPI_SPIN_US", "2000",
	 "microseconds a blocking call polls, yielding between polls, before it sleeps on the "
	 "completion channel (-1: never sleeps)",
	 ConfigKind::string, 0, UINT64_MAX, check_spin},
	{"IBV_COLL_MPI_STATS", "0",
	 "1: each process prints its offload statistics on one line in MPI_Finalize",
	 ConfigKind::boolean},
};

// Into libibv_coll's registry, not into the copy of the registry linked
// into this library (util/config.h), so that the library's listing and its
// check for misspelt names see these variables in MPI programs.
const util::ConfigTable kTable{"mpi (libibv_coll_mpi)", kVars};
const struct Registrar {
	Registrar() { ibv_coll_private_register_config(&kTable, 300); }
} kRegistrar;

} // namespace

int load_config(Config *c, std::string *err)
{
	// Every value against its syntax and range first, so that a bad one
	// is reported before anything is taken from the others.
	addon::VarReader r(kVars);
	if (int e = r.check(err))
		return e;
	Config n;
	util::parse_bool(r.text(kEnable).c_str(), &n.enable);
	util::parse_bool(r.text(kStats).c_str(), &n.stats);
	n.device = r.text(kDevice);
	parse_colls(r.text(kColls).c_str(), &n.colls);
	parse_switches(r.text(kSwitch).c_str(), &n.switches);
	if (!addon::topology_for(r.text(kTopology).c_str(), !n.switches.empty(), &n.topology)) {
		*err = "IBV_COLL_MPI_TOPOLOGY=" + r.text(kTopology) +
		       ": not understood (switch and auto need IBV_COLL_MPI_SWITCH)";
		return EINVAL;
	}
	n.min_bytes = size_t(r.size(kMinBytes));
	n.max_bytes = size_t(r.size(kMaxBytes));
	n.min_ranks = int(r.size(kMinRanks));
	n.seg_units = uint32_t(r.size(kSegUnits));
	n.timeout_ms = uint32_t(r.size(kTimeoutMs));
	parse_spin(r.text(kSpinUs).c_str(), &n.spin_us);
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
