#!/bin/bash
# The PMIx bootstrap with the shared device: ibv_coll_perf started by
# mpirun with IBV_COLL_CRXE_SHARED=y groups the processes of this host into
# one node (ibvc_boot_place: PMIx's node id), whose first process leads and
# the others join; every result checked (check_perf.sh).
#   test_perf_pmix_shared.sh PERF DEVD CHECK_PERF NP
set -u
perf=$1 devd=$2 check=$3 np=$4
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (openmpi-bin)" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d /tmp/ivcpmixs.XXXXXX)
d_pid=
trap '[ -n "$d_pid" ] && kill "$d_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
unset IBVC_BOOT_ADDR IBVC_BOOT_NODE IBVC_BOOT_NODES IBVC_JOB_NODE PMIX_RANK PMIX_NAMESPACE
# The daemon first, as a service would run (first opens would race to
# start one); one that serves crxe_lo already will do.
IBV_COLL_LOG_LEVEL=info "$devd" lo >"$tmp/devd.log" 2>&1 &
d_pid=$!
for _ in $(seq 100); do
	grep -q "serving on" "$tmp/devd.log" || ! kill -0 $d_pid 2>/dev/null && break
	sleep 0.05
done
timeout 100 sh "$check" mpirun --oversubscribe --bind-to none -np "$np" \
	-x IBV_COLL_CRXE_SHARED=y -x IBV_COLL_CRXE_DEVD= \
	"$perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || { echo "FAIL: mpirun -np $np ibv_coll_perf on the shared device"; exit 1; }
grep -q "^# nNodes 1 nProcs $np ranksPerNode $np nRanks $np " "$tmp/out" ||
	{ echo "FAIL: the $np processes of this host are not one node"; exit 1; }
echo "PASS: $np processes under mpirun, one node on the shared device"
