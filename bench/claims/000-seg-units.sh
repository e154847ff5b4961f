#!/bin/bash
# Claim 000 - fine-grained Seg units: a switch that frees each unit as soon
# as its block's result has gone needs a pool about the bandwidth-delay
# product of one host's link, whatever the job's size and however many
# hosts it has, where a buffer that holds a whole message needs the
# message.  For each pool size P (the switch's units, all of them granted
# to the job, which asks for more), hosts N and message size S,
# ibv_coll_sim runs one allreduce through one switch (after one untimed):
# busbw against its bound, wire/S.  block: ours.  message: the switch
# buffers whole messages (switch_whole_grant, ibv_coll_switchd
# --whole-grant): the AUTO job asks for S / 4 KiB units (at least 2, the
# least a job may ask) and gets them all
# or is refused and runs the NIC ring.
# Prints, and writes to docs/claims/ (OUT_DIR), 000-seg-units.csv, .md,
# .png.
#
#   bench/claims/000-seg-units.sh [-r RATE] [-d DELAY_US]
#       -r  link rate (100gbit), -d  one-way link delay (1); N = 8, 32
#       and 64 (a switch job's most) on one switch, S = 1 KiB, 256 KiB and
#       4 MiB, and 64 MiB at 8 hosts (at 64 hosts one such run holds ~10 GB
#       and takes 40 s); N = 1,024 on a two-level tree, 4 MiB; P = 4 ...
#       4096 units of 4 KiB.  Deterministic (seed 1); about 15 minutes.
#   -F  on real processes instead: bench/claims/claims-fabric.sh, 4 hosts
#       of the namespace fabric at 150 Mbit/s (a 256 KB queue), 500 us one
#       way from the emulator (IBV_COLL_EMU_IMPAIR=delay=500us on every NIC
#       and the switch), every NIC paced to its link's rate as a hardware
#       port is (IBV_COLL_EMU_PORT_MBPS=150; claims-fabric.sh -p), S =
#       256 KiB and 4 MiB, pools of 4 ... 1,024 units;
#       block: ibv_coll_switchd -u P, ibv_coll_perf -t switch; message:
#       ibv_coll_switchd -u P --whole-grant --max-job-units S / 4 KiB,
#       ibv_coll_perf -t auto (a refused job runs the ring).  Written to
#       000-fabric.csv, .md and .png; about a minute; not deterministic; needs
#       root (exits 77 without it).
#       CLAIMS_FABRIC_ARGS: more options for claims-fabric.sh (-p 0: NICs
#       not paced to their ports).
set -euo pipefail
rate=100gbit delay=1 fabric=
while getopts "r:d:Fh" o; do
	case $o in
	r) rate=$OPTARG ;;
	d) delay=$OPTARG ;;
	F) fabric=1 ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 000-seg-units
if [ -n "$fabric" ]; then
	fabric_root
	for mode in block message; do
		for s in 262144 4194304; do
			for p in 4 8 16 32 64 256 1024; do
				if [ $mode = block ]; then
					echo "$mode,$p|$s|-u $p|-t switch"
				else
					echo "$mode,$p|$s|-u $p --whole-grant --max-job-units $((s / 4096))|-t auto"
				fi
			done
		done
	done >"$tmp/plan"
	fabric_run 000-fabric mode,units
	{
		echo
		echo "Blocks freed one by one: the smallest pool reaching 95 % of the best busbw any pool gave that size (its busbw/bound); the whole-message buffer: the smallest pool that took the job through the switch rather than refusing it to the ring (its busbw/bound; the ring's below the pool):"
		echo
		echo "| bytes | units, freed per block | units, whole message | the ring (refused) |"
		echo "| --- | --- | --- | --- |"
		for s in 262144 4194304; do
			best=$(awk -F, -v s=$s '$3 == s && $5 > b { b = $5 } END { print b + 0 }' "$csv")
			awk -F, -v s=$s -v b="$best" '$3 == s && $1 == "block" && $5 >= 0.95 * b && !u { u = $2; ub = $5 }
				$3 == s && $1 == "message" && $7 == "switch" && !m { m = $2; mb = $5 }
				$3 == s && $1 == "message" && $7 != "switch" { r = r (r ? ", " : "") $5 }
				END { printf "| %s | %s (%s) | %s | %s |\n", s, u, ub, m ? m " (" mb ")" : "none of 4 to 1024", r ? r : "-" }' "$csv"
		done
	} >>"$out/000-fabric.md"
	cat "$out/000-fabric.md"
	command -v gnuplot >/dev/null || exit 0
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/000-fabric.png"
set datafile separator ","
set logscale x 2
set xlabel "switch Seg units (4 KiB each) in the pool"
set ylabel "busbw / bound"
set yrange [0:1.05]
set key right bottom
set title "Claim 000 on real processes: 4 hosts, 150 Mbit/s, 500 us one way (namespace fabric)"
plot for [s in "262144 4194304"] "$csv" using (strcol(1) eq "block" && strcol(3) eq s ? \$2 : 1/0):5 \
     with linespoints lw 2 title "freed per block, ".s." B", \
     for [s in "262144 4194304"] "$csv" using (strcol(1) eq "message" && strcol(3) eq s ? \$2 : 1/0):5 \
     with linespoints dt 2 lw 2 title "whole message (the ring below its need), ".s." B"
