// The device model's configuration (IBV_COLL_EMU_*): one table per component
// (engine thread, RC, collective engine, reduce kernels, transports), each
// registered where it is defined.
#pragma once

#include "net/net_config.h"
#include "nic/cc.h"
#include "util/config.h"

#include <cstdint>
#include <span>

namespace ibv_coll::emu {

struct EmuConfig {
	uint32_t poll_us = 2000;      // engine thread polls (yielding) this long before it sleeps
	uint32_t app_poll_us = 1000;  // an application poll keeps the engine thread off the port
	uint32_t rc_window = 256;     // unacknowledged packets per RC QP
	uint32_t ack_req_every = 32;  // AckReq on every Nth packet of a long message
	uint8_t rc_timeout = 14;      // exponent used when a QP asks for timeout 0
	uint32_t sockbuf = 4u << 20;  // UDP socket buffer bytes
	uint32_t read_burst = 64;     // read-response packets per QP per engine pass
	uint32_t rc_ooo = 256;	      // requests past a gap an RC responder keeps (0: none)
	uint32_t seg_units = 4096;    // Seg cache units in the NIC
	uint32_t coll_window = 64;    // blocks a node keeps in flight per collective
	uint32_t coll_rto_us = 20000; // a block without its result is sent again after this
	uint32_t coll_probe_us = 500; // ... is probed for after at least this (0: never)
	uint32_t coll_timeout_ms = 10000; // a collective without progress fails after this
	uint32_t coll_xchg_bytes = 16384; // a smaller allreduce runs as a pairwise exchange
	// ... on a job whose members all have one address: 65536 unless
	// IBV_COLL_EMU_XCHG_BYTES is set (then that)
	uint32_t coll_xchg_bytes_host = 65536;
	uint32_t coll_depth = 4;      // exchanged messages a job runs at once
	bool gso = true;	      // UDP segmentation offload and GRO
	uint32_t sw_config_ms = 1000; // wait this long for a switch's grant
	uint64_t port_rate_bps = 0; // the port's line rate: new switch blocks paced to it (0: not)
	Impairment impair;
	CcParams cc;		       // congestion control (nic/cc.h)
	uint32_t cnp_interval_us = 50; // at most one CNP per flow this often
};

// Every IBV_COLL_EMU_* variable: this table's and the transports'.
std::span<const util::ConfigVar> emu_config_vars();
// Read the IBV_COLL_EMU_* variables; EINVAL (logged) on a bad value.
int load_emu_config(EmuConfig *out);

} // namespace ibv_coll::emu
