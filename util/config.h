// Configuration tables: each component lists its IBV_COLL_* variables once
// (name, default, help, parser); values are read when a context opens.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace ibv_coll::util {

enum class ConfigKind : uint8_t {
	string,
	uint,	 // decimal or 0x hex, within [min, max]
	boolean, // 1/0, y/n, yes/no, true/false, on/off
	ratio,	 // a real number in [0, 1]
	size,	 // as uint, with an optional K, M or G suffix (2^10, 2^20, 2^30)
};

struct ConfigVar {
	const char *name; // full variable name, IBV_COLL_<COMPONENT>_<NAME>
	const char *def;  // default, as text a user could set
	const char *help;
	ConfigKind kind = ConfigKind::string;
	uint64_t min = 0;
	uint64_t max = UINT64_MAX;
	// A string variable with a syntax of its own (a list, a choice): what
	// is wrong with a value ("expected ..."), or nullptr when it parses.
	// Its reader parses the value; this lets the listing mark it invalid.
	const char *(*check)(const char *value) = nullptr;
};

// The variable's text: the environment's value when set, else the default.
std::string config_text(const ConfigVar &v);
bool config_is_set(const ConfigVar &v);

// Parse the variable (environment or default).  A value that does not
// parse or is out of range is logged once and gives EINVAL.  config_uint
// takes uint and size variables.
int config_uint(const ConfigVar &v, uint64_t *out);
int config_bool(const ConfigVar &v, bool *out);
int config_ratio(const ConfigVar &v, double *out);

// What is wrong with the variable's value in the environment ("expected
// ..."), or "" when it is unset or parses; string variables pass unless
// their check says otherwise.
std::string config_problem(const ConfigVar &v);

// Parsers for the same syntaxes, for programs' flags and sub-options.
bool parse_uint(const char *s, uint64_t *out);
bool parse_size(const char *s, uint64_t *out);
bool parse_bool(const char *s, bool *out);

// One table per component; print_config walks all of them.
struct ConfigTable {
	const char *component;
	std::span<const ConfigVar> vars;
};
// Prints every variable with its help; a set value that does not parse is
// marked "# INVALID: ..." on its line.
void print_config_table(FILE *f, const ConfigTable &t);

// Components register their tables themselves, with a static registrar in
// the file that reads them, so whoever lists the variables (the library's
// ibv_coll_print_config, ibv_coll_devinfo -c) need not know the components:
//	static const util::ConfigRegistrar reg({"emu rc", kVars}, 30);
// Tables come out in ascending rank, then in the order they registered.
class ConfigRegistrar {
public:
	ConfigRegistrar(const ConfigTable &t, int rank);
};
// Every table registered in this program, in rank order.
std::vector<ConfigTable> config_tables();

} // namespace ibv_coll::util

// The registry a ConfigRegistrar fills is that of the shared object it is
// linked into.  Another of the project's libraries that reads IBV_COLL_*
// variables (libibv_coll_mpi) registers its table with libibv_coll's
// instead, through this call, so that ibv_coll_print_config lists it and
// the check for misspelt names knows it.  Not an interface for programs:
// libibv_coll exports it in its private version stanza, for libraries of
// the same build only.  table must live as long as the process.
extern "C" void ibv_coll_private_register_config(const ibv_coll::util::ConfigTable *table,
						 int rank);
