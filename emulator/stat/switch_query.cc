// The asking side of STATS / STATS_REPLY (wire/swproto.h).
#include "stat/switch_query.h"

#include "util/fd.h"
#include "wire/coll_codec.h"
#include "wire/swproto.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace ibv_coll::emu::stat {

using namespace wire;

namespace {

// host[:port] or [v6]:port, into its parts.
bool split_address(const std::string &a, std::string *host, std::string *port)
{
	*port = "4791";
	if (!a.empty() && a[0] == '[') {
		size_t rb = a.find(']');
		if (rb == std::string::npos)
			return false;
		*host = a.substr(1, rb - 1);
		if (rb + 1 < a.size()) {
			if (a[rb + 1] != ':')
				return false;
			*port = a.substr(rb + 2);
		}
	} else {
		size_t c = a.find(':');
		// A bare IPv6 address has several colons and no port.
		if (c != std::string::npos && a.find(':', c + 1) == std::string::npos) {
			*host = a.substr(0, c);
			*port = a.substr(c + 1);
		} else {
			*host = a;
		}
	}
	return !host->empty() && !port->empty();
}

// An address as the ICRC sees it: 16 bytes, IPv4 mapped.
void to16(const sockaddr_storage &ss, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	if (ss.ss_family == AF_INET) {
		auto *s4 = reinterpret_cast<const sockaddr_in *>(&ss);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &s4->sin_addr, 4);
		*port = ntohs(s4->sin_port);
	} else {
		auto *s6 = reinterpret_cast<const sockaddr_in6 *>(&ss);
		memcpy(out, &s6->sin6_addr, 16);
		*port = ntohs(s6->sin6_port);
	}
}

// rsp[0..len) if it is the STATS_REPLY to (tag, first) from where `ep`
// sent the request: the switch's name and records into *out, its number
// of counters into *have, the records it held into *recs.
bool take_reply(const uint8_t *rsp, size_t len, const UdpEndpoints &ep, uint32_t tag,
		uint32_t first, SwitchStats *out, uint32_t *have, size_t *recs)
{
	UdpEndpoints back{};
	memcpy(back.src, ep.dst, 16);
	memcpy(back.dst, ep.src, 16);
	back.sport = ep.dport;
	back.dport = ep.sport;
	CollRx c;
	if (coll_decode(back, rsp, len, &c) != CollError::ok)
		return false;
	const Ceth &r = c.h;
	const size_t paylen = c.paylen;
	if (c.bth.opcode != kCollStatsReply || r.mid != tag || r.sid != first ||
	    paylen < sw::kStatsNameBytes)
		return false;
	const uint8_t *pl = c.payload;
	out->name.assign(reinterpret_cast<const char *>(pl),
			 strnlen(reinterpret_cast<const char *>(pl), sw::kStatsNameBytes));
	*recs = (paylen - sw::kStatsNameBytes) / sw::kStatsRecordBytes;
	for (size_t i = 0; i < *recs; i++) {
		const uint8_t *rec = pl + sw::kStatsNameBytes + i * sw::kStatsRecordBytes;
		const char *k = reinterpret_cast<const char *>(rec);
		out->counters.emplace_back(std::string(k, strnlen(k, sw::kStatsKeyBytes)),
					   load_be64(rec + sw::kStatsKeyBytes));
	}
	*have = r.seg;
	return true;
}

} // namespace

int query_switch(const std::string &address, int timeout_ms, SwitchStats *out, std::string *err,
		 size_t pad)
{
	out->address = address;
	std::string host, port;
	if (!split_address(address, &host, &port)) {
		*err = "not host[:port]";
		return EINVAL;
	}
	addrinfo hints{}, *ai = nullptr;
	hints.ai_socktype = SOCK_DGRAM;
	if (int r = getaddrinfo(host.c_str(), port.c_str(), &hints, &ai)) {
		*err = gai_strerror(r);
		return EINVAL;
	}
	util::UniqueFd fd(socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	int cerr = fd && connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
	freeaddrinfo(ai);
	if (cerr) {
		*err = strerror(cerr);
		return cerr;
	}
	// The ICRC covers both addresses and ports: ours as the kernel chose.
	sockaddr_storage me{}, peer{};
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	getsockname(fd.get(), reinterpret_cast<sockaddr *>(&me), &ml);
	getpeername(fd.get(), reinterpret_cast<sockaddr *>(&peer), &pl);
	UdpEndpoints ep;
	to16(me, ep.src, &ep.sport);
	to16(peer, ep.dst, &ep.dport);

	std::mt19937 rng(std::random_device{}());
	if (pad > sw::kStatsRequestPad * 8) {
		*err = "request padding too large";
		return EINVAL;
	}
	const uint32_t total_pad = uint32_t(pad);
	uint32_t first = 0, have = UINT32_MAX;
	out->counters.clear();
	std::vector<uint8_t> reqv(kBthBytes + kCethBytes + total_pad + 3 + kIcrcBytes);
	std::vector<uint8_t> rspv(reqv.size() + 64);
	uint8_t *req = reqv.data(), *rsp = rspv.data();
	while (first < have) {
		const uint32_t tag = rng();
		std::fill(reqv.begin(), reqv.end(), 0);
		Ceth h;
		h.mid = tag;
		h.sid = first;
		// dqpn 0: the switch answers the socket; the PSN is the tag.
		const size_t hdr = coll_encode(req, kCollStats, 0, tag, h, nullptr, 0, total_pad);
		const size_t req_len = roce_seal(ep, req, hdr, total_pad);
		bool answered = false;
		for (int attempt = 0; attempt < 3 && !answered; attempt++) {
			if (send(fd.get(), req, req_len, 0) < 0) {
				const int e = errno;
				*err = strerror(e);
				return e;
			}
			auto until = std::chrono::steady_clock::now() +
				     std::chrono::milliseconds(timeout_ms);
			while (!answered) {
				auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
					until - std::chrono::steady_clock::now());
				pollfd pf{fd.get(), POLLIN, 0};
				if (left.count() <= 0 || poll(&pf, 1, int(left.count())) <= 0)
					break;
				ssize_t n = recv(fd.get(), rsp, rspv.size(), 0);
				if (n < 0) {
					// ECONNREFUSED: nothing listens there (ICMP port unreachable).
					const int e = errno;
					*err = strerror(e);
					return e;
				}
				size_t recs = 0;
				if (!take_reply(rsp, size_t(n), ep, tag, first, out, &have, &recs))
					continue;
				if (!recs && first < have) {
					*err = "the switch sent no record";
					return EPROTO;
				}
				first += uint32_t(recs);
				answered = true;
			}
		}
		if (!answered) {
			*err = "no answer";
			return ETIMEDOUT;
		}
	}
	return 0;
}

} // namespace ibv_coll::emu::stat
