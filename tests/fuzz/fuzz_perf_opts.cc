// libFuzzer target: ibv_coll_perf's command line (tools/common/perf_opts.c).
// Input: the arguments, separated by NUL bytes.
#include <ibv_coll/ibv_coll.h> // first: C++ mode; perf_opts.h then declares C functions
extern "C" {
#include "perf_opts.h"
}

#include <getopt.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::vector<std::string> args{"ibv_coll_perf"};
	std::string cur;
	for (size_t i = 0; i < size && args.size() < 64; i++) {
		if (data[i]) {
			cur.push_back(char(data[i]));
		} else {
			args.push_back(cur);
			cur.clear();
		}
	}
	if (!cur.empty())
		args.push_back(cur);
	std::vector<char *> argv;
	for (std::string &a : args)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	optind = 0; // glibc: start a new scan
	opterr = 0;
	perf_opts o{};
	int r = parse_opts(int(args.size()), argv.data(), &o);
	if (r != -1 && r != 0 && r != 2)
		abort();
	if (r == -1) {
		// What the benchmark then relies on.
		if (o.coll < 0 || o.coll >= NCOLLS || o.minbytes > o.maxbytes || o.iters < 0 ||
		    o.nodes < 1 || o.node < 0 || o.node >= o.nodes || o.sw_planes < 0 ||
		    o.sw_planes > 8)
			abort();
	}
	return 0;
}
