#!/bin/bash
# bench-baseline - ibv_coll's ALLREDUCE (ibv_coll_perf under ibv_coll_run)
# against Open MPI's MPI_Allreduce over TCP on the loopback interface, with
# the same process count, type, operation, sizes and result checks, and
# the same MPI benchmark with libibv_coll_mpi.so preloaded (the drop-in:
# MPI_Allreduce handed to the offload engine, through the same switch when
# ours has one), side by side.
#
# Installs openmpi-bin and libopenmpi-dev if missing, builds ibv_coll_run and
# ibv_coll_perf (cmake) and bench/mpi_allreduce_perf (mpicc), then for each
# size runs ours and MPI alternately, so that both see the machine in the
# same state, and prints both tables in nccl-tests' format and a comparison.
#
# Usage: scripts/bench-baseline.sh [ibv_coll_perf options...]
#   e.g. scripts/bench-baseline.sh -t switch
# With -t switch or -t auto and no -s, it starts an ibv_coll_switchd on a
# free UDP port for the run and points ours at it.
# Environment: BUILD_DIR (build), NP (4), MINBYTES (8), MAXBYTES (64M),
#   FACTOR (2), SMALL_ITERS (500) and SMALL_WARMUP (50) up to 64 KiB, where
#   a run is short and the noise large, ITERS (20) and WARMUP (5) up to
#   1 MiB, BIG_ITERS (5) and
#   BIG_WARMUP (1) above, TIMEOUT (600 s per run), BLOCKING (1: ours waits
#   for each collective, as MPI_Allreduce does), REPEAT (3): each size
#   runs REPEAT times on each side, alternating (ours, MPI, drop-in, then
#   the other way round), and the tables keep each side's median run; the
#   comparison also shows the fastest and slowest.
#   SHARED (0; 1: ours and the drop-in on the host's shared device,
#   IBV_COLL_CRXE_SHARED=y, one ibv_coll_devd for the run: the NP
#   processes are one node, as on a host with one NIC, and every
#   collective runs inside it, neither round a ring nor through a switch).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
np=${NP:-4}
factor=${FACTOR:-2}
small_iters=${SMALL_ITERS:-500} small_warmup=${SMALL_WARMUP:-50}
iters=${ITERS:-20} warmup=${WARMUP:-5}
big_iters=${BIG_ITERS:-5} big_warmup=${BIG_WARMUP:-1}
timeout=${TIMEOUT:-600}
repeat=${REPEAT:-3}
ours_extra=("$@")

bytes() { # 8, 64K, 64M, 1G -> bytes
	local v=$1
	case $v in
	*[kK]) echo $((${v%?} * 1024)) ;;
	*[mM]) echo $((${v%?} * 1024 * 1024)) ;;
	*[gG]) echo $((${v%?} * 1024 * 1024 * 1024)) ;;
	*) echo $((v)) ;;
	esac
}
minb=$(bytes "${MINBYTES:-8}")
maxb=$(bytes "${MAXBYTES:-64M}")

echo "== dependencies"
missing=""
for p in openmpi-bin libopenmpi-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
echo "$(mpirun --version 2>&1 | head -1)"

echo "== build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target ibv_coll_run ibv_coll_perf ibv_coll_switchd \
	ibv_coll_devd ibv_coll_mpi mpi_allreduce_perf >/dev/null
echo "built $build/tools/ibv_coll_run, $build/tools/ibv_coll_perf, $build/bench/mpi_allreduce_perf"

# A switch for -t switch / -t auto without -s: ours, for the whole run.
tmpd=$(mktemp -d)
sw_pid=
devd_pid=
cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	[ -n "$devd_pid" ] && kill "$devd_pid" 2>/dev/null
	rm -rf "$tmpd"
}
trap cleanup EXIT
shared=${SHARED:-0}
if [ "$shared" = 1 ]; then
	# The daemon first, as a service would run it; the ranks' opens
	# then find it (IBV_COLL_CRXE_DEVD empty: none starts another).
	IBV_COLL_LOG_LEVEL=info "$build/providers/crxe/ibv_coll_devd" lo >"$tmpd/devd.log" 2>&1 &
	devd_pid=$!
	for _ in $(seq 100); do
		grep -q "serving on" "$tmpd/devd.log" && break
		sleep 0.05
	done
	grep -q "serving on" "$tmpd/devd.log" ||
		{ cat "$tmpd/devd.log"; echo "bench-baseline: the shared device did not start" >&2; exit 1; }
	export IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD=
	echo "shared device: ibv_coll_devd serving crxe_lo"
