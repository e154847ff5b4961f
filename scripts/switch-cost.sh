#!/bin/bash
# switch-cost - what the aggregation switch spends per DATA packet, in
# instructions (not time: the count does not depend on the machine's load
# or clock, so two builds compare on a busy 2-core machine).  Runs
# ibv_coll_sim (the real Switch code on a virtual clock, behind an
# in-process transport: no system calls) on one switch and N hosts,
# counting only inside Switch::poll_once, and divides by the DATA packets
# the switch took in; then the same for the parts: the receive path's
# parse (ICRC check included), the fold into a Seg unit, the results sent
# to the N members (each with its own headers and ICRC) and every CRC
# taken; and what of the total is the simulator's own transport rather
# than the switch's.
#
# Two ways to count:
#   callgrind  valgrind's callgrind (the default): no hardware counters
#              needed, but its simulated CPU has neither VPCLMULQDQ nor
#              AVX-512, so the ICRC folds 128 bits a step and the reduce
#              kernels are AVX2's (a CPU before Ice Lake or Zen 3).
#   step       ibv_coll_icount, which single-steps the simulator under
#              ptrace(2) on this CPU, with the code paths it picks here,
#              as a hardware instruction counter counts them (perf(1)
#              needs counters this machine's VM lacks).  Slow: every
#              instruction stops the program (about 4 minutes for -s 256K
#              on a 2-vCPU VM), so its defaults are -s 256K -i 1.
#
#   scripts/switch-cost.sh [-m callgrind|step] [-n NODES] [-s SIZE] [-i ITERS]
#       -m  how to count (callgrind), -n  hosts (8), -s  allreduce bytes
#       per rank (4M: 1024 blocks of 4 KiB; 256K with -m step),
#       -i  iterations (2; 1 with -m step)
# Environment: BUILD_DIR (build).  callgrind needs valgrind (apt-get
# install valgrind; installed here when missing and run as root); step
# needs nm (binutils) and x86-64 Linux.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/../build}
n=8 size= iters= method=callgrind
while getopts "m:n:s:i:h" o; do
	case $o in
	m) method=$OPTARG ;;
	n) n=$OPTARG ;;
	s) size=$OPTARG ;;
	i) iters=$OPTARG ;;
	h) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
