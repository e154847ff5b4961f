#!/bin/bash
# bench-scale - how the emulated aggregation switch scales with processes
# and with its worker threads, on this host (every node a process on the
# loopback device, one rank each).
#
# For N in NODES, allreduce (fp32 sum, every result checked) through:
#   ring        the NIC ring, no switch;
#   switch-T<T> one ibv_coll_switchd with T worker threads (-T T), for T in
#               THREADS ("all": nproc);
#   planes-<P>  P ibv_coll_switchd of 1 thread each, one plane apiece
#               (ibv_coll_perf -s given P times), for P in PLANES.
# Each configuration gives the bus bandwidth at BIG bytes per rank, the time
# per allreduce at SMALL bytes (one at a time: ibv_coll_perf -z 1), and for
# the switches the received packets per second of each worker thread (a
# plane's switch is one thread): its rx packets over the wall time of the
# BIG run, which runs in a switch of its own and includes the job's start,
# warmup and check, so a lower bound; the mean and the smallest of them.
# PPS_TIME=busy divides by the time the allreduces took instead: the
# measured time per op, out of place plus in place, times the runs of each
# (WARMUP + ITERS + 1 for the check), as ibv_coll_perf makes them.
# The last column is busbw over the ring's at that N.
#
# Usage: scripts/bench-scale.sh [-L DIR] [-h]
#   -L DIR   prepend DIR to LD_LIBRARY_PATH (a build directory copied to
#            another host, with the shared libraries ldd lists); again for
#            more; env LIBDIR does the same
#   -h       this help
# Environment: BUILD_DIR (default build), NODES ("2 4 8 16"),
# THREADS ("1 2 4 all"; empty: no switch-T rows), PLANES ("2 4"; empty:
# none), BIG (8M), SMALL (8; K and M suffixes), ITERS (5), WARMUP (1),
# LAT_ITERS (the SMALL run's, ITERS), TIMEOUT (seconds for one run, 300),
# PPS_TIME (wall or busy; wall), LIBDIR.
#
# The defaults run up to 16 processes plus the switch's threads: on a
# 2-core machine that oversubscribes it many times over, and the numbers
# then measure the scheduler. A quick look there:
#   NODES="2 4" THREADS="1 2" BIG=1M scripts/bench-scale.sh
# Exit status: 0, 1 when a run failed or gave a wrong element (the table
# still printed, with FAIL), 2 on bad usage.
set -u
bench_name=bench-scale
usage() {
	sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//p}' "$0"
}
libdirs=()
[ -n "${LIBDIR:-}" ] && libdirs+=("$LIBDIR")
while getopts "L:h" opt; do
	case $opt in
	L) libdirs+=("$OPTARG") ;;
	h) usage; exit 0 ;;
	*) sed -n 's/^# \(Usage: .*\)/\1/p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "$bench_name: unexpected argument $1 (-h: help)" >&2; exit 2; }
# -L directories are relative to where it was started, before the cd.
for d in "${libdirs[@]}"; do
	[ -d "$d" ] || { echo "$bench_name: -L $d: no such directory" >&2; exit 2; }
	d=$(cd "$d" && pwd)
	export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
cd "$(dirname "$0")/.." || exit 2
. scripts/bench-common.sh

build=${BUILD_DIR:-build}
nodes_list=${NODES:-2 4 8 16}
threads_list=${THREADS-1 2 4 all}
planes_list=${PLANES-2 4}
big=$(bench_bytes "${BIG:-8M}") || exit 2
small=$(bench_bytes "${SMALL:-8}") || exit 2
iters=${ITERS:-5}
warmup=${WARMUP:-1}
lat_iters=${LAT_ITERS:-$iters}
timeout=${TIMEOUT:-300}
pps_time=${PPS_TIME:-wall}
[ "$pps_time" = wall ] || [ "$pps_time" = busy ] ||
	{ echo "$bench_name: PPS_TIME is wall or busy, not $pps_time" >&2; exit 2; }
cores=$(nproc)
for v in iters warmup lat_iters timeout; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "$bench_name: bad ${v^^} ${!v}" >&2; exit 2; }
done
for n in $nodes_list $planes_list; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: bad count $n in NODES or PLANES" >&2; exit 2; }
done
for p in $planes_list; do
	[ "$p" -le 8 ] || { echo "$bench_name: ibv_coll_perf takes at most 8 planes, not $p" >&2; exit 2; }
