#!/bin/bash
# bench-fabric - allreduce on a network with a finite rate and queue: ours
# round the NIC ring, through one aggregation switch and through two leaves
# under a spine, against Open MPI (ob1 over TCP), side by side in one run,
# on the namespace fabric of tests/multihost/fabric.sh with every host's
# link shaped to RATE in both directions.
#
#   scripts/bench-fabric.sh [-n HOSTS] [-r RATE] [-q QUEUE] [-S SWRATE]
#       [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i ITERS] [-w WARMUP]
#       [-I IMPAIR] [-p PATHS] [-t SECONDS] [-P POSTED]
#
#   -n  hosts, one node (one rank) each (4)
#   -r  each host link's rate, tc units (400mbit)
#   -q  each link's queue: bytes (256kb) or packets (300p) (256kb)
#   -S  the switch namespaces' link rate: auto (HOSTS x RATE, as a switch
#       port that is not the bottleneck), a rate, or none (auto)
#   -b, -e, -f  sizes per rank, from MINBYTES to MAXBYTES, times FACTOR
#       (1M, 16M, 4); K and M suffixes
#   -i, -w  timed and warm-up runs per size (3, 1)
#   -I  IBV_COLL_EMU_IMPAIR for every node and switch of ours, e.g.
#       drop=0.01,delay=1ms,ce=0.05 (none); Open MPI's TCP does not pass
#       through the emulator, so it is not impaired
#   -p  what to run, comma-separated: ring, switch, hier, mpi, dropin,
#       dropin-sw, rc (all; rc: an RC WRITE stream of messages of each size
#       from host 0 to host 1 for 3 s, ibv_coll_rc_bw; dropin, dropin-sw:
#       the same MPI benchmark as mpi with libibv_coll_mpi.so preloaded,
#       its allreduces round the NIC ring or through one switch)
#   -t  time limit of one run in seconds (600)
#   -P  ours: collectives kept posted (ibv_coll_perf -z; 1: blocking, one
#       at a time as MPI_Allreduce; 0: 32, IBV_COLL_EMU_COLL_DEPTH of them
#       running at once) (1)
# Environment: BUILD_DIR (build).
#
# Every size runs each path in turn (alternating, every other size in the
# reverse order, so that the machine's swings fall on all of them), fp32 sum, blocking (one allreduce at a
# time, as MPI_Allreduce is; ours as -P says), each result checked element
# by element.
# Per row: time, algbw and busbw as nccl-tests define them, busbw as a
# fraction of its bound (ring and Open MPI: the link rate R; switch and
# hierarchy: R x 2(N-1)/N, since each host sends S and receives S instead
# of 2(N-1)/N S each way), and wire/S: the bytes a host put on its link
# (eth0's tx_bytes in its namespace, before and after, headers included,
# the mean over the hosts) per allreduce over S, for ours and Open MPI
# alike; the ideal is 2(N-1)/N round a ring, 1 through a switch.
# Needs root (network namespaces and tc); without it, exits 77.
set -u
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
fabric=$root/tests/multihost/fabric.sh
bench_name=bench-fabric
# shellcheck source=scripts/bench-common.sh
. "$root/scripts/bench-common.sh"

usage() {
	sed -n '7,11p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

if [ "${1:-}" != "--inner" ]; then
	hosts=4 rate=400mbit queue=256kb swrate=auto
	args=("$@")
	while getopts "n:r:q:S:b:e:f:i:w:I:p:t:P:" o; do
		case $o in
		n) hosts=$OPTARG ;;
		r) rate=$OPTARG ;;
		q) queue=$OPTARG ;;
		S) swrate=$OPTARG ;;
		b | e | f | i | w | I | p | t | P) ;;
		*) usage ;;
		esac
	done
	shift $((OPTIND - 1))
	[ $# -eq 0 ] || { echo "bench-fabric: unexpected argument $1" >&2; usage; }
	sw=(-S "$swrate")
	[ "$swrate" = none ] && sw=()
	exec "$fabric" -n "$hosts" -s 3 -m 9000 -r "$rate" -q "$queue" "${sw[@]}" -- \
		"$0" --inner "${args[@]}"
fi
shift

# ---- inside the fabric -------------------------------------------------
n=$FABRIC_HOSTS
minb=1M maxb=16M factor=4 iters=3 warmup=1 impair="" paths=ring,switch,hier,mpi,dropin,dropin-sw,rc tlimit=600
posted=1
OPTIND=1
while getopts "n:r:q:S:b:e:f:i:w:I:p:t:P:" o; do
	case $o in
	b) minb=$OPTARG ;;
	e) maxb=$OPTARG ;;
	f) factor=$OPTARG ;;
	i) iters=$OPTARG ;;
	w) warmup=$OPTARG ;;
	I) impair=$OPTARG ;;
	p) paths=$OPTARG ;;
	t) tlimit=$OPTARG ;;
	P) posted=$OPTARG ;;
	*) ;;
	esac
