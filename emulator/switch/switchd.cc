// ibv_coll_switchd: the emulated in-network aggregation switch as a
// program.  See ibv_coll_switchd(8).
#include "net/net_config.h"
#include "switch/switch.h"
#include "util/config.h"
#include "util/log.h"
#include "verbs/ud_transport.h"

#include "ibvc_version.h"

#include <getopt.h>
#include <sched.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace ibv_coll;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_dump{false};

void on_signal(int sig)
{
	if (sig == SIGUSR1)
		g_dump = true;
	else
		g_stop = true;
}

enum { OPT_VERSION = 256 }; // long only: -V is --verbs

void usage(FILE *f, const char *argv0)
{
	fprintf(f,
		"usage: %s [-p PORT] [-u UNITS] [-b BYTES] [-m UNITS] [-i SEC] [-j] [-f FILE]\n"
		"  -p, --port PORT        UDP port to serve on, every address (default 4791; 0: "
		"any free)\n"
		"  -u, --units N          Seg units in the pool (default 4096)\n"
		"  -b, --unit-bytes N     bytes per Seg unit, the largest block (default 4096)\n"
		"  -m, --max-job-units N  most units one job is granted (default: no limit)\n"
		"  -O, --policy P         how jobs share the pool: spatial, exclusive or tdm\n"
		"                         (default: spatial)\n"
		"  -S, --shares N         spatial: the pool split in N equal shares (default 0: as asked)\n"
		"  -G, --whole-grant      a job gets all the units it asks for or is refused\n"
		"  -I, --idle-ms MS       forget a job silent this long (default 60000)\n"
		"  -L, --tail-us US       the least a message's newest block waits before its\n"
		"                         missing partials are NAKed by its age (default 20000;\n"
		"                         0: as the blocks arrive)\n"
		"  -i, --stats SEC        print the counters every SEC seconds (default: at exit "
		"and on SIGUSR1)\n"
		"  -j, --json             counters as JSON\n"
		"  -f, --stats-file FILE  also write them (JSON) to FILE at each print\n"
		"  -P, --port-file FILE   write the port served on to FILE once ready\n"
		"  -n, --name NAME        name in logs and counters (default switch)\n"
		"  -W, --poll-us US       keep polling (yielding the processor between looks) this\n"
		"                         long before blocking (default 2000)\n"
		"  -T, --threads N        workers, each with its own socket of the port (default\n"
		"                         IBV_COLL_SWITCH_THREADS, else the cores it may run\n"
		"                         on, at most half the host's)\n"
		"  -V, --verbs DEV        serve on the libibverbs device DEV (rxe0, mlx5_0) in UD\n"
		"                         datagrams instead of a UDP port; prints 'verbs DEV gid\n"
		"                         GID qpn QPN' on stdout once ready\n"
		"  -g, --gid-index N      with --verbs: the GID printed (default: the first RoCE v2\n"
		"                         IPv4 GID)\n"
		"  -X, --fail-after N     testing: stop dead after taking in N partials\n"
		"      --version          print the version and exit (-V is --verbs)\n"
		"  -h, --help             this text\n",
		argv0);
}

bool parse_u32(const char *s, uint32_t *out)
{
	uint64_t v;
	if (!util::parse_uint(s, &v) || v > UINT32_MAX)
		return false;
	*out = uint32_t(v);
	return true;
}

uint64_t mono_us()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
}

void write_file(const std::string &path, const std::string &text)
{
	std::string tmp = path + ".tmp";
	FILE *f = fopen(tmp.c_str(), "w");
	if (!f)
		return;
	fputs(text.c_str(), f);
	fclose(f);
	rename(tmp.c_str(), path.c_str());
}

// What the command line asks for, beyond the switch's own parameters.
struct Options {
	emu::SwitchParams p;
	uint32_t stats_s = 0, port = 4791, poll_us = 2000;
	uint32_t threads = 0; // 0: IBV_COLL_SWITCH_THREADS, else the cores
	uint64_t fail_after = 0;
	bool json = false;
	std::string stats_file, port_file, verbs_dev;
	uint32_t gid_index = UINT32_MAX;
};

