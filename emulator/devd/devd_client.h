// A client of ibv_coll_devd, the host's shared device: an emu::Device
// whose NIC runs in the device process of a netdev.  Commands are requests
// on the channel (devd_proto.h); rings are memfds both map; doorbells are
// messages; completion events come on one eventfd per CQ, which a thread
// of the client turns into the CqEventFn calls the driver asked for.  When
// the daemon dies, that thread flushes the outstanding WQEs into the
// client's CQ rings and reports the device fatal.
#pragma once

#include "nic/device.h"

#include <memory>
#include <string>

namespace ibv_coll::devd {

class Client;

// Called once, from the client's event thread, when the daemon died:
// after every outstanding WQE got its flush completion and every armed CQ
// its event.  The provider turns it into IBV_EVENT_DEVICE_FATAL.
using FatalFn = void (*)(void *arg);

// Which daemon to start when none serves a netdev: its path (empty: start
// none), and what the user can do when that fails, for the error message
// (the provider knows its variables; this layer does not).
struct DevdStart {
	std::string path;
	std::string advice;
};

// Connect to the daemon serving netdev (crxe_<netdev>); when none does,
// start start.path (devd_spawn.h) and connect to it.  on_fatal (may be
// null) is told when the daemon dies.  0 or errno; each failure is logged
// once, with start.advice where the user can do something.
int open_client(const std::string &netdev, const DevdStart &start,
		std::unique_ptr<emu::Device> *out, FatalFn on_fatal = nullptr, void *arg = nullptr);

} // namespace ibv_coll::devd
