#!/bin/bash
# ibv_coll_perf and the MPI drop-in launched by Slurm's srun (PMIx), not
# mpirun: a private one-node cluster on this host (munged with a key of
# its own, slurmctld, slurmd on free ports, everything in a temporary
# folder), then
#   srun --mpi=pmix -n 4 ibv_coll_perf ...   one job of 4 nodes, every
#                                            result checked (check_perf.sh)
#   srun --mpi=pmix -n 4 mpi_coll_check ...  libibv_coll_mpi.so preloaded:
#                                            0 wrong, every rank offloaded
#                                            calls, none failed
# Root only (slurmd runs tasks as their user); skipped (77) without root
# or without Debian's slurmctld, slurmd, slurm-client and munge.
#   run_slurm.sh PERF MPI_LIB MPI_CHECK CHECK_PERF
set -u
perf=$1 lib=$2 check=$3 check_perf=$4
np=4

skip() {
	echo "SKIP: $*"
	exit 77
}
[ "$(id -u)" = 0 ] || skip "not root (slurmd runs the tasks)"
for p in slurmctld slurmd srun sinfo munged; do
	command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$p" >/dev/null ||
		skip "no $p (slurmctld slurmd slurm-client munge)"
done
export PATH=$PATH:/usr/sbin:/sbin

