// A driver-side fixture: this process owns one end of an RC connection, a
// spawned rc_peer process (optionally in another network namespace) owns
// the other and answers commands over the out-of-band socket.
#pragma once

#include "oob.h"
#include "pattern.h"
#include "rc_endpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <sys/types.h>
#include <vector>

namespace ibvc_test {

class RcFixture : public ::testing::Test {
protected:
	// Spawn the peer and connect both QPs.  peer_env entries are
	// NAME=VALUE added to the peer's environment.
	void start(const RcOptions &o, const std::vector<std::string> &peer_env = {},
		   const std::vector<std::string> &peer_args = {});
	void TearDown() override;

	Reply cmd(Cmd c, uint64_t a = 0, uint64_t b = 0, uint64_t cc = 0);
	std::vector<Reply> wait_recv(uint64_t n, int timeout_ms = 30000);
	// Kill the peer at once (SIGKILL) and reap it.
	void kill_peer();
	// Wait for the next completion on our CQ, failing the test on timeout.
	ibv_coll_wc next_wc(int timeout_ms = 30000);

	RcEndpoint ep;
	PeerInfo peer{};
	Oob oob;
	pid_t pid = -1;
	std::string oob_path;
};

} // namespace ibvc_test
