// crxe: the provider's configuration table (IBV_COLL_CRXE_*).
#include "crxe.h"

#include "util/log.h"

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
	{"IBV_COLL_CRXE_DEVD", IBVC_DEVD_PATH,
	 "the ibv_coll_devd binary started (with --exit-idle) when IBV_COLL_CRXE_SHARED is set and "
	 "no daemon serves the netdev (empty: start none)",
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
	*out = std::move(c);
	return 0;
}

devd::DevdStart devd_start(const std::string &netdev)
{
	devd::DevdStart s;
	s.path = util::config_text(kVars[kDevd]);
	s.advice = "set IBV_COLL_CRXE_DEVD to the daemon's path, or start one ('ibv_coll_devd " +
		   netdev + "')";
	return s;
}

bool use_shared()
{
	bool on = false;
	if (util::config_bool(kVars[kShared], &on))
		return false; // the bad value has been logged
	return on;
}

} // namespace ibv_coll::crxe
