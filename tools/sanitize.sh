#!/bin/bash
# tools/sanitize.sh address|thread [--summary] [TEST...]: build roundpipe with a
# sanitizer (AddressSanitizer with UndefinedBehaviorSanitizer, or
# ThreadSanitizer) out of tree in build-<kind>/, run `make check` there (the
# TESTS given, e.g. mpi-tests/test_engine.sh, or the whole suite), and list
# the sanitizers' reports by the job that made them (--summary: only list
# those of the last run again).
#
# Every mpirun of the suite goes through a wrapper that gives the job a
# directory of its own (its command line and one report file per process),
# so a report names the training run that made it. What counts:
# - address: every report is a finding (leak checking is off: Open MPI's
#   allocations are reported as lost at exit).
# - thread: a report from a job of one rank is a finding, as is one from a
#   program run without mpirun: TSan sees every ordering between the threads
#   of one process. In a job of several ranks two threads of one rank are
#   often ordered only through another rank: a job on one rank waits for an
#   event another process set after it had waited for one of the first
#   rank's (the counters are shared memory between processes, engine/
#   event.h), and TSan, which follows one process, reports the pair. Such
#   reports are listed as not verifiable here, with the job; the same
#   configurations on one rank are what this tool proves. Reports inside
#   Open MPI's own threads are the same kind (its progress engine completes
#   one thread's receive on another with atomics TSan does not see), and so
#   are reports with a frame in an OpenMP team (--threads 2 and more):
#   libgomp's barriers are not built for TSan.
# Exits 1 on a finding or a failed test, 0 otherwise. The CUDA executor is
# not built (the sanitizers do not follow a GPU).
set -u
kind=${1:-}
case $kind in
  address) flags="-fsanitize=address,undefined"; var=ASAN_OPTIONS
           opts="detect_leaks=0 halt_on_error=0" ;;
  thread) flags="-fsanitize=thread"; var=TSAN_OPTIONS; opts="halt_on_error=0 exitcode=0" ;;
  *) echo "usage: tools/sanitize.sh address|thread [--summary] [TEST...]" >&2; exit 2 ;;
esac
shift
summary_only=0
[ "${1:-}" = --summary ] && { summary_only=1; shift; }
top=$(cd "$(dirname "$0")/.." && pwd)
b="$top/build-$kind"
reports="$b/sanitize-reports"

# build-<kind>/: configured once, built each time
build() {
  mkdir -p "$b" && cd "$b" || exit 1
  if [ ! -f Makefile ]; then
    echo "sanitize: configuring in build-$kind/ (log: build-$kind/configure.out)"
    if ! "$top/configure" --without-cuda CFLAGS="-O1 -g -fno-omit-frame-pointer $flags" \
        LDFLAGS="$flags" > configure.out 2>&1; then
      tail -n 20 configure.out >&2; exit 1
    fi
  fi
  echo "sanitize: building (log: build-$kind/make.out)"
  make -j"$(nproc)" > make.out 2>&1 || { tail -n 30 make.out >&2; exit 1; }
}

