// A received packet, parsed enough to dispatch (RC and collective alike).
#pragma once

#include "net/transport.h"
#include "wire/roce.h"

#include <cstddef>
#include <cstdint>

namespace ibv_coll::emu {

struct InPacket {
	const uint8_t *data; // BTH
	size_t len;	     // BTH to end of padded payload (ICRC removed)
	Endpoint src;
	wire::Bth bth;
	uint16_t flags;	    // wire::opcode_flags
	const uint8_t *ext; // first extension header
	const uint8_t *payload;
	uint32_t paylen; // without pad
	// Collective results: crc32_update(0, ...) of what follows the CETH
	// (the payload and its pad), which a packet forwarding the payload
	// reuses for its own ICRC.
	uint32_t tail_crc;
	uint8_t ecn = 0;    // the IP header's ECN bits
	uint64_t rx_ns = 0; // when it reached the host (RxPacket::rx_ns; 0: not known)
	// How long it waited here before being handled at now.
	uint64_t held(uint64_t now) const { return rx_ns && rx_ns < now ? now - rx_ns : 0; }
};

} // namespace ibv_coll::emu