// One option's value into o; false when it is out of range.
bool take_option(int c, const char *arg, Options &o)
{
	emu::SwitchParams &p = o.p;
	switch (c) {
	case 'p': return parse_u32(arg, &o.port) && o.port <= 65535;
	case 'u': return parse_u32(arg, &p.units) && p.units >= 2 && p.units <= (1u << 22);
	case 'b':
		return parse_u32(arg, &p.unit_bytes) && p.unit_bytes >= 256 &&
		       p.unit_bytes <= 4096 && p.unit_bytes % 8 == 0;
	case 'm': return parse_u32(arg, &p.max_job_units);
	case 'O': return emu::parse_policy(arg, &p.policy);
	case 'S': return parse_u32(arg, &p.shares) && p.shares <= 4096;
	case 'G': p.whole_grant = true; return true;
	case 'I': return parse_u32(arg, &p.job_idle_ms) && p.job_idle_ms > 0;
	case 'L': return parse_u32(arg, &p.tail_us) && p.tail_us <= 60000000;
	case 'i': return parse_u32(arg, &o.stats_s);
	case 'j': o.json = true; return true;
	case 'f': o.stats_file = arg; return true;
	case 'P': o.port_file = arg; return true;
	case 'n': p.name = arg; return true;
	case 'W': return parse_u32(arg, &o.poll_us) && o.poll_us <= 1000000;
	case 'T': return parse_u32(arg, &o.threads) && o.threads >= 1 && o.threads <= 256;
	case 'X': return util::parse_uint(arg, &o.fail_after) && o.fail_after > 0;
	case 'V': o.verbs_dev = arg; return true;
	case 'g': return parse_u32(arg, &o.gid_index) && o.gid_index < 256;
	}
	return false;
}

// The command line and the transports' variables into o.  -1 to go on, or
// the exit status.
int parse_args(int argc, char **argv, Options &o)
{
	static const option opts[] = {
		{"port", 1, nullptr, 'p'},
		{"units", 1, nullptr, 'u'},
		{"unit-bytes", 1, nullptr, 'b'},
		{"max-job-units", 1, nullptr, 'm'},
		{"idle-ms", 1, nullptr, 'I'},
		{"stats", 1, nullptr, 'i'},
		{"json", 0, nullptr, 'j'},
		{"stats-file", 1, nullptr, 'f'},
		{"port-file", 1, nullptr, 'P'},
		{"name", 1, nullptr, 'n'},
		{"fail-after", 1, nullptr, 'X'},
		{"poll-us", 1, nullptr, 'W'},
		{"verbs", 1, nullptr, 'V'},
		{"gid-index", 1, nullptr, 'g'},
		{"policy", 1, nullptr, 'O'},
		{"shares", 1, nullptr, 'S'},
		{"whole-grant", 0, nullptr, 'G'},
		{"threads", 1, nullptr, 'T'},
		{"tail-us", 1, nullptr, 'L'},
		{"help", 0, nullptr, 'h'},
		{"version", 0, nullptr, OPT_VERSION},
		{nullptr, 0, nullptr, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:u:b:m:I:L:i:jf:P:n:X:W:V:g:O:S:GT:h", opts,
				nullptr)) != -1) {
		switch (c) {
		case 'h': usage(stdout, argv[0]); return 0;
		case OPT_VERSION: return ibvc_print_version("ibv_coll_switchd", nullptr);
		case '?':
		case ':': usage(stderr, argv[0]); return 2;
		}
		if (c <= 0 || !strchr("pubmOSGILijfPnWXVgT", c)) {
			usage(stderr, argv[0]);
			return 2;
		}
		if (!take_option(c, optarg, o)) {
			fprintf(stderr, "%s: bad value for -%c: %s\n", argv[0], c, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr, argv[0]);
		return 2;
	}
	o.p.port = uint16_t(o.port);
	// The transports' variables apply here too: impairment (tests),
	// socket buffers, segmentation offload.
	emu::NetConfig cfg;
	if (int err = emu::load_net_config(&cfg)) {
		fprintf(stderr, "%s: bad IBV_COLL_EMU_* setting: %s\n", argv[0], strerror(err));
		return 2;
	}
	o.p.impair = cfg.impair;
	o.p.sockbuf = std::max<unsigned>(cfg.sockbuf, 8u << 20);
	o.p.gso = cfg.gso;
	if (o.threads > 1 && !o.verbs_dev.empty()) {
		fprintf(stderr, "%s: --threads %u: a verbs device is served by one worker\n",
			argv[0], o.threads);
		return 2;
	}
	if (!o.threads)
		o.threads = cfg.switch_threads ? cfg.switch_threads : emu::default_workers();
	o.p.threads = o.verbs_dev.empty() ? o.threads : 1;
	o.p.poll_us = o.poll_us;
	return -1;
}

// The libibverbs device to serve on, and its transport for the switch to
// open (it sets *ud when it does).
struct VerbsDev {
	ibv_context *ctx = nullptr;
	emu::UdTransport *ud = nullptr;
	~VerbsDev()
	{
		if (ctx)
			ibv_close_device(ctx);
	}
};

int open_verbs(const char *argv0, Options &o, VerbsDev &v)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !v.ctx; i++)
		if (o.verbs_dev == ibv_get_device_name(list[i]))
			v.ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!v.ctx) {
		fprintf(stderr, "%s: no libibverbs device %s (ibv_devices lists them)\n", argv0,
			o.verbs_dev.c_str());
		return 1;
	}
	o.p.transport = [&o, &v](std::unique_ptr<emu::Transport> *out) {
		emu::UdParams up;
		up.ctx = v.ctx;
		up.name = o.p.name + "@" + o.verbs_dev;
		up.rx_depth = 1024;
		std::unique_ptr<emu::UdTransport> t;
		if (int err = emu::UdTransport::open(up, &t))
			return err;
		v.ud = t.get();
		*out = std::move(t);
		return 0;
	};
	// A block and its headers travel in one UD datagram.
	o.p.gso = false;
	return 0;
}

