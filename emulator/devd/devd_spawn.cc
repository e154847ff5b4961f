// Starting ibv_coll_devd: a child starts the daemon in a session of its
// own, waits until it serves or exits, reaps it in the second case, and
// tells the caller which through a pipe.
#include "devd/devd_spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace ibv_coll::devd {
namespace {

// What the starting child says.
struct Report {
	int exec_err;
	int status;
	int timed_out;
};

// How long a daemon may take to listen; it takes milliseconds.
constexpr int kReadyMs = 10000;

// The children run only async-signal-safe calls: the caller may have
// threads, one of which may hold a lock of malloc or stdio.
void put(int fd, const void *p, size_t n)
{
	const char *c = static_cast<const char *>(p);
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		c += w;
		n -= size_t(w);
	}
}

ssize_t get(int fd, void *p, size_t n)
{
	ssize_t r;
	while ((r = read(fd, p, n)) < 0 && errno == EINTR) {
	}
	return r;
}

// Readable (data or EOF) within ms: 1, 0 on timeout.
int await(int fd, int ms)
{
	pollfd p{fd, POLLIN, 0};
	int n;
	while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR) {
	}
	return n > 0;
}

int reap(pid_t pid)
{
	int st = 0;
	pid_t w;
	while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
	}
	if (w != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// The starting child: the daemon's parent until it serves.  The pipes:
// rep to the caller, ready (the daemon writes a byte and closes it once it
// listens; its write end alone crosses the exec), ex (the exec's errno).
[[noreturn]] void starter(const char *const argv[], const int rep[2], const int ready[2],
			  const int ex[2])
{
	Report r{0, -1, 0};
	close(rep[0]);
	setsid(); // the daemon leaves the application's session and its signals
	pid_t d = fork();
	if (d < 0) {
		r.exec_err = errno;
		put(rep[1], &r, sizeof(r));
		_exit(1);
	}
	if (d == 0) {
		close(ready[0]);
		close(ex[0]);
		if (fcntl(ready[1], F_SETFD, 0) == 0)
			execv(argv[0], const_cast<char *const *>(argv));
		int e = errno;
		put(ex[1], &e, sizeof(e));
		_exit(127);
	}
	close(ready[1]);
	close(ex[1]);
	int e;
	if (get(ex[0], &e, sizeof(e)) == sizeof(e)) {
		r.exec_err = e;
		reap(d);
	} else if (!await(ready[0], kReadyMs)) {
		r.timed_out = 1; // left to run: it may serve yet
	} else {
		char c;
		// A byte: it serves.  EOF: it exited (or will: reap it).
		if (get(ready[0], &c, 1) != 1)
			r.status = reap(d);
	}
	put(rep[1], &r, sizeof(r));
	_exit(0);
}

} // namespace

int spawn_daemon(const std::string &netdev, const std::string &path, SpawnResult *out)
{
	int rep[2], ready[2], ex[2];
	if (pipe2(rep, O_CLOEXEC))
		return errno;
	if (pipe2(ready, O_CLOEXEC)) {
		int err = errno;
		close(rep[0]);
		close(rep[1]);
		return err;
	}
	if (pipe2(ex, O_CLOEXEC)) {
		int err = errno;
		for (int fd : {rep[0], rep[1], ready[0], ready[1]})
			close(fd);
		return err;
	}
	// Everything the children need, made before the fork.
	char fdnum[16];
	snprintf(fdnum, sizeof(fdnum), "%d", ready[1]);
	const char *argv[] = {path.c_str(), "--exit-idle",  "--ready-fd",
			      fdnum,	    netdev.c_str(), nullptr};
	pid_t pid = fork();
	if (pid == 0)
		starter(argv, rep, ready, ex);
	int err = pid < 0 ? errno : 0;
	for (int fd : {rep[1], ready[0], ready[1], ex[0], ex[1]})
		close(fd);
	Report r{0, -1, 0};
	if (!err) {
		// The starter answers within kReadyMs and a bit; a starter that
		// died without a word (killed) says the same as one that timed
		// out: the caller looks for a daemon anyway.
		if (!await(rep[0], kReadyMs + 2000) || get(rep[0], &r, sizeof(r)) != sizeof(r))
			r = Report{0, -1, 1};
		reap(pid); // -1 (ECHILD) when the application's wait() took it first
	}
	close(rep[0]);
	if (err)
		return err;
	out->exec_err = r.exec_err;
	out->status = r.status;
	out->timed_out = r.timed_out != 0;
	return 0;
}

} // namespace ibv_coll::devd
