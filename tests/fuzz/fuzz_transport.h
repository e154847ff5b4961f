// What the receive-path fuzz targets share: a Transport that hands the
// engine or the switch the packets the fuzzer made (and swallows what they
// send), and the ICRC fix-up that lets inputs past the CRC check.
//
// An input is a sequence of records, each one byte of framing, a 16-bit
// big-endian length and that many bytes: a packet from the BTH to the end
// of the payload (a last record shorter than its length takes what is
// left).  The framing byte picks the source address (low two bits, an
// index into the target's table of peers), for the switch's target the
// worker (bits 2-3, fuzz_switch_rx.cc) and, with bit 7, keeps the
// packet as it is; otherwise the ICRC the packet needs is appended (by the
// tests' own reference, tests/common/ref_icrc.h), since a fuzzer cannot
// guess a CRC-32 and every parser past it would stay unexplored.  Each
// input starts from a fresh device or switch, so a crash reproduces from
// its input alone.
#pragma once

#include "net/transport.h"
#include "ref_icrc.h"

#include <sys/eventfd.h>

#include "wire/ceth.h"
#include "wire/roce.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

namespace ibvc_fuzz {

using ibv_coll::emu::Endpoint;
using ibv_coll::emu::IpAddr;
using ibv_coll::emu::PortCounters;
using ibv_coll::emu::RxPacket;
using ibv_coll::emu::Transport;

inline Endpoint v4_endpoint(uint8_t last, uint16_t port)
{
	Endpoint e;
	e.ip = IpAddr::from_v4(htonl(0x7f000000u | last));
	e.port = port;
	return e;
}

class FuzzTransport final : public Transport {
public:
	explicit FuzzTransport(uint16_t port) : port_(port), fd_(eventfd(0, EFD_CLOEXEC)) {}
	~FuzzTransport() override { close(fd_); }
	FuzzTransport(const FuzzTransport &) = delete;
	FuzzTransport &operator=(const FuzzTransport &) = delete;

	int fd() const override { return fd_; }
	uint16_t port() const override { return port_; }
	bool ipv6() const override { return false; }
	const char *kind() const override { return "fuzz"; }
	uint8_t *tx_buf() override { return tx_.data(); }
	void tx_commit(size_t len, const Endpoint &, const IpAddr &) override
	{
		ctr_.tx_packets++;
		ctr_.tx_bytes += len;
	}
	void tx_flush() override {}
	unsigned rx_batch(RxPacket *out) override
	{
		std::lock_guard lk(mu_);
		if (!have_)
			return 0;
		have_ = false;
		cur_ = next_;
		out->data = cur_.data();
		out->len = cur_.size();
		out->src = src_;
		out->dst = dst_;
		ctr_.rx_packets++;
		ctr_.rx_bytes += cur_.size();
		return 1;
	}
	const PortCounters &counters() const override { return ctr_; }

	// The next packet rx_batch returns, from src to dst.
	void put(const uint8_t *p, size_t n, const Endpoint &src, const IpAddr &dst)
	{
		std::lock_guard lk(mu_);
		next_.assign(p, p + n);
		src_ = src;
		dst_ = dst;
		have_ = true;
	}
	bool pending()
	{
		std::lock_guard lk(mu_);
		return have_;
	}

private:
	uint16_t port_;
	int fd_;
	std::mutex mu_; // put() from the fuzzer's thread, rx_batch() from the engine's
	std::vector<uint8_t> next_, cur_;
	std::vector<uint8_t> tx_ = std::vector<uint8_t>(kMaxPacket);
	Endpoint src_;
	IpAddr dst_;
	bool have_ = false;
	PortCounters ctr_;
};

// Calls fn(framing, packet, length) for each record of an input.
inline void for_each_record(const uint8_t *d, size_t n,
			    const std::function<void(uint8_t, const uint8_t *, size_t)> &fn)
{
	while (n >= 3) {
		size_t len = size_t(d[1]) << 8 | d[2];
		len = std::min(len, n - 3);
		fn(d[0], d + 3, len);
		d += 3 + len;
		n -= 3 + len;
	}
}

// Appends one record: framing byte, length, packet (BTH, CETH when given,
// payload), for seeds and for the targets' own set-up.
inline void add_record(std::vector<uint8_t> &out, uint8_t framing,
		       const ibv_coll::emu::wire::Bth &b, const ibv_coll::emu::wire::Ceth *h,
		       const void *payload, size_t len)
{
	using namespace ibv_coll::emu::wire;
	std::vector<uint8_t> p(kBthBytes + (h ? kCethBytes : 0));
	Bth bb = b;
	bb.pad = uint8_t((4 - (len & 3)) & 3);
	bb.store(p.data());
	if (h)
		h->store(p.data() + kBthBytes);
	const auto *pl = static_cast<const uint8_t *>(payload);
	p.insert(p.end(), pl, pl + len);
	p.insert(p.end(), bb.pad, 0);
	out.push_back(framing);
	out.push_back(uint8_t(p.size() >> 8));
	out.push_back(uint8_t(p.size()));
	out.insert(out.end(), p.begin(), p.end());
}

// The packet (after the framing byte) as it goes on the wire from
// src to dst:dport, with its ICRC unless the framing byte says keep.
inline std::vector<uint8_t> frame(uint8_t framing, const uint8_t *in, size_t n, const Endpoint &src,
				  const IpAddr &dst, uint16_t dport)
{
	const bool keep = framing & 0x80;
	std::vector<uint8_t> p(in, in + n);
	if (keep || p.size() < 12)
		return p;
	uint32_t crc = ibvc_test::ref_icrc(false, src.ip.b, dst.b, src.port, dport, p);
	for (int i = 0; i < 4; i++)
		p.push_back(uint8_t(crc >> (8 * i)));
	return p;
}

} // namespace ibvc_fuzz
