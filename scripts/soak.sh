#!/bin/sh
# Soak: random collectives for a given time against three long-running
# switches (two leaves and a spine), checking every result.
#   scripts/soak.sh [-B BUILD] [-t SECONDS] [-S SEED] [-R ROUNDS]
# BUILD (default build) holds tests/coll_node and emulator/ibv_coll_switchd.
# CI runs 45 s; an hour:  scripts/soak.sh -t 3600
#
# Each round starts a new job (new job ID, new members: every member
# restarts each round) of 2 to 4 nodes of 1 to 3 ranks, on the ring, one
# switch or the two-leaf hierarchy, with random loss, duplication and
# reordering (IBV_COLL_EMU_IMPAIR) on its members, and runs coll_node's
# "random" scenario: 8 to 23 collectives of random kind, operation, type,
# count and root, each checked by coll_node against the independent
# reference (tests/common/coll_ref).  Every fifth round one member is
# killed mid-job instead: the others must end (with an error) within the
# job's timeout, not hang.  The switches run throughout: their resident
# memory, open descriptors and Seg units are sampled each round, and at the
# end their counters must account for every datagram.  Fails on a wrong
# result, a hang, a switch that died, memory or descriptors that keep
# growing, or units still held after the jobs are gone.
set -u
build=build secs=60 seed=$$ max_rounds=0
while getopts B:t:S:R: o; do
	case $o in
	B) build=$OPTARG ;;
	t) secs=$OPTARG ;;
	S) seed=$OPTARG ;;
	R) max_rounds=$OPTARG ;; # stop after this many rounds too (0: none)
	*) sed -n '4p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
	esac
done
for v in "t $secs 1" "S $seed 0" "R $max_rounds 0"; do
	set -- $v
	case $2 in
	'' | *[!0-9]*) ok=0 ;;
	*) [ "$2" -ge "$3" ] && ok=1 || ok=0 ;;
	esac
	[ $ok -eq 1 ] || { echo "soak: -$1 $2: an integer of at least $3" >&2; exit 2; }
done
node=$build/tests/coll_node switchd=$build/emulator/ibv_coll_switchd
[ -x "$node" ] && [ -x "$switchd" ] || { echo "soak: build coll_node and ibv_coll_switchd in $build" >&2; exit 2; }
tmp=$(mktemp -d /tmp/ibvc_soak.XXXXXX)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() {
	echo "soak: FAIL: $*"
	for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
	exit 1
}

# The switches: jobs whose RELEASE was lost are forgotten after 2 s.
for s in 0 1 2; do
	"$switchd" -p 0 -P "$tmp/sw$s.port" -n "soak$s" -I 2000 -W 200 >"$tmp/sw$s.log" 2>&1 &
	eval "swpid$s=$!"
	pids="$pids $!"
done
for s in 0 1 2; do
	i=0
	while [ ! -s "$tmp/sw$s.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$tmp/sw$s.port" ] || fail "switch $s did not start"
	eval "swport$s=$(cat "$tmp/sw$s.port")"
done

rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
# A number in [0, n) from the round's seed and a salt.
pick() { awk -v s="$1" -v n="$2" 'BEGIN { srand(s); print int(rand() * n) }'; }

start=$(date +%s)
round=0 colls=0 kills=0
first_rss="" first_fds=""
echo "soak: ${secs} s from seed $seed; switches on ports $swport0 $swport1 $swport2"
printf "%8s %6s %6s %10s %10s %10s %6s %6s %10s\n" elapsed rounds colls rss0_kb rss1_kb rss2_kb \
	fds units sw0_rx
