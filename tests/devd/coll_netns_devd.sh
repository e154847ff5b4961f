#!/bin/bash
# A collective job of two hosts (network namespaces of fabric.sh), one
# process per host, each host's crxe_eth0 served by its own ibv_coll_devd:
# the job's NICs are the daemons', its members their clients.  Every node
# checks its results against the independent reference (coll_node), and
# each daemon must have served its host's node.
#
#   coll_netns_devd.sh IBV_COLL_DEVD COLL_NODE
set -u
devd=$1 coll_node=$2
n=$FABRIC_HOSTS
tag="ivdd$$"
boot="unix:/tmp/${tag}.sock"
d_pids=()
cleanup() {
	for p in "${d_pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -f /tmp/${tag}*
}
trap cleanup EXIT

for ((i = 0; i < n; i++)); do
	ns=$(eval echo "\$FABRIC_NS_$i")
	ip netns exec "$ns" env IBV_COLL_LOG_LEVEL=info "$devd" eth0 >"/tmp/${tag}_d$i.log" 2>&1 &
	d_pids+=($!)
done
for ((i = 0; i < n; i++)); do
	for ((t = 0; t < 500; t++)); do
		grep -q "serving on" "/tmp/${tag}_d$i.log" && break
		sleep 0.01
	done
	grep -q "serving on" "/tmp/${tag}_d$i.log" || {
		echo "daemon $i did not come up:"
		cat "/tmp/${tag}_d$i.log"
		exit 1
	}
done

pids=()
for ((i = 0; i < n; i++)); do
	ns=$(eval echo "\$FABRIC_NS_$i")
	ip netns exec "$ns" env IBV_COLL_CRXE_SHARED=y IBV_COLL_CRXE_DEVD= \
		IBV_COLL_TEST_DEV=crxe_eth0 "$coll_node" --boot "$boot" --node $i --nodes "$n" \
		--ranks 1 --scenario full --dev crxe_eth0 --topology 0 >"/tmp/${tag}_n$i.log" 2>&1 &
	pids+=($!)
done
status=0
for ((i = 0; i < n; i++)); do
	if ! wait "${pids[$i]}"; then
		echo "node $i failed:"
		status=1
	fi
	tail -n 3 "/tmp/${tag}_n$i.log"
done
for ((i = 0; i < n; i++)); do
	if ! grep -q "client pid" "/tmp/${tag}_d$i.log"; then
		echo "daemon $i served no client: node $i did not go through it"
		status=1
	fi
done
exit $status
