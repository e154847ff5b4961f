#!/bin/sh
# The Wireshark dissector (emulator/wire/ibv_coll.lua) on the exchange's
# packets: three nodes of one rank each, round the ring (no switch), run
# coll_node's "xchg" scenario while tshark captures their UDP ports: an
# allreduce of 8 bytes and a barrier as the pairwise exchange (three
# nodes: node 0 hands its partial to node 1 first and gets the result
# back last), and a broadcast of 12 bytes from rank 2 down the binomial
# tree.  Every XCHG (kind 0xe9) is checked against what this script knows
# was sent: JID 42, key 0x5eed0000 ^ seed 1, MIDs 1 to 3 with their
# collective, the payload lengths, the broadcast's root in seq, and every
# partial acknowledged by its receiver: by an acknowledgement (flag 0x08,
# no payload; with 0x20 only after every piece of its sender's own
# partial of the phase to that node) for the same phase, by a later XCHG whose rank_map says the
# receiver finished that message, or (an extra's phase-0 partial) by the
# result that comes back.
# Usage: test_xchg_dissector.sh LUA COLL_NODE
# Exit 77 (skipped) without tshark, when it cannot capture here, or when
# the UDP ports this script picks are taken.
set -u
lua=$1 node=$2
. "$(dirname "$0")/common.sh"

# Three ports of our own (the capture filter names them), never another
# one instead; one datagram per packet; no repeat because a node ran late.
base=$((10000 + $$ % 20000)) # below the ephemeral range (32768 on)
for p in $base $((base + 1)) $((base + 2)); do
	if ss -Hlun "sport = :$p" 2>/dev/null | grep -q .; then
		echo "SKIP: UDP port $p is taken"
		exit 77
	fi
done
export IBV_COLL_EMU_GSO=0 IBV_COLL_CRXE_PORT_FALLBACK=n
export IBV_COLL_EMU_COLL_RTO_US=300000 IBV_COLL_EMU_COLL_PROBE_US=300000

start_capture "udp and (port $base or port $((base + 1)) or port $((base + 2)))"

for i in 0 1 2; do
	IBV_COLL_CRXE_UDP_PORT=$((base + i)) "$node" --boot "unix:$tmp/boot.sock" --node $i \
		--nodes 3 --ranks 1 --scenario xchg >"$tmp/n$i.out" 2>&1 &
	eval "n$i=$!"
	pids="$pids $!"
done
wait "$n0" || fail "node 0 failed"
wait "$n1" || fail "node 1 failed"
wait "$n2" || fail "node 2 failed"
stop_capture

tshark -r "$tmp/cap.pcap" -X "lua_script:$lua" \
	-d "udp.port==$base,infiniband" -d "udp.port==$((base + 1)),infiniband" \
	-d "udp.port==$((base + 2)),infiniband" \
	-T fields -E separator=/t -E occurrence=a -E aggregator=';' \
	-e udp.srcport -e udp.dstport -e infiniband.bth.opcode \
	-e ibv_coll.kind -e ibv_coll.ceth.coll -e ibv_coll.ceth.op -e ibv_coll.ceth.dtype \
	-e ibv_coll.ceth.flags -e ibv_coll.ceth.status -e ibv_coll.ceth.phase \
	-e ibv_coll.ceth.src_node -e ibv_coll.ceth.jid -e ibv_coll.ceth.mid \
	-e ibv_coll.ceth.len -e ibv_coll.ceth.job_key -e ibv_coll.ceth.seq -e _ws.expert \
	-e ibv_coll.ceth.rank_map -e ibv_coll.ceth.sid -e ibv_coll.ceth.node_map \
	>"$tmp/fields.out" 2>"$tmp/fields.err" || fail "tshark could not read the capture"

python3 - "$tmp/fields.out" "$base" <<'EOF' || fail "the decoded packets differ from what was sent"
import sys
cols = "sport dport opcode kind coll op dtype flags status phase src jid mid len key seq expert through sid nmap".split()
base = int(sys.argv[2])
pkts = []
for line in open(sys.argv[1]):
    v = line.rstrip("\n").split("\t")
    v += [""] * (len(cols) - len(v))
    pkts.append(dict(zip(cols, v)))

def num(s):
    return int(s, 0) if s else None

# What was sent (coll_node --scenario xchg): MID -> (collective, bytes, root).
msgs = {1: (0x40, 8, None), 2: (0x45, 0, None), 3: (0x42, 12, 2), 4: (0x40, 8000, None)}
P = 1024 # a piece: coll_node's path MTU
JID, KEY, ACK, SENT, NAK = 42, 0x5eed0000 ^ 1, 0x08, 0x20, 0x40
errors = []
def check(cond, what, p):
    if not cond:
        errors.append("%s: %s" % (what, {k: v for k, v in p.items() if v}))

