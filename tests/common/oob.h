// Out-of-band channel for multi-process tests: a Unix stream socket
// (a path, so it reaches across network namespaces) carrying fixed-size
// messages, every read bounded by a timeout so a dead peer fails a test
// instead of hanging it.
#pragma once

#include <cstdint>
#include <string>

namespace ibvc_test {

struct PeerInfo {
	uint8_t gid[16];
	uint16_t udp_port;
	uint16_t pad;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
	uint64_t size;
};

enum Cmd : uint32_t {
	kPostRecv = 1, // a = count, b = bytes each, c = offset of the first
	kWaitRecv,     // a = count, b = timeout ms; one Reply per completion
	kFill,	       // a = seed, b = offset, c = bytes
	kCheck,	       // a = seed, b = offset, c = bytes; Reply.a = first bad offset or ~0
	kZero,	       // b = offset, c = bytes
	kQuit,
};

struct Msg {
	uint32_t cmd;
	uint32_t pad;
	uint64_t a, b, c;
};

struct Reply {
	int32_t status; // 0 ok, else an errno or a wc status + 1000
	uint32_t opcode;
	uint64_t a, b;
	uint32_t imm;
	uint32_t wc_flags;
};

class Oob {
public:
	~Oob();
	// Listen on path (removing a stale socket) / connect to it.
	int listen(const std::string &path);
	int accept(int timeout_ms);
	int connect(const std::string &path, int timeout_ms);
	// Whole-message I/O; 0, or an errno (ETIMEDOUT, EPIPE...).
	int send(const void *p, size_t n);
	int recv(void *p, size_t n, int timeout_ms);
	int fd() const { return fd_; }

private:
	int lfd_ = -1, fd_ = -1;
	std::string path_;
};

} // namespace ibvc_test
