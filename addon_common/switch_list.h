// Syntaxes that the add-on libraries (libibv_coll_mpi, the NCCL plugin)
// share in their IBV_COLL_<ADDON>_* variables: a list of aggregation
// switches and a topology name.  Each parser has the registry's check
// beside it (what is wrong, or nullptr), so that ibv_coll_print_config
// marks a bad value.
#pragma once

#include <ibv_coll/ibv_coll.h>

#include <string>
#include <vector>

namespace ibv_coll::addon {

// HOST:PORT with an IPv4 or IPv6 host ([v6]:PORT), as a switch address.
bool parse_switch(const std::string &w, ibv_coll_switch_addr *a);
// HOST:PORT[,HOST:PORT...]: one switch per plane, at most 8; "" is none.
bool parse_switches(const char *s, std::vector<ibv_coll_switch_addr> *out);
const char *check_switches(const char *s);

// "ring", "switch" or "auto" as enum ibv_coll_topology; -1 for "" (the
// caller's default), -2 for anything else.
int parse_topology(const char *s);
const char *check_topology(const char *s);

// The words of a comma-separated list, empty ones dropped.
std::vector<std::string> words(const char *s);

} // namespace ibv_coll::addon
