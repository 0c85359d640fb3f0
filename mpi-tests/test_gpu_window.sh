#!/bin/sh
# Proves, without a GPU, that the GPU window's one call is ready (issue 31):
# `bench/gpu/run.sh --check-only` passes (run.sh, parity.sh and
# tools/gpu-runtime.sh parse, and shellcheck -S warning finds nothing where it
# is installed; compare.py and torch_peer.py compile and the peer counts
# Qwen3-1.7B's 1,720,574,976 parameters, where python3 is; every fixture the
# phases read is present; every carried program has a make rule and every
# CUDA test of the check phase is a make check test; the summary writer
# writes the table); and bench/gpu/compare.py, parity's judge, accepts a log
# within the bound and identical lines, and refuses a loss beyond the bound,
# a missing step and a changed line. Every parity case has its row in
# bench/README.md's table, gpt-oss among them (issue 35: the next GPU session
# proves gpt-oss on CUDA), the row naming the fixture folder parity.sh gives
# the case, which --check-only checks; gpt-oss's dry run (the CPU for the
# GPU) passes with worst 0. parity.sh kills a hung run at RP_PARITY_END (the window's cap),
# failing its case, instead of waiting out the run's 180 s. On a stand-in
# GPU machine (a fake nvidia-smi, a build of stand-in programs), run.sh
# runs every phase's GPU branch to the table (each phase with its line in
# the table's second part), topology measures no GEMM peak it does not
# read, and a benchmark that hangs is killed where the budget ends, the
# table and the logs still written to $OUT; as root, where plan says
# /dev/shm cannot hold the e2e run's host store, run.sh remounts it as plan
# says before the run. SKIP without bash or python3.
set -u
. "$(dirname "$0")/testlib.sh"
command -v bash > /dev/null || { echo "SKIP: no bash"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: no python3 (run.sh and its helpers need it)"; exit 77; }
out=$(bash "$src/bench/gpu/run.sh" --check-only 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] && ok || bad "run.sh --check-only exit $rc"
echo "$out" | grep -q '^ok: the summary writer wrote' && ok || bad "the summary writer was not checked"
echo "$out" | grep -q '^ok: torch_peer.py --check: 1720574976 parameters' && ok || bad "the peer's parameter count"

cmpy="python3 $src/bench/gpu/compare.py"
line() { printf '{"step":%s,"loss":%s,"lr":0.001,"grad_norm":1.5,"tokens":64,"counted_tokens":50,"tokens_per_s":%s,"time":1.0}\n' "$@"; }
{ line 1 4.0 10; line 2 3.0 10; printf '{"step":2,"eval_loss":3.5,"samples":4}\n'; } > "$tmp/ref.jsonl"
{ line 1 4.04 99; line 2 2.97 99; printf '{"step":2,"eval_loss":3.52,"samples":4}\n'; } > "$tmp/close.jsonl"
{ line 1 4.0 99; line 2 3.1 99; printf '{"step":2,"eval_loss":3.5,"samples":4}\n'; } > "$tmp/far.jsonl"
{ line 1 4.0 99; printf '{"step":1,"eval_loss":3.5,"samples":4}\n'; } > "$tmp/short.jsonl"
{ line 1 4.0 55; line 2 3.0 55; printf '{"step":2,"eval_loss":3.5,"samples":4}\n'; } > "$tmp/same.jsonl"
$cmpy close "$tmp/ref.jsonl" "$tmp/close.jsonl" 2e-2 > "$tmp/c.txt" && grep -q '^worst 0.01 (loss at step 1' "$tmp/c.txt" &&
  ok || { bad "compare.py close refused losses within 2e-2"; cat "$tmp/c.txt"; }
$cmpy close "$tmp/ref.jsonl" "$tmp/far.jsonl" 2e-2 > "$tmp/c.txt" && { bad "compare.py close took a loss 3.3% off"; cat "$tmp/c.txt"; } ||
  { grep -q '^step 2: loss 3.1 vs 3: relative error 0.0333 > 0.02' "$tmp/c.txt" && ok || { bad "compare.py close: message"; cat "$tmp/c.txt"; }; }
$cmpy close "$tmp/ref.jsonl" "$tmp/short.jsonl" 2e-2 > "$tmp/c.txt" && bad "compare.py close took other steps" || ok
$cmpy same "$tmp/ref.jsonl" "$tmp/same.jsonl" > "$tmp/c.txt" && ok || { bad "compare.py same refused lines differing in timings only"; cat "$tmp/c.txt"; }
$cmpy same "$tmp/ref.jsonl" "$tmp/close.jsonl" > "$tmp/c.txt" && bad "compare.py same took other losses" ||
  { grep -q '^differs at step 1' "$tmp/c.txt" && ok || { bad "compare.py same: message"; cat "$tmp/c.txt"; }; }
tail -n 2 "$tmp/ref.jsonl" > "$tmp/tail.jsonl"
$cmpy same "$tmp/ref.jsonl" "$tmp/tail.jsonl" 2 > "$tmp/c.txt" && ok || { bad "compare.py same from step 2"; cat "$tmp/c.txt"; }

# every parity case in bench/README's table; gpt-oss's dry run
cases=$(sed -n 's/^all="\(.*\)"$/\1/p' "$src/bench/gpu/parity.sh")
case " $cases " in *" gpt-oss "*) ok ;; *) bad "parity.sh has no gpt-oss case (cases: $cases)" ;; esac
for c in $cases; do
  grep -q "^| $c | " "$src/bench/README.md" || bad "bench/README.md's parity table has no row for $c"
