#!/bin/sh
# Jobs after and beside each other on the host's one shared device: three
# rounds, back to back, of two ibv_coll_perf jobs at once (ibv_coll_run -n 2
# -p 2 each) on a daemon run as a service, then six jobs back to back that
# each start theirs; every result checked (check_perf.sh).  Each job picks its
# Seg units alone (its two nodes' leads take half of the device's each), so
# the jobs' ranges overlap: a collective whose units another job's running
# collective held failed with "Seg units unavailable" (at 8 B, or in the
# middle of the sweep); now it runs in free units.
#   test_perf_shared_jobs.sh IBV_COLL_RUN IBV_COLL_PERF IBV_COLL_DEVD CHECK_PERF
# As root, in a network namespace of its own (no other daemon of crxe_lo).
set -u
run=$1 perf=$2 devd=$3 check=$4
if [ "$(id -u)" = 0 ] && [ -z "${IVC_SHARED_NS:-}" ] && command -v unshare >/dev/null; then
	exec env IVC_SHARED_NS=1 unshare -n sh -c 'ip link set lo up && exec sh "$0" "$@"' \
		"$0" "$run" "$perf" "$devd" "$check"
fi
tmp=$(mktemp -d)
d_pid=
trap '[ -n "$d_pid" ] && kill "$d_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
IBV_COLL_LOG_LEVEL=info "$devd" lo >"$tmp/devd.log" 2>&1 &
d_pid=$!
i=0
while ! grep -q "serving on" "$tmp/devd.log" && [ $i -lt 500 ]; do
	sleep 0.01
	i=$((i + 1))
done
grep -q "serving on" "$tmp/devd.log" || { echo "FAIL: ibv_coll_devd did not start"; cat "$tmp/devd.log"; exit 1; }
export IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD=
for round in 1 2 3; do
	for j in a b; do
		sh "$check" "$run" --timeout 60 -n 2 -p 2 -- "$perf" -b 8 -e 64K -f 8 -n 20 -w 2 -c 1 \
			>"$tmp/$j.out" 2>&1 &
		eval "pid_$j=\$!"
	done
	rc=0
	# shellcheck disable=SC2154
	wait "$pid_a" || rc=1
	# shellcheck disable=SC2154
	wait "$pid_b" || rc=1
	for j in a b; do
		echo "== round $round, job $j"
		tail -n 2 "$tmp/$j.out"
	done
	if [ $rc -ne 0 ]; then
		cat "$tmp/a.out" "$tmp/b.out"
		echo "FAIL: round $round: a job failed"
		grep " W \| E " "$tmp/devd.log" | head -20
		exit 1
	fi
done
# The same jobs back to back with no daemon running: each job's first
# opens start one (the build tree's, found beside the library), which
# leaves after the job; the next job's opens may meet it leaving.
kill "$d_pid"
wait "$d_pid" 2>/dev/null
d_pid=
unset IBV_COLL_CRXE_DEVD
for round in 1 2 3 4 5 6; do
	sh "$check" "$run" --timeout 60 -n 2 -p 2 -- "$perf" -b 8 -e 64K -f 64 -n 5 -w 1 -c 1 \
		>"$tmp/c.out" 2>&1 || {
		cat "$tmp/c.out"
		echo "FAIL: job $round of 6 back to back, each starting its daemon"
		exit 1
	}
done
echo "PASS: 3 rounds of 2 jobs at once on the shared device; 6 jobs back to back, each starting its daemon"
