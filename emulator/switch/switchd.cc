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
		"  -I, --idle-ms MS       forget a job silent this long (default 60000)\n"
		"  -i, --stats SEC        print the counters every SEC seconds (default: at exit "
		"and on SIGUSR1)\n"
		"  -j, --json             counters as JSON\n"
		"  -f, --stats-file FILE  also write them (JSON) to FILE at each print\n"
		"  -P, --port-file FILE   write the port served on to FILE once ready\n"
		"  -n, --name NAME        name in logs and counters (default switch)\n"
		"  -W, --poll-us US       keep polling (yielding the processor between looks) this\n"
		"                         long before blocking (default 2000)\n"
		"  -V, --verbs DEV        serve on the libibverbs device DEV (rxe0, mlx5_0) in UD\n"
		"                         datagrams instead of a UDP port; prints 'verbs DEV gid\n"
		"                         GID qpn QPN' on stdout once ready\n"
		"  -g, --gid-index N      with --verbs: the GID printed (default: the first RoCE v2\n"
		"                         IPv4 GID)\n"
		"  -X, --fail-after N     testing: stop dead after taking in N partials\n"
		"      --version          print the version and exit (-V is --verbs)\n",
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

} // namespace

int main(int argc, char **argv)
{
	emu::SwitchParams p;
	uint32_t stats_s = 0, port = 4791, poll_us = 2000;
	uint64_t fail_after = 0;
	bool json = false;
	std::string stats_file, port_file, verbs_dev;
	uint32_t gid_index = UINT32_MAX;
	static const option opts[] = {
		{"port", 1, nullptr, 'p'},	 {"units", 1, nullptr, 'u'},
		{"unit-bytes", 1, nullptr, 'b'}, {"max-job-units", 1, nullptr, 'm'},
		{"idle-ms", 1, nullptr, 'I'},	 {"stats", 1, nullptr, 'i'},
		{"json", 0, nullptr, 'j'},	 {"stats-file", 1, nullptr, 'f'},
		{"port-file", 1, nullptr, 'P'},	 {"name", 1, nullptr, 'n'},
		{"fail-after", 1, nullptr, 'X'}, {"poll-us", 1, nullptr, 'W'},
		{"verbs", 1, nullptr, 'V'},	 {"gid-index", 1, nullptr, 'g'},
		{"help", 0, nullptr, 'h'},	 {"version", 0, nullptr, OPT_VERSION},
		{nullptr, 0, nullptr, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "p:u:b:m:I:i:jf:P:n:X:W:V:g:h", opts, nullptr)) != -1) {
		bool ok = true;
		switch (c) {
		case 'p':
			ok = parse_u32(optarg, &port) && port <= 65535;
			break;
		case 'u':
			ok = parse_u32(optarg, &p.units) && p.units >= 2 && p.units <= (1u << 22);
			break;
		case 'b':
			ok = parse_u32(optarg, &p.unit_bytes) && p.unit_bytes >= 256 &&
			     p.unit_bytes <= 4096 && p.unit_bytes % 8 == 0;
			break;
		case 'm':
			ok = parse_u32(optarg, &p.max_job_units);
			break;
		case 'I':
			ok = parse_u32(optarg, &p.job_idle_ms) && p.job_idle_ms > 0;
			break;
		case 'i':
			ok = parse_u32(optarg, &stats_s);
			break;
		case 'j':
			json = true;
			break;
		case 'f':
			stats_file = optarg;
			break;
		case 'P':
			port_file = optarg;
			break;
		case 'n':
			p.name = optarg;
			break;
		case 'W':
			ok = parse_u32(optarg, &poll_us) && poll_us <= 1000000;
			break;
		case 'X':
			ok = util::parse_uint(optarg, &fail_after) && fail_after > 0;
			break;
		case 'V':
			verbs_dev = optarg;
			break;
		case 'g':
			ok = parse_u32(optarg, &gid_index) && gid_index < 256;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 0;
		case OPT_VERSION:
			return ibvc_print_version("ibv_coll_switchd", nullptr);
		default:
			usage(stderr, argv[0]);
			return 2;
		}
		if (!ok) {
			fprintf(stderr, "%s: bad value for -%c: %s\n", argv[0], c, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr, argv[0]);
		return 2;
	}
	p.port = uint16_t(port);
	// The transports' variables apply here too: impairment (tests),
	// socket buffers, segmentation offload.
	emu::NetConfig cfg;
	if (int err = emu::load_net_config(&cfg)) {
		fprintf(stderr, "%s: bad IBV_COLL_EMU_* setting: %s\n", argv[0], strerror(err));
		return 2;
	}
	p.impair = cfg.impair;
	p.sockbuf = std::max<unsigned>(cfg.sockbuf, 8u << 20);
	p.gso = cfg.gso;

	// On a verbs device: open it, and let the switch open its transport
	// on it.
	ibv_context *vctx = nullptr;
	emu::UdTransport *ud = nullptr;
	if (!verbs_dev.empty()) {
		int n = 0;
		ibv_device **list = ibv_get_device_list(&n);
		for (int i = 0; list && i < n && !vctx; i++)
			if (verbs_dev == ibv_get_device_name(list[i]))
				vctx = ibv_open_device(list[i]);
		if (list)
			ibv_free_device_list(list);
		if (!vctx) {
			fprintf(stderr, "%s: no libibverbs device %s (ibv_devices lists them)\n",
				argv[0], verbs_dev.c_str());
			return 1;
		}
		p.transport = [&](std::unique_ptr<emu::Transport> *out) {
			emu::UdParams up;
			up.ctx = vctx;
			up.name = p.name + "@" + verbs_dev;
			up.rx_depth = 1024;
			std::unique_ptr<emu::UdTransport> t;
			if (int err = emu::UdTransport::open(up, &t))
				return err;
			ud = t.get();
			*out = std::move(t);
			return 0;
		};
		// A block and its headers travel in one UD datagram.
		p.gso = false;
	}

	emu::Switch *sw;
	try {
		sw = new emu::Switch(p);
	} catch (const std::bad_alloc &) {
		fprintf(stderr, "%s: no memory for %u Seg units of %u bytes\n", argv[0], p.units,
			p.unit_bytes);
		return 1;
	}
	if (int err = sw->open()) {
		if (vctx)
			fprintf(stderr, "%s: cannot serve on %s: %s\n", argv[0], verbs_dev.c_str(),
				strerror(err));
		else
			fprintf(stderr, "%s: cannot serve udp port %u: %s\n", argv[0], port,
				strerror(err));
		delete sw;
		if (vctx)
			ibv_close_device(vctx);
		return 1;
	}
	if (ud) {
		// What members put in ibv_coll_switch_addr: the GID and the QP.
		const emu::IpAddr *gid = &ud->gids()[0].first;
		if (gid_index != UINT32_MAX) {
			gid = nullptr;
			for (const auto &g : ud->gids())
				if (uint32_t(g.second) == gid_index)
					gid = &g.first;
			if (!gid) {
				fprintf(stderr, "%s: GID %u of %s is not a RoCE v2 address\n", argv[0],
					gid_index, verbs_dev.c_str());
				delete sw;
				ibv_close_device(vctx);
				return 1;
			}
		}
		printf("verbs %s gid %s qpn %u\n", verbs_dev.c_str(), gid->str().c_str(), ud->qpn());
		fflush(stdout);
	}
	struct sigaction sa {};
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	sigaction(SIGUSR1, &sa, nullptr);
	signal(SIGPIPE, SIG_IGN);
	if (ud)
		fprintf(stderr, "%s: %s serving %s (UD QP %u) with %u Seg units of %u bytes\n",
			argv[0], p.name.c_str(), verbs_dev.c_str(), ud->qpn(), p.units, p.unit_bytes);
	else
		fprintf(stderr, "%s: %s serving udp port %u with %u Seg units of %u bytes\n",
			argv[0], p.name.c_str(), sw->port(), p.units, p.unit_bytes);
	if (!port_file.empty())
		write_file(port_file, std::to_string(sw->port()) + "\n");

	auto dump = [&]() {
		sw->print_stats(stdout, json);
		if (!stats_file.empty()) {
			char *buf = nullptr;
			size_t len = 0;
			FILE *m = open_memstream(&buf, &len);
			if (m) {
				sw->print_stats(m, true);
				fclose(m);
				write_file(stats_file, std::string(buf, len));
				free(buf);
			}
		}
	};
	// The switch runs on this thread; the counters are printed between
	// its passes.
	auto last = std::chrono::steady_clock::now();
	uint64_t idle_since = 0;
	while (!g_stop.load()) {
		if (sw->poll_once()) {
			idle_since = 0;
		} else {
			// Nothing arrived: keep looking for a short while (the next
			// partial of a block is usually close behind), then block.
			uint64_t now = mono_us();
			if (!idle_since)
				idle_since = now;
			if (now - idle_since < poll_us)
				sched_yield();
			else
				sw->wait(200);
		}
		if (fail_after && sw->totals().data >= fail_after) {
			fprintf(stderr, "%s: %s stops dead (--fail-after %llu)\n", argv[0],
				p.name.c_str(), static_cast<unsigned long long>(fail_after));
			_exit(3);
		}
		auto now = std::chrono::steady_clock::now();
		if (g_dump.exchange(false) ||
		    (stats_s && now - last >= std::chrono::seconds(stats_s))) {
			last = now;
			dump();
		}
	}
	dump();
	delete sw;
	if (vctx)
		ibv_close_device(vctx);
	return 0;
}
