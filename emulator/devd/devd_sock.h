// The channel between the shared device (ibv_coll_devd, the one NIC of a
// netdev that the host's processes use together) and its clients: a
// SOCK_SEQPACKET unix socket in the abstract namespace, named after the
// device, so that every process of a host (of a network namespace:
// abstract names are per namespace, as netdevs are) that opens
// crxe_<netdev> finds the same one and none is left on a file system.
// Messages keep their boundaries and carry file descriptors (the memfds of
// the rings, the doorbell and completion eventfds) as SCM_RIGHTS.  The
// daemon learns who a client is from the socket (SO_PEERCRED), never from
// what the client says: its pid is the address space its memory is reached
// in (nic/mr_table.h DmaSpace).
#pragma once

#include "util/fd.h"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ibv_coll::devd {

// The abstract socket name of device `dev` (without the leading NUL):
// "ibv_coll_devd/<dev>".  EINVAL (from the functions below) when it would
// not fit a sockaddr_un.
std::string socket_name(const std::string &dev);

// Serve device dev: EADDRINUSE when another process serves it already.
int listen_dev(const std::string &dev, util::UniqueFd *out);
// Reach the process serving dev: ECONNREFUSED when there is none.
int connect_dev(const std::string &dev, util::UniqueFd *out);
// A client waiting on a listening socket (EAGAIN: none).
int accept_client(int lfd, util::UniqueFd *out);

// Who is at the other end of a connected socket, as the kernel says.
struct Peer {
	pid_t pid = 0;
	uid_t uid = 0;
	gid_t gid = 0;
};
int peer_of(int fd, Peer *out);
// Whether a daemon running as uid `self` serves this peer: the same user,
// or root (who may ptrace anyone anyway).
bool peer_allowed(const Peer &p, uid_t self);

constexpr size_t kMaxFds = 4;	       // descriptors in one message
constexpr size_t kMaxMsgBytes = 65536; // one message

// One message with nfds descriptors (lent: the caller still owns them).
// 0 or errno (EPIPE: the other end is gone).
int send_msg(int fd, const void *buf, size_t len, const int *fds = nullptr, size_t nfds = 0);
// The next message into buf[0..cap) and up to kMaxFds descriptors, which
// the caller then owns (close-on-exec).  0 or errno: ECONNRESET when the
// other end closed, EMSGSIZE when the message or its descriptors were cut
// (the descriptors that came are closed).
int recv_msg(int fd, void *buf, size_t cap, size_t *len, util::UniqueFd *fds, size_t *nfds);

} // namespace ibv_coll::devd
