#!/bin/sh
# ibv_coll_rc_bw on loopback: WRITE and SEND, one and several QPs, an odd
# size and every size; each run passes when both sides exit 0, the client
# prints one row per size with the count asked for, and the server found
# the pattern the client sent in every slot (else the client fails).
# The TCP ports lie below the kernel's ephemeral range (32768 on), so no
# other test's outgoing connection holds one; a port found taken anyway
# (the server cannot listen) is skipped for the next.
# Usage: test_rc_bw.sh RC_BW
set -u
bw=$1
port=$((10000 + $$ % 20000))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # run ROWS ITERS ARGS...
	rows=$1 iters=$2
	shift 2
	for try in 1 2 3; do
		timeout 60 "$bw" -d crxe_lo -p $port >"$tmp/server" 2>&1 &
		srv=$!
		timeout 60 "$bw" -d crxe_lo -p $port "$@" 127.0.0.1 >"$tmp/client" 2>&1
		crc=$?
		wait $srv
		src=$?
		grep -q "cannot listen.*in use" "$tmp/server" || break
		echo "TCP port $port is taken (try $try), the next one"
		port=$((port + 7))
	done
	if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
		cat "$tmp/client" "$tmp/server"
		echo "FAIL: $*: client exit $crc, server exit $src"
		exit 1
	fi
	got=$(awk -v n="$iters" '$1 ~ /^[0-9]+$/ && NF == 5 && $2 == n' "$tmp/client" | wc -l)
	if [ "$got" -ne "$rows" ]; then
		cat "$tmp/client"
		echo "FAIL: $*: $got rows of $iters messages, expected $rows"
		exit 1
	fi
	sed -n '/#bytes/,$p' "$tmp/client" | head -4
	port=$((port + 1))
}
run 1 300 -s 1000000 -n 300
run 1 2000 --test send -s 4097 -n 2000 -q 3 -t 16
run 23 20 -a -n 20 -m 1024
run 23 20 --test send -a -n 20 -q 2
# Bad options are refused with a message, not run.
for bad in "-m 1000" "--test read" "-c UD" "-q 99" "-s 0"; do
	# shellcheck disable=SC2086
	if "$bw" $bad >"$tmp/out" 2>&1 || ! grep -q "bad value" "$tmp/out"; then
		cat "$tmp/out"
		echo "FAIL: $bad was not refused"
		exit 1
	fi
done
echo "PASS"
