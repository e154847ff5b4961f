#!/bin/bash
# The RC suite between two hosts of the fabric: this process in host 0,
# its peer in host 1, over their eth0 devices (IPv4, then IPv6).
set -eu
test_rc=$1
ns0=$FABRIC_NS_0 ns1=$FABRIC_NS_1
run() {
	ip netns exec "$ns0" env IBV_COLL_TEST_DEV=crxe_eth0 IBV_COLL_TEST_PEER_DEV=crxe_eth0 \
		IBV_COLL_TEST_PEER_NETNS="$ns1" "$@"
}
run "$test_rc"
# IPv6: GID 1 of eth0 is fd77::(i+1).
run env IBV_COLL_TEST_GID=1 "$test_rc" --gtest_filter='Mtus/RcMtu.*/mtu1024:Rc.Scatter*'
