/*
 * ibv_coll_udp_floor - the latency floor of this machine for a small
 * collective over UDP, with none of the library: N node processes each
 * send an 8-byte datagram to a switch process, which waits for all N and
 * sends each one back (the switch topology), or N processes exchange
 * datagrams pairwise in log2 N rounds (recursive doubling, what MPI does
 * for a small allreduce).  Each runs twice: waiting by polling the socket
 * with sched_yield() in between, and waiting blocked in poll(2).
 *
 * What ibv_coll_perf -z 1 reports for an 8-byte allreduce cannot be below
 * the first row on the same machine: every collective packet crosses the
 * same sockets and wakes the same processes.
 *
 *   ibv_coll_udp_floor [-n NODES] [-i ITERS]     (defaults 4, 20000)
 */
#define _GNU_SOURCE
#include "ibvc_version.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 64

enum wait_mode { SPIN_YIELD, BLOCK };
enum pattern { STAR, DOUBLING };

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* A non-blocking UDP socket on 127.0.0.1 and a free port: *port. */
static int open_sock(uint16_t *port)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(s, (struct sockaddr *)&a, &len)) {
		perror("ibv_coll_udp_floor: socket");
		exit(1);
	}
	*port = ntohs(a.sin_port);
	return s;
}

static void send_to(int s, uint16_t port, const void *buf)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	while (sendto(s, buf, 8, 0, (struct sockaddr *)&a, sizeof(a)) < 0 && errno == EINTR)
		;
}

static void recv_one(int s, void *buf, enum wait_mode w)
{
	for (;;) {
		if (recv(s, buf, 8, 0) >= 0)
			return;
		if (w == SPIN_YIELD) {
			sched_yield();
		} else {
			struct pollfd p = {s, POLLIN, 0};
			poll(&p, 1, -1);
		}
	}
}

/* Run one pattern: returns microseconds per round, measured at process 0. */
static double run(enum pattern pat, enum wait_mode w, int n, int iters)
{
	int socks[MAX_NODES + 1];
	uint16_t ports[MAX_NODES + 1];
	int procs = pat == STAR ? n + 1 : n;
	for (int i = 0; i < procs; i++)
		socks[i] = open_sock(&ports[i]);
	double *result = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (result == MAP_FAILED) {
		perror("ibv_coll_udp_floor: mmap");
		exit(1);
	}
	for (int i = 0; i < procs; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("ibv_coll_udp_floor: fork");
			exit(1);
		}
		if (pid)
			continue;
		uint64_t buf = 0;
		int s = socks[i];
		double t0 = now_us();
		for (int it = 0; it < iters; it++) {
			if (pat == STAR && i == n) { /* the switch */
				for (int k = 0; k < n; k++)
					recv_one(s, &buf, w);
				for (int k = 0; k < n; k++)
					send_to(s, ports[k], &buf);
			} else if (pat == STAR) {
				send_to(s, ports[n], &buf);
				recv_one(s, &buf, w);
			} else {
				for (int d = 1; d < n; d <<= 1) {
					send_to(s, ports[i ^ d], &buf);
					recv_one(s, &buf, w);
				}
			}
		}
		if (i == 0)
			*result = (now_us() - t0) / iters;
		_exit(0);
	}
	while (wait(NULL) > 0)
		;
	for (int i = 0; i < procs; i++)
		close(socks[i]);
	double r = *result;
	munmap(result, sizeof(double));
	return r;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"nodes", 1, NULL, 'n'},   {"iters", 1, NULL, 'i'}, {"help", 0, NULL, 'h'},
		{"version", 0, NULL, 'V'}, {NULL, 0, NULL, 0},
	};
	int n = 4, iters = 20000, c;
	while ((c = getopt_long(argc, argv, "n:i:hV", lo, NULL)) != -1) {
		switch (c) {
		case 'n': n = atoi(optarg); break;
		case 'i': iters = atoi(optarg); break;
		case 'V': return ibvc_print_version("ibv_coll_udp_floor", NULL);
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: %s [-n NODES] [-i ITERS] [-V]\n", argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	if (n < 2 || n > MAX_NODES || (n & (n - 1)) || iters < 1) {
		fprintf(stderr, "ibv_coll_udp_floor: -n must be a power of two from 2 to %d\n",
			MAX_NODES);
		return 2;
	}
	printf("# ibv_coll_udp_floor: %d processes, 8-byte UDP datagrams on 127.0.0.1, %d rounds; "
	       "baseline: waiting blocked\n",
	       n, iters);
	printf("# %-38s %14s %14s %8s\n", "pattern", "yield (us)", "blocked (us)", "ratio");
	const struct {
		enum pattern p;
		const char *name;
	} pats[] = {{STAR, "star: nodes -> switch -> nodes"}, {DOUBLING, "recursive doubling"}};
	for (size_t k = 0; k < sizeof(pats) / sizeof(pats[0]); k++) {
		double y = run(pats[k].p, SPIN_YIELD, n, iters);
		double b = run(pats[k].p, BLOCK, n, iters);
		printf("  %-38s %14.2f %14.2f %8.2f\n", pats[k].name, y, b, y / b);
	}
	return 0;
}
