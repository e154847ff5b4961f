// verbs: the provider's configuration table (IBV_COLL_VERBS_*).
#include "verbs.h"

#include "util/log.h"

#include <algorithm>
#include <sstream>

namespace ibv_coll::verbs {
namespace {

using util::ConfigKind;
using util::ConfigVar;

enum { kDevices, kDisable, kCount };

const ConfigVar kVars[kCount] = {
	{"IBV_COLL_VERBS_DEVICES", "",
	 "comma-separated libibverbs devices (rxe0, mlx5_0, ...) to expose as verbs_<name> devices "
	 "(empty: every device libibverbs lists)",
	 ConfigKind::string},
	{"IBV_COLL_VERBS_DISABLE", "n",
	 "list no verbs devices: do not ask libibverbs for its devices", ConfigKind::boolean},
};

const util::ConfigRegistrar kRegistrar({"verbs", kVars}, 30);

} // namespace

std::span<const ConfigVar> config_vars()
{
	return kVars;
}

int load_config(VerbsConfig *out)
{
	VerbsConfig c;
	std::stringstream ss(util::config_text(kVars[kDevices]));
	std::string name;
	while (std::getline(ss, name, ','))
		if (!name.empty())
			c.devices.push_back(name);
	if (int err = util::config_bool(kVars[kDisable], &c.disable))
		return err;
	*out = std::move(c);
	return 0;
}

bool config_admits(const VerbsConfig &c, const std::string &ibdev)
{
	// Either name is accepted: rxe0 or verbs_rxe0.
	return c.devices.empty() ||
	       std::any_of(c.devices.begin(), c.devices.end(), [&](const std::string &d) {
		       return d == ibdev || d == "verbs_" + ibdev;
	       });
}

} // namespace ibv_coll::verbs
