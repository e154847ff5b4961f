// The switch forgets jobs that fall silent.
#include "switch/switch.h"

#include "util/clock.h"
#include "util/log.h"

namespace ibv_coll::emu {

void Switch::expire(uint64_t now)
{
	for (auto it = jobs_.begin(); it != jobs_.end();) {
		if (util::elapsed_ns(now, it->second.last_seen) >
		    uint64_t(p_.job_idle_ms) * util::kNsPerMs) {
			IBVC_INFO("switch", "{}: job {} idle, forgotten", p_.name, it->first);
			free_units(it->second);
			gone().add(job_total(it->second));
			it = jobs_.erase(it);
		} else {
			++it;
		}
	}
}

} // namespace ibv_coll::emu
