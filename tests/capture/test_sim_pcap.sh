#!/bin/sh
# ibv_coll_sim --pcap on a three-level tree, decoded by tshark and the
# project's dissector: every frame is a collective packet with no expert
# complaint, and the CONFIG of each of the 8 hosts (2 per leaf, 2 leaves
# per pod, 2 pods) carries the Above record with what this script knows of
# the tree: its leaf's bit at the spine, the spine's subtree (both leaves),
# its pod's bit at the core, and the core's port.
# Usage: test_sim_pcap.sh LUA SIM
# Exit 77 (skipped) without tshark.
set -u
lua=$1 sim=$2
. "$(dirname "$0")/common.sh"

cat >"$tmp/d.json" <<'J'
{"seed": 1,
 "fabric": {"nodes": 8, "shape": "tree3", "nodes_per_leaf": 2, "leaves_per_pod": 2,
            "link": {"rate": "10gbit", "delay_us": 1}},
 "jobs": [{"name": "j", "topology": "switch", "type": "int32", "sizes": ["4K"], "iters": 1}]}
J
"$sim" -p "$tmp/cap.pcap" "$tmp/d.json" >"$tmp/sim.out" 2>"$tmp/sim.err" || fail "the simulation failed"
tshark -r "$tmp/cap.pcap" -X "lua_script:$lua" -d "udp.port==4791,infiniband" \
	-T fields -E separator=/t -e frame.number -e ibv_coll.kind -e _ws.expert \
	>"$tmp/all.out" 2>"$tmp/all.err" || fail "tshark could not read the capture"
tshark -r "$tmp/cap.pcap" -X "lua_script:$lua" -d "udp.port==4791,infiniband" \
	-Y "ibv_coll.above.up" -T fields -E separator=/t -e ip.src -e ibv_coll.task.up \
	-e ibv_coll.above.subtree -e ibv_coll.above.up -e ibv_coll.above.parent_port \
	>"$tmp/above.out" 2>"$tmp/above.err" || fail "tshark could not read the capture"

python3 - "$tmp/all.out" "$tmp/above.out" <<'EOF' || fail "the decoded capture differs from the tree"
import sys
frames = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
assert len(frames) > 30, f"only {len(frames)} frames"
for f in frames:
    f += [""] * (3 - len(f))
    assert f[1], f"frame {f[0]}: not decoded as a collective packet"
    assert not f[2], f"frame {f[0]}: expert info {f[2]}"
rows = sorted(l.rstrip("\n").split("\t") for l in open(sys.argv[2]))
assert len(rows) == 8, f"{len(rows)} CONFIGs with an Above record, not 8"
for src, up, subtree, pod, port in rows:
    h = int(src.split(".")[3]) - 1  # host h is 10.0.0.(h+1)
    assert int(up) == (h // 2) % 2, f"host {h}: its leaf's bit at the spine {up}"
    assert int(subtree, 0) == 3, f"host {h}: the spine's subtree {subtree}"
    assert int(pod) == h // 4, f"host {h}: its pod's bit at the core {pod}"
    assert int(port) == 4791, f"host {h}: the core's port {port}"
print(f"{len(frames)} frames, 8 Above records as the tree says")
EOF
