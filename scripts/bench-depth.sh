#!/bin/bash
# bench-depth - several collectives in flight per job
# (IBV_COLL_EMU_COLL_DEPTH) against one at a time, on this machine.
#
# ibv_coll_perf under ibv_coll_run, NP processes on loopback, keeps 32
# collectives posted (-z 0, as nccl-tests keeps a stream busy) of each size
# from MINBYTES to MAXBYTES (up to IBV_COLL_EMU_XCHG_BYTES they run as the
# pairwise exchange or the broadcast tree, above it round the ring: e.g.
# MINBYTES=64K MAXBYTES=4M FACTOR=4 ITERS=20 WARMUP=3), results checked.  Each
# size runs with IBV_COLL_EMU_COLL_DEPTH=1 (the baseline: the NIC starts a
# collective when the one before it has completed) and with each depth of
# DEPTHS, alternating REPEAT times (even rounds the other way round), and
# the table gives each one's median time per collective (the fastest and
# slowest in brackets) and the speed-up over depth 1.  The blocking loop (-z 1: one posted at a time,
# which no depth changes) is printed beside it for reference.
#
# With TOPOLOGY=switch every run goes through one ibv_coll_switchd started
# for the whole script (SWITCH_ARGS: its options, e.g. "--threads 1").
#
# Usage: scripts/bench-depth.sh [ibv_coll_perf options...]
#   e.g. scripts/bench-depth.sh -C bcast
# Environment: BUILD_DIR (build), NP (4), MINBYTES (8), MAXBYTES (4K),
#   FACTOR (8), ITERS (1000), WARMUP (100), DEPTHS ("4 16"), REPEAT (3),
#   TIMEOUT (120 s per run), TOPOLOGY (ring: the exchange and the ring;
#   switch), SWITCH_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bench_name=bench-depth
. scripts/bench-common.sh
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
np=${NP:-4}
iters=${ITERS:-1000} warmup=${WARMUP:-100}
depths=(${DEPTHS:-4 16})
repeat=${REPEAT:-3}
timeout=${TIMEOUT:-120}
extra=("$@")
topology=${TOPOLOGY:-ring}
case $topology in
ring) ;;
switch) ;;
*)
	echo "bench-depth: TOPOLOGY=$topology: ring or switch" >&2
	exit 2
	;;
esac

echo "== build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target ibv_coll_run ibv_coll_perf ibv_coll_switchd >/dev/null

bench_tmpdir
perf_args=()
if [ "$topology" = switch ]; then
	# shellcheck disable=SC2086 # SWITCH_ARGS is a list of options
	start_switchd "$build/emulator/ibv_coll_switchd" "$tmp" -n switch0 ${SWITCH_ARGS:-}
	perf_args=(-t switch -s "127.0.0.1:$sw_port")
	echo "switch: ibv_coll_switchd on udp port $sw_port"
fi

# run DEPTH BLOCKING: the out-of-place time per collective (us) of each size,
# one "bytes time" line each.
run() {
	IBV_COLL_EMU_COLL_DEPTH=$1 "$build/tools/ibv_coll_run" --timeout "$timeout" -n "$np" \
		-k 1 -- "$build/tools/ibv_coll_perf" "${perf_args[@]}" -d float -o sum -c 1 -z "$2" \
		-b "${MINBYTES:-8}" -e "${MAXBYTES:-4K}" -f "${FACTOR:-8}" -n "$iters" \
		-w "$warmup" --no-progress "${extra[@]}" 2>&1 |
		awk '/^\[0\] +[0-9]/ { print $2, $7; if ($10 != 0 || $14 != 0) bad = 1 }
		     END { exit bad }' || {
		echo "bench-depth: ibv_coll_perf failed at depth $1" >&2
		exit 1
	}
}

echo "== $np processes, 32 posted, $repeat runs each, alternating"
for r in $(seq "$repeat"); do
	# Even rounds the other way round: a machine whose speed drifts over
	# the rounds then favours no depth.
	order=(1 "${depths[@]}")
	if [ $((r % 2)) -eq 0 ]; then
		for ((k = ${#order[@]} - 1; k >= 0; k--)); do
			run "${order[k]}" 0 >"$tmp/d${order[k]}.$r"
		done
	else
		for d in "${order[@]}"; do
			run "$d" 0 >"$tmp/d$d.$r"
		done
	fi
	run 1 1 >"$tmp/blocking.$r"
done

# stats FILES...: per size, "median min max" of the time over the files.
stats() {
	cat "$@" | sort -n -k1,1 -k2,2g | awk '
		{ t[$1] = t[$1] " " $2; n[$1]++ }
		END { for (b in t) { k = split(substr(t[b], 2), v, " ");
			printf "%s %s %s %s\n", b, v[int((k + 1) / 2)], v[1], v[k] } }' | sort -n
}
stats "$tmp"/d1.* >"$tmp/s1"
stats "$tmp"/blocking.* >"$tmp/sb"
hdr="| bytes | depth 1 (baseline) |"
sep="|---:|---:|"
for d in "${depths[@]}"; do
	stats "$tmp"/d"$d".* >"$tmp/s$d"
	hdr="$hdr depth $d | speed-up |"
	sep="$sep---:|---:|"
done
echo
echo "time per collective, us, median [fastest, slowest] of $repeat runs"
echo "$hdr blocking (-z 1) |"
echo "$sep---:|"
while read -r b m lo hi; do
	line="| $b | $m [$lo, $hi] |"
	for d in "${depths[@]}"; do
		read -r _ dm dlo dhi < <(awk -v b="$b" '$1 == b' "$tmp/s$d")
		line="$line $dm [$dlo, $dhi] | $(awk -v a="$m" -v c="$dm" 'BEGIN { printf "%.2fx", a / c }') |"
	done
	read -r _ bm _ _ < <(awk -v b="$b" '$1 == b' "$tmp/sb")
	echo "$line $bm |"
done <"$tmp/s1"
