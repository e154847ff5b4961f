#!/bin/sh
# Install what is missing, build everything, and run the main job on this
# machine: a 4-node x 2-rank allreduce sweep (16 B to 64 MiB per rank, fp32
# sum, every result checked) through the emulated aggregation switch, each
# node a process on the loopback device, printed as ibv_coll_perf's table.
# Extra arguments go to ibv_coll_perf (e.g. -t ring, -e 1M, -C bcast).
set -eu
cd "$(dirname "$0")/.."
sh scripts/install-deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"

tmp=$(mktemp -d)
sw_pid=
cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The switch, on a free UDP port it reports through a file.
./build/emulator/ibv_coll_switchd -p 0 -P "$tmp/port" -n switch0 >"$tmp/switch.log" 2>&1 &
sw_pid=$!
for _ in $(seq 100); do
	[ -s "$tmp/port" ] && break
	sleep 0.05
done
[ -s "$tmp/port" ] || { cat "$tmp/switch.log"; echo "the switch did not start" >&2; exit 1; }
port=$(cat "$tmp/port")

status=0
./build/tools/ibv_coll_run -n 4 -k 2 -- ./build/tools/ibv_coll_perf -t switch \
	-s "127.0.0.1:$port" -b 16 -e 64M -f 4 -c 1 "$@" || status=$?
# The switch's counters: what it reduced, and what it answered again.
kill -TERM "$sw_pid" 2>/dev/null && wait "$sw_pid" 2>/dev/null
sw_pid=
echo "# switch counters"
sed -n 's/^/# /p' "$tmp/switch.log" | grep -v "serving udp port" || true
exit $status
