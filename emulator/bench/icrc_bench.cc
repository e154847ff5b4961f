// ibv_coll_icrc_bench: throughput of each CRC-32 implementation (the ICRC's
// CRC) on packet-sized and large buffers, next to memcpy of the same bytes.
//
// Baseline: the slicing-by-8 table walk.  "vs table" is the speed-up over
// it in the same run; "vs memcpy" relates the CRC to copying the packet
// once (the cheapest thing the data path does to every byte).  The median
// of --reps repetitions is reported.
#include "wire/icrc.h"
#include "ibvc_version.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ibv_coll::emu::wire;
using Clock = std::chrono::steady_clock;

template <class F> double median_gbps(size_t bytes, unsigned reps, F &&f)
{
	// Calibrate the calls per repetition to about 20 ms.
	unsigned iters = 1;
	for (;;) {
		auto t0 = Clock::now();
		for (unsigned i = 0; i < iters; i++)
			f();
		double s = std::chrono::duration<double>(Clock::now() - t0).count();
		if (s > 0.02 || iters > (1u << 24))
			break;
		iters *= 2;
	}
	std::vector<double> g;
	for (unsigned r = 0; r < reps; r++) {
		auto t0 = Clock::now();
		for (unsigned i = 0; i < iters; i++)
			f();
		double s = std::chrono::duration<double>(Clock::now() - t0).count();
		g.push_back(double(bytes) * iters / s / 1e9);
	}
	std::sort(g.begin(), g.end());
	return g[g.size() / 2];
}

} // namespace

int main(int argc, char **argv)
{
	std::vector<size_t> sizes = {64, 256, 1024, 4096, 1u << 20};
	unsigned reps = 5;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		if (a == "--reps" && i + 1 < argc) {
			reps = unsigned(std::max(1, atoi(argv[++i])));
		} else if (a == "--size" && i + 1 < argc) {
			static bool first = true;
			if (first)
				sizes.clear();
			first = false;
			sizes.push_back(size_t(strtoull(argv[++i], nullptr, 0)));
		} else if (a == "--version" || a == "-V") {
			return ibvc_print_version("ibv_coll_icrc_bench", nullptr);
		} else {
			fprintf(a == "-h" || a == "--help" ? stdout : stderr,
				"usage: %s [--size BYTES]... [--reps N] [--version]\n"
				"  --size  buffer length (repeatable; default 64 256 1024 4096 1048576)\n"
				"  --reps  repetitions, median reported (default 5)\n",
				argv[0]);
			return a == "-h" || a == "--help" ? 0 : 2;
		}
	}
	const struct {
		CrcImpl impl;
		const char *name;
	} impls[] = {{CrcImpl::table, "table"},
		     {CrcImpl::clmul, "pclmul-128"},
		     {CrcImpl::clmul_avx, "pclmul-128-avx"},
		     {CrcImpl::vclmul, "vpclmul-256"},
		     {CrcImpl::vclmul512, "vpclmul-512"}};
	printf("# ibv_coll_icrc_bench: CRC-32 (ICRC) GB/s, median of %u; baseline: table\n", reps);
	printf("# %10s  %-14s  %8s  %9s  %9s\n", "bytes", "impl", "GB/s", "vs table", "vs memcpy");
	for (size_t n : sizes) {
		std::vector<uint8_t> src(n + 64), dst(n + 64);
		for (size_t i = 0; i < src.size(); i++)
			src[i] = uint8_t(i * 131 + 7);
		double mc = median_gbps(n, reps, [&] {
			memcpy(dst.data(), src.data(), n);
			asm volatile("" : : "r"(dst.data()) : "memory");
		});
		double base = 0;
		uint32_t want = 0;
		for (const auto &im : impls) {
			if (!crc32_impl_available(im.impl)) {
				printf("  %10zu  %-14s  %8s  (not on this CPU)\n", n, im.name, "-");
				continue;
			}
			uint32_t sink = 0;
			double g = median_gbps(n, reps, [&] {
				sink ^= crc32_update_with(im.impl, 0xffffffffu, src.data(), n);
				asm volatile("" : : "r"(sink) : "memory");
			});
			uint32_t v = crc32_update_with(im.impl, 0xffffffffu, src.data(), n);
			if (im.impl == CrcImpl::table) {
				base = g;
				want = v;
			} else if (v != want) {
				fprintf(stderr, "%s disagrees with the table walk at %zu bytes\n",
					im.name, n);
				return 1;
			}
			printf("  %10zu  %-14s  %8.2f  %8.2fx  %8.2fx\n", n, im.name, g, g / base,
			       g / mc);
		}
		printf("  %10zu  %-14s  %8.2f\n", n, "memcpy", mc);
	}
	return 0;
}
