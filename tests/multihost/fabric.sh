#!/bin/bash
# A test fabric on one machine: N host network namespaces, each with an
# eth0 (veth) on one Linux bridge that lives in its own namespace, with
# IPv4 10.77.0.(i+1)/24 and IPv6 fd77::(i+1)/64.  Runs a command with the
# fabric up and always tears it down, even when the command fails or the
# script is interrupted.
#
#   fabric.sh [-n HOSTS] [-s SWITCHES] [-m MTU] -- COMMAND [ARGS...]
#
# COMMAND runs in the root namespace with these in its environment:
#   FABRIC_HOSTS   number of hosts
#   FABRIC_NS_<i>  the namespace of host i (run there with: ip netns exec)
#   FABRIC_IP_<i>  host i's IPv4 address
#   FABRIC_SWITCHES, FABRIC_SW_NS_<j>, FABRIC_SW_IP_<j>: the same for the
#                  switch namespaces (10.77.0.(101+j)), where aggregation
#                  switches (ibv_coll_switchd) run
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); without it, exits 77 (the
# code ctest reads as "skipped") after saying why.
set -u

hosts=2 switches=0 mtu=9000
while getopts "n:s:m:" o; do
	case $o in
	n) hosts=$OPTARG ;;
	s) switches=$OPTARG ;;
	m) mtu=$OPTARG ;;
	*) echo "usage: $0 [-n HOSTS] [-s SWITCHES] [-m MTU] -- COMMAND..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "fabric.sh: no command" >&2; exit 2; }

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
	echo "SKIP: the namespace fabric needs root and iproute2 (uid $(id -u))" >&2
	exit 77
fi

# A short prefix unique to this run: interface names are at most 15 bytes.
p="ivc$$"
p=${p:0:9}
br="${p}br"

cleanup() {
	# Whatever still runs in the namespaces goes with them.
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${p}[hs]"); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done
	ip netns del "$br" 2>/dev/null
	true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
	echo "fabric.sh: $*" >&2
	exit 1
}

ip netns add "$br" || { echo "SKIP: cannot create network namespaces here" >&2; exit 77; }
ip -n "$br" link add br0 type bridge || fail "bridge"
ip -n "$br" link set br0 up
ip -n "$br" link set lo up
# plug NS NAME IPV4 IPV6: a namespace with eth0 on the bridge.
plug() {
	local ns=$1 name=$2 v4=$3 v6=$4
	ip netns add "$ns" || fail "netns $ns"
	ip link add "${p}v$name" mtu "$mtu" type veth peer name "${p}p$name" mtu "$mtu" ||
		fail "veth $name"
	ip link set "${p}v$name" netns "$ns"
	ip link set "${p}p$name" netns "$br"
	ip -n "$ns" link set "${p}v$name" name eth0
	ip -n "$ns" link set lo up
	ip -n "$ns" link set eth0 up
	ip -n "$ns" addr add "$v4/24" dev eth0
	ip -n "$ns" -6 addr add "$v6/64" dev eth0 nodad 2>/dev/null
	ip -n "$br" link set "${p}p$name" master br0
	ip -n "$br" link set "${p}p$name" up
}
for ((i = 0; i < hosts; i++)); do
	plug "${p}h$i" "$i" "10.77.0.$((i + 1))" "fd77::$((i + 1))"
	export "FABRIC_NS_$i=${p}h$i" "FABRIC_IP_$i=10.77.0.$((i + 1))"
done
for ((j = 0; j < switches; j++)); do
	plug "${p}s$j" "s$j" "10.77.0.$((101 + j))" "fd77::$((101 + j))"
	export "FABRIC_SW_NS_$j=${p}s$j" "FABRIC_SW_IP_$j=10.77.0.$((101 + j))"
done
export FABRIC_HOSTS=$hosts FABRIC_SWITCHES=$switches

# Wait until every host reaches every other (ARP and the bridge settle).
reach() {
	local ok=0
	for _ in $(seq 50); do
		ip netns exec "${p}h0" ping -c1 -W1 "$1" >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ $ok = 1 ] || fail "host 0 cannot reach $1"
}
for ((i = 1; i < hosts; i++)); do reach "10.77.0.$((i + 1))"; done
for ((j = 0; j < switches; j++)); do reach "10.77.0.$((101 + j))"; done

"$@"
