// ibv_coll_sim(1): runs the jobs of a description file on a simulated
// fabric, through the device's collective engine and the aggregation
// switch, in virtual time.
#include "sim/sim.h"

#include "ibvc_version.h"

#include <getopt.h>

#include <cerrno>
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
		   "  -h, --help          this text\n"
		   "      --version       print the version and exit\n"
		   "Exit status: 0 every result right, 1 a wrong or failed result or a job\n"
		   "left unfinished, 2 a bad command line or description.\n");
}

int main(int argc, char **argv)
{
	enum { OPT_VERSION = 256 };
	static const option longs[] = {{"seed", 1, nullptr, 's'},
				       {"limit", 1, nullptr, 'l'},
				       {"help", 0, nullptr, 'h'},
				       {"version", 0, nullptr, OPT_VERSION},
				       {nullptr, 0, nullptr, 0}};
	long long seed = -1;
	double limit_s = 600;
	int c;
	while ((c = getopt_long(argc, argv, "s:l:h", longs, nullptr)) != -1) {
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
	Simulator sim(f, s);
	for (const JobSpec &j : jobs)
		if (!sim.add_job(j, &err)) {
			fprintf(stderr, "ibv_coll_sim: %s: %s\n", argv[optind], err.c_str());
			return 2;
		}
	const SimReport r = sim.run(uint64_t(limit_s * 1e9));
	print_report(stdout, f, r);
	bool ok = !r.stuck;
	for (const JobResult &j : r.jobs)
		for (const SizeResult &z : j.sizes)
			ok &= !z.wrong && !z.failed;
	return ok ? 0 : 1;
}
