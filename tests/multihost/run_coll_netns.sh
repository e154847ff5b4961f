#!/bin/bash
# Collectives between the hosts of the fabric (fabric.sh), each node of the
# job a coll_node process in its own host namespace on its eth0 device, the
# aggregation switches (ibv_coll_switchd) in the switch namespaces.
#
#   run_coll_netns.sh COLL_NODE SWITCHD MODE RANKS
#
# MODE: ring    every collective over the NIC ring
#       switch  every collective through one switch (switch namespace 0)
#       hier    through two leaves (switch namespaces 0 and 1, hosts split
#               in halves) under a spine (switch namespace 2)
# Each node checks its results against the independent reference and the
# script fails if any node or switch does.
set -u
coll_node=$1 switchd=$2 mode=$3 ranks=$4
n=$FABRIC_HOSTS
tag="ivcn$$"
boot="unix:/tmp/${tag}.sock"
port=4791
logs=()
sw_pids=()

cleanup() {
	for p in "${sw_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -f /tmp/${tag}*
}
trap cleanup EXIT

start_switch() { # start_switch J NAME
	local j=$1 name=$2 ns ip
	ns=$(eval echo "\$FABRIC_SW_NS_$j")
	ip netns exec "$ns" "$switchd" -p $port -n "$name" >"/tmp/${tag}_sw$j.log" 2>&1 &
	sw_pids+=($!)
}

args=(--topology 0)
case $mode in
ring) ;;
switch)
	[ "$FABRIC_SWITCHES" -ge 1 ] || { echo "switch mode needs a switch namespace" >&2; exit 2; }
	start_switch 0 sw0
	args=(--topology 1 --leaves "$FABRIC_SW_IP_0:$port")
	;;
hier)
	[ "$FABRIC_SWITCHES" -ge 3 ] || { echo "hier mode needs 3 switch namespaces" >&2; exit 2; }
	start_switch 0 leaf0
	start_switch 1 leaf1
	start_switch 2 spine
	ml=
	for ((i = 0; i < n; i++)); do ml+="${ml:+,}$((i * 2 / n))"; done
	args=(--topology 2 --leaves "$FABRIC_SW_IP_0:$port,$FABRIC_SW_IP_1:$port"
		--spines "$FABRIC_SW_IP_2:$port" --member-leaf "$ml" --expect-flags 0xc00)
	;;
*)
	echo "unknown mode $mode" >&2
	exit 2
	;;
esac
sleep 0.3

scenario=full
[ "$mode" != ring ] && scenario=switch
pids=()
for ((i = 0; i < n; i++)); do
	ns=$(eval echo "\$FABRIC_NS_$i")
	log="/tmp/${tag}_n$i.log"
	logs+=("$log")
	ip netns exec "$ns" env IBV_COLL_TEST_DEV=crxe_eth0 "$coll_node" --boot "$boot" --node $i \
		--nodes "$n" --ranks "$ranks" --scenario $scenario --dev crxe_eth0 "${args[@]}" \
		>"$log" 2>&1 &
	pids+=($!)
done
status=0
for ((i = 0; i < n; i++)); do
	if ! wait "${pids[$i]}"; then
		echo "node $i failed:"
		status=1
	fi
	tail -n 3 "${logs[$i]}"
done
for p in "${sw_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
wait 2>/dev/null
sw_pids=()
for f in /tmp/${tag}_sw*.log; do
	[ -f "$f" ] && grep -h "total:" "$f"
done
exit $status
