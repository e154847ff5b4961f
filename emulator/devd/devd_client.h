// A client of ibv_coll_devd (issue 14): an emu::Device whose NIC runs in
// the device process of a netdev.  Commands are requests on the channel
// (devd_proto.h); rings are memfds both map; doorbells are messages;
// completion events come on one eventfd per CQ, which a thread of the
// client turns into the CqEventFn calls the driver asked for.
#pragma once

#include "nic/device.h"

#include <memory>
#include <string>

namespace ibv_coll::devd {

class Client;

// Connect to the daemon serving netdev (crxe_<netdev>); when none does,
// start one (the binary IBV_COLL_CRXE_DEVD names, with --exit-idle) and
// connect to it.  0 or errno.
int open_client(const std::string &netdev, const std::string &devd_path,
		std::unique_ptr<emu::Device> *out);

} // namespace ibv_coll::devd