done

minb=$(bench_bytes "$minb") maxb=$(bench_bytes "$maxb")
for v in "$factor" "$iters" "$warmup" "$tlimit"; do
	[[ $v =~ ^[0-9]+$ ]] || { echo "bench-fabric: '$v' is not a number" >&2; exit 2; }
done
[ "$factor" -ge 2 ] || { echo "bench-fabric: -f must be 2 or more" >&2; exit 2; }
IFS=, read -r -a plist <<<"$paths"
for p in "${plist[@]}"; do
	case $p in
	ring | switch | hier | mpi | dropin | dropin-sw | rc) ;;
	*) echo "bench-fabric: unknown path '$p' (ring, switch, hier, mpi, dropin, dropin-sw, rc)" >&2
		exit 2 ;;
	esac
done
if [[ " ${plist[*]} " == *" hier "* ]] && [ "$n" -lt 2 ]; then
	echo "bench-fabric: the hierarchy needs two hosts or more" >&2
	exit 2
fi

perf=$build/tools/ibv_coll_perf
rcbw=$build/tools/ibv_coll_rc_bw
switchd=$build/emulator/ibv_coll_switchd
mpiperf=$build/bench/mpi_allreduce_perf
rsh=$root/tests/multihost/netns-rsh.sh
for b in "$perf" "$switchd" "$rcbw"; do
	[ -x "$b" ] || { echo "bench-fabric: $b is missing; build first" >&2; exit 2; }
done
dropin=$build/mpi/libibv_coll_mpi.so
if [[ " ${plist[*]} " == *" dropin"* ]] && [ ! -f "$dropin" ]; then
	echo "bench-fabric: $dropin is missing; build first" >&2
	exit 2
fi
if [[ " ${plist[*]} " == *" mpi "* || " ${plist[*]} " == *" dropin"* ]]; then
	command -v mpirun >/dev/null && command -v mpicc >/dev/null ||
		{ echo "bench-fabric: Open MPI (mpirun, mpicc) is not installed" >&2; exit 2; }
	[ -x "$mpiperf" ] || { echo "bench-fabric: $mpiperf is missing; build first" >&2; exit 2; }
fi

