#!/bin/bash
# The shaped-fabric check: 3 hosts on 200 Mbit/s links, 4 MiB
# fp32 allreduce round the ring and through a switch (scripts/bench-fabric.sh).
# Fails when a run fails or a result is wrong, or when the ring puts more
# than 1.2 x 2(N-1)/N times S on a host's link per allreduce: without rate
# control the ring overruns the link's queue and resends what it drops.
#
# With QUEUE, each link's queue (256kb by default): a queue smaller than
# one GSO super-packet (32kb) refuses every run of packets the port sends
# at once, and the port must send shorter ones and wait for room instead
# of losing them (emulator/net/udp_port.cc); before it did, the ring
# stalled there until the job's timeout.
#
#   check_shaped.sh BUILD_DIR [QUEUE]
# Exits 77 (skipped) without root, as fabric.sh does.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$(BUILD_DIR=$1 "$here/../../scripts/bench-fabric.sh" -n 3 -r 200mbit -q "${2:-256kb}" \
	-b 4M -e 4M -i 1 -w 1 -p ring,switch -t 120)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: bench-fabric.sh exited $rc"; exit 1; }
printf '%s\n' "$out" | awk -v limit="$(awk 'BEGIN { print 1.2 * 2 * 2 / 3 }')" '
	/^## / { path = $3 == "round" ? "ring" : $3 == "through" ? "switch" : "?" }
	$1 == 4194304 {
		seen[path] = 1
		if ($5 == "failed") { print "FAIL: " path " run failed"; bad = 1; next }
		if ($11 != 0) { print "FAIL: " path ": " $11 " wrong elements"; bad = 1 }
		if (path == "ring" && $9 > limit) {
			printf "FAIL: ring wire/S %s > %.2f (1.2 x 2(N-1)/N)\n", $9, limit; bad = 1
		}
	}
	END {
		if (!seen["ring"] || !seen["switch"]) { print "FAIL: a table is missing"; bad = 1 }
		if (!bad) print "PASS"
		exit bad
	}'