partials, acks = {}, {}
pieces_seen = set()
finished = {} # (from, to) -> the newest MID the sender said it finished
for p in pkts:
    check(p["kind"] != "", "every packet decodes as ibv_coll", p)
    if not p["kind"]:
        continue
    kind = num(p["kind"])
    check(kind == 0xe9 and num(p["opcode"]) == kind, "only XCHG between the nodes", p)
    check(not p["expert"], "no expert warning", p)
    check(num(p["jid"]) == JID and num(p["key"]) == KEY, "jid and job key", p)
    check(num(p["status"]) == 0, "status", p)
    src = num(p["src"])
    check(src == int(p["sport"]) - base and 0 <= src < 3, "src_node is the sending port's node", p)
    dst = int(p["dport"]) - base
    mid = num(p["mid"])
    coll, size, root = msgs.get(mid, (None, None, None))
    check(num(p["coll"]) == coll, "the collective of its MID", p)
    if root is not None:
        check(num(p["seq"]) == root, "a broadcast's seq is its root", p)
    flags = num(p["flags"])
    key = (mid, num(p["phase"]), src, dst)
    through = num(p["through"]) or 0
    check(through <= 4 + 1, "rank_map: a MID finished, plus 1", p)
    if through:
        finished[(src, dst)] = max(finished.get((src, dst), 0), through - 1)
    if flags & ACK:
        check(flags & ~(NAK | SENT) == ACK and num(p["len"]) == 0,
              "an acknowledgement (NAK: some missing; SENT: its sender's own partial went first) carries nothing", p)
        pieces = (size + P - 1) // P if size else 1
        nmap = num(p["nmap"]) or 0
        check(nmap < (1 << pieces) and (nmap or flags & NAK), "an acknowledgement names pieces of the partial", p)
        if flags & SENT:
            own = {x for (m, q, a, b, x) in pieces_seen if (m, q, a, b) == key}
            check(own == set(range(pieces)),
                  "SENT: every piece of its sender's own partial of the phase went before", p)
        acks[key] = acks.get(key, 0) + 1
    else:
        check(flags & ~0x2 == 0, "a partial's flags (at most RETRANS)", p)
        sid = num(p["sid"]) or 0
        check(num(p["nmap"]) == size, "a partial says the message's bytes", p)
        check(num(p["len"]) == min(P, size - P * sid) and (sid == 0 or sid * P < size),
              "a partial's piece carries its bytes of the message", p)
        pieces_seen.add((mid, num(p["phase"]), src, dst, sid))
        partials[key] = partials.get(key, 0) + 1

# Every partial acknowledged by its receiver: for the same message and
# phase, or by a later message's XCHG that says the receiver finished it,
# or (node 0's phase-0 partial, three nodes) by the result from node 1.
for (mid, ph, s, d) in partials:
    by_result = mid in (1, 2, 4) and ph == 0 and (s, d) == (0, 1) and \
        any(m == mid and (a, b) == (1, 0) for (m, _, a, b) in partials)
    check((mid, ph, d, s) in acks or finished.get((d, s), 0) >= mid or by_result,
          "partial of mid %d phase %d from %d to %d acknowledged" % (mid, ph, s, d), {"x": "1"})
for (mid, ph, s, d) in acks:
    check((mid, ph, d, s) in partials, "an acknowledgement answers a partial", {"mid": str(mid)})
# Three nodes: node 0 (an extra) hands its partial to node 1 and gets the
# result back; nodes 1 and 2 exchange once; 4 partials an allreduce.
for mid in (1, 2, 4):
    got = sorted((s, d) for (m, ph, s, d) in partials if m == mid)
    check(got == [(0, 1), (1, 0), (1, 2), (2, 1)], "the exchange's partials of mid %d" % mid,
          {"got": str(got)})
# The broadcast from node 2: each other node gets it once, from a parent.
got = sorted(d for (m, ph, s, d) in partials if m == 3)
check(got == [0, 1] and all(s != d for (m, ph, s, d) in partials if m == 3),
      "the broadcast reaches nodes 0 and 1 once", {"got": str(got)})
# Message 4's partials went in eight pieces each.
for (mid, ph, s, d) in partials:
    if mid == 4:
        check({x for (m, q, a, b, x) in pieces_seen if (m, q, a, b) == (mid, ph, s, d)} == set(range(8)),
              "both pieces of mid 4 phase %d from %d to %d" % (ph, s, d), {"x": "1"})
if errors:
    print("\n".join(errors[:40]))
    print("%d errors" % len(errors))
    sys.exit(1)
print("ok: %d packets, %d partials, %d acknowledgements" % (len(pkts), len(partials), len(acks)))
EOF
