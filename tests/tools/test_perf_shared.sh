#!/bin/sh
# ibv_coll_perf with several processes per node on the shared device
# (ibv_coll_run -p, ibv_coll_devd): the job has one member per node, each
# node's processes reach one device (one UDP port), the header counts the
# whole job, and every result is checked (check_perf.sh: exit 0, no wrong
# element, no out-of-bounds write).
#
#   [SWITCHD=ibv_coll_switchd] test_perf_shared.sh IBV_COLL_RUN IBV_COLL_PERF IBV_COLL_DEVD
#       CHECK_PERF NODES PROCS RANKS [PERF ARGS...]
#
# PROCS 1 with IBV_COLL_CRXE_SHARED=y puts every node's lead on the one
# shared device of this host (each with its share of the Seg units).
# With SWITCHD set (an ibv_coll_switchd), a switch serves the job (PERF
# ARGS then say -t switch or -t auto): every node's lead talks to it from
# the one device's address and port, told apart by its QP.
# Every process must then run every message through the switch, as every
# other did (--ran-log: the same MIDs and flags, the switch's, never the
# fallback), and the switch must end with no member dropped (drop_node 0)
# and no Seg unit in use.
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
swdir=$(mktemp -d)
d_pid= s_pid=
trap '[ -n "$d_pid" ] && kill "$d_pid" 2>/dev/null; [ -n "$s_pid" ] && kill "$s_pid" 2>/dev/null;
	rm -rf "$out" "$log" "$swdir"' EXIT
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
if [ -n "${SWITCHD:-}" ]; then
	"$SWITCHD" -p 0 -P "$swdir/port" -n shared >"$swdir/switch.log" 2>&1 &
	s_pid=$!
	i=0
	while [ ! -s "$swdir/port" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -s "$swdir/port" ] || { echo "FAIL: the switch did not start"; cat "$swdir/switch.log"; exit 1; }
	set -- "$@" -s "127.0.0.1:$(cat "$swdir/port")" --ran-log "$swdir/ran.%d"
fi
IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD= \
	sh "$check" "$run" --timeout 100 -n "$nodes" -p "$procs" -k "$ranks" -- "$perf" "$@" \
	>"$out" 2>&1
rc=$?
cat "$out"
if [ -n "$s_pid" ]; then
	kill -USR1 "$s_pid"
	sleep 0.5
	kill "$s_pid"
	wait "$s_pid" 2>/dev/null
	s_pid=
fi
[ $rc -eq 0 ] || { [ -n "${SWITCHD:-}" ] && cat "$swdir/switch.log"; exit 1; }
fail() {
	echo "FAIL: $*"
	exit 1
}
if [ -n "${SWITCHD:-}" ]; then
	grep "total:" "$swdir/switch.log" | tail -1
	grep -q "total:.* drop_node 0," "$swdir/switch.log" ||
		fail "the switch dropped packets of a member (drop_node)"
	grep -q "Seg units [0-9]*, in use 0$" "$swdir/switch.log" ||
		fail "Seg units still in use at the switch after the job"
	# Every process ran the same messages the same way, through the
	# switch: flags 0x400 (IBV_COLL_WC_SWITCH), not 0x1000 (FALLBACK).
	p=0
	while [ $p -lt $((nodes * procs)) ]; do
		[ -s "$swdir/ran.$p" ] || fail "process $p logged no completion"
		cmp -s "$swdir/ran.0" "$swdir/ran.$p" || {
			diff "$swdir/ran.0" "$swdir/ran.$p" | head -10
			fail "process $p ran messages otherwise than process 0"
		}
		p=$((p + 1))
	done
	awk '
		function hex(s,   i, v) {
			v = 0
			s = tolower(substr(s, 3))
			for (i = 1; i <= length(s); i++)
				v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
			return v
		}
		{ f = hex($2); if (int(f / 1024) % 2 == 0 || int(f / 4096) % 2) bad++ }
		END { if (bad || !NR) { print "FAIL: " bad + 0 " of " NR " messages not through the switch"; exit 1 } }' \
		"$swdir/ran.0" || exit 1
fi
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