EOF
	echo "plot: $out/000-fabric.png"
	exit 0
fi
csv=$out/000-seg-units.csv
echo "mode,hosts,bytes,units,time_us,busbw_bound,wire_s" >"$csv"
sizes() {
	case $1 in
	8) echo 1024 262144 4194304 67108864 ;;
	1024) echo 4194304 ;;
	*) echo 1024 262144 4194304 ;;
	esac
}
# Up to 64 hosts on one switch (a job's most at one); 1,024 on a two-level
# tree, 16 leaves of 64 under a spine, every switch with the pool, phantom
# ranks (one source and result buffer for the job, checked as ever).
shape() { [ "$1" -le 64 ] || echo '"shape": "tree2", "nodes_per_leaf": 64,'; }
phantom() { [ "$1" -le 64 ] || echo ', "phantom": true'; }
for mode in block message; do
	for n in 8 32 64 1024; do
		for s in $(sizes "$n"); do
			for p in 4 8 16 32 64 128 256 512 1024 2048 4096; do
				if [ $mode = block ]; then
					topo=switch want=4096 whole=false
				else
					topo=auto want=$(((s + 4095) / 4096 > 2 ? (s + 4095) / 4096 : 2)) whole=true
				fi
				cat >"$tmp/d.json" <<EOF
{"seed": 1,
 "fabric": {"nodes": $n, $(shape $n) "link": {"rate": "$rate", "delay_us": $delay, "queue": "16M"},
            "switch_units": $p, "switch_whole_grant": $whole, "nic_units": $((want > 8192 ? want : 8192))},
 "jobs": [{"name": "j", "topology": "$topo", "sizes": [$s], "iters": 1, "warmup": 1,
           "seg_units": $want$(phantom $n)}]}
EOF
				read -r t bb ws _ < <(sim_row "$tmp/d.json")
				echo "$mode,$n,$s,$p,$t,$bb,$ws" >>"$csv"
			done
		done
	done
done
md_table "$csv" >"$out/000-seg-units.md"
{
	echo
	echo "Smallest pool reaching 95 % of the best busbw any pool gave that many hosts and bytes (its busbw/bound in brackets), blocks freed one by one (ours) against a buffer holding the whole message:"
	echo
	echo "| hosts | bytes | units, freed per block | units, whole message |"
	echo "| --- | --- | --- | --- |"
	for n in 8 32 64 1024; do
		for s in $(sizes "$n"); do
			best=$(awk -F, -v n=$n -v s=$s '$2 == n && $3 == s && $6 > b { b = $6 } END { print b + 0 }' "$csv")
			row="| $n | $s |"
			for mode in block message; do
				row="$row $(awk -F, -v m=$mode -v n=$n -v s=$s -v b="$best" '$1 == m && $2 == n && $3 == s {
						if (r == "") r = $6
						if ($6 >= 0.95 * b && !u) u = $4 }
					END { if (u) printf "%s (%s)", u, b; else printf "none of 4 to 4096 (the ring: %s)", r }' "$csv") |"
			done
			echo "${row% |} (S / 4 KiB: $(((s + 4095) / 4096))) |"
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
set xlabel "switch Seg units (4 KiB each) in the pool"
set ylabel "busbw / bound"
set yrange [0:1.05]
set key right bottom
set title "Claim 000: Seg units freed per block vs a whole-message buffer, one switch, $rate, $delay us links"
plot for [s in "1024 262144 4194304 67108864"] "$csv" using (strcol(1) eq "block" && strcol(2) eq "8" && strcol(3) eq s ? \$4 : 1/0):6 \
     with linespoints lw 2 title "freed per block, 8 hosts, ".s." B", \
     for [s in "1024 262144 4194304 67108864"] "$csv" using (strcol(1) eq "message" && strcol(2) eq "8" && strcol(3) eq s ? \$4 : 1/0):6 \
     with linespoints dt 2 lw 2 title "whole message, 8 hosts, ".s." B"
EOF
	echo "plot: $out/000-seg-units.png"
fi
