#!/bin/sh
# Liveness under load: more nodes than processors, large
# collectives of every kind, uneven ranks, each result checked against the
# scalar reference (coll_node --scenario heavy), with the congestion
# controller on and, as the baseline, off.  Every node must finish every
# collective (no hang: each node runs under timeout(1), and a job's
# collective fails after 5 s without progress), and the collectives' time
# with the controller on must stay within twice their time with it off
# (it may slow them, never stall them: the stall this reproduces made them
# crawl at a block every few round trips).
#
#   test_liveness.sh COLL_NODE SWITCHD ring|switch NODES SEEDS [IMPAIR]
#
# SEEDS: a comma-separated list; each seed draws the collectives, their
# sizes, and the split of ranks over the nodes (1 to 4 each).  IMPAIR:
# IBV_COLL_EMU_IMPAIR for every node and the switch (loss, duplication,
# reordering, jitter).  Prints one line per seed and run with its time.
set -u
node=$1 switchd=$2 topo=$3 nodes=$4 seeds=$5 imp=${6:-}
tmp=$(mktemp -d /tmp/ibvc_live.XXXXXX)
pids=""
cleanup() {
	for p in $pids; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done
	exit 1
}
# A number in [0, n) from a seed and a salt.
pick() { awk -v s="$1" -v n="$2" 'BEGIN { srand(s); print int(rand() * n) }'; }

# run SEED CC: one job of $nodes nodes; its collectives' time in ms (node
# 0's sum over the cases, from coll_node -v) goes to $tmp/ms.
run() {
	seed=$1 cc=$2
	ranks="" i=0
	while [ $i -lt "$nodes" ]; do
		r=$((1 + $(pick $((seed * 100 + i)) 4)))
		ranks="$ranks${ranks:+,}$r"
		i=$((i + 1))
	done
	targs="--topology 0"
	swpid=""
	if [ "$topo" = switch ]; then
		rm -f "$tmp/sw.port"
		IBV_COLL_EMU_IMPAIR=$imp "$switchd" -p 0 -P "$tmp/sw.port" -n live >"$tmp/sw.log" 2>&1 &
		swpid=$!
		pids="$pids $swpid"
		i=0
		while [ ! -s "$tmp/sw.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		[ -s "$tmp/sw.port" ] || fail "the switch did not start"
		targs="--topology 1 --leaves $(cat "$tmp/sw.port")"
	fi
	npids="" i=0
	while [ $i -lt "$nodes" ]; do
		IBV_COLL_EMU_CC=$cc IBV_COLL_EMU_IMPAIR=$imp timeout 300 "$node" \
			--boot "unix:$tmp/boot.$seed.$cc.sock" --node $i --nodes "$nodes" \
			--ranks "$ranks" --scenario heavy --seed "$seed" --jid $((seed % 65536 + 1)) \
			--timeout-ms 5000 -v $targs >"$tmp/n$i.cc$cc.log" 2>&1 &
		npids="$npids $!"
		i=$((i + 1))
	done
	pids="$pids $npids"
	i=0
	for p in $npids; do
		wait "$p"
		st=$?
		[ $st -eq 124 ] && fail "seed $seed (ranks $ranks, cc $cc): node $i hung"
		[ $st -eq 0 ] || fail "seed $seed (ranks $ranks, cc $cc): node $i exited $st"
		i=$((i + 1))
	done
	if [ -n "$swpid" ]; then
		kill "$swpid" 2>/dev/null
		wait "$swpid" 2>/dev/null
	fi
	awk '/ case .*: [0-9.]+ ms$/ { t += $(NF - 1) } END { printf "%.0f\n", t }' \
		"$tmp/n0.cc$cc.log" >"$tmp/ms"
}

total_on=0 total_off=0
for seed in $(echo "$seeds" | tr ',' ' '); do
	run "$seed" 1
	on=$(cat "$tmp/ms")
	run "$seed" 0
	off=$(cat "$tmp/ms")
	echo "seed $seed: $topo, $nodes nodes${imp:+, $imp}: controller on $on ms, off $off ms"
	total_on=$((total_on + on))
	total_off=$((total_off + off))
done
echo "total: on $total_on ms, off $total_off ms"
# Twice the baseline, and a second for what a loaded machine swings.
[ "$total_on" -le $((2 * total_off + 1000)) ] ||
	fail "the controller took $total_on ms, more than twice the $total_off ms without it"
echo "PASS"
