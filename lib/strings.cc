// Status and opcode strings, and the configuration printout.
#include "core.h"

#include <ibv_coll/version.h>

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

using namespace ibv_coll;

IBV_COLL_EXPORT const char *ibv_coll_wc_status_str(enum ibv_wc_status status)
{
	static const char *const s[] = {
		"success",
		"local length error",
		"local QP operation error",
		"local EE context operation error",
		"local protection error",
		"Work Request Flushed Error",
		"memory management operation error",
		"bad response error",
		"local access error",
		"remote invalid request error",
		"remote access error",
		"remote operation error",
		"transport retry counter exceeded",
		"RNR retry counter exceeded",
		"local RDD violation error",
		"remote invalid RD request",
		"aborted error",
		"invalid EE context number",
		"invalid EE context state",
		"fatal error",
		"response timeout error",
		"general error",
	};
	unsigned v = unsigned(core::raw_enum(status));
	if (v < std::size(s))
		return s[v];
	return "unknown";
}

static const char *coll_opcode_name(int op)
{
	static const char *const s[] = {"ALLREDUCE",	  "REDUCE",  "BCAST", "ALLGATHER",
					"REDUCE_SCATTER", "BARRIER", "QUERY"};
	return op >= 0x40 && op <= 0x46 ? s[op - 0x40] : nullptr;
}

IBV_COLL_EXPORT const char *ibv_coll_wr_opcode_str(enum ibv_coll_wr_opcode opcode)
{
	if (const char *c = coll_opcode_name(core::raw_enum(opcode)))
		return c;
	switch (core::raw_enum(opcode)) {
	case IBV_COLL_WR_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_COLL_WR_RDMA_WRITE_WITH_IMM: return "RDMA_WRITE_WITH_IMM";
	case IBV_COLL_WR_SEND: return "SEND";
	case IBV_COLL_WR_SEND_WITH_IMM: return "SEND_WITH_IMM";
	case IBV_COLL_WR_RDMA_READ: return "RDMA_READ";
	}
	return "unknown";
}

IBV_COLL_EXPORT const char *ibv_coll_status_str(enum ibv_coll_status status)
{
	static const char *const s[] = {
		"success", "buffer error (Seg units unavailable)", "timeout", "aborted by a member",
		"denied",  "local buffer not accessible",	   "flushed",
	};
	unsigned v = unsigned(core::raw_enum(status));
	return v < std::size(s) ? s[v] : "unknown";
}

IBV_COLL_EXPORT const char *ibv_coll_wc_opcode_str(enum ibv_coll_wc_opcode opcode)
{
	if (const char *c = coll_opcode_name(core::raw_enum(opcode)))
		return c;
	switch (core::raw_enum(opcode)) {
	case IBV_COLL_WC_SEND: return "SEND";
	case IBV_COLL_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_COLL_WC_RDMA_READ: return "RDMA_READ";
	case IBV_COLL_WC_RECV: return "RECV";
	case IBV_COLL_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	}
	return "unknown";
}

namespace ibv_coll::core {

// A misspelt variable (IBV_COLL_EMU_POLLUS) is otherwise ignored without a
// word, as UCX would not let it be.  IBV_COLL_TEST_* belong to the test
// suite, not the library.
std::vector<std::string> unknown_config_vars()
{
	std::vector<const util::ConfigVar *> known;
	auto add = [&](std::span<const util::ConfigVar> vars) {
		for (const util::ConfigVar &v : vars)
			known.push_back(&v);
	};
	for (const util::ConfigTable &t : util::config_tables())
		add(t.vars);
	std::vector<std::string> out;
	static const char prefix[] = "IBV_COLL_", test[] = "IBV_COLL_TEST_";
	for (char **e = environ; e && *e; e++) {
		std::string_view kv(*e);
		size_t eq = kv.find('=');
		if (eq == kv.npos || kv.compare(0, sizeof(prefix) - 1, prefix) ||
		    !kv.compare(0, sizeof(test) - 1, test))
			continue;
		std::string name(kv.substr(0, eq));
		bool found = false;
		for (const util::ConfigVar *v : known)
			found |= name == v->name;
		if (!found)
			out.push_back(name);
	}
	std::sort(out.begin(), out.end());
	return out;
}

void warn_config_once()
{
	static std::once_flag once;
	std::call_once(once, [] {
		for (const std::string &n : unknown_config_vars())
			IBVC_WARN("config",
				  "{} is set but is not a variable of this library "
				  "(misspelt? ibv_coll_devinfo -c lists them)",
				  n);
	});
}

} // namespace ibv_coll::core

IBV_COLL_EXPORT int ibv_coll_print_config(FILE *stream)
{
	return core::guard_int("ibv_coll_print_config", [&] {
		if (!stream)
			return EINVAL;
		// Every component's table registered itself (the logger's, each
		// provider's, the device model's), in their ranks' order.
		for (const util::ConfigTable &t : util::config_tables())
			util::print_config_table(stream, t);
		auto unknown = core::unknown_config_vars();
		if (!unknown.empty()) {
			fprintf(stream,
				"# unknown: set, but not read by this library (misspelt?)\n");
			for (const std::string &n : unknown)
				fprintf(stream, "#   %s=%s\n", n.c_str(), getenv(n.c_str()));
		}
		return 0;
	});
}

// A table of another of the project's libraries (libibv_coll_mpi), into
// this library's registry: util/config.h says why it comes this way.  It
// runs in that library's static constructor, so nothing may escape.
IBV_COLL_EXPORT void ibv_coll_private_register_config(const util::ConfigTable *table, int rank)
{
	if (!table)
		return;
	try {
		const util::ConfigRegistrar reg(*table, rank);
	} catch (const std::exception &e) {
		IBVC_ERR("config", "registering the {} variables: {}", table->component, e.what());
	}
}

// The version of the library itself, not of the headers a program was
// compiled with: a program compares the two to see what it really loaded.
IBV_COLL_EXPORT const char *ibv_coll_version(void)
{
	return IBV_COLL_VERSION_STRING;
}
