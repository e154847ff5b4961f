#!/bin/bash
# Chaos on the namespace fabric: N hosts (fabric.sh, links shaped to 1 Gbit/s)
# run seeded random collectives (tests/multihost/chaos_node, every result
# checked against the independent reference) round after round, each round
# a new job on the ring, one switch, AUTO or two leaves under a spine, and
# into each round one fault at a random time:
#   link     a host's link down for 0.1-5 s (ip link set eth0 down, up)
#   switch   the switch (a leaf, in the hierarchy) killed and a new one
#            started on the same address after 0.1-2 s
#   devd     the round's members go through ibv_coll_devd; one host's
#            daemon killed and a new one started after 0.2-1 s
#   rate     a host's link (both directions) down to 20 Mbit/s for 1-3 s
#   burst    one member's port duplicates and reorders 30 % of its
#            packets for 0.3-1.5 s (IBV_COLL_EMU_IMPAIR after=,for=)
# What the members must see (ibv_coll(7), FAULTS): each collective
# completes, or fails with an error status within the job's timeout, and
# succeeds when run again after the members agree and recover (the job
# given again; a device that died opened again); no result is ever wrong;
# no member hangs; a member's descriptors are the same after its last
# recovery as before the first fault; a job given again once the fault is
# over (a new incarnation) runs through its switch again, restarted or
# not, and in AUTO after a fallback to the ring.  The
# switches that live through every round must not grow in descriptors.
#
#   chaos.sh [-B BUILD] [-n HOSTS] [-t SECONDS] [-S SEED] [-f FAULTS]
# FAULTS: a comma-separated subset of link,switch,devd,rate,burst (default
# all), taken in turn.  Root only (exits 77, skipped, otherwise).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=build hosts=4 secs=150 seed=$$ faults=link,switch,devd,rate,burst
while getopts B:n:t:S:f: o; do
	case $o in
	B) build=$OPTARG ;;
	n) hosts=$OPTARG ;;
	t) secs=$OPTARG ;;
	S) seed=$OPTARG ;;
	f) faults=$OPTARG ;;
	*) sed -n '25,27p' "$0"; exit 2 ;;
	esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "chaos: no build directory" >&2; exit 2; }
node=$build/tests/multihost/chaos_node switchd=$build/emulator/ibv_coll_switchd
devd=$build/providers/crxe/ibv_coll_devd
for f in "$node" "$switchd" "$devd"; do
	[ -x "$f" ] || { echo "chaos: $f is not built" >&2; exit 2; }
done
for f in ${faults//,/ }; do
	case $f in link | switch | devd | rate | burst) ;; *) echo "chaos: unknown fault '$f'" >&2; exit 2 ;; esac
done
# Outside the fabric: build it (4 hosts at 1 Gbit/s, 3 switch namespaces).
if [ -z "${FABRIC_HOSTS:-}" ]; then
	exec "$here/fabric.sh" -n "$hosts" -s 3 -r 1gbit -q 256kb -- "$0" -B "$build" -n "$hosts" \
		-t "$secs" -S "$seed" -f "$faults"
fi

tmp=$(mktemp -d /tmp/ibvc_chaos.XXXXXX)
port=4791
declare -A swpid
dpids=()
cleanup() {
	for p in "${swpid[@]}" "${dpids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "chaos: FAIL: $*"
	for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done
	exit 1
}
# pick SALT N: a number in [0, N) from the round's seed.
pick() { awk -v s="$rs" -v t="$1" -v n="$2" 'BEGIN { srand(s * 7919 + t); print int(rand() * n) }'; }
sw_ns() { eval echo "\$FABRIC_SW_NS_$1"; }
sw_ip() { eval echo "\$FABRIC_SW_IP_$1"; }
host_ns() { eval echo "\$FABRIC_NS_$1"; }
start_switch() { # J
	ip netns exec "$(sw_ns "$1")" "$switchd" -p $port -n "chaos$1" \
		>>"$tmp/sw$1.log" 2>&1 &
	swpid[$1]=$!
}
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
ms_now() { date +%s%3N; }

