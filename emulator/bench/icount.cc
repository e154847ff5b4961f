// ibv_coll_icount: the instructions a program executes inside given
// functions, counted exactly by single-stepping it under ptrace(2), on
// this CPU with the code paths it picks here (the ICRC's 512-bit folding,
// the AVX-512 reduce kernels), where callgrind runs the program on a
// simulated CPU without VPCLMULQDQ and AVX-512 and perf(1) needs hardware
// counters that virtual machines often lack.
//
//   ibv_coll_icount -f OFFSET=NAME [-f OFFSET=NAME]... -- PROGRAM [ARG]...
//
// OFFSET is a function's address in PROGRAM's file (nm(1)'s value; the
// load address of a position-independent program is added).  The first -f
// is the region: the instructions from each entry to it to its return,
// callees included, are counted; the others are counted the same way while
// inside the region (their share of it).  A repeated string instruction
// counts once, as a hardware counter counts it.  x86-64 Linux only; slow
// (each instruction stops the program): keep the run small.
#include "ibvc_version.h"

#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>
#define IBVC_ICOUNT 1
#endif

namespace {

struct Fn {
	uint64_t off = 0, addr = 0;
	std::string name;
	uint64_t insns = 0, calls = 0;
	// While inside: where it returns to, and the stack pointer that
	// return leaves (entry's + 8).
	bool inside = false;
	uint64_t ret = 0, sp_after = 0;
};

void usage(FILE *f)
{
	fprintf(f, "usage: ibv_coll_icount -f OFFSET=NAME [-f OFFSET=NAME]... -- PROGRAM [ARG]...\n"
		   "  counts the instructions PROGRAM executes inside the first function (its\n"
		   "  region, callees included) and inside each other one while in the region,\n"
		   "  by single-stepping it (x86-64 Linux).  OFFSET: the function's address in\n"
		   "  PROGRAM's file, as nm(1) prints it.\n");
}

bool parse_fn(const char *s, Fn *fn)
{
	char *end = nullptr;
	errno = 0;
	const unsigned long long v = strtoull(s, &end, 16);
	if (errno || end == s || *end != '=' || !end[1] || !v)
		return false;
	fn->off = v;
	fn->name = end + 1;
	return true;
}

#if IBVC_ICOUNT
// Where PROGRAM's file is mapped at offset 0 (its load address), from the
// first mapping of that file.
uint64_t load_base(pid_t pid, const std::string &exe)
{
	std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
	char real[4096];
	const std::string want = realpath(exe.c_str(), real) ? real : exe;
	std::string line;
	while (std::getline(maps, line)) {
		unsigned long long lo = 0, off = 0;
		char path[4096] = "";
		if (sscanf(line.c_str(), "%llx-%*x %*s %llx %*s %*s %4095s", &lo, &off, path) ==
			    3 &&
		    want == path && off == 0)
			return lo;
	}
	return 0;
}

bool poke_byte(pid_t pid, uint64_t addr, uint8_t b, uint8_t *old)
{
	errno = 0;
	const long w = ptrace(PTRACE_PEEKTEXT, pid, addr, nullptr);
	if (errno)
		return false;
	if (old)
		*old = uint8_t(w & 0xff);
	const long nw = (w & ~0xffL) | b;
	return ptrace(PTRACE_POKETEXT, pid, addr, nw) == 0;
}

int run(std::vector<Fn> &fns, char **argv)
{
	const pid_t pid = fork();
	if (pid < 0) {
		perror("ibv_coll_icount: fork");
		return 2;
	}
	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
		execvp(argv[0], argv);
		fprintf(stderr, "ibv_coll_icount: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st)) { // stopped at the exec
		fprintf(stderr, "ibv_coll_icount: %s did not start\n", argv[0]);
		return 2;
	}
	ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_EXITKILL);
	const uint64_t base = load_base(pid, argv[0]);
	for (Fn &f : fns)
		f.addr = f.off + (f.off < base ? base : 0);
	Fn &root = fns[0];
	uint8_t orig = 0;
	if (!poke_byte(pid, root.addr, 0xcc, &orig)) {
		fprintf(stderr, "ibv_coll_icount: cannot set a breakpoint at %#" PRIx64 "\n",
			root.addr);
		kill(pid, SIGKILL);
		return 2;
	}
	int sig = 0;
	for (;;) {
		if (ptrace(PTRACE_CONT, pid, nullptr, sig) != 0)
			break;
		sig = 0;
		if (waitpid(pid, &st, 0) != pid || WIFEXITED(st) || WIFSIGNALED(st))
			break;
		if (WSTOPSIG(st) != SIGTRAP) {
			sig = WSTOPSIG(st);
			continue;
		}
		user_regs_struct r;
		ptrace(PTRACE_GETREGS, pid, nullptr, &r);
		if (r.rip != root.addr + 1) {
			sig = SIGTRAP; // not ours
			continue;
		}
		// At the region's entry: put the instruction back, step through
		// to its return, then set the breakpoint again.
		r.rip = root.addr;
		ptrace(PTRACE_SETREGS, pid, nullptr, &r);
		poke_byte(pid, root.addr, orig, nullptr);
		uint64_t rip = r.rip, sp = r.rsp;
		for (Fn &f : fns)
			f.inside = false;
		for (;;) {
			// Entering a function: its return is what the call pushed.
			for (Fn &f : fns) {
				if (!f.inside && rip == f.addr) {
					errno = 0;
					const long ret = ptrace(PTRACE_PEEKDATA, pid, sp, nullptr);
					f.inside = errno == 0;
					f.ret = uint64_t(ret);
					f.sp_after = sp + 8;
					f.calls++;
				}
			}
			if (ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr) != 0 ||
			    waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st))
				goto out;
			ptrace(PTRACE_GETREGS, pid, nullptr, &r);
			// A repeated string instruction stops after each of its
			// steps without moving on: it counts once, when it does.
			if (r.rip == rip)
				continue;
			for (Fn &f : fns)
				if (f.inside)
					f.insns++;
			rip = r.rip;
			sp = r.rsp;
			for (Fn &f : fns)
				if (f.inside && rip == f.ret && sp == f.sp_after)
					f.inside = false;
			if (!root.inside)
				break;
		}
		poke_byte(pid, root.addr, 0xcc, nullptr);
	}
