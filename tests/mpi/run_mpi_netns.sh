#!/bin/bash
# The MPI drop-in and the PMIx bootstrap across the namespace fabric
# (fabric.sh): mpirun in host 0's namespace starts one rank per host
# namespace through netns-rsh.sh, each rank on its eth0 device.
#
#   run_mpi_netns.sh LIB CHECK SWITCHD PERF ring|switch
#
# ring:   collectives round the NIC ring
# switch: through ibv_coll_switchd in switch namespace 0
# Runs mpi_coll_check with the drop-in preloaded (every result against
# PMPI, statistics checked as in run_mpi_check.sh) and ibv_coll_perf as
# one job of FABRIC_HOSTS nodes.
set -u
lib=$1 check=$2 switchd=$3 perf=$4 mode=$5
here=$(cd "$(dirname "$0")" && pwd)
rsh=$here/../multihost/netns-rsh.sh
n=$FABRIC_HOSTS
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (openmpi-bin)" >&2; exit 77; }
tmp=$(mktemp -d /tmp/ivcmpin.XXXXXX)
sw_pid=
cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
hosts=
for ((i = 0; i < n; i++)); do
	v=FABRIC_IP_$i
	hosts+="${hosts:+,}${!v}"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --mca plm_rsh_agent "$rsh" --host "$hosts" -np "$n" --bind-to none --mca op ^avx
	--mca btl self,tcp)
env=(-x LD_PRELOAD="$lib" -x IBV_COLL_MPI_STATS=1 -x IBV_COLL_MPI_DEVICE=crxe_eth0)
perf_args=(-D crxe_eth0)
if [ "$mode" = switch ]; then
	ip netns exec "$FABRIC_SW_NS_0" "$switchd" -p 4791 -n sw0 >"$tmp/sw.log" 2>&1 &
	sw_pid=$!
	sleep 0.3
	env+=(-x IBV_COLL_MPI_SWITCH="$FABRIC_SW_IP_0:4791" -x IBV_COLL_MPI_TOPOLOGY=switch)
	perf_args+=(-t switch -s "$FABRIC_SW_IP_0:4791")
fi

timeout 150 ip netns exec "$FABRIC_NS_0" "${mpi[@]}" "${env[@]}" "$check" --iters 60 --max-count 20000 \
	>"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || { echo "run_mpi_netns: mpi_coll_check failed ($rc)"; exit 1; }
[ "$(grep -c "^ibv_coll_mpi: rank [0-9]*: offloaded [1-9]" "$tmp/out")" = "$n" ] ||
	{ echo "run_mpi_netns: not every rank offloaded"; exit 1; }
grep -q "failed [1-9]" "$tmp/out" && { echo "run_mpi_netns: a call failed"; exit 1; }
if [ "$mode" = switch ]; then
	grep "offloaded" "$tmp/out" | grep -q "(switch [1-9]" ||
		{ echo "run_mpi_netns: nothing ran in the switch"; exit 1; }
fi

# What MPI programs may do that once hung the drop-in (mpi_coll_check.cc,
# liveness()), here with Open MPI's TCP transport between the hosts.
timeout 60 ip netns exec "$FABRIC_NS_0" "${mpi[@]}" "${env[@]}" "$check" --liveness \
	>"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || { echo "run_mpi_netns: mpi_coll_check --liveness failed ($rc)"; exit 1; }
grep -q "failed [1-9]" "$tmp/out" && { echo "run_mpi_netns: a call failed"; exit 1; }

timeout 60 ip netns exec "$FABRIC_NS_0" "${mpi[@]}" "$perf" "${perf_args[@]}" -b 8 -e 1M -f 16 \
	-n 3 -w 1 -c 1 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || { echo "run_mpi_netns: ibv_coll_perf under mpirun failed ($rc)"; exit 1; }
grep -q "nNodes $n " "$tmp/out" || { echo "run_mpi_netns: not one job of $n nodes"; exit 1; }
exit 0