bench_name=switch-cost
. "$here/bench-common.sh"
case $method in
callgrind) size=${size:-4M} iters=${iters:-2} ;;
step) size=${size:-256K} iters=${iters:-1} ;;
*) echo "switch-cost: -m $method: callgrind or step" >&2; exit 2 ;;
esac
bytes=$(bench_bytes "$size")
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] || { echo "switch-cost: -n $n: at least 2 hosts" >&2; exit 2; }
[[ $iters =~ ^[0-9]+$ ]] && [ "$iters" -ge 1 ] || { echo "switch-cost: -i $iters: at least 1" >&2; exit 2; }
sim=$build/emulator/ibv_coll_sim
[ -x "$sim" ] || { echo "switch-cost: $sim: not built" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/d.json" <<JSON
{
  "seed": 1,
  "fabric": {"nodes": $n, "link": {"rate": "10gbit", "delay_us": 5, "queue": "4M"}},
  "jobs": [{"name": "switch", "topology": "switch", "sizes": ["$bytes"], "iters": $iters, "warmup": 0}]
}
JSON
blocks=$(((bytes + 4095) / 4096))
data=$((n * blocks * iters))
# The parts, and the simulator's transport: it copies each packet sent and
# puts it on the simulated link (SimPort::tx_commit_split: split_pkt's
# copy, then the link's queue) and hands received ones over
# (SimPort::rx_batch), where the daemon's UdpPort sends the result from its
# unit with iovecs (sendmmsg) and receives in place (recvmmsg), in system
# calls neither way of counting sees.
parts=('Switch::poll_once()' 'Switch::parse(' 'Switch::fold(' 'Switch::send_result(' 'wire::crc32_update(')
simparts=('SimPort::tx_commit_split(' 'SimPort::rx_batch(')
if [ "$method" = callgrind ]; then
	if ! command -v valgrind >/dev/null; then
		if [ "$(id -u)" -eq 0 ]; then
			apt-get install -y -q valgrind >/dev/null || { echo "switch-cost: cannot install valgrind" >&2; exit 2; }
		else
			echo "switch-cost: needs valgrind (apt-get install valgrind)" >&2
			exit 2
		fi
	fi
	valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
		--toggle-collect='ibv_coll::emu::Switch::poll_once()' "$sim" "$tmp/d.json" >"$tmp/out" 2>"$tmp/err" ||
		{ cat "$tmp/out" "$tmp/err" >&2; echo "switch-cost: the simulation failed" >&2; exit 1; }
	callgrind_annotate --inclusive=yes "$tmp/cg" >"$tmp/ann" 2>/dev/null
	# count PART: its instructions, callees included (0 if not seen).
	count() {
		awk -v f="$1" 'index($0, f) { gsub(",", "", $1); if ($1 + 0 > m) m = $1 + 0 } END { print m + 0 }' "$tmp/ann"
	}
else
	icount=$build/emulator/bench/ibv_coll_icount
	[ -x "$icount" ] || { echo "switch-cost: $icount: not built" >&2; exit 2; }
	command -v nm >/dev/null || { echo "switch-cost: needs nm (binutils)" >&2; exit 2; }
	nm -C "$sim" >"$tmp/nm"
	args=()
	for part in "${parts[@]}" "${simparts[@]}"; do
		# The function's own symbol (not a .cold clone), by its
		# qualified name.
		a=$(awk -v f="ibv_coll::emu::$part" -v g="ibv_coll::sim::$part" '
			($2 == "t" || $2 == "T" || $2 == "W") && !/\[clone/ {
				name = substr($0, index($0, $3))
				if (index(name, f) == 1 || index(name, g) == 1) { print $1; exit }
			}' "$tmp/nm")
		[ -n "$a" ] || { echo "switch-cost: $part: not in $sim" >&2; exit 2; }
		args+=(-f "$a=$part")
	done
	"$icount" "${args[@]}" -- "$sim" "$tmp/d.json" >"$tmp/out" 2>"$tmp/err" ||
		{ cat "$tmp/out" "$tmp/err" >&2; echo "switch-cost: the simulation failed" >&2; exit 1; }
	count() {
		awk -v f="$1" '$1 == f { print $2; found = 1 } END { if (!found) print 0 }' "$tmp/out"
	}
fi
grep -q " 0 *0$" <(grep -E "^ +$bytes " "$tmp/out") ||
	{ cat "$tmp/out" >&2; echo "switch-cost: wrong or failed results" >&2; exit 1; }
total=$(count 'Switch::poll_once()')
printf "# switch cost (%s): %d hosts, %d bytes a rank (%d blocks of 4 KiB), %d iterations: %d DATA packets, %d results of %d packets\n" \
	"$method" "$n" "$bytes" "$blocks" "$iters" "$data" "$((blocks * iters))" "$n"
printf "%-34s %14s %14s\n" part instructions "per DATA packet"
for part in "${parts[@]}"; do
	v=$(count "$part")
	printf "%-34s %14d %14.0f\n" "$part" "$v" "$(awk -v a="$v" -v b="$data" 'BEGIN { print a / b }')"
done
printf "# total per DATA packet: %.0f instructions\n" "$(awk -v a="$total" -v b="$data" 'BEGIN { print a / b }')"
simt=$(($(count "${simparts[0]}") + $(count "${simparts[1]}")))
printf "# of which the simulator's transport: %.0f; the switch's own: %.0f instructions per DATA packet\n" \
	"$(awk -v a="$simt" -v b="$data" 'BEGIN { print a / b }')" \
	"$(awk -v a="$total" -v s="$simt" -v b="$data" 'BEGIN { print (a - s) / b }')"
