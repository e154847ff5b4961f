#!/bin/sh
# The Wireshark dissector (emulator/wire/ibv_coll.lua) on a real capture:
# two nodes of two ranks run coll_node's "stat" scenario through one
# switch while tshark captures the switch's port, then ibv_coll_stat asks
# the switch for its counters.  tshark decodes the capture with the
# dissector, and every CETH (and task, and STATS) field of every packet is
# checked against what this script knows was sent: the job coll_node
# builds (JID 42, key 0x5eed0000 ^ seed 1, 2 nodes, 2 ranks each, 256 Seg
# units asked), the four allreduces of the scenario with MIDs 1 to 4 (the
# provider numbers a QP's messages from 1, ibv_post_coll_send(3)), and
# their sizes.
# Usage: test_coll_dissector.sh LUA SWITCHD COLL_NODE STAT
# Exit 77 (skipped) without tshark or when it cannot capture here.
set -u
lua=$1 switchd=$2 node=$3 stat=$4
. "$(dirname "$0")/common.sh"

# One datagram per packet, as on a wire (lo shows GSO super-packets); and
# each block sent once: no repeat, nor probe, nor the switch's NAK by a
# block's age (--tail-us), because a node ran late on a busy machine.
export IBV_COLL_EMU_GSO=0 IBV_COLL_EMU_COLL_RTO_US=300000 IBV_COLL_EMU_COLL_PROBE_US=300000
"$switchd" -p 0 -P "$tmp/port" -n "leaf0" -L 300000 >"$tmp/sw.out" 2>"$tmp/sw.err" &
sw=$!
pids="$pids $sw"
i=0
while [ ! -s "$tmp/port" ]; do
	i=$((i + 1))
	[ $i -gt 100 ] && fail "the switch did not start"
	sleep 0.1
done
port=$(cat "$tmp/port")

start_capture "udp port $port"

for i in 0 1; do
	"$node" --boot "unix:$tmp/boot.sock" --node $i --nodes 2 --ranks 2 \
		--scenario stat --topology 1 --leaves "$port" >"$tmp/n$i.out" 2>&1 &
	eval "n$i=$!"
	pids="$pids $!"
done
wait "$n0" || fail "node 0 failed"
wait "$n1" || fail "node 1 failed"
"$stat" -S -s "127.0.0.1:$port" >"$tmp/stat.out" 2>&1 || fail "ibv_coll_stat failed"
stop_capture

tshark -r "$tmp/cap.pcap" -X "lua_script:$lua" -d "udp.port==$port,infiniband" \
	-T fields -E separator=/t -E occurrence=a -E aggregator=';' \
	-e udp.srcport -e udp.dstport -e infiniband.bth.opcode -e infiniband.bth.padcnt \
	-e ibv_coll.kind -e ibv_coll.ceth.coll -e ibv_coll.ceth.op -e ibv_coll.ceth.dtype \
	-e ibv_coll.ceth.flags -e ibv_coll.ceth.status -e ibv_coll.ceth.phase \
	-e ibv_coll.ceth.src_node -e ibv_coll.ceth.jid -e ibv_coll.ceth.mid -e ibv_coll.ceth.sid \
	-e ibv_coll.ceth.seg -e ibv_coll.ceth.len -e ibv_coll.ceth.node_map \
	-e ibv_coll.ceth.rank_map -e ibv_coll.ceth.job_key -e ibv_coll.ceth.inc -e ibv_coll.ceth.seq \
	-e ibv_coll.task.node -e ibv_coll.task.nodes -e ibv_coll.task.members \
	-e ibv_coll.task.subtree -e ibv_coll.task.seg_req -e ibv_coll.task.plane \
	-e ibv_coll.task.parent_port -e ibv_coll.task.qpn \
	-e ibv_coll.stats.switch -e ibv_coll.stats.counter -e ibv_coll.stats.value \
	-e frame.len -e _ws.expert \
	>"$tmp/fields.out" 2>"$tmp/fields.err" || fail "tshark could not read the capture"

python3 - "$tmp/fields.out" "$port" <<'EOF' || fail "the decoded packets differ from what was sent"
import sys
cols = ("sport dport opcode pad kind coll op dtype flags status phase src jid mid sid seg len "
        "node_map rank_map key inc seq t_node t_nodes t_members t_subtree t_seg_req t_plane "
        "t_parent_port t_qpn s_name s_counter s_value frame_len expert").split()
swport = int(sys.argv[2])
pkts = []
for line in open(sys.argv[1]):
    v = line.rstrip("\n").split("\t")
    v += [""] * (len(cols) - len(v))
    pkts.append(dict(zip(cols, v)))

def num(s):
    return int(s, 0) if s else None

