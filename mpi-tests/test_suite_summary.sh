#!/bin/sh
# Proves: run-all.sh's summary (suite-summary.sh) counts the Check test cases
# of passing and failing tests, a crash before the RP-CHECK line as one
# failure, a test that failed after a clean line as failed, and the tests
# automake recorded as SKIP: it names each above the last line, with the
# reason the test printed, and a test that skipped a part of itself as
# "partly skipped", and the last line is "N passed, N failed, N
# skipped" (the "N passed, N failed" prefix CI parses kept first); a failing
# `make check` with no failure counted still reports one.
set -u
. "$(dirname "$0")/testlib.sh"
summary="$src/mpi-tests/suite-summary.sh"
d="$tmp/build/mpi-tests"
mkdir -p "$d"
t() {  # t NAME RESULT [LOG LINE...]
  name=$1 res=$2; shift 2
  printf ':test-result: %s\n' "$res" > "$d/$name.trs"
  : > "$d/$name.log"
  for line in "$@"; do echo "$line" >> "$d/$name.log"; done
}
t test_a PASS "RP-CHECK: passed=5 failed=0" "RP-CHECK: passed=3 failed=0"
t test_b FAIL "RP-CHECK: passed=2 failed=1"
t test_c ERROR "Segmentation fault"
t test_d FAIL "RP-CHECK: passed=4 failed=0"
t test_e SKIP "SKIP: roundpipe-plot's test needs python3 with matplotlib"
t test_f PASS
t test_g PASS "SKIP part: python3 without numpy" "RP-CHECK: passed=1 failed=0"
t test_golden_cuda SKIP "no usable GPU"
sh "$summary" "$tmp/build" 0 > "$tmp/out" || bad "summary failed"
tail -n 1 "$tmp/out" | grep -qx "16 passed, 3 failed, 2 skipped" && ok \
  || { bad "wrong last line"; cat "$tmp/out"; }
tail -n 1 "$tmp/out" | grep -q '^[0-9]* passed, [0-9]* failed' && ok || bad "CI's prefix lost"
grep -qx "skipped: mpi-tests/test_e (roundpipe-plot's test needs python3 with matplotlib)" "$tmp/out" \
  && ok || { bad "test_e not named with its reason"; cat "$tmp/out"; }
grep -qx "skipped: mpi-tests/test_golden_cuda" "$tmp/out" && ok \
  || { bad "test_golden_cuda not named"; cat "$tmp/out"; }
grep -qx "partly skipped: mpi-tests/test_g (python3 without numpy)" "$tmp/out" && ok \
  || { bad "test_g not named as partly skipped"; cat "$tmp/out"; }
[ "$(wc -l < "$tmp/out")" -eq 4 ] && ok || { bad "lines other than the skipped and the total"; cat "$tmp/out"; }
# nothing skipped: still three counts
rm "$d"/test_e.* "$d"/test_golden_cuda.* "$d"/test_b.* "$d"/test_c.* "$d"/test_d.* "$d"/test_g.*
sh "$summary" "$tmp/build" 2 > "$tmp/out2"
[ "$(cat "$tmp/out2")" = "9 passed, 1 failed, 0 skipped" ] && ok \
  || { bad "make check failed but nothing counted"; cat "$tmp/out2"; }
finish
