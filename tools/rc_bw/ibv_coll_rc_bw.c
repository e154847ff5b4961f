/*
 * ibv_coll_rc_bw - RC streaming bandwidth over ibv_coll, measured and
 * reported as perftest's ib_write_bw and ib_send_bw do, so that users of
 * RDMA can compare the emulated NIC with what they know.
 *
 *   server:  ibv_coll_rc_bw [options]
 *   client:  ibv_coll_rc_bw [options] SERVERNAME
 *
 * The client decides the test and tells the server over TCP (default port
 * 18515); the two then swap one line per queue pair:
 *
 *   qp QPN PSN UDPPORT GID ADDR RKEY
 *
 * For each size the client says "go SIZE", the server answers "ready", the
 * client streams, then says "end SIZE COUNT"; the server checks that the
 * last message into every slot of its buffer holds the expected pattern
 * and answers "ok WRONG" (WRONG: slots that do not).  The check runs after
 * the clock stops.
 */
#define _XOPEN_SOURCE 700

#include "rc_bw.h"

#include "ibvc_version.h"

/* ---- the measurement ------------------------------------------------- */

struct result {
	uint64_t count;
	double secs, peak; /* peak in bytes per second */
	int64_t mark_t;	   /* the current peak span began then, after mark_n messages */
	uint64_t mark_n;
};

static void print_header(const struct opts *o, const struct bw *b)
{
	const char *bar =
		"---------------------------------------------------------------------------------------";
	printf("%s\n                    %s BW Test\n", bar,
	       o->test == TEST_WRITE ? "RDMA_Write" : "Send");
	printf(" Number of qps   : %-8u\tTransport type : crxe (RoCEv2 over UDP)\n", o->qps);
	printf(" Connection type : RC\t\tUsing SRQ      : OFF\n");
	printf(" TX depth        : %u\n Mtu             : %u[B]\n", o->depth, o->mtu);
	printf(" Link type       : Ethernet\n GID index       : %u\n", o->gid_idx);
	printf(" Data ex. method : Ethernet (TCP port %u)\n%s\n", o->tcp_port, bar);
	for (unsigned q = 0; q < o->qps; q++) {
		char l[INET6_ADDRSTRLEN], r[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, b->gid.raw, l, sizeof(l));
		inet_ntop(AF_INET6, b->rem[q].gid.raw, r, sizeof(r));
		printf(" local address:  QPN 0x%06x PSN 0x%06x RKey 0x%08x VAddr 0x%012" PRIx64
		       " GID %s UDP %u\n",
		       b->qp[q]->qp_num, b->psn[q], b->mr->rkey, (uint64_t)(uintptr_t)b->buf, l,
		       b->port.udp_port);
		printf(" remote address: QPN 0x%06x PSN 0x%06x RKey 0x%08x VAddr 0x%012" PRIx64
		       " GID %s UDP %u\n",
		       b->rem[q].qpn, b->rem[q].psn, b->rem[q].rkey, b->rem[q].addr, r,
		       b->rem[q].udp_port);
	}
	printf("%s\n #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
	       bar, o->gbits ? "Gb/sec" : "MB/sec", o->gbits ? "Gb/sec" : "MB/sec");
	fflush(stdout);
}

static void print_row(const struct opts *o, size_t size, const struct result *r)
{
	double avg = r->secs > 0 ? (double)r->count * (double)size / r->secs : 0;
	double peak = r->peak > avg ? r->peak : avg;
	double unit = o->gbits ? 1e9 / 8 : 1048576.0; /* perftest's MB is 2^20 bytes */
	printf(" %-10zu %-10" PRIu64 "     %-14.2f     %-14.2f       %.6f\n", size, r->count,
	       peak / unit, avg / unit, r->secs > 0 ? (double)r->count / r->secs / 1e6 : 0);
	fflush(stdout);
}

/* Poll one batch; count completions per QP into done[].  The peak is the
 * best rate over consecutive spans of at least PEAK_SPAN_NS: completions
 * come in bursts (one ACK completes many WRITEs), so a span counted in
 * messages would measure the burst, not the link. */
