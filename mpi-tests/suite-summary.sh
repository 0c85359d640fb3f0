#!/bin/sh
# Prints the last lines of mpi-tests/run-all.sh from a build directory where
# `make check` ran: "skipped: TEST" for each test automake recorded as SKIP
# (no GPU; python3 without numpy, transformers or matplotlib), then one line
# "N passed, N failed, N skipped". Passed and failed count Check test cases
# across the suite (each test prints "RP-CHECK: passed=P failed=F"; a test
# that crashed before printing its line counts as one failure); skipped
# counts test programs. A test that ran but skipped a part of itself
# ("SKIP part: why" in its log) is named "partly skipped: TEST (why)" above
# them, not counted. CI parses the "N passed, N failed" prefix, so it
# stays first. Usage: suite-summary.sh BUILDDIR [MAKE_CHECK_STATUS]
set -u
cd "$1" || exit 1
rc=${2:-0}
passed=0; failed=0; skipped=0; skipped_names=
for trs in $(find mpi-tests -name '*.trs' | sort); do
  log=${trs%.trs}.log
  res=$(sed -n 's/^:test-result: //p' "$trs" | head -n 1)
  # one summary line per run (a test declaring several rank counts has several)
  if grep -q '^RP-CHECK:' "$log" 2>/dev/null; then
    p=$(awk -F'[= ]' '/^RP-CHECK:/ {s += $3} END {print s + 0}' "$log")
    f=$(awk -F'[= ]' '/^RP-CHECK:/ {s += $5} END {print s + 0}' "$log")
  elif [ "$res" = PASS ]; then p=1; f=0
  elif [ "$res" = SKIP ]; then p=0; f=0
  else p=0; f=1
  fi
  if [ "$res" = SKIP ]; then
    skipped=$((skipped + 1)); skipped_names="$skipped_names ${trs%.trs}"
  fi
  # a run that failed after printing a clean line (a later rank count, exit code) still fails
  if [ "$res" = FAIL ] || [ "$res" = ERROR ]; then [ "$f" -gt 0 ] || f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
done
[ "$rc" -ne 0 ] && [ $failed -eq 0 ] && failed=1
# tests that ran but left a part out ("SKIP part: ..."; python3 without
# transformers, say): named too, not counted as skipped
for log in $(find mpi-tests -name '*.log' | sort); do
  why=$(sed -n 's/^SKIP part: //p' "$log" | head -n 1)
  [ -n "$why" ] && echo "partly skipped: ${log%.log} ($why)"
done
for name in $skipped_names; do
  # the reason the test gave ("SKIP: ... needs python3 with numpy ...")
  why=$(sed -n 's/^SKIP: //p' "$name.log" 2>/dev/null | head -n 1)
  echo "skipped: $name${why:+ ($why)}"
done
echo "$passed passed, $failed failed, $skipped skipped"
