#!/bin/sh
# Install what is missing, build everything, and run the main job on this
# machine: two processes exchanging RC messages through the emulated NIC
# over loopback (ibv_coll_rc_pingpong), at 8 B and 1 MiB.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"
pp=./build/examples/ibv_coll_rc_pingpong
for args in "-s 8 -n 10000" "-s 1048576 -n 500"; do
	echo "== ibv_coll_rc_pingpong $args"
	# shellcheck disable=SC2086
	$pp $args -p 18515 >/dev/null &
	srv=$!
	sleep 0.5
	# shellcheck disable=SC2086
	$pp $args -p 18515 localhost
	wait $srv
done
