// ibv_coll_reduce_bench: throughput of the reduction kernels per ISA, next to memcpy on the same buffers.
//
// GB/s counts the bytes of operand b consumed per second for dst == a (the NIC's in-place accumulate); memcpy
// GB/s is bytes copied from b to a per second. In place, a kernel's cache/memory traffic (read a, read b, write
// back a) is about that of memcpy (read b, read-for-ownership of a, write back a), so a ratio near 1 means the
// kernel runs at copy speed and a ratio well below 1 that it is compute bound.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "util/config.h"
#include "ibvc_version.h"

namespace {

using namespace ibv_coll::emu;
using Clock = std::chrono::steady_clock;

struct Options {
	std::vector<size_t> sizes;
	unsigned reps = 5;  // repetitions; the median is reported
	unsigned iters = 0; // kernel calls per repetition; 0 = calibrate to ~kTargetRepSeconds
	bool all = false;
	int only_isa = -1;
};

constexpr double kTargetRepSeconds = 0.02;

[[noreturn]] void usage(const char *argv0, int rc)
{
	std::fprintf(
		rc ? stderr : stdout,
		"usage: %s [--size BYTES[k|m|g]]... [--iters N] [--reps N] [--all] [--isa scalar|avx2|avx512] [--version]\n"
		"  --size   buffer size per operand (repeatable; default 1m and 64m)\n"
		"  --iters  kernel calls per repetition (default: calibrated to ~20 ms)\n"
		"  --reps   repetitions, median reported (default 5)\n"
		"  --all    every supported (op, dtype); default is sum on every numeric dtype,\n"
		"           prod/min/max on float32, bxor on uint32 and maxloc on float32_int32\n"
		"  --isa    only this ISA (default: every ISA available on this CPU)\n",
		argv0);
	std::exit(rc);
}

Options parse_args(int argc, char **argv)
{
	Options o;
	for (int i = 1; i < argc; ++i) {
		const std::string a = argv[i];
		auto value = [&]() -> const char * {
			if (i + 1 >= argc)
				usage(argv[0], 2);
			return argv[++i];
		};
		if (a == "--size") {
			uint64_t s = 0;
			if (!ibv_coll::util::parse_size(value(), &s) || s == 0)
				usage(argv[0], 2);
			o.sizes.push_back(s);
		} else if (a == "--iters") {
			o.iters = static_cast<unsigned>(std::strtoul(value(), nullptr, 10));
		} else if (a == "--reps") {
			o.reps = std::max(
				1u, static_cast<unsigned>(std::strtoul(value(), nullptr, 10)));
		} else if (a == "--all") {
			o.all = true;
		} else if (a == "--isa") {
			const std::string name = value();
			for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
				if (name == isa_name(isa))
					o.only_isa = static_cast<int>(isa);
			if (o.only_isa < 0)
				usage(argv[0], 2);
		} else if (a == "--help" || a == "-h") {
			usage(argv[0], 0);
		} else if (a == "--version" || a == "-V") {
			std::exit(ibvc_print_version("ibv_coll_reduce_bench", nullptr));
		} else {
			usage(argv[0], 2);
		}
	}
	if (o.sizes.empty())
		o.sizes = {size_t{1} << 20, size_t{64} << 20};
	return o;
}

// Page-aligned buffer; freed on scope exit.
struct FreeDeleter {
	void operator()(unsigned char *p) const { std::free(p); }
};
using BufferPtr = std::unique_ptr<unsigned char, FreeDeleter>;

BufferPtr make_buffer(size_t bytes)
{
	auto *p = static_cast<unsigned char *>(
		std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
	if (p == nullptr) {
		std::fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
		std::exit(1);
	}
	return BufferPtr(p);
}

// Fills with values that stay normal under repeated in-place accumulation: denormals would hit microcode
// assists on some CPUs and measure the FPU's slow path rather than the kernel. b is 1.0 for prod (a stays put),
// small for sum, so a neither overflows nor underflows over thousands of calls.
// Only one pattern period is computed (converting 64 MiB element by element would dominate the run time); the
// rest is replicated with memcpy.
void fill(Dtype d, RedOp op, unsigned char *p, size_t bytes, bool is_b)
{
	const size_t n = std::min(bytes / dtype_size(d), size_t{7 * 13 * 64});
	for (size_t i = 0; i < n; ++i) {
		const float f = is_b ? (op == RedOp::prod ? 1.0f
							  : 0.001f * static_cast<float>(i % 7))
				     : 1.0f + 0.01f * static_cast<float>(i % 13);
		switch (d) {
		case Dtype::float16: {
			const uint16_t h = float_to_half(f);
			std::memcpy(p + 2 * i, &h, 2);
			break;
		}
		case Dtype::bfloat16: {
			const uint16_t h = float_to_bf16(f);
			std::memcpy(p + 2 * i, &h, 2);
			break;
		}
		case Dtype::float32: std::memcpy(p + 4 * i, &f, 4); break;
		case Dtype::float64: {
			const double v = f;
			std::memcpy(p + 8 * i, &v, 8);
			break;
		}
		case Dtype::float32_int32:
		case Dtype::float64_int32:
		case Dtype::int64_int32:
		case Dtype::int32_int32:
		case Dtype::int16_int32: {
			// { value; int32_t index; }, padding zero: the value as
			// the floats' (ties included), the index i.
			unsigned char e[16] = {};
			const size_t es = dtype_size(d);
			const int32_t idx = static_cast<int32_t>(i);
			const double v64 = f;
			const int64_t i64 = static_cast<int64_t>(f * 100.0f);
			const int32_t i32 = static_cast<int32_t>(i64);
			const int16_t i16 = static_cast<int16_t>(i64);
			switch (d) {
			case Dtype::float32_int32: std::memcpy(e, &f, 4); break;
			case Dtype::float64_int32: std::memcpy(e, &v64, 8); break;
			case Dtype::int64_int32: std::memcpy(e, &i64, 8); break;
			case Dtype::int32_int32: std::memcpy(e, &i32, 4); break;
			default: std::memcpy(e, &i16, 2); break;
			}
			std::memcpy(e + (es == 16 ? 8 : 4), &idx, 4); // after the value, aligned
			std::memcpy(p + i * es, e, es);
			break;
		}
		default: { // the integers, 1 to 8 bytes
			const uint64_t v = ((i * 0x9E3779B97F4A7C15ull) >> 17) | 1;
			std::memcpy(p + i * dtype_size(d), &v, dtype_size(d));
			break;
		}
		}
	}
	for (size_t done = n * dtype_size(d); done < bytes;) {
		const size_t chunk = std::min(done, bytes - done);
		std::memcpy(p + done, p, chunk);
		done += chunk;
	}
}

template <class F> double seconds_per_call(F &&call, unsigned iters, unsigned reps)
{
	call(); // warm up: page faults, caches, frequency
	if (iters == 0) {
		const auto t0 = Clock::now();
		call();
		const double once = std::chrono::duration<double>(Clock::now() - t0).count();
		iters = static_cast<unsigned>(
			std::clamp(kTargetRepSeconds / std::max(once, 1e-9), 1.0, 1e6));
	}
	std::vector<double> per_call;
	for (unsigned r = 0; r < reps; ++r) {
		const auto t0 = Clock::now();
		for (unsigned k = 0; k < iters; ++k)
			call();
		per_call.push_back(std::chrono::duration<double>(Clock::now() - t0).count() /
				   iters);
	}
	std::nth_element(per_call.begin(), per_call.begin() + per_call.size() / 2, per_call.end());
	return per_call[per_call.size() / 2];
}

std::string human_size(size_t b)
{
	char buf[32];
	if (b % (size_t{1} << 30) == 0)
		std::snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
	else if (b % (size_t{1} << 20) == 0)
		std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
	else if (b % (size_t{1} << 10) == 0)
		std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
	else
		std::snprintf(buf, sizeof buf, "%zu B", b);
	return buf;
}

struct Row {
	RedOp op;
	Dtype dtype;
};

std::vector<Row> rows(bool all)
{
	std::vector<Row> v;
	if (all) {
		for (unsigned o = 0; o < kNumRedOps; ++o)
			for (unsigned d = 0; d < kNumDtypes; ++d)
				if (op_supported(static_cast<RedOp>(o), static_cast<Dtype>(d)))
					v.push_back({static_cast<RedOp>(o), static_cast<Dtype>(d)});
		return v;
	}
	// Sum on every type that has it (not the value-index pairs, which
	// only MAXLOC and MINLOC take: MAXLOC stands for them).
	for (unsigned d = 0; d < kNumDtypes; ++d)
		if (op_supported(RedOp::sum, static_cast<Dtype>(d)))
			v.push_back({RedOp::sum, static_cast<Dtype>(d)});
	for (RedOp op : {RedOp::prod, RedOp::min, RedOp::max})
		v.push_back({op, Dtype::float32});
	v.push_back({RedOp::bxor, Dtype::uint32});
	v.push_back({RedOp::maxloc, Dtype::float32_int32});
	return v;
}

} // namespace

int main(int argc, char **argv)
{
	const Options opt = parse_args(argc, argv);
	const Isa default_isa = reduce_isa();

	std::vector<Isa> isas;
	for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
		if (opt.only_isa >= 0 && static_cast<int>(isa) != opt.only_isa)
			continue;
		if (isa_available(isa))
			isas.push_back(isa);
		else
			std::printf("note: %s not available on this CPU, skipped\n", isa_name(isa));
	}
	const ibv_coll::util::ConfigVar &isa_var = reduce_config_vars()[0];
	std::printf("default ISA: %s (%s=%s)\n", isa_name(default_isa), isa_var.name,
		    ibv_coll::util::config_is_set(isa_var)
			    ? ibv_coll::util::config_text(isa_var).c_str()
			    : "unset");
	std::printf(
		"GB/s = bytes of b per second with dst == a, median of %u reps; ratio = kernel / memcpy(a <- b)\n",
		opt.reps);

