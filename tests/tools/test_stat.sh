#!/bin/sh
# ibv_coll_stat against runs whose counts this script knows:
#  1. two nodes (coll_node, scenario "stat") through one switch: each
#     node's device shows its 4 collectives and their blocks, and the
#     switch, asked by address, the partials of both nodes;
#  2. an RC pingpong under 5 % loss shows retransmissions while it runs;
#  3. the segment of a process killed with SIGKILL is not listed, and is
#     removed;
#  4. ibv_coll_switchd -j with a name full of JSON metacharacters writes
#     JSON that parses, with the name intact.
# Usage: test_stat.sh STAT SWITCHD COLL_NODE PINGPONG
set -u
stat=$1 switchd=$2 node=$3 pingpong=$4
tmp=$(mktemp -d)
pids=""
cleanup() {
	exec 7>&- 2>/dev/null
	for p in $pids; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
	exit 1
}
wait_for() { # FILE PATTERN: up to 10 s
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "$1 never said '$2'"
		sleep 0.1
	done
}
# check JSONFILE ARGS... <<EOF: the file is JSON (one document a line), and
# the python on stdin, given the file and ARGS, asserts nothing fails.
check() {
	python3 -m json.tool --json-lines "$1" >/dev/null || fail "$1 is not JSON"
	python3 - "$@" || fail "counters of $1 differ from what was run"
}

# 1. Two nodes of 2 ranks through one switch, held open at the end.
name='sw"0\'
"$switchd" -p 0 -P "$tmp/port" -n "$name" -j >"$tmp/sw.out" 2>"$tmp/sw.err" &
sw=$!
pids="$pids $sw"
wait_for "$tmp/port" .
port=$(cat "$tmp/port")
mkfifo "$tmp/hold"
# The counts are exact: no block may be sent again, or probed for, because
# a node ran late on a busy machine (the default timeout's floor is 20 ms,
# a probe's 0.5 ms).
for i in 0 1; do
	IBV_COLL_EMU_COLL_RTO_US=300000 IBV_COLL_EMU_COLL_PROBE_US=300000 "$node" --boot "unix:$tmp/boot.sock" --node $i --nodes 2 --ranks 2 --scenario stat \
		--topology 1 --leaves "$port" --hold <"$tmp/hold" >"$tmp/n$i.out" 2>&1 &
	eval "n$i=$!"
	pids="$pids $!"
done
exec 7>"$tmp/hold" # the nodes hold their devices open until this closes
wait_for "$tmp/n0.out" holding
wait_for "$tmp/n1.out" holding
"$stat" -j -s "127.0.0.1:$port" >"$tmp/run.json" 2>"$tmp/stat.err" || fail "ibv_coll_stat failed"
"$stat" -s "127.0.0.1:$port" -p "$n0" >"$tmp/table.out" 2>&1 || fail "ibv_coll_stat (table) failed"
grep -q "^link crxe_lo/1 pid $n0 port " "$tmp/table.out" || fail "no table row for node 0"
grep -q "coll_messages 4 " "$tmp/table.out" || fail "table lacks coll_messages 4"
# The scenario's four allreduces, 2 nodes: through a switch each message
# is cut into blocks of at most the 1024-byte MTU, and a node's chunk is a
# run of whole blocks: 600 int32 (2400 B) 3 blocks, 100 float64 (800 B)
# 1, 600 int32 3, 7 uint8 1: 8 blocks, 5607 payload bytes a node.
check "$tmp/run.json" "$n0" "$n1" "$name" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
pids = {int(sys.argv[2]), int(sys.argv[3])}
mine = [x for x in d["devices"] if x["pid"] in pids]
assert len(mine) == 2, mine
for x in mine:
    c = x["counters"]
    assert x["device"] == "crxe_lo", x
    want = dict(coll_messages=4, coll_failed=0, coll_fallbacks=0, coll_blocks=8,
                coll_tx_data=8, coll_rx_result=8, coll_tx_bytes=5607,
                coll_retrans_data=0, drop_icrc=0, seg_units=4096)
    for k, v in want.items():
        assert c[k] == v, (x["pid"], k, c[k], v)
    assert c["rc_tx_packets"] == 0 and c["rc_rx_packets"] == 0, c
sw = d["switches"]
assert len(sw) == 1 and sw[0]["name"] == sys.argv[4], sw
c = sw[0]["counters"]
want = dict(data=16, results=8, configs=2, grants=1, denials=0, jobs=1, drop_icrc=0)
for k, v in want.items():
    assert c[k] == v, ("switch", k, c[k], v)
EOF
exec 7>&-
wait "$n0" || fail "node 0 failed"
wait "$n1" || fail "node 1 failed"
# Gone with their processes.
"$stat" -j >"$tmp/after.json" || fail "ibv_coll_stat failed"
check "$tmp/after.json" "$n0" "$n1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert not [x for x in d["devices"] if x["pid"] in (int(sys.argv[2]), int(sys.argv[3]))], d
EOF
# A switch that is not there: a clear error and exit 1.
"$stat" -S -t 100 -s 127.0.0.1:1 >/dev/null 2>"$tmp/none.err" && fail "no switch at port 1, exit 0"
grep -q "switch 127.0.0.1:1: " "$tmp/none.err" || fail "no message for a missing switch"

