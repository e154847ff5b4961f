#!/bin/sh
# Run an ibv_coll_perf command line (usually under ibv_coll_run) and pass
# when it exits 0, prints at least one result row, every #wrong column of
# every row is 0 (or N/A where the form does not exist), and the summary
# reports no out-of-bounds writes and no wrong elements.
# Usage: check_perf.sh COMMAND [ARGS...]
set -u
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
	echo "FAIL: exit status $rc"
	exit 1
fi
printf '%s\n' "$out" | awk '
	{ sub(/^\[[0-9]+\] /, "") }
	/^# Out of bounds values : 0 OK/ { oob_ok = 1 }
	/^# Wrong elements *: 0 OK/ { wrong_ok = 1 }
	/^#/ || NF == 0 { next }
	$1 ~ /^[0-9]+$/ && NF >= 13 {
		rows++
		if (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A")) {
			print "FAIL: wrong elements in: " $0
			bad = 1
		}
		next
	}
	{ print "FAIL: unexpected output: " $0; bad = 1 }
	END {
		if (!rows) { print "FAIL: no result rows"; bad = 1 }
		if (!oob_ok) { print "FAIL: no \"Out of bounds values : 0 OK\""; bad = 1 }
		if (!wrong_ok) { print "FAIL: no \"Wrong elements : 0 OK\""; bad = 1 }
		if (!bad) print "PASS: " rows " rows, no wrong elements"
		exit bad
	}'