	volatile unsigned sink = 0; // keeps the results observable
	for (size_t size : opt.sizes) {
		BufferPtr a = make_buffer(size), b = make_buffer(size);
		std::memset(a.get(), 1, size); // touch every page before timing
		std::memset(b.get(), 2, size);
		auto memcpy_gbs = [&] {
			const double s = seconds_per_call(
				[&] { std::memcpy(a.get(), b.get(), size); }, opt.iters, opt.reps);
			return static_cast<double>(size) / s / 1e9;
		};

		// Kernel rows are printed as they finish (a long run shows progress), so the memcpy reference has to be
		// known first; it is measured again at the end and the spread reported, as a noise indicator.
		const double memcpy_first = memcpy_gbs();
		std::printf("\n== size %s per operand; memcpy %.2f GB/s ==\n",
			    human_size(size).c_str(), memcpy_first);
		std::printf("%-7s %-6s %-13s %10s %12s %7s\n", "isa", "op", "dtype", "GB/s",
			    "memcpy GB/s", "ratio");
		for (Isa isa : isas) {
			set_reduce_isa(isa);
			for (const Row &r : rows(opt.all)) {
				const ReduceFn fn = reduce_fn(r.op, r.dtype);
				if (!fn) { // rows() asks only for supported pairs
					std::fprintf(stderr,
						     "ibv_coll_reduce_bench: no kernel for %s %s\n",
						     redop_name(r.op), dtype_name(r.dtype));
					return 1;
				}
				const size_t count = size / dtype_size(r.dtype);
				fill(r.dtype, r.op, a.get(), size, false);
				fill(r.dtype, r.op, b.get(), size, true);
				const double s = seconds_per_call(
					[&] { fn(a.get(), a.get(), b.get(), count); }, opt.iters,
					opt.reps);
				const double gbs = static_cast<double>(count *
								       dtype_size(r.dtype)) /
						   s / 1e9;
				std::printf("%-7s %-6s %-13s %10.2f %12.2f %7.2f\n", isa_name(isa),
					    redop_name(r.op), dtype_name(r.dtype), gbs,
					    memcpy_first, gbs / memcpy_first);
				std::fflush(stdout);
				sink = sink + a.get()[size / 2];
			}
		}
		std::printf("(memcpy re-measured after the kernels: %.2f GB/s)\n", memcpy_gbs());
	}
	set_reduce_isa(default_isa);
	return sink == 0xFFFFFFFFu ? 1 : 0;
}
