/* ibvc_boot - a small out-of-band rendezvous: node 0 gathers every node's
 * blob over a stream socket and sends the whole table back to each (what
 * ibv_coll_run's single-host jobs need), or the PMIx launcher does it. */
#define _GNU_SOURCE
#include "ibvc_boot.h"
#include "ibvc_boot_pmix.h"

#include <ibv_coll/ibv_coll.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct ibvc_boot {
	int node, nodes, timeout_ms;
	int lfd;  /* node 0: listening socket */
	int *fds; /* node 0: one per other node, by node index */
	int fd;	  /* others: the connection to node 0 */
	char *unix_path;
	int pmix; /* the launcher's PMIx carries the exchange */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		struct pollfd p = {fd, ev, 0};
		int r;
		if (left <= 0)
			return ETIMEDOUT;
		r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return errno;
	}
}

static int send_all(int fd, const void *p, size_t n, int64_t deadline)
{
	const char *b = p;
	while (n) {
		ssize_t r;
		int err = wait_fd(fd, POLLOUT, deadline);
		if (err)
			return err;
		r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int recv_all(int fd, void *p, size_t n, int64_t deadline)
{
	char *b = p;
	while (n) {
		ssize_t r;
		int err = wait_fd(fd, POLLIN, deadline);
		if (err)
			return err;
		r = recv(fd, b, n, 0);
		if (r == 0)
			return EPIPE; /* the peer went away */
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* A node that waits for the others says so on stderr after a few seconds
 * and then now and again, and says who never came when it gives up: a
 * lone member is otherwise silent until its timeout. */
enum { NOTE_FIRST_MS = 3000, NOTE_EVERY_MS = 15000 };

static void note_missing(const struct ibvc_boot *b, const char *addr, int64_t deadline, int final)
{
	char who[256] = "";
	size_t len = 0;
	int missing = 0;
	if (b->node != 0) {
		if (final)
			fprintf(stderr,
				"ibvc_boot: node %d of %d: gave up after %d s: node 0 never "
				"listened at %s\n",
				b->node, b->nodes, b->timeout_ms / 1000, addr);
		else
			fprintf(stderr,
				"ibvc_boot: node %d of %d: waiting for node 0 to listen at %s "
				"(%d s left)\n",
				b->node, b->nodes, addr, (int)((deadline - now_ms() + 999) / 1000));
		return;
	}
	for (int i = 1; i < b->nodes; i++)
		if (b->fds[i] < 0) {
			if (len < sizeof(who) - 16)
				len += (size_t)snprintf(who + len, sizeof(who) - len, "%s%d",
							missing ? ", " : "", i);
			missing++;
		}
	if (len >= sizeof(who) - 16)
		snprintf(who + len, sizeof(who) - len, ", ...");
	if (final)
		fprintf(stderr,
			"ibvc_boot: node 0 of %d: gave up after %d s: %s %s never connected "
			"to %s\n",
			b->nodes, b->timeout_ms / 1000, missing > 1 ? "nodes" : "node", who, addr);
	else
		fprintf(stderr,
			"ibvc_boot: node 0 of %d: waiting for %s %s to connect to %s "
			"(%d s left)\n",
			b->nodes, missing > 1 ? "nodes" : "node", who, addr,
			(int)((deadline - now_ms() + 999) / 1000));
}

/* addr ("unix:/path") as a socket address.  Only Unix sockets: this helper
 * serves the jobs of one machine (ibv_coll_run, and network namespaces of
 * one machine, which share its file system); across hosts the launcher's
 * PMIx does the exchange ("pmix"). */
static int resolve(const char *addr, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_un *u = (struct sockaddr_un *)ss;
	memset(ss, 0, sizeof(*ss));
	if (strncmp(addr, "unix:", 5)) {
		fprintf(stderr,
			"ibvc_boot: '%s' is not unix:/path; across hosts, start the "
			"job with a PMIx launcher (mpirun, srun)\n",
			addr);
		return EINVAL;
	}
	if (strlen(addr + 5) >= sizeof(u->sun_path))
		return ENAMETOOLONG;
	u->sun_family = AF_UNIX;
	strcpy(u->sun_path, addr + 5);
	*len = sizeof(*u);
	return 0;
}

static int open_server(struct ibvc_boot *b, const char *addr, int64_t deadline)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, i, err = resolve(addr, &ss, &len);
	if (err)
		return err;
	if (ss.ss_family == AF_UNIX) {
		b->unix_path = strdup(((struct sockaddr_un *)&ss)->sun_path);
		unlink(b->unix_path);
	}
	b->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (b->lfd < 0)
		return errno;
	setsockopt(b->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(b->lfd, (struct sockaddr *)&ss, len) || listen(b->lfd, b->nodes))
		return errno;
	int64_t note = now_ms() + NOTE_FIRST_MS;
	for (i = 1; i < b->nodes; i++) {
		int32_t who;
		int fd;
		while ((err = wait_fd(b->lfd, POLLIN, note < deadline ? note : deadline)) ==
		       ETIMEDOUT) {
			if (now_ms() >= deadline) {
				note_missing(b, addr, deadline, 1);
				return err;
			}
			note_missing(b, addr, deadline, 0);
			note += NOTE_EVERY_MS;
		}
		if (err)
			return err;
		fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return errno;
		if ((err = recv_all(fd, &who, sizeof(who), deadline))) {
			close(fd);
			return err;
		}
		if (who < 1 || who >= b->nodes || b->fds[who] >= 0) {
			close(fd);
			return EPROTO; /* a stranger, or a node twice */
		}
		b->fds[who] = fd;
	}
	return 0;
}

static int open_client(struct ibvc_boot *b, const char *addr, int64_t deadline)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int32_t me = b->node;
	int err = resolve(addr, &ss, &len);
	if (err)
		return err;
	/* Node 0 may not be listening yet: try until the deadline. */
	int64_t note = now_ms() + NOTE_FIRST_MS;
	for (;;) {
		b->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (b->fd < 0)
			return errno;
		if (!connect(b->fd, (struct sockaddr *)&ss, len))
			break;
		err = errno;
		close(b->fd);
		b->fd = -1;
		if (now_ms() >= deadline) {
			note_missing(b, addr, deadline, 1);
			return ETIMEDOUT;
		}
		if (now_ms() >= note) {
			note_missing(b, addr, deadline, 0);
			note += NOTE_EVERY_MS;
		}
		usleep(20000);
	}
	return send_all(b->fd, &me, sizeof(me), deadline);
}

int ibvc_boot_open(const char *addr, int node, int nodes, int timeout_ms, struct ibvc_boot **out)
{
	struct ibvc_boot *b;
	int64_t deadline = now_ms() + timeout_ms;
	int i, err;
	if (!addr || !out || nodes < 1 || node < 0 || node >= nodes || timeout_ms <= 0)
		return EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return ENOMEM;
	b->node = node;
	b->nodes = nodes;
	b->timeout_ms = timeout_ms;
	b->lfd = b->fd = -1;
	b->fds = malloc(sizeof(int) * (size_t)nodes);
	if (!b->fds) {
		free(b);
		return ENOMEM;
	}
	for (i = 0; i < nodes; i++)
		b->fds[i] = -1;
	if (!strcmp(addr, "pmix")) {
		int rank, size;
		b->pmix = 1;
		err = ibvc_pmix_init(&rank, &size);
		if (!err && (rank != node || size != nodes))
			err = EINVAL; /* not what the launcher says we are */
	} else
		err = nodes == 1  ? 0
		      : node == 0 ? open_server(b, addr, deadline)
				  : open_client(b, addr, deadline);
	if (err) {
		ibvc_boot_close(b);
		return err;
	}
	*out = b;
	return 0;
}

int ibvc_boot_allgather(struct ibvc_boot *b, const void *mine, size_t len, void *all)
{
	int64_t deadline = now_ms() + b->timeout_ms;
	char *table = all;
	int i, err;
	if (b->pmix)
		return ibvc_pmix_allgather(mine, len, all, b->nodes, b->timeout_ms);
	memcpy(table + (size_t)b->node * len, mine, len);
	if (b->nodes == 1)
		return 0;
	if (b->node != 0) {
		if ((err = send_all(b->fd, mine, len, deadline)))
			return err;
		return recv_all(b->fd, table, len * (size_t)b->nodes, deadline);
	}
	for (i = 1; i < b->nodes; i++)
		if ((err = recv_all(b->fds[i], table + (size_t)i * len, len, deadline)))
			return err;
	for (i = 1; i < b->nodes; i++)
		if ((err = send_all(b->fds[i], table, len * (size_t)b->nodes, deadline)))
			return err;
	return 0;
}

int ibvc_boot_barrier(struct ibvc_boot *b)
{
	char one = 1, *all = malloc((size_t)b->nodes);
	int err;
	if (b->pmix) {
		free(all);
		return ibvc_pmix_barrier(b->timeout_ms);
	}
	if (!all)
		return ENOMEM;
	err = ibvc_boot_allgather(b, &one, 1, all);
	free(all);
	return err;
}

void ibvc_boot_close(struct ibvc_boot *b)
{
	int i;
	if (!b)
		return;
	for (i = 0; i < b->nodes; i++)
		if (b->fds[i] >= 0)
			close(b->fds[i]);
	if (b->fd >= 0)
		close(b->fd);
	if (b->lfd >= 0)
		close(b->lfd);
	if (b->unix_path) {
		unlink(b->unix_path);
		free(b->unix_path);
	}
	if (b->pmix)
		ibvc_pmix_fini();
	free(b->fds);
	free(b);
}

int ibvc_boot_from_env(const char **addr, int *node, int *nodes)
{
	const char *a = getenv("IBVC_BOOT_ADDR"), *n = getenv("IBVC_BOOT_NODE"),
		   *s = getenv("IBVC_BOOT_NODES");
	if (a && n && s) { /* ibv_coll_run's, even under a PMIx launcher */
		*addr = a;
		*node = atoi(n);
		*nodes = atoi(s);
		return *nodes >= 1 && *node >= 0 && *node < *nodes ? 0 : EINVAL;
	}
	/* What a PMIx launcher (mpirun, prterun, srun --mpi=pmix) sets. */
	if (getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE")) {
		int err = ibvc_pmix_init(node, nodes);
		if (err)
			return err;
		*addr = "pmix";
		return *nodes >= 1 && *node >= 0 && *node < *nodes ? 0 : EINVAL;
	}
	return ENOENT;
}

int ibvc_boot_shared_device(const struct ibv_coll_caps *caps)
{
	return (caps->comp_mask & IBV_COLL_CAPS_FLAGS) &&
	       (caps->flags & IBV_COLL_CAPS_SHARED_DEVICE);
}

/* What a process says about its node; processes with equal keys are one. */
struct place_key {
	int32_t kind; /* 0: a node of its own; 1: IBVC_JOB_NODE; 2: its host */
	int32_t num;  /* kind 0: its rendezvous index; kind 1: the node */
	char host[64];
};

int ibvc_boot_place(struct ibvc_boot *b, int shared, struct ibvc_boot_place *out, int *node_of)
{
	const char *env = getenv("IBVC_JOB_NODE");
	struct place_key me, *all;
	int *first, err, n = b->nodes;
	memset(&me, 0, sizeof(me));
	me.num = b->node;
	if (env) {
		char *end;
		long v = strtol(env, &end, 10);
		if (end == env || *end || v < 0 || v >= n) {
			fprintf(stderr, "ibvc_boot: IBVC_JOB_NODE=%s: not a node from 0 to %d\n",
				env, n - 1);
			return EINVAL;
		}
		me.kind = 1;
		me.num = (int32_t)v;
	} else if (b->pmix && shared) {
		me.kind = 2;
		me.num = 0;
		ibvc_pmix_host(me.host, sizeof(me.host));
	}
	all = calloc((size_t)n, sizeof(*all));
	first = calloc((size_t)n, sizeof(*first));
	if (!all || !first) {
		free(all);
		free(first);
		return ENOMEM;
	}
	if ((err = ibvc_boot_allgather(b, &me, sizeof(me), all)))
		goto out;
	memset(out, 0, sizeof(*out));
	out->node = -1;
	/* first[k]: the rendezvous index of node k's first process. */
	for (int i = 0; i < n; i++) {
		int k;
		if (all[i].kind != all[0].kind) {
			fprintf(stderr,
				"ibvc_boot: process %d and process 0 group processes into nodes "
				"differently (IBVC_JOB_NODE set in one, not the other, or the "
				"host's shared device opened in one, not the other?)\n",
				i);
			err = EINVAL;
			goto out;
		}
		for (k = 0; k < out->nodes; k++)
			if (all[first[k]].num == all[i].num &&
			    !strncmp(all[first[k]].host, all[i].host, sizeof(me.host)))
				break;
		if (k == out->nodes) {
			if (all[i].kind == 1 && all[i].num != k) {
				fprintf(stderr,
					"ibvc_boot: process %d is the first of node %d, which "
					"should be node %d: IBVC_JOB_NODE must number the nodes in "
					"the order of their first process\n",
					i, all[i].num, k);
				err = EINVAL;
				goto out;
			}
			first[out->nodes++] = i;
		}
		if (node_of)
			node_of[i] = k;
		if (i == b->node) {
			out->node = k;
			out->lead = first[k];
		}
	}
	/* This process's place among its node's, and how many it has. */
	for (int i = 0; i < n; i++)
		if (all[i].num == me.num && !strncmp(all[i].host, me.host, sizeof(me.host))) {
			out->local += i < b->node;
			out->locals++;
		}
out:
	free(all);
	free(first);
	return err;
}
