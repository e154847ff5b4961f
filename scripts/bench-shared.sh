#!/bin/bash
# bench-shared - the shared device against today's model of one
# device per process, side by side in one run: allreduce, float, sum,
# blocking (one allreduce at a time, as MPI_Allreduce is: ibv_coll_perf
# -z 1), every result checked element by element (-c 1).
#
#   scripts/bench-shared.sh [-p local|fabric|all] [-b SIZES] [-i ITERS] [-w WARMUP]
#       [-t SECONDS]
#
#   -p  local: 1 host x 4 processes on the shared device (ibv_coll_run
#       -n 1 -p 4, IBV_COLL_CRXE_SHARED=y) against 4 private devices
#       (ibv_coll_run -n 4 -k 1): time, busbw and their ratios, sizes -b;
#       fabric: 2 hosts (network namespaces of tests/multihost/fabric.sh,
#       root only) x 4 processes, through one ibv_coll_switchd, against the
#       same 8 processes on private devices (8 nodes through the switch):
#       wire bytes per host (eth0 tx_bytes in its namespace) per allreduce
#       over S, target <= 1.03 (private: about 4);  all: both (default)
#   -b  sizes per rank, comma-separated, K and M suffixes (8,1M,4M,16M,64M)
#   -i, -w  timed and warm-up runs per size (local: 20, 3; fabric: 5, 1)
#   -t  time limit of one ibv_coll_perf run in seconds (300)
# Environment: BUILD_DIR (build).
#
# Each size runs both models in turn, so that the machine's swings fall on
# both.  Time and busbw are ibv_coll_perf's, out of place (the slowest
# process's mean time; busbw for the job's ranks as nccl-tests defines it).
# A run that fails (a wrong element, an error) shows as "failed".
set -u
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
bench_name=bench-shared
# shellcheck source=scripts/bench-common.sh
. "$root/scripts/bench-common.sh"

usage() {
	sed -n '7,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

what=all sizes=8,1M,4M,16M,64M iters="" warmup="" tlimit=300
if [ "${1:-}" != "--inner" ]; then
	while getopts "p:b:i:w:t:" o; do
		case $o in
		p) what=$OPTARG ;;
		b) sizes=$OPTARG ;;
		i) iters=$OPTARG ;;
		w) warmup=$OPTARG ;;
		t) tlimit=$OPTARG ;;
		*) usage ;;
		esac
	done
	shift $((OPTIND - 1))
	[ $# -eq 0 ] || { echo "bench-shared: unexpected argument $1" >&2; usage; }
	case $what in local | fabric | all) ;; *) usage ;; esac
	for v in $iters $warmup "$tlimit"; do
		[[ $v =~ ^[0-9]+$ ]] || { echo "bench-shared: '$v' is not a number" >&2; exit 2; }
	done
else
	shift
	what=$1 sizes=$2 iters=$3 warmup=$4 tlimit=$5
fi

run=$build/tools/ibv_coll_run
perf=$build/tools/ibv_coll_perf
devd=$build/providers/crxe/ibv_coll_devd
switchd=$build/emulator/ibv_coll_switchd
for b in "$run" "$perf" "$devd" "$switchd"; do
	[ -x "$b" ] || { echo "bench-shared: $b is missing; build first" >&2; exit 2; }
done
IFS=, read -r -a slist <<<"$sizes"
blist=()
for s in "${slist[@]}"; do blist+=("$(bench_bytes "$s")"); done
export IBV_COLL_CRXE_DEVD=$devd

# perf_row OUT SIZE: the table row of SIZE in OUT as "time busbw #wrong(out+in) ran".
perf_row() {
	awk -v s="$2" '{ sub(/^\[[0-9]+\] /, "") } $1 == s && NF >= 15 {
		print $6, $8, $9 + $13, $NF; exit }' "$1"
}

