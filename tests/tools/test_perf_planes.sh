#!/bin/sh
# ibv_coll_perf with two switch planes (-s given twice): every result
# right, and both switches reduced blocks of the job (planes share it).
# Usage: test_perf_planes.sh SWITCHD RUN PERF CHECK
set -u
switchd=$1 run=$2 perf=$3 check=$4
tmp=$(mktemp -d)
sw0= sw1=
trap 'kill $sw0 $sw1 2>/dev/null; wait $sw0 $sw1 2>/dev/null; rm -rf "$tmp"' EXIT
for p in 0 1; do
	"$switchd" -p 0 -P "$tmp/port$p" -n plane$p >"$tmp/switch$p.log" 2>&1 &
	eval "sw$p=\$!"
done
i=0
while { [ ! -s "$tmp/port0" ] || [ ! -s "$tmp/port1" ]; } && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s "$tmp/port0" ] && [ -s "$tmp/port1" ] ||
	{ echo "FAIL: the switches did not start"; cat "$tmp"/switch*.log; exit 1; }
sh "$check" "$run" --timeout 40 -n 4 -k 2 -- "$perf" -t switch \
	-s "127.0.0.1:$(cat "$tmp/port0")" -s "127.0.0.1:$(cat "$tmp/port1")" \
	-b 8 -e 1M -f 32 -n 3 -w 1 -c 1 || { cat "$tmp"/switch*.log; exit 1; }
# Their counters as they exit (a SIGUSR1 dump would come when a switch
# next runs, and a fixed sleep may end before it on a loaded machine).
kill "$sw0" "$sw1"
wait "$sw0" "$sw1"
sw0="" sw1=""
for p in 0 1; do
	cat "$tmp/switch$p.log"
	grep -Eq "total: .* data [1-9][0-9]*," "$tmp/switch$p.log" ||
		{ echo "FAIL: plane $p's switch took in no data"; exit 1; }
done
echo "PASS: two planes, both used"
