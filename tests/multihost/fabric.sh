#!/bin/bash
# A test fabric on one machine: N host network namespaces, each with an
# eth0 (veth) on one Linux bridge that lives in its own namespace, with
# IPv4 10.77.0.(i+1)/24 and IPv6 fd77::(i+1)/64.  Runs a command with the
# fabric up and always tears it down, even when the command fails or the
# script is interrupted.
#
#   fabric.sh [-n HOSTS] [-s SWITCHES] [-m MTU] [-r RATE [-q QUEUE] [-S SWRATE]]
#             -- COMMAND [ARGS...]
#
# With -r, every host's link runs at RATE (tc units: 400mbit, 1gbit,
# 200000kbit) in both directions, as a NIC port and the switch port facing
# it do: an htb class at RATE on the host's eth0 and on the bridge port
# towards the host, each feeding a tail-drop queue of QUEUE (bytes: 256kb,
# 1mb, 65536; or packets: 300p; default 256kb).  The switch namespaces'
# links stay unshaped unless -S gives their rate: a rate, or "auto" for
# HOSTS x RATE (a switch port that is not the bottleneck).  The kernel here
# has only tbf, htb, pfifo and bfifo: delay, random loss and ECN marking
# come from the emulator (IBV_COLL_EMU_IMPAIR), not from the fabric.
#
# COMMAND runs in the root namespace with these in its environment:
#   FABRIC_HOSTS   number of hosts
#   FABRIC_NS_<i>  the namespace of host i (run there with: ip netns exec)
#   FABRIC_IP_<i>  host i's IPv4 address
#   FABRIC_SWITCHES, FABRIC_SW_NS_<j>, FABRIC_SW_IP_<j>: the same for the
#                  switch namespaces (10.77.0.(101+j)), where aggregation
#                  switches (ibv_coll_switchd) run
#   FABRIC_RATE, FABRIC_RATE_BPS  the host link rate as given and in bit/s
#                  (empty and 0 when unshaped)
#   FABRIC_QUEUE   the queue as given; FABRIC_SW_RATE_BPS the switch links'
#                  rate in bit/s (0: unshaped)
# Each namespace's interface is eth0: its /sys/class/net/eth0/statistics
# (read with ip netns exec) count what the host put on its link.
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN); without it, exits 77 (the
# code ctest reads as "skipped") after saying why.
set -u

usage() {
	echo "usage: $0 [-n HOSTS] [-s SWITCHES] [-m MTU] [-r RATE [-q QUEUE] [-S SWRATE|auto]] -- COMMAND..." >&2
	exit 2
}
hosts=2 switches=0 mtu=9000 rate="" queue=256kb swrate=""
while getopts "n:s:m:r:q:S:" o; do
	case $o in
	n) hosts=$OPTARG ;;
	s) switches=$OPTARG ;;
	m) mtu=$OPTARG ;;
	r) rate=$OPTARG ;;
	q) queue=$OPTARG ;;
	S) swrate=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "fabric.sh: no command" >&2; exit 2; }
for v in "$hosts" "$switches" "$mtu"; do
	[[ $v =~ ^[0-9]+$ ]] || { echo "fabric.sh: '$v' is not a number" >&2; usage; }
done

# rate_bps RATE: RATE (bit, kbit, mbit, gbit; tc's spelling) in bit/s.
rate_bps() {
	local n u
	[[ $1 =~ ^([0-9]+)([kmgKMG]?)bit$ ]] || return 1
	n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2],,}
	case $u in
	k) n=$((n * 1000)) ;;
	m) n=$((n * 1000000)) ;;
	g) n=$((n * 1000000000)) ;;
	esac
	[ "$n" -gt 0 ] && echo "$n"
}
rbps=0 swbps=0 qdisc="" qlimit=""
if [ -n "$rate" ]; then
	rbps=$(rate_bps "$rate") ||
		{ echo "fabric.sh: -r $rate: expected a rate such as 400mbit, 1gbit or 200000kbit" >&2; exit 2; }
	if [[ $queue =~ ^([0-9]+)p$ ]]; then
		qdisc=pfifo qlimit=${BASH_REMATCH[1]}
	elif [[ ${queue,,} =~ ^([0-9]+)(b|k|kb|m|mb)?$ ]]; then
		qdisc=bfifo qlimit=${BASH_REMATCH[1]}
		case ${BASH_REMATCH[2]} in
		k | kb) qlimit=$((qlimit * 1024)) ;;
		m | mb) qlimit=$((qlimit * 1048576)) ;;
		esac
	else
		echo "fabric.sh: -q $queue: expected bytes (256kb, 1mb, 65536) or packets (300p)" >&2
		exit 2
	fi
	[ "$qlimit" -gt 0 ] || { echo "fabric.sh: -q $queue: the queue must hold something" >&2; exit 2; }
	case $swrate in
	"") swbps=0 ;;
	auto) swbps=$((rbps * hosts)) ;;
	*) swbps=$(rate_bps "$swrate") ||
		{ echo "fabric.sh: -S $swrate: expected a rate or auto" >&2; exit 2; } ;;
	esac
elif [ -n "$swrate" ]; then
	echo "fabric.sh: -S needs -r (the switch links are shaped relative to the hosts')" >&2
	exit 2
fi

if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
	echo "SKIP: the namespace fabric needs root and iproute2 (uid $(id -u))" >&2
	exit 77
fi
if [ -n "$rate" ] && ! command -v tc >/dev/null; then
	echo "SKIP: a shaped fabric needs tc (iproute2)" >&2
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
# shape NS DEV BITS: DEV in NS sends at most BITS bit/s through the queue.
# htb rather than tbf: it takes GSO super-packets larger than its burst
# whole instead of dropping them, and its child queue can count packets.
# The burst is 2 ms at the rate (at least two 64 KiB super-packets), so
# the timer's granularity does not cost rate, while a queue still forms.
shape() {
	local ns=$1 dev=$2 bps=$3 burst
	burst=$((bps / 8 / 500))
	[ "$burst" -ge 131072 ] || burst=131072
	tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1 &&
		tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "${bps}bit" \
			ceil "${bps}bit" burst "$burst" cburst "$burst" quantum 60000 &&
		tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: "$qdisc" limit "$qlimit" ||
		fail "tc on $dev in $ns"
}
for ((i = 0; i < hosts; i++)); do
	plug "${p}h$i" "$i" "10.77.0.$((i + 1))" "fd77::$((i + 1))"
	export "FABRIC_NS_$i=${p}h$i" "FABRIC_IP_$i=10.77.0.$((i + 1))"
	if [ "$rbps" -gt 0 ]; then
		shape "${p}h$i" eth0 "$rbps"
		shape "$br" "${p}p$i" "$rbps"
	fi
done
for ((j = 0; j < switches; j++)); do
	plug "${p}s$j" "s$j" "10.77.0.$((101 + j))" "fd77::$((101 + j))"
	export "FABRIC_SW_NS_$j=${p}s$j" "FABRIC_SW_IP_$j=10.77.0.$((101 + j))"
	if [ "$swbps" -gt 0 ]; then
		shape "${p}s$j" eth0 "$swbps"
		shape "$br" "${p}ps$j" "$swbps"
	fi
done
export FABRIC_HOSTS=$hosts FABRIC_SWITCHES=$switches FABRIC_RATE=$rate FABRIC_RATE_BPS=$rbps \
	FABRIC_QUEUE=$([ -n "$rate" ] && echo "$queue") FABRIC_SW_RATE_BPS=$swbps

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
