#!/bin/sh
# ibv_coll_perf --spine: four nodes on two leaf switches under a spine,
# every result right, every row run by the hierarchy, and the spine took in
# data (each leaf passes its partial up).
# Usage: test_perf_spine.sh SWITCHD RUN PERF CHECK
set -u
switchd=$1 run=$2 perf=$3 check=$4
tmp=$(mktemp -d)
pids=
trap 'kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for s in leaf0 leaf1 spine; do
	"$switchd" -p 0 -P "$tmp/$s.port" -n $s >"$tmp/$s.log" 2>&1 &
	pids="$pids $!"
done
i=0
while { [ ! -s "$tmp/leaf0.port" ] || [ ! -s "$tmp/leaf1.port" ] || [ ! -s "$tmp/spine.port" ]; } &&
	[ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s "$tmp/spine.port" ] && [ -s "$tmp/leaf1.port" ] && [ -s "$tmp/leaf0.port" ] ||
	{ echo "FAIL: the switches did not start"; cat "$tmp"/*.log; exit 1; }
out=$(sh "$check" "$run" --timeout 40 -n 4 -k 1 -- "$perf" -t hierarchy \
	-s "127.0.0.1:$(cat "$tmp/leaf0.port")" -s "127.0.0.1:$(cat "$tmp/leaf1.port")" \
	--spine "127.0.0.1:$(cat "$tmp/spine.port")" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1) ||
	{ printf '%s\n' "$out"; cat "$tmp"/*.log; exit 1; }
printf '%s\n' "$out"
printf '%s\n' "$out" | sed 's/^\[[0-9]*\] //' | awk '$1 ~ /^[0-9]+$/ && NF >= 15 {
	rows++; if ($NF !~ /hierarchy/) { print "FAIL: ran " $NF ", not the hierarchy"; bad = 1 } }
	END { if (!rows) { print "FAIL: no rows"; bad = 1 } exit bad }' || exit 1
# Their counters as they exit (a SIGUSR1 dump would come when a switch
# next runs, and a fixed sleep may end before it on a loaded machine).
# shellcheck disable=SC2086
kill $pids
# shellcheck disable=SC2086
wait $pids
pids=
grep -Eq "total: .* data [1-9][0-9]*," "$tmp/spine.log" ||
	{ cat "$tmp/spine.log"; echo "FAIL: the spine took in no data"; exit 1; }
echo "PASS: two leaves under a spine"
