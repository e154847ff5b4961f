// ibv_coll_stat(1): the live counters of every ibv_coll device open on
// this host (from their shared-memory segments, nic/stats_shm.h) and of
// aggregation switches by address (STATS, wire/swproto.h), as a table in
// the manner of `rdma statistic` or as JSON, once or every few seconds.
#include "nic/stats_shm.h"
#include "stat/switch_query.h"

#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <thread>

namespace {

using namespace ibv_coll::emu;
using Counters = std::vector<std::pair<std::string, uint64_t>>;

struct Options {
	bool json = false, nonzero = false, verbose = false;
	double watch_s = 0;
	long count = 0; // samples in watch mode; 0: until interrupted
	std::string device;
	int pid = 0;
	int timeout_ms = 1000;
	std::vector<std::string> switches;
	std::string shm_dir = "/dev/shm";
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int)
{
	g_stop = 1;
}

void usage(FILE *f, const char *argv0)
{
	fprintf(f,
		"usage: %s [-jSvz] [-d DEVICE] [-p PID] [-s HOST[:PORT]]... [-t MS] [-w SEC [-c COUNT]]\n"
		"Show the counters of every ibv_coll device open on this host, and of switches.\n"
		"  -j, --json             JSON (one document per sample)\n"
		"  -z, --nonzero          leave out counters that are 0 (table only)\n"
		"  -d, --device NAME      only devices named NAME (e.g. crxe_lo)\n"
		"  -p, --pid PID          only the devices of process PID\n"
		"  -s, --switch ADDR      also the switch at HOST[:PORT] or [IPV6]:PORT (port 4791\n"
		"                         when absent); repeat for more switches\n"
		"  -S, --switches-only    no local devices\n"
		"  -t, --timeout MS       wait MS for a switch's answer (default 1000, 3 tries)\n"
		"  -w, --watch SEC        show them again every SEC seconds, with what changed\n"
		"  -c, --count N          with -w: stop after N samples\n"
		"  -v, --verbose          say which segments were skipped, and why\n"
		"  -V, --version          print the version and exit\n"
		"  -h, --help             this text\n",
		argv0);
}

bool parse_num(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return false;
	*out = v;
	return true;
}

// Which table row a counter goes on.
const char *group_of(const std::string &n)
{
	for (const char *p : {"rc_", "coll_", "cc_", "drop_", "seg_"})
		if (!n.compare(0, strlen(p), p))
			return p;
	return "";
}

// One object's counters, `rdma statistic` style: name value pairs,
// wrapped, a line per group; with a previous sample, what changed.
void print_counters(const Counters &c, const std::map<std::string, uint64_t> *prev, bool nonzero)
{
	std::string line;
	const char *group = nullptr;
	auto flush = [&]() {
		if (!line.empty())
			printf("   %s\n", line.c_str());
		line.clear();
	};
	for (const auto &[name, v] : c) {
		if (nonzero && !v)
			continue;
		const char *g = group_of(name);
		if (group && strcmp(g, group))
			flush();
		group = g;
		std::string item = " " + name + " " + std::to_string(v);
		if (prev) {
			auto it = prev->find(name);
			if (it != prev->end() && it->second != v)
				item += " (+" + std::to_string(v - it->second) + ")";
		}
		if (line.size() + item.size() > 96)
			flush();
		line += item;
	}
	flush();
}

nlohmann::ordered_json to_json(const Counters &c)
{
	nlohmann::ordered_json o = nlohmann::ordered_json::object();
	for (const auto &[name, v] : c)
		o[name] = v;
	return o;
}

struct Sample {
	std::vector<stats::Device> devices;
	std::vector<stat::SwitchStats> switches;
	std::vector<std::string> failed; // switches that did not answer
};

Sample take(const Options &o, std::vector<std::string> *skipped)
{
	Sample s;
	if (o.shm_dir != "-") {
		for (stats::Device &d : stats::list(o.shm_dir, true, skipped)) {
			if ((!o.device.empty() && d.device != o.device) ||
			    (o.pid && d.pid != o.pid))
				continue;
			s.devices.push_back(std::move(d));
		}
	}
	for (const std::string &a : o.switches) {
		stat::SwitchStats st;
		std::string err;
		if (stat::query_switch(a, o.timeout_ms, &st, &err))
			s.failed.push_back(a + ": " + err);
		else
			s.switches.push_back(std::move(st));
	}
	return s;
}

std::string key_of(const stats::Device &d)
{
	return d.path;
}

void show(const Options &o, const Sample &s,
	  std::map<std::string, std::map<std::string, uint64_t>> &prev, bool watching)
{
	const double now = std::chrono::duration<double>(
				   std::chrono::system_clock::now().time_since_epoch())
				   .count();
	if (o.json) {
		nlohmann::ordered_json j;
		if (watching)
			j["time"] = now;
		j["devices"] = nlohmann::ordered_json::array();
		for (const stats::Device &d : s.devices) {
			nlohmann::ordered_json e;
			e["device"] = d.device;
			e["pid"] = d.pid;
			e["port"] = d.udp_port;
			e["counters"] = to_json(d.counters);
			j["devices"].push_back(std::move(e));
		}
		j["switches"] = nlohmann::ordered_json::array();
		for (const stat::SwitchStats &w : s.switches) {
			nlohmann::ordered_json e;
			e["address"] = w.address;
			e["name"] = w.name;
			e["counters"] = to_json(w.counters);
			j["switches"].push_back(std::move(e));
		}
		printf("%s\n",
		       j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
		fflush(stdout);
		return;
	}
	if (watching) {
		time_t t = time_t(now);
		char buf[32];
		strftime(buf, sizeof(buf), "%F %T", localtime(&t));
		printf("--- %s\n", buf);
	}
	if (s.devices.empty() && o.shm_dir != "-")
		printf("no ibv_coll device is open on this host%s\n",
		       o.device.empty() && !o.pid ? "" : " (that matches)");
	for (const stats::Device &d : s.devices) {
		printf("link %s/1 pid %d port %u\n", d.device.c_str(), d.pid, d.udp_port);
		auto it = prev.find(key_of(d));
		print_counters(d.counters, it == prev.end() ? nullptr : &it->second, o.nonzero);
	}
	for (const stat::SwitchStats &w : s.switches) {
		printf("switch %s at %s\n", w.name.c_str(), w.address.c_str());
		auto it = prev.find("switch " + w.address);
		print_counters(w.counters, it == prev.end() ? nullptr : &it->second, o.nonzero);
	}
	fflush(stdout);
	for (const stats::Device &d : s.devices)
		prev[key_of(d)] = {d.counters.begin(), d.counters.end()};
	for (const stat::SwitchStats &w : s.switches)
		prev["switch " + w.address] = {w.counters.begin(), w.counters.end()};
}

int parse(int argc, char **argv, Options *o)
{
	static const option longopts[] = {
		{"json", 0, nullptr, 'j'},    {"nonzero", 0, nullptr, 'z'},
		{"device", 1, nullptr, 'd'},  {"pid", 1, nullptr, 'p'},
		{"switch", 1, nullptr, 's'},  {"switches-only", 0, nullptr, 'S'},
		{"timeout", 1, nullptr, 't'}, {"watch", 1, nullptr, 'w'},
		{"count", 1, nullptr, 'c'},   {"verbose", 0, nullptr, 'v'},
		{"shm-dir", 1, nullptr, 'D'}, {"help", 0, nullptr, 'h'},
		{"version", 0, nullptr, 'V'}, {nullptr, 0, nullptr, 0},
	};
	int c;
	double v;
	while ((c = getopt_long(argc, argv, "jzd:p:s:St:w:c:vVh", longopts, nullptr)) != -1) {
		switch (c) {
		case 'j': o->json = true; break;
		case 'z': o->nonzero = true; break;
		case 'd': o->device = optarg; break;
		case 'p':
			if (!parse_num(optarg, 1, 1 << 30, &v) || v != int(v)) {
				fprintf(stderr, "%s: -p %s: not a process id\n", argv[0], optarg);
				return 2;
			}
			o->pid = int(v);
			break;
		case 's': o->switches.push_back(optarg); break;
		case 'S': o->shm_dir = "-"; break;
		case 'D': o->shm_dir = optarg; break;
		case 't':
			if (!parse_num(optarg, 1, 60000, &v)) {
				fprintf(stderr, "%s: -t %s: not a time in ms (1-60000)\n", argv[0],
					optarg);
				return 2;
			}
			o->timeout_ms = int(v);
			break;
		case 'w':
			if (!parse_num(optarg, 0.01, 86400, &v)) {
				fprintf(stderr, "%s: -w %s: not a number of seconds (0.01-86400)\n",
					argv[0], optarg);
				return 2;
			}
			o->watch_s = v;
			break;
		case 'c':
			if (!parse_num(optarg, 1, 1e9, &v) || v != long(v)) {
				fprintf(stderr, "%s: -c %s: not a count (1 or more)\n", argv[0],
					optarg);
				return 2;
			}
			o->count = long(v);
			break;
		case 'v': o->verbose = true; break;
		case 'h': usage(stdout, argv[0]); return 0;
		case 'V': printf("ibv_coll_stat (ibv_coll) %s\n", IBVC_VERSION); return 0;
		default:
			fprintf(stderr, "%s: unknown option or missing argument (see -h)\n",
				argv[0]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s' (see -h)\n", argv[0], argv[optind]);
		return 2;
	}
	if (o->count && !o->watch_s) {
		fprintf(stderr, "%s: -c needs -w\n", argv[0]);
		return 2;
	}
	return -1;
}

} // namespace

int main(int argc, char **argv)
{
	Options o;
	if (int r = parse(argc, argv, &o); r >= 0)
		return r;
	struct sigaction sa {};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	std::map<std::string, std::map<std::string, uint64_t>> prev;
	int status = 0;
	for (long n = 0; !g_stop; n++) {
		std::vector<std::string> skipped;
		Sample s = take(o, &skipped);
		if (o.verbose)
			for (const std::string &k : skipped)
				fprintf(stderr, "%s: skipped %s\n", argv[0], k.c_str());
		for (const std::string &f : s.failed)
			fprintf(stderr, "%s: switch %s\n", argv[0], f.c_str());
		if (!s.failed.empty())
			status = 1;
		show(o, s, prev, o.watch_s > 0);
		if (!o.watch_s || (o.count && n + 1 >= o.count))
			break;
		auto until = std::chrono::steady_clock::now() +
			     std::chrono::duration<double>(o.watch_s);
		while (!g_stop && std::chrono::steady_clock::now() < until)
			std::this_thread::sleep_for(std::chrono::milliseconds(20));
	}
	return status;
}