# What was sent (coll_node --scenario stat): MID -> (op, dtype, bytes a rank).
SUM, MAX, BXOR = 0, 3, 7
INT32, UINT8, FLOAT64 = 2, 4, 11
msgs = {1: (SUM, INT32, 2400), 2: (MAX, FLOAT64, 800), 3: (SUM, INT32, 2400), 4: (BXOR, UINT8, 7)}
JID, KEY, NODES, MTU = 42, 0x5eed0000 ^ 1, 2, 1024
kinds = {}
data, results, seqs = {}, {}, {}
# Which UDP port is which node: from what the nodes say they are.
node_at = {int(p["sport"]): int(p["src"]) for p in pkts
           if p["kind"] in ("0xe0", "0xe4") and int(p["sport"]) != swport}
errors = []
def check(cond, what, p):
    if not cond:
        errors.append("%s: %s" % (what, {k: v for k, v in p.items() if v}))

for p in pkts:
    if not p["kind"]:
        continue
    kind = num(p["kind"])
    kinds[kind] = kinds.get(kind, 0) + 1
    check(num(p["opcode"]) == kind, "kind is the BTH opcode", p)
    check(not p["expert"], "no expert warning", p)
    if kind in (0xe7, 0xe8):
        continue
    check(num(p["jid"]) == JID, "jid", p)
    check(num(p["key"]) == KEY, "job key", p)
    # The job was given to each QP once: its first incarnation.
    check(num(p["inc"]) == 1, "incarnation 1", p)
    if kind not in (0xe0, 0xe1, 0xe5):
        check(num(p["seq"]) == 0, "seq 0 outside DATA/RESULT and grants", p)
    check(num(p["status"]) == 0, "status", p)
    src = num(p["src"])
    from_switch = int(p["sport"]) == swport
    check((src == 0xffff) == from_switch, "src_node 0xffff exactly from the switch", p)
    if kind == 0xe0:  # DATA: node -> switch, its own partial of one block
        check(src in (0, 1) and not from_switch, "DATA from a node", p)
        mid = num(p["mid"])
        check(mid in msgs, "DATA mid", p)
        op, dt, size = msgs.get(mid, (None, None, 0))
        check(num(p["coll"]) == 0x40 and num(p["op"]) == op and num(p["dtype"]) == dt,
              "DATA ALLREDUCE op/dtype of its MID", p)
        check(num(p["node_map"]) == 1 << src, "DATA node_map is the sender", p)
        check(num(p["rank_map"]) == 0b11, "DATA rank_map: both local ranks", p)
        check(num(p["phase"]) == 0, "DATA phase 0 (result to every node)", p)
        check(0 < num(p["len"]) <= MTU, "DATA len within the MTU", p)
        check(num(p["flags"]) & ~0x2 == 0, "DATA flags (at most RETRANS)", p)
        key = (src, mid, num(p["sid"]))
        if key in data:
            check(num(p["flags"]) & 0x2 and data[key] == (num(p["len"]), num(p["seg"])),
                  "a repeated DATA is a retransmission of the same block", p)
        data[key] = (num(p["len"]), num(p["seg"]))
        seqs[("d", src, mid, num(p["sid"]))] = num(p["seq"])
    elif kind == 0xe1:  # RESULT: switch -> node, the whole block
        check(from_switch, "RESULT from the switch", p)
        mid = num(p["mid"])
        op, dt, size = msgs.get(mid, (None, None, 0))
        check(num(p["coll"]) == 0x40 and num(p["op"]) == op and num(p["dtype"]) == dt,
              "RESULT op/dtype of its MID", p)
        check(num(p["node_map"]) == 0b11, "RESULT node_map: both nodes", p)
        check(int(p["dport"]) in node_at, "RESULT to a node", p)
        check(0 < num(p["len"]) <= MTU and num(p["phase"]) == 0, "RESULT len, phase", p)
        results.setdefault((int(p["dport"]), mid, num(p["sid"])), (num(p["len"]), num(p["seg"])))
        seqs[("r", int(p["dport"]), mid, num(p["sid"]))] = num(p["seq"])
    elif kind == 0xe4:  # CONFIG: node -> switch with the task
        check(src in (0, 1) and not from_switch, "CONFIG from a node", p)
        check(num(p["len"]) == 48, "CONFIG carries the 48-byte task", p)
        check(num(p["t_node"]) == src, "task node is the sender", p)
        check(num(p["t_nodes"]) == NODES, "task nodes", p)
        check(num(p["t_members"]) == 0b11 and num(p["t_subtree"]) == 0b11, "task members/subtree", p)
        check(num(p["t_seg_req"]) == 256, "task Seg units asked (coll_node --seg-count 256)", p)
        check(num(p["t_plane"]) == 0 and num(p["t_parent_port"]) == 0, "task plane 0, no parent", p)
        check(num(p["t_qpn"]) not in (None, 0), "task result QP", p)
    elif kind == 0xe5:  # CONFIG_ACK: heard (PENDING, no units yet) or the grant
        check(from_switch and num(p["len"]) == 0, "CONFIG_ACK from the switch, no payload", p)
        check(num(p["node_map"]) == 1 << node_at.get(int(p["dport"]), 99), "CONFIG_ACK node_map", p)
        if num(p["flags"]) == 0x08:
            check(num(p["seg"]) == 0 and num(p["seq"]) == 0,
                  "a PENDING CONFIG_ACK grants nothing yet", p)
        else:
            check(num(p["flags"]) == 0 and num(p["seg"]) == 256, "grant of the 256 units asked", p)
            # The switch's idle timeout (its default, 60 s): members keep
            # the job alive at a third of it.
            check(num(p["seq"]) == 60000, "a grant states the switch's idle timeout", p)
            grants = kinds.setdefault("grants", 0)
            kinds["grants"] = grants + 1
    elif kind == 0xe6:  # RELEASE: node -> switch at the end
        check(src in (0, 1) and num(p["node_map"]) == 1 << src and num(p["len"]) == 0,
              "RELEASE from a node, node_map the node", p)

