#!/bin/bash
# The whole test suite from a fresh checkout: install what is missing,
# build, run `make check`, and print one line "N passed, N failed" that
# counts Check test cases across the suite (each test prints
# "RP-CHECK: passed=P failed=F"; a test that crashed before printing its
# line counts as one failure).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh tools/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
sh tools/build.sh || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
sh tools/blas-builds.sh  # the OpenBLAS builds test_rank_bits.sh tries beside the installed one
cd build
make -j2 check
rc=$?
passed=0; failed=0
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
  # a run that failed after printing a clean line (a later rank count, exit code) still fails
  if [ "$res" = FAIL ] || [ "$res" = ERROR ]; then [ "$f" -gt 0 ] || f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
done
[ $rc -ne 0 ] && [ $failed -eq 0 ] && failed=1
[ $rc -ne 0 ] && cat test-suite.log | tail -n 60
echo "$passed passed, $failed failed"
exit $rc
