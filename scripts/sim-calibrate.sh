#!/bin/bash
# sim-calibrate - the shaped namespace fabric (scripts/bench-fabric.sh) and
# ibv_coll_sim on the same fabric, side by side: busbw/bound and wire/S of
# each path and size, measured on real processes and simulated, and the
# simulator's over the real one's.
#
#   scripts/sim-calibrate.sh [-n HOSTS] [-r RATE] [-q QUEUE] [-d DELAY_US]
#       [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-i ITERS] [-w WARMUP]
#       [-D DROP] [-l LOG]
#
#   -n, -r, -q, -b, -e, -f, -i, -w  as bench-fabric.sh (4, 400mbit, 256kb,
#       400K, 6400K, 4, 5, 1)
#   -d  one-way delay of a simulated link in us (20: what a veth hop
#       through the namespaces and the host's stack adds)
#   -D  the probability that a packet a host or the switch sends is lost:
#       bench-fabric.sh -I drop=DROP and the description's loss (0)
#   -l  a bench-fabric.sh log to compare with instead of running it (it
#       needs root and takes minutes)
# Environment: BUILD_DIR (build).
#
# A row is marked "*" where the two differ by more than 10 %.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/../build}
n=4 rate=400mbit queue=256kb delay=20 min=400K max=6400K factor=4 iters=5 warmup=1
drop=0 log=
while getopts "n:r:q:d:b:e:f:i:w:D:l:h" o; do
	case $o in
	n) n=$OPTARG ;;
	r) rate=$OPTARG ;;
	q) queue=$OPTARG ;;
	d) delay=$OPTARG ;;
	b) min=$OPTARG ;;
	e) max=$OPTARG ;;
	f) factor=$OPTARG ;;
	i) iters=$OPTARG ;;
	w) warmup=$OPTARG ;;
	D) drop=$OPTARG ;;
	l) log=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
sim=$build/emulator/ibv_coll_sim
[ -x "$sim" ] || {
	echo "sim-calibrate: $sim: not built (cmake --build $build --target ibv_coll_sim)" >&2
	exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Sizes as bench-fabric.sh makes them (K, M suffixes; times FACTOR).
bytes() {
	case $1 in
	*K | *k) echo $((${1%[Kk]} * 1024)) ;;
	*M | *m) echo $((${1%[Mm]} * 1048576)) ;;
	*) echo "$1" ;;
	esac
}
sizes=() s=$(bytes "$min") e=$(bytes "$max")
while [ "$s" -le "$e" ]; do
	sizes+=("$s")
	s=$((s * factor))
done

if [ -z "$log" ]; then
	log=$tmp/fabric.log
	imp=()
	[ "$drop" != 0 ] && imp=(-I "drop=$drop")
	echo "# running scripts/bench-fabric.sh -n $n -r $rate -q $queue -p switch,ring ..." >&2
	"$here/bench-fabric.sh" -n "$n" -r "$rate" -q "$queue" -p switch,ring -b "$min" \
		-e "$max" -f "$factor" -i "$iters" -w "$warmup" "${imp[@]}" >"$log"
fi

# tc's units as the description's: kb is 1024 bytes, as in tc.
qbytes=$queue
case $queue in *kb) qbytes=$((${queue%kb} * 1024)) ;; *mb) qbytes=$((${queue%mb} * 1048576)) ;; esac
list=$(printf '%s,' "${sizes[@]}")
list=${list%,}
# The paths one after the other: the ring starts once the switch's
# messages are surely done (each at most 10x its time at the link's rate).
cat >"$tmp/desc.json" <<EOF
{"seed": 1,
 "fabric": {"nodes": $n, "link": {"rate": "$rate", "delay_us": $delay, "queue": $qbytes},
            "loss": $drop},
 "jobs": [{"name": "switch", "topology": "switch", "sizes": [$list], "iters": $iters, "warmup": $warmup},
          {"name": "ring", "topology": "ring", "sizes": [$list], "iters": $iters, "warmup": $warmup,
           "start_us": 60000000}]}
EOF
"$sim" -l 3600 "$tmp/desc.json" >"$tmp/sim.out"

# path size bound wire, from each.
awk '/^## ours, through one switch/ {p = "switch"; next}
     /^## ours, round the NIC ring/ {p = "ring"; next}
     /^## / {p = ""; next}
     p != "" && $1 ~ /^[0-9]+$/ {print p, $1, $8, $9}' "$log" >"$tmp/real"
awk '/^# job switch:/ {p = "switch"; next}
     /^# job ring:/ {p = "ring"; next}
     /^#/ {next}
     p != "" && $1 ~ /^[0-9]+$/ {print p, $1, $6, $7}' "$tmp/sim.out" >"$tmp/simr"

echo "# sim-calibrate: $n hosts, $rate links, $queue queues, loss $drop; simulated links $delay us one way"
echo "# real: scripts/bench-fabric.sh on the namespace fabric; sim: ibv_coll_sim (virtual time)"
printf '%-7s %10s %11s %10s %8s %10s %9s %8s\n' path "size(B)" "bound:real" "bound:sim" "sim/real" \
	"wire:real" "wire:sim" "sim/real"
join -j1 <(awk '{print $1"_"$2, $3, $4}' "$tmp/real" | sort) \
	<(awk '{print $1"_"$2, $3, $4}' "$tmp/simr" | sort) |
	sort -t_ -k1,1 -k2n |
	awk '{split($1, k, "_"); rb = $4 / $2; rw = $5 / $3;
	      m = (rb > 1.1 || rb < 0.9 || rw > 1.1 || rw < 0.9) ? " *" : "";
	      printf "%-7s %10s %11.3f %10.3f %8.2f %10.3f %9.3f %8.2f%s\n",
		     k[1], k[2], $2, $4, rb, $3, $5, rw, m}'
