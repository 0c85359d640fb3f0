#!/bin/sh
# Proves: a planted deadlock in a multi-rank run (the producer of an event
# stops signalling) ends at the deadline, not at a test-suite timeout: the
# job exits non-zero and every rank prints the one message naming its rank,
# the job, the event, its value and the value awaited.
set -u
build="${RP_BUILDDIR:-.}"
prog="$build/mpi-tests/event_deadlock_prog"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags="--oversubscribe"
if [ "$(id -u)" = 0 ]; then flags="$flags --allow-run-as-root"; fi
OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_btl_vader_single_copy_mechanism
# ob1, the messaging layer Open MPI picks here anyway: named, MPI_Init skips
# probing PSM and PSM2 (0.2 s a job; testlib.sh)
OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_pml
# a rank that exits 0 has finalized: no false "exiting improperly" (testlib.sh)
export OMPI_MCA_orte_allowed_exit_without_sync=1
passed=0; failed=0
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
for n in 2 3; do
  start=$(date +%s)
  ${MPIRUN:-mpirun} $flags -np $n "$prog" 0.5 >"$tmp/out" 2>"$tmp/err"; rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then bad "$n ranks: exit 0 after a deadlock"; else passed=$((passed + 1)); fi
  r=0
  while [ $r -lt $n ]; do
    msg="roundpipe: rank $r, job F1 (iteration 2): timed out waiting for event fwd_out[stage 0]: value 1, awaited 2"
    if [ "$(grep -cxF "$msg" "$tmp/err")" = 1 ]; then passed=$((passed + 1)); else bad "$n ranks: rank $r did not print: $msg"; cat "$tmp/err"; fi
    r=$((r + 1))
  done
  # 0.5 s deadline; generous bound for MPI start-up on a loaded machine
  if [ "$took" -le 30 ]; then passed=$((passed + 1)); else bad "$n ranks: took $took s"; fi
done
echo "RP-CHECK: passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
