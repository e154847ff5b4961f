// ibv_coll_sim(1): runs the jobs of a description file on a simulated
// fabric, through the device's collective engine and the aggregation
// switch, in virtual time.
#include "sim/sim.h"

#include "ibvc_version.h"

#include <getopt.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace ibv_coll::sim;

static void usage(FILE *f)
{
	fprintf(f, "Usage: ibv_coll_sim [options] DESCRIPTION.json\n"
		   "Runs the collective jobs of DESCRIPTION on a simulated fabric, through the\n"
		   "device's collective engine and the aggregation switch, in virtual time.\n"
		   "  -s, --seed N        the random seed (loss, jitter, data), over the file's\n"
		   "  -l, --limit SEC     stop after SEC seconds of virtual time (default 600)\n"
		   "  -j, --json FILE     also write the results as JSON to FILE\n"
		   "  -p, --pcap FILE     write every packet, as it leaves its sender, to FILE\n"
		   "  -h, --help          this text\n"
		   "      --version       print the version and exit\n"
		   "Exit status: 0 every result right, 1 a wrong or failed result or a job\n"
		   "left unfinished, 2 a bad command line or description.\n");
}

int main(int argc, char **argv)
{
	enum { OPT_VERSION = 256 };
	const char *pcap_path = nullptr;
	static const option longs[] = {
		{"seed", 1, nullptr, 's'}, {"limit", 1, nullptr, 'l'},
		{"json", 1, nullptr, 'j'}, {"pcap", 1, nullptr, 'p'},
		{"help", 0, nullptr, 'h'}, {"version", 0, nullptr, OPT_VERSION},
		{nullptr, 0, nullptr, 0}};
	long long seed = -1;
	double limit_s = 600;
	const char *json_path = nullptr;
	int c;
	while ((c = getopt_long(argc, argv, "s:l:j:p:h", longs, nullptr)) != -1) {
		char *end = nullptr;
		switch (c) {
		case 's':
			errno = 0;
			seed = strtoll(optarg, &end, 0);
			if (!*optarg || *end || errno || seed < 0 || seed > UINT32_MAX) {
				fprintf(stderr,
					"ibv_coll_sim: --seed: \"%s\" is not 0 to 4294967295\n",
					optarg);
				return 2;
			}
			break;
		case 'l':
			limit_s = strtod(optarg, &end);
			if (!*optarg || *end || !(limit_s > 0) || limit_s > 1e6) {
				fprintf(stderr,
					"ibv_coll_sim: --limit: \"%s\" is not a number of seconds\n",
					optarg);
				return 2;
			}
			break;
		case 'j': json_path = optarg; break;
		case 'p': pcap_path = optarg; break;
		case 'h': usage(stdout); return 0;
		case OPT_VERSION: return ibvc_print_version("ibv_coll_sim", nullptr);
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	std::ifstream in(argv[optind]);
	if (!in) {
		fprintf(stderr, "ibv_coll_sim: %s: %s\n", argv[optind], strerror(errno));
		return 2;
	}
	std::stringstream ss;
	ss << in.rdbuf();
	FabricSpec f;
	std::vector<JobSpec> jobs;
	uint64_t s = 1;
	std::string err;
	if (!parse_description(ss.str(), &f, &jobs, &s, &err)) {
		fprintf(stderr, "ibv_coll_sim: %s: %s\n", argv[optind], err.c_str());
		return 2;
	}
	if (seed >= 0)
		s = uint64_t(seed);
	const auto t0 = std::chrono::steady_clock::now();
	Simulator sim(f, s);
	for (const JobSpec &j : jobs)
		if (!sim.add_job(j, &err)) {
			fprintf(stderr, "ibv_coll_sim: %s: %s\n", argv[optind], err.c_str());
			return 2;
		}
	if (pcap_path && !sim.open_pcap(pcap_path, &err)) {
		fprintf(stderr, "ibv_coll_sim: --pcap: %s\n", err.c_str());
		return 2;
	}
	// On a terminal, a line a second while it runs.
	std::function<void(uint64_t, uint64_t, uint32_t, uint32_t)> progress;
	if (isatty(STDERR_FILENO))
		progress = [](uint64_t t, uint64_t ev, uint32_t done, uint32_t n) {
			fprintf(stderr, "\r# virtual %.6f s, %llu events, %u/%u jobs done",
				double(t) / 1e9, (unsigned long long)ev, done, n);
		};
	const auto t1 = std::chrono::steady_clock::now();
	const SimReport r = sim.run(uint64_t(limit_s * 1e9), progress);
	if (progress)
		fprintf(stderr, "\r\033[K");
	print_report(stdout, f, r);
	if (pcap_path && !sim.close_pcap(&err)) {
		fprintf(stderr, "ibv_coll_sim: --pcap: %s: %s\n", pcap_path, err.c_str());
		return 1;
	}
	// What the run cost this machine, on stderr: the report on stdout is
	// the same bytes whatever the machine.
	const auto t2 = std::chrono::steady_clock::now();
	struct rusage ru {};
	getrusage(RUSAGE_SELF, &ru);
	const double secs = std::chrono::duration<double>(t2 - t0).count();
	const double setup = std::chrono::duration<double>(t1 - t0).count();
	const double kib = double(ru.ru_maxrss); // KiB on Linux
	fprintf(stderr,
		"ibv_coll_sim: wall %.1f s (%.1f s to build the fabric and configure the jobs), "
		"peak memory %.2f GiB, %.1f KiB per host\n",
		secs, setup, kib / (1 << 20), kib / f.nodes);
	if (json_path) {
		FILE *jf = fopen(json_path, "w");
		const std::string js = report_json(f, r);
		if (!jf || fwrite(js.data(), 1, js.size(), jf) != js.size() || fclose(jf)) {
			fprintf(stderr, "ibv_coll_sim: %s: %s\n", json_path, strerror(errno));
			return 1;
		}
	}
	bool ok = !r.stuck;
	for (const JobResult &j : r.jobs)
		for (const SizeResult &z : j.sizes)
			ok &= !z.wrong && !z.failed;
	return ok ? 0 : 1;
}
