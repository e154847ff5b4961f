#!/bin/bash
# sim-sweep - liveness and results beyond this machine's process count:
# seeded fabrics run through ibv_coll_sim (the real engine and switch on a
# virtual clock), each seed a shape, a size and a loss, every one through
# the ring, the switch and AUTO.  A run that exits non-zero (an unfinished
# collective: the simulator reports it and exits 1), a row with a wrong
# element or a failed collective, or a missing row fails the sweep; its
# description is kept and named, so `ibv_coll_sim FILE` repeats it exactly.
#
#   scripts/sim-sweep.sh [-s FIRST_SEED] [-n SEEDS] [-k DIR]
#       -s  first seed (1), -n  seeds (12), -k  keep every description and
#       output in DIR (default: a temporary directory, kept on failure)
# Seed s picks: collective (allreduce, broadcast from a seeded root,
# barrier), shape (star, tree2, tree3: 8 hosts a leaf, 2 leaves a pod),
# hosts (24, 48 or 64), loss (0 to 10 %), queue (64 KiB or 1 MiB: small
# queues drop under incast), link jitter 20 us, up to 8 allreduces in
# flight, sizes 8 B, 12 KiB and 3 MiB (a barrier: 0).
# Environment: BUILD_DIR (build), TIMEOUT (600 s a run).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/../build}
first=1 seeds=12 keep=
while getopts "s:n:k:h" o; do
	case $o in
	s) first=$OPTARG ;;
	n) seeds=$OPTARG ;;
	k) keep=$OPTARG ;;
	h) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
[[ $first =~ ^[0-9]+$ ]] || { echo "sim-sweep: -s $first: a seed" >&2; exit 2; }
[[ $seeds =~ ^[0-9]+$ ]] && [ "$seeds" -ge 1 ] || { echo "sim-sweep: -n $seeds: at least 1" >&2; exit 2; }
sim=$build/emulator/ibv_coll_sim
[ -x "$sim" ] || { echo "sim-sweep: $sim: not built" >&2; exit 2; }
if [ -n "$keep" ]; then
	mkdir -p "$keep" || exit 2
	dir=$keep
else
	dir=$(mktemp -d)
fi
timeout_s=${TIMEOUT:-600}

colls=(allreduce broadcast barrier allreduce)
shapes=(star tree2 tree3 star)
fail=0 runs=0
printf "%-6s %-8s %-10s %-6s %6s %6s %6s %8s  %s\n" seed topo coll shape hosts loss depth queue result
for ((seed = first; seed < first + seeds; seed++)); do
	coll=${colls[$((seed % 4))]}
	shape=${shapes[$(((seed / 4) % 4))]}
	hosts=$((seed % 5 == 0 ? 64 : seed % 3 == 0 ? 48 : 24))
	loss=$(awk -v s="$seed" 'BEGIN { printf "%.2f", (s % 6) * 0.02 }')
	depth=$((seed % 8 + 1))
	queue=$((seed % 2 ? 65536 : 1048576))
	sizes='["8", "12288", "3145728"]' extra=
	case $coll in
	broadcast) extra=", \"root\": $((seed * 7 % hosts))" depth=1 ;;
	barrier) sizes='["0"]' depth=1 ;;
	esac
	leaf=
	[ "$shape" = star ] || leaf=', "nodes_per_leaf": 8, "leaves_per_pod": 2'
	for topo in ring switch auto; do
		f=$dir/sweep-$seed-$topo.json
		cat >"$f" <<JSON
{"seed": $((seed * 104729 % 4294967291)),
 "fabric": {"nodes": $hosts, "shape": "$shape"$leaf, "link": {"rate": "25gbit", "delay_us": 2, "queue": "$queue"}, "loss": $loss, "jitter_us": 20},
 "jobs": [{"name": "sweep", "topology": "$topo", "collective": "$coll"$extra, "sizes": $sizes, "iters": 2, "warmup": 0, "depth": $depth}]}
JSON
		runs=$((runs + 1))
		timeout "$timeout_s" "$sim" "$f" >"${f%.json}.out" 2>"${f%.json}.err"
		rc=$?
		want=$(echo "$sizes" | tr ',' '\n' | grep -c '"')
		# Rows: size ... #wrong #failed; a wrong or failed one, or fewer
		# rows than sizes, fails.
		verdict=$(awk -v want="$want" -v rc="$rc" '
			$1 ~ /^[0-9]+$/ && NF >= 9 { rows++; if ($(NF - 1) != 0 || $NF != 0) bad++ }
			END {
				if (rc != 0) print "exit " rc
				else if (bad) print bad " row(s) wrong or failed"
				else if (rows < want) print rows " of " want " rows"
				else print "ok"
			}' "${f%.json}.out")
		printf "%-6s %-8s %-10s %-6s %6s %6s %6s %8s  %s\n" "$seed" "$topo" "$coll" "$shape" \
			"$hosts" "$loss" "$depth" "$queue" "$verdict"
		if [ "$verdict" != ok ]; then
			fail=$((fail + 1))
			echo "  repeat: $sim $f   (output: ${f%.json}.out, ${f%.json}.err)"
		fi
	done
done
echo "# sim-sweep: $runs runs, $fail failed"
if [ "$fail" -ne 0 ]; then
	exit 1
fi
[ -n "$keep" ] || rm -rf "$dir"
exit 0
