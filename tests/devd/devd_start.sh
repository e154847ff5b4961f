#!/bin/sh
# Which ibv_coll_devd a first shared open starts (IBV_COLL_CRXE_DEVD unset,
# "auto"): from the build tree, the build tree's; from an installed prefix
# (anywhere), that prefix's sbin; none found, an error that lists where it
# looked and names the variable; a wrong or empty variable, the same.
# Each case in a network namespace of its own (root: skipped otherwise),
# so that no other daemon of crxe_lo answers first.
#   devd_start.sh BUILD_DIR CASE     CASE: build, installed, wrong, empty
set -u
b=$1 case_=$2
if [ -z "${IVC_START_NS:-}" ]; then
	if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
		echo "SKIP: needs root and unshare (a network namespace of its own)"
		exit 77
	fi
	exec env IVC_START_NS=1 unshare -n sh -c 'ip link set lo up && exec sh "$0" "$@"' "$0" "$@"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
	echo "FAIL: $*"
	sed 's/^/  err: /' "$tmp/err" 2>/dev/null
	exit 1
}
# Open crxe_lo shared with PROGRAM; its stderr (at info) in $tmp/err.
open_shared() { # PROGRAM
	IBV_COLL_CRXE_SHARED=y IBV_COLL_LOG_LEVEL=info "$1" -d crxe_lo >"$tmp/out" 2>"$tmp/err"
	rc=$?
	echo "\$ $1 -d crxe_lo -> $rc"
}
unset IBV_COLL_CRXE_DEVD
case $case_ in
build)
	open_shared "$b/examples/ibv_coll_devinfo"
	[ "$rc" -eq 0 ] || fail "the open failed"
	grep -q "starting $b/providers/crxe/ibv_coll_devd$" "$tmp/err" ||
		fail "it did not start the build tree's daemon"
	;;
installed)
	cmake --install "$b" --prefix "$tmp/prefix" >/dev/null || fail "cmake --install"
	p=$(cd "$tmp/prefix" && pwd -P)
	open_shared "$p/bin/ibv_coll_devinfo"
	[ "$rc" -eq 0 ] || fail "the open failed"
	grep -q "starting $p/sbin/ibv_coll_devd$" "$tmp/err" ||
		fail "it did not start the prefix's daemon"
	rm "$p/sbin/ibv_coll_devd"
	open_shared "$p/bin/ibv_coll_devinfo"
	[ "$rc" -ne 0 ] || {
		# A daemon installed at the configured prefix serves instead.
		grep -q "starting /" "$tmp/err" && { echo "SKIP: an installed ibv_coll_devd was found"; exit 77; }
		fail "the open succeeded with no daemon anywhere"
	}
	grep -q "no ibv_coll_devd at $p/lib/ibv_coll_devd, .*$p/bin/ibv_coll_devd, .*; set IBV_COLL_CRXE_DEVD to the daemon's path" \
		"$tmp/err" || fail "the error does not say where it looked and what to set"
	;;
wrong)
	export IBV_COLL_CRXE_DEVD="$tmp/none/ibv_coll_devd"
	open_shared "$b/examples/ibv_coll_devinfo"
	[ "$rc" -ne 0 ] || fail "the open succeeded"
	grep -q "cannot run $tmp/none/ibv_coll_devd: No such file or directory; IBV_COLL_CRXE_DEVD names it" \
		"$tmp/err" || fail "the error does not name the path and the variable"
	;;
empty)
	export IBV_COLL_CRXE_DEVD=
	open_shared "$b/examples/ibv_coll_devinfo"
	[ "$rc" -ne 0 ] || fail "the open succeeded"
	grep -q "none is started: IBV_COLL_CRXE_DEVD is empty" "$tmp/err" ||
		fail "the error does not say the variable is empty"
	;;
*)
	fail "unknown case $case_"
	;;
esac
echo "PASS: $case_"
