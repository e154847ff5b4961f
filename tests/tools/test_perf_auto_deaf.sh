#!/bin/sh
# AUTO with one member that hears no switch: node 1 is given a
# switch address where none listens, the others the real switch, which
# answers them "wait" as it never hears node 1.  Node 1 falls back to the
# ring after IBV_COLL_EMU_SW_CONFIG_MS and tells the others, which follow
# it: every collective completes on every node, checked element by
# element, and every node ran every message the same way, round the ring
# flagged FALLBACK (--ran-log).  Before, node 1 ran the ring alone, the
# others waited for the switch, and all failed at their timeouts.
# Usage: test_perf_auto_deaf.sh SWITCHD RUN PERF CHECK
set -u
switchd=$1 run=$2 perf=$3 check=$4
tmp=$(mktemp -d)
sw=
trap '[ -n "$sw" ] && kill "$sw" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$switchd" -p 0 -P "$tmp/port" -n deaf >"$tmp/switch.log" 2>&1 &
sw=$!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -s "$tmp/port" ] || { echo "FAIL: the switch did not start"; cat "$tmp/switch.log"; exit 1; }
live=127.0.0.1:$(cat "$tmp/port")
dead=127.0.0.1:9 # the discard port: nothing answers there
export IBV_COLL_EMU_SW_CONFIG_MS=300 IBV_COLL_EMU_COLL_TIMEOUT_MS=5000
export IBV_COLL_LOG_LEVEL=error # check_perf.sh takes no log lines
for c in allreduce bcast; do
	echo "== $c"
	rm -f "$tmp"/ran.*
	sh "$check" "$run" --timeout 60 -n 3 -k 2 -- sh -c '
		s=$1
		[ "$IBVC_BOOT_NODE" = 1 ] && s=$2
		shift 2
		exec "$@" -s "$s"' sh "$live" "$dead" "$perf" -t auto -C $c -r 1 \
		-b 8 -e 64K -f 8 -n 2 -w 1 -c 1 --ran-log "$tmp/ran.%d" || exit 1
	for n in 1 2; do
		cmp -s "$tmp/ran.0" "$tmp/ran.$n" || {
			diff "$tmp/ran.0" "$tmp/ran.$n" | head -10
			echo "FAIL: node $n ran messages otherwise than node 0"
			exit 1
		}
	done
	# Flags: 0x200 ring, 0x400 switch, 0x1000 fallback (no reason: no
	# switch answered).
	awk '$2 != "0x1200" { bad++ } END { if (bad || !NR) { print "FAIL: " bad + 0 " of " NR " messages not round the ring as a fallback"; exit 1 } }' \
		"$tmp/ran.0" || exit 1
done
echo "PASS: one member deaf to the switch, every member round the ring"
