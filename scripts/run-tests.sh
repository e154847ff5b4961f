#!/bin/sh
# Build everything and run the full test suite twice: an optimised build,
# then a build with AddressSanitizer and UndefinedBehaviorSanitizer.
# Installs what it needs first.  Extra arguments go to ctest (e.g. -L rc).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
run() {
	dir=$1
	extra=$2
	shift 2
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
	(cd "$dir" && ctest -j "$jobs" --output-on-failure --timeout 600 $extra $CTEST_ARGS)
}
CTEST_ARGS="$*"
echo "== build and test: release"
run build ""
# The 64 MiB runs (n4k2_big, n4k2_switchbig) spend their time in the scalar
# reference; under the sanitizers they would take most of the budget, and
# the same code paths run there at smaller sizes.  So do the eight-node
# switch runs (n8k2_switch_*, four minutes of the sanitized pass): their
# code paths run sanitized in the four-node ones (n4k2_switch_hier*,
# _planes, _one, _loss5), and all of them run in the release pass.  The
# rxe VM (label rxe) runs once, with the optimised binaries: under QEMU's
# software CPU the sanitized ones would be several times slower than its
# 5-minute budget.
echo "== build and test: AddressSanitizer + UndefinedBehaviorSanitizer"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	run build-asan "-E _big|switchbig|n8k2_switch_ -LE rxe" -DIBV_COLL_SANITIZE=ON
echo "== all tests passed"