# Every block of every message, once per node, and its result to each.
for mid, (op, dt, size) in msgs.items():
    for node in (0, 1):
        sids = sorted(s for (n, m, s) in data if n == node and m == mid)
        check(sids == list(range(len(sids))) and sids, "SIDs 0..n-1 of mid %d node %d" % (mid, node),
              {"sids": str(sids)})
        check(sum(data[(node, mid, s)][0] for s in sids) == size,
              "DATA lengths of mid %d node %d add up to %d" % (mid, node, size), {"x": "1"})
    nodeports = sorted({d for (d, m, s) in results})
    for d in nodeports:
        sids = sorted(s for (dd, m, s) in results if dd == d and m == mid)
        node = node_at.get(d)
        check(sids == sorted(s for (n, m, s) in data if n == node and m == mid),
              "a RESULT for every block of mid %d to node %s" % (mid, node), {"sids": str(sids)})
        for sd in sids:
            check(results[(d, mid, sd)][1] == data.get((node, mid, sd), (0, -1))[1],
                  "RESULT in the Seg unit of its DATA", {"mid": str(mid), "sid": str(sd)})
        check(sum(results[(d, mid, s)][0] for s in sids) == size,
              "RESULT lengths of mid %d to port %d add up to %d" % (mid, d, size), {"x": "1"})
# Blocks numbered across the job's messages use Seg units in turn.
order = [(m, s) for m in sorted(msgs) for s in sorted(s for (n, mm, s) in data if n == 0 and mm == m)]
for g, (m, s) in enumerate(order):
    check(data[(0, m, s)][1] == g % 256, "DATA seg of block %d is unit %d" % (g, g % 256),
          {"seg": str(data[(0, m, s)][1])})
    for kind_node in [("d", 0), ("d", 1)] + [("r", d) for d in nodeports]:
        got = seqs.get(kind_node + (m, s))
        check(got == g, "seq of block %d (mid %d sid %d) is %d" % (g, m, s, g),
              {"seq": str(got), "from": str(kind_node)})
# (Each node sends its RELEASE three times, against a loss.)
check(kinds.get(0xe4) == 2 and kinds.get("grants") == 2 and kinds.get(0xe6) == 6,
      "two CONFIG, grants, three RELEASE each", {"kinds": str(kinds)})
check(len(nodeports) == 2, "results to both nodes", {"ports": str(nodeports)})

# STATS and its reply: the asker's tag echoed, the switch's name and data count.
stats = [p for p in pkts if p["kind"] and num(p["kind"]) in (0xe7, 0xe8)]
req = [p for p in stats if num(p["kind"]) == 0xe7]
rep = [p for p in stats if num(p["kind"]) == 0xe8]
check(len(req) >= 1 and len(rep) == len(req), "a reply per STATS", {"n": str(len(stats))})
for q, r in zip(req, rep):
    check(num(q["len"]) == 1344 and num(q["sid"]) == 0, "STATS asks from 0 with 1344 bytes", q)
    check(num(r["mid"]) == num(q["mid"]) and num(r["src"]) == 0xffff, "reply echoes the tag", r)
    check(int(r["frame_len"]) <= int(q["frame_len"]), "reply no longer than the request", r)
    names = r["s_counter"].split(";")
    values = [int(x) for x in r["s_value"].split(";")]
    got = dict(zip(names, values))
    check(r["s_name"] == "leaf0", "switch name", r)
    check(got.get("data") == len(data), "switch data count: every block of both nodes", r)
    check(got.get("jobs") == 0 and got.get("releases") == 2, "the job released", r)
    check(num(r["seg"]) == len(names), "all counters in one reply", r)
if errors:
    print("\n".join(errors[:40]))
    print("%d errors" % len(errors))
    sys.exit(1)
print("ok: %d packets, kinds %s" % (len(pkts), kinds))
EOF
