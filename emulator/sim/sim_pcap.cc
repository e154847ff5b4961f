// ibv_coll_sim --pcap (sim/sim_pcap.h).
#include "sim/sim_pcap.h"


#include <arpa/inet.h>
#include <pcap/pcap.h>

#include <cstring>

namespace ibv_coll::sim {

namespace {

constexpr size_t kEth = 14, kIp = 20, kUdp = 8;
constexpr size_t kMaxFrame = kEth + kIp + kUdp + emu::Transport::kMaxPacket + 64;

uint16_t ip_checksum(const uint8_t *h)
{
	uint32_t s = 0;
	for (size_t i = 0; i < kIp; i += 2)
		s += uint32_t(h[i] << 8 | h[i + 1]);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return uint16_t(~s);
}

// A MAC address made of the IPv4 address (locally administered).
void mac_of(uint8_t *m, const emu::IpAddr &a)
{
	m[0] = 0x02;
	m[1] = 0x00;
	memcpy(m + 2, a.b + 12, 4);
}

} // namespace

PcapWriter::PcapWriter() : frame_(new uint8_t[kMaxFrame]) {}

PcapWriter::~PcapWriter()
{
	std::string err;
	close(&err);
}

bool PcapWriter::open(const std::string &path, std::string *err)
{
	pcap_t *p = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, int(kMaxFrame),
							 PCAP_TSTAMP_PRECISION_NANO);
	if (!p) {
		*err = "pcap_open_dead failed";
		return false;
	}
	pcap_dumper_t *d = pcap_dump_open(p, path.c_str());
	if (!d) {
		*err = path + ": " + pcap_geterr(p);
		pcap_close(p);
		return false;
	}
	pcap_ = p;
	dump_ = d;
	return true;
}

void PcapWriter::write(uint64_t t_ns, const emu::Endpoint &src, const emu::IpAddr &dst,
		       uint16_t dport, uint8_t ecn, const uint8_t *roce, size_t len)
{
	if (!dump_ || len > emu::Transport::kMaxPacket + 64)
		return;
	uint8_t *f = frame_.get();
	mac_of(f, dst);
	mac_of(f + 6, src.ip);
	f[12] = 0x08;
	f[13] = 0x00;
	uint8_t *ip = f + kEth;
	const uint16_t ip_len = uint16_t(kIp + kUdp + len);
	ip[0] = 0x45;
	ip[1] = ecn & 3;
	ip[2] = uint8_t(ip_len >> 8);
	ip[3] = uint8_t(ip_len);
	memset(ip + 4, 0, 4);
	ip[6] = 0x40; // don't fragment
	ip[8] = 64;
	ip[9] = 17; // UDP
	ip[10] = ip[11] = 0;
	memcpy(ip + 12, src.ip.b + 12, 4);
	memcpy(ip + 16, dst.b + 12, 4);
	const uint16_t sum = ip_checksum(ip);
	ip[10] = uint8_t(sum >> 8);
	ip[11] = uint8_t(sum);
	uint8_t *udp = ip + kIp;
	const uint16_t udp_len = uint16_t(kUdp + len);
	udp[0] = uint8_t(src.port >> 8);
	udp[1] = uint8_t(src.port);
	udp[2] = uint8_t(dport >> 8);
	udp[3] = uint8_t(dport);
	udp[4] = uint8_t(udp_len >> 8);
	udp[5] = uint8_t(udp_len);
	udp[6] = udp[7] = 0; // no checksum (IPv4), as RoCEv2 senders may
	memcpy(udp + kUdp, roce, len);
	pcap_pkthdr h{};
	h.ts.tv_sec = time_t(t_ns / 1000000000ull);
	h.ts.tv_usec = suseconds_t(t_ns % 1000000000ull); // nanoseconds: the file's precision
	h.caplen = h.len = uint32_t(kEth + ip_len);
	pcap_dump(static_cast<u_char *>(dump_), &h, f);
}

bool PcapWriter::close(std::string *err)
{
	bool ok = true;
	if (dump_) {
		pcap_dumper_t *d = static_cast<pcap_dumper_t *>(dump_);
		if (pcap_dump_flush(d) != 0) {
			*err = "writing the capture failed";
			ok = false;
		}
		pcap_dump_close(d);
		dump_ = nullptr;
	}
	if (pcap_) {
		pcap_close(static_cast<pcap_t *>(pcap_));
		pcap_ = nullptr;
	}
	return ok;
}

} // namespace ibv_coll::sim
