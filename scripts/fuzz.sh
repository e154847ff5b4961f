#!/bin/sh
# Run a libFuzzer target of tests/fuzz (a build with IBV_COLL_FUZZ=ON).
#   scripts/fuzz.sh [-B BUILD] TARGET [SECONDS [libFuzzer options...]]
#   scripts/fuzz.sh [-B BUILD] all [SECONDS]    every target in turn
#   scripts/fuzz.sh [-B BUILD] --seed           rewrite tests/fuzz/corpus
# BUILD defaults to build-fuzz, made with
#   CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DIBV_COLL_FUZZ=ON \
#     -DIBV_COLL_TESTS=OFF && cmake --build build-fuzz --target fuzz_targets
# New inputs go to BUILD/tests/fuzz/corpus/TARGET (the committed seeds in
# tests/fuzz/corpus/TARGET are read, never written); a crash is saved as
# BUILD/tests/fuzz/crash-TARGET-* and the run fails.  Reproduce one with
#   BUILD/tests/fuzz/TARGET FILE
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=build-fuzz
if [ "${1:-}" = -B ]; then
	build=$2
	shift 2
fi
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
bin=$build/tests/fuzz
target=$1
shift
if [ "$target" = --seed ]; then
	rm -rf "$src/tests/fuzz/corpus"
	exec "$bin/fuzz_gen_corpus" "$src/tests/fuzz/corpus"
fi
secs=${1:-60}
[ $# -ge 1 ] && shift
if [ "$target" = all ]; then
	for t in fuzz_nic_rx fuzz_switch_rx fuzz_coll_api fuzz_config fuzz_perf_opts; do
		"$0" -B "$build" "$t" "$secs" "$@"
	done
	exit 0
fi
[ -x "$bin/$target" ] || { echo "fuzz.sh: no $bin/$target: build target fuzz_targets" >&2; exit 2; }
work=$bin/corpus/$target
mkdir -p "$work"
# halt_on_error: the first report fails the run; leaks too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export IBV_COLL_LOG_LEVEL=${IBV_COLL_LOG_LEVEL:-off}
# The option parser prints usage on each bad line: its output is closed
# (libFuzzer still reports on its own copy of stderr).
quiet=
[ "$target" = fuzz_perf_opts ] && quiet=-close_fd_mask=3
exec "$bin/$target" $quiet -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
	-print_final_stats=1 -artifact_prefix="$bin/crash-$target-" "$@" \
	"$work" "$src/tests/fuzz/corpus/$target"
