#!/bin/bash
# switch-cost - what the aggregation switch spends per DATA packet, in
# instructions (not time: the count does not depend on the machine's load
# or clock, so two builds compare on a busy 2-core machine, and no
# hardware counters are needed).  Runs ibv_coll_sim (the real Switch code
# on a virtual clock, behind an in-process transport: no system calls) on
# one switch and N hosts under valgrind's callgrind, counting only inside
# Switch::poll_once, and divides by the DATA packets the switch took in;
# then the same for the parts: the receive path's parse (ICRC check
# included), the fold into a Seg unit, and the results sent to the N
# members (each with its own headers and ICRC); and what of the total is
# the simulator's own transport rather than the switch's.
#
#   scripts/switch-cost.sh [-n NODES] [-s SIZE] [-i ITERS]
#       -n  hosts (8), -s  allreduce bytes per rank (4M: 1024 blocks of
#       4 KiB), -i  iterations (2)
# Environment: BUILD_DIR (build).  Needs valgrind (apt-get install
# valgrind; installed here when missing and run as root).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/../build}
n=8 size=4M iters=2
while getopts "n:s:i:h" o; do
	case $o in
	n) n=$OPTARG ;;
	s) size=$OPTARG ;;
	i) iters=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
bench_name=switch-cost
. "$here/bench-common.sh"
bytes=$(bench_bytes "$size")
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] || { echo "switch-cost: -n $n: at least 2 hosts" >&2; exit 2; }
[[ $iters =~ ^[0-9]+$ ]] && [ "$iters" -ge 1 ] || { echo "switch-cost: -i $iters: at least 1" >&2; exit 2; }
sim=$build/emulator/ibv_coll_sim
[ -x "$sim" ] || { echo "switch-cost: $sim: not built" >&2; exit 2; }
if ! command -v valgrind >/dev/null; then
	if [ "$(id -u)" -eq 0 ]; then
		apt-get install -y -q valgrind >/dev/null || { echo "switch-cost: cannot install valgrind" >&2; exit 2; }
	else
		echo "switch-cost: needs valgrind (apt-get install valgrind)" >&2
		exit 2
	fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/d.json" <<EOF
{
  "seed": 1,
  "fabric": {"nodes": $n, "link": {"rate": "10gbit", "delay_us": 5, "queue": "4M"}},
  "jobs": [{"name": "switch", "topology": "switch", "sizes": ["$bytes"], "iters": $iters, "warmup": 0}]
}
EOF
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
	--toggle-collect='ibv_coll::emu::Switch::poll_once()' "$sim" "$tmp/d.json" >"$tmp/out" 2>"$tmp/err" ||
	{ cat "$tmp/out" "$tmp/err" >&2; echo "switch-cost: the simulation failed" >&2; exit 1; }
grep -q " 0 *0$" <(grep -E "^ +$bytes " "$tmp/out") ||
	{ cat "$tmp/out" >&2; echo "switch-cost: wrong or failed results" >&2; exit 1; }
callgrind_annotate --inclusive=yes "$tmp/cg" >"$tmp/ann" 2>/dev/null
# inclusive FUNCTION: its instructions, callees included (0 if not seen).
inclusive() {
	awk -v f="$1" 'index($0, f) { gsub(",", "", $1); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }' "$tmp/ann"
}
blocks=$(((bytes + 4095) / 4096))
data=$((n * blocks * iters))
total=$(inclusive 'Switch::poll_once()')
printf "# switch cost: %d hosts, %d bytes a rank (%d blocks of 4 KiB), %d iterations: %d DATA packets, %d results of %d packets\n" \
	"$n" "$bytes" "$blocks" "$iters" "$data" "$((blocks * iters))" "$n"
printf "%-34s %14s %14s\n" part instructions "per DATA packet"
for part in 'Switch::poll_once()' 'Switch::parse(' 'Switch::fold(' 'Switch::send_result(' 'crc32_clmul'; do
	v=$(inclusive "$part")
	printf "%-34s %14d %14.0f\n" "$part" "$v" "$(awk -v a="$v" -v b="$data" 'BEGIN { print a / b }')"
done
printf "# total per DATA packet: %.0f instructions\n" "$(awk -v a="$total" -v b="$data" 'BEGIN { print a / b }')"
# The simulator's transport is not the daemon's: it copies each packet sent
# and puts it on the simulated link (SimPort::tx_commit_split: split_pkt's
# copy, then the link's queue) and hands received ones over
# (SimPort::rx_batch), where
# the daemon's UdpPort sends the result from its unit with iovecs
# (sendmmsg) and receives in place (recvmmsg), in system calls callgrind
# does not count.
sim=$(($(inclusive 'SimPort::tx_commit_split(') + $(inclusive 'SimPort::rx_batch(')))
printf "# of which the simulator's transport: %.0f; the switch's own: %.0f instructions per DATA packet\n" \
	"$(awk -v a="$sim" -v b="$data" 'BEGIN { print a / b }')" \
	"$(awk -v a="$total" -v s="$sim" -v b="$data" 'BEGIN { print (a - s) / b }')"
