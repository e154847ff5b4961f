#!/bin/sh
# The programs' command lines: --version, bad values named with their
# option, a wrong device, ibv_coll_run -k, a lone member, perf's sizes and
# progress, devinfo -c, unknown variables, IBV_COLL_LOG_FILE, the rendezvous
# taking Unix sockets only, the kernel and ICRC benchmarks on their defaults.
# Usage: test_cli.sh BINDIR VERSION CASE
#   BINDIR holds examples/, tools/, emulator/, bench/ (the build directory).
set -u
b=$1 version=$2 case_=$3
devinfo=$b/examples/ibv_coll_devinfo allreduce=$b/examples/ibv_coll_allreduce
pingpong=$b/examples/ibv_coll_rc_pingpong run=$b/tools/ibv_coll_run perf=$b/tools/ibv_coll_perf
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}
# Run a command; keep its stdout, stderr and status in $dir.
cmd() {
	"$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	echo "\$ $* -> $rc"
	sed 's/^/  out: /' "$dir/out" | head -20
	sed 's/^/  err: /' "$dir/err" | head -20
}
# The status is 2 and stderr names the option and the value, in one line.
bad_value() {
	want_opt=$1 want_val=$2
	shift 2
	cmd "$@"
	[ "$rc" -eq 2 ] || fail "exit status $rc, not 2"
	grep -- "$want_opt" "$dir/err" | grep -q -- "'$want_val'\|$want_val" ||
		fail "stderr does not name $want_opt and $want_val"
	! grep -q "^usage:" "$dir/err" || fail "the whole usage instead of what is wrong"
}

case $case_ in
version)
	for p in examples/ibv_coll_devinfo examples/ibv_coll_rc_pingpong \
		examples/ibv_coll_allreduce tools/ibv_coll_run tools/ibv_coll_perf \
		emulator/ibv_coll_switchd bench/ibv_coll_udp_floor bench/mpi_allreduce_perf \
		emulator/bench/ibv_coll_icrc_bench emulator/bench/ibv_coll_reduce_bench \
		emulator/bench/ibv_coll_icount providers/crxe/ibv_coll_devd; do
		name=${p##*/}
		cmd "$b/$p" --version
		[ "$rc" -eq 0 ] || fail "$name --version: status $rc"
		[ "$(cat "$dir/out")" = "$name (ibv_coll) $version" ] ||
			fail "$name --version printed '$(cat "$dir/out")'"
		[ -s "$dir/err" ] && fail "$name --version wrote to stderr"
		[ "$name" = ibv_coll_switchd ] && continue # its -V is --verbs
		cmd "$b/$p" -V
		[ "$(cat "$dir/out")" = "$name (ibv_coll) $version" ] || fail "$name -V"
	done
	;;
icount)
	# ibv_coll_icount against assembly whose counts are known
	# (icount_target.c): a loop of 2n + 2, a function of 16 with a rep
	# stosb of 4,096 bytes in it (one instruction) and a call of 8.
	t=$b/tests/cli/icount_target ic=$b/emulator/bench/ibv_coll_icount
	loop=$(nm "$t" | awk '$3 == "icount_loop" { print $1 }')
	rep=$(nm "$t" | awk '$3 == "icount_rep" { print $1 }')
	[ -n "$loop" ] && [ -n "$rep" ] || fail "nm found no icount_loop or icount_rep in $t"
	cmd "$ic" -f "$loop=loop" -- "$t"
	[ "$rc" -eq 0 ] || fail "status $rc"
	grep -q "^loop  *4028  *5$" "$dir/out" || fail "icount_loop: not 4028 instructions in 5 calls"
	cmd "$ic" -f "$rep=rep" -f "$loop=loop" -- "$t"
	[ "$rc" -eq 0 ] || fail "status $rc"
	grep -q "^rep  *48  *3$" "$dir/out" || fail "icount_rep: not 48 instructions in 3 calls"
	grep -q "^loop  *24  *3$" "$dir/out" || fail "icount_loop within icount_rep: not 24 in 3"
	bad_value -f zz "$ic" -f zz=loop -- "$t"
	cmd "$ic" -f "$loop=loop" -- "$dir/none"
	[ "$rc" -ne 0 ] || fail "a program that does not exist: status 0"
	;;
bad_values)
	bad_value -c abc "$allreduce" -b unix:$dir/s -i 0 -n 1 -c abc
	bad_value -c -1 "$allreduce" -b unix:$dir/s -i 0 -n 1 -c -1
	bad_value -k 0 "$allreduce" -b unix:$dir/s -i 0 -n 1 -k 0
	bad_value -k 65 "$allreduce" -b unix:$dir/s -i 0 -n 1 -k 65
	bad_value -I x "$allreduce" -b unix:$dir/s -i 0 -n 1 -I x
	bad_value --topology tree "$allreduce" -b unix:$dir/s -i 0 -n 1 -t tree
	bad_value --only allreduc "$allreduce" -b unix:$dir/s -i 0 -n 1 -o allreduc
	IBVC_RANKS_PER_NODE=zero bad_value IBVC_RANKS_PER_NODE zero "$allreduce" -b unix:$dir/s -i 0 -n 1
	bad_value -L -1 "$b/emulator/ibv_coll_switchd" -p 0 -L -1
	bad_value --depth 0 "$perf" --nodes 1 --depth 0
	bad_value --depth 33 "$perf" --nodes 1 --depth 33
	# A script's too: stress-liveness -c abc once ran no collective and
	# passed.
	stress=$(dirname "$0")/../../scripts/stress-liveness.sh
	bad_value -c abc sh "$stress" -B "$b" -c abc
	bad_value -t 0 sh "$stress" -B "$b" -t 0
	bad_value "unknown shape" ring6 sh "$stress" -B "$b" -c 1 ring6
	# soak.sh -t abc ran no round and said PASS.
	bad_value -t abc sh "$(dirname "$0")/../../scripts/soak.sh" -B "$b" -t abc
	;;