// On a verbs device: what members put in ibv_coll_switch_addr, the GID
// and the QP, on stdout.  1 when the GID asked for is not there.
int print_verbs_addr(const char *argv0, const Options &o, const emu::UdTransport &ud)
{
	const emu::IpAddr *gid = &ud.gids()[0].first;
	if (o.gid_index != UINT32_MAX) {
		gid = nullptr;
		for (const auto &g : ud.gids())
			if (uint32_t(g.second) == o.gid_index)
				gid = &g.first;
		if (!gid) {
			fprintf(stderr, "%s: GID %u of %s is not a RoCE v2 address\n", argv0,
				o.gid_index, o.verbs_dev.c_str());
			return 1;
		}
	}
	printf("verbs %s gid %s qpn %u\n", o.verbs_dev.c_str(), gid->str().c_str(), ud.qpn());
	fflush(stdout);
	return 0;
}

void dump_stats(emu::Switch &sw, const Options &o)
{
	sw.print_stats(stdout, o.json);
	if (o.stats_file.empty())
		return;
	char *buf = nullptr;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (m) {
		sw.print_stats(m, true);
		fclose(m);
		write_file(o.stats_file, std::string(buf, len));
		free(buf);
	}
}

// The switch runs on this thread until a signal stops it; the counters
// are printed between its passes.
void serve(const char *argv0, emu::Switch &sw, const Options &o)
{
	auto last = std::chrono::steady_clock::now();
	uint64_t idle_since = 0;
	while (!g_stop.load()) {
		if (sw.poll_once()) {
			idle_since = 0;
		} else {
			// Nothing arrived: keep looking for a short while (the next
			// partial of a block is usually close behind), then block.
			uint64_t now = mono_us();
			if (!idle_since)
				idle_since = now;
			if (now - idle_since < o.poll_us)
				sched_yield();
			else
				sw.wait(200);
		}
		if (o.fail_after && sw.totals().data >= o.fail_after) {
			fprintf(stderr, "%s: %s stops dead (--fail-after %llu)\n", argv0,
				o.p.name.c_str(), static_cast<unsigned long long>(o.fail_after));
			_exit(3);
		}
		auto now = std::chrono::steady_clock::now();
		if (g_dump.exchange(false) ||
		    (o.stats_s && now - last >= std::chrono::seconds(o.stats_s))) {
			last = now;
			dump_stats(sw, o);
		}
	}
	dump_stats(sw, o);
}

void catch_signals()
{
	struct sigaction sa {};
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	sigaction(SIGUSR1, &sa, nullptr);
	signal(SIGPIPE, SIG_IGN);
}

} // namespace

int main(int argc, char **argv)
{
	Options o;
	if (int rc = parse_args(argc, argv, o); rc >= 0)
		return rc;
	// On a verbs device: open it, and let the switch open its transport
	// on it.
	VerbsDev v;
	if (!o.verbs_dev.empty())
		if (int rc = open_verbs(argv[0], o, v))
			return rc;

	std::unique_ptr<emu::Switch> sw;
	try {
		sw = std::make_unique<emu::Switch>(o.p);
	} catch (const std::bad_alloc &) {
		fprintf(stderr, "%s: no memory for %u Seg units of %u bytes\n", argv[0], o.p.units,
			o.p.unit_bytes);
		return 1;
	}
	if (int err = sw->open()) {
		if (v.ctx)
			fprintf(stderr, "%s: cannot serve on %s: %s\n", argv[0],
				o.verbs_dev.c_str(), strerror(err));
		else
			fprintf(stderr, "%s: cannot serve udp port %u: %s\n", argv[0], o.port,
				strerror(err));
		return 1;
	}
	if (v.ud && print_verbs_addr(argv[0], o, *v.ud))
		return 1;
	catch_signals();
	if (v.ud)
		fprintf(stderr, "%s: %s serving %s (UD QP %u) with %u Seg units of %u bytes\n",
			argv[0], o.p.name.c_str(), o.verbs_dev.c_str(), v.ud->qpn(), o.p.units,
			o.p.unit_bytes);
	else
		fprintf(stderr,
			"%s: %s serving udp port %u with %u Seg units of %u bytes, %u worker%s\n",
			argv[0], o.p.name.c_str(), sw->port(), o.p.units, o.p.unit_bytes,
			sw->workers(), sw->workers() > 1 ? "s" : "");
	if (!o.port_file.empty())
		write_file(o.port_file, std::to_string(sw->port()) + "\n");
	sw->start();
	serve(argv[0], *sw, o);
	return 0;
}