#define PEAK_SPAN_NS 20000000ll
static int reap(struct bw *b, uint64_t *done, uint64_t *ndone, size_t size, struct result *res,
		int64_t *last)
{
	struct ibv_coll_wc wc[32];
	int n = ibv_poll_coll_cq(b->cq, 32, wc);
	if (n < 0) {
		fail("ibv_poll_coll_cq: %d", n);
		return -1;
	}
	if (!n) {
		if (now_ns() - *last <= STALL_NS)
			return 0;
		fail("no completion for %lld s: the peer stopped answering",
		     STALL_NS / 1000000000ll);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS) {
			fail("completion of %s on QP 0x%06x: %s (vendor error 0x%x)",
			     wc[i].opcode == IBV_COLL_WC_RECV ? "a receive" : "a send",
			     wc[i].qp_num, ibv_coll_wc_status_str(wc[i].status), wc[i].vendor_err);
			return -1;
		}
		if (wc[i].opcode == IBV_COLL_WC_RECV && wc[i].byte_len != size) {
			fail("received %u bytes, expected %zu", wc[i].byte_len, size);
			return -1;
		}
		done[wc[i].wr_id % MAX_QPS]++;
	}
	*last = now_ns();
	if (!*ndone) {
		res->mark_t = *last;
		res->mark_n = 0;
	}
	*ndone += (uint64_t)n;
	if (*last - res->mark_t >= PEAK_SPAN_NS) {
		double rate = (double)(*ndone - res->mark_n) * (double)size /
			      ((double)(*last - res->mark_t) / 1e9);
		if (rate > res->peak)
			res->peak = rate;
		res->mark_t = *last;
		res->mark_n = *ndone;
	}
	return 0;
}

static int post_one(struct bw *b, const struct opts *o, unsigned q, size_t size, int recv)
{
	size_t s = b->sent[q] % b->nslots;
	struct ibv_sge sge = {(uintptr_t)slot_at(b, q, s),
			      recv ? (uint32_t)b->slot_len : (uint32_t)size, b->mr->lkey};
	int err;
	if (recv) {
		struct ibv_coll_recv_wr wr = {.wr_id = q, .sg_list = &sge, .num_sge = 1}, *bad;
		err = ibv_post_coll_recv(b->qp[q], &wr, &bad);
	} else {
		struct ibv_coll_send_wr wr = {.wr_id = q,
					      .sg_list = &sge,
					      .num_sge = 1,
					      .opcode = o->test == TEST_WRITE
								? IBV_COLL_WR_RDMA_WRITE
								: IBV_COLL_WR_SEND,
					      .send_flags = IBV_COLL_SEND_SIGNALED},
					*bad;
		wr.wr.rdma.remote_addr = b->rem[q].addr + (uint64_t)(slot_at(b, q, s) - b->buf);
		wr.wr.rdma.rkey = b->rem[q].rkey;
		err = ibv_post_coll_send(b->qp[q], &wr, &bad);
	}
	if (err)
		fail("posting a %s: %s", recv ? "receive" : "send", strerror(err));
	b->sent[q]++;
	return err ? -1 : 0;
}

