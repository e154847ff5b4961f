// crxe: the provider's configuration table (IBV_COLL_CRXE_*).
#include "crxe.h"

#include "util/log.h"

#include <sstream>

namespace ibv_coll::crxe {
namespace {

using util::ConfigKind;
using util::ConfigVar;

enum { kDevices, kUdpPort, kFallback, kCount };

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

} // namespace ibv_coll::crxe
