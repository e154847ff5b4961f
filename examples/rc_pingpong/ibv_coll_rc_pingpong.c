/*
 * ibv_coll_rc_pingpong - bounce a SEND between two RC queue pairs, in the
 * manner of ibv_rc_pingpong, and report latency and bandwidth.
 *
 *   server:  ibv_coll_rc_pingpong [options]
 *   client:  ibv_coll_rc_pingpong [options] SERVERNAME
 *
 * The two sides meet over TCP (default port 18515) and swap one line each:
 *
 *   QPN:PSN:UDPPORT:GID size=N iters=N mtu=N chk=0|1
 *
 * QPN and PSN in hex (six digits), the UDP port in decimal and the GID in
 * inet_ntop() form (an IPv4 address appears IPv4-mapped, ::ffff:a.b.c.d).
 * The connection stays open while the test runs, so that either side
 * notices when the other goes away, and the two sides swap "done" at the
 * end before they tear down.
 */
#define _XOPEN_SOURCE 700

#include "pingpong.h"
#include "ibvc_version.h"

/* ------------------------------------------------------------------ */
/* The test                                                            */
/* ------------------------------------------------------------------ */

/* The ping-pong itself.  0, or -1 with a message printed. */
static int run(struct pingpong *pp, const struct options *o, int peer_chk)
{
	const int is_client = o->servername != NULL;
	const int fill = o->chk || peer_chk;
	int scnt = 0, rcnt = 0;
	int send_busy = 0;
	int may_send = is_client; /* the client starts; afterwards each receive allows a send */
	int64_t deadline = now_ns() + (int64_t)TIMEOUT_MS * 1000000ll;

	pp->watch_sock = 1;
	while (scnt < o->iters || rcnt < o->iters) {
		struct ibv_coll_wc wc[MAX_WC];
		int n;

		if (may_send && !send_busy && scnt < o->iters) {
			if (fill)
				pattern_fill(pp->sbuf, o->size, pattern_seed(scnt, is_client));
			if (post_send(pp, o->size))
				return -1;
			send_busy = 1;
			may_send = 0;
		}
		n = o->use_event ? wait_event(pp, wc, deadline) : wait_poll(pp, wc, deadline);
		if (n < 0)
			return -1;
		deadline = now_ns() + (int64_t)TIMEOUT_MS * 1000000ll;

		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fail("completion with status \"%s\" (%d) for %s wr_id %" PRIu64
				     " (vendor error %#x)",
				     ibv_coll_wc_status_str(wc[i].status), (int)wc[i].status,
				     wc[i].wr_id == WRID_SEND ? "send" : "receive", wc[i].wr_id,
				     wc[i].vendor_err);
				return -1;
			}
			switch (wc[i].wr_id) {
			case WRID_SEND:
				if (!send_busy) {
					fail("unexpected send completion");
					return -1;
				}
				send_busy = 0;
				scnt++;
				break;
			case WRID_RECV:
				if (!(wc[i].opcode & IBV_COLL_WC_RECV)) {
					fail("receive completion with opcode %s",
					     ibv_coll_wc_opcode_str(wc[i].opcode));
					return -1;
				}
				if (rcnt >= o->iters) {
					fail("more messages than --iters=%d arrived", o->iters);
					return -1;
				}
				if (wc[i].byte_len != o->size) {
					fail("message %d has %" PRIu32 " bytes, expected %u", rcnt,
					     wc[i].byte_len, o->size);
					return -1;
				}
				if (o->chk) {
					size_t bad = pattern_check(pp->rbuf, o->size,
								   pattern_seed(rcnt, !is_client));

					if (bad != o->size) {
						fail("message %d: byte %zu of %u differs from the "
						     "pattern",
						     rcnt, bad, o->size);
						return -1;
					}
				}
				pp->routs--;
				rcnt++;
				/* Keep rx_depth receives posted. */
				if (post_recvs(pp, o->size, 1))
					return -1;
				may_send = 1;
				break;
			default:
				fail("completion with unknown wr_id %" PRIu64, wc[i].wr_id);
				return -1;
			}
		}
	}
	return 0;
}

/* Swap "done" with the peer, so that neither tears down while the other
 * still needs its acknowledgements.  0, or -1 with a message printed. */