/* The client's side of one size. */
static int client_size(struct bw *b, const struct opts *o, size_t size, struct result *res)
{
	char line[LINE];
	for (unsigned q = 0; q < o->qps; q++)
		for (size_t s = 0; s < b->nslots; s++)
			pat_fill(slot_at(b, q, s), size, q, s);
	if (say(b->sock, "go %zu\n", size) || hear(b->sock, line, 30000) != 1 ||
	    strcmp(line, "ready")) {
		fail("the server did not get ready for size %zu", size);
		return -1;
	}
	uint64_t done[MAX_QPS] = {0}, posted = 0, ndone = 0, base[MAX_QPS];
	memcpy(base, b->sent, sizeof(base));
	memset(res, 0, sizeof(*res));
	const int64_t t0 = now_ns(), until = t0 + (int64_t)o->duration * 1000000000ll;
	int64_t last = t0;
	for (;;) {
		int more = o->duration ? now_ns() < until : posted < o->iters;
		for (int k = 0; more && k < 64; k++, posted++) {
			unsigned q = (unsigned)(posted % o->qps);
			if (b->sent[q] - base[q] - done[q] >= o->depth)
				break;
			if (post_one(b, o, q, size, 0))
				return -1;
			more = o->duration ? 1 : posted + 1 < o->iters;
		}
		if (!more && ndone == posted)
			break;
		if (reap(b, done, &ndone, size, res, &last))
			return -1;
	}
	res->count = ndone;
	res->secs = (double)(last - t0) / 1e9;
	if (say(b->sock, "end %zu %" PRIu64 "\n", size, ndone) || hear(b->sock, line, 60000) != 1)
		return -1;
	unsigned long wrong;
	if (sscanf(line, "ok %lu", &wrong) != 1) {
		fail("the server says: %s", line);
		return -1;
	}
	if (wrong) {
		fail("size %zu: %lu of the server's slots do not hold what was sent", size, wrong);
		return -1;
	}
	return 0;
}

/* Slots whose last message this size should have written, checked against
 * the pattern: the count of those that do not match. */
static unsigned long check_slots(struct bw *b, const struct opts *o, size_t size,
				 const uint64_t *before)
{
	unsigned long wrong = 0;
	for (unsigned q = 0; q < o->qps; q++) {
		uint64_t n = b->got[q] - before[q];
		for (uint64_t k = n > b->nslots ? n - b->nslots : 0; k < n; k++) {
			size_t s = (before[q] + k) % b->nslots;
			wrong += !pat_ok(slot_at(b, q, s), size, q, s);
		}
	}
	return wrong;
}

/* Keep depth receives posted on every QP (done: completed this size). */
static int top_up(struct bw *b, const struct opts *o, size_t size, const uint64_t *done)
{
	for (unsigned q = 0; q < o->qps; q++)
		while (b->sent[q] - b->got[q] - done[q] < o->depth)
			if (post_one(b, o, q, size, 1))
				return -1;
	return 0;
}

/* The server's side of one size: keep receives posted (SEND) until the
 * client's "end" and every message it counts have arrived, then check. */
static int server_size(struct bw *b, const struct opts *o, size_t size)
{
	char line[LINE];
	uint64_t before[MAX_QPS], done[MAX_QPS] = {0}, ndone = 0, count = 0;
	int ended = 0, idle = 1;
	struct result res = {0};
	memcpy(before, b->got, sizeof(before));
	if (o->test == TEST_SEND && top_up(b, o, size, done))
		return -1;
	if (say(b->sock, "ready\n"))
		return -1;
	int64_t t0 = 0, last = now_ns();
	while (!ended || (o->test == TEST_SEND && ndone < count)) {
		/* Between completions, and every 256, look for the client's end. */
		if (!ended && (o->test == TEST_WRITE || idle || ndone % 256 == 0)) {
			int r = hear(b->sock, line, o->test == TEST_WRITE ? -1 : 0);
			if (r < 0)
				return -1;
			if (r) {
				size_t sz;
				if (sscanf(line, "end %zu %" SCNu64, &sz, &count) != 2 ||
				    sz != size) {
					fail("unexpected from the client: %s", line);
					return -1;
				}
				ended = 1;
				last = now_ns(); /* the stall clock runs from here for stragglers */
			}
		}
		if (o->test == TEST_WRITE)
			continue;
		uint64_t n0 = ndone;
		if (reap(b, done, &ndone, size, &res, &last))
			return -1;
		idle = ndone == n0;
		if (n0 == 0 && ndone)
			t0 = last;
		if (!idle && top_up(b, o, size, done))
			return -1;
	}
	for (unsigned q = 0; q < o->qps; q++)
		b->got[q] += o->test == TEST_SEND ? done[q] : count / o->qps + (q < count % o->qps);
	if (o->test == TEST_SEND) {
		res.count = ndone;
		res.secs = (double)(last - t0) / 1e9;
		print_row(o, size, &res);
	}
	return say(b->sock, "ok %lu\n", check_slots(b, o, size, before));
}

