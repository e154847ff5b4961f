#!/bin/bash
# bench-tenants - K jobs at once through one aggregation switch with a
# scarce Seg pool, on the shaped fabric of tests/multihost/fabric.sh, under
# each sharing policy of ibv_coll_switchd(8) (--policy tdm, spatial,
# exclusive) and round the NIC ring alone.
#
#   scripts/bench-tenants.sh [-n HOSTS] [-r RATE] [-q QUEUE] [-u UNITS]
#       [-k LIST] [-i ITERS] [-I IMPAIR] [-W WORKLOAD] [-o CSV]
#
#   -n  hosts; every job has one node on each (4)
#   -r, -q  each host link's rate and queue (150mbit, 256kb)
#   -u  the switch's Seg units of 4096 bytes: the scarce pool (16)
#   -k  the job counts to run, comma-separated (2,3,4)
#   -i  allreduces per job (20)
#   -I  IBV_COLL_EMU_IMPAIR for every NIC and switch (delay=1ms: the RTT)
#   -W  workload: train (job j: its own size and compute gap, below) or
#       overlap (every job the same size, no compute gap: their allreduces
#       always overlap) (train)
#   -o  also write the table to CSV (K, policy, mean and worst JCT in ms,
#       tdm's occupancy in %, allreduces through the switch and in all,
#       the share of tdm's decisions that refused the pool and the most
#       messages of one job refused in a row, from the switch's counters)
#
# Workload "train", job j (0-based) of K: a training-like loop, a compute
# gap then an fp32 sum allreduce, -z 1 (one at a time):
#   job 0: 256 KiB, gap 30 ms    job 1: 64 KiB, gap 10 ms
#   job 2: 128 KiB, gap 20 ms    job 3: 32 KiB, gap 5 ms
# Prints per K and policy: each job's mean iteration time (its completion
# time / iterations), the mean job completion time (JCT), the switch's
# occupancy (the time messages held the pool, over the run's), and how
# many allreduces ran through the switch.  Needs root; without it exits 77.
set -u
# (-o's path is the caller's: the inner run starts in the repository.)
export BENCH_TENANTS_CWD=${BENCH_TENANTS_CWD:-$PWD}
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac

if [ "${1:-}" != "--inner" ]; then
	hosts=4 rate=150mbit queue=256kb
	args=("$@")
	while getopts "n:r:q:u:k:i:I:W:o:" o; do
		case $o in
		n) hosts=$OPTARG ;;
		r) rate=$OPTARG ;;
		q) queue=$OPTARG ;;
		u | k | i | I | W | o) ;;
		*) sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
		esac
	done
	exec "$root/tests/multihost/fabric.sh" -n "$hosts" -s 1 -r "$rate" -q "$queue" -S auto -- \
		"$0" --inner "${args[@]}"
fi
shift
n=$FABRIC_HOSTS units=16 klist=2,3,4 iters=20 impair=delay=1ms workload=train csv=
OPTIND=1
while getopts "n:r:q:u:k:i:I:W:o:" o; do
	case $o in
	u) units=$OPTARG ;;
	k) klist=$OPTARG ;;
	i) iters=$OPTARG ;;
	I) impair=$OPTARG ;;
	W) workload=$OPTARG ;;
	o) csv=$OPTARG ;;
	*) ;;
	esac
