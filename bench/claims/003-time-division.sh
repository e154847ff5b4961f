#!/bin/bash
# Claim 003 - time division: K jobs share one switch's Seg pool.  spatial
# gives each job its own range (the pool over K shares); exclusive gives
# the whole pool to the first job and sends the others to the ring; tdm
# gives the whole pool to one message at a time, the others running the
# ring meanwhile.  For each K, pool size and policy, ibv_coll_sim runs K
# AUTO jobs of 4 hosts each on one switch, arriving at exponential gaps
# (seeded), each a training-like mix of allreduces (16 MiB and 4 MiB
# gradient buckets, 256 KiB and 64 KiB small ones, each twice; phantom
# ranks, one source and one result buffer a job, checked as ever: 256
# jobs of real buffers, all running at once under spatial sharing, would
# need more than 32 GB): every job's completion time (the sum of its
# collectives' times) over that of the same job alone on the whole pool,
# mean, p99 and worst over the jobs;
# the jobs sent to the ring for good (exclusive), the share of messages
# refused the pool and the most of one job refused in a row (tdm, against
# ibv_coll_switchd(8)'s bound 4 + (K - 1) r), and the load of the busiest
# switch (the bytes it took in over what its ports can take in over the
# run).  On one switch (star) and on a two-level tree (tree2: leaves of 2
# hosts, so every job crosses the spine, where the jobs meet; each switch
# has the pool).  Prints, and writes to docs/claims/ (OUT_DIR),
# 003-time-division.csv, .md and .png.
#
#   bench/claims/003-time-division.sh [-r RATE] [-d DELAY_US] [-g GAP_US]
#       [-k LIST] [-u POOLS] [-P POLICIES] [-F]
#       -r  link rate (100gbit), -d  one-way link delay (10: 64 units of
#       4 KiB are a host's bandwidth-delay product), -g  mean gap between
#       arrivals (200), -k  the job counts on one switch ("2 4 8 16 32 64
#       128 256"; the tree takes those up to 8), -u  the pools in units
#       ("64 256 1024"; the tree skips 256), -P  the policies ("spatial
#       exclusive tdm"); -k, -u and -P split the run for several cores.
#       Deterministic (seed 1).  The
#       whole run takes about an hour on one core.
#   -F  on real processes instead: scripts/bench-tenants.sh on the shaped
#       namespace fabric (4 hosts at 150 Mbit/s, 1 ms round trips from the
#       emulator, a 16-unit pool; K = 2, 3, 4 jobs of a training-like loop,
#       10 iterations), written to 003-fabric.csv and .md; not
#       deterministic; needs root (exits 77 without it).
set -euo pipefail
rate=100gbit delay=10 gap=200 klist="2 4 8 16 32 64 128 256" pools="64 256 1024" pols="spatial exclusive tdm" fabric=
while getopts "r:d:g:k:u:P:Fh" o; do
	case $o in
	r) rate=$OPTARG ;;
	d) delay=$OPTARG ;;
	g) gap=$OPTARG ;;
	k) klist=${OPTARG//,/ } ;;
	u) pools=${OPTARG//,/ } ;;
	P) pols=${OPTARG//,/ } ;;
	F) fabric=1 ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
. "$(dirname "$0")/claims-common.sh"
claims_init 003-time-division
if [ -n "$fabric" ]; then
	fabric_root
	BUILD_DIR=$(dirname "$(dirname "$sim")") "$root/scripts/bench-tenants.sh" -k 2,3,4 -i 10 \
		-o "$out/003-fabric.csv" || { echo "003: the fabric run failed" >&2; exit 1; }
	md_table "$out/003-fabric.csv" >"$out/003-fabric.md"
	cat "$out/003-fabric.md"
	exit 0