/* ---- options and main ------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options]              start a server and wait for a client\n"
		"       " PROG " [options] SERVERNAME   connect to the server and measure\n"
		"  --test write|send        RDMA WRITE (ib_write_bw) or SEND (ib_send_bw) (write)\n"
		"  -s, --size SIZE          message bytes (65536)\n"
		"  -a, --all                every size from 2 to 8388608 bytes, doubling\n"
		"  -n, --iters N            messages per size (5000)\n"
		"  -D, --duration SECONDS   stream each size this long instead of -n\n"
		"  -t, --tx-depth N         messages in flight per QP (128)\n"
		"  -q, --qp N               queue pairs, messages spread round them (1, at most %d)\n"
		"  -d, --ib-dev DEV         the device (the first one listed)\n"
		"  -i, --ib-port N          the device's port (1)\n"
		"  -x, --gid-index N        the GID table entry to use (0)\n"
		"  -m, --mtu BYTES          path MTU 256..4096 (the port's active MTU)\n"
		"  -p, --port PORT          TCP port of the side channel (18515)\n"
		"  -c, --connection RC      the transport (RC only)\n"
		"      --report_gbits       bandwidth in Gb/s (10^9 bits), not MB/s (2^20 bytes)\n"
		"  -V, --version            print the version and exit\n"
		"  -h, --help               this text\n"
		"The client chooses the test; the server takes its size, depth, QPs and MTU.\n",
		MAX_QPS);
}

static int num(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (!*s || *s == '-' || errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_GBITS = 256, OPT_TEST };
	static const struct option lo[] = {
		{"size", 1, NULL, 's'},
		{"all", 0, NULL, 'a'},
		{"iters", 1, NULL, 'n'},
		{"duration", 1, NULL, 'D'},
		{"tx-depth", 1, NULL, 't'},
		{"qp", 1, NULL, 'q'},
		{"ib-dev", 1, NULL, 'd'},
		{"ib-port", 1, NULL, 'i'},
		{"gid-index", 1, NULL, 'x'},
		{"mtu", 1, NULL, 'm'},
		{"port", 1, NULL, 'p'},
		{"connection", 1, NULL, 'c'},
		{"report_gbits", 0, NULL, OPT_GBITS},
		{"test", 1, NULL, OPT_TEST},
		{"help", 0, NULL, 'h'},
		{"version", 0, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	*o = (struct opts){.tcp_port = 18515,
			   .ib_port = 1,
			   .depth = 128,
			   .qps = 1,
			   .iters = 5000,
			   .size = 65536,
			   .test = TEST_WRITE};
	int c;
	unsigned long v;
	while ((c = getopt_long(argc, argv, "s:an:D:t:q:d:i:x:m:p:c:hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 's':
			bad = num(optarg, 1, 1ul << 31, &v);
			o->size = v;
			break;
		case 'a': o->all = 1; break;
		case 'n':
			bad = num(optarg, 1, 1ul << 31, &v);
			o->iters = (unsigned)v;
			break;
		case 'D':
			bad = num(optarg, 1, 3600, &v);
			o->duration = (unsigned)v;
			break;
		case 't':
			bad = num(optarg, 1, 16384, &v);
			o->depth = (unsigned)v;
			break;
		case 'q':
			bad = num(optarg, 1, MAX_QPS, &v);
			o->qps = (unsigned)v;
			break;
		case 'd': o->dev = optarg; break;
		case 'i':
			bad = num(optarg, 1, 255, &v);
			o->ib_port = (unsigned)v;
			break;
		case 'x':
			bad = num(optarg, 0, 255, &v);
			o->gid_idx = (unsigned)v;
			break;
		case 'm':
			bad = num(optarg, 256, 4096, &v) || !mtu_enum((unsigned)v);
			o->mtu = (unsigned)v;
			break;
		case 'p':
			bad = num(optarg, 1, 65535, &v);
			o->tcp_port = (unsigned)v;
			break;
		case 'c': bad = strcmp(optarg, "RC") != 0; break;
		case OPT_GBITS: o->gbits = 1; break;
		case OPT_TEST:
			bad = strcmp(optarg, "write") && strcmp(optarg, "send");
			o->test = strcmp(optarg, "send") ? TEST_WRITE : TEST_SEND;
			break;
		case 'h': usage(stdout); return 0;
		case 'V': return ibvc_print_version(PROG, ibv_coll_version()) ? 1 : 0;
		default: usage(stderr); return 2;
		}
		if (bad) {
			const char *name = "?";
			for (const struct option *l = lo; l->name; l++)
				if (l->val == c)
					name = l->name;
			fprintf(stderr, PROG ": bad value for --%s: %s%s\n", name, optarg,
				c == 'm'   ? " (256, 512, 1024, 2048 or 4096)"
				: c == 'c' ? " (only RC is supported)"
					   : "");
			return 2;
		}
	}
	if (optind < argc)
		o->server = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument %s\n", argv[optind]);
		return 2;
	}
	return -1;
}

/* Settle the test: the client proposes, the server adopts or refuses. */
static int agree(struct bw *b, struct opts *o)
{
	char line[LINE];
	unsigned active = mtu_bytes(b->port.active_mtu);
	if (o->mtu > active) {
		fail("MTU %u is beyond the port's active MTU %u", o->mtu, active);
		return -1;
	}
	if (!o->mtu)
		o->mtu = active;
	if (o->server)
		return say(b->sock, "rcbw %s %zu %d %u %u %u %u %u\n",
			   o->test == TEST_SEND ? "send" : "write", o->size, o->all, o->iters,
			   o->duration, o->depth, o->qps, o->mtu) ||
				       hear(b->sock, line, 30000) != 1 ||
				       (strcmp(line, "ok") &&
					(fail("the server refuses: %s", line), 1))
			       ? -1
			       : 0;
	char test[8];
	unsigned long size;
	unsigned mtu;
	if (hear(b->sock, line, 30000) != 1 ||
	    sscanf(line, "rcbw %7s %lu %d %u %u %u %u %u", test, &size, &o->all, &o->iters,
		   &o->duration, &o->depth, &o->qps, &mtu) != 8 ||
	    o->qps < 1 || o->qps > MAX_QPS || o->depth < 1 || !mtu_enum(mtu)) {
		fail("not an " PROG " client: %s", line);
		return -1;
	}
	o->test = strcmp(test, "send") ? TEST_WRITE : TEST_SEND;
	o->size = size;
	if (mtu > active) {
		say(b->sock, "MTU %u is beyond the server's active MTU %u\n", mtu, active);
		return -1;
	}
	o->mtu = mtu;
	return say(b->sock, "ok\n");
}