fi
wants_switch=0 has_s=0 prev=
for a in "${ours_extra[@]}"; do
	case "$prev $a" in
	"-t switch" | "-t auto" | "--topology switch" | "--topology auto" | *" -tswitch" | \
		*" -tauto" | *" --topology=switch" | *" --topology=auto") wants_switch=1 ;;
	esac
	case "$a" in -s | --switch | --switch=*) has_s=1 ;; esac
	prev=$a
done
if [ "$wants_switch" = 1 ] && [ "$has_s" = 0 ]; then
	"$build/emulator/ibv_coll_switchd" -p 0 -P "$tmpd/port" -n switch0 >"$tmpd/switch.log" 2>&1 &
	sw_pid=$!
	for _ in $(seq 100); do
		[ -s "$tmpd/port" ] && break
		sleep 0.05
	done
	[ -s "$tmpd/port" ] || { cat "$tmpd/switch.log"; echo "bench-baseline: the switch did not start" >&2; exit 1; }
	ours_extra+=(-s "127.0.0.1:$(cat "$tmpd/port")")
	echo "switch: ibv_coll_switchd on udp port $(cat "$tmpd/port")"
fi
# The drop-in goes the way ours goes: the same switch and topology.
dropin_env=(-x LD_PRELOAD="$build/mpi/libibv_coll_mpi.so" -x IBV_COLL_MPI_DEVICE=crxe_lo
	-x IBV_COLL_MPI_STATS=1)
[ "$shared" = 1 ] && dropin_env+=(-x IBV_COLL_CRXE_SHARED=y -x IBV_COLL_CRXE_DEVD=)
prev=
for a in "${ours_extra[@]}"; do
	case "$prev" in
	-s | --switch) dropin_env+=(-x IBV_COLL_MPI_SWITCH="$a") ;;
	-t | --topology) dropin_env+=(-x IBV_COLL_MPI_TOPOLOGY="$a") ;;
	esac
	prev=$a
done

# Open MPI: the ob1 point-to-point layer over the TCP BTL only ("self" is a
# rank's messages to itself), on lo, so no shared memory (vader/sm) and no
# UCX; coll/sm (shared-memory collectives, disabled by default) excluded
# too; the runtime's own traffic stays on lo.  Processes are not bound:
# four on two cores, as ours.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" --bind-to none
	--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
	--mca oob_tcp_if_include lo --mca coll ^sm)
# Both sides wait for each collective before starting the next, as a
# blocking MPI_Allreduce does (ibv_coll_perf -z 1; BLOCKING=0 lets ours
# keep 32 in flight, as nccl-tests does, which is not what MPI is doing).
nodes=(-n "$np")
[ "$shared" = 1 ] && nodes=(-n 1 -p "$np")
ours_cmd=("$build/tools/ibv_coll_run" --timeout "$timeout" "${nodes[@]}" -k 1 --
	"$build/tools/ibv_coll_perf" -C allreduce -d float -o sum -c 1 -z "${BLOCKING:-1}")
mpi_cmd=(timeout "$timeout" "${mpirun_cmd[@]}" "$build/bench/mpi_allreduce_perf" -d float -o sum -c 1)
dropin_cmd=(timeout "$timeout" "${mpirun_cmd[@]}" "${dropin_env[@]}" "$build/bench/mpi_allreduce_perf"
	-d float -o sum -c 1)

echo "== transport check: what Open MPI selects"
# Verbose selection output from every process: the PML, the BTLs that
# initialise, and the collective components enabled on the communicators.
verbose=$("${mpirun_cmd[@]}" --mca pml_base_verbose 10 --mca btl_base_verbose 30 \
	--mca coll_base_verbose 20 "$build/bench/mpi_allreduce_perf" -b 8 -e 8 -n 1 -w 0 2>&1) || {
	printf '%s\n' "$verbose"
	echo "bench-baseline: the MPI check run failed" >&2
	exit 1
}
summary=$(printf '%s\n' "$verbose" | sed 's/^\[[^]]*\] *//' | grep -E \
	"select: component [a-z0-9]+ selected|init of component [a-z0-9]+ returned success|btl: tcp: Using interface|comm_select: selecting +[a-z0-9]+, priority +[0-9]+, Enabled" |
	sed -E 's/ +/ /g' | sort | uniq -c || true)
printf '%s\n' "$summary"
if ! grep -q "component ob1 selected" <<<"$summary" ||
	! grep -q "component tcp returned success" <<<"$summary" ||
	grep -qE "component (vader|sm|smcuda|ucx) returned success|selecting (sm|hcoll|han|ucc),.*Enabled" \
		<<<"$summary"; then
	echo "bench-baseline: Open MPI does not run ob1 over TCP alone" >&2
	exit 1
