// The add-on libraries' shared configuration syntaxes (switch_list.h).
#include "switch_list.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace ibv_coll::addon {

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
	uint64_t port;
	if (!util::parse_uint(w.c_str() + colon + 1, &port) || port > 65535)
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

bool parse_switches(const char *s, std::vector<ibv_coll_switch_addr> *out)
{
	std::vector<ibv_coll_switch_addr> sw;
	for (const std::string &w : words(s)) {
		ibv_coll_switch_addr a;
		if (!parse_switch(w, &a) || sw.size() == 8)
			return false;
		sw.push_back(a);
	}
	*out = std::move(sw);
	return true;
}

const char *check_switches(const char *s)
{
	std::vector<ibv_coll_switch_addr> sw;
	return parse_switches(s, &sw) ? nullptr
				      : "expected HOST:PORT[,HOST:PORT...], at most 8, IPv4 or "
					"[IPv6]:PORT";
}

int parse_topology(const char *s)
{
	return !*s		      ? -1
	       : !strcmp(s, "ring")   ? IBV_COLL_TOPO_RING
	       : !strcmp(s, "switch") ? IBV_COLL_TOPO_SWITCH
	       : !strcmp(s, "auto")   ? IBV_COLL_TOPO_AUTO
				      : -2;
}

const char *check_topology(const char *s)
{
	return parse_topology(s) == -2 ? "expected ring, switch or auto" : nullptr;
}

bool topology_for(const char *s, bool have_switches, int *out)
{
	int t = parse_topology(s);
	if (t == -1)
		t = have_switches ? IBV_COLL_TOPO_AUTO : IBV_COLL_TOPO_RING;
	*out = t;
	return t == IBV_COLL_TOPO_RING || have_switches;
}

int VarReader::check(std::string *err) const
{
	for (const util::ConfigVar &v : vars_) {
		std::string why = util::config_problem(v);
		if (!why.empty()) {
			*err = std::string(v.name) + "=" + util::config_text(v) +
			       ": not understood (" + why + ")";
			return EINVAL;
		}
	}
	return 0;
}

uint64_t VarReader::size(int i) const
{
	uint64_t x = 0;
	util::parse_size(text(i).c_str(), &x);
	return x;
}

} // namespace ibv_coll::addon
