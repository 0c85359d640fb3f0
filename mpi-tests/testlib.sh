# Sourced by the shell tests: paths, mpirun flags, a scratch directory
# removed on exit, and the pass/fail counters behind the RP-CHECK line.
src="${RP_SRCDIR:-${srcdir:-.}}"
build="${RP_BUILDDIR:-.}"
bin="$build/src/roundpipe"
flags="--oversubscribe"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
# containers forbid the cross-memory-attach syscalls shared-memory MPI uses
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# ob1, the messaging layer Open MPI picks here anyway (self and vader between
# the ranks of one machine): named, MPI_Init skips probing the cm layer's
# PSM and PSM2 libraries, 0.2 s of each job's start on the CI machine
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
# a rank that exits 0 has called MPI_Finalize (src/cli/main.c): Open MPI
# 4.1's runtime can see that exit before the finalize's notice and report the
# rank as "exiting improperly", failing a job that ended well (open-mpi/ompi
# #7833, #12607; UCX's CI sets the same). A rank that fails still exits
# non-zero or on a signal, which mpirun reports as before.
export OMPI_MCA_orte_allowed_exit_without_sync=1
# for a job of one rank that the test sends no signal: when a rank exits
# non-zero, mpirun sends the job's ranks SIGTERM and SIGKILL a second later
# (odls_base_sigkill_timeout), and for one rank it waits that second twice
# though the rank is gone: 2 s more for each refusal. A job of one rank has
# no rank left alive then, so there is nothing for the grace to change.
one_rank="--mca odls_base_sigkill_timeout 0"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
# cuda_usable: succeeds when `train --device cuda` can run here (a build with
# the CUDA executor and a usable GPU); the probe's answer is in $tmp/cuda.txt
cuda_usable() { "$build/mpi-tests/cuda_usable" > "$tmp/cuda.txt" 2>&1; }
# print the summary line; succeed when nothing failed
# fnv1a64 FILE: the checksum checkpoint.complete gives a file, FNV-1a 64 from
# the offset basis of roundpipe-formats(5), as 16 hex digits
fnv1a64() {
  bash -c 'f=$1; n=$(wc -c < "$f"); w=$((n / 8)); h=$((0xcbf29ce484222325))
    for x in $(head -c $((w * 8)) "$f" | od -An -v -tx8); do h=$(( (h ^ 0x$x) * 0x100000001b3 )); done
    for b in $(tail -c $((n - w * 8)) "$f" | od -An -v -tu1); do h=$(( (h ^ b) * 0x100000001b3 )); done
    printf "%016x" $h' _ "$1"
}
# checkpoint_remark DIR STEP: checkpoint DIR's marker remade for its edited
# trainer_state.json (a test's stand-in for a checkpoint of an older format)
checkpoint_remark() {
  printf 'step %d\ntrainer_state.json %d %s\n' "$2" "$(wc -c < "$1/trainer_state.json")" \
    "$(fnv1a64 "$1/trainer_state.json")" > "$1/checkpoint.complete"
}
finish() { echo "RP-CHECK: passed=$passed failed=$failed"; [ "$failed" -eq 0 ]; }