fi
echo "=> ob1 over the tcp BTL on lo (self for a rank's own messages), coll tuned; no shared memory"

ours_hdr=$tmpd/ours_hdr mpi_hdr=$tmpd/mpi_hdr ours_rows=$tmpd/ours_rows mpi_rows=$tmpd/mpi_rows
ours_try=$tmpd/ours_try mpi_try=$tmpd/mpi_try spread=$tmpd/spread
dropin_hdr=$tmpd/dropin_hdr dropin_rows=$tmpd/dropin_rows dropin_try=$tmpd/dropin_try
: >"$ours_hdr"; : >"$mpi_hdr"; : >"$ours_rows"; : >"$mpi_rows"; : >"$dropin_hdr"; : >"$dropin_rows"

# Header lines (once) into $2, result rows into $3.
collect() {
	local out=$1 hdr=$2 rows=$3
	if [ ! -s "$hdr" ]; then
		printf '%s\n' "$out" | awk '/^#/ { print } /^# +\(B\)/ { exit }' >"$hdr"
	fi
	printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 13' >>"$rows"
}

# The median of a size's runs (by out-of-place time) goes to the table.
median_row() {
	sort -g -k6,6 "$1" | awk -v k="$repeat" 'NR == int((k + 1) / 2)'
}
# min and max out-of-place time of a size's runs
min_max() {
	awk 'NR == 1 || $6 < lo { lo = $6 } NR == 1 || $6 > hi { hi = $6 } END { print lo, hi }' "$1"
}

echo "== runs: $np processes, float sum, $minb to $maxb bytes, factor $factor, ours, MPI and MPI with the drop-in at each size, $repeat times"
# One run of each side at $size ($n timed, $w warm-up), its row added to
# its side's tries.
run_ours() {
	local out
	if ! out=$("${ours_cmd[@]}" -b "$size" -e "$size" -n "$n" -w "$w" "${ours_extra[@]}" 2>&1); then
		printf '%s\n' "$out"
		echo "bench-baseline: ibv_coll_perf failed at $size bytes" >&2
		exit 1
	fi
	collect "$(printf '%s\n' "$out" | sed 's/^\[0\] //')" "$ours_hdr" "$ours_try"
}
run_mpi() {
	local out
	if ! out=$("${mpi_cmd[@]}" -b "$size" -e "$size" -n "$n" -w "$w" 2>&1); then
		printf '%s\n' "$out"
		echo "bench-baseline: mpi_allreduce_perf failed at $size bytes" >&2
		exit 1
	fi
	collect "$out" "$mpi_hdr" "$mpi_try"
}
run_dropin() {
	local out
	if ! out=$("${dropin_cmd[@]}" -b "$size" -e "$size" -n "$n" -w "$w" 2>&1); then
		printf '%s\n' "$out"
		echo "bench-baseline: mpi_allreduce_perf with the drop-in failed at $size bytes" >&2
		exit 1
	fi
	# Every rank's statistics: its allreduces offloaded, none failed.
	if [ "$(printf '%s\n' "$out" | grep -c "offloaded [1-9].*failed 0).*allreduce [1-9]")" != "$np" ]; then
		printf '%s\n' "$out" | grep "^ibv_coll_mpi" >&2
		echo "bench-baseline: the drop-in did not offload every rank's allreduce at $size bytes" >&2
		exit 1
	fi
	collect "$out" "$dropin_hdr" "$dropin_try"
}

size=$minb
while [ "$size" -le "$maxb" ]; do
	n=$iters w=$warmup
	if [ "$size" -le $((64 << 10)) ]; then
		n=$small_iters w=$small_warmup
	elif [ "$size" -gt $((1 << 20)) ]; then
		n=$big_iters w=$big_warmup
	fi
	: >"$ours_try"
	: >"$mpi_try"
	: >"$dropin_try"
	for ((r = 1; r <= repeat; r++)); do
		# Odd rounds ours, MPI, drop-in; even rounds the other way
		# round: a machine that speeds up or slows down over the
		# rounds (other tenants) then favours no side.
		if [ $((r % 2)) -eq 1 ]; then
			run_ours
			run_mpi
			run_dropin
		else
			run_dropin
			run_mpi
			run_ours
		fi
	done
	median_row "$ours_try" >>"$ours_rows"
	median_row "$mpi_try" >>"$mpi_rows"
	median_row "$dropin_try" >>"$dropin_rows"
	echo "$(min_max "$ours_try") $(min_max "$mpi_try")" >>"$spread"
	printf '  %10d bytes: ours %s us, MPI %s us, MPI+drop-in %s us (medians of %d; ours %s, MPI %s)\n' \
		"$size" "$(tail -1 "$ours_rows" | awk '{print $6}')" "$(tail -1 "$mpi_rows" | awk '{print $6}')" \
		"$(tail -1 "$dropin_rows" | awk '{print $6}')" "$repeat" "$(min_max "$ours_try" | tr ' ' -)" \
		"$(min_max "$mpi_try" | tr ' ' -)"
	size=$((size * factor))