for j in 0 1 2; do start_switch $j; done
sleep 0.3
sw_fds0=$(($(fds "${swpid[0]}") + $(fds "${swpid[1]}") + $(fds "${swpid[2]}")))
fault_list=(${faults//,/ })
start=$(date +%s)
last_sample=$start rss_base= rss_last=
round=0 ncases=0 nfailed=0 nrecover=0
echo "chaos: $hosts hosts, ${secs} s from seed $seed, faults ${faults}"
while [ $(($(date +%s) - start)) -lt "$secs" ]; do
	round=$((round + 1))
	rs=$((seed * 1000 + round))
	# Faults and topologies in turn, each at its own pace: with five kinds
	# of fault, every pair in 20 rounds.
	fault=${fault_list[$(((round - 1) % ${#fault_list[@]}))]}
	topo=$(((round - 1) % 4)) # 0 ring, 1 switch, 2 hierarchy, 3 AUTO
	# A switch fault needs a switch; devd rounds take every topology.
	[ "$fault" = switch ] && [ $topo -eq 0 ] && topo=3
	case $topo in
	0) targs=(--topology 0) ;;
	1 | 3) targs=(--topology $topo --leaves "$(sw_ip 0):$port") ;;
	2)
		ml=
		for ((i = 0; i < hosts; i++)); do ml+="${ml:+,}$((i * 2 / hosts))"; done
		targs=(--topology 2 --leaves "$(sw_ip 0):$port,$(sw_ip 1):$port"
			--spines "$(sw_ip 2):$port" --member-leaf "$ml")
		;;
	esac
	victim=$(pick 1 "$hosts")
	at_ms=$((500 + $(pick 2 2500))) # the fault, after the start
	env_extra=()
	if [ "$fault" = devd ]; then
		dpids=()
		for ((i = 0; i < hosts; i++)); do
			ip netns exec "$(host_ns $i)" "$devd" eth0 >>"$tmp/d$i.log" 2>&1 &
			dpids+=($!)
		done
		sleep 0.3
		env_extra=(IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD=)
	fi
	boot="unix:$tmp/boot$round.sock"
	npids=()
	t0=$(ms_now)
	for ((i = 0; i < hosts; i++)); do
		imp=
		if [ "$fault" = burst ] && [ $i -eq "$victim" ]; then
			imp="dup=0.3,reorder=0.3,after=${at_ms}ms,for=$((300 + $(pick 3 1200)))ms,seed=$rs"
		fi
		ip netns exec "$(host_ns $i)" env "${env_extra[@]}" IBV_COLL_EMU_IMPAIR=$imp \
			IBV_COLL_EMU_COLL_RTO_US=20000 timeout 150 "$node" --boot "$boot" --node $i \
			--nodes "$hosts" --seed "$rs" --jid "$round" --timeout-ms 3000 --cases 20 \
			--pause-ms 200 --settled "$tmp/settled$round" "${targs[@]}" >"$tmp/n$i.log" 2>&1 &
		npids+=($!)
	done
	# The fault.
	sleep "$(awk -v m="$at_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
	fault_ms=$(($(ms_now) - t0))
	what=
	case $fault in
	link)
		d=$((100 + $(pick 4 4900)))
		ip -n "$(host_ns "$victim")" link set eth0 down
		sleep "$(awk -v m="$d" 'BEGIN { printf "%.3f", m / 1000 }')"
		ip -n "$(host_ns "$victim")" link set eth0 up
		what="host $victim's link down for $d ms"
		;;
	switch)
		j=0
		d=$((100 + $(pick 4 1900)))
		kill -9 "${swpid[$j]}" 2>/dev/null
		wait "${swpid[$j]}" 2>/dev/null
		sleep "$(awk -v m="$d" 'BEGIN { printf "%.3f", m / 1000 }')"
		start_switch $j
		restart_at=$(ms_now)
		what="switch $j killed, a new one after $d ms"
		;;
	devd)
		d=$((200 + $(pick 4 800)))
		kill -9 "${dpids[$victim]}" 2>/dev/null
		wait "${dpids[$victim]}" 2>/dev/null
		sleep "$(awk -v m="$d" 'BEGIN { printf "%.3f", m / 1000 }')"
		ip netns exec "$(host_ns "$victim")" "$devd" eth0 >>"$tmp/d$victim.log" 2>&1 &
		dpids[$victim]=$!
		what="host $victim's ibv_coll_devd killed, a new one after $d ms"
		;;
	rate)
		d=$((1000 + $(pick 4 2000)))
		ns=$(host_ns "$victim")
		br=${ns%h*}br
		change() { # RATE
			tc -n "$ns" class change dev eth0 parent 1: classid 1:1 htb rate "$1" ceil "$1" \
				burst 131072 cburst 131072 quantum 60000 &&
				tc -n "$br" class change dev "${ns%h*}p$victim" parent 1: classid 1:1 htb \
					rate "$1" ceil "$1" burst 131072 cburst 131072 quantum 60000
		}
		change 20mbit || fail "tc class change"
		sleep "$(awk -v m="$d" 'BEGIN { printf "%.3f", m / 1000 }')"
		change "$FABRIC_RATE" || fail "tc class change back"
		what="host $victim's link at 20 Mbit/s for $d ms"
		;;
	burst) what="host $victim duplicates and reorders 30 % for a while" ;;
	esac
	# The fault is over (a burst's window ends within 1.5 s of its start).
	[ "$fault" = burst ] && sleep 1.5
	touch "$tmp/settled$round"
	status=0
	for ((i = 0; i < hosts; i++)); do
		wait "${npids[$i]}"
		st=$?
		[ $st -eq 124 ] && fail "round $round: node $i hung (timeout(1) killed it)"
		[ $st -eq 0 ] || status=$st
	done
	tail=$(($(ms_now) - t0))
	[ $status -eq 0 ] || fail "round $round (seed $rs, topology $topo, fault: $what): a node exited $status"
	# Per round: the members' summaries.
	c=$(sed -n 's/^node 0: \([0-9]*\) cases.*/\1/p' "$tmp/n0.log")
	f=$(cat "$tmp"/n*.log | sed -n 's/.* \([0-9]*\) failed attempts.*/\1/p' | awk '{s += $1} END {print s + 0}')
	r=$(sed -n 's/.* \([0-9]*\) recoveries.*/\1/p' "$tmp/n0.log")
	ncases=$((ncases + c)) nfailed=$((nfailed + f)) nrecover=$((nrecover + r))
	# The first failure and the first success after the fault, from node 0's lines.
	printf "round %2d topology %d: %s at %d ms: %d failed attempts, %d recoveries, done at %d ms\n" \
		"$round" "$topo" "$what" "$fault_ms" "$f" "$r" "$tail"
	sed -n 's/^\(node 0: \)/    \1/p' "$tmp/n0.log"
	if [ "$fault" = switch ]; then
		# From the new switch's start to the first collective it served.
		first=$(awk -v t="$restart_at" '/via switch/ && $NF >= t { print $NF; exit }' "$tmp/n0.log")
		[ -n "$first" ] && echo "    first collective through the new switch $((first - restart_at)) ms after its start"
	fi
	grep -h "attempt [0-9]*: " "$tmp"/n*.log | grep -v ": ok via" | sed 's/^/    /' | head -6
	if [ "$fault" = switch ] && [ $topo -eq 3 ]; then
		last=$(grep "case $((c - 1)) attempt" "$tmp/n0.log" | tail -1)
		case $last in
		*"via switch"*) ;;
		*) fail "round $round: AUTO did not return to the restarted switch: $last" ;;
		esac
	fi
	if [ "$fault" = devd ]; then
		for p in "${dpids[@]}"; do kill "$p" 2>/dev/null; done
		wait "${dpids[@]}" 2>/dev/null
		dpids=()
	fi
	for j in 0 1 2; do
		kill -0 "${swpid[$j]}" 2>/dev/null || fail "switch $j died (not killed by chaos)"
	done
	# Each minute: the switches' memory and descriptors (switch 0 is the
	# one restarted; 1 and 2 live through the whole run).
	if [ $(($(date +%s) - last_sample)) -ge 60 ]; then
		last_sample=$(date +%s)
		printf "sample at %d s: %d rounds, %d collectives; switch rss KiB %s %s %s, descriptors %s %s %s\n" \
			$((last_sample - start)) "$round" "$ncases" "$(rss "${swpid[0]}")" "$(rss "${swpid[1]}")" \
			"$(rss "${swpid[2]}")" "$(fds "${swpid[0]}")" "$(fds "${swpid[1]}")" "$(fds "${swpid[2]}")"
		[ -n "$rss_base" ] || rss_base=$(($(rss "${swpid[1]}") + $(rss "${swpid[2]}")))
		rss_last=$(($(rss "${swpid[1]}") + $(rss "${swpid[2]}")))
	fi
done
# Memory of the switches that lived throughout: at most 25 % + 8 MiB over
# the first minute's (allocator noise, not a leak per job).
if [ -n "$rss_base" ] && [ "$rss_last" -gt $((rss_base + rss_base / 4 + 8192)) ]; then
	fail "switch memory grew from $rss_base to $rss_last KiB"
fi
sw_fds1=$(($(fds "${swpid[0]}") + $(fds "${swpid[1]}") + $(fds "${swpid[2]}")))
[ "$sw_fds1" -le "$sw_fds0" ] || fail "switch descriptors grew from $sw_fds0 to $sw_fds1"
echo "chaos: PASS: $round rounds, $ncases collectives checked, $nfailed failed attempts recovered ($nrecover recoveries at node 0), switch descriptors $sw_fds0 -> $sw_fds1"
