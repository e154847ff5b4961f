#!/bin/sh
# The RC suite (two processes: the test and rc_peer) with both sides on
# the shared device: ibv_coll_devd serves crxe_lo, every context is its
# client.  RcDelayed and RcSelective are left out: they set IBV_COLL_EMU_IMPAIR in the
# clients, and a shared device's emulator settings are the daemon's.
# usage: rc_through_devd.sh IBV_COLL_DEVD TEST_RC
set -u
devd=$1
test_rc=$2
log=${TMPDIR:-/tmp}/rc_through_devd.$$.log
IBV_COLL_LOG_LEVEL=info "$devd" lo 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
i=0
until grep -q "serving on" "$log" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 500 ] || ! kill -0 $pid 2>/dev/null; then
		echo "ibv_coll_devd did not come up:"; cat "$log"; exit 1
	fi
	sleep 0.01
done
IBV_COLL_CRXE_SHARED=1 IBV_COLL_CRXE_DEVD= "$test_rc" --gtest_filter='-RcDelayed.*:RcSelective.*'
rc=$?
# Every context was the daemon's client (none fell back to a NIC of its own).
n=$(grep -c "client pid" "$log")
if [ "$n" -lt 4 ]; then
	echo "the daemon saw $n client events: the suite did not go through it"; rc=1
fi
exit $rc