done

# One table: the header of the first run with the sweep's sizes, the rows,
# and nccl-tests' summary lines recomputed over all rows.
table() {
	local title=$1 hdr=$2 rows=$3
	echo
	echo "== $title"
	sed -E "s/minBytes [0-9]+ maxBytes [0-9]+ step: [0-9]+\([a-z]+\) warmup iters: [0-9]+ iters: [0-9]+/minBytes $minb maxBytes $maxb step: $factor(factor) warmup iters: $small_warmup\/$warmup\/$big_warmup iters: $small_iters\/$iters\/$big_iters (up to 64 KiB\/to 1 MiB\/above)/" "$hdr"
	cat "$rows"
	# (each run already failed, stopping the script, on any wrong element or
	# out-of-bounds write: these lines restate it for the whole sweep)
	awk '{ w += $9 + $13; bw += $8 + $12; n += 2 }
	     END { printf "# Out of bounds values : 0 OK\n# Wrong elements       : %d %s\n", w, w ? "FAILED" : "OK"
		   printf "# Avg bus bandwidth    : %g \n#\n", n ? bw / n : 0 }' "$rows"
}
table "ibv_coll: ibv_coll_run ${nodes[*]} -k 1 -- ibv_coll_perf -C allreduce -d float -o sum -c 1 ${ours_extra[*]}" \
	"$ours_hdr" "$ours_rows"
table "Open MPI: ${mpirun_cmd[*]} mpi_allreduce_perf" "$mpi_hdr" "$mpi_rows"
table "Open MPI with the drop-in: ${mpirun_cmd[*]} ${dropin_env[*]} mpi_allreduce_perf" "$dropin_hdr" \
	"$dropin_rows"

echo
echo "== comparison, out of place, medians of $repeat: busbw in GB/s, ratio = ours / MPI busbw, lat.ratio = ours / MPI time, ratio range = from our slowest against MPI's fastest to our fastest against MPI's slowest"
echo "   drop-in = the same MPI benchmark with libibv_coll_mpi.so preloaded; d.ratio = drop-in / MPI busbw"
printf '%12s  %12s  %12s  %8s  %12s  %12s  %8s  %11s  %12s  %12s  %8s  %s\n' "size(B)" "ours busbw" \
	"MPI busbw" "ratio" "ours us" "MPI us" "lat.ratio" "ratio range" "drop-in bw" "drop-in us" \
	"d.ratio" "ours ran"
# busbw recomputed from size and time, with more digits than the tables.
paste "$ours_rows" "$mpi_rows" "$spread" "$dropin_rows" | awk -v nf="$(head -1 "$ours_rows" | awk '{print NF}')" \
	-v mf="$(head -1 "$mpi_rows" | awk '{print NF}')" -v np="$np" '{
	m = nf # the MPI row starts after the ours row, the spread after both
	s = nf + mf
	ot = $6; mt = $(m + 6); f = 2 * (np - 1) / np
	ob = (ot > 0) ? $1 / ot / 1e3 * f : 0
	mb = (mt > 0) ? $1 / mt / 1e3 * f : 0
	ratio = (mb > 0) ? sprintf("%.2f", ob / mb) : "-"
	lat = (mt > 0) ? sprintf("%.2f", ot / mt) : "-"
	olo = $(s + 1); ohi = $(s + 2); mlo = $(s + 3); mhi = $(s + 4)
	range = (ohi > 0 && mhi > 0) ? sprintf("%.2f-%.2f", mlo / ohi, mhi / olo) : "-"
	dt = $(s + 4 + 6) # the drop-in row: the MPI benchmark format again
	db = (dt > 0) ? $1 / dt / 1e3 * f : 0
	dratio = (mb > 0) ? sprintf("%.2f", db / mb) : "-"
	printf "%12d  %12.4f  %12.4f  %8s  %12.1f  %12.1f  %8s  %11s  %12.4f  %12.1f  %8s  %s\n", $1, ob, mb,
		ratio, ot, mt, lat, range, db, dt, dratio, $nf
}'