# ---- 1 host x 4 processes ----------------------------------------------
bench_local() {
	local it=${iters:-20} wu=${warmup:-3} tmp size m rc row
	tmp=$(mktemp -d /tmp/bench-shared.XXXXXX)
	declare -A rows
	for size in "${blist[@]}"; do
		for m in shared private; do
			if [ $m = shared ]; then
				# A daemon of its own for this run: it leaves when idle.
				IBV_COLL_CRXE_SHARED=y timeout "$tlimit" "$run" -n 1 -p 4 -k 1 -- \
					"$perf" -b "$size" -e "$size" -n "$it" -w "$wu" -c 1 -z 1 -d float \
					-o sum >"$tmp/out" 2>&1
			else
				IBV_COLL_CRXE_SHARED=n timeout "$tlimit" "$run" -n 4 -k 1 -- \
					"$perf" -b "$size" -e "$size" -n "$it" -w "$wu" -c 1 -z 1 -d float \
					-o sum >"$tmp/out" 2>&1
			fi
			rc=$?
			row=$(perf_row "$tmp/out" "$size")
			if [ $rc -ne 0 ] || [ -z "$row" ]; then
				echo "bench-shared: $m at $size bytes failed:" >&2
				grep -v "^\[[0-9]\] #" "$tmp/out" | tail -n 4 | sed 's/^/  /' >&2
				row=failed
			fi
			rows[$m,$size]=$row
			echo "# local $m $size: $row" >&2
		done
	done
	rm -rf "$tmp"
	echo "# bench-shared (a): allreduce, float, sum, blocking; 4 ranks on this host, one per process;" \
		"$it timed + $wu warm-up runs per size, every result checked"
	echo "# shared: ibv_coll_run -n 1 -p 4 -k 1 (one node: the 4 processes on the host's one" \
		"device, IBV_COLL_CRXE_SHARED=y)"
	echo "# private: ibv_coll_run -n 4 -k 1 (today's model: 4 nodes, a device each, round the" \
		"NIC ring on the loopback)"
	echo "# target: busbw x1.3 or more from 1 MiB; 8-byte latency not worse (ratio <= 1)"
	printf "%12s  %10s %8s %7s  %10s %8s %7s  %8s %8s\n" "size(B)" "shared(us)" "busbw" \
		"#wrong" "private" "busbw" "#wrong" "bw ratio" "t ratio"
	for size in "${blist[@]}"; do
		awk -v s="$size" -v a="${rows[shared,$size]}" -v b="${rows[private,$size]}" 'BEGIN {
			na = split(a, x, " "); nb = split(b, y, " ")
			printf "%12d", s
			if (na >= 3) printf "  %10.2f %8.3f %7d", x[1], x[2], x[3]
			else printf "  %10s %8s %7s", "failed", "-", "-"
			if (nb >= 3) printf "  %10.2f %8.3f %7d", y[1], y[2], y[3]
			else printf "  %10s %8s %7s", "failed", "-", "-"
			if (na >= 3 && nb >= 3)
				printf "  %8.2f %8.2f\n", (y[2] > 0 ? x[2] / y[2] : 0), (y[1] > 0 ? x[1] / y[1] : 0)
			else printf "  %8s %8s\n", "-", "-"
		}'
	done
	echo "# bw ratio: shared busbw / private busbw; t ratio: shared time / private time"
}

# ---- 2 hosts x 4 processes through a switch -----------------------------
bench_fabric() {
	if [ "$(id -u)" != 0 ]; then
		echo "# bench-shared (b): skipped, network namespaces need root"
		return 0
	fi
	"$root/tests/multihost/fabric.sh" -n 2 -s 1 -m 9000 -- \
		"$0" --inner fabric-inner "$sizes" "${iters:-5}" "${warmup:-1}" "$tlimit"
}

