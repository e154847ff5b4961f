#!/bin/bash
# bench-nccl - CollNet allreduce through the NCCL plugin (bench/nccl_collnet_perf:
# the plugin dlopen()ed and driven as NCCL's CollNet proxy drives it, each
# allreduce cut into the proxy's steps with up to 8 requests in flight)
# beside ibv_coll_perf under ibv_coll_run (the same allreduces, each one
# collective WR, up to 32 in flight), on this host, alternating per size
# (and in even rounds the other way round) so that both see the machine
# alike.  Prints each side's median time and
# busbw of ROUNDS runs and their ratio (perf's time over the plugin's, the
# plugin's busbw over perf's); the target is >= 0.90 at NP=4.
# Beside them, for sizes above the chunk, ibv_coll_perf once more cut as
# the proxy cuts (allreduces of CHUNK bytes, --depth INFLIGHT in flight;
# its time per chunk times the chunks of the size): what the device
# itself takes for the requests the plugin posts, so that the plugin's
# own cost (at.chunk = that time over the plugin's) shows apart from the
# cost of smaller collectives.
# Every result is checked on both sides (a wrong element fails the run).
#
# Usage: scripts/bench-nccl.sh [-t ring|switch]
# Environment: BUILD_DIR (build), NP (4), SIZES ("8 64K 1M 4M 16M"),
#   ROUNDS (3), ITERS (20), WARMUP (3), CHUNK (512K: NCCL_BUFFSIZE 4 MiB /
#   NCCL_STEPS 8), INFLIGHT (8), DEVICE (crxe_lo).
set -euo pipefail
cd "$(dirname "$0")/.."
bench_name=bench-nccl
. scripts/bench-common.sh
build=${BUILD_DIR:-build}
np=${NP:-4} rounds=${ROUNDS:-3} iters=${ITERS:-20} warmup=${WARMUP:-3}
chunk=${CHUNK:-512K} inflight=${INFLIGHT:-8} dev=${DEVICE:-crxe_lo}
sizes=${SIZES:-"8 64K 1M 4M 16M"}
topo=ring
while getopts "t:" o; do
	case $o in
	t) topo=$OPTARG ;;
	*) echo "usage: $0 [-t ring|switch]" >&2; exit 2 ;;
	esac
done
for p in tools/ibv_coll_run tools/ibv_coll_perf bench/nccl_collnet_perf emulator/ibv_coll_switchd; do
	[ -x "$build/$p" ] || { echo "$build/$p: not built (cmake --build $build)" >&2; exit 2; }
done
bench_tmpdir
perf_sw=() nccl_env=(IBV_COLL_NCCL_DEVICE="$dev")
if [ "$topo" = switch ]; then
	start_switchd "$build/emulator/ibv_coll_switchd" "$tmp"
	perf_sw=(-t switch -s "127.0.0.1:$sw_port")
	nccl_env+=(IBV_COLL_NCCL_SWITCH="127.0.0.1:$sw_port" IBV_COLL_NCCL_TOPOLOGY=switch)
fi

# The run of median time: "time busbw".
median() { sort -g | awk '{ v[NR] = $0 } END { print (NR ? v[int((NR + 1) / 2)] : "nan nan") }'; }

echo "# $(nproc) cores, $np ranks, $topo, fp32 sum; plugin: chunk $chunk, $inflight in flight"
printf "#%11s %11s %9s %11s %9s %8s %13s %8s\n" size "perf(us)" busbw "plugin(us)" busbw ratio \
	"perf@chunk(us)" at.chunk
# One run of each side at size $s; each adds its row to its side's file.
run_perf() {
	"$build/tools/ibv_coll_run" -n "$np" -- "$build/tools/ibv_coll_perf" -D "$dev" \
		"${perf_sw[@]}" -b "$s" -e "$s" -n "$iters" -w "$warmup" -z 0 -c 1 >"$tmp/p.out" 2>&1 ||
		{ cat "$tmp/p.out"; exit 1; }
	grep -q 'Wrong elements *: 0 OK' "$tmp/p.out" || { cat "$tmp/p.out"; exit 1; }
	sed 's/^\[0\] *//' "$tmp/p.out" | awk '$1 ~ /^[0-9]+$/ { print $6, $8 }' | head -1 >>"$tmp/perf"
}
run_plugin() {
	env "${nccl_env[@]}" "$build/bench/nccl_collnet_perf" -n "$np" -b "$s" -e "$s" \
		-i "$iters" -w "$warmup" -c "$chunk" -k "$inflight" >"$tmp/n.out" 2>&1 ||
		{ cat "$tmp/n.out"; exit 1; }
	awk '$1 ~ /^[0-9]+$/ { if ($6 != 0) exit 1; print $3, $5 }' "$tmp/n.out" >>"$tmp/nccl" ||
		{ cat "$tmp/n.out"; exit 1; }
}
run_cut() {
	[ "$cuts" -gt 0 ] || return 0
	"$build/tools/ibv_coll_run" -n "$np" -- "$build/tools/ibv_coll_perf" -D "$dev" \
		"${perf_sw[@]}" -b "$chunk" -e "$chunk" -n "$((iters * cuts))" -w "$((warmup * cuts))" \
		-z 0 --depth "$inflight" -c 1 >"$tmp/c.out" 2>&1 || { cat "$tmp/c.out"; exit 1; }
	grep -q 'Wrong elements *: 0 OK' "$tmp/c.out" || { cat "$tmp/c.out"; exit 1; }
	sed 's/^\[0\] *//' "$tmp/c.out" | awk -v k="$cuts" '$1 ~ /^[0-9]+$/ { print $6 * k }' |
		head -1 >>"$tmp/cut"
}

chunk_b=$(bench_bytes "$chunk")
for s in $sizes; do
	: >"$tmp/perf" && : >"$tmp/nccl" && : >"$tmp/cut"
	s_b=$(bench_bytes "$s")
	cuts=$((s_b > chunk_b ? s_b / chunk_b : 0))
	for r in $(seq "$rounds"); do
		# perf, plugin, cut in odd rounds, the other way round in even
		# ones: a machine whose speed drifts over the rounds then
		# favours no side.
		if [ $((r % 2)) -eq 1 ]; then
			run_perf
			run_plugin
			run_cut
		else
			run_cut
			run_plugin
			run_perf
		fi
	done
	read -r pt pb <<<"$(median <"$tmp/perf")"
	read -r nt nb <<<"$(median <"$tmp/nccl")"
	ct=-
	[ "$cuts" -gt 0 ] && ct=$(median <"$tmp/cut")
	printf " %11s %11s %9s %11s %9s %8s %13s %8s\n" "$s" "$pt" "$pb" "$nt" "$nb" \
		"$(awk -v a="$pt" -v b="$nt" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
		"$ct" "$(awk -v a="$ct" -v b="$nt" 'BEGIN { if (a != "-" && b > 0) printf "%.2f", a / b; else print "-" }')"
done
