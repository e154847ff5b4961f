// Asks an aggregation switch for its counters with the STATS packet of
// the switch protocol (wire/swproto.h), for ibv_coll_stat(1).
#pragma once

#include "wire/swproto.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ibv_coll::emu::stat {

struct SwitchStats {
	std::string address; // as asked for: host[:port]
	std::string name;    // the switch's -n name
	std::vector<std::pair<std::string, uint64_t>> counters;
};

// Query the switch at "host[:port]" (IPv6 as "[addr]:port"; port 4791
// when absent), waiting up to timeout_ms for each answer and asking up to
// three times, each request padded to `pad` payload bytes (what the reply
// may take; fewer records a reply mean more requests).  0, or an errno
// value with *err saying what failed.
int query_switch(const std::string &address, int timeout_ms, SwitchStats *out, std::string *err,
		 size_t pad = sw::kStatsRequestPad);

} // namespace ibv_coll::emu::stat