done
ok
# parity.sh turns off every CUDA path a case does not prove: its list is
# core/unproven.h's, as the switch's refusal names them
known=$(RP_DISABLE_CUDA_PATHS=not-a-path "$build/src/roundpipe" plan --layers "$src/bench/paper/qwen3-1.7b.txt" 2>&1 |
  sed -n 's/.*(known: \(.*\), or 1 for all.*/\1/p' | tr -d ,)
listed=$(sed -n 's/^paths="\(.*\)"$/\1/p' "$src/bench/gpu/parity.sh")
[ -n "$known" ] && [ "$(echo $known)" = "$(echo $listed)" ] && ok ||
  bad "parity.sh's paths ($listed) are not core/unproven.h's ($known)"
# each case's fixture folder, as parity.sh's fixture() gives it, is the one
# its row of bench/README's table names and one --check-only checks
fx_of() {
  sed -n '/^fixture() {/,/^}/p' "$src/bench/gpu/parity.sh" | sed -n 's/^ *\([a-z0-9|*-]*\)) d=\([^;]*\);.*/\1 \2/p' |
    while read -r pats dir; do
      case "|$pats|" in *"|$1|"*|"|*|") echo "$dir" | sed 's|\$src/mpi-tests/fixtures/||; s|\$g/|golden/|'; break ;; esac
    done
}
for c in $cases; do
  d=$(fx_of "$c")
  [ -n "$d" ] || { bad "parity.sh's fixture() gives $c no folder"; continue; }
  grep "^| $c | " "$src/bench/README.md" | cut -d'|' -f3 | grep -q "$d" || bad "bench/README.md's row for $c does not name $d"
  sed -n '/^fixtures="/,/"$/p' "$src/bench/gpu/run.sh" | grep -q "mpi-tests/fixtures/$d/" || bad "run.sh --check-only does not check $d ($c)"
done
ok
# a hung run ends at RP_PARITY_END (the window's parity cap), not after its
# own 180 s: a stand-in roundpipe that sleeps, launched by a stand-in mpirun
mkdir -p "$tmp/hung/src"
printf '#!/bin/sh\nsleep 60\n' > "$tmp/hung/src/roundpipe"
printf '#!/bin/sh\nwhile [ "$1" != -np ]; do shift; done; shift 2; exec "$@"\n' > "$tmp/hung/mpirun"
chmod +x "$tmp/hung/src/roundpipe" "$tmp/hung/mpirun"
t0=$(date +%s)
RP_PARITY_DEVICE=cpu RP_PARITY_OUT="$tmp/parity-hung" RP_SRCDIR="$src" RP_BUILDDIR="$tmp/hung" \
  MPIRUN="$tmp/hung/mpirun" RP_PARITY_DEADLINE=$((t0 + 4)) RP_PARITY_END=$((t0 + 6)) \
  bash "$src/bench/gpu/parity.sh" qwen3 > "$tmp/ph.txt" 2>&1
prc=$?; dt=$(( $(date +%s) - t0 ))
# (a deadline 1 s after t0, whole seconds, was too close: a start 10 ms
# into the next second on a busy machine read as "not started")
[ $dt -le 18 ] && [ $prc = 1 ] && grep -q "^PARITY	qwen3	FAILED	" "$tmp/ph.txt" &&
  grep -q "killed after [0-9]* s, the run's time limit" "$tmp/parity-hung/qwen3-cpu.txt" && ok ||
  { bad "parity.sh with a hung run: exit $prc after $dt s (RP_PARITY_END 6 s after the start)"; cat "$tmp/ph.txt"; }
