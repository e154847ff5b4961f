#!/bin/bash
# Claim 004 - chained descriptors: the whole collective handed to the device
# as one work request costs the host one post and one completion, where a
# ring the host drives step by step (one RC SEND to the right neighbour and
# one receive from the left per step, the host adding each received chunk
# before the next) costs 2(N-1) of each and the reductions.  On real
# processes on this machine (ibv_coll_run, crxe_lo): per allreduce, the
# application thread's CPU time and its wake-ups, and the wall time, for
# N nodes and sizes; bench/claims/host_ring.c.  The emulated NIC's work
# is kept on its engine thread (IBV_COLL_EMU_APP_POLL_US=0), so the
# application thread's time is the application's.  Not deterministic: run it
# on a quiet machine; with more processes than cores the wall times
# measure the scheduler too.  Writes to docs/claims/ (OUT_DIR)
# 004-chained.csv, .md and .png.
#
#   bench/claims/004-chained.sh [-N "N..."] [-S "BYTES..."] [-i ITERS]
#       defaults: -N "2 4 8 16 32 64", -S "4096 65536 1048576 16777216
#       67108864", -i 20 (medians over the iterations after two untimed
#       ones); sizes above 16 MiB only up to 16 nodes (64 processes of 64
#       MiB and the host ring's chunks would want ~13 GB); about 5 minutes
set -euo pipefail
ns="2 4 8 16 32 64" sizes="4096 65536 1048576 16777216 67108864" iters=20
while getopts "N:S:i:h" o; do
	case $o in
	N) ns=$OPTARG ;;
	S) sizes=$OPTARG ;;
	i) iters=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 004-chained
bin=${BUILD_DIR:-$root/build}
ring=$bin/bench/host_ring run=$bin/tools/ibv_coll_run
[ -x "$ring" ] && [ -x "$run" ] || { echo "004-chained: build host_ring and ibv_coll_run" >&2; exit 2; }
csv=$out/004-chained.csv
echo "mode,nodes,bytes,wall_us,app_cpu_us,wakeups,wrong" >"$csv"
for n in $ns; do
	for s in $sizes; do
		[ "$s" -gt 16777216 ] && [ "$n" -gt 16 ] && continue
		for m in host device; do
			# The emulated NIC's work stays on its engine thread (a
			# polling application thread would otherwise run it).
			line=$(IBV_COLL_EMU_APP_POLL_US=0 timeout 300 "$run" -n "$n" -- "$ring" -m "$m" -s "$s" \
				-i "$iters" | sed 's/^\[0\] //') ||
				{ echo "004-chained: $m, $n nodes, $s bytes failed" >&2; exit 1; }
			case $line in *,0) ;; *) echo "004-chained: wrong results: $line" >&2; exit 1 ;; esac
			echo "$line" >>"$csv"
		done
	done
done
md_table "$csv" >"$out/004-chained.md"
cat "$out/004-chained.md"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/004-chained.png"
set datafile separator ","
set logscale xy
set xlabel "bytes a rank"
set ylabel "application thread CPU per allreduce (us)"
set key left top
set title "Claim 004: one collective WR (device) vs a host-driven RC ring, crxe_lo"
plot for [n in "$ns"] "$csv" using (strcol(1) eq "host" && strcol(2) eq n ? \$3 : 1/0):5 \
     with linespoints lw 2 dt 2 title "host-driven ring, ".n." nodes", \
     for [n in "$ns"] "$csv" using (strcol(1) eq "device" && strcol(2) eq n ? \$3 : 1/0):5 \
     with linespoints lw 2 title "one collective WR, ".n." nodes"
EOF
	echo "plot: $out/004-chained.png"
fi