out:
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "ibv_coll_icount: %s did not exit cleanly\n", argv[0]);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		return 1;
	}
	printf("# %-40s %16s %10s\n", "function", "instructions", "calls");
	for (const Fn &f : fns)
		printf("%-42s %16" PRIu64 " %10" PRIu64 "\n", f.name.c_str(), f.insns, f.calls);
	return 0;
}
#endif

} // namespace

int main(int argc, char **argv)
{
	std::vector<Fn> fns;
	int i = 1;
	for (; i < argc; i++) {
		const std::string a = argv[i];
		if (a == "--version" || a == "-V") {
			return ibvc_print_version("ibv_coll_icount", nullptr);
		}
		if (a == "-h" || a == "--help") {
			usage(stdout);
			return 0;
		}
		if (a == "--") {
			i++;
			break;
		}
		if (a == "-f" && i + 1 < argc) {
			Fn f;
			if (!parse_fn(argv[++i], &f)) {
				fprintf(stderr, "ibv_coll_icount: -f %s: not OFFSET=NAME\n",
					argv[i]);
				return 2;
			}
			fns.push_back(f);
			continue;
		}
		fprintf(stderr, "ibv_coll_icount: unknown option '%s'\n", a.c_str());
		usage(stderr);
		return 2;
	}
	if (fns.empty() || i >= argc) {
		usage(stderr);
		return 2;
	}
#if IBVC_ICOUNT
	return run(fns, argv + i);
#else
	fprintf(stderr, "ibv_coll_icount: needs x86-64 Linux\n");
	return 2;
#endif
}