while [ $(($(date +%s) - start)) -lt "$secs" ] &&
	{ [ "$max_rounds" -eq 0 ] || [ "$round" -lt "$max_rounds" ]; }; do
	round=$((round + 1))
	rs=$((seed * 1000 + round))
	nodes=$((2 + $(pick "$rs" 3)))
	ranks=$((1 + $(pick $((rs + 1)) 3)))
	topo=$(pick $((rs + 2)) 3) # 0 ring, 1 switch, 2 hierarchy
	loss=$(pick $((rs + 3)) 4) # percent of each impairment: 0 to 3
	case $topo in
	0) targs="--topology 0" ;;
	1) targs="--topology 1 --leaves $swport0" ;;
	*)
		ml=0
		i=1
		while [ $i -lt "$nodes" ]; do ml="$ml,$((i % 2))"; i=$((i + 1)); done
		targs="--topology 2 --leaves $swport0,$swport1 --spines $swport2 --member-leaf $ml"
		;;
	esac
	imp="drop=0.0$loss,dup=0.0$loss,reorder=0.0$loss,seed=$rs"
	kill_one=0
	[ $((round % 5)) -eq 0 ] && kill_one=1
	boot="unix:$tmp/boot$round.sock"
	npids=""
	i=0
	while [ $i -lt "$nodes" ]; do
		IBV_COLL_EMU_IMPAIR=$imp IBV_COLL_EMU_COLL_RTO_US=5000 timeout 120 "$node" \
			--boot "$boot" --node $i --nodes "$nodes" --ranks "$ranks" --scenario random \
			--seed "$rs" --jid "$round" --timeout-ms 4000 $targs >"$tmp/n$i.log" 2>&1 &
		npids="$npids $!"
		i=$((i + 1))
	done
	if [ $kill_one -eq 1 ]; then
		sleep 0.$(pick $((rs + 4)) 9)
		victim=$(echo $npids | cut -d' ' -f$((1 + $(pick $((rs + 5)) "$nodes"))))
		kill -9 "$victim" 2>/dev/null
		kills=$((kills + 1))
	fi
	i=0
	for p in $npids; do
		wait "$p"
		st=$?
		# Killed round: the others end with an error, but within the job
		# timeout (timeout(1) gives 124 for a hang); else every node exits 0.
		if [ $kill_one -eq 1 ]; then
			[ $st -ne 124 ] || fail "round $round: node $i hung after a member was killed"
		elif [ $st -ne 0 ]; then
			fail "round $round (seed $rs, $nodes nodes x $ranks ranks, topology $topo, loss $loss%): node $i exited $st"
		fi
		i=$((i + 1))
	done
	# "node 0: N cases, 0 failures; ..."
	[ $kill_one -eq 1 ] ||
		colls=$((colls + $(sed -n 's/^node 0: \([0-9]*\) cases.*/\1/p' "$tmp/n0.log" | tail -1)))
	for s in 0 1 2; do
		eval "p=\$swpid$s"
		kill -0 "$p" 2>/dev/null || fail "switch $s died"
	done
	r0=$(rss "$swpid0") r1=$(rss "$swpid1") r2=$(rss "$swpid2")
	f=$(($(fds "$swpid0") + $(fds "$swpid1") + $(fds "$swpid2")))
	kill -USR1 "$swpid0"
	sleep 0.05
	units=$(grep "Seg units" "$tmp/sw0.log" | tail -1 | sed 's/.*in use //')
	rx=$(grep "total:" "$tmp/sw0.log" | tail -1 | sed 's/.*rx_packets \([0-9]*\).*/\1/')
	printf "%8s %6s %6s %10s %10s %10s %6s %6s %10s\n" $(($(date +%s) - start)) "$round" \
		"$colls" "$r0" "$r1" "$r2" "$f" "$units" "$rx"
	# The baseline once warmed up (a few rounds: pools, buffers, jobs).
	if [ "$round" -eq 5 ]; then
		first_rss=$((r0 + r1 + r2))
		first_fds=$f
	fi
	last_rss=$((r0 + r1 + r2))
	last_fds=$f
done
# A soak that checked nothing passes nothing.
[ "$colls" -gt 0 ] || fail "no collective completed in $round rounds"
# Growth: descriptors not at all, memory by at most 25 % + 8 MiB over the
# warmed-up baseline (allocator noise, not a leak per job).  A run too
# short for a baseline (a slow machine) still checked every result.
if [ "$round" -gt 5 ]; then
	[ "$last_fds" -le "$first_fds" ] || fail "switch descriptors grew from $first_fds to $last_fds"
	[ "$last_rss" -le $((first_rss + first_rss / 4 + 8192)) ] ||
		fail "switch memory grew from $first_rss to $last_rss KiB"
else
	echo "soak: only $round rounds: too few to judge growth"
	first_rss=- last_rss=- first_fds=- last_fds=-
fi
# Jobs gone (RELEASEd, or forgotten after 2 s of silence): no unit held.
sleep 3
for s in 0 1 2; do
	eval "kill -USR1 \$swpid$s"
done
sleep 0.3
for s in 0 1 2; do
	grep "Seg units" "$tmp/sw$s.log" | tail -1 | grep -q "in use 0$" ||
		fail "switch $s still holds Seg units after every job left"
	# Every datagram counted once: rx_packets = delivered + duplicates + drops.
	grep "total:" "$tmp/sw$s.log" | tail -1 | tr ',' '\n' | awk -v s=$s '
		/rx_packets/ { rx = $NF } /delivered/ { acc += $NF } /duplicates/ { acc += $NF }
		/drop_/ { acc += $NF }
		END { if (rx != acc) { printf "switch %d: rx_packets %d != delivered + drops %d\n", s, rx, acc; exit 1 } }' ||
		fail "switch $s counters do not add up"
done
echo "soak: PASS: $round rounds ($kills with a member killed), switch memory ${first_rss} -> ${last_rss} KiB, descriptors $first_fds -> $last_fds"
