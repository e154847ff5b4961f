#!/bin/bash
# nccl-check - the NCCL plugin under real NCCL on a GPU: N processes on one
# GPU, each its own NCCL host (NCCL_HOSTID differs, so NCCL builds its
# CollNet chain across them), torch.distributed.all_reduce of fp32, bf16
# and fp16 CUDA tensors through NCCL with NCCL_NET_PLUGIN=ibv_coll and
# NCCL_COLLNET_ENABLE=1, every element checked against a CPU reference;
# round the ring of the ranks' crxe_lo devices, then through an
# ibv_coll_switchd, then round the ring with NCCL handing the plugin its
# GPU buffers (NCCL_NET_GDR_LEVEL=SYS: the plugin stages them through
# pinned host memory; its INFO lines must say so).  It needs no network.  It fails unless NCCL's log
# shows that it loaded our plugin and our CollNet connected every rank
# (a silent fallback to NCCL's own transports is a failure).
#
# A GPU host with PyTorch usually lacks this project's build dependencies,
# so the script runs from a bundle:
#   scripts/nccl-check.sh --bundle DIR   (here) copies the plugin,
#       ibv_coll_switchd, this script and every shared library they need
#       that is not the C library's into DIR;
#   DIR/nccl-check.sh -L DIR             (on the GPU host) runs the check.
# Usage: nccl-check.sh [-L DIR] [-n N] [--no-switch] | --bundle DIR
# Environment: BUILD_DIR (build), COUNT (elements per tensor, 1048579).
# Exit 0 when every check passed, 1 on a failure, 2 on bad usage, 77 when
# there is no GPU or no PyTorch (a skip).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib= n=4 with_switch=1 count=${COUNT:-1048579}
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

bundle() {
	local out=$1 build=${BUILD_DIR:-$here/../build}
	mkdir -p "$out"
	local plugin=$build/nccl/libnccl-net-ibv_coll.so sw=$build/emulator/ibv_coll_switchd
	for f in "$plugin" "$sw"; do
		[ -e "$f" ] || { echo "nccl-check: $f: not built" >&2; exit 2; }
	done
	cp -L "$plugin" "$sw" "$0" "$out/"
	# The libraries the loader would take from this host, but the C and
	# C++ runtimes: the GPU host has its own, which PyTorch needs (an older
	# libstdc++ first on its path would break it).
	ldd "$plugin" "$sw" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
		grep -vE '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
		while read -r l; do cp -L "$l" "$out/"; done
	echo "nccl-check: bundle in $out ($(ls "$out" | wc -l) files); on the GPU host: $out/nccl-check.sh -L $out"
}

while [ $# -gt 0 ]; do
	case $1 in
	-L) lib=$(cd "$2" && pwd); shift 2 ;;
	-n) n=$2; shift 2 ;;
	--no-switch) with_switch=0; shift ;;
	--bundle) bundle "$2"; exit 0 ;;
	*) usage ;;
	esac
done
[ -n "$lib" ] || lib=${BUILD_DIR:-$here/../build}/nccl
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -e "$lib/libnccl-net-ibv_coll.so" ] || { echo "nccl-check: no plugin in $lib" >&2; exit 2; }
switchd=$lib/ibv_coll_switchd
[ -x "$switchd" ] || switchd=${BUILD_DIR:-$here/../build}/emulator/ibv_coll_switchd

python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
	echo "nccl-check: SKIP: no PyTorch with a CUDA device"
	exit 77
}
tmp=$(mktemp -d)
sw_pid=
trap '[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

cat >"$tmp/check.py" <<'PY'
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, n, count, port):
    os.environ["NCCL_HOSTID"] = "ibvc-host-%d" % rank  # each rank its own host
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    bad = 0
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        # Small integers: exact in every type and any summation order
        # (bf16 holds integers to 256: (6 + n - 1) * n stays below).
        i = torch.arange(count, dtype=torch.int64)
        x = ((i * 7 + rank * 3) % 7).to(dt).cuda()
        dist.all_reduce(x)
        want = sum(((i * 7 + r * 3) % 7) for r in range(n)).to(dt)
        wrong = int((x.cpu() != want).sum())
        print("rank %d %s allreduce of %d: %d wrong" % (rank, dt, count, wrong), flush=True)
        bad += wrong
    torch.cuda.synchronize()
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    n, count, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mp.spawn(rank_main, args=(n, count, port), nprocs=n, join=True)
PY

# One run: $1 names it; the rest is extra environment.
run() {
	local name=$1
	shift
	local log=$tmp/$name
	mkdir -p "$log"
	echo "== $name"
	# NCCL_ALGO: CollNet or nothing, so that a fallback fails loudly.
	if ! env NCCL_NET_PLUGIN=ibv_coll NCCL_COLLNET_ENABLE=1 NCCL_ALGO=CollNetChain,CollNetDirect \
		NCCL_DEBUG=INFO \
		NCCL_DEBUG_SUBSYS=INIT,NET,COLL NCCL_DEBUG_FILE="$log/nccl.%h.%p" \
		IBV_COLL_NCCL_DEVICE=crxe_lo "$@" \
		python3 "$tmp/check.py" "$n" "$count" $((29500 + RANDOM % 1000)) >"$log/out" 2>&1; then
		cat "$log/out"
		echo "nccl-check: $name: FAILED"
		return 1
	fi
	grep wrong "$log/out"
	local nccl_log
	nccl_log=$(cat "$log"/nccl.* 2>/dev/null || true)
	# Our plugin loaded, and our CollNet connected every rank.
	grep -q "NET/Plugin.*ibv_coll\|Using network ibv_coll" <<<"$nccl_log" ||
		{ echo "nccl-check: $name: NCCL did not use the ibv_coll plugin"; return 1; }
	local joined
	joined=$(grep -c "NET/ibv_coll: CollNet rank" <<<"$nccl_log" || true)
	[ "$joined" -ge "$n" ] ||
		{ echo "nccl-check: $name: CollNet connected $joined of $n ranks (NCCL fell back)"; return 1; }
	! grep -q "NET/ibv_coll: .*" <<<"$(grep WARN <<<"$nccl_log")" ||
		{ grep WARN <<<"$nccl_log"; echo "nccl-check: $name: the plugin warned"; return 1; }
	if [ "$name" = gpu_memory ]; then
		local staged
		staged=$(grep -c "NET/ibv_coll: CollNet rank .*GPU memory staged" <<<"$nccl_log" || true)
		[ "$staged" -ge "$n" ] ||
			{ echo "nccl-check: $name: $staged of $n ranks registered GPU memory"; return 1; }
	fi
	echo "nccl-check: $name: PASS ($joined CollNet ranks, every element right)"
}

fail=0
run ring || fail=1
if [ "$with_switch" = 1 ]; then
	"$switchd" -p 0 -P "$tmp/port" >"$tmp/switchd.log" 2>&1 &
	sw_pid=$!
	for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
	[ -s "$tmp/port" ] || { cat "$tmp/switchd.log"; echo "nccl-check: the switch did not start"; exit 1; }
	run switch IBV_COLL_NCCL_SWITCH="127.0.0.1:$(cat "$tmp/port")" IBV_COLL_NCCL_TOPOLOGY=switch ||
		fail=1
fi
run gpu_memory NCCL_NET_GDR_LEVEL=SYS NCCL_NET_GDR_READ=1 || fail=1
exit $fail
