# The manual's tests: man_lint (every page passes mandoc's lint at warning
# level without a word) and man_coverage (every exported symbol has a
# man/<symbol>.3 page).  Include this file from any directory where
# enable_testing() is in effect; it registers the tests once.
if(NOT CMAKE_TESTING_ENABLED)
  return()
endif()
get_property(_ibvc_man_tests_done GLOBAL PROPERTY IBV_COLL_MAN_TESTS_REGISTERED)
if(_ibvc_man_tests_done)
  return()
endif()
set_property(GLOBAL PROPERTY IBV_COLL_MAN_TESTS_REGISTERED TRUE)

find_program(IBV_COLL_MANDOC mandoc)
if(NOT IBV_COLL_MANDOC)
  set(IBV_COLL_MANDOC mandoc) # the test then fails, saying it is missing
endif()

# The pages are globbed when the test runs, so pages added later are
# linted without re-running CMake.  Any output, or a non-zero exit status,
# fails the test.
add_test(NAME man_lint
  COMMAND sh -c [=[
mandoc=$1
cd "$2" || exit 1
set -- *.1 *.3 *.7 *.8
pages=
for p in "$@"; do
	[ -f "$p" ] && pages="$pages $p"
done
if [ -z "$pages" ]; then
	echo "no manual pages in $PWD"
	exit 1
fi
out=$("$mandoc" -Tlint -W warning $pages 2>&1)
status=$?
if [ "$status" -ne 0 ] || [ -n "$out" ]; then
	[ -n "$out" ] && printf '%s\n' "$out"
	echo "mandoc -Tlint -W warning: exit status $status"
	exit 1
fi
echo "$(echo $pages | wc -w) pages pass mandoc -Tlint -W warning"
]=] sh ${IBV_COLL_MANDOC} ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(man_lint PROPERTIES LABELS man)

add_test(NAME man_coverage
  COMMAND ${PROJECT_SOURCE_DIR}/tests/check_man_coverage.sh
    $<TARGET_FILE:ibv_coll> ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(man_coverage PROPERTIES LABELS man)

# man_groff: every page formats with groff's warnings all on (-ww) without
# a word (mandoc's lint misses some that groff gives, as in an mdoc .Ql
# whose first argument is a macro).  man_version: every page carries the
# project's version (.TH's source field, or mdoc's .Os).
find_program(IBV_COLL_GROFF groff)
if(NOT IBV_COLL_GROFF)
  set(IBV_COLL_GROFF groff) # the test then fails, saying it is missing
endif()
add_test(NAME man_groff
  COMMAND sh -c [=[
groff=$1
cd "$2" || exit 1
bad=0 n=0
for p in *.1 *.3 *.7 *.8; do
	[ -f "$p" ] || continue
	n=$((n + 1))
	out=$("$groff" -ww -man -z "$p" 2>&1) || { echo "$p: groff exit status $?"; bad=1; }
	[ -n "$out" ] && { printf '%s\n' "$out"; bad=1; }
done
[ "$n" -gt 0 ] || { echo "no manual pages in $PWD"; exit 1; }
[ "$bad" -eq 0 ] && echo "$n pages format with groff -ww -man without a warning"
exit $bad
]=] sh ${IBV_COLL_GROFF} ${CMAKE_CURRENT_LIST_DIR})
add_test(NAME man_version
  COMMAND sh -c [=[
cd "$1" || exit 1
bad=0
for p in *.1 *.3 *.7 *.8; do
	[ -f "$p" ] || continue
	case $p in
	*.3|*.7) grep -q "^\.TH [^ ]* [0-9] [0-9-]* \"ibv_coll $2\"" "$p" ;;
	*) grep -qx "\.Os ibv_coll $2" "$p" ;;
	esac || { echo "$p: does not name ibv_coll $2 (.TH source field or .Os)"; bad=1; }
done
[ "$bad" -eq 0 ] && echo "every page names ibv_coll $2"
exit $bad
]=] sh ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_VERSION})
set_tests_properties(man_groff man_version PROPERTIES LABELS man)
