// The transports' configuration table; it registers itself.
#include "net/net_config.h"

#include "util/log.h"

#include <cerrno>

namespace ibv_coll::emu {
namespace {

using util::ConfigKind;
using util::ConfigVar;

enum { kSockbuf, kGso, kPortWait, kImpair, kCount };

const ConfigVar kVars[kCount] = {
	{"IBV_COLL_EMU_SOCKBUF", "4194304", "UDP socket send and receive buffer bytes",
	 ConfigKind::uint, 65536, 1u << 30},
	{"IBV_COLL_EMU_GSO", "1",
	 "send runs of packets to one peer with UDP segmentation offload and receive with UDP GRO "
	 "(0: one datagram per system call)",
	 ConfigKind::uint, 0, 1},
	{"IBV_COLL_EMU_PORT_WAIT", "1",
	 "wait for room when the queue of the interface below the UDP socket is full, as a NIC's "
	 "transmit ring does (IP_RECVERR; 0: such packets are lost)",
	 ConfigKind::uint, 0, 1},
	{"IBV_COLL_EMU_IMPAIR", "",
	 "test only: impair transmitted packets: drop=P,dup=P,reorder=P (probabilities), "
	 "delay=T,jitter=T (one-way, e.g. 5ms, 200us), ce=P (fraction sent CE-marked), seed=N, after=T,for=T (drop, dup, reorder and ce "
	 "only in that window after the port opened); "
	 "e.g. drop=0.01,delay=2ms,ce=0.05,seed=7",
	 ConfigKind::string},
};

const util::ConfigRegistrar kRegistrar({"emu transport (UDP port, switch port)", kVars}, 150);

// The switch program's own: in the library's registry, so that setting it
// in a job's environment (one that also starts switches) is not taken for
// a misspelt variable.
const ConfigVar kSwitchVars[] = {
	{"IBV_COLL_SWITCH_THREADS", "0",
	 "ibv_coll_switchd's workers, each with its own socket of the switch port, when --threads "
	 "is not given (0: the cores its CPU affinity allows, at most half the host's)",
	 ConfigKind::uint, 0, 256},
};

const util::ConfigRegistrar kSwitchRegistrar({"switch (ibv_coll_switchd)", kSwitchVars}, 160);

} // namespace

bool net_port_wait()
{
	uint64_t v = 1;
	return util::config_uint(kVars[kPortWait], &v) != 0 || v != 0;
}

std::span<const ConfigVar> net_config_vars()
{
	return kVars;
}

int load_net_config(NetConfig *out)
{
	NetConfig c;
	uint64_t v;
	int err;
	if ((err = util::config_uint(kVars[kSockbuf], &v)))
		return err;
	c.sockbuf = uint32_t(v);
	if ((err = util::config_uint(kVars[kGso], &v)))
		return err;
	c.gso = v != 0;
	if ((err = util::config_uint(kVars[kPortWait], &v)))
		return err;
	c.port_wait = v != 0;
	if ((err = util::config_uint(kSwitchVars[0], &v)))
		return err;
	c.switch_threads = uint32_t(v);
	std::string imp = util::config_text(kVars[kImpair]), why;
	if (Impairment::parse(imp, &c.impair, &why)) {
		IBVC_ERR("config",
			 "IBV_COLL_EMU_IMPAIR={}: {}; expected a comma-separated list of "
			 "drop=P,dup=P,reorder=P,ce=P,delay=T,jitter=T,seed=N",
			 imp, why);
		return EINVAL;
	}
	if (c.impair.active())
		IBVC_WARN("emu", "transmit impairment on: {}", c.impair.str());
	*out = c;
	return 0;
}

} // namespace ibv_coll::emu
