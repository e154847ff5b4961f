#!/bin/bash
# An rsh agent that lets mpirun (Open MPI's plm rsh) start its daemons on
# the hosts of the namespace fabric (fabric.sh) as if they were machines:
#
#   mpirun --mca plm_rsh_agent tests/multihost/netns-rsh.sh \
#          --host 10.77.0.1,10.77.0.2,... PROGRAM
#
# Run mpirun itself inside host 0's namespace (ip netns exec $FABRIC_NS_0),
# so that 10.77.0.1 is the local host and the daemons reach it over eth0.
#
# Interface: netns-rsh.sh [-OPTION...] HOST COMMAND...
#   Leading options (ssh-style, e.g. -x) are ignored.
#   HOST is one of
#     10.77.0.(i+1), fd77::(i+1) host i's address on the fabric;
#     h<i>                        host i by name;
#     s<j>, 10.77.0.(101+j)       switch namespace j (for tools, not ranks);
#     a namespace name            that namespace itself.
#   The namespace is looked up in the FABRIC_NS_<i>/FABRIC_IP_<i> and
#   FABRIC_SW_NS_<j>/FABRIC_SW_IP_<j> variables fabric.sh exports; without
#   them, in whichever namespace carries HOST's address.
#   COMMAND is joined with spaces and run by sh -c, as ssh does on the remote
#   side (Open MPI quotes its daemon's arguments for that shell).  It runs
#   in a fresh UTS namespace whose hostname is the HOST argument, because
#   every namespace otherwise shares this machine's hostname and Open MPI
#   names nodes by hostname.
# Exits 255 (what ssh returns when it cannot connect) if HOST is unknown.
set -u

while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
[ $# -ge 2 ] || { echo "usage: netns-rsh.sh HOST COMMAND..." >&2; exit 255; }
host=$1
shift

ns=
# From what fabric.sh exported.
for ((i = 0; i < ${FABRIC_HOSTS:-0}; i++)); do
	v4=FABRIC_IP_$i nsv=FABRIC_NS_$i
	if [ "$host" = "${!v4:-}" ] || [ "$host" = "h$i" ] || [ "$host" = "fd77::$((i + 1))" ] ||
		[ "$host" = "${!nsv:-}" ]; then
		ns=${!nsv:-}
		break
	fi
done
if [ -z "$ns" ]; then
	for ((j = 0; j < ${FABRIC_SWITCHES:-0}; j++)); do
		v4=FABRIC_SW_IP_$j nsv=FABRIC_SW_NS_$j
		if [ "$host" = "${!v4:-}" ] || [ "$host" = "s$j" ] || [ "$host" = "${!nsv:-}" ]; then
			ns=${!nsv:-}
			break
		fi
	done
fi
# Without the environment: a namespace of that name, or one that holds the
# address (first match; fabric.sh's prefixes keep concurrent fabrics apart
# only through the environment, so prefer it when several fabrics run).
if [ -z "$ns" ]; then
	for cand in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		if [ "$cand" = "$host" ] ||
			ip -n "$cand" -o addr show 2>/dev/null | grep -qF " $host/"; then
			ns=$cand
			break
		fi
	done
fi
[ -n "$ns" ] || { echo "netns-rsh.sh: no namespace holds host $host" >&2; exit 255; }

exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$1" && shift && exec sh -c "$*"' \
	netns-rsh "$host" "$@"
