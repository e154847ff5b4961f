# sources.sh - sourced by the style checks (check-format.sh, check-size.sh):
# list_sources prints the tree's C and C++ sources, one a line, sorted,
# from the current directory (the source tree): what git tracks, or every
# file when the tree is not a git checkout (a release tarball).  Left out:
# fuzz corpora (data) and build trees; nothing in the tree is generated or
# third-party.
list_sources() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -- '*.c' '*.h' '*.cc' '*.hpp' '*.cpp'
	else
		find . -path ./build -prune -o -path './build-*' -prune -o \
			\( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.hpp' -o -name '*.cpp' \) \
			-print | sed 's|^\./||'
	fi | grep -v -e '^tests/fuzz/corpus/' -e '^build' | sort
}
