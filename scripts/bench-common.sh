# bench-common - helpers the benchmark scripts share; source it, do not
# run it.
#
#   bench_bytes SIZE      4M -> 4194304 (K and M suffixes); exits 2 on a
#                         bad size, naming $bench_name
#   fabric_tx_sum [HOST]  bytes eth0 has sent in every host namespace of
#                         tests/multihost/fabric.sh (FABRIC_HOSTS,
#                         FABRIC_NS_<i>), or in host HOST's alone
#   start_switchd [-N NETNS] PROG DIR [ARGS...]
#                         ibv_coll_switchd PROG on a free UDP port (written
#                         to DIR/port, its log to DIR/switch.log), waited
#                         for: sets sw_pid and sw_port; exits 1 when it does
#                         not start; with -N, in network namespace NETNS
#   bench_tmpdir          sets tmp to a new directory, removed at exit, when
#                         the switch start_switchd started (sw_pid) is
#                         stopped too

bench_bytes() {
	local v=${1%[KkMm]}
	[[ $v =~ ^[0-9]+$ ]] || { echo "${bench_name:-bench}: bad size $1" >&2; exit 2; }
	case $1 in
	*[Kk]) echo $((v * 1024)) ;;
	*[Mm]) echo $((v * 1048576)) ;;
	*) echo "$v" ;;
	esac
}

fabric_tx_sum() {
	local s=0 i ns last=${1:-$((FABRIC_HOSTS - 1))}
	for ((i = ${1:-0}; i <= last; i++)); do
		ns=FABRIC_NS_$i
		s=$((s + $(ip netns exec "${!ns}" cat /sys/class/net/eth0/statistics/tx_bytes)))
	done
	echo "$s"
}

start_switchd() {
	local in=()
	if [ "$1" = -N ]; then
		in=(ip netns exec "$2")
		shift 2
	fi
	local prog=$1 dir=$2
	shift 2
	rm -f "$dir/port"
	"${in[@]}" "$prog" -p 0 -P "$dir/port" "$@" >"$dir/switch.log" 2>&1 &
	sw_pid=$!
	for _ in $(seq 100); do
		if [ -s "$dir/port" ]; then
			sw_port=$(cat "$dir/port")
			return 0
		fi
		sleep 0.05
	done
	echo "${bench_name:-bench}: the switch did not start" >&2
	cat "$dir/switch.log" >&2
	exit 1
}

bench_tmpdir() {
	tmp=$(mktemp -d)
	sw_pid=
	trap bench_cleanup EXIT
}

bench_cleanup() {
	[ -n "$sw_pid" ] && kill "$sw_pid" 2>/dev/null
	rm -rf "$tmp"
}
