#!/bin/sh
# stress-liveness - seeded random collectives on the shapes that once stalled
# hanging, until each shape has run at least COUNT collectives (or COUNT
# seeds, should runs fail before their first collective): every
# result is checked against the scalar reference (coll_node), and a node
# that neither completes nor fails within its job's timeout is a hang.
#
#   scripts/stress-liveness.sh [-B BUILD] [-c COUNT] [-s SEED] [-t TIMEOUT_MS] [SHAPE...]
#
# SHAPEs (all by default):
#   ring5        5 nodes round the ring, 1-4 ranks each (uneven)
#   switch4      4 nodes through one ibv_coll_switchd, 1-4 ranks each
#   ring5_lossy  ring5 with IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.01,reorder=0.01
#   switch4_lossy  switch4 with the same on the nodes and the switch
# Each seed runs coll_node's "random" scenario (8-23 collectives, mostly
# small) or, one seed in four, "heavy" (3-6 of up to 4 Mi elements).
# Prints per shape: collectives, seeds, hangs, failed runs, the slowest
# collective and the time; exits 1 on any hang, wrong result or error.
set -u
build=build count=1000 seed0=1 tmo=5000
while getopts B:c:s:t: o; do
	case $o in
	B) build=$OPTARG ;;
	c) count=$OPTARG ;;
	s) seed0=$OPTARG ;;
	t) tmo=$OPTARG ;;
	*) sed -n '8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
shapes=${*:-ring5 switch4 ring5_lossy switch4_lossy}
for v in "c $count" "s $seed0" "t $tmo"; do
	case ${v#? } in
	'' | *[!0-9]* | 0) echo "stress-liveness: -${v%% *} ${v#? }: a positive integer" >&2; exit 2 ;;
	esac
done
for shape in $shapes; do
	case $shape in
	ring5 | switch4 | ring5_lossy | switch4_lossy) ;;
	*) echo "stress-liveness: unknown shape $shape (ring5, switch4, ring5_lossy, switch4_lossy)" >&2; exit 2 ;;
	esac
done
node=$build/tests/coll_node switchd=$build/emulator/ibv_coll_switchd
[ -x "$node" ] && [ -x "$switchd" ] || { echo "stress-liveness: build coll_node and ibv_coll_switchd in $build" >&2; exit 2; }
tmp=$(mktemp -d /tmp/ibvc_stress.XXXXXX)
pids=""
cleanup() {
	for p in $pids; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
pick() { awk -v s="$1" -v n="$2" 'BEGIN { srand(s); print int(rand() * n) }'; }
bad=0
printf "%-14s %8s %6s %6s %6s %12s %8s\n" shape colls seeds hangs failed slowest_ms secs
for shape in $shapes; do
	case $shape in
	ring5) n=5 topo=ring imp= ;;
	switch4) n=4 topo=switch imp= ;;
	ring5_lossy) n=5 topo=ring imp=drop=0.05,dup=0.01,reorder=0.01 ;;
	switch4_lossy) n=4 topo=switch imp=drop=0.05,dup=0.01,reorder=0.01 ;;
	esac
	colls=0 seeds=0 hangs=0 failed=0 slowest=0
	start=$(date +%s)
	seed=$seed0
	# Every seed runs at least 3 collectives; a run that fails before its
	# first adds none, so the seeds are bounded too.
	while [ "$colls" -lt "$count" ] && [ "$seeds" -lt "$count" ]; do
		seeds=$((seeds + 1))
		scen=random
		[ $((seed % 4)) -eq 0 ] && scen=heavy
		ranks="" i=0
		while [ $i -lt $n ]; do
			ranks="$ranks${ranks:+,}$((1 + $(pick $((seed * 100 + i)) 4)))"
			i=$((i + 1))
		done
		targs="--topology 0" swpid=""
		if [ $topo = switch ]; then
			rm -f "$tmp/port"
			IBV_COLL_EMU_IMPAIR=$imp "$switchd" -p 0 -P "$tmp/port" -n stress >"$tmp/sw.log" 2>&1 &
			swpid=$!
			pids="$pids $swpid"
			i=0
			while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
			targs="--topology 1 --leaves $(cat "$tmp/port")"
		fi
		npids="" i=0
		while [ $i -lt $n ]; do
			IBV_COLL_EMU_IMPAIR=${imp:+$imp,seed=$seed} timeout $((tmo / 1000 * 20 + 60)) "$node" \
				--boot "unix:$tmp/boot.$seed.sock" --node $i --nodes $n --ranks "$ranks" \
				--scenario $scen --seed "$seed" --jid $((seed % 60000 + 1)) \
				--timeout-ms "$tmo" --sync -v $targs >"$tmp/n$i.log" 2>&1 &
			npids="$npids $!"
			i=$((i + 1))
		done
		i=0 runbad=0
		for p in $npids; do
			wait "$p"
			st=$?
			if [ $st -eq 124 ]; then
				hangs=$((hangs + 1))
				runbad=1
				echo "$shape seed $seed ($scen, ranks $ranks): node $i HUNG" >&2
			elif [ $st -ne 0 ]; then
				runbad=1
				echo "$shape seed $seed ($scen, ranks $ranks): node $i exited $st" >&2
				tail -3 "$tmp/n$i.log" >&2
			fi
			i=$((i + 1))
		done
		[ $runbad -eq 1 ] && failed=$((failed + 1))
		if [ -n "$swpid" ]; then
			kill "$swpid" 2>/dev/null
			wait "$swpid" 2>/dev/null
		fi
		c=$(grep -c ' case .*: [0-9.]* ms$' "$tmp/n0.log")
		s=$(awk '/ case .*: [0-9.]+ ms$/ { if ($(NF - 1) > m) m = $(NF - 1) } END { printf "%.0f", m }' "$tmp/n0.log")
		colls=$((colls + c))
		[ "$s" -gt "$slowest" ] && slowest=$s
		seed=$((seed + 1))
	done
	printf "%-14s %8s %6s %6s %6s %12s %8s\n" "$shape" "$colls" "$seeds" "$hangs" "$failed" \
		"$slowest" $(($(date +%s) - start))
	[ $hangs -eq 0 ] && [ $failed -eq 0 ] || bad=1
done
exit $bad
