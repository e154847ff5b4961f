#!/bin/bash
# bench-switch - what in-network aggregation buys, measured on this machine.
#
# For allreduce of S bytes per rank (fp32 sum) at N = 4 and 8 nodes of one
# rank each, all on the loopback device:
#   1. traffic: bytes each NIC puts on the wire per allreduce (from the
#      device counters, as ibv_coll_perf's wire/S column), and time per op,
#      through one ibv_coll_switchd and round the NIC ring;
#   2. window: time and bus bandwidth as a function of the window W (data
#      blocks a node keeps in flight) from 1 up to the switch's Seg pool,
#      with the result as the acknowledgement and with end-to-end ACKs
#      (node 0 acknowledges each block, as in ordinary RDMA).
#
# Usage: scripts/bench-switch.sh [BYTES]      (default 4M; K and M suffixes)
# Environment: BUILD_DIR (default build), ITERS (default 5), NODES ("4 8"),
# UNITS (the switch's Seg pool, default 256), WINDOWS (default: powers of 2).
set -u
cd "$(dirname "$0")/.."
bench_name=bench-switch
. scripts/bench-common.sh
S=${1:-4M}
build=${BUILD_DIR:-build}
iters=${ITERS:-5}
nodes_list=${NODES:-4 8}
units=${UNITS:-256}
run=$build/tools/ibv_coll_run
perf=$build/tools/ibv_coll_perf
switchd=$build/emulator/ibv_coll_switchd
for b in "$run" "$perf" "$switchd"; do
	[ -x "$b" ] || { echo "bench-switch: $b is missing; build first (cmake --build $build)" >&2; exit 2; }
done
tmp=$(mktemp -d)
sw_pid=
cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

start_switch() {
	start_switchd "$switchd" "$tmp" -u "$units" -n bench
}
stop_switch() {
	kill "$sw_pid" 2>/dev/null
	wait "$sw_pid" 2>/dev/null
	sw_pid=
}

# One size: prints "time_us busbw wire/S ran", or "failed".
measure() { # measure NODES PERF-ARGS...
	local n=$1
	shift
	local out
	out=$("$run" -n "$n" -k 1 --timeout 300 -- "$perf" -b "$S" -e "$S" -n "$iters" -w 1 -c 0 "$@" 2>&1)
	printf '%s\n' "$out" | sed 's/^\[0\] //' | awk '$1 ~ /^[0-9]+$/ && NF >= 15 { print $6, $8, $(NF-1), $NF; found = 1 }
		END { if (!found) print "failed" }'
}

echo "# bench-switch: allreduce of $S per rank, fp32 sum, one rank per node, $iters iterations"
echo "# switch Seg pool: $units units; machine: $(nproc) processors"
echo
echo "## traffic: bytes each NIC sends per allreduce, over S"
printf "%6s  %-8s  %12s  %10s  %8s  %s\n" "nodes" "path" "time(us)" "busbw" "wire/S" "expected"
for n in $nodes_list; do
	start_switch
	read -r t bw w ran <<<"$(measure "$n" -t switch -s "127.0.0.1:$(cat "$tmp/port")")"
	printf "%6d  %-8s  %12s  %10s  %8s  %s\n" "$n" "${ran:-?}" "$t" "$bw" "$w" "1 (+headers)"
	stop_switch
	read -r t bw w ran <<<"$(measure "$n" -t ring)"
	printf "%6d  %-8s  %12s  %10s  %8s  %s\n" "$n" "${ran:-?}" "$t" "$bw" "$w" \
		"$(awk -v n="$n" 'BEGIN { printf "%.3f (+headers)", 2 * (n - 1) / n }')"
done

windows=${WINDOWS:-}
if [ -z "$windows" ]; then
	w=1
	while [ "$w" -le "$units" ]; do
		windows="$windows $w"
		w=$((w * 2))
	done
fi
for n in $nodes_list; do
	echo
	echo "## window: N = $n, time per allreduce (us) and busbw (GB/s)"
	echo "# (the switch grants at most its pool; a window above P*G/2 is cut to it)"
	printf "%8s  %12s  %10s  %12s  %10s\n" "W" "result-ACK" "busbw" "e2e-ACK" "busbw"
	start_switch
	port=$(cat "$tmp/port")
	for w in $windows; do
		read -r t1 b1 _ _ <<<"$(measure "$n" -t switch -s "127.0.0.1:$port" --window "$w")"
		read -r t2 b2 _ _ <<<"$(measure "$n" -t switch -s "127.0.0.1:$port" --window "$w" --e2e-ack)"
		printf "%8d  %12s  %10s  %12s  %10s\n" "$w" "$t1" "$b1" "$t2" "$b2"
	done
	stop_switch
done
