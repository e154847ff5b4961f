// ibv_coll_sim --pcap: every packet as it leaves its sender (host or
// switch), in an Ethernet/IPv4/UDP frame, stamped with the virtual time
// in nanoseconds; written through libpcap, read by tshark and the
// project's dissector (emulator/wire/ibv_coll.lua) as a real capture is.
#pragma once

#include "net/transport.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ibv_coll::sim {

class PcapWriter {
public:
	PcapWriter();
	~PcapWriter();
	// false with *err when the file cannot be written.
	bool open(const std::string &path, std::string *err);
	bool is_open() const { return dump_ != nullptr; }
	// One packet (BTH .. ICRC) from src to dst:port, ECN as its IP header
	// carries it, at t_ns of virtual time.
	void write(uint64_t t_ns, const emu::Endpoint &src, const emu::IpAddr &dst, uint16_t dport,
		   uint8_t ecn, const uint8_t *roce, size_t len);
	// false with *err if a write or the close failed.
	bool close(std::string *err);

private:
	void *pcap_ = nullptr, *dump_ = nullptr; // pcap_t, pcap_dumper_t
	std::unique_ptr<uint8_t[]> frame_;
};

} // namespace ibv_coll::sim
