#!/bin/sh
# Install what is missing, build everything, and run the main job on this
# machine: a 4-node x 2-rank allreduce (and the other collectives) through
# the emulated NICs' offload engine over loopback, each node a process.
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"
nodes=4
boot="unix:/tmp/ibv_coll_main_$$.sock"
pids=""
for i in $(seq 1 $((nodes - 1))); do
	./build/examples/ibv_coll_allreduce -b "$boot" -i "$i" -n $nodes -k 2 -c 262144 "$@" &
	pids="$pids $!"
done
status=0
./build/examples/ibv_coll_allreduce -b "$boot" -i 0 -n $nodes -k 2 -c 262144 "$@" || status=1
for p in $pids; do wait "$p" || status=1; done
exit $status
