#!/bin/sh
# Three jobs in a row through one long-running switch, each keeping the
# send queue full of small allreduces: every job must pass, and the switch
# must end with every member's release taken and no Seg unit in use (a job
# that leaves without releasing holds its units until the idle timeout).
# The small messages catch a completion seen before its send-queue slot
# was freed: the benchmark's repost then failed with ENOMEM (about one run
# in two before the fix).
# Usage: test_switch_rerun.sh SWITCHD RUN PERF CHECK
set -u
switchd=$1 run=$2 perf=$3 check=$4
tmp=$(mktemp -d)
trap 'kill "$sw" 2>/dev/null; wait "$sw" 2>/dev/null; rm -rf "$tmp"' EXIT
"$switchd" -p 0 -P "$tmp/port" -n rerun >"$tmp/switch.log" 2>&1 &
sw=$!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s "$tmp/port" ] || { echo "FAIL: the switch did not start"; cat "$tmp/switch.log"; exit 1; }
port=$(cat "$tmp/port")
for job in 1 2 3; do
	echo "== job $job"
	sh "$check" "$run" --timeout 40 -n 4 -k 1 -- "$perf" -t switch -s "127.0.0.1:$port" \
		-b 8 -e 64 -f 8 -n 300 -w 0 -c 1 || { cat "$tmp/switch.log"; exit 1; }
done
# The nodes sent their releases before they exited, but the switch takes
# them in, and prints its counters on SIGUSR1, when it next runs: ask
# until the counts are final (they only grow) or 20 s have passed, rather
# than read whatever one dump after a fixed sleep said.
last() { # the latest dump's line matching PATTERN
	grep "$1" "$tmp/switch.log" | tail -n 1
}
i=0
while [ $i -lt 200 ]; do
	kill -USR1 "$sw"
	sleep 0.1
	last "Seg units [0-9]*, in use" | grep -q "in use 0$" &&
		last "  total: " | grep -q "grants [0-9]*,.* releases 12," && break
	i=$((i + 1))
done
cat "$tmp/switch.log"
last "Seg units [0-9]*, in use" | grep -q "in use 0$" ||
	{ echo "FAIL: Seg units still in use after the jobs left"; exit 1; }
last "  total: " | grep -q "grants 3,.* releases 12," ||
	{ echo "FAIL: expected 3 grants and 12 releases (3 jobs x 4 nodes)"; exit 1; }
echo "PASS: 3 jobs, all released"