static int finish_barrier(struct pingpong *pp)
{
	static const char done[] = "done\n";
	char line[LINE_MAX_LEN];

	if (write_all(pp->sock, done, sizeof(done) - 1)) {
		fail("telling the peer the test is done: %s", strerror(errno));
		return -1;
	}
	if (read_line(pp->sock, line, sizeof(line), TIMEOUT_MS, "end-of-test message"))
		return -1;
	if (strcmp(line, "done") != 0) {
		fail("unexpected end-of-test message \"%s\" from the peer", line);
		return -1;
	}
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage:\n"
		"  %s [options]              start a server and wait for a connection\n"
		"  %s [options] SERVERNAME   connect to the server at SERVERNAME\n"
		"\n"
		"Options:\n"
		"  -p, --port=PORT       TCP port of the connection setup (default %d)\n"
		"  -d, --ib-dev=DEV      use device DEV (default: crxe_lo if present, else the "
		"first)\n"
		"  -i, --ib-port=PORT    device port (default 1, the only one)\n"
		"  -s, --size=SIZE       bytes per message (default %d; 0 allowed)\n"
		"  -m, --mtu=MTU         path MTU: 256, 512, 1024, 2048 or 4096 (default: the "
		"port's active MTU)\n"
		"  -r, --rx-depth=DEPTH  receives to keep posted (default %d)\n"
		"  -n, --iters=ITERS     round trips (default %d)\n"
		"  -g, --gid-idx=INDEX   local GID index (default 0)\n"
		"  -e, --events          sleep on a completion channel instead of busy polling\n"
		"  -c, --chk             fill each message with a pattern and check what arrives\n"
		"  -V, --version         print the version and exit\n"
		"  -h, --help            print this help and exit\n",
		prog, prog, DEFAULT_TCP_PORT, DEFAULT_SIZE, DEFAULT_RX_DEPTH, DEFAULT_ITERS);
}

/* Parse the command line into o; 0, 1 for --help, 2 for --version, -1 on a bad option
 * (usage wanted), -2 on a bad value (message printed). */