bench_fabric_inner() {
	local it=$iters wu=$warmup tmp size m rc row t0 t1 sw_pid ops
	tmp=$(mktemp -d /tmp/bench-shared.XXXXXX)
	ip netns exec "$FABRIC_SW_NS_0" "$switchd" -p 4791 -n sw0 >"$tmp/sw.log" 2>&1 &
	sw_pid=$!
	sleep 0.5
	kill -0 $sw_pid 2>/dev/null || { cat "$tmp/sw.log" >&2; echo "bench-shared: no switch" >&2; return 1; }
	# Each process runs in the namespace of its node's host (bash -c below).
	declare -A rows
	ops=$((2 * (wu + it + 1))) # out of place and in place: warm-up, timed, checked
	for size in "${blist[@]}"; do
		for m in shared private; do
			t0=$(fabric_tx_sum)
			if [ $m = shared ]; then
				# 2 nodes of 4 processes: node j on host j.
				IBV_COLL_CRXE_SHARED=y timeout "$tlimit" "$run" -n 2 -p 4 -k 1 -- \
					bash -c 'ns=FABRIC_NS_$IBVC_JOB_NODE; exec ip netns exec "${!ns}" "$@"' \
					perf "$perf" -D crxe_eth0 -t switch -s "$FABRIC_SW_IP_0:4791" \
					-b "$size" -e "$size" -n "$it" -w "$wu" -c 1 -z 1 -d float -o sum \
					>"$tmp/out" 2>&1
			else
				# 8 nodes of one process, a device each: nodes 0-3 on host 0.
				IBV_COLL_CRXE_SHARED=n timeout "$tlimit" "$run" -n 8 -k 1 -- \
					bash -c 'ns=FABRIC_NS_$((IBVC_JOB_NODE / 4)); exec ip netns exec "${!ns}" "$@"' \
					perf "$perf" -D crxe_eth0 -t switch -s "$FABRIC_SW_IP_0:4791" \
					-b "$size" -e "$size" -n "$it" -w "$wu" -c 1 -z 1 -d float -o sum \
					>"$tmp/out" 2>&1
			fi
			rc=$?
			t1=$(fabric_tx_sum)
			row=$(perf_row "$tmp/out" "$size")
			if [ $rc -ne 0 ] || [ -z "$row" ]; then
				echo "bench-shared: fabric $m at $size bytes failed:" >&2
				grep -v "^\[[0-9]\] #" "$tmp/out" | tail -n 4 | sed 's/^/  /' >&2
				row=failed
			else
				row="$row $(awk -v d=$((t1 - t0)) -v o="$ops" -v s="$size" \
					'BEGIN { printf "%.3f", d / 2 / o / s }')"
			fi
			rows[$m,$size]=$row
			echo "# fabric $m $size: $row" >&2
		done
	done
	kill $sw_pid 2>/dev/null
	wait 2>/dev/null
	echo "# bench-shared (b): allreduce, float, sum, blocking; 2 hosts (network namespaces," \
		"MTU 9000, unshaped) x 4 processes of one rank, through one ibv_coll_switchd;" \
		"$it timed + $wu warm-up runs per size, every result checked"
	echo "# shared: ibv_coll_run -n 2 -p 4 -k 1, each host's 4 processes on its one device" \
		"(IBV_COLL_CRXE_SHARED=y): 2 nodes"
	echo "# private: ibv_coll_run -n 8 -k 1 (today's model: a device per process, 8 nodes)"
	echo "# wire/S: bytes a host put on eth0 (tx_bytes, headers included) per allreduce / S," \
		"the mean of the 2 hosts; target <= 1.03 shared (private: about 4)"
	printf "%12s  %10s %8s %7s %7s  %10s %8s %7s %7s  %s\n" "size(B)" "shared(us)" "busbw" \
		"#wrong" "wire/S" "private" "busbw" "#wrong" "wire/S" "ran (shared, private)"
	for size in "${blist[@]}"; do
		awk -v s="$size" -v a="${rows[shared,$size]}" -v b="${rows[private,$size]}" 'BEGIN {
			na = split(a, x, " "); nb = split(b, y, " ")
			printf "%12d", s
			if (na >= 5) printf "  %10.1f %8.3f %7d %7.3f", x[1], x[2], x[3], x[5]
			else printf "  %10s %8s %7s %7s", "failed", "-", "-", "-"
			if (nb >= 5) printf "  %10.1f %8.3f %7d %7.3f", y[1], y[2], y[3], y[5]
			else printf "  %10s %8s %7s %7s", "failed", "-", "-", "-"
			printf "  %s, %s\n", (na >= 5 ? x[4] : "-"), (nb >= 5 ? y[4] : "-")
		}'
	done
	grep -h "total:" "$tmp"/sw.log 2>/dev/null | sed 's/^/# switch /'
	rm -rf "$tmp"
}

if [ "$what" = fabric-inner ]; then
	bench_fabric_inner
	exit
fi
[ "$what" = fabric ] || bench_local
[ "$what" = local ] || bench_fabric
