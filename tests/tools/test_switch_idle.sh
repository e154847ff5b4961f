#!/bin/sh
# A job whose members are silent longer than the switch's idle timeout (an
# application computing, or checking results, between collectives) must
# stay known: members keep it alive with a CONFIG every third of the
# timeout the switch's CONFIG_ACK states, up to the spine through the
# leaves.  Before the keepalive, the switch forgot the job (scripts/soak.sh
# -S 15, round 34: a 13 s reference check on a loaded machine) and the
# next collective timed out.  Three nodes of two ranks pause 1.2 s before
# each collective, against switches that forget a job after 0.4 s: through
# one switch, then through two leaves under a spine.  Results are checked
# against the independent reference by coll_node; the switches must not
# have forgotten the job while it ran.
# Usage: test_switch_idle.sh SWITCHD COLL_NODE
set -u
switchd=$1 node=$2
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
for s in 0 1 2; do
	"$switchd" -p 0 -P "$tmp/port$s" -n idle$s -I 400 -W 200 >"$tmp/sw$s.log" 2>&1 &
	pids="$pids $!"
done
for s in 0 1 2; do
	i=0
	while [ ! -s "$tmp/port$s" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$tmp/port$s" ] || { echo "FAIL: switch $s did not start"; exit 1; }
done
p0=$(cat "$tmp/port0") p1=$(cat "$tmp/port1") p2=$(cat "$tmp/port2")
run_job() { # JID TOPOLOGY-ARGS...
	jid=$1
	shift
	npids=""
	for i in 0 1 2; do
		timeout 60 "$node" --boot "unix:$tmp/boot$jid.sock" --node $i --nodes 3 --ranks 2 \
			--scenario stat --jid "$jid" --timeout-ms 3000 --pause-ms 1200 "$@" \
			>"$tmp/n$jid.$i.log" 2>&1 &
		npids="$npids $!"
	done
	i=0
	for p in $npids; do
		wait "$p" || { echo "FAIL: job $jid node $i exited $?"; cat "$tmp/n$jid.$i.log"; return 1; }
		i=$((i + 1))
	done
}
echo "== one switch"
run_job 1 --topology 1 --leaves "$p0" || exit 1
echo "== two leaves under a spine"
run_job 2 --topology 2 --leaves "$p0,$p1" --spines "$p2" --member-leaf 0,1,0 || exit 1
for s in 0 1 2; do
	if grep "idle, forgotten" "$tmp/sw$s.log"; then
		# A job is forgotten only once it has left (its RELEASE counted).
		echo "FAIL: switch $s forgot a job"
		cat "$tmp/sw$s.log"
		exit 1
	fi
done
cat "$tmp"/n1.0.log
echo "PASS: jobs silent 3x the switches' idle timeout stayed known"
