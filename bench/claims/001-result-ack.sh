#!/bin/bash
# Claim 001 - the result is the acknowledgement.  A node's window of blocks
# in flight through the switch slides when the block's result comes back
# (ours), or only on node 0's end-to-end ACK after the result
# (IBV_COLL_SWITCH_E2E_ACK).  For each one-way link delay and window W,
# ibv_coll_sim runs one allreduce through one switch (after one untimed,
# which configures the switch): time, busbw against its bound, wire/S,
# the most Seg units waiting for partials at once, and the sending
# interruptions the seed speaks of: how often a host's full window held
# its next block while its wire was idle (per host and message) and the
# share of the message's time its wire sat idle on them.
# Prints, and
# writes to docs/claims/ (OUT_DIR), 001-result-ack.csv, .md and .png.
#
#   bench/claims/001-result-ack.sh [-n HOSTS] [-s SIZE] [-r RATE]
#       -n  hosts on one switch (8), -s  bytes a rank (16M), -r  link rate
#       (100gbit); delays 1, 10, 100, 1000 us a link (a round trip host -
#       switch - host crosses two), W = 1 ... 2048 blocks of 4 KiB.  Deterministic (seed 1).
#   -F  on real processes instead: bench/claims/claims-fabric.sh, 4 hosts
#       of the namespace fabric at 150 Mbit/s (a 256 KB queue), 500 us one
#       way from the emulator (IBV_COLL_EMU_IMPAIR=delay=500us on every NIC
#       and the switch), every NIC paced to 150 Mbit/s
#       (IBV_COLL_EMU_PORT_MBPS), 1 MiB a rank, W = 1 ... 128 (ibv_coll_perf
#       --window W, and --e2e-ack); written to 001-fabric.csv, .md and
#       .png;
#       about a minute; not deterministic; needs root (exits 77 without it).
#       CLAIMS_FABRIC_ARGS: more options for claims-fabric.sh (-p 0: NICs
#       not paced to their ports).
set -euo pipefail
n=8 size=16M rate=100gbit fabric=
while getopts "n:s:r:Fh" o; do
	case $o in
	F) fabric=1 ;;
	n) n=$OPTARG ;;
	s) size=$OPTARG ;;
	r) rate=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 001-result-ack
if [ -n "$fabric" ]; then
	fabric_root
	for ack in result e2e; do
		for w in 1 2 4 8 16 32 64 128; do
			echo "$ack,$w|1048576||-t switch --window $w$([ $ack = e2e ] && echo " --e2e-ack")"
		done
	done >"$tmp/plan"
	fabric_run 001-fabric ack,window
	{
		echo
		echo "Smallest window reaching 95 % of the best busbw either way gave:"
		echo
		best=$(awk -F, 'NR > 1 && $5 > b { b = $5 } END { print b }' "$csv")
		for ack in result e2e; do
			awk -F, -v a=$ack -v b="$best" '$1 == a { if ($5 >= 0.95 * b && !w) w = $2; if ($5 > m) m = $5 }
				END { print "- " a ": " (w ? "W = " w : "not reached (best " m ")") " (best of both: " b ")" }' "$csv"
		done
	} >>"$out/001-fabric.md"
	cat "$out/001-fabric.md"
	command -v gnuplot >/dev/null || exit 0
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/001-fabric.png"
set datafile separator ","
set logscale x 2
set xlabel "window (blocks of 4 KiB in flight per host)"
set ylabel "busbw / bound"
set yrange [0:1.05]
set key right bottom
set title "Claim 001 on real processes: 4 hosts, 150 Mbit/s, 500 us one way, 1 MiB a rank"
plot "$csv" using (strcol(1) eq "result" ? \$2 : 1/0):5 with linespoints lw 2 title "result as ACK", \
     "$csv" using (strcol(1) eq "e2e" ? \$2 : 1/0):5 with linespoints dt 2 lw 2 title "end-to-end ACK"
EOF
	echo "plot: $out/001-fabric.png"
	exit 0
fi
csv=$out/001-result-ack.csv
echo "ack,delay_us,window,time_us,busbw_bound,wire_s,peak_waiting_units,holds_per_msg,held_pct" >"$csv"
for ack in result e2e; do
	e2e=false
	[ $ack = e2e ] && e2e=true
	for d in 1 10 100 1000; do
		for w in 1 2 4 8 16 32 64 128 256 512 1024 2048; do
			cat >"$tmp/d.json" <<EOF
{"seed": 1,
 "fabric": {"nodes": $n, "link": {"rate": "$rate", "delay_us": $d, "queue": "64M"},
            "switch_units": 65536, "nic_units": 8192},
 "jobs": [{"name": "j", "topology": "switch", "sizes": ["$size"], "iters": 1, "warmup": 1,
           "window": $w, "e2e_ack": $e2e, "seg_units": 4096}]}
EOF
			read -r t bb ws _ q h hu < <(sim_row "$tmp/d.json")
			# Interruptions per host and message (the run's two), and
			# the share of the message's time its wire sat idle on them.
			echo "$ack,$d,$w,$t,$bb,$ws,$q,$(awk -v h="$h" -v hu="$hu" -v n="$n" -v t="$t" \
				'BEGIN { printf "%.1f,%.1f", h / n / 2, 100 * hu / n / 2 / t }')" >>"$csv"
		done
	done
done
md_table "$csv" >"$out/001-result-ack.md"
{
	echo
	echo "Smallest window reaching 95 % of the bound (busbw/bound >= 0.95):"
	echo
	echo "| ack | delay (us) | window |"
	echo "| --- | --- | --- |"
	for ack in result e2e; do
		for d in 1 10 100 1000; do
			awk -F, -v a=$ack -v d=$d '$1 == a && $2 == d { if ($5 >= 0.95 && !w) w = $3; if ($5 > b) b = $5 }
				END { print "| " a " | " d " | " (w ? w : "not reached (best " b ")") " |" }' "$csv"
		done
	done
} >>"$out/001-result-ack.md"
cat "$out/001-result-ack.md"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/001-result-ack.png"
set datafile separator ","
set logscale x 2
set xlabel "window (blocks of 4 KiB in flight per host)"
set ylabel "busbw / bound"
set yrange [0:1.05]
set key left top
set title "Claim 001: result as ACK (solid) vs end-to-end ACK (dashed), $n hosts, $rate, $size a rank"
plot for [d in "1 10 100 1000"] "$csv" using (strcol(1) eq "result" && strcol(2) eq d ? \$3 : 1/0):5 with linespoints lw 2 title "result, ".d." us", \
     for [d in "1 10 100 1000"] "$csv" using (strcol(1) eq "e2e" && strcol(2) eq d ? \$3 : 1/0):5 with linespoints dt 2 title "e2e, ".d." us"
EOF
	echo "plot: $out/001-result-ack.png"
fi