# run.sh on a stand-in GPU machine: an nvidia-smi that lists a GPU, and a
# build (RP_GPU_BUILD) whose programs log their calls (and /dev/shm's size)
# in $g/calls and exit at once, or hang where STANDIN_HANG is set; its plan
# prints STANDIN_PLAN
g=$tmp/gpu
mkdir -p "$g/bin"
printf '#!/bin/sh\ncase "$*" in -L) echo "GPU 0: stand-in (UUID: GPU-0)" ;; *compute_cap*) echo 9.0 ;; *) echo stand-in ;; esac\n' \
  > "$g/bin/nvidia-smi"
chmod +x "$g/bin/nvidia-smi"
for p in $(grep -v '^#' "$src/bench/gpu/carried-programs.txt"); do
  mkdir -p "$g/build/$(dirname "$p")"
  printf '#!/bin/sh\necho "%s $* shm=$(df -k --output=size /dev/shm | tail -n 1 | tr -dc 0-9)" >> "%s"\ncase "$1" in --version|version|topology) echo stand-in; exit 0 ;; plan) echo "${STANDIN_PLAN:-}"; exit 0 ;; esac\n[ -z "${STANDIN_HANG:-}" ] || sleep 60\n' \
    "$p" "$g/calls" > "$g/build/$p"
  # the probe's answer, with the cuBLAS it opened (the env phase's row;
  # it never hangs)
  [ "$p" = mpi-tests/cuda_usable ] &&
    printf '#!/bin/sh\necho "GPU 0 (stand-in)"\necho "cuBLAS: /stand-in/libcublas.so.13; cuBLASLt: /stand-in/libcublasLt.so.13"\n' \
      > "$g/build/$p"
  # the copy phases fail a bench_copy that exits 0 without its result line
  [ "$p" = bench/gpu/bench_copy ] &&
    echo '[ -n "${STANDIN_SILENT:-}" ] || echo "RESULT copy_best pinned 50.0 50.0"' >> "$g/build/$p"
  chmod +x "$g/build/$p"
done
# standin BUDGET PHASE...: run.sh there, its output in $tmp/gw.txt, $OUT in
# $g/out; sets grc (exit) and gdt (seconds)
standin() {
  local b=$1; shift
  rm -rf "$g/out" "$g/calls"; mkdir -p "$g/out"
  local t0; t0=$(date +%s)
  PATH="$g/bin:$PATH" OUT="$g/out" RP_GPU_BUILD="$g/build" RP_GPU_BUDGET_S=$b RP_GPU_LOGS= \
    bash "$src/bench/gpu/run.sh" "$@" > "$tmp/gw.txt" 2>&1
  grc=$?; gdt=$(( $(date +%s) - t0 ))
}
# a subset of phases that reads no ratio to the GEMM peak spends no time on it
standin 60 topology
[ $grc = 0 ] && grep -q '^H2D pinned, two processes at once' "$g/out/summary.txt" && ! grep -q bench_gemm "$g/calls" && ok ||
  { bad "run.sh topology on a stand-in GPU: exit $grc; calls: $(tr '\n' ';' < "$g/calls")"; cat "$tmp/gw.txt"; }
# every RP_GPU_ setting run.sh's header and bench/README name, run.sh reads
for v in $(grep -ho 'RP_GPU_[A-Z0-9_]*' "$src/bench/gpu/run.sh" "$src/bench/README.md" | sort -u); do
  grep -q "\${$v[:}]" "$src/bench/gpu/run.sh" || bad "$v is documented, but run.sh never reads it"
done
ok
# the cuBLAS row says which files the probe opened at run time
grep -q '^cuBLAS (opened at run time)  */stand-in/libcublas.so.13 .*cuBLASLt /stand-in/libcublasLt.so.13' "$g/out/summary.txt" && ok ||
  bad "the summary's cuBLAS row: $(grep '^cuBLAS' "$g/out/summary.txt")"
# the cuDNN row says which library the attention opens (issue 38 uses it)
grep -q '^cuDNN .*--attention cudnn|auto opens ' "$g/out/summary.txt" && ok ||
  bad "the summary's cuDNN row: $(grep '^cuDNN' "$g/out/summary.txt")"
