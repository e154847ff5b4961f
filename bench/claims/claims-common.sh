# claims-common - what the claim scripts (bench/claims/*.sh) share; source
# it, do not run it.
#
#   claims_init NAME      sets $sim (ibv_coll_sim of BUILD_DIR, default
#                         build), $out (OUT_DIR, default docs/claims, made)
#                         and $tmp (removed at exit); installs gnuplot
#                         (gnuplot-nox) when it is missing and this is root
#   sim_row DESC.json     runs the simulator; prints "time_us busbw_bound
#                         wire_s units waiting" of the description's one
#                         job and one size (units: the most Seg units of
#                         switch 0 that held blocks at once, waiting: the
#                         most still waiting for partials; 0 without a
#                         switch), then "holds held_us": how often the
#                         hosts' sending was held by a full window while
#                         their wires were idle, and for how long in all
#                         (every message of the run, warm-up included);
#                         exits 1 on a wrong or failed result
#   md_table CSV          the CSV as a Markdown table
#   fabric_root           exits 77, saying so, unless this is root (the
#                         namespace fabric of a claim's -F)
#   fabric_run NAME KEYS  runs the plan $tmp/plan on real processes
#                         (claims-fabric.sh, with CLAIMS_FABRIC_ARGS):
#                         $out/NAME.csv, its header KEYS (the plan's key
#                         fields) and the runner's columns, and NAME.md;
#                         sets $csv; exits 1 when a run fails

claims_init() {
	claim=$1
	here=$(cd "$(dirname "$0")" && pwd)
	root=$(cd "$here/../.." && pwd)
	sim=${BUILD_DIR:-$root/build}/emulator/ibv_coll_sim
	out=${OUT_DIR:-$root/docs/claims}
	[ -x "$sim" ] || { echo "$claim: $sim: not built (cmake --build build --target ibv_coll_sim)" >&2; exit 2; }
	mkdir -p "$out"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	if ! command -v gnuplot >/dev/null; then
		if [ "$(id -u)" -eq 0 ]; then
			apt-get install -y -q gnuplot-nox >/dev/null 2>&1 ||
				{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q gnuplot-nox >/dev/null; } ||
				echo "$claim: no gnuplot: tables only" >&2
		else
			echo "$claim: no gnuplot (apt-get install gnuplot-nox): tables only" >&2
		fi
	fi
}

sim_row() {
	local o
	# (Its stderr, the run's wall time and memory, is kept for a failure.)
	o=$("$sim" "$1" 2>"$tmp/sim.err") ||
		{ echo "$claim: the simulation of $1 failed:" >&2; echo "$o" >&2; cat "$tmp/sim.err" >&2; exit 1; }
	echo "$o" | awk '
		/^ +[0-9]+ +[0-9]+ / { t = $3; bb = $6; w = $7; if ($8 != 0 || $9 != 0) bad = 1 }
		/^# switch 0: at most/ { u = $6; q = $13 }
		/^# hosts: sending held by a full window/ { h = $9; hu = $11 }
		END { if (bad || t == "") exit 1; printf "%s %s %s %d %d %d %s\n", t, bb, w, u, q, h, hu }' ||
		{ echo "$claim: wrong or failed result in $1:" >&2; echo "$o" >&2; exit 1; }
}

md_table() {
	awk -F, 'NR == 1 { h = "|"; s = "|"; for (i = 1; i <= NF; i++) { h = h " " $i " |"; s = s " --- |" }
		print h; print s; next }
		{ r = "|"; for (i = 1; i <= NF; i++) r = r " " $i " |"; print r }' "$1"
}

fabric_root() {
	[ "$(id -u)" -eq 0 ] || { echo "$claim: -F needs root (network namespaces): skipped" >&2; exit 77; }
}

fabric_run() {
	csv=$out/$1.csv
	echo "$2,bytes,time_us,busbw_bound,wire_s,ran,granted,refused" >"$csv"
	# shellcheck disable=SC2086 # (CLAIMS_FABRIC_ARGS: words)
	BUILD_DIR=$(dirname "$(dirname "$sim")") "$here/claims-fabric.sh" ${CLAIMS_FABRIC_ARGS:-} \
		"$tmp/plan" "$csv" || { echo "$claim: the fabric run failed" >&2; exit 1; }
	md_table "$csv" >"$out/$1.md"
}