tmp=$(mktemp -d /tmp/bench-fabric.XXXXXX)
sw_pids=()
cleanup() {
	for p in "${sw_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

export IBV_COLL_EMU_IMPAIR=$impair
if [[ " ${plist[*]} " == *" switch "* || " ${plist[*]} " == *" hier "* ||
	" ${plist[*]} " == *" dropin-sw "* ]]; then
	for j in 0 1 2; do
		ns=FABRIC_SW_NS_$j
		ip netns exec "${!ns}" "$switchd" -p 4791 -n "sw$j" >"$tmp/sw$j.log" 2>&1 &
		sw_pids+=($!)
	done
	sleep 0.5
	for j in 0 1 2; do
		kill -0 "${sw_pids[$j]}" 2>/dev/null ||
			{ cat "$tmp/sw$j.log" >&2; echo "bench-fabric: switch $j did not start" >&2; exit 1; }
	done
fi

# run_ours SIZE TOPOLOGY-ARGS...: node 0's table row in $tmp/row.
run_ours() {
	local size=$1 i ns pids=() st=0 pid
	shift
	rm -f "$tmp/boot.sock"
	for ((i = 0; i < n; i++)); do
		ns=FABRIC_NS_$i
		ip netns exec "${!ns}" timeout "$tlimit" "$perf" -D crxe_eth0 \
			--boot "unix:$tmp/boot.sock" --node "$i" --nodes "$n" \
			-b "$size" -e "$size" -n "$iters" -w "$warmup" -c 1 -z "$posted" -d float -o sum "$@" \
			>"$tmp/out$i" 2>&1 &
		pids+=($!)
	done
	for pid in "${pids[@]}"; do wait "$pid" || st=1; done
	awk -v s="$size" '$1 == s && NF >= 15 { print; exit }' "$tmp/out0" >"$tmp/row"
	if [ $st -ne 0 ] || [ ! -s "$tmp/row" ]; then
		echo "bench-fabric: ibv_coll_perf $* failed at $size bytes:" >&2
		for ((i = 0; i < n; i++)); do tail -n 3 "$tmp/out$i" | sed "s/^/  [$i] /" >&2; done
		return 1
	fi
}

# run_mpi SIZE [MPIRUN-ARGS...]: Open MPI's row in $tmp/row; with the
# drop-in's arguments, every rank's statistics line must say that its
# allreduces were offloaded and none failed.
run_mpi() {
	local size=$1 hostlist="" i ip
	shift
	for ((i = 0; i < n; i++)); do
		ip=FABRIC_IP_$i
		hostlist+="${hostlist:+,}${!ip}:1"
	done
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		ip netns exec "$FABRIC_NS_0" timeout "$tlimit" mpirun --allow-run-as-root \
		-np "$n" --host "$hostlist" --bind-to none --mca plm_rsh_agent "$rsh" \
		--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include eth0 \
		--mca oob_tcp_if_include eth0 --mca coll ^sm "$@" \
		"$mpiperf" -b "$size" -e "$size" -n "$iters" -w "$warmup" -c 1 -d float -o sum \
		>"$tmp/out0" 2>&1
	local st=$?
	awk -v s="$size" '$1 == s && NF >= 13 { print; exit }' "$tmp/out0" >"$tmp/row"
	if [ $st -ne 0 ] || [ ! -s "$tmp/row" ]; then
		echo "bench-fabric: mpirun failed at $size bytes:" >&2
		tail -n 8 "$tmp/out0" | sed 's/^/  /' >&2
		return 1
	fi
	if [ $# -gt 0 ] &&
		[ "$(grep -c "offloaded [1-9].*failed 0).*allreduce [1-9]" "$tmp/out0")" != "$n" ]; then
		echo "bench-fabric: the drop-in did not offload every rank's allreduce at $size bytes:" >&2
		grep "ibv_coll_mpi" "$tmp/out0" | sed 's/^/  /' >&2
		return 1
	fi
}
dropin_env=(-x LD_PRELOAD="$dropin" -x IBV_COLL_MPI_DEVICE=crxe_eth0 -x IBV_COLL_MPI_STATS=1)

# run_rc SIZE: an RC WRITE stream host 0 -> host 1; "count avgMB/s" in $tmp/row.
rc_port=18515
run_rc() {
	local size=$1 st=0
	rc_port=$((rc_port + 1))
	ip netns exec "$FABRIC_NS_1" timeout "$tlimit" "$rcbw" -d crxe_eth0 -p $rc_port \
		>"$tmp/out1" 2>&1 &
	local srv=$!
	ip netns exec "$FABRIC_NS_0" timeout "$tlimit" "$rcbw" -d crxe_eth0 -p $rc_port -s "$size" \
		-D 3 "$FABRIC_IP_1" >"$tmp/out0" 2>&1 || st=1
	wait $srv || st=1
	awk -v s="$size" '$1 == s && NF == 5 { print $2, $4; exit }' "$tmp/out0" >"$tmp/row"
	if [ $st -ne 0 ] || [ ! -s "$tmp/row" ]; then
		echo "bench-fabric: ibv_coll_rc_bw failed at $size bytes:" >&2
		tail -n 3 "$tmp/out0" "$tmp/out1" | sed 's/^/  /' >&2
		return 1
	fi
}

half=$(((n + 1) / 2))
declare -A rows
# Each run is 2 x (warm-up + timed + check) allreduces: out of place, then
# in place, for ibv_coll_perf and mpi_allreduce_perf alike.
ops=$((2 * (warmup + iters + 1)))
step=0
for ((size = minb; size <= maxb; size *= factor)); do
	# Every other size the other way round: a machine whose speed drifts
	# over the run then favours no path.
	order=("${plist[@]}")
	if [ $((step++ % 2)) -eq 1 ]; then
		order=()
		for ((k = ${#plist[@]} - 1; k >= 0; k--)); do order+=("${plist[k]}"); done
	fi
	for p in "${order[@]}"; do
		host=
		[ "$p" = rc ] && host=0
		t0=$(fabric_tx_sum $host)
		case $p in
		ring) run_ours "$size" -t ring ;;
		switch) run_ours "$size" -t switch -s "$FABRIC_SW_IP_0:4791" ;;
		hier) run_ours "$size" -t hierarchy -s "$FABRIC_SW_IP_0:4791" -s "$FABRIC_SW_IP_1:4791" \
			--spine "$FABRIC_SW_IP_2:4791" ;;
		mpi) run_mpi "$size" ;;
		dropin) run_mpi "$size" "${dropin_env[@]}" -x IBV_COLL_MPI_TOPOLOGY=ring ;;
		dropin-sw) run_mpi "$size" "${dropin_env[@]}" -x IBV_COLL_MPI_TOPOLOGY=switch \
			-x IBV_COLL_MPI_SWITCH="$FABRIC_SW_IP_0:4791" ;;
		rc) run_rc "$size" ;;
		esac
		ok=$?
		t1=$(fabric_tx_sum $host)
		if [ $ok -ne 0 ]; then
			rows[$p,$size]="failed"
			continue
		fi
		if [ "$p" = rc ]; then
			# time per message, GB/s, #wrong (the server checks; a
			# mismatch fails the run), wire/S of the sender, how
			rows[$p,$size]=$(awk -v d=$((t1 - t0)) -v s="$size" '{
				printf "%.1f %.4f 0 %.3f rc-write\n", s / ($2 * 1048576) * 1e6,
					$2 * 1048576 / 1e9, d / ($1 * s) }' "$tmp/row")
		else
			wire=$(awk -v d=$((t1 - t0)) -v n="$n" -v o="$ops" -v s="$size" \
				'BEGIN { printf "%.3f", d / n / o / s }')
			# time busbw #wrong(out+in) wire/S ran (ours: the last field)
			rows[$p,$size]=$(awk -v w="$wire" -v p="$p" '{
				r = p == "mpi" ? "tcp" : p ~ /^dropin/ ? "drop-in" : $NF;
				print $6, $8, $9 + $13, w, r }' "$tmp/row")
		fi
		echo "# $p $size: ${rows[$p,$size]}" >&2
	done
