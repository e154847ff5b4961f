#!/bin/sh
# Build everything and run the full test suite twice: an optimised build,
# then a build with AddressSanitizer and UndefinedBehaviorSanitizer.
# Installs what it needs first.  Extra arguments go to ctest (e.g. -L rc).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
# Line tables, not full debug information: what the sanitizers' reports
# and a backtrace need, at two thirds of the compile time (the test
# suites' templates make most of -g's output).
G1="-O2 -g1 -DNDEBUG"
run() {
	dir=$1
	extra=$2
	shift 2
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="$G1" \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$G1" "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
	(cd "$dir" && ctest -j "$jobs" --output-on-failure --timeout 600 $extra $CTEST_ARGS)
}
CTEST_ARGS="$*"
echo "== build and test: release ($(date +%T))"
# The ring's allocation-failure sweep (a minute) runs sanitized below,
# where it finds more (leaks on each failure path); the switch's runs here
# only.  The namespace chaos run (faults injected into a live fabric, a
# minute and a half) runs once, in the next pass, against switches of
# four workers.
run build "-E AllocFail.TwoNodeRingEveryAllocation|multihost.chaos"
# The release pass ran every switch at its default (one worker on a 2-core
# machine: at most half the cores); the switch's tests once more against
# switches of four workers, more than this machine has cores.
echo "== switch tests: switches of 4 workers ($(date +%T))"
(cd build && IBV_COLL_SWITCH_THREADS=4 ctest -j "$jobs" --output-on-failure --timeout 600 \
	-L "switch|tools|capture|stat|multihost" $CTEST_ARGS)
(cd build && IBV_COLL_SWITCH_THREADS=4 ctest -j "$jobs" --output-on-failure --timeout 600 \
	-R "CollSwitch|CollMid|CollRecover|SwitchFailure|SwitchAcct|SwitchStats|liveness_switch" $CTEST_ARGS)
# The 16 MiB runs (n4k2_big, n4k2_switchbig) spend their time in the scalar
# reference; under the sanitizers they would take most of the budget, and
# the same code paths run there at smaller sizes.  So do the eight-node
# switch runs (n8k2_switch_*, four minutes of the sanitized pass): their
# code paths run sanitized in the four-node ones (n4k2_switch_hier*,
# _planes, _one, _loss5), and all of them run in the release pass.  The
# rxe VM (label rxe) runs once, with the optimised binaries: under QEMU's
# software CPU the sanitized ones would be several times slower than its
# 5-minute budget.  The MPI drop-in's tests preload libibv_coll_mpi.so into
# programs and daemons of Open MPI's that are not built with ASan, which
# needs its runtime first in every process: they run in the release pass
# (ibv_coll_perf under mpirun, mpi.perf_pmix, runs sanitized here; under
# srun, mpi.slurm_4 preloads the drop-in too, so it runs there only).  The
# Debian packages (label pkg) are made of release binaries.  The liveness
# runs (label liveness: six nodes, busy, lossy, several collectives each,
# a minute in all, serial) measure time against the controller off, which
# the sanitizers' slowdown turns into noise; their code paths run
# sanitized in the fake-network tests (CollPathsLoss, CollPathsLiveness)
# and the lossy node matrices.  The simulator's performance gates (label
# perf) are exact in virtual time: the release pass runs them; sanitized,
# the same runs take minutes and prove nothing more than test_sim does.
# The fake network's long runs (CollPathsLoss.CostsAFraction..., 5 %
# loss both ways; CollPathsLiveness.DescheduledHosts..., hosts stalled at
# random; a minute and a half sanitized) and the eight-host namespace tree
# (multihost.coll_hier_8x1) run in the release pass: their code paths run
# sanitized in the other CollPaths cases, the lossy node matrices and the
# four-host trees.
# The style checks (label style) read the sources, not the build: the
# release pass runs them.
# Leaks that are not ours: tests/lsan.supp.
echo "== build and test: AddressSanitizer + UndefinedBehaviorSanitizer ($(date +%T))"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp print_suppressions=0" \
	run build-asan "-E _big|switchbig|n8k2_switch_|AllocFail.TwoNodeSwitch|CostsAFractionOfTheLossFreeTime|DescheduledHostsStallNothing|coll_hier_8x1|multihost.chaos|mpi\.(check|unsupported|finalize|liveness|netns|shared|slurm) -LE rxe|pkg|liveness|perf|style" \
	-DIBV_COLL_SANITIZE=ON

# ThreadSanitizer: the library, the emulator and the suites
# that run the engine thread beside application threads posting and
# polling (the hand-off, the rings' hand-written ordering): the C API,
# RC between processes but the long transfers (which TSan's slowdown
# turns into retry timeouts), the collective wire tests in process, and
# the two-node collective matrix between processes (n2k2_full; its
# switch cases take a minute under TSan), and the switch's own threads:
# its workers against each other (SwitchWorkers) and its receive path
# (SwitchAcct).
# Suppressions, each with its reason, in tests/tsan.supp.
echo "== build and test: ThreadSanitizer (threaded suites) ($(date +%T))"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="$G1" \
	-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$G1" -DIBV_COLL_TSAN=ON >/dev/null
cmake --build build-tsan -j "$jobs" --target test_api test_c_abi test_version test_rc rc_peer test_rc_self \
	test_coll_wire test_switch_acct test_switch_workers test_coll coll_node
(cd build-tsan && TSAN_OPTIONS="suppressions=$PWD/../tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
	ctest --output-on-failure --timeout 300 \
	-R '^(api\.|rc\.Rc\.|rc\.RcSelf\.|rc\.RcImpaired\.ManyWrsInFlight|rc\.Mtus/RcMtu\.(WriteAndSendWithImmediate|ReadEverySize/mtu4096)|coll\.CollWire\.|emu\.SwitchAcct\.|emu\.SwitchWorkers\.|coll\.Loopback/Coll\.EveryNodeMatchesTheReference/n2k2_full)')

# libFuzzer: every target of tests/fuzz for IBV_COLL_FUZZ_SECONDS
# (10 here) from its committed seeds, under ASan and UBSan; longer runs:
# scripts/fuzz.sh TARGET SECONDS.
echo "== fuzz: each libFuzzer target for 10 s ($(date +%T))"
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_C_FLAGS_RELWITHDEBINFO="$G1" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$G1" -DIBV_COLL_FUZZ=ON -DIBV_COLL_TESTS=OFF -DIBV_COLL_FUZZ_SECONDS=10 >/dev/null
cmake --build build-fuzz -j "$jobs" --target fuzz_targets
(cd build-fuzz && ctest -j "$jobs" -L fuzz --output-on-failure)

# Soak: random collectives, sizes, ops, types and topologies
# with loss, duplication, reordering and member restarts against three
# long-running switches, every result checked, their memory, descriptors
# and counters watched; an hour with scripts/soak.sh -t 3600.  Here seed
# 15 for 45 s (about 35 rounds; its round 34 found the switch forgetting
# a job whose members were silent while checking a large result), its
# switches of four workers each.
echo "== soak: seed 15, 45 s, switches of 4 workers ($(date +%T))"
IBV_COLL_SWITCH_THREADS=4 sh scripts/soak.sh -B build -t 45 -S 15
echo "== all tests passed ($(date +%T))"
