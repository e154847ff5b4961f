# What the capture tests share (sourced, with $lua set): skip without a
# usable tshark, a temporary directory and the processes to kill on exit,
# fail() with the logs, and a capture started and stopped around a run.
command -v tshark >/dev/null 2>&1 || { echo "SKIP: tshark is not installed"; exit 77; }
# Wireshark loads its global Lua plugins before -X lua_script: an installed
# ibv_coll.lua of another build would decode every packet its own way.
installed=$(tshark -G plugins 2>/dev/null | awk '$1 == "ibv_coll.lua" { print $NF }')
if [ -n "$installed" ] && ! cmp -s "$installed" "$lua"; then
	echo "SKIP: $installed (installed by cmake --install) is not this tree's dissector"
	exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
	exit 1
}

# start_capture FILTER: tshark writes $tmp/cap.pcap from lo; returns once
# it captures (exit 77 if it cannot here).
start_capture() {
	tshark -i lo -F pcap -f "$1" -w "$tmp/cap.pcap" -q >"$tmp/tshark.out" 2>"$tmp/tshark.err" &
	ts=$!
	pids="$pids $ts"
	i=0
	while ! grep -q "Capturing on" "$tmp/tshark.err"; do
		if ! kill -0 "$ts" 2>/dev/null; then
			echo "SKIP: tshark cannot capture here: $(cat "$tmp/tshark.err")"
			exit 77
		fi
		i=$((i + 1))
		[ $i -gt 200 ] && fail "tshark never started capturing"
		sleep 0.05
	done
	sleep 0.5
}

# stop_capture: the last packets reach the file, then tshark ends.
stop_capture() {
	sleep 0.3
	kill -INT "$ts"
	wait "$ts"
}