done

bound_ring=$(awk -v b="$FABRIC_RATE_BPS" 'BEGIN { printf "%.4f", b / 8 / 1e9 }')
bound_sw=$(awk -v b="$FABRIC_RATE_BPS" -v n="$n" 'BEGIN { printf "%.4f", b / 8 / 1e9 * 2 * (n - 1) / n }')
ideal_ring=$(awk -v n="$n" 'BEGIN { printf "%.3f", 2 * (n - 1) / n }')

echo "# bench-fabric: allreduce, float, sum, blocking; $n hosts, one node (one rank) each;" \
	"$iters timed + $warmup warm-up runs per size, every result checked"
echo "# fabric: tc htb rate $FABRIC_RATE with a ${FABRIC_QUEUE} tail-drop queue on each host's eth0" \
	"and on the bridge port facing it (both directions);" \
	"switch namespaces' links $( [ "$FABRIC_SW_RATE_BPS" -gt 0 ] &&
		echo "at $((FABRIC_SW_RATE_BPS / 1000000)) Mbit/s" || echo unshaped)"
if [ -n "$impair" ]; then
	echo "# emulator: IBV_COLL_EMU_IMPAIR=$impair on every node's NIC and every switch (ours only;" \
		"Open MPI's TCP does not pass through it)"