wrong_device)
	for c in "$allreduce -b unix:$dir/s -i 0 -n 1 -d mlx5_0" "$perf --nodes 1 -D mlx5_0 -b 8 -e 8"; do
		# shellcheck disable=SC2086
		cmd $c
		[ "$rc" -ne 0 ] || fail "status 0 with no such device"
		grep -q "mlx5_0.*not found" "$dir/err" || fail "no 'not found' for mlx5_0"
		! grep -qi "not implemented" "$dir/err" || fail "a stale errno reported"
	done
	;;
run_k)
	# ibv_coll_run -k 3 gives each of the two processes three ranks: six.
	cmd "$run" --timeout 50 -n 2 -k 3 -- "$allreduce" -c 64 -I 1 -o allreduce
	[ "$rc" -eq 0 ] || fail "status $rc"
	# ibv_coll_run prefixes each line with [node].
	sed 's/^\[[0-9]*\] //' "$dir/out" | awk '$1 == "ALLREDUCE" { print $3 }' | grep -qx 6 ||
		fail "the job did not have 6 ranks"
	;;
lone_member)
	# Node 1 of 2 with nobody at the rendezvous: it says what it waits
	# for after 3 s, and gives up at its timeout (-T 4) with who never came.
	t0=$(date +%s%3N)
	cmd "$allreduce" -b unix:$dir/nobody -i 1 -n 2 -T 4
	t=$(($(date +%s%3N) - t0))
	[ "$rc" -ne 0 ] || fail "status 0"
	[ "$t" -lt 9000 ] || fail "took $t ms"
	grep -q "node 1 of 2: waiting for node 0 to listen at unix:$dir/nobody" "$dir/err" ||
		fail "no word about what it waits for"
	grep -q "gave up after 4 s: node 0 never listened" "$dir/err" || fail "no clear time-out"
	# Node 0 alone names the nodes that never connected.
	cmd "$allreduce" -b unix:$dir/host -i 0 -n 3 -T 4
	[ "$rc" -ne 0 ] || fail "status 0"
	grep -q "waiting for nodes 1, 2 to connect" "$dir/err" || fail "node 0 does not say"
	grep -q "nodes 1, 2 never connected" "$dir/err" || fail "node 0: no clear time-out"
	;;
tcp_boot)
	# The rendezvous is for one host (a Unix socket); across hosts the
	# launcher's PMIx does it: a host:port is refused at once, saying so.
	for c in "$allreduce -b 127.0.0.1:4999 -i 1 -n 2 -T 4" \
		"$perf --boot 127.0.0.1:4999 --node 1 --nodes 2 -b 8 -e 8"; do
		# shellcheck disable=SC2086
		cmd $c
		[ "$rc" -ne 0 ] || fail "status 0 with a TCP rendezvous"
		grep -q "'127.0.0.1:4999' is not unix:/path.*PMIx launcher" "$dir/err" ||
			fail "no word that only unix:/path is taken"
	done
	# ibv_coll_run's own rendezvous is a socket in a directory of its
	# own, gone when the job is.
	cmd "$run" -n 2 -- sh -c 'echo "$IBVC_BOOT_ADDR"'
	[ "$rc" -eq 0 ] || fail "ibv_coll_run: status $rc"
	sock=$(sed -n 's/^\[0\] unix://p' "$dir/out")
	case $sock in */ibv_coll_run.*/boot.sock) ;; *) fail "ibv_coll_run's address: '$sock'" ;; esac
	[ ! -e "${sock%/boot.sock}" ] || fail "${sock%/boot.sock} left behind"
	;;
perf_sizes)
	cmd "$perf" --nodes 1 -b 3 -e 64 -n 1 -w 0
	[ "$rc" -eq 2 ] || fail "-b 3 with 4-byte floats: status $rc"
	grep -q -- "-b 3 is less than one float element" "$dir/err" || fail "no reason given"
	grep -q "^ *0  " "$dir/out" && fail "a row of size 0"
	cmd "$perf" --nodes 1 -b 0 -e 2 -n 1 -w 0
	[ "$rc" -eq 2 ] || fail "-e 2: status $rc"
	cmd "$perf" --nodes 1 -d int8 -b 3 -e 3 -n 1 -w 0
	[ "$rc" -eq 0 ] || fail "-b 3 of int8: status $rc"
	grep -q "^ *3  *3 " "$dir/out" || fail "no row of 3 int8 elements"
	# -b 0 asks for the empty collective: its row is wanted.
	cmd "$perf" --nodes 1 -b 0 -e 0 -n 1 -w 0
	[ "$rc" -eq 0 ] || fail "-b 0: status $rc"
	grep -q "^ *0  *0 " "$dir/out" || fail "no row of size 0 for -b 0"
	;;