static int run(struct bw *b, struct opts *o)
{
	char line[LINE];
	b->sock = tcp_open(o->server, o->tcp_port);
	if (b->sock < 0 || agree(b, o))
		return -1;
	size_t max = o->all ? 1u << 23 : o->size;
	if (bw_setup(b, o, max) || swap_qps(b, o))
		return -1;
	print_header(o, b);
	int err = 0;
	if (o->server) {
		for (size_t s = o->all ? 2 : o->size; !err && s <= max; s *= 2) {
			struct result r;
			err = client_size(b, o, s, &r);
			if (!err)
				print_row(o, s, &r);
		}
		if (!err)
			err = say(b->sock, "bye\n");
	} else {
		size_t s;
		while (!err && (err = hear(b->sock, line, -1) != 1) == 0 && strcmp(line, "bye")) {
			if (sscanf(line, "go %zu", &s) != 1 || s > max) {
				fail("unexpected from the client: %s", line);
				err = -1;
			} else {
				err = server_size(b, o, s);
			}
		}
	}
	printf("---------------------------------------------------------------------------------------\n");
	return err ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int r = parse_args(argc, argv, &o);
	if (r >= 0)
		return r;
	srand48((long)getpid() ^ (long)now_ns());
	struct bw b;
	memset(&b, 0, sizeof(b));
	b.sock = -1;
	r = bw_open(&b, &o) ? 1 : run(&b, &o) ? 1 : 0;
	bw_close(&b, o.qps);
	return r;
}
