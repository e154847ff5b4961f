#!/bin/sh
# Fail unless every symbol the library exports has a section 3 manual page
# named after it: man/<symbol>.3 (a page of its own or a .so alias).
# Usage: check_man_coverage.sh LIBRARY MANDIR
set -eu
if [ $# -ne 2 ]; then
	echo "usage: $0 LIBRARY MANDIR" >&2
	exit 2
fi
lib=$1 mandir=$2
if [ ! -d "$mandir" ]; then
	echo "$mandir: not a directory" >&2
	exit 2
fi
# Defined dynamic symbols, without their version (name@@IBV_COLL_1.0);
# type A entries are the version nodes themselves, not symbols.  Symbols of
# the private stanza (IBV_COLL_PRIVATE_*) are calls between the project's
# own libraries, not an interface, and have no page.
nm_out=$(nm -D --defined-only "$lib") || {
	echo "nm failed on $lib" >&2
	exit 2
}
symbols=$(printf '%s\n' "$nm_out" | awk 'NF >= 3 && $2 != "A" && $3 !~ /@IBV_COLL_PRIVATE_/ { sub(/@.*/, "", $3); print $3 }' | sort -u)
if [ -z "$symbols" ]; then
	echo "$lib exports no symbols" >&2
	exit 2
fi
missing=
count=0
for s in $symbols; do
	count=$((count + 1))
	[ -f "$mandir/$s.3" ] || missing="$missing $s"
done
if [ -n "$missing" ]; then
	echo "exported symbols without a man page in $mandir:"
	for s in $missing; do
		echo "  $s (expected $mandir/$s.3)"
	done
	exit 1
fi
echo "$count exported symbols, each with a man page"
