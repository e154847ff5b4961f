#!/bin/sh
# Check that every C and C++ source of the tree is formatted as .clang-format
# says (clang-format --dry-run -Werror); ctest runs it (label "style").
#   check-format.sh [--fix] [SOURCE_DIR]
# --fix reformats the files in place instead.  Exit 0 when clean, 1 with
# the offending files listed, 77 (ctest's skip) without clang-format.
# CLANG_FORMAT names the program; clang-format-14 (Debian 12) is preferred,
# as another version formats some constructs differently.
set -eu

fix=0
if [ "${1:-}" = --fix ]; then
	fix=1
	shift
fi
here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$(cd "$here/.." && pwd)}
cd "$src"

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
	for c in clang-format-14 clang-format; do
		if command -v "$c" >/dev/null 2>&1; then
			cf=$c
			break
		fi
	done
fi
if [ -z "$cf" ]; then
	echo "check-format: no clang-format (scripts/install-deps.sh installs clang-format-14)" >&2
	exit 77
fi

. "$here/sources.sh"

if [ "$fix" = 1 ]; then
	list_sources | xargs -r "$cf" -i
	exit 0
fi

bad=""
for f in $(list_sources); do
	"$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
	n=$(echo $bad | wc -w)
	echo "check-format: $n files differ from .clang-format ($cf; fix: scripts/check-format.sh --fix):"
	for f in $bad; do
		echo "  $f"
	done
	exit 1
fi
echo "check-format: every source is formatted ($cf)"
