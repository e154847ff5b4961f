#!/bin/bash
# mpi_coll_check under mpirun on this host, with libibv_coll_mpi.so
# preloaded, and its statistics checked: every rank must have offloaded
# calls and none may have failed (or, for --unsupported, fallen through
# for the reasons the test provokes).
#
#   run_mpi_check.sh LIB CHECK NP ring|switch|shared SWITCHD|DEVD [mpi_coll_check args...]
#
# switch: an ibv_coll_switchd on the loopback, IBV_COLL_MPI_SWITCH set.
# IVC_MPIRUN_ARGS: more mpirun options (such as --mca btl self,tcp).
# shared: the ranks on the host's shared device (IBV_COLL_CRXE_SHARED=y,
# the daemon DEVD started on the first open): the host's ranks are one
# node of each job, so every offloaded call must have run inside the NIC
# (local), none round the ring.
set -u
lib=$1 check=$2 np=$3 mode=$4 switchd=$5
shift 5
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (openmpi-bin)" >&2; exit 77; }
tmp=$(mktemp -d /tmp/ivcmpi.XXXXXX)
sw_pid=
cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
env=(-x LD_PRELOAD="$lib" -x IBV_COLL_MPI_STATS=1 -x IBV_COLL_MPI_DEVICE=crxe_lo)
if [ "$mode" = switch ]; then
	"$switchd" -p 0 -n sw0 -P "$tmp/port" >"$tmp/sw.log" 2>&1 &
	sw_pid=$!
	for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
	[ -s "$tmp/port" ] || { echo "switch did not start:"; cat "$tmp/sw.log"; exit 1; }
	env+=(-x IBV_COLL_MPI_SWITCH="127.0.0.1:$(cat "$tmp/port")" -x IBV_COLL_MPI_TOPOLOGY=switch)
fi
if [ "$mode" = shared ]; then
	# The daemon first, as a service would run (the ranks' first opens
	# would race to start one); one that serves crxe_lo already will do.
	IBV_COLL_LOG_LEVEL=info "$switchd" lo >"$tmp/devd.log" 2>&1 &
	sw_pid=$!
	for _ in $(seq 100); do
		grep -q "serving on" "$tmp/devd.log" || ! kill -0 $sw_pid 2>/dev/null && break
		sleep 0.05
	done
	env+=(-x IBV_COLL_CRXE_SHARED=y -x IBV_COLL_CRXE_DEVD= -x IBV_COLL_MPI_TOPOLOGY=ring)
fi
# --mca op ^avx: Open MPI 4.1's AVX reductions saturate unsigned 8- and
# 16-bit sums instead of wrapping as C (and the device) do; the reference
# must be the standard's answer.
read -r -a extra <<<"${IVC_MPIRUN_ARGS:-}"
timeout 120 mpirun --oversubscribe --bind-to none --mca op ^avx "${extra[@]}" -np "$np" "${env[@]}" \
	"$check" "$@" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || { echo "run_mpi_check: mpi_coll_check failed ($rc)"; exit 1; }
stats=$(grep -c "^ibv_coll_mpi: rank [0-9]*: offloaded" "$tmp/out")
[ "$stats" = "$np" ] || { echo "run_mpi_check: $stats of $np ranks printed statistics"; exit 1; }
if grep -q -- "--one-rank" <<<"$*"; then
	exit 0 # it finished: that was the test
fi
if grep -q -- "--unsupported" <<<"$*"; then
	# Each provoked refusal must show, and nothing may have failed.
	for why in datatype op comm; do
		grep "offloaded" "$tmp/out" | grep -q "fell through [1-9][0-9]* (.*$why [1-9]" ||
			{ echo "run_mpi_check: no fall-through for $why"; exit 1; }
	done
	grep -q "failed [1-9]" "$tmp/out" && { echo "run_mpi_check: a call failed"; exit 1; }
	exit 0
fi
grep "offloaded" "$tmp/out" | grep -q "offloaded 0 " && { echo "run_mpi_check: a rank offloaded nothing"; exit 1; }
grep -q "failed [1-9]" "$tmp/out" && { echo "run_mpi_check: a call failed"; exit 1; }
if [ "$mode" = switch ]; then
	grep "offloaded" "$tmp/out" | grep -q "(switch [1-9]" ||
		{ echo "run_mpi_check: nothing ran in the switch"; exit 1; }
fi
if [ "$mode" = shared ]; then
	n=$(grep "offloaded" "$tmp/out" | grep -c "ring 0, fallback 0, local [1-9]")
	[ "$n" = "$np" ] ||
		{ echo "run_mpi_check: $n of $np ranks ran every call inside the NIC (one node)"; exit 1; }
fi
exit 0
