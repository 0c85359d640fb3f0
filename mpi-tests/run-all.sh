#!/bin/bash
# The whole test suite from a fresh checkout: install what is missing,
# build, run `make check`, and end with the lines of suite-summary.sh: the
# skipped tests named, then "N passed, N failed, N skipped".
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh tools/install-deps.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
sh tools/build.sh || { echo "build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
sh tools/blas-builds.sh  # the OpenBLAS builds test_rank_bits.sh tries beside the installed one
cd build
make -j2 check
rc=$?
[ $rc -ne 0 ] && tail -n 60 test-suite.log
sh "$top/mpi-tests/suite-summary.sh" . $rc
exit $rc
