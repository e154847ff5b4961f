#!/bin/sh
# ibv_coll_perf's wire/S column, against what the algorithms put on the
# wire for an allreduce of S bytes per rank: each node sends S through a
# switch and 2S(N-1)/N round a ring of N nodes, plus each block's headers
# (BTH, CETH, ICRC: under 2 % of a 4 KiB block).  Sizes from 64 KiB, where
# the headers of a message's first and last blocks no longer count.  (The
# column read 0.000 on every row while the counters were queried with an
# uninitialised comp_mask; and nodes on one shared device each counted
# the whole device's traffic.)
#   test_perf_wire.sh RUN PERF SWITCHD DEVD CHECK CASE
#     switch  the main job's shape: 4 nodes x 2 ranks through a switch: 1.0
#     ring    the same round the ring: 2(4-1)/4 = 1.5
#     shared  2 nodes on the host's one shared device, round the ring:
#             2(2-1)/2 = 1.0, the device counted once
#     exchange  4 nodes x 1 rank, 16 to 128 KiB: a job whose members share
#             one address (this host) exchanges up to 64 KiB when
#             IBV_COLL_EMU_XCHG_BYTES is unset: log2(4) = 2 S at 16, 32 and
#             64 KiB, the ring's 1.5 at 128 KiB; with the variable set to
#             16384, 32 KiB goes round the ring (1.5)
set -u
run=$1 perf=$2 switchd=$3 devd=$4 check=$5 case_=$6
here=$(dirname "$0")
tmp=$(mktemp -d)
sw=
trap '[ -n "$sw" ] && kill "$sw" 2>/dev/null; rm -rf "$tmp"' EXIT
# A block sent again is load on a busy machine, not the algorithm's
# traffic: a retransmission timeout, and a probe's wait, far above any
# scheduling delay.
export IBV_COLL_EMU_COLL_RTO_US=300000 IBV_COLL_EMU_COLL_PROBE_US=300000
sizes="-b 128K -e 1M -f 8 -n 3 -w 1 -c 1" # above the exchange of one host (64 KiB)
case $case_ in
switch)
	"$switchd" -p 0 -P "$tmp/port" -n wire >"$tmp/switch.log" 2>&1 &
	sw=$!
	i=0
	while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -s "$tmp/port" ] || { echo "FAIL: the switch did not start"; cat "$tmp/switch.log"; exit 1; }
	# shellcheck disable=SC2086
	sh "$check" "$run" --timeout 40 -n 4 -k 2 -- "$perf" -t switch \
		-s "127.0.0.1:$(cat "$tmp/port")" $sizes >"$tmp/out" 2>&1
	rc=$?
	lo=0.98 hi=1.06
	# A switch of several workers (CI's second pass) sends each worker's
	# results in its own time; with several collectives in flight and
	# the workers among 8 ranks on 2 cores, a member NAKed while its
	# partial still waits in a busy worker's queue sends it again before
	# the reordering window has learnt: 1.06-1.09 at 64 KiB in 15 of 80
	# runs (1.39 at most before the switch path stopped asking across
	# messages when results do not chain).  Known; ibv_coll(7).
	workers=$(sed -n 's/.* \([0-9][0-9]*\) workers.*/\1/p' "$tmp/switch.log" | head -1)
	if [ "${workers:-1}" -gt 1 ]; then hi=1.12; fi
	;;
ring)
	# shellcheck disable=SC2086
	sh "$check" "$run" --timeout 40 -n 4 -k 2 -- "$perf" -t ring $sizes >"$tmp/out" 2>&1
	rc=$?
	lo=1.47 hi=1.59
	;;
shared)
	# shellcheck disable=SC2086
	sh "$here/test_perf_shared.sh" "$run" "$perf" "$devd" "$check" 2 1 1 -t ring $sizes \
		>"$tmp/out" 2>&1
	rc=$?
	lo=0.98 hi=1.06
	;;
exchange)
	# wire/S of each size, in one line: "16384=2.043 32768=2.040 ...".
	wire() {
		sed 's/^\[[0-9]*\] //' "$1" |
			awk '$1 ~ /^[0-9]+$/ && NF == 15 { printf "%s=%s ", $1, $14 }'
	}
	# Is wire/S of size $2 in run $1 between $3 and $4?
	within() {
		w=$(wire "$1" | tr ' ' '\n' | sed -n "s/^$2=//p")
		[ -n "$w" ] && awk -v w="$w" -v lo="$3" -v hi="$4" 'BEGIN { exit !(w >= lo && w <= hi) }'
	}
	xs="-b 16K -e 128K -f 2 -n 3 -w 1 -c 1"
	unset IBV_COLL_EMU_XCHG_BYTES
	# shellcheck disable=SC2086
	sh "$check" "$run" --timeout 40 -n 4 -k 1 -- "$perf" -t ring $xs >"$tmp/out" 2>&1 ||
		{ cat "$tmp/out"; echo "FAIL: the run failed"; exit 1; }
	# shellcheck disable=SC2086
	IBV_COLL_EMU_XCHG_BYTES=16384 sh "$check" "$run" --timeout 40 -n 4 -k 1 -- "$perf" \
		-t ring $xs >"$tmp/out16" 2>&1 || { cat "$tmp/out16"; echo "FAIL: the run failed"; exit 1; }
	echo "default: $(wire "$tmp/out")"
	echo "IBV_COLL_EMU_XCHG_BYTES=16384: $(wire "$tmp/out16")"
	within "$tmp/out" 16384 1.97 2.12 && within "$tmp/out" 32768 1.97 2.12 &&
		within "$tmp/out" 65536 1.97 2.12 ||
		{ cat "$tmp/out"; echo "FAIL: 16 to 64 KiB were not exchanged (wire/S 2)"; exit 1; }
	within "$tmp/out" 131072 1.47 1.60 ||
		{ cat "$tmp/out"; echo "FAIL: 128 KiB did not go round the ring (wire/S 1.5)"; exit 1; }
	within "$tmp/out16" 16384 1.97 2.12 && within "$tmp/out16" 32768 1.47 1.60 ||
		{ cat "$tmp/out16"; echo "FAIL: IBV_COLL_EMU_XCHG_BYTES=16384 did not send 32 KiB round the ring"; exit 1; }
	echo "PASS: one host exchanges to 64 KiB, and to 16 KiB when told"
	exit 0
	;;
*)
	echo "unknown case $case_"
	exit 2
	;;
esac
cat "$tmp/out"
[ $rc -eq 0 ] || { echo "FAIL: the run failed"; exit 1; }
# Rows: size count type redop root, then time algbw busbw #wrong twice,
# then wire/S and ran.
sed 's/^\[[0-9]*\] //' "$tmp/out" | awk -v lo="$lo" -v hi="$hi" '
	$1 ~ /^[0-9]+$/ && NF == 15 && $1 >= 65536 {
		rows++
		if ($14 + 0 < lo || $14 + 0 > hi) {
			print "FAIL: " $1 " bytes: wire/S " $14 ", not in [" lo ", " hi "]"
			bad = 1
		}
	}
	END {
		if (rows < 2) { print "FAIL: " rows + 0 " rows of 64 KiB or more"; exit 1 }
		if (!bad) print "PASS: wire/S in [" lo ", " hi "] on " rows " rows"
		exit bad
	}'
