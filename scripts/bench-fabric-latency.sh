#!/bin/bash
# bench-fabric-latency - how long a small allreduce takes while a big one
# runs on the same shaped links: the queues a congestion controller keeps
# short, or does not.  On the fabric of tests/multihost/fabric.sh (as
# scripts/bench-fabric.sh), a ring job reduces BIG bytes over and over while
# a second job, on the same hosts, runs K small allreduces of SMALL bytes
# one at a time (each a fresh ibv_coll_perf, one timed run after one
# warm-up); prints p50, p99 and the maximum of node 0's times, with the
# congestion controller on and off (IBV_COLL_EMU_CC=1, 0) for both jobs.
#
#   scripts/bench-fabric-latency.sh [-n HOSTS] [-r RATE] [-q QUEUE] [-s SMALL]
#       [-B BIG] [-k K]
#
#   -n, -r, -q  as bench-fabric.sh (4, 400mbit, 256kb)
#   -s  the small allreduce's bytes (8K); -B the big one's (64M)
#   -k  small allreduces per setting (40)
# Environment: BUILD_DIR (build).  Needs root; without it, exits 77.
set -u
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac

if [ "${1:-}" != "--inner" ]; then
	hosts=4 rate=400mbit queue=256kb
	args=("$@")
	while getopts "n:r:q:s:B:k:" o; do
		case $o in
		n) hosts=$OPTARG ;;
		r) rate=$OPTARG ;;
		q) queue=$OPTARG ;;
		s | B | k) ;;
		*) sed -n '11,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
		esac
	done
	exec "$root/tests/multihost/fabric.sh" -n "$hosts" -m 9000 -r "$rate" -q "$queue" -- \
		"$0" --inner "${args[@]}"
fi
shift

n=$FABRIC_HOSTS small=8K big=64M k=40
OPTIND=1
while getopts "n:r:q:s:B:k:" o; do
	case $o in
	s) small=$OPTARG ;;
	B) big=$OPTARG ;;
	k) k=$OPTARG ;;
	*) ;;
	esac
done
perf=$build/tools/ibv_coll_perf
[ -x "$perf" ] || { echo "bench-fabric-latency: $perf is missing; build first" >&2; exit 2; }
tmp=$(mktemp -d)
big_pids=()
cleanup() {
	for p in "${big_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# perf_job TAG SIZE ITERS: one ibv_coll_perf per host, ring, fp32 sum;
# their pids in jp.
perf_job() {
	local tag=$1 size=$2 iters=$3 i ns
	jp=()
	for ((i = 0; i < n; i++)); do
		ns=FABRIC_NS_$i
		ip netns exec "${!ns}" timeout 300 "$perf" -D crxe_eth0 --boot "unix:$tmp/$tag.sock" \
			--node "$i" --nodes "$n" -b "$size" -e "$size" -n "$iters" -w 1 -c 1 -z 1 \
			-d float -o sum -t ring >"$tmp/$tag.out$i" 2>&1 &
		jp+=($!)
	done
}

echo "# bench-fabric-latency: $n hosts, tc htb $FABRIC_RATE with $FABRIC_QUEUE tail-drop queues;" \
	"$k allreduces of $small (fp32 sum, ring) while a ring job reduces $big over and over"
printf "%-22s  %9s  %9s  %9s  %9s\n" "controller" "idle p50" "p50(us)" "p99(us)" "max(us)"
for cc in 1 0; do
	export IBV_COLL_EMU_CC=$cc
	# Idle: the small allreduce alone.
	idle=()
	for ((j = 0; j < 5; j++)); do
		perf_job small "$small" 1
		wait "${jp[@]}"
		idle+=("$(awk -v s="$(numfmt --from=iec "$small")" '$1 == s && NF >= 15 { print $6; exit }' \
			"$tmp/small.out0")")
	done
	perf_job big "$big" 1000
	big_pids=("${jp[@]}")
	sleep 2
	lat=()
	t0=$(date +%s.%N)
	for ((j = 0; j < k; j++)); do
		perf_job small "$small" 1
		wait "${jp[@]}" || { echo "bench-fabric-latency: a small allreduce failed:" >&2
			tail -n 3 "$tmp"/small.out* >&2; exit 1; }
		lat+=("$(awk -v s="$(numfmt --from=iec "$small")" '$1 == s && NF >= 15 { print $6; exit }' \
			"$tmp/small.out0")")
	done
	for p in "${big_pids[@]}"; do kill -INT "$p" 2>/dev/null; done
	wait "${big_pids[@]}" 2>/dev/null
	big_pids=()
	printf '%s\n' "${lat[@]}" | sort -g >"$tmp/lat"
	printf '%s\n' "${idle[@]}" | sort -g >"$tmp/idle"
	awk -v cc="$cc" -v idle="$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' "$tmp/idle")" '
		{ a[NR] = $1 }
		END {
			p50 = a[int((NR + 1) / 2)]; i99 = int(NR * 0.99 + 0.999); if (i99 > NR) i99 = NR
			printf "%-22s  %9.0f  %9.0f  %9.0f  %9.0f\n",
				cc ? "IBV_COLL_EMU_CC=1" : "IBV_COLL_EMU_CC=0", idle, p50, a[i99], a[NR]
		}' "$tmp/lat"
done
