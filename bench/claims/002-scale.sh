#!/bin/bash
# Claim 002 at scale - aggregation in the network halves what a host puts
# on its link (S against the ring's 2(N-1)/N S) and so doubles what the
# collective can reach, at every N.  For N hosts, ibv_coll_sim runs one
# allreduce (after one untimed, in place: one buffer a rank) round the
# ring on a star, through one switch (star, at most 64 hosts: a member's
# bit in the CETH's 64-bit map), and through leaves of 16 hosts under a
# spine (tree2, from 32 hosts to 1,024: 64 leaves), and through pods of 16
# such leaves under a spine each, the spines under a core (tree3, from 512
# hosts, 2 pods, to 4,096, 16 pods; phantom ranks: one source and one
# result buffer for the job, real packets and reductions, the result
# checked): busbw against the ring's bound (the link rate R: the
# switch's own bound is R x 2(N-1)/N, so up to about 2 here), and wire/S.
# The ring runs twice: with the job's default 256 Seg units (ring: a
# node keeps room for a window of blocks from each of the N-1 others, so
# its window is 256 / (N-1) blocks, at most 64: 4 at 64 hosts, 3 from 66,
# 1 at 256; beyond 257 hosts it cannot hold a block from every other node
# and the job fails, so its rows stop at 256), and with 64 (N-1) units
# (ring_units: the full window of 64 blocks at every N).  Beyond 4,096
# the three-level tree runs as the scale example does
# (examples/sim/phantom65536-tree3.json: pods of 64 leaves of 16, 64 Seg
# units a host and 256 a switch, one job of at most 65,535 hosts, a node
# index being 16 bits), at 1 MiB and without a warm-up, to keep its run
# in minutes (tree3_1M: 4,096 hosts to 65,536; its rows are the first
# message, with the admission round trip, so slower than tree3's).
# Prints, and writes to docs/claims/ (OUT_DIR), 002-scale.csv, .md, .png.
#
#   bench/claims/002-scale.sh [-s SIZE] [-r RATE] [-N "N..."] [-B "N..."]
#       -s  bytes a rank (4M), -r  link rate (100gbit), -N  host counts
#       ("2 4 8 16 32 64 128 256 512 1024 2048 4096"; one switch at most 64
#       hosts, the width of the CETH's node bitmap; the ring to 256 with
#       its default units, to 512 with 64 (N-1): 1,024 hosts of those
#       would hold more than 16 GiB of Seg pools).  1 us links.
#       -B  host counts of tree3_1M ("4096 16384 65536"; "" for none)
#       Deterministic; about 15 minutes and 5 GB (65,536 hosts: 6
#       minutes, 4 GB).
set -euo pipefail
size=4M rate=100gbit ns="2 4 8 16 32 64 128 256 512 1024 2048 4096"
big="4096 16384 65536"
while getopts "s:r:N:B:h" o; do
	case $o in
	s) size=$OPTARG ;;
	r) rate=$OPTARG ;;
	N) ns=$OPTARG ;;
	B) big=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 002-scale
csv=$out/002-scale.csv
echo "path,hosts,time_us,busbw_over_R,wire_s" >"$csv"
run() { # PATH N SHAPE TOPOLOGY
	local per="" units="" nic="" place='"in_place": true' sz=$size warm=1 m=$2 nodes=""
	[ "$3" = tree2 ] && per='"nodes_per_leaf": 16,'
	[ "$3" = tree3 ] && per='"nodes_per_leaf": 16, "leaves_per_pod": 16,' place='"phantom": true'
	[ "$1" = ring_units ] && nic="\"nic_units\": $((64 * $2))," units="\"seg_units\": $((64 * ($2 - 1))),"
	if [ "$1" = tree3_1M ]; then
		per='"nodes_per_leaf": 16, "leaves_per_pod": 64, "switch_units": 256,'
		nic='"nic_units": 64,' units='"seg_units": 64,' sz=1M warm=0
		[ "$m" -gt 65535 ] && m=65535
		nodes="\"nodes\": \"0-$((m - 1))\","
	fi
	cat >"$tmp/d.json" <<EOF
{"seed": 1,
 "fabric": {"nodes": $2, "shape": "$3", $per $nic "link": {"rate": "$rate", "delay_us": 1, "queue": "4M"}},
 "jobs": [{"name": "j", "topology": "$4", $nodes $units $place, "sizes": ["$sz"], "iters": 1, "warmup": $warm}]}
EOF
	read -r t bb ws _ < <(sim_row "$tmp/d.json")
	# busbw/bound is against the path's own bound: over R, the switch
	# paths' is 2(N-1)/N of it (N the job's hosts).
	awk -v p="$1" -v n="$m" -v t="$t" -v bb="$bb" -v ws="$ws" 'BEGIN {
		f = (p ~ /^ring/) ? 1 : 2 * (n - 1) / n
		printf "%s,%d,%s,%.3f,%s\n", p, n, t, bb * f, ws }' >>"$csv"
}
# Each path's rows together (gnuplot joins consecutive points).
for n in $ns; do [ "$n" -le 256 ] && run ring "$n" star ring; done
for n in $ns; do [ "$n" -le 512 ] && run ring_units "$n" star ring; done
for n in $ns; do [ "$n" -le 64 ] && run switch "$n" star switch; done
for n in $ns; do [ "$n" -ge 32 ] && [ "$n" -le 1024 ] && run tree2 "$n" tree2 switch; done
for n in $ns; do [ "$n" -ge 512 ] && [ "$n" -le 4096 ] && run tree3 "$n" tree3 switch; done
for n in $big; do run tree3_1M "$n" tree3 switch; done
md_table "$csv" >"$out/002-scale.md"
cat "$out/002-scale.md"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/002-scale.png"
set datafile separator ","
set logscale x 2
set xlabel "hosts"
set ylabel "busbw / R"
set y2label "wire/S"
set ytics nomirror
set y2tics
set yrange [0:2.2]
set y2range [0:2.2]
set key left top
set title "Claim 002: busbw over the link rate (solid) and wire/S (dashed), $rate, $size a rank"
plot for [p in "ring ring_units switch tree2 tree3 tree3_1M"] "$csv" using (strcol(1) eq p ? \$2 : 1/0):4 with linespoints lw 2 title p." busbw/R", \
     for [p in "ring ring_units switch tree2 tree3 tree3_1M"] "$csv" using (strcol(1) eq p ? \$2 : 1/0):5 axes x1y2 with linespoints dt 2 title p." wire/S"
EOF
	echo "plot: $out/002-scale.png"
fi