# every phase on the stand-in machine, whose programs print nothing (and
# with no compute-sanitizer on PATH): each phase's GPU branch runs to the
# table, every phase has its line in the table's second part, exit 1
PATH="$g/bin:$PATH" command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ] ||
  { MPIRUN="$tmp/hung/mpirun" standin 540
    missing=""
    for ph in build env parity check memcheck gemm attn copy adamw e2e speedup peer topology maxseq; do
      grep -q "^$ph  " "$g/out/summary.txt" || missing="$missing $ph"
    done
    [ $grc = 1 ] && [ -z "$missing" ] && ok ||
      { bad "run.sh, every phase on a stand-in GPU: exit $grc; no line in the phase table for:$missing"; cat "$tmp/gw.txt"; }; }
# a benchmark that exits 0 without its result line fails its phase: bench_copy ...
STANDIN_SILENT=1 standin 60 copy
[ $grc = 1 ] && grep -q '^host<->device copies  *FAILED' "$g/out/summary.txt" && ok ||
  { bad "run.sh copy on a stand-in GPU whose bench_copy prints nothing: exit $grc"; cat "$tmp/gw.txt"; }
# ... and so do the GEMM, head, block and attention benchmarks (the
# stand-ins print nothing): a row FAILED for each, none left empty
standin 60 gemm
[ $grc = 1 ] && grep -q '^GEMM  *FAILED' "$g/out/summary.txt" &&
  grep -q '^head fwd+bwd  *FAILED' "$g/out/summary.txt" &&
  grep -q '^block op by op (default paths)  *FAILED' "$g/out/summary.txt" &&
  grep -q '^block op by op (off paths)  *FAILED' "$g/out/summary.txt" && ok ||
  { bad "run.sh gemm on a stand-in GPU whose benchmarks print nothing: exit $grc"; cat "$tmp/gw.txt"; }
standin 60 attn
[ $grc = 1 ] && grep -q '^attention fwd+bwd  *FAILED' "$g/out/summary.txt" && ok ||
  { bad "run.sh attn on a stand-in GPU whose bench_attention prints nothing: exit $grc"; cat "$tmp/gw.txt"; }
# a hung benchmark is killed where the budget ends (less 10 s for the
# table), and the table and the logs' archive still reach $OUT (the adamw
# phase, which starts with 25 s left: 7 s to spare)
STANDIN_HANG=1 standin 32 adamw
[ $gdt -le 36 ] && [ $grc = 1 ] && grep -q '^host AdamW  *FAILED' "$g/out/summary.txt" &&
  [ -f "$g/out/gpu-bench-logs.tar.gz" ] && ok ||
  { bad "run.sh adamw on a stand-in GPU whose bench_adamw hangs: exit $grc after $gdt s (budget 32 s)"; cat "$tmp/gw.txt"; cat "$g/out/summary.txt"; }
# where plan says /dev/shm is too small for train's host store, run.sh
# remounts it as plan says before the e2e run (as root, in a private mount
# namespace here: a 64 MiB /dev/shm)
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2> /dev/null; then
  rm -rf "$g/out" "$g/calls"; mkdir -p "$g/out"
  STANDIN_PLAN='warning: /dev/shm has 0.06 GiB free: train would stop (as root: mount -o remount,size=1G /dev/shm)' \
    PATH="$g/bin:$PATH" OUT="$g/out" RP_GPU_BUILD="$g/build" RP_GPU_BUDGET_S=110 RP_GPU_LOGS= MPIRUN="$tmp/hung/mpirun" \
    unshare -m --propagation private sh -c 'mount -t tmpfs -o size=64M tmpfs /dev/shm && exec bash "$1" e2e' \
    sh "$src/bench/gpu/run.sh" > "$tmp/gw.txt" 2>&1
  grep -q '^src/roundpipe train .* shm=1048576$' "$g/calls" && grep -q '^/dev/shm for e2e (batch 8)  *64M -> 1G' "$g/out/summary.txt" && ok ||
    { bad "run.sh e2e did not enlarge a 64 MiB /dev/shm as plan said; calls: $(tr '\n' ';' < "$g/calls")"; cat "$tmp/gw.txt"; }
else echo "(not root or no unshare here: run.sh's /dev/shm remount is not tested)"; fi
if [ -x "$build/src/roundpipe" ]; then
  RP_PARITY_DEVICE=cpu RP_PARITY_OUT="$tmp/parity" RP_SRCDIR="$src" RP_BUILDDIR="$build" \
    MPIRUN="${MPIRUN:-mpirun --oversubscribe}" bash "$src/bench/gpu/parity.sh" gpt-oss > "$tmp/p.txt" 2>&1
  prc=$?
  grep -q "^PARITY	gpt-oss	ok	0	" "$tmp/p.txt" && [ $prc = 0 ] && ok ||
    { bad "parity.sh gpt-oss, dry run: exit $prc"; cat "$tmp/p.txt"; }
fi
finish