else
	echo "# emulator: no impairment (IBV_COLL_EMU_IMPAIR unset); the fabric adds no delay, loss" \
		"or ECN marking beyond its queues' tail drops"
fi
echo "# busbw/bound: ring and Open MPI against R = $bound_ring GB/s; switch and hierarchy" \
	"against R x 2(N-1)/N = $bound_sw GB/s"
echo "# wire/S: bytes a host put on its link (eth0 tx_bytes, headers included) per allreduce / S;" \
	"ideal $ideal_ring round a ring, 1 through a switch"
for p in "${plist[@]}"; do
	case $p in
	ring) title="ours, round the NIC ring (ibv_coll_perf -t ring)" b=$bound_ring ideal=$ideal_ring ;;
	switch) title="ours, through one switch (ibv_coll_perf -t switch, ibv_coll_switchd in a switch namespace)"
		b=$bound_sw ideal=1 ;;
	hier) title="ours, two leaves under a spine (ibv_coll_perf -t hierarchy --spine; hosts 0-$((half - 1)) on leaf 0)"
		b=$bound_sw ideal=1 ;;
	mpi) title="Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{ print $NF }'), ob1/TCP over eth0, one rank per host (mpi_allreduce_perf)"
		b=$bound_ring ideal=$ideal_ring ;;
	dropin) title="the same MPI benchmark with libibv_coll_mpi.so preloaded, round the NIC ring (IBV_COLL_MPI_TOPOLOGY=ring)"
		b=$bound_ring ideal=$ideal_ring ;;
	dropin-sw) title="the same MPI benchmark with libibv_coll_mpi.so preloaded, through one switch (IBV_COLL_MPI_TOPOLOGY=switch)"
		b=$bound_sw ideal=1 ;;
	rc) title="ours, an RC WRITE stream host 0 -> host 1, messages of each size for 3 s (ibv_coll_rc_bw -D 3; time per message, bandwidth, wire/S of the sender)"
		b=$bound_ring ideal=1 ;;
	esac
	bf=$(awk -v n="$n" 'BEGIN { print 2 * (n - 1) / n }') # nccl-tests' allreduce factor
	[ "$p" = rc ] && bf=1                                  # a point-to-point stream
	echo
	echo "## $title"
	printf "%12s  %10s  %5s  %5s  %9s  %6s  %6s  %11s  %7s  %5s  %6s  %s\n" \
		"size(B)" "count" "type" "redop" "time(us)" "algbw" "busbw" "busbw/bound" "wire/S" \
		"ideal" "#wrong" "ran"
	for ((size = minb; size <= maxb; size *= factor)); do
		r=${rows[$p,$size]:-failed}
		if [ "$r" = failed ]; then
			if [ "$p" = rc ]; then
				printf "%12d  %10s  %5s  %5s  %9s\n" "$size" - bytes - failed
			else
				printf "%12d  %10d  %5s  %5s  %9s\n" "$size" $((size / 4)) float sum failed
			fi
			continue
		fi
		read -r t bw wrong wire ran <<<"$r"
		awk -v s="$size" -v t="$t" -v bw="$bw" -v b="$b" -v w="$wire" -v id="$ideal" \
			-v wr="$wrong" -v ran="$ran" -v bf="$bf" 'BEGIN {
			alg = s / t / 1e3; bus = alg * bf
			rc = ran ~ /^rc/ # a byte stream: no elements, no operation
			printf "%12d  %10s  %5s  %5s  %9.0f  %6.3f  %6.3f  %11.2f  %7.2f  %5.2f  %6d  %s\n",
				s, rc ? "-" : s / 4, rc ? "bytes" : "float", rc ? "-" : "sum", t, alg, bus,
				bus / b, w, id, wr, ran }'
	done
done
if [ ${#sw_pids[@]} -gt 0 ]; then
	echo
	for j in 0 1 2; do kill -TERM "${sw_pids[$j]}" 2>/dev/null; done
	wait 2>/dev/null
	sw_pids=()
	grep -h "total:" "$tmp"/sw*.log | sed 's/^/# switch /'
fi