fi
csv=$out/003-time-division.csv
sizes='"16M", "4M", "256K", "64K"'
# desc K POOL POLICY [SHAPE]: the description of K jobs.
desc() {
	local k=$1 pool=$2 pol=$3 shape=${4:-star} j h start=0 nodes tree=
	[ "$shape" = tree2 ] && tree='"shape": "tree2", "nodes_per_leaf": 2, '
	printf '{"seed": 1, "fabric": {"nodes": %d, %s"link": {"rate": "%s", "delay_us": %s, "queue": "16M"},\n' \
		$((4 * k)) "$tree" "$rate" "$delay"
	printf ' "switch_units": %d, "switch_policy": "%s", "switch_shares": %d, "nic_units": 1024},\n "jobs": [\n' \
		"$pool" "$pol" "$k"
	for ((j = 0; j < k; j++)); do
		nodes=$((4 * j)),$((4 * j + 1)),$((4 * j + 2)),$((4 * j + 3))
		printf '  {"name": "j%d", "topology": "auto", "nodes": [%s], "sizes": [%s], "iters": 2,\n' \
			"$j" "$nodes" "$sizes"
		printf '   "seg_units": 1024, "phantom": true, "start_us": %s}%s\n' "$start" "$([ $j -lt $((k - 1)) ] && echo ,)"
		start=$(awk -v s="$start" -v g="$gap" -v j="$j" 'BEGIN { srand(7 + j); printf "%.1f", s - g * log(1 - rand()) }')
	done
	printf ' ]}\n'
}
# jct FILE: each job's completion time in us, one per line.
jct() {
	awk '/^# job / { if (n) print t; n++; t = 0 } /^ +[0-9]+ +[0-9]+ / { t += $3 * 2; if ($8 || $9) exit 1 }
		END { if (n) print t }' "$1"
}
# The same job alone, on the whole pool.
alone() { # POOL SHAPE
	desc 1 "$1" spatial "$2" | sed 's/"switch_shares": 1/"switch_shares": 0/' >"$tmp/a.json"
	"$sim" "$tmp/a.json" >"$tmp/a.out" 2>/dev/null || { cat "$tmp/a.out" >&2; exit 1; }
	jct "$tmp/a.out"
}
# use FILE: "refused_share most_in_a_row load" over the run's switches
# (tdm's refusals over its decisions; the busiest switch's load).
use() {
	awk '/^# switch [0-9]+: at most/ { for (i = 1; i <= NF; i++) if ($i == "took") { l = $(i + 2) + 0; if (l > L) L = l } }
		/^# switch [0-9]+: tdm:/ { g += $5; r += $10; if ($14 > s) s = $14 }
		END { printf "%s %d %.1f\n", (g + r ? sprintf("%.2f", r / (g + r)) : "-"), s, L }' "$1"
}
echo "shape,jobs,pool_units,policy,mean_slowdown,p99_slowdown,worst_slowdown,jobs_on_the_ring,refused_share,most_refused_in_a_row,load_pct" >"$csv"
for shape in star tree2; do
	for pool in $pools; do
		[ $shape = tree2 ] && [ $pool = 256 ] && continue
		base=$(alone "$pool" "$shape")
		for pol in $pols; do # (each line's points together for gnuplot)
			for k in $klist; do
				[ $shape = tree2 ] && [ "$k" -gt 8 ] && continue
				desc "$k" "$pool" "$pol" "$shape" >"$tmp/d.json"
				"$sim" "$tmp/d.json" >"$tmp/d.out" 2>"$tmp/d.err" ||
					{ cat "$tmp/d.out" "$tmp/d.err" >&2; echo "003: the simulation failed" >&2; exit 1; }
				jct "$tmp/d.out" >"$tmp/j" || { cat "$tmp/d.out" >&2; echo "003: a wrong result" >&2; exit 1; }
				ring=$(grep -c "the switch refused it, using the ring" "$tmp/d.err" || true)
				read -r share streak load < <(use "$tmp/d.out")
				[ $pol = tdm ] || share=- # (the others' refusals are of jobs, not messages)
				# Each job's slowdown, sorted: mean, p99 (nearest rank: the
				# worst below 100 jobs) and worst.
				awk -v b="$base" '{ print $1 / b }' "$tmp/j" | sort -g |
					awk -v k="$k" -v p="$pool" -v pol="$pol" -v r="$((ring / 4))" -v sh="$shape" \
						-v u="$share,$streak,$load" '{ v[NR] = $1; s += $1 }
					END { i = int(0.99 * NR); if (i < 0.99 * NR) i++
						printf "%s,%d,%d,%s,%.2f,%.2f,%.2f,%d,%s\n", sh, k, p, pol, s / NR, v[i], v[NR], r, u }' >>"$csv"
			done
		done
	done
done
md_table "$csv" >"$out/003-time-division.md"
cat "$out/003-time-division.md"
# (A run split with -u, -P or -k has no plot of its own: the merged CSV's.)
if command -v gnuplot >/dev/null && [ "$pools" = "64 256 1024" ]; then
	gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$out/003-time-division.png"
set datafile separator ","
set logscale xy 2
set xlabel "jobs sharing the switch"
set ylabel "mean job completion time / alone"
set key left top
set title "Claim 003: sharing one switch's pool (star), $rate, $delay us links (solid 64 units, dashed 1024)"
plot for [pol in "spatial exclusive tdm"] "$csv" using (strcol(1) eq "star" && strcol(4) eq pol && \$3 == 64 ? \$2 : 1/0):5 with linespoints lw 2 title pol.", 64 units", \
     for [pol in "spatial exclusive tdm"] "$csv" using (strcol(1) eq "star" && strcol(4) eq pol && \$3 == 1024 ? \$2 : 1/0):5 with linespoints dt 2 title pol.", 1024 units"
EOF
	echo "plot: $out/003-time-division.png"
fi