done
threads=
for t in $threads_list; do
	[ "$t" = all ] && t=$cores
	[[ $t =~ ^[1-9][0-9]*$ ]] || { echo "$bench_name: bad thread count $t in THREADS" >&2; exit 2; }
	[[ " $threads " == *" $t "* ]] || threads="$threads $t"
done

run=$build/tools/ibv_coll_run
perf=$build/tools/ibv_coll_perf
switchd=$build/emulator/ibv_coll_switchd
for b in "$run" "$perf" "$switchd"; do
	[ -x "$b" ] || { echo "$bench_name: $b is missing; build first (cmake --build $build)" >&2; exit 2; }
done

tmp=$(mktemp -d)
sw_pids=()
run_pid=
cleanup() {
	[ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
	[ ${#sw_pids[@]} -gt 0 ] && kill "${sw_pids[@]}" 2>/dev/null
	wait $run_pid "${sw_pids[@]}" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_switches COUNT THREADS: COUNT switches of THREADS workers each, their
# addresses as -s options in sw_args.
sw_args=()
start_switches() {
	local i
	sw_args=()
	for ((i = 0; i < $1; i++)); do
		rm -f "$tmp/port$i"
		"$switchd" -p 0 -P "$tmp/port$i" -T "$2" -n "bench$i" >"$tmp/switch$i.log" 2>&1 &
		sw_pids+=($!)
	done
	for ((i = 0; i < $1; i++)); do
		for _ in $(seq 100); do
			[ -s "$tmp/port$i" ] && break
			sleep 0.05
		done
		[ -s "$tmp/port$i" ] || {
			echo "$bench_name: switch $i (-T $2) did not start:" >&2
			cat "$tmp/switch$i.log" >&2
			exit 1
		}
		sw_args+=(-s "127.0.0.1:$(cat "$tmp/port$i")")
	done
}
# SIGTERM: each prints its counters as it exits.
stop_switches() {
	[ ${#sw_pids[@]} -gt 0 ] || return 0
	kill -TERM "${sw_pids[@]}" 2>/dev/null
	wait "${sw_pids[@]}" 2>/dev/null
	sw_pids=()
}

# measure NODES TOPO BYTES ITERS PERF-ARGS...: one size; sets m_time (us,
# out-of-place), m_busbw (GB/s, out-of-place), m_wall (s, the whole job),
# m_busy (s, the allreduces' estimated share of it) and m_err (empty when
# it ran and every element was right).
measure() {
	local n=$1 topo=$2 bytes=$3 it=$4 rc t0 t1 row
	shift 4
	m_time=FAIL m_busbw=FAIL m_wall=0 m_busy=0 m_err=
	t0=$(date +%s%N)
	"$run" -n "$n" -k 1 --timeout "$timeout" -- "$perf" -t "$topo" -b "$bytes" -e "$bytes" \
		-n "$it" -w "$warmup" -c 1 "$@" >"$tmp/perf.log" 2>&1 &
	run_pid=$!
	wait "$run_pid"
	rc=$?
	run_pid=
	t1=$(date +%s%N)
	m_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')
	# size count type redop root time algbw busbw #wrong (out-of-place),
	# time algbw busbw #wrong (in-place), wire/S ran
	row=$(sed 's/^\[0\] //' "$tmp/perf.log" | awk -v s="$bytes" '$1 == s && NF >= 15 { print $6, $8, $9, $10, $13, $NF; exit }')
	if [ "$rc" -ne 0 ]; then
		m_err="exit status $rc"
	elif [ -z "$row" ]; then
		m_err="no result row for $bytes bytes"
	else
		local t bw w1 t2 w2 ran
		read -r t bw w1 t2 w2 ran <<<"$row"
		if [ "$w1" != 0 ] || [ "$w2" != 0 ]; then
			m_err="WRONG RESULTS: #wrong $w1 (out-of-place) $w2 (in-place)"
		elif [ "$ran" != "$topo" ]; then
			m_err="asked for $topo, ran $ran"
		else
			m_time=$t m_busbw=$bw
			m_busy=$(awk -v a="$t" -v b="$t2" -v r=$((warmup + it + 1)) 'BEGIN { printf "%.6f", r * (a + b) / 1e6 }')
		fi
	fi
	if [ -n "$m_err" ]; then
		failed=1
		{
			echo "$bench_name: N=$n $topo $bytes bytes: $m_err"
			echo "  $run -n $n -k 1 -- $perf -t $topo -b $bytes -e $bytes -n $it -w $warmup -c 1 $*"
			sed 's/^/  | /' "$tmp/perf.log" | tail -40
		} >&2
	fi
}

# switch_rates COUNT SECONDS: the rx packets per second of every worker of the
# COUNT switches just stopped, as "mean/min" in millions.
switch_rates() {
	local i
	for ((i = 0; i < $1; i++)); do
		cat "$tmp/switch$i.log"
	done | awk -v wall="$2" '
		# NAME: port P, workers W, Seg units U, in use X
		/: port [0-9]+, workers [0-9]+,/ { for (f = 1; f < NF; f++) if ($f == "workers") w = $(f + 1) + 0; per = 0; next }
		/packets per worker \(in\/out\):/ {
			for (f = 5; f <= NF; f++) { split($f, io, "/"); r[k++] = io[1] }
			per = 1; next
		}
		$1 == "total:" && $2 == "rx_packets" {
			if (!per) {
				if (w > 1) bad = 1
				r[k++] = $3 + 0
			}
		}
		END {
			if (bad || k == 0 || wall <= 0) { print "?"; exit }
			min = -1
			for (i = 0; i < k; i++) { s += r[i]; if (min < 0 || r[i] < min) min = r[i] }
			printf "%.3f/%.3f\n", s / k / wall / 1e6, min / wall / 1e6
		}'
}

failed=0
rows=()
# config NODES LABEL RING-BUSBW: one configuration, a row of the table;
# SWITCHES and THREADS (globals sw_n, sw_t) say which switches, 0: ring.
config() {
	local n=$1 label=$2 ring_bw=$3 topo=switch lat bw pps=- ratio=-
	[ "$sw_n" -eq 0 ] && topo=ring
	# SMALL, one at a time, in switches of its own.
	[ "$sw_n" -gt 0 ] && start_switches "$sw_n" "$sw_t"
	measure "$n" "$topo" "$small" "$lat_iters" -z 1 "${sw_args[@]}"
	lat=$m_time
	stop_switches
	# BIG, in fresh switches: their counters are this run's.
	[ "$sw_n" -gt 0 ] && start_switches "$sw_n" "$sw_t"
	measure "$n" "$topo" "$big" "$iters" "${sw_args[@]}"
	bw=$m_busbw
	stop_switches
	if [ "$sw_n" -gt 0 ] && [ -z "$m_err" ]; then
		[ "$pps_time" = wall ] && pps=$(switch_rates "$sw_n" "$m_wall") || pps=$(switch_rates "$sw_n" "$m_busy")
	fi
	[[ $bw =~ ^[0-9.]+$ ]] && [[ $ring_bw =~ ^[0-9.]+$ ]] &&
		ratio=$(awk -v a="$bw" -v b="$ring_bw" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
	sw_args=()
	cfg_busbw=$bw
	rows+=("$(printf "%4s  %-10s  %10s  %12s  %15s  %8s" "$n" "$label" "$bw" "$lat" "$pps" "$ratio")")
	printf '%s\n' "${rows[-1]}"
}

model=$(awk -F': *' '/^model name|^Model|^Hardware/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
echo "# host: $cores cores, ${model:-unknown CPU}; $(date '+%Y-%m-%d %H:%M:%S %Z')"
echo "# bench-scale: allreduce fp32 sum, 1 rank per node, loopback; busbw at $big B ($iters iterations," \
	"$warmup warmup), latency at $small B (one at a time, $lat_iters iterations); every element checked"
per="the wall time of the $big B job"
[ "$pps_time" = busy ] && per="the time its allreduces took (PPS_TIME=busy)"
echo "# Mpps/thr: rx packets of each switch worker over $per; mean/min"
header=$(printf "%4s  %-10s  %10s  %12s  %15s  %8s" "N" "config" "busbw GB/s" "lat(us) ${small}B" "Mpps/thr mn/min" "vs ring")
echo "$header"
for n in $nodes_list; do
	sw_n=0 sw_t=0
	config "$n" ring -
	ring_bw=$cfg_busbw
	for t in $threads; do
		sw_n=1 sw_t=$t
		config "$n" "switch-T$t" "$ring_bw"
	done
	for p in $planes_list; do
		sw_n=$p sw_t=1
		config "$n" "planes-$p" "$ring_bw"
	done
done

# The table again in one piece (the rows above came as they were measured,
# between any failure messages).
echo
echo "$header"
printf '%s\n' "${rows[@]}"
[ "$failed" -eq 0 ] || echo "$bench_name: some runs failed (FAIL above); see the messages on stderr" >&2
exit "$failed"
