#!/bin/bash
# claims-fabric - a claim's runs on real processes: the hosts of
# tests/multihost/fabric.sh with shaped links, one ibv_coll_switchd in a
# switch namespace, started afresh for every run, and ibv_coll_perf on
# every host (allreduce, fp32 sum, blocking, every result checked).
#
#   bench/claims/claims-fabric.sh [-n HOSTS] [-r RATE] [-q QUEUE]
#       [-I IMPAIR] [-i ITERS] [-p MBPS] PLAN CSV
#
#   -n  hosts, one rank each (4); -r, -q  each host link's rate and queue
#   (150mbit, 256kb; the switch's link HOSTS x RATE); -I  IBV_COLL_EMU_IMPAIR
#   for every NIC and the switch (delay=500us: a block's round trip host -
#   switch - host is 1 ms more than its time on the wires); -i  timed
#   runs per row (3, after one untimed); -p  the NICs' line rate in Mbit/s
#   (IBV_COLL_EMU_PORT_MBPS: blocks through the switch leave no faster, as
#   from a hardware port; default the link's rate; 0: as fast as the
#   window lets them, into the link's queue).
#   PLAN  a file, one run a line: KEY|BYTES|SWITCHD-ARGS|PERF-ARGS; KEY
#         is copied to the front of the row (CSV fields), BYTES the size a
#         rank, SWITCHD-ARGS what ibv_coll_switchd gets besides its port
#         and name, PERF-ARGS what ibv_coll_perf gets besides the size,
#         the rendezvous and -s (the switch)
#   CSV   each run appends "KEY,BYTES,time_us,busbw_bound,wire_s,ran,
#         granted,denials": node 0's mean time (out of place), busbw
#         against the switch's bound R x 2(N-1)/N, i.e. S / time / R
#         (whichever way it ran), the bytes a
#         host put on its link per allreduce over BYTES (eth0 tx_bytes,
#         headers included), how it ran (ibv_coll_perf's "ran": switch or
#         ring), and the switch's Seg units granted to the job and its
#         refusals (its counters at exit)
# Environment: BUILD_DIR (build); CLAIMS_FABRIC_KEEP set: the last row's
# outputs (every host's, the switch's log) are kept in /tmp/claims-fabric.kept.
# Needs root (network namespaces, tc);
# without it, exits 77.  Not deterministic: the CPU is shared.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
bench_name=claims-fabric
# shellcheck source=scripts/bench-common.sh
. "$root/scripts/bench-common.sh"

usage() {
	sed -n '7,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

if [ "${1:-}" != "--inner" ]; then
	hosts=4 rate=150mbit queue=256kb
	args=("$@")
	while getopts "n:r:q:I:i:p:" o; do
		case $o in
		n) hosts=$OPTARG ;;
		r) rate=$OPTARG ;;
		q) queue=$OPTARG ;;
		I | i | p) ;;
		*) usage ;;
		esac
	done
	shift $((OPTIND - 1))
	[ $# -eq 2 ] || usage
	[ -r "$1" ] || { echo "claims-fabric: no plan $1" >&2; exit 2; }
	[ "$(id -u)" -eq 0 ] || { echo "claims-fabric: needs root (network namespaces): skipped" >&2; exit 77; }
	exec "$root/tests/multihost/fabric.sh" -n "$hosts" -s 1 -m 9000 -r "$rate" -q "$queue" \
		-S auto -- "$0" --inner "${args[@]}"
fi
shift

# ---- inside the fabric -------------------------------------------------
n=$FABRIC_HOSTS impair=delay=500us iters=3 mbps=$((FABRIC_RATE_BPS / 1000000))
OPTIND=1
while getopts "n:r:q:I:i:p:" o; do
	case $o in
	I) impair=$OPTARG ;;
	i) iters=$OPTARG ;;
	p) mbps=$OPTARG ;;
	*) ;;
	esac
done
shift $((OPTIND - 1))
plan=$1 csv=$2
[[ $iters =~ ^[1-9][0-9]*$ ]] || { echo "claims-fabric: bad -i $iters" >&2; exit 2; }
[[ $mbps =~ ^[0-9]+$ ]] || { echo "claims-fabric: bad -p $mbps" >&2; exit 2; }
perf=$build/tools/ibv_coll_perf
switchd=$build/emulator/ibv_coll_switchd
for b in "$perf" "$switchd"; do
	[ -x "$b" ] || { echo "claims-fabric: $b is missing; build first" >&2; exit 2; }
