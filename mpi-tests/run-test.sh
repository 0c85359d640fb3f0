#!/bin/sh
# Test runner for `make check`: runs a test at each rank count it declares
# (`prog --rp-test-ranks`, see rp_check.h); "serial" tests run directly.
# Exit 77 from every run means SKIP.
prog=$1
ranks=$("$prog" --rp-test-ranks 2>/dev/null | tail -n 1)
case $ranks in
  ""|serial) exec "$@" ;;
esac
flags="--oversubscribe"
if [ "$(id -u)" = 0 ]; then flags="$flags --allow-run-as-root"; fi
# Containers often forbid the cross-memory-attach syscalls shared-memory MPI
# uses; fall back to copy-in/copy-out.
OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_btl_vader_single_copy_mechanism
# ob1, the messaging layer Open MPI picks here anyway: named, MPI_Init skips
# probing PSM and PSM2 (0.2 s a job; testlib.sh)
OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
export OMPI_MCA_pml
# a rank that exits 0 has finalized: no false "exiting improperly" (testlib.sh)
export OMPI_MCA_orte_allowed_exit_without_sync=1
rc=0; skipped=0; runs=0
for n in $ranks; do
  runs=$((runs + 1))
  echo "== $prog on $n rank(s)"
  ${MPIRUN:-mpirun} $flags -np "$n" "$@"
  r=$?
  if [ "$r" = 77 ]; then skipped=$((skipped + 1));
  elif [ "$r" != 0 ]; then echo "== FAILED on $n rank(s): exit $r"; rc=1; fi
done
if [ "$rc" = 0 ] && [ "$skipped" = "$runs" ]; then exit 77; fi
exit $rc
