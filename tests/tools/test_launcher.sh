#!/bin/sh
# ibv_coll_run's own behaviour, with sh(1) as the program.
# Usage: test_launcher.sh IBV_COLL_RUN CASE
# CASE: success, failure, prefix, procs, timeout, signal.
set -u
run=$1
case_=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}
ms() { date +%s%3N; }

case $case_ in
success)
	"$run" -n 3 -- sh -c 'exit 0' || fail "exit status $? with every child at 0"
	;;
failure)
	# Node 2 exits 3 once every node is up; the others would sleep 30 s.
	t0=$(ms)
	"$run" -n 4 -- sh -c '
		echo $$ > "'"$dir"'/pid.$IBVC_BOOT_NODE"
		if [ "$IBVC_BOOT_NODE" = 2 ]; then sleep 0.3; exit 3; fi
		exec sleep 30' >"$dir/out" 2>&1
	rc=$?
	t=$(($(ms) - t0))
	cat "$dir/out"
	[ "$rc" -eq 3 ] || fail "exit status $rc, not 3"
	[ "$t" -lt 8000 ] || fail "took $t ms"
	grep -q "node 2 .* exited with status 3" "$dir/out" || fail "no message about node 2"
	for i in 0 1 2 3; do
		[ -f "$dir/pid.$i" ] || fail "node $i never started"
		pid=$(cat "$dir/pid.$i")
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid"
			fail "node $i (pid $pid) still runs"
		fi
	done
	echo "exit status 3 after $t ms, every node gone"
	;;
prefix)
	# Three nodes, 200 lines each on stdout, one on stderr, and a last
	# line without its newline.
	"$run" -n 3 -k 2 -- sh -c '
		i=0
		while [ $i -lt 200 ]; do echo "line $IBVC_BOOT_NODE $i"; i=$((i + 1)); done
		echo "env $IBVC_BOOT_NODE $IBVC_BOOT_NODES $IBVC_RANKS_PER_NODE $IBVC_BOOT_ADDR"
		echo "err $IBVC_BOOT_NODE" >&2
		printf "tail $IBVC_BOOT_NODE"' >"$dir/out" 2>"$dir/err" || fail "exit status $?"
	for i in 0 1 2; do
		n=$(grep -c "^\[$i\] line $i [0-9]*\$" "$dir/out")
		[ "$n" -eq 200 ] || fail "node $i: $n of 200 lines on stdout"
		grep -q "^\[$i\] env $i 3 2 unix:/.*/ibv_coll_run\.[A-Za-z0-9]*/boot\.sock\$" "$dir/out" ||
			fail "node $i: environment line missing or wrong"
		grep -q "^\[$i\] tail $i\$" "$dir/out" || fail "node $i: unterminated line lost"
		grep -q "^\[$i\] err $i\$" "$dir/err" || fail "node $i: stderr line missing"
	done
	bad=$(grep -vc '^\[[0-2]\] ' "$dir/out")
	[ "$bad" -eq 0 ] || fail "$bad stdout lines without a prefix, or mixed"
	[ "$(wc -l <"$dir/out")" -eq 606 ] || fail "$(wc -l <"$dir/out") lines, not 606"
	echo "606 lines on stdout and 3 on stderr, each with its prefix"
	;;
procs)
	# -n 3 -p 2: six processes, node by node, each told its node and its
	# place in it; the node's processes share the device (the variable is
	# set), unless the user set it, and with -p 1 it is left alone.  The
	# expected lines are written out here, not computed the launcher's way.
	(unset IBV_COLL_CRXE_SHARED
	"$run" -n 3 -p 2 -k 2 -- sh -c 'printf "env %s/%s %s/%s %s/%s k%s shared=%s\\n" \
		"$IBVC_BOOT_NODE" "$IBVC_BOOT_NODES" "$IBVC_JOB_NODE" "$IBVC_JOB_NODES" \
		"$IBVC_LOCAL_PROC" "$IBVC_LOCAL_PROCS" "$IBVC_RANKS_PER_NODE" "${IBV_COLL_CRXE_SHARED-unset}"') \
		>"$dir/out" 2>&1 || fail "exit status $?"
	cat "$dir/out"
	cat >"$dir/want" <<-'EOF'
	[0] env 0/6 0/3 0/2 k2 shared=y
	[1] env 1/6 0/3 1/2 k2 shared=y
	[2] env 2/6 1/3 0/2 k2 shared=y
	[3] env 3/6 1/3 1/2 k2 shared=y
	[4] env 4/6 2/3 0/2 k2 shared=y
	[5] env 5/6 2/3 1/2 k2 shared=y
	EOF
	sort "$dir/out" | diff "$dir/want" - || fail "wrong processes or environment"
	IBV_COLL_CRXE_SHARED=n "$run" -n 1 -p 2 -- sh -c 'echo "shared=$IBV_COLL_CRXE_SHARED"' \
		>"$dir/out" 2>&1 || fail "exit status $?"
	[ "$(grep -c '^\[[01]\] shared=n$' "$dir/out")" -eq 2 ] || fail "the user's value was replaced"
	(unset IBV_COLL_CRXE_SHARED
	"$run" -n 2 -- sh -c 'echo "$IBVC_BOOT_NODE $IBVC_JOB_NODE $IBVC_LOCAL_PROCS \
${IBV_COLL_CRXE_SHARED-unset}"') >"$dir/out" 2>&1 || fail "exit status $?"
	[ "$(sort "$dir/out" | tr '\n' ,)" = "[0] 0 0 1 unset,[1] 1 1 1 unset," ] ||
		fail "without -p: $(cat "$dir/out")"
	# A child that fails is named by process and node.
	"$run" -n 2 -p 2 -- sh -c '[ "$IBVC_BOOT_NODE" != 3 ] || exit 4' >"$dir/out" 2>&1
	rc=$?
	[ $rc -eq 4 ] || fail "exit status $rc, not 4"
	grep -q "process 3 (node 1) .* exited with status 4" "$dir/out" || fail "no message about process 3"
	# Bad values: a usage error, no process started.
	for bad in "-p 0" "-p 65" "-n 32 -p 33"; do
		# shellcheck disable=SC2086
		"$run" -n 1 $bad -- sh -c 'echo child-started' >"$dir/out" 2>&1
		rc=$?
		[ $rc -eq 2 ] || fail "$bad: exit status $rc, not 2"
		! grep -q child-started "$dir/out" || fail "$bad: a process ran"
	done
	;;
timeout)
	t0=$(ms)
	"$run" -n 2 --timeout 1 -- sleep 30 2>"$dir/err"
	rc=$?
	t=$(($(ms) - t0))
	cat "$dir/err"
	[ "$rc" -ne 0 ] || fail "exit status 0 after a timeout"
	grep -q "timeout" "$dir/err" || fail "no message about the timeout"
	[ "$t" -lt 5000 ] || fail "took $t ms"
	echo "exit status $rc after $t ms"
	;;
signal)
	# SIGTERM to the launcher reaches every child, once all are up.
	: >"$dir/out"
	"$run" -n 3 -- sh -c 'trap "echo got TERM; exit 5" TERM; echo up; sleep 30 & wait' \
		>"$dir/out" 2>&1 &
	pid=$!
	i=0
	while [ "$(grep -c up "$dir/out" || true)" -lt 3 ] && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
	cat "$dir/out"
	[ "$rc" -eq 5 ] || fail "exit status $rc, not 5"
	[ "$(grep -c '^\[[0-2]\] got TERM$' "$dir/out")" -eq 3 ] || fail "not every child got SIGTERM"
	;;
*)
	fail "unknown case $case_"
	;;
esac
echo PASS
