#!/bin/sh
# Collectives through a switch with the delay and CE impairments on every
# port, the switch's included (IBV_COLL_EMU_IMPAIR): every result right,
# and an 8-byte allreduce takes at least the round trip node -> switch ->
# node, two one-way delays, so the switch holds its packets back as the
# NICs do; and under 100 ms, so it releases them when due, not at its next
# idle wake-up (200 ms).
# Usage: test_perf_delayed.sh SWITCHD RUN PERF CHECK
set -u
switchd=$1 run=$2 perf=$3 check=$4
export IBV_COLL_EMU_IMPAIR=delay=3ms,jitter=500us,ce=0.1,seed=3
# (the warning that the impairment is on would fail check_perf.sh)
export IBV_COLL_LOG_LEVEL=error
tmp=$(mktemp -d)
trap 'kill "$sw" 2>/dev/null; wait "$sw" 2>/dev/null; rm -rf "$tmp"' EXIT
"$switchd" -p 0 -P "$tmp/port" -n delayed >"$tmp/switch.log" 2>&1 &
sw=$!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s "$tmp/port" ] || { echo "FAIL: the switch did not start"; cat "$tmp/switch.log"; exit 1; }
out=$(sh "$check" "$run" --timeout 50 -n 4 -k 1 -- "$perf" -t switch -s "127.0.0.1:$(cat "$tmp/port")" \
	-b 8 -e 256K -f 32 -n 3 -w 1 -c 1 -z 1) || { printf '%s\n' "$out"; cat "$tmp/switch.log"; exit 1; }
printf '%s\n' "$out"
# Each node's delay and the switch's, jitter taken off: 2 x 2.5 ms.
printf '%s\n' "$out" | sed 's/^\[[0-9]*\] //' | awk '$1 == 8 && NF >= 15 { seen = 1
	if ($6 < 5000 || $10 < 5000) { print "FAIL: 8 B in " $6 " / " $10 " us, under the 5 ms round trip"; exit 1 }
	if ($6 > 100000 || $10 > 100000) { print "FAIL: 8 B in " $6 " / " $10 " us: released late"; exit 1 }
	if ($NF !~ /switch/) { print "FAIL: ran " $NF; exit 1 } }
	END { if (!seen) { print "FAIL: no 8-byte row"; exit 1 } }' || exit 1
echo "PASS: delayed switch path"
