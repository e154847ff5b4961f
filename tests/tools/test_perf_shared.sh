#!/bin/sh
# ibv_coll_perf with several processes per node on the shared device
# (ibv_coll_run -p, ibv_coll_devd): the job has one member per node, each
# node's processes reach one device (one UDP port), the header counts the
# whole job, and every result is checked (check_perf.sh: exit 0, no wrong
# element, no out-of-bounds write).
#
#   test_perf_shared.sh IBV_COLL_RUN IBV_COLL_PERF IBV_COLL_DEVD CHECK_PERF NODES PROCS RANKS
#       [PERF ARGS...]
#
# PROCS 1 with IBV_COLL_CRXE_SHARED=y puts every node's lead on the one
# shared device of this host (each with its share of the Seg units).
# As root, runs in a network namespace of its own, so that no daemon of
# another test (or another build) serves its crxe_lo.
set -u
run=$1 perf=$2 devd=$3 check=$4 nodes=$5 procs=$6 ranks=$7
shift 7
if [ "$(id -u)" = 0 ] && [ -z "${IVC_SHARED_NS:-}" ] && command -v unshare >/dev/null; then
	exec env IVC_SHARED_NS=1 unshare -n sh -c 'ip link set lo up && exec "$0" "$@"' \
		"$0" "$run" "$perf" "$devd" "$check" "$nodes" "$procs" "$ranks" "$@"
fi
out=$(mktemp)
log=$(mktemp)
d_pid=
trap '[ -n "$d_pid" ] && kill "$d_pid" 2>/dev/null; rm -f "$out" "$log"' EXIT
# The daemon first, as a service would run (the processes' first opens
# would otherwise race to start one, and the losers say so on stderr).
IBV_COLL_LOG_LEVEL=info "$devd" lo >"$log" 2>&1 &
d_pid=$!
i=0
while ! grep -q "serving on" "$log" && [ $i -lt 500 ]; do
	sleep 0.01
	i=$((i + 1))
done
grep -q "serving on" "$log" || { echo "FAIL: ibv_coll_devd did not start:"; cat "$log"; exit 1; }
IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD= \
	sh "$check" "$run" --timeout 100 -n "$nodes" -p "$procs" -k "$ranks" -- "$perf" "$@" \
	>"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || exit 1
fail() {
	echo "FAIL: $*"
	exit 1
}
total=$((nodes * procs))
# The header: the job's nodes and ranks, and the processes when more than
# one per node.
want="# nNodes $nodes "
[ "$procs" -gt 1 ] && want="${want}nProcs $total "
want="${want}ranksPerNode $((procs * ranks)) nRanks $((total * ranks)) "
grep -qF "[0] $want" "$out" || fail "no header line \"$want\""
# One line per process; a node's processes on one device (one UDP port),
# and with PROCS 1 every node on the host's one device.
lines=$(grep -c "^\[0\] #  Node " "$out")
[ "$lines" -eq "$total" ] || fail "$lines process lines, not $total"
awk -v p="$procs" '
	/^\[0\] #  Node / {
		node = $4; sub(/\..*/, "", node)
		for (i = 1; i < NF; i++) if ($i == "udp") port = $(i + 1)
		if (p > 1 && (node in nodeport) && nodeport[node] != port) bad = 1
		nodeport[node] = port
		ports[port] = 1
	}
	END {
		n = 0; for (q in ports) n++
		if (bad) { print "FAIL: processes of one node on different devices"; exit 1 }
		if (n != 1) { print "FAIL: " n " devices (UDP ports), not the host'"'"'s one"; exit 1 }
	}' "$out" || exit 1
grep -q "client pid" "$log" || fail "the daemon served no client"
echo "PASS: $nodes nodes x $procs processes x $ranks ranks on the shared device"