done
tmp=$(mktemp -d /tmp/claims-fabric.XXXXXX)
sw=
cleanup() {
	[ -n "$sw" ] && kill "$sw" 2>/dev/null
	wait 2>/dev/null
	if [ -n "${CLAIMS_FABRIC_KEEP:-}" ]; then
		rm -rf /tmp/claims-fabric.kept && cp -r "$tmp" /tmp/claims-fabric.kept
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
export IBV_COLL_EMU_IMPAIR=$impair IBV_COLL_EMU_PORT_MBPS=$mbps
rbytes=$((FABRIC_RATE_BPS / 8))
# ibv_coll_perf runs 2 x (warm-up + timed + check) allreduces: out of
# place, then in place.
ops=$((2 * (1 + iters + 1)))
echo "# claims-fabric: $n hosts at $FABRIC_RATE (queue $FABRIC_QUEUE), switch link" \
	"$((FABRIC_SW_RATE_BPS / 1000000)) Mbit/s, IBV_COLL_EMU_IMPAIR=$impair," \
	"IBV_COLL_EMU_PORT_MBPS=$mbps; busbw/bound" \
	"= S / time / R (R = $rbytes B/s); $iters timed + 1 warm-up run per row" >&2

while IFS='|' read -r key size swargs perfargs; do
	[ -z "$key" ] || [ "${key:0:1}" = "#" ] && continue
	read -r -a sa <<<"$swargs"
	read -r -a pa <<<"$perfargs"
	# (Its grant is an INFO line; it is up once it wrote its port.)
	IBV_COLL_LOG_LEVEL=info start_switchd -N "$FABRIC_SW_NS_0" "$switchd" "$tmp" -n claims -j "${sa[@]}"
	sw=$sw_pid
	t0=$(fabric_tx_sum)
	rm -f "$tmp/boot.sock"
	pids=() st=0
	for ((i = 0; i < n; i++)); do
		ns=FABRIC_NS_$i
		ip netns exec "${!ns}" timeout 300 "$perf" -D crxe_eth0 --boot "unix:$tmp/boot.sock" \
			--node "$i" --nodes "$n" -b "$size" -e "$size" -n "$iters" -w 1 -c 1 -z 1 \
			-d float -o sum -s "$FABRIC_SW_IP_0:$sw_port" "${pa[@]}" >"$tmp/out$i" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || st=1; done
	t1=$(fabric_tx_sum)
	kill "$sw"
	wait "$sw" 2>/dev/null
	sw=
	row=$(awk -v s="$size" '$1 == s && NF >= 15 { print; exit }' "$tmp/out0")
	if [ $st -ne 0 ] || [ -z "$row" ]; then
		echo "claims-fabric: $key ($size bytes; switch $swargs; perf $perfargs) failed:" >&2
		for ((i = 0; i < n; i++)); do tail -n 3 "$tmp/out$i" | sed "s/^/  [$i] /" >&2; done
		exit 1
	fi
	# The grant (its log line) and the refusals (its totals at exit).
	units=$(grep -o 'granted [0-9]* Seg units' "$tmp/switch.log" | awk '$2 > m { m = $2 } END { print m + 0 }')
	denials=$(grep -o '"denials":[0-9]*' "$tmp/switch.log" | head -1 | cut -d: -f2)
	echo "$row" | awk -v k="$key" -v s="$size" -v b="$rbytes" -v d=$((t1 - t0)) -v n="$n" \
		-v o="$ops" -v g="$units" -v r="${denials:-0}" '{
		if ($9 + $13 != 0) { print "claims-fabric: " k ": wrong results" > "/dev/stderr"; exit 1 }
		printf "%s,%d,%s,%.3f,%.3f,%s,%d,%d\n", k, s, $6, s / ($6 * 1e-6) / b, d / n / o / s, $NF,
			g, r }' >>"$csv" || exit 1
	tail -n 1 "$csv" >&2
done <"$plan"
