// Starting ibv_coll_devd from a client that found none: the daemon runs in
// a session of its own, and only a daemon that serves outlives the start.
#pragma once

#include <string>

namespace ibv_coll::devd {

struct SpawnResult {
	int exec_err = 0;	// the exec failed with this errno
	int status = -1;	// the daemon exited before it served: its exit status
	bool timed_out = false; // it neither served nor exited in time
};

// Start `path --exit-idle --ready-fd N netdev` and wait until it serves
// (it closes the readiness pipe once it listens) or exits.  The daemon is
// started by a child that waits for it: a daemon that lost the race to
// serve the netdev to another starter (status 3), or failed, is reaped
// there, and only one that serves is left to be adopted by init (or the
// nearest subreaper), as a daemon is.  The caller gets one child, reaped
// here by its pid: no SIGCHLD handler, no wait for any other child (an
// application's own handler sees it exit, as after system(3); a wait(-1)
// of the application's may reap it first, which loses nothing: the child
// reports through a pipe).
// 0 with *r filled, or the errno of a failed pipe or fork.
int spawn_daemon(const std::string &netdev, const std::string &path, SpawnResult *r);

} // namespace ibv_coll::devd
