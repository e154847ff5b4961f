#!/bin/bash
# The PMIx bootstrap: ibv_coll_perf and coll_node started by mpirun are
# one job of N nodes (not N jobs of one); started alone without a
# rendezvous, ibv_coll_perf says so and exits 2; --nodes 1 still runs
# this node alone.
#   test_perf_pmix.sh PERF COLL_NODE
set -u
perf=$1 coll_node=$2
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (openmpi-bin)" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d /tmp/ivcpmix.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" 2>/dev/null; exit 1; }
unset IBVC_BOOT_ADDR IBVC_BOOT_NODE IBVC_BOOT_NODES PMIX_RANK PMIX_NAMESPACE

env -u PMIX_RANK "$perf" -b 8 -e 8 -n 1 -w 0 >"$tmp/out" 2>&1
[ $? = 2 ] || fail "ibv_coll_perf alone did not exit 2"
grep -q "no rendezvous" "$tmp/out" || fail "ibv_coll_perf alone did not say why"

"$perf" --nodes 1 -b 8 -e 8 -n 1 -w 0 >"$tmp/out" 2>&1 || fail "ibv_coll_perf --nodes 1"
grep -q "nNodes 1 " "$tmp/out" || fail "--nodes 1 is not a job of one node"

timeout 60 mpirun --oversubscribe --bind-to none -np 3 "$perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 \
	>"$tmp/out" 2>&1 || fail "mpirun -np 3 ibv_coll_perf"
[ "$(grep -c "nNodes 3 " "$tmp/out")" = 1 ] || fail "mpirun -np 3 did not run one job of 3 nodes"
cat "$tmp/out"

timeout 60 mpirun --oversubscribe --bind-to none -np 2 -x IBV_COLL_TEST_DEV=crxe_lo \
	"$coll_node" --ranks 2 --dev crxe_lo >"$tmp/out" 2>&1 || fail "mpirun -np 2 coll_node"
echo "coll_node under mpirun: ok"