static int parse_args(int argc, char *argv[], struct options *o)
{
	static const struct option longopts[] = {
		{"port", required_argument, NULL, 'p'},
		{"ib-dev", required_argument, NULL, 'd'},
		{"ib-port", required_argument, NULL, 'i'},
		{"size", required_argument, NULL, 's'},
		{"mtu", required_argument, NULL, 'm'},
		{"rx-depth", required_argument, NULL, 'r'},
		{"iters", required_argument, NULL, 'n'},
		{"gid-idx", required_argument, NULL, 'g'},
		{"events", no_argument, NULL, 'e'},
		{"chk", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	unsigned long v;

	for (;;) {
		int c = getopt_long(argc, argv, "p:d:i:s:m:r:n:g:echV", longopts, NULL);

		if (c == -1)
			break;
		switch (c) {
		case 'p':
			if (parse_uint(optarg, 65535, &v) || v == 0) {
				fail("invalid TCP port '%s' (1..65535)", optarg);
				return -2;
			}
			o->tcp_port = (unsigned int)v;
			break;
		case 'd': o->ib_devname = optarg; break;
		case 'i':
			if (parse_uint(optarg, INT_MAX, &v) || v != 1) {
				fail("invalid device port '%s': crxe devices have port 1 only",
				     optarg);
				return -2;
			}
			o->ib_port = (int)v;
			break;
		case 's':
			if (parse_uint(optarg, UINT32_MAX, &v)) {
				fail("invalid size '%s'", optarg);
				return -2;
			}
			o->size = (unsigned int)v;
			break;
		case 'm':
			if (parse_uint(optarg, 4096, &v) || !mtu_to_enum((unsigned int)v)) {
				fail("invalid MTU '%s' (256, 512, 1024, 2048 or 4096)", optarg);
				return -2;
			}
			o->mtu = (unsigned int)v;
			break;
		case 'r':
			if (parse_uint(optarg, INT_MAX - 1, &v) || v == 0) {
				fail("invalid rx-depth '%s' (at least 1)", optarg);
				return -2;
			}
			o->rx_depth = (int)v;
			break;
		case 'n':
			if (parse_uint(optarg, INT_MAX, &v) || v == 0) {
				fail("invalid iteration count '%s' (at least 1)", optarg);
				return -2;
			}
			o->iters = (int)v;
			break;
		case 'g':
			if (parse_uint(optarg, 255, &v)) {
				fail("invalid GID index '%s' (0..255)", optarg);
				return -2;
			}
			o->gid_idx = (int)v;
			break;
		case 'e': o->use_event = 1; break;
		case 'c': o->chk = 1; break;
		case 'h': return 1;
		case 'V': return 2;
		default: return -1;
		}
	}
	if (optind == argc - 1) {
		o->servername = argv[optind];
	} else if (optind < argc) {
		fail("too many arguments (expected at most one SERVERNAME)");
		return -1;
	}
	return 0;
}

/* Tell the peer about this side and learn about it (the client speaks
 * first; the server answers once its QP is ready, in main), and refuse a
 * peer whose size or count differ.  0, or -1 with a message printed. */
static int exchange(struct pingpong *pp, const struct options *o, int *lfd, struct dest *local,
		    struct dest *remote)
{
	char lgid[INET6_ADDRSTRLEN], rgid[INET6_ADDRSTRLEN];

	local->qpn = pp->qp->qp_num;
	local->psn = pp->psn;
	local->udp_port = pp->port_attr.udp_port;
	local->gid = pp->gid;
	local->size = o->size;
	local->iters = o->iters;
	local->mtu = o->mtu;
	local->chk = o->chk;
	gid_to_str(&local->gid, lgid, sizeof(lgid));
	printf("  local address:  QPN 0x%06x, PSN 0x%06x, UDP port %u, GID %s\n", local->qpn,
	       local->psn, local->udp_port, lgid);
	fflush(stdout);

	if (o->servername) {
		pp->sock = tcp_connect(o->servername, o->tcp_port);
		if (pp->sock < 0 || send_dest(pp->sock, local) || recv_dest(pp->sock, remote))
			return -1;
	} else {
		pp->sock = tcp_accept(*lfd, o->tcp_port);
		close(*lfd);
		*lfd = -1;
		if (pp->sock < 0 || recv_dest(pp->sock, remote))
			return -1;
	}
	gid_to_str(&remote->gid, rgid, sizeof(rgid));
	printf("  remote address: QPN 0x%06x, PSN 0x%06x, UDP port %u, GID %s\n", remote->qpn,
	       remote->psn, remote->udp_port, rgid);
	fflush(stdout);

	if (remote->size != o->size) {
		refuse(pp->sock,
		       "the client uses --size=%u, the server --size=%u: use the same size",
		       o->servername ? o->size : remote->size,
		       o->servername ? remote->size : o->size);
		return -1;
	}
	if (remote->iters != o->iters) {
		refuse(pp->sock,
		       "the client uses --iters=%d, the server --iters=%d: use the same count",
		       o->servername ? o->iters : remote->iters,
		       o->servername ? remote->iters : o->iters);
		return -1;
	}
	return 0;
}

/* The figures, as ibv_rc_pingpong prints them, and one line to parse. */
static void report(const struct options *o, int64_t start, int64_t end)
{
	double usec = (double)(end - start) / 1000.0;
	long bytes = (long)o->size * o->iters * 2;
	double mbit = usec > 0 ? (double)bytes * 8.0 / usec : 0.0;
	double per_iter = usec / o->iters;

	printf("%ld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000.0, mbit);
	printf("%d iters in %.2f seconds = %.2f usec/iter\n", o->iters, usec / 1000000.0, per_iter);
	printf("pingpong: size=%u iters=%d usec_per_iter=%.2f mbit_per_sec=%.2f\n", o->size,
	       o->iters, per_iter, mbit);
	fflush(stdout);
}

int main(int argc, char *argv[])
{
	struct options o = {
		.tcp_port = DEFAULT_TCP_PORT,
		.ib_port = 1,
		.size = DEFAULT_SIZE,
		.rx_depth = DEFAULT_RX_DEPTH,
		.iters = DEFAULT_ITERS,
	};
	struct pingpong pp;
	struct ibv_coll_device **list = NULL;
	struct ibv_coll_device *dev;
	struct dest local, remote;
	int num = 0, ret = 1, lfd = -1, r;
	unsigned int mtu;
	int64_t start, end;

	memset(&pp, 0, sizeof(pp));
	pp.sock = -1;

	r = parse_args(argc, argv, &o);
	if (r == 1) {
		usage(stdout);
		return 0;
	}
	if (r == 2)
		return ibvc_print_version(prog, ibv_coll_version());
	if (r == -1)
		usage(stderr);
	if (r)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	srand48((long)getpid() * 1000003L ^ (long)time(NULL));

	/* A server listens first, so that a client started right after it
	 * finds the port open sooner. */
	if (!o.servername && (lfd = tcp_listen(o.tcp_port)) < 0)
		return 1;

	errno = 0;
	list = ibv_get_coll_device_list(&num);
	if (!list) {
		fail("ibv_get_coll_device_list: %s", strerror(errno ? errno : EIO));
		goto out;
	}
	if (num == 0) {
		fail("no ibv_coll devices found");
		goto out;
	}
	dev = pick_device(list, num, o.ib_devname);
	if (!dev) {
		fail("device %s not found", o.ib_devname);
		goto out;
	}
	if (pp_init(&pp, dev, &o))
		goto out;

	if (exchange(&pp, &o, &lfd, &local, &remote))
		goto out;
	/* Each side may ask for a smaller MTU; the path uses the smaller. */
	mtu = remote.mtu < o.mtu && mtu_to_enum(remote.mtu) ? remote.mtu : o.mtu;
	if (pp_connect(&pp, &o, &remote, mtu))
		goto out;
	/* The server answers once its QP is ready to receive. */
	if (!o.servername && send_dest(pp.sock, &local))
		goto out;

	start = now_ns();
	if (run(&pp, &o, remote.chk))
		goto out;
	end = now_ns();
	if (finish_barrier(&pp))
		goto out;

	report(&o, start, end);
	ret = 0;
out:
	if (lfd >= 0)
		close(lfd);
	if (pp_close(&pp))
		ret = 1;
	if (list)
		ibv_free_coll_device_list(list);
	return ret;
}
