// crxe: the provider's configuration table (IBV_COLL_CRXE_*).
#include "crxe.h"

#include "util/log.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

namespace ibv_coll::crxe {
namespace {

using util::ConfigKind;
using util::ConfigVar;

enum { kDevices, kUdpPort, kFallback, kShared, kDevd, kCount };

const ConfigVar kVars[kCount] = {
	{"IBV_COLL_CRXE_DEVICES", "",
	 "comma-separated netdevs to expose as crxe devices (empty: every netdev that is up and "
	 "has an address)",
	 ConfigKind::string},
	{"IBV_COLL_CRXE_UDP_PORT", "4791",
	 "UDP port a context receives RoCEv2 on (0: any free port)", ConfigKind::uint, 0, 65535},
	{"IBV_COLL_CRXE_PORT_FALLBACK", "y",
	 "when the UDP port is taken (another context, in this process or another, has it), take a free one",
	 ConfigKind::boolean},
	{"IBV_COLL_CRXE_SHARED", "n",
	 "use the host's shared device process (ibv_coll_devd) for a netdev, started if none runs, "
	 "instead of an emulated NIC in this process",
	 ConfigKind::boolean},
	{"IBV_COLL_CRXE_DEVD", "auto",
	 "the ibv_coll_devd binary started (with --exit-idle) when IBV_COLL_CRXE_SHARED is set and "
	 "no daemon serves the netdev (auto: the first found beside libibv_coll or the program, in "
	 "their prefix's sbin, in the build tree when run from it, then " IBVC_DEVD_PATH
	 "; empty: start none)",
	 ConfigKind::string},
};

const util::ConfigRegistrar kRegistrar({"crxe", kVars}, 20);

} // namespace

std::span<const ConfigVar> config_vars()
{
	return kVars;
}

int load_config(CrxeConfig *out)
{
	CrxeConfig c;
	std::stringstream ss(util::config_text(kVars[kDevices]));
	std::string name;
	while (std::getline(ss, name, ','))
		if (!name.empty())
			c.devices.push_back(name);
	uint64_t port;
	int err = util::config_uint(kVars[kUdpPort], &port);
	if (err)
		return err;
	c.udp_port = uint16_t(port);
	if ((err = util::config_bool(kVars[kFallback], &c.port_fallback)))
		return err;
	if ((err = util::config_bool(kVars[kShared], &c.shared)))
		return err;
	*out = std::move(c);
	return 0;
}

namespace {

std::string dir_of(const std::string &path)
{
	size_t slash = path.rfind('/');
	return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string real(const std::string &path)
{
	char buf[PATH_MAX];
	return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

bool under(const std::string &path, const std::string &dir)
{
	return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
	       path[dir.size()] == '/';
}

} // namespace

// Where a daemon is looked for, as rdma-core's tools run from their build
// directory or any prefix: beside the object that holds this code (the
// library, or a program linked with the provider) and in its prefix's
// sbin; beside the program and in its prefix's sbin; the build tree's
// daemon when either runs from the build tree; the configured install
// path.
std::vector<std::string> devd_candidates()
{
	std::vector<std::string> c;
	std::string self, exe = real("/proc/self/exe");
	Dl_info di{};
	if (dladdr(reinterpret_cast<void *>(&devd_candidates), &di) && di.dli_fname)
		self = real(di.dli_fname);
	const std::string build = real(IBVC_BUILD_DIR);
	auto add = [&c](const std::string &p) {
		if (std::find(c.begin(), c.end(), p) == c.end())
			c.push_back(p);
	};
	if (!self.empty()) {
		add(dir_of(self) + "/ibv_coll_devd");
		add(dir_of(self) + "/" IBVC_LIB_TO_SBIN "/ibv_coll_devd");
	}
	add(dir_of(exe) + "/ibv_coll_devd");
	add(dir_of(exe) + "/" IBVC_BIN_TO_SBIN "/ibv_coll_devd");
	if (under(self, build) || under(exe, build))
		add(IBVC_DEVD_BUILD_PATH);
	add(IBVC_DEVD_PATH);
	return c;
}

devd::DevdStart devd_start(const std::string &netdev)
{
	devd::DevdStart s;
	const std::string v = util::config_text(kVars[kDevd]);
	const std::string by_hand = "or start one ('ibv_coll_devd " + netdev + "')";
	if (v != "auto") {
		s.path = v;
		s.advice = v.empty()
				   ? "IBV_COLL_CRXE_DEVD is empty; unset it to start one found "
				     "beside the library, set it to the daemon's path, " +
					     by_hand
				   : "IBV_COLL_CRXE_DEVD names it; set it to the daemon's path, " +
					     by_hand;
		return s;
	}
	std::string tried;
	for (const std::string &p : devd_candidates()) {
		struct stat st;
		if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
		    access(p.c_str(), X_OK) == 0) {
			s.path = real(p);
			s.advice = "found beside the library or program, or installed; set "
				   "IBV_COLL_CRXE_DEVD to another daemon's path, " +
				   by_hand;
			return s;
		}
		tried += (tried.empty() ? "" : ", ") + p;
	}
	s.advice = "no ibv_coll_devd at " + tried +
		   "; set IBV_COLL_CRXE_DEVD to the daemon's path, " + by_hand;
	return s;
}

} // namespace ibv_coll::crxe