benches)
	# The kernel and ICRC benchmarks as README runs them (defaults), on
	# tiny buffers: every row printed, nothing crashed (the reduce
	# benchmark once called a null kernel for the value-index pairs).
	rb=$b/emulator/bench/ibv_coll_reduce_bench
	cmd "$rb" --size 4k --iters 1 --reps 1 --isa scalar
	[ "$rc" -eq 0 ] || fail "ibv_coll_reduce_bench: status $rc"
	for row in "sum +float64" "bxor +uint32" "maxloc +float32_int32"; do
		grep -Eq "^scalar +$row " "$dir/out" || fail "ibv_coll_reduce_bench: no row '$row'"
	done
	grep -q "int32_int32" "$dir/out" && fail "ibv_coll_reduce_bench: sum on a pair type"
	cmd "$rb" --size 4k --iters 1 --reps 1 --isa scalar --all
	[ "$rc" -eq 0 ] || fail "ibv_coll_reduce_bench --all: status $rc"
	grep -Eq "^scalar +minloc +int16_int32 " "$dir/out" || fail "--all: no minloc int16_int32 row"
	cmd "$b/emulator/bench/ibv_coll_icrc_bench" --size 64 --size 4096 --reps 1
	[ "$rc" -eq 0 ] || fail "ibv_coll_icrc_bench: status $rc"
	;;
progress)
	cmd "$perf" --nodes 1 -b 8 -e 64 -f 2 -n 1 -w 0 --progress
	[ "$rc" -eq 0 ] || fail "status $rc"
	cp "$dir/out" "$dir/with"
	for i in 1 2 3 4; do
		grep -q "^ibv_coll_perf: \[$i/4\] $((4 << i)) bytes per rank" "$dir/err" ||
			fail "no progress line $i/4"
	done
	grep -q "\[1/4\]" "$dir/out" && fail "progress on stdout"
	cmd "$perf" --nodes 1 -b 8 -e 64 -f 2 -n 1 -w 0
	[ -s "$dir/err" ] && fail "progress without --progress and without a terminal"
	# The table is the same but for the times: compare sizes and counts.
	[ "$(awk '!/^#/ {print $1, $2}' "$dir/out")" = "$(awk '!/^#/ {print $1, $2}' "$dir/with")" ] ||
		fail "stdout differs with --progress"
	# Under ibv_coll_run on a terminal (it says so), progress by default.
	IBVC_RUN_STDERR_TTY=1 cmd "$perf" --nodes 1 -b 8 -e 8 -n 1 -w 0
	grep -q "\[1/1\]" "$dir/err" || fail "no progress when ibv_coll_run's stderr is a tty"
	IBVC_RUN_STDERR_TTY=1 cmd "$perf" --nodes 1 -b 8 -e 8 -n 1 -w 0 --no-progress
	[ -s "$dir/err" ] && fail "progress with --no-progress"
	;;
config)
	IBV_COLL_EMU_POLL_US=abc IBV_COLL_EMU_POLLUS=5 cmd "$devinfo" -c
	[ "$rc" -eq 0 ] || fail "status $rc"
	grep -q "^IBV_COLL_EMU_POLL_US=abc .*INVALID: expected an integer" "$dir/out" ||
		fail "the invalid value is not flagged"
	grep -q "^#   IBV_COLL_EMU_POLLUS=5" "$dir/out" || fail "the unknown variable is not listed"
	grep -q "^IBV_COLL_EMU_POLL_US=2000\|^IBV_COLL_EMU_POLL_US=[0-9]" "$dir/out" &&
		fail "a valid-looking line for the bad value"
	# The library itself warns once, when a context opens.
	IBV_COLL_EMU_POLLUS=5 cmd "$devinfo" -d crxe_lo
	[ "$(grep -c "IBV_COLL_EMU_POLLUS is set but is not a variable" "$dir/err")" -eq 1 ] ||
		fail "no single warning about IBV_COLL_EMU_POLLUS at open"
	cmd "$devinfo" -d crxe_lo
	grep -q "not a variable" "$dir/err" && fail "a warning with nothing unknown set"
	;;
log_file)
	IBV_COLL_LOG_FILE=$dir/no/such/x.log IBV_COLL_LOG_LEVEL=info cmd "$devinfo" -d crxe_lo
	[ -e "$dir/no" ] && fail "IBV_COLL_LOG_FILE created $dir/no"
	grep -q "IBV_COLL_LOG_FILE=$dir/no/such/x.log: No such file or directory" "$dir/err" ||
		fail "no word about the log file"
	;;
*)
	fail "unknown case $case_"
	;;
esac
echo "PASS: $case_"
