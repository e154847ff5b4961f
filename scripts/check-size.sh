#!/bin/sh
# List the C and C++ functions longer than 120 lines and the sources
# longer than 800 lines, tests (tests/, test_*) left out (STYLE.md: small
# functions, files of one concern); ctest runs it (label "style").
#   check-size.sh [SOURCE_DIR]
# A function's length is the lines from its opening brace to its closing
# one, both alone at column 0 as clang-format (.clang-format) puts them;
# MAX_FUNC and MAX_FILE change the limits.  Entries of
# scripts/check-size.allow (PATH or PATH:FUNCTION, # comments) are
# reported but do not fail the check.  Exit 0 when nothing else is over,
# 1 with the offenders listed, 77 (ctest's skip) without python3.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$(cd "$here/.." && pwd)}
cd "$src"
command -v python3 >/dev/null 2>&1 || {
	echo "check-size: no python3" >&2
	exit 77
}

. "$here/sources.sh"

list_sources | MAX_FUNC=${MAX_FUNC:-120} MAX_FILE=${MAX_FILE:-800} python3 -c '
import os, re, sys

max_func, max_file = int(os.environ["MAX_FUNC"]), int(os.environ["MAX_FILE"])
allow = set()
if os.path.exists("scripts/check-size.allow"):
    for line in open("scripts/check-size.allow"):
        line = line.split("#", 1)[0].strip()
        if line:
            allow.add(line)

def is_test(path):
    return path.startswith("tests/") or "/test_" in path or os.path.basename(path).startswith("test_")

def name_of(sig):
    # The identifier before the parameter list of a signature.
    m = re.search(r"([A-Za-z_~][\w:~]*)\s*\((?!.*\()", sig.split("(")[0] + "(")
    return m.group(1).split("::")[-1] if m else "?"

over, allowed = [], []
for path in sys.stdin.read().split():
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    except OSError:
        continue
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if is_test(path):
        continue
    if n > max_file:
        (allowed if path in allow else over).append("%s: %d lines (file)" % (path, n))
    start = None
    for i, l in enumerate(lines):
        if l == "{" and i > 0:
            # The signature: the lines above back to a blank or a comment.
            j = i - 1
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].startswith(("//", "/*", " *", "}", "#")):
                j -= 1
            start, sig = i, " ".join(x.strip() for x in lines[j:i])
        elif l.startswith("}") and start is not None:
            length = i - start
            if length > max_func and "(" in sig:
                fn = name_of(sig)
                key = "%s:%s" % (path, fn)
                (allowed if key in allow else over).append("%s:%d: %s, %d lines (function)" % (path, start + 1, fn, length))
            start = None
for a in allowed:
    print("check-size: allowed for now: " + a)
if over:
    print("check-size: %d over %d lines a function or %d a file (not tests):" % (len(over), max_func, max_file))
    for o in over:
        print("  " + o)
    sys.exit(1)
print("check-size: no function over %d lines, no file over %d" % (max_func, max_file))
'
