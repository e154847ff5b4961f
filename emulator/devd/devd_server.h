// ibv_coll_devd's server, the host's shared device: one emulated NIC for a
// netdev, serving every process of the host that opens crxe_<netdev> with
// IBV_COLL_CRXE_SHARED=1.  One thread takes requests (devd_proto.h); the
// NIC's engine thread does the work.  Each connection owns what it made;
// when it closes (its process exited or died) those objects are destroyed,
// QPs first, then CQs, MRs and PDs.
#pragma once

#include "nic/nic.h"
#include "util/fd.h"

#include <atomic>
#include <memory>
#include <string>

namespace ibv_coll::devd {

struct ServerOptions {
	bool exit_idle = false; // return when the last client has gone
};

class Server {
public:
	// Listen as the daemon of device `dev` (crxe_<netdev>) over nic.
	// EADDRINUSE: another daemon serves it.
	static int create(const std::string &dev, std::unique_ptr<emu::Nic> nic,
			  const ServerOptions &o, std::unique_ptr<Server> *out);
	~Server();
	// Serve until stop() or, with exit_idle, the last client's exit.
	int run();
	// From a signal handler or another thread.
	void stop();

	struct Conn;

private:
	Server() = default;
	struct Req;
	// serve() hands a request to each group in turn: kNotMine passes it
	// on, kNoReply (a doorbell) sends nothing back.
	static constexpr int kNotMine = -1, kNoReply = -2;
	int serve(Conn &c);
	int serve_mem(Req &r);
	int serve_cq(Req &r);
	int serve_qp(Req &r);
	void close_conn(Conn *c);

	std::string dev_;
	std::unique_ptr<emu::Nic> nic_;
	ServerOptions opt_;
	util::UniqueFd lfd_, ep_, stop_;
	// The engine's awake word (nic/engine.h), in a page every client maps
	// read-only from the hello reply: a client that sees it at 1 skips its
	// doorbell message.
	util::UniqueFd wake_fd_;
	void *wake_map_ = nullptr;
	std::atomic<bool> stopping_{false};
	size_t clients_ = 0;
	uint32_t next_id_ = 1;
};

} // namespace ibv_coll::devd