done
case $csv in "" | /*) ;; *) csv=$BENCH_TENANTS_CWD/$csv ;; esac
[ -z "$csv" ] ||
	echo "jobs,policy,mean_jct_ms,worst_jct_ms,occupancy_pct,through_switch,allreduces,refused_share,most_refused_in_a_row" >"$csv"
perf=$build/tools/ibv_coll_perf
switchd=$build/emulator/ibv_coll_switchd
tmp=$(mktemp -d /tmp/bench-tenants.XXXXXX)
sw=
trap '[ -n "$sw" ] && kill $sw 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
export IBV_COLL_EMU_IMPAIR=$impair IBV_COLL_LOG_LEVEL=error
sizes=(256K 64K 128K 32K) gaps=(30000 10000 20000 5000)
if [ "$workload" = overlap ]; then
	sizes=(128K 128K 128K 128K) gaps=(0 0 0 0)
fi

now_ms() { date +%s%3N; }

# One job: node i in host i; its completion time in $tmp/jct.J.
run_job() { # J TOPO
	local j=$1 i ns pids=() t0 st=0 swarg=()
	[ "$2" = ring ] || swarg=(-s "$FABRIC_SW_IP_0:4791")
	t0=$(now_ms)
	for ((i = 0; i < n; i++)); do
		ns=FABRIC_NS_$i
		ip netns exec "${!ns}" timeout 300 "$perf" -D crxe_eth0 \
			--boot "unix:$tmp/boot.$j" --node "$i" --nodes "$n" -t "$2" \
			"${swarg[@]}" -b "${sizes[$j]}" -e "${sizes[$j]}" -n "$iters" -w 0 \
			-c 1 -z 1 --gap-us "${gaps[$j]}" --ran-log "$tmp/ran.$j.%d" >"$tmp/out.$j.$i" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || st=1; done
	echo $(($(now_ms) - t0)) >"$tmp/jct.$j"
	[ $st -eq 0 ] || { echo "job $j failed:" >&2; tail -n 3 "$tmp/out.$j.0" >&2; }
}

printf '%-2s %-9s %-44s %9s %9s %s\n' K policy "mean iteration ms per job" "JCT ms" occupancy "through switch"
IFS=, read -r -a ks <<<"$klist"
for k in "${ks[@]}"; do
	for policy in ring tdm spatial exclusive; do
		rm -f "$tmp"/ran.* "$tmp"/jct.* "$tmp"/boot.*
		topo=auto
		if [ $policy = ring ]; then
			topo=ring
		else
			ip netns exec "$FABRIC_SW_NS_0" "$switchd" -p 4791 -n tenants -u "$units" \
				--policy "$policy" --shares "$k" --json >"$tmp/sw.log" 2>&1 &
			sw=$!
			sleep 0.5
		fi
		t0=$(now_ms)
		pids=()
		for ((j = 0; j < k; j++)); do
			run_job $j $topo &
			pids+=($!)
		done
		wait "${pids[@]}"
		wall=$(($(now_ms) - t0))
		occ=- adm="- 0"
		if [ -n "$sw" ]; then
			kill -USR1 $sw
			sleep 0.3
			kill $sw
			wait $sw 2>/dev/null
			sw=
			pool_us=$(grep -o '"pool_us":[0-9]*' "$tmp/sw.log" | head -1 | cut -d: -f2)
			[ "$policy" != tdm ] && pool_us=
			occ=$(awk -v p="${pool_us:-0}" -v w="$wall" -v pol="$policy" 'BEGIN {
				if (pol == "tdm") printf "%.0f%%", 100 * p / 1000 / w; else printf "static" }')
			# tdm's decisions (the first record: the switch's totals).
			[ "$policy" = tdm ] && adm=$(tr ',{}' '\n\n\n' <"$tmp/sw.log" | awk -F: '
				$1 ~ /"adm_(grants|busy|scored|refused|streak)"/ && !($1 in v) { v[$1] = $2 }
				END { g = v["\"adm_grants\""]; r = v["\"adm_busy\""] + v["\"adm_scored\""] + v["\"adm_refused\""]
					printf "%s %d\n", g + r ? sprintf("%.2f", r / (g + r)) : "-", v["\"adm_streak\""] }')
		fi
		its="" sum=0 worst=0 thru=0 total=0
		for ((j = 0; j < k; j++)); do
			t=$(cat "$tmp/jct.$j")
			sum=$((sum + t))
			[ "$t" -gt "$worst" ] && worst=$t
			its="$its $(awk -v t="$t" -v i="$iters" 'BEGIN { printf "%.1f", t / i }')"
			# 0x400: IBV_COLL_WC_SWITCH
			thru=$((thru + $(awk '{ if ($2 ~ /[4567cdef]..$/) n++ } END { print n + 0 }' "$tmp/ran.$j.0")))
			total=$((total + $(wc -l <"$tmp/ran.$j.0")))
		done
		printf '%-2s %-9s %-44s %9d %9s %d/%d\n' "$k" "$policy" "$its" $((sum / k)) "$occ" "$thru" "$total"
		[ -z "$csv" ] || printf '%s,%s,%d,%d,%s,%d,%d,%s,%s\n' "$k" "$policy" $((sum / k)) "$worst" \
			"$(echo "$occ" | tr -d %)" "$thru" "$total" "${adm% *}" "${adm#* }" >>"$csv"
	done
done
