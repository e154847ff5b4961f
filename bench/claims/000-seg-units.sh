#!/bin/bash
# Claim 000 - fine-grained Seg units: a switch that frees each unit as soon
# as its block's result has gone needs a pool about the bandwidth-delay
# product of one host's link, whatever the job's size and however many
# hosts it has, where a buffer that holds a whole message needs the
# message.  For each pool size P (the switch's units, all of them granted
# to the job, which asks for more), hosts N and message size S,
# ibv_coll_sim runs one allreduce through one switch (after one untimed):
# busbw against its bound.
# Prints, and writes to docs/claims/ (OUT_DIR), 000-seg-units.csv, .md,
# .png.  (Measured: ours only; the switch has no message-granularity
# mode, whose need, S / 4 KiB units, is stated, not run.)
#
#   bench/claims/000-seg-units.sh [-r RATE] [-d DELAY_US]
#       -r  link rate (100gbit), -d  one-way link delay (1); N = 8 and 32,
#       S = 256 KiB and 4 MiB, P = 4 ... 4096 units of 4 KiB.
#       Deterministic (seed 1).
set -euo pipefail
rate=100gbit delay=1
while getopts "r:d:h" o; do
	case $o in
	r) rate=$OPTARG ;;
	d) delay=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 000-seg-units
csv=$out/000-seg-units.csv
echo "hosts,bytes,units,time_us,busbw_bound" >"$csv"
for n in 8 32; do
	for s in 262144 4194304; do
		for p in 4 8 16 32 64 128 256 512 1024 2048 4096; do
			cat >"$tmp/d.json" <<EOF
{"seed": 1,
 "fabric": {"nodes": $n, "link": {"rate": "$rate", "delay_us": $delay, "queue": "16M"},
            "switch_units": $p, "nic_units": 8192},
 "jobs": [{"name": "j", "topology": "switch", "sizes": [$s], "iters": 1, "warmup": 1,
           "seg_units": 4096}]}
EOF
			read -r t bb _ _ < <(sim_row "$tmp/d.json")
			echo "$n,$s,$p,$t,$bb" >>"$csv"
		done
	done
done
md_table "$csv" >"$out/000-seg-units.md"
{
	echo
	echo "Smallest pool reaching 95 % of the bound (busbw/bound >= 0.95), against what a buffer holding the whole message needs:"
	echo
	echo "| hosts | bytes | units (ours) | units holding the message (S / 4 KiB) |"
	echo "| --- | --- | --- | --- |"
	for n in 8 32; do
		for s in 262144 4194304; do
			awk -F, -v n=$n -v s=$s '$1 == n && $2 == s { if ($5 >= 0.95 && !u) u = $3; if ($5 > b) b = $5 }
				END { print "| " n " | " s " | " (u ? u : "not reached (best " b ")") " | " s / 4096 " |" }' "$csv"
		done
	done
} >>"$out/000-seg-units.md"
cat "$out/000-seg-units.md"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/000-seg-units.png"
set datafile separator ","
set logscale x 2
set xlabel "switch Seg units (4 KiB each) granted to the job"
set ylabel "busbw / bound"
set yrange [0:1.05]
set key right bottom
set title "Claim 000: Seg units freed per block, one switch, $rate, $delay us links"
plot for [n in "8 32"] for [s in "262144 4194304"] "$csv" using (strcol(1) eq n && strcol(2) eq s ? \$3 : 1/0):5 \
     with linespoints lw 2 title n." hosts, ".s." B"
EOF
	echo "plot: $out/000-seg-units.png"
fi