# make check with every job's reports in a directory of its own: the
# wrapper given as MPIRUN writes the job's command line and points the
# sanitizers' log_path there. Shared memory only between the ranks (all on
# this machine): Open MPI's tcp transport takes two of its locks in both
# orders, a TSan report inside Open MPI at every start. test_install's
# program links the instrumented library, so it is compiled with the flags
# too: MPICC, a wrapper (the test looks for it as a command), on make's
# command line (the Makefile's own would win over the environment's). Check's
# per-case timeouts are ten times theirs (the sanitizers' slowness).
check() {
  rm -rf "$reports"
  mkdir -p "$reports/jobs" "$reports/direct"
  {
    echo '#!/bin/sh'
    echo "d=\$(mktemp -d '$reports/jobs/XXXXXX')"
    echo 'printf "%s\n" "$*" > "$d/command"'
    echo "export $var=\"$opts log_path=\$d/report\""
    echo 'export UBSAN_OPTIONS="print_stacktrace=1 log_path=$d/ubsan"'
    echo 'export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}'
    echo 'exec mpirun "$@"'
  } > "$reports/mpirun"
  printf '#!/bin/sh\nexec mpicc %s "$@"\n' "$flags" > "$reports/mpicc"
  chmod +x "$reports/mpirun" "$reports/mpicc"
  local tests=() start rc
  [ $# -gt 0 ] && tests=("TESTS=$*")
  echo "sanitize: make check ${tests[*]:-(the whole suite)} (log: build-$kind/check.out)"
  start=$(date +%s)
  env "$var=$opts log_path=$reports/direct/report" CK_TIMEOUT_MULTIPLIER=10 \
    UBSAN_OPTIONS="print_stacktrace=1 log_path=$reports/direct/ubsan" \
    make -j"$(nproc)" check MPIRUN="$reports/mpirun" MPICC="$reports/mpicc" "${tests[@]}" \
    > check.out 2>&1
  rc=$?
  echo "sanitize: make check exit $rc after $(( $(date +%s) - start )) s;" \
    "$(grep -E '^# (PASS|FAIL|SKIP|ERROR):' check.out | tr -s ' ' | tr '\n' ' ')"
  return $rc
}

# classify FILES...: a line "finding|openmp<TAB>SUMMARY" per report (a
# crash without a SUMMARY line by its ERROR line), the project's frames from
# src/ on. A TSan report with a thread of an OpenMP
# team (one libgomp created) cannot be verified: libgomp is not built for
# TSan, so its barriers order nothing TSan sees (runs with --threads 1 are
# what proves those paths).
classify() {
  awk -v kind="$kind" '
    function flush() { if (pending != "") print "finding\t" pending; pending = "" }
    FNR == 1 { flush(); inrep = 0 }
    /^WARNING: ThreadSanitizer|ERROR: (Address|Thread)Sanitizer|runtime error:/ {
      flush(); omp = 0; inrep = 1; created = 0; pending = $0 }
    inrep && /created by/ { created = 1 }
    inrep && created && /libgomp/ { omp = 1 }
    /runtime error:/ { flush(); inrep = 0; next }
    inrep && /^SUMMARY: / {
      print ((kind == "thread" && omp) ? "openmp" : "finding") "\t" $0; inrep = 0; pending = "" }
    END { flush() }
  ' "$@" 2>/dev/null | sed -E 's#SUMMARY: ##; s#[^ \t]*/(src|mpi-tests|fuzz)/#\1/#g'
}

# summarise: per job (or the programs run directly), its rank count and
# its reports; a TSan race of a job of several ranks is "across ranks" (a
# crash stays a finding)
summarise() {
  local findings=0 unverified=0 d ranks what label
  for d in "$reports/direct" "$reports"/jobs/*; do
    ls "$d" 2>/dev/null | grep -qE '^(report|ubsan)' || continue
    ranks=1
    [ -f "$d/command" ] && ranks=$(sed -nE 's/.*-(np|n) ([0-9]+).*/\2/p' "$d/command" | head -n 1)
    what="programs run directly"
    [ -f "$d/command" ] && what="job on ${ranks:-?} rank(s): $(cut -c1-300 "$d/command")"
    classify "$d"/report* "$d"/ubsan* > "$d/classified"
    if [ "$kind" = thread ] && [ "${ranks:-1}" -gt 1 ]; then
      sed -i -E '/ThreadSanitizer: (data race|lock-order)/s/^finding/across ranks/' "$d/classified"
    fi
    if grep -q '^finding' "$d/classified"; then
      findings=$((findings + 1)); label="FINDING"
    else
      unverified=$((unverified + 1)); label="not verifiable here"
    fi
    echo "== $label: $what"
    echo "   reports: $d"
    sort "$d/classified" | uniq -c | head -n 20
  done
  echo "sanitize: $findings job(s) with findings; $unverified with only reports TSan cannot" \
    "verify (across ranks, or in OpenMP teams); reports under build-$kind/sanitize-reports/"
  [ "$findings" -eq 0 ]
}

rc=0
if [ "$summary_only" = 0 ]; then
  build
  check "$@" || rc=1
fi
summarise || rc=1
exit $rc
