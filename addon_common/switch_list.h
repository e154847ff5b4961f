// Syntaxes that the add-on libraries (libibv_coll_mpi, the NCCL plugin)
// share in their IBV_COLL_<ADDON>_* variables: a list of aggregation
// switches and a topology name.  Each parser has the registry's check
// beside it (what is wrong, or nullptr), so that ibv_coll_print_config
// marks a bad value.
#pragma once

#include "util/config.h"

#include <ibv_coll/ibv_coll.h>

#include <span>
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

// The topology a variable names, given whether switches were named: ""
// is auto with a switch, ring without; false when it names switch or auto
// without a switch.
bool topology_for(const char *s, bool have_switches, int *out);

// A component's table read as the add-ons read theirs: every value
// checked against its syntax and range before any is taken, so that a bad
// one is reported first; then each by its index in the table.
class VarReader {
public:
	explicit VarReader(std::span<const util::ConfigVar> vars) : vars_(vars) {}
	// 0, or EINVAL with *err: "NAME=VALUE: not understood (why)".
	int check(std::string *err) const;
	std::string text(int i) const { return util::config_text(vars_[size_t(i)]); }
	uint64_t size(int i) const; // a size or uint variable that check() passed

private:
	std::span<const util::ConfigVar> vars_;
};

// The words of a comma-separated list, empty ones dropped.
std::vector<std::string> words(const char *s);

} // namespace ibv_coll::addon