# 4. The switch's own JSON: it parses, and the name survives.
kill -INT "$sw"
wait "$sw"
tail -n 1 "$tmp/sw.out" >"$tmp/sw.json"
check "$tmp/sw.json" "$name" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["switch"] == sys.argv[2], d["switch"]
assert d["total"]["data"] == 16, d["total"]
EOF

# 2. RC under loss: the server's device, sampled while it runs.  The
# counts are checked on the device's final counters, which it logs as it
# closes: a sample lands when it lands, and the run may end between two
# (the last one had 552 packets of the 800 once).  The samples are checked
# for what holds whenever they land: the first, taken before the client
# starts, lists the server's idle device; none goes back or past the end.
IBV_COLL_LOG_LEVEL=info IBV_COLL_EMU_IMPAIR=drop=0.05,seed=5 "$pingpong" -p 18611 -n 400 -s 2048 >"$tmp/pps.out" 2>&1 &
srv=$!
pids="$pids $srv"
"$stat" -j -p "$srv" -w 0.1 -c 600 >"$tmp/watch.json" 2>&1 &
watch=$!
pids="$pids $watch"
wait_for "$tmp/watch.json" '"crxe_lo"'
IBV_COLL_EMU_IMPAIR=drop=0.05,seed=6 "$pingpong" -p 18611 -n 400 -s 2048 127.0.0.1 \
	>"$tmp/ppc.out" 2>&1 || fail "pingpong client failed"
wait "$srv" || fail "pingpong server failed"
kill "$watch" 2>/dev/null
wait "$watch" 2>/dev/null
# The device's last word, its counters as it closes: "rc: tx N pkts B B
# rx N pkts B B retrans N ..." and "impairment: dropped N ...".
sed -n 's/.* rc: tx \([0-9]*\) pkts [0-9]* B rx \([0-9]*\) pkts [0-9]* B retrans \([0-9]*\) .*/\1 \2 \3/p' \
	"$tmp/pps.out" >"$tmp/final"
sed -n 's/.* impairment: dropped \([0-9]*\) .*/\1/p' "$tmp/pps.out" >>"$tmp/final"
[ "$(wc -w <"$tmp/final")" -eq 4 ] || fail "the server's device logged no RC counters at close"
check "$tmp/watch.json" "$tmp/final" <<'PY'
import json, sys
samples = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tx, rx, retrans, dropped = map(int, open(sys.argv[2]).read().split())
# 400 round trips of 2048 B at MTU 1024: at least 800 data packets in,
# and 5 % of what was sent dropped, so some retransmissions.
assert rx >= 800, (rx, "packets in, of 800 at least")
assert dropped > 0, "the impairment dropped nothing"
assert retrans > 0, "no retransmission under 5 % loss"
c = [s["devices"][0]["counters"] for s in samples if s["devices"]]
assert c, "the server's device was never listed"
# The first sample came before the client started (the test waited
# for it): the device idle.
assert c[0]["rc_rx_packets"] == 0 and c[0]["rc_tx_packets"] == 0, c[0]
for a, b in zip(c, c[1:]):
    for k in ("rc_tx_packets", "rc_rx_packets", "rc_retransmits", "impair_dropped"):
        assert a[k] <= b[k], ("counter went back", k, a[k], b[k])
for x in c:
    assert x["rc_tx_packets"] <= tx and x["rc_rx_packets"] <= rx, (x, tx, rx)
    assert x["rc_retransmits"] <= retrans and x["impair_dropped"] <= dropped, (x, retrans)
    assert x["coll_messages"] == 0, x
PY
# 3. A killed process leaves its segment behind; it is not listed, and
# is removed.
"$pingpong" -p 18612 >"$tmp/ppk.out" 2>&1 &
k=$!
pids="$pids $k"
i=0
while ! ls /dev/shm/ibv_coll.$k.* >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -gt 100 ] && fail "no segment for pid $k"
	sleep 0.1
done
"$stat" -p "$k" | grep -q "^link crxe_lo/1 pid $k " || fail "the live server is not listed"
kill -9 "$k"
wait "$k" 2>/dev/null
ls /dev/shm/ibv_coll.$k.* >/dev/null 2>&1 || fail "SIGKILL left no segment: nothing tested"
"$stat" -v -j >"$tmp/dead.json" 2>"$tmp/dead.err" || fail "ibv_coll_stat failed"
check "$tmp/dead.json" "$k" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert not [x for x in d["devices"] if x["pid"] == int(sys.argv[2])], d
EOF
grep -q "process $k is gone, removed" "$tmp/dead.err" || fail "no word of the dead segment"
ls /dev/shm/ibv_coll.$k.* >/dev/null 2>&1 && fail "the dead segment is still there"
echo "ok"
