// The transports' configuration table (IBV_COLL_EMU_SOCKBUF, _GSO, _PORT_WAIT and the
// test-only _IMPAIR): what the NIC's port and the switch's both read.
#pragma once

#include "net/impairment.h"
#include "util/config.h"

#include <cstdint>
#include <span>

namespace ibv_coll::emu {

struct NetConfig {
	uint32_t sockbuf = 4u << 20; // UDP socket buffer bytes
	bool gso = true;	     // UDP segmentation offload and GRO
	bool port_wait = true;	     // wait for room in the interface's queue
	Impairment impair;
	// ibv_coll_switchd's workers when --threads is not given (0: the
	// cores its CPU affinity allows).
	uint32_t switch_threads = 0;
};

std::span<const util::ConfigVar> net_config_vars();
// IBV_COLL_EMU_PORT_WAIT, as the port reads it when it opens (true
// where it is unset or bad: load_net_config reports a bad value).
bool net_port_wait();
// Read the variables; EINVAL (logged) on a bad value.
int load_net_config(NetConfig *out);

} // namespace ibv_coll::emu
