// A member of a switch's job played by a plain UDP socket on the loopback,
// for the tests of the switch in one process: every packet is built by
// hand from ibv_coll_wire(7) (the ICRC by the test's own reference,
// ref_icrc.h) and every packet the switch sends is read back as the test
// sees it.
#pragma once

#include "ref_icrc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ibvc_test {

// 127.0.0.1 as a 16-byte (IPv4-mapped) address: the ICRC's and a task's.
inline constexpr uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
// BTH, CETH, ICRC: a packet without payload.
inline constexpr size_t kBare = 12 + 64 + 4;

// x as `bytes` bytes, big-endian (network order), appended to v.
inline void put(std::vector<uint8_t> &v, uint64_t x, int bytes)
{
	for (int s = 8 * (bytes - 1); s >= 0; s -= 8)
		v.push_back(uint8_t(x >> s));
}

// The BTH and CETH fields a test sets; the rest are zero.
struct Hdr {
	uint8_t opcode = 0xe0; // DATA
	uint8_t tver = 0;
	uint16_t pkey = 0xffff;
	int pad = -1; // -1: the payload's
	uint8_t coll = 0x40, op = 0 /* SUM */, dtype = 2 /* INT32 */, flags = 0, status = 0;
	uint8_t phase = 0;
	uint16_t src_node = 0;
	uint32_t jid = 1, mid = 1, sid = 0;
	uint16_t seg = 0;
	int len = -1; // -1: the payload's
	uint64_t node_map = 1, rank_map = 1, key = 0;
	uint32_t inc = 1; // the job's first incarnation
	uint32_t seq = 0;
	uint32_t hold = 0;
};

// Task information (wire/swproto.h's layout, written out here): by
// default node 0 of a job of two members that one switch serves, asking
// for 8 Seg units.
struct Task {
	uint16_t node = 0, nodes = 2;
	uint32_t qpn = 0x77;
	uint64_t members = 3, subtree = 3;
	uint32_t seg_req = 8;
	uint16_t plane = 0, parent_port = 0; // a parent on the loopback address
};

inline std::vector<uint8_t> task(const Task &t)
{
	std::vector<uint8_t> v;
	put(v, t.node, 2);
	put(v, t.nodes, 2);
	put(v, t.qpn, 4);
	put(v, t.members, 8);
	put(v, t.subtree, 8);
	put(v, t.seg_req, 4);
	put(v, t.plane, 2);
	put(v, t.parent_port, 2);
	if (t.parent_port)
		v.insert(v.end(), kLoopback, kLoopback + 16);
	else
		v.insert(v.end(), 16, 0);
	return v;
}

// Node `node`'s default task, at QP 0x77 + node.
inline std::vector<uint8_t> task_of(uint16_t node, uint16_t parent_port = 0)
{
	Task t;
	t.node = node;
	t.qpn = 0x77 + node;
	t.parent_port = parent_port;
	return task(t);
}

inline std::vector<uint8_t> i32(int32_t x)
{
	std::vector<uint8_t> b(4);
	memcpy(b.data(), &x, 4); // reduced in host order
	return b;
}

inline std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t> &b)
{
	a.insert(a.end(), b.begin(), b.end());
	return a;
}

// A packet the switch sent, as the test reads it.
struct Pkt {
	uint8_t opcode = 0, flags = 0, status = 0;
	uint16_t seg = 0;
	uint32_t seq = 0;  // the block's number in its job
	uint32_t dqpn = 0; // the BTH's destination QP
	std::vector<uint8_t> payload;
	int32_t value() const
	{
		int32_t v = INT32_MIN;
		if (payload.size() == 4)
			memcpy(&v, payload.data(), 4);
		return v;
	}
};

class Peer {
public:
	Peer()
	{
		fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		socklen_t l = sizeof(a);
		getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &l);
		port_ = ntohs(a.sin_port);
	}
	~Peer() { close(fd_); }
	Peer(const Peer &) = delete;
	Peer &operator=(const Peer &) = delete;

	size_t raw(uint16_t to, const std::vector<uint8_t> &b) const
	{
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = htons(to);
		sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		return b.size();
	}
	// The datagram, ICRC included (or with a wrong one).
	std::vector<uint8_t> build(uint16_t to, const Hdr &h, const std::vector<uint8_t> &payload,
				   bool bad_icrc = false) const
	{
		std::vector<uint8_t> r;
		const uint32_t fill = (4 - (payload.size() & 3)) & 3;
		const uint32_t pad = h.pad < 0 ? fill : uint32_t(h.pad);
		r.push_back(h.opcode);
		r.push_back(uint8_t(0x40 | pad << 4 | h.tver));
		put(r, h.pkey, 2);
		put(r, 0, 4);
		put(r, 0, 4);
		for (uint8_t x : {h.coll, h.op, h.dtype, h.flags, h.status, h.phase})
			r.push_back(x);
		put(r, h.src_node, 2);
		put(r, h.jid, 4);
		put(r, h.mid, 4);
		put(r, h.sid, 4);
		put(r, h.seg, 2);
		put(r, h.len < 0 ? payload.size() : size_t(h.len), 2);
		put(r, h.node_map, 8);
		put(r, h.rank_map, 8);
		put(r, h.key, 8);
		put(r, h.inc, 4);
		put(r, h.seq, 4);
		put(r, h.hold, 4);
		put(r, 0, 4); // queue
		r.insert(r.end(), payload.begin(), payload.end());
		r.insert(r.end(), fill, 0);
		const uint32_t crc = ref_icrc(false, kLoopback, kLoopback, port_, to, r) ^
				     (bad_icrc ? 1 : 0);
		for (int i = 0; i < 4; i++)
			r.push_back(uint8_t(crc >> (8 * i)));
		return r;
	}
	size_t send(uint16_t to, const Hdr &h, const std::vector<uint8_t> &payload,
		    bool bad_icrc = false) const
	{
		return raw(to, build(to, h, payload, bad_icrc));
	}
	// The next packet to us, within timeout_ms.
	bool recv(Pkt *p, int timeout_ms = 0) const
	{
		uint8_t b[9000];
		pollfd pf{fd_, POLLIN, 0};
		if (poll(&pf, 1, timeout_ms) != 1)
			return false;
		const ssize_t n = ::recv(fd_, b, sizeof(b), 0);
		if (n < ssize_t(kBare))
			return false;
		const uint32_t pad = (b[1] >> 4) & 3;
		p->opcode = b[0];
		p->dqpn = uint32_t(b[5]) << 16 | uint32_t(b[6]) << 8 | b[7];
		p->status = b[12 + 4];
		p->flags = b[12 + 3];
		p->seg = uint16_t(b[12 + 20] << 8 | b[12 + 21]);
		p->seq = uint32_t(b[12 + 52]) << 24 | uint32_t(b[12 + 53]) << 16 |
			 uint32_t(b[12 + 54]) << 8 | b[12 + 55];
		p->payload.assign(b + 12 + 64, b + n - 4 - pad);
		return true;
	}
	// The next packet of this opcode (others skipped), within 200 ms.
	bool next(uint8_t opcode, Pkt *p) const
	{
		while (recv(p, 200))
			if (p->opcode == opcode)
				return true;
		return false;
	}
	void drain() const
	{
		Pkt p;
		while (recv(&p))
			;
	}
	uint16_t port() const { return port_; }

private:
	int fd_;
	uint16_t port_;
};

} // namespace ibvc_test