# Nothing of an outer Slurm job or launcher may leak into ours.
for v in $(env | sed -n 's/^\(\(SLURM\|PMIX\|PMI\|OMPI\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$v"
done
unset IBVC_BOOT_ADDR IBVC_BOOT_NODE IBVC_BOOT_NODES IBVC_JOB_NODE

tmp=$(mktemp -d /tmp/ivcslurm.XXXXXX) || exit 1
chmod 700 "$tmp"
pids=()
# Every process of this cluster has our SLURM_CONF in its environment
# (the daemons, the step daemons slurmd starts, the tasks): what is left
# of one after the daemons are told to stop is found by it, and nothing
# else is touched.
ours() {
	local e
	for e in /proc/[0-9]*/environ; do
		grep -qzx "SLURM_CONF=$tmp/slurm.conf" "$e" 2>/dev/null || continue
		e=${e#/proc/}
		[ "${e%/environ}" != $$ ] && [ "${e%/environ}" != "$BASHPID" ] && echo "${e%/environ}"
	done
}
cleanup() {
	local p left
	kill "$watchdog" 2>/dev/null
	if [ -n "${SLURM_CONF:-}" ]; then
		timeout 5 scancel --quiet --full --user=root 2>/dev/null
	fi
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	for _ in $(seq 50); do
		left=
		for p in "${pids[@]}"; do
			kill -0 "$p" 2>/dev/null && left=1
		done
		[ -z "$left" ] && break
		sleep 0.1
	done
	# shellcheck disable=SC2046
	kill -9 "${pids[@]}" $(ours) 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# This script killed outright (SIGKILL, a test driver's timeout): the
# daemons die with it (setpriv --pdeathsig below); this takes the rest.
(
	trap - EXIT INT TERM
	while kill -0 $$ 2>/dev/null; do sleep 1; done
	# shellcheck disable=SC2046
	kill -9 $(ours) 2>/dev/null
	rm -rf "$tmp"
) &
watchdog=$!

logs() {
	local f
	for f in "$tmp"/*.log; do
		[ -s "$f" ] || continue
		echo "----- $(basename "$f")"
		tail -n 40 "$f"
	done
	# What a daemon said before its log was open (a bad slurm.conf).
	for f in "$tmp"/*.stderr; do
		grep -qiE "error|fatal" "$f" 2>/dev/null || continue
		echo "----- $(basename "$f")"
		grep -iE "error|fatal" "$f" | tail -n 20
	done
}
fail() {
	echo "FAIL: $*"
	logs
	exit 1
}

# Two free ports below the ephemeral range, so that neither a system
# slurm (6817/6818) nor an outgoing connection holds them.
used=$(awk 'NR > 1 { split($2, a, ":"); print strtonum("0x" a[2]) }' /proc/net/tcp /proc/net/tcp6 \
	2>/dev/null | sort -u)
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000))
		grep -qx "$p" <<<"$used" || {
			used="$used"$'\n'"$p"
			echo "$p"
			return
		}
	done
	return 1
}
ctld_port=$(free_port) || fail "no free port"
slurmd_port=$(free_port) || fail "no free port"

host=$(hostname -s)
cpus=$(nproc)
[ "$cpus" -ge "$np" ] || cpus=$np

# munged with a key of its own, on a socket of its own.
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge.key"
setpriv --pdeathsig KILL munged -F --force --key-file="$tmp/munge.key" --socket="$tmp/munge.sock" \
	--pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" \
	>"$tmp/munged.stderr" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$tmp/munge.sock" ] && break; sleep 0.1; done
[ -S "$tmp/munge.sock" ] || fail "munged did not start"

mkdir -p "$tmp/state" "$tmp/spool" "$tmp/pmix"
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=ivctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
# The PMIx plugin's per-job folders in ours too.
echo "PMIxCliTmpDirBase=$tmp/pmix" >"$tmp/mpi.conf"

setpriv --pdeathsig KILL slurmctld -D -c -f "$SLURM_CONF" >"$tmp/slurmctld.stderr" 2>&1 &
pids+=($!)
setpriv --pdeathsig KILL slurmd -D -f "$SLURM_CONF" -N "$host" >"$tmp/slurmd.stderr" 2>&1 &
pids+=($!)
state=
for _ in $(seq 300); do
	state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null)
	[ "$state" = idle ] && break
	sleep 0.1
done
[ "$state" = idle ] || fail "node $host not idle after 30 s (state '$state')"
echo "slurm: node $host idle, ports $ctld_port/$slurmd_port, $cpus CPUs"

# The PMIx plugin: Debian's slurm-wlm-basic-plugins has mpi/pmix (and
# pmix_v4, the same plugin against libpmix2).
srun --mpi=list >"$tmp/mpilist" 2>&1
cat "$tmp/mpilist"
grep -qw "pmix" "$tmp/mpilist" || fail "srun --mpi=list has no pmix plugin"

# Each run in the background and waited for, so that a signal to this
# script tears the cluster down at once (wait returns; the trap runs).
srun_n=(timeout -k 5 45 srun --mpi=pmix -N 1 -n "$np" --oversubscribe --kill-on-bad-exit=1)

# 1. ibv_coll_perf: one job of np nodes through PMIx, every result checked.
sh "$check_perf" "${srun_n[@]}" "$perf" -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 >"$tmp/out" 2>&1 &
wait $!
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || fail "srun -n $np ibv_coll_perf (check_perf: $rc)"
[ "$(grep -c "nNodes $np " "$tmp/out")" = 1 ] || fail "srun -n $np did not run one job of $np nodes"
echo "PASS: srun --mpi=pmix -n $np ibv_coll_perf"

# 2. The MPI drop-in preloaded into mpi_coll_check.  op ^avx: Open MPI
# 4.1's AVX reductions saturate small unsigned sums (run_mpi_check.sh).
"${srun_n[@]}" \
	--export="ALL,LD_PRELOAD=$lib,IBV_COLL_MPI_STATS=1,IBV_COLL_MPI_DEVICE=crxe_lo,OMPI_MCA_op=^avx" \
	"$check" --iters 60 >"$tmp/out" 2>&1 &
wait $!
rc=$?
cat "$tmp/out"
[ $rc = 0 ] || fail "srun -n $np mpi_coll_check ($rc)"
grep -q "^mpi_coll_check: .*, $np ranks: 0 wrong" "$tmp/out" || fail "no '$np ranks: 0 wrong'"
stats=$(grep -c "^ibv_coll_mpi: rank [0-9]*: offloaded" "$tmp/out")
[ "$stats" = "$np" ] || fail "$stats of $np ranks printed statistics"
grep "offloaded" "$tmp/out" | grep -q "offloaded 0 " && fail "a rank offloaded nothing"
grep -q "failed [1-9]" "$tmp/out" && fail "a call failed"
echo "PASS: srun --mpi=pmix -n $np mpi_coll_check with libibv_coll_mpi.so"
