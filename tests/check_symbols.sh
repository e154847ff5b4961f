#!/bin/bash
# Fail unless the library exports exactly the symbols its linker map lists,
# each with a version.
set -eu
lib=$1 map=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort)
unversioned=$(printf '%s\n' "$exported" | grep -v '@@IBV_COLL_' || true)
if [ -n "$unversioned" ]; then
	echo "symbols exported without a version:"; echo "$unversioned"; exit 1
fi
have=$(printf '%s\n' "$exported" | sed 's/@.*//' | sort -u)
want=$(sed -n '/global:/,/local:/p' "$map" | grep -oE '^[[:space:]]*[a-z_0-9]+;' | tr -d ' \t;' | sort -u)
if [ "$have" != "$want" ]; then
	echo "exported symbols differ from $map:"
	diff <(printf '%s\n' "$want") <(printf '%s\n' "$have") 2>/dev/null ||
		{ printf 'map:\n%s\nlibrary:\n%s\n' "$want" "$have"; }
	exit 1
fi
echo "$(printf '%s\n' "$have" | wc -l) symbols, all in the map"
