#!/bin/sh
# Proves: no two source files of the library call each other, directly or
# round a circle (DESIGN 12: nothing reaches upward, nobody calls back; the
# restructuring of issue 32 removed a 12-file circle in engine/ and one in
# model/). tools/call-circles.py reads the library's objects with nm.
set -u
. "$(dirname "$0")/testlib.sh"
command -v python3 > /dev/null && command -v nm > /dev/null ||
  { echo "SKIP: the call-graph check needs python3 and nm"; exit 77; }
if python3 "$src/tools/call-circles.py" "$build/src" "$src/src" > "$tmp/circles.txt" 2>&1; then ok
else bad "call circles in src/"; fi
cat "$tmp/circles.txt"
finish
