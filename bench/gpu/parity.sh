#!/bin/bash
# bench/gpu/parity.sh: every training path on --device cuda against the CPU
# executors' result on the same fixture (bench/gpu/run.sh's parity phase).
#
#   bash bench/gpu/parity.sh [CASE...]     (default: all, in this order)
#
# Each case trains one fixture of mpi-tests/fixtures three times:
#   cpu   1 rank, --device cpu, the fixture's own arguments (fp32): the reference
#   dut1  --device cuda (bf16, the dtype that follows the device), 1 rank
#   dut2  --device cuda, 2 ranks sharing the GPU
# and checks: every step's loss (and eval_loss, router_aux_loss where logged)
# of dut1 within RP_PARITY_RTOL (default 2e-2, the bf16 bound of
# test_golden_cuda.sh) of cpu's; dut2's saved model (or adapter) and its log
# identical to dut1's, bit for bit.
#
#   qwen3       golden/qwen3 (loss mask, clipping, cosine schedule)
#   llama       golden/llama (biases, untied head, 3 microbatches)
#   lora        golden-lora/qwen3-all on golden/qwen3 (PEFT's adapter as --lora-init)
#   moe         golden-moe/moe-mb: Qwen3-MoE, full fine-tuning, auxiliary loss
#   moe-lora    golden-moe/moe-lora: LoRA on the experts, router and attention
#   documents   golden/qwen3-packed with --documents and --eval-data/--eval-documents
#               (refused on CUDA until proven: RP_ALLOW_UNPROVEN_CUDA=documents here)
#   cudnn-documents  the same with --attention auto and
#               RP_ALLOW_UNPROVEN_CUDA=documents,cudnn,cudnn-documents: the
#               segments through cuDNN's ragged layout where their padding fits
#               (kernels/attn_documents.h; the own kernel for the rest, with
#               the same choice on any rank count); the run's log must count
#               calls through cuDNN (a path never taken fails)
#   eval        golden/qwen3 with --eval-data/--eval-mask, --eval-every 2,
#               --eval-samples 9 (a last microbatch of 1 sample, whose one chunk
#               keeps the MLP's g, u, m in the saved area where the full ones'
#               two chunks of 16 tokens do not: --token-tile 16
#               --mlp-chunk-tokens 16)
#   checkpoint  golden/qwen3: dut1 checkpoints every 3 steps; dut2 resumes
#               the step-3 checkpoint on 2 ranks; both identical to qwen3's
#               dut1 when that ran
#   nodes       golden/qwen3: dut1 = 2 ranks --pipelines 2, dut2 = 2 ranks
#               --ranks-per-node 1 (two nodes on one machine, one GPU)
#   kept        golden/qwen3, --plan fwd=0-1;bwd=2-3,0-1 (block 1 below the tail): dut1 = 1 rank
#               --recompute none (block 1's input and saved area kept in the GPU's own
#               memory, the executor's pool; its line must say so), dut2 = 2 ranks
#               --recompute stage (recomputed) with --weight-buffers 1 (no upload
#               overlapping a job): the same bits
#   chunks      golden/qwen3 with tiles of 8 tokens: dut1 = 1 rank, the MLP in chunks
#               of one tile; dut2 = 2 ranks, the whole microbatch one chunk: the
#               same bits (model/token_tiles.h: the chunk never changes them)
#   moe-chunks  golden-moe/moe-mb likewise: the experts' rows a tile at a time
#   fp8         golden-fp8/qwen3-bf16-scales: LoRA on an FP8 base (e4m3 with BF16 block
#               scales, partial edge blocks), uploaded as FP8 and dequantised on the
#               device (RP_ALLOW_UNPROVEN_CUDA=fp8-upload here; without it the base is
#               dequantised into the host store)
#   fp8-moe     golden-fp8/moe-bf16-scales: the same with every expert FP8
#   cudnn       golden/qwen3 with --attention cudnn (cuDNN's fused flash SDPA,
#               issue 38); every other case runs --attention own on the device,
#               so that a cuDNN fault fails this case alone
#   defaults    golden/qwen3 as a user runs it: every proven path on (none
#               turned off by RP_DISABLE_CUDA_PATHS) and --attention auto;
#               every other case turns off the paths it does not prove, so a
#               fault of one fails its case alone (a path not yet proven,
#               cudnn-documents, stays off here as in a user's run)
#   fused-xent  golden/qwen3 with RP_ALLOW_UNPROVEN_CUDA=fused-xent: the head's
#               cross-entropy writes its bf16 gradient in the pass that forms it
#               (issue 38), which must give qwen3's dut1 model bit for bit (every
#               other case forms it in fp32 and converts it)
#   xent-fp32   golden/qwen3 with RP_ALLOW_UNPROVEN_CUDA=xent-fp32: the head's
#               cross-entropy sums each row's exponentials in float (issue 38:
#               no double arithmetic per logit); not qwen3's bits, within the
#               bound of the CPU's, 2 ranks = 1 rank
#   copies      golden/qwen3 with 10 KiB transfer chunks: dut1 = 1 rank, the
#               transfer engine's asynchronous copies (an upload and a download
#               stream, events; RP_ALLOW_UNPROVEN_CUDA=copies), dut2 = 2 ranks
#               with the synchronous copies every other case has, and a third
#               run as dut1 with --weight-buffers 1 (each job's uploads overwrite
#               what the one before read): the same bits, and each run's log
#               says which (issue 38)
#   gemm-lt     golden/llama (biases on every projection, so the epilogue's
#               bias runs too) with RP_ALLOW_UNPROVEN_CUDA=gemm-lt (dut1 and
#               dut2): the Linear forward through cuBLASLt, the residual as its
#               C and the bias in its epilogue (issue 38); not llama's bits
#               (the sums are ordered otherwise) but within the bound of the
#               CPU's, and deterministic: 2 ranks = 1 rank; the run's log must
#               count linear forwards through cuBLASLt (a path never taken fails)
#   bf16-mlp    golden/qwen3 with tiles of 8 tokens and RP_ALLOW_UNPROVEN_CUDA=bf16-mlp
#               (dut1 and dut2): the dense MLP's g, u and dm written by their GEMMs
#               in bf16 and read so by the SwiGLU (issue 38); dut1 = 1 rank, the MLP
#               in chunks of one tile (g, u, dm a chunk's scratch), dut2 = 2 ranks,
#               one chunk (g and u in the saved area): the same bits, within the
#               bound of the CPU's; on a GPU a third run, 2 ranks without the
#               switch, must end with another model (g and u rounded or not: a
#               path never taken fails; the CPU computes in fp32, no third run)
#   fused-gate-up  golden/qwen3 with tiles of 8 tokens and
#               RP_ALLOW_UNPROVEN_CUDA=fused-gate-up (dut1 and dut2): the dense
#               MLP's gate and up as one GEMM writing rows [g | u], one
#               weight-gradient and one input-gradient GEMM for both (issue
#               38); dut1 = 1 rank, the MLP in chunks of one tile, dut2 = 2
#               ranks, one chunk (g and u in the saved area): the same bits,
#               within the bound of the CPU's; a third run, 2 ranks without
#               the switch, must end with another model (the input gradient
#               sums in another order: a path never taken fails). With the CPU
#               standing in, its runs set the test hook RP_TEST_FUSED_GATE_UP=1
#               instead (the reference never), so the dry run takes the path
#               too: worst is then the CPU's own rounding (about 2e-8), not 0
#   speculative golden/qwen3 with --speculative-update on (its clip 4.0: three
#               steps keep the update made before the norm, three redo it from
#               the backup; issue 33); every other case runs
#               --speculative-update off on the device (auto turns it on with
#               CUDA executors), so that a fault of it fails this case alone
#   gpt-oss     golden-gpt-oss/oss-hd16 (oss-m2 with heads of 16: CUDA's attention
#               takes multiples of 8, oss-m2's 12 is refused): gpt-oss, full fine-tuning (sinks, a sliding
#               window shorter than the sequence, YaRN, router and expert biases,
#               the clamped SwiGLU past its clamps, 2 microbatches and a large
#               auxiliary loss; refused on CUDA until proven: RP_ALLOW_UNPROVEN_CUDA=gpt-oss
#               here)
#
# Environment: RP_BUILDDIR (a build with src/roundpipe; default build),
# RP_SRCDIR (default the tree holding this script), MPIRUN (default mpirun),
# RP_PARITY_DEVICE (the device under test, default cuda; "cpu" proves the
# harness itself on a machine without a GPU: every check must pass, with
# relative error 0), RP_PARITY_OUT (work folder, default a new one under
# TMPDIR), RP_PARITY_DUT_ENV (NAME=VALUE words set for the device under
# test's runs alone, not the CPU references': the CPU's test modes, e.g.
# RP_TEST_EVENT_DEVICE=1, checked against the plain CPU), RP_PARITY_DEADLINE (epoch seconds: a case not started by then is
# skipped, and says so), RP_PARITY_END (epoch seconds: no run, the CPU
# references' included, outlasts it: one still running then is killed and
# its case fails saying so; without it each run has 180 s), RP_PARITY_KEEP=1 (keep the saved models and
# checkpoints; by default only the logs stay), RP_PARITY_JOBS (cases at
# once: default 3 on a GPU, 1 with the CPU standing in).
#
# The CPU references run in the background, one per distinct fixture (most
# cases share golden/qwen3's), while the device runs the cases, several at
# once: a case's lines are printed, in the cases' order, when all have ended.
#
# Prints one line per case, also appended to $RP_PARITY_OUT/results.txt:
#   PARITY<TAB>CASE<TAB>ok|FAILED|skipped<TAB>WORST<TAB>DETAIL
# Exit: 0 every case ran and passed, 1 a case failed, 2 usage.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${RP_SRCDIR:-$(cd "$here/../.." && pwd)}
build=${RP_BUILDDIR:-$src/build}
bin=$build/src/roundpipe
dev=${RP_PARITY_DEVICE:-cuda}
rtol=${RP_PARITY_RTOL:-2e-2}
deadline=${RP_PARITY_DEADLINE:-0}
hard_end=${RP_PARITY_END:-0}
work=${RP_PARITY_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/rp-parity.XXXXXX")}
mkdir -p "$work"
cmpy="python3 $here/compare.py"
# every CUDA path of core/unproven.h, as RP_DISABLE_CUDA_PATHS names them
paths="documents fp8-upload gpt-oss cudnn fused-xent copies gemm-lt xent-fp32 bf16-mlp fused-gate-up cudnn-documents"
# the never-run paths first: a case not started by the deadline is skipped
all="qwen3 llama lora moe moe-lora documents cudnn-documents gpt-oss fp8 fp8-moe cudnn defaults fused-xent xent-fp32 copies gemm-lt bf16-mlp fused-gate-up speculative chunks moe-chunks eval checkpoint nodes kept"
cases=${*:-$all}
for c in $cases; do
  case " $all " in *" $c "*) ;; *) echo "parity.sh: unknown case '$c' (cases: $all)" >&2; exit 2 ;; esac
done
[ -x "$bin" ] || { echo "parity.sh: no $bin (RP_BUILDDIR)" >&2; exit 2; }
flags=""; [ "$(id -u)" = 0 ] && flags="--allow-run-as-root"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
g=$src/mpi-tests/fixtures/golden
status=0

result() {  # CASE STATUS WORST DETAIL
  printf 'PARITY\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" | tee -a "$work/results.txt"
  [ "$2" = FAILED ] && status=1
  return 0
}

# args CASE: the fixture folder, its model and data options and its arguments
# (args.txt), for the case
fixture() {
  local c=$1 d m model extra
  case $c in
    fp8) d=$src/mpi-tests/fixtures/golden-fp8/qwen3-bf16-scales; m=$g/qwen3 ;;
    fp8-moe) d=$src/mpi-tests/fixtures/golden-fp8/moe-bf16-scales; m=$d ;;
    lora) d=$src/mpi-tests/fixtures/golden-lora/qwen3-all; m=$g/qwen3 ;;
    moe|moe-chunks) d=$src/mpi-tests/fixtures/golden-moe/moe-mb; m=$d ;;
    moe-lora) d=$src/mpi-tests/fixtures/golden-moe/moe-lora; m=$d ;;
    gpt-oss) d=$src/mpi-tests/fixtures/golden-gpt-oss/oss-hd16; m=$d ;;
    documents|cudnn-documents) d=$g/qwen3-packed; m=$d ;;
    llama|gemm-lt) d=$g/llama; m=$d ;;
    *) d=$g/qwen3; m=$d ;;
  esac
  case $c in
    fp8) model=$d-model ;;
    fp8-moe) model=$d/model-fp8 ;;
    *) model=$m/model ;;
  esac
  extra="--model $model --data $m/data.npy"
  [ -f "$m/mask.npy" ] && extra="$extra --loss-mask $m/mask.npy"
  [ -d "$d/lora_init" ] && extra="$extra --lora-init $d/lora_init"
  case $c in
    documents|cudnn-documents) extra="$extra --documents $d/documents.npy --eval-data $d/data.npy --eval-documents $d/documents.npy"
               [ -f "$d/mask.npy" ] && extra="$extra --eval-mask $d/mask.npy" ;;
    eval) extra="$extra --eval-data $m/data.npy --eval-mask $m/mask.npy --eval-every 2 --eval-samples 9 --token-tile 16 --mlp-chunk-tokens 16" ;;
  esac
  echo "$extra $(cat "$d/args.txt")"
}
saved_file() { case $1 in lora|moe-lora|fp8|fp8-moe) echo adapter_model.safetensors ;; *) echo model.safetensors ;; esac; }

# run NAME DEVICE NP [options...]: one training run into $work/NAME{.jsonl,.txt,/}
run() {
  local name=$1 device=$2 np=$3; shift 3
  local a; a=$(fixture "$case")
  # CUDA computes in bf16: the fixture's --dtype fp32 is for the CPU; the
  # device's attention is the own kernel except in the cudnn cases, and its
  # update is not speculative except in the speculative case (which says so)
  if [ "$device" != cpu ]; then
    a="$(echo "$a" | sed 's/--dtype fp32//') --attention own"
    case $case in
      cudnn) a="${a% --attention own} --attention cudnn" ;;
      defaults|cudnn-documents) a="${a% --attention own} --attention auto" ;;
    esac
    [ "$case" = speculative ] || a="$a --speculative-update off"
  fi
  # the CUDA paths (core/unproven.h) this case proves, and no other (the
  # rest turned off, proven or not): a fault of one fails its case alone;
  # the defaults case turns none off
  local unproven=""
  case $case in
    documents) unproven=documents ;;
    cudnn-documents) unproven=documents,cudnn,cudnn-documents ;;
    gpt-oss) unproven=gpt-oss ;;
    fp8|fp8-moe) unproven=fp8-upload ;;
    fused-xent) unproven=fused-xent ;;
    xent-fp32) unproven=xent-fp32 ;;
    gemm-lt) unproven=gemm-lt ;;
    bf16-mlp) [ -n "${fp32_mlp:-}" ] || unproven=bf16-mlp ;; # the third run: fp32_mlp=1
    fused-gate-up) [ -n "${two_gemms:-}" ] || unproven=fused-gate-up ;; # the third run: two_gemms=1
    copies) [ -n "${sync_copies:-}" ] || unproven=copies ;; # dut2: sync_copies=1
  esac
  local off="" p
  if [ "$case" != defaults ]; then
    for p in $paths; do
      case ",$unproven," in *",$p,"*) ;; *) off="$off${off:+,}$p" ;; esac
    done
  fi
  # the CPU standing in for the device takes the fused gate/up GEMM through
  # its test hook (the CPU reference, ref-*, never)
  local hook=""
  [ "$unproven" = fused-gate-up ] && [ "$device" = cpu ] && [ "${name#ref-}" = "$name" ] && hook=1
  rm -rf "${work:?}/$name" "$work/$name.jsonl"
  # 180 s a run, and none past RP_PARITY_END: the deadline only stops new
  # cases, and a hung run of a case started just before it would otherwise
  # hold the window's call up to 180 s a run (three runs a case)
  local limit=180
  if [ "$hard_end" -gt 0 ]; then
    limit=$(( hard_end - $(date +%s) ))
    [ $limit -gt 180 ] && limit=180
    if [ $limit -lt 1 ]; then
      echo "time budget: RP_PARITY_END passed before this run" > "$work/$name.txt"
      echo "== $name not run: RP_PARITY_END passed"; return 124
    fi
  fi
  # the device under test's own environment (RP_PARITY_DUT_ENV), never the
  # CPU references'
  local dut_env=""
  [ "${name#ref-}" = "$name" ] && dut_env=${RP_PARITY_DUT_ENV:-}
  # shellcheck disable=SC2086
  env $dut_env RP_TEST_FUSED_GATE_UP=$hook RP_ALLOW_UNPROVEN_CUDA=$unproven RP_DISABLE_CUDA_PATHS=$off timeout "$limit" ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device "$device" \
    $a --progress none --timeout 90 --log "$work/$name.jsonl" --save "$work/$name" "$@" \
    > "$work/$name.txt" 2>&1
  local rc=$?
  [ $rc = 124 ] && echo "parity.sh: killed after $limit s, the run's time limit (180 s, or RP_PARITY_END)" >> "$work/$name.txt"
  [ $rc = 0 ] || { echo "== $name failed (exit $rc):"; tail -n 15 "$work/$name.txt"; }
  return $rc
}
# bits A B: the saved files and logs of runs A and B identical (B's log from step FIRST on)
bits() {
  local f; f=$(saved_file "$case")
  cmp -s "$work/$1/$f" "$work/$2/$f" || { echo "$2/$f differs from $1/$f"; return 1; }
  $cmpy same "$work/$1.jsonl" "$work/$2.jsonl" "${3:-1}" > "$work/$2.same" ||
    { echo "$2's log: $(cat "$work/$2.same")"; return 1; }
}

# The CPU references: a run depends on its fixture's options alone (the
# device's options and the unproven paths are the device under test's), and
# half the cases share golden/qwen3's, so one run per distinct fixture,
# made by a worker in the background while the device runs the cases: the
# references are off the window's critical path (the GPU machine has cores
# to spare) and none is made twice.
ref_key() { fixture "$1" | md5sum | cut -c1-12; }
cpu_references() {
  local c k
  for c in $cases; do
    [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ] && break
    k=$(ref_key "$c")
    [ -e "$work/ref-$k.rc" ] || [ -e "$work/ref-$k.started" ] && continue
    : > "$work/ref-$k.started"
    ( case=$c; run "ref-$k" cpu 1 > /dev/null ); echo $? > "$work/ref-$k.rc"
  done
}
cpu_references & refs_pid=$!
trap 'kill $refs_pid 2>/dev/null' EXIT
# cpu_ref CASE: the case's reference as $work/CASE-cpu.{jsonl,txt}, waiting
# for the worker (or made here if the worker is gone without it)
cpu_ref() {
  local k; k=$(ref_key "$1")
  while [ ! -e "$work/ref-$k.rc" ] && kill -0 "$refs_pid" 2>/dev/null; do sleep 0.2; done
  if [ ! -e "$work/ref-$k.rc" ]; then
    run "ref-$k" cpu 1 > /dev/null; echo $? > "$work/ref-$k.rc"
  fi
  cp "$work/ref-$k.txt" "$work/$1-cpu.txt" 2>/dev/null
  [ "$(cat "$work/ref-$k.rc")" = 0 ] && cp "$work/ref-$k.jsonl" "$work/$1-cpu.jsonl"
}

# after_qwen3: the qwen3 case's runs ended, where that case has started
# (checkpoint, fused-xent and speculative compare their model with its dut1's)
after_qwen3() { while [ -e "$work/started-qwen3" ] && [ ! -e "$work/ended-qwen3" ]; do sleep 0.5; done; }
# one_case CASE: the case's runs, checks and result line (the loop's one
# pass: a `continue` ends the case)
# shellcheck disable=SC2066
one_case() { for case in "$1"; do
  if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
    result "$case" skipped - "time budget: not started"; continue
  fi
  t0=$(date +%s)
  echo "== parity: $case (device under test: $dev)"
  c=$case
  if ! cpu_ref "$c"; then result "$c" FAILED - "CPU reference run failed ($c-cpu.txt)"; continue; fi
  case $c in
    nodes)
      run "$c-dut1" "$dev" 2 --pipelines 2 || { result "$c" FAILED - "$dev, 2 ranks, --pipelines 2 failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --ranks-per-node 1 || { result "$c" FAILED - "$dev, 2 nodes of 1 rank failed ($c-dut2.txt)"; continue; }
      two="2 nodes x 1 rank = 1 node x 2 pipelines" ;;
    kept)
      run "$c-dut1" "$dev" 1 --plan "fwd=0-1;bwd=2-3,0-1" --recompute none || { result "$c" FAILED - "$dev, --recompute none failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --plan "fwd=0-1;bwd=2-3,0-1" --recompute stage --weight-buffers 1 || { result "$c" FAILED - "$dev, 2 ranks --recompute stage --weight-buffers 1 failed ($c-dut2.txt)"; continue; }
      # where the device keeps them: the GPU's pool (the CPU: the host store)
      where="kept by 1 block instead of recomputed, in the executors' own memory"
      [ "$dev" = cpu ] && where="kept by 1 block instead of recomputed"
      grep -q "$where" "$work/$c-dut1.txt" ||
        { result "$c" FAILED - "$dev, --recompute none: its host-memory line does not say block 1 is kept ($where; $c-dut1.txt)"; continue; }
      two="kept activations (the GPU's pool) = recomputed on 2 ranks with one weight buffer" ;;
    chunks|moe-chunks)
      run "$c-dut1" "$dev" 1 --token-tile 8 --mlp-chunk-tokens 8 || { result "$c" FAILED - "$dev, MLP chunks of one tile failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --token-tile 8 --mlp-chunk-tokens 1048576 || { result "$c" FAILED - "$dev, 2 ranks, one chunk failed ($c-dut2.txt)"; continue; }
      two="MLP chunks of one 8-token tile on 1 rank = one chunk on 2 ranks" ;;
    bf16-mlp)
      run "$c-dut1" "$dev" 1 --token-tile 8 --mlp-chunk-tokens 8 || { result "$c" FAILED - "$dev, bf16 MLP in chunks of one tile failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --token-tile 8 --mlp-chunk-tokens 1048576 || { result "$c" FAILED - "$dev, 2 ranks, bf16 MLP in one chunk failed ($c-dut2.txt)"; continue; }
      taken=""
      if [ "$dev" != cpu ]; then # the CPU computes g and u in fp32 either way
        fp32_mlp=1 run "$c-fp32" "$dev" 2 --token-tile 8 --mlp-chunk-tokens 1048576 || { result "$c" FAILED - "$dev, 2 ranks without the switch failed ($c-fp32.txt)"; continue; }
        ! cmp -s "$work/$c-fp32/model.safetensors" "$work/$c-dut2/model.safetensors" ||
          { result "$c" FAILED - "$dev: the model with RP_ALLOW_UNPROVEN_CUDA=bf16-mlp is the one without it, bit for bit: the path was not taken ($c-dut2.txt)"; continue; }
        taken="; another model than without the switch (the path taken)"
      fi
      two="bf16 g, u, dm: MLP chunks of one 8-token tile on 1 rank = one chunk on 2 ranks" ;;
    fused-gate-up)
      run "$c-dut1" "$dev" 1 --token-tile 8 --mlp-chunk-tokens 8 || { result "$c" FAILED - "$dev, fused gate/up in chunks of one tile failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --token-tile 8 --mlp-chunk-tokens 1048576 || { result "$c" FAILED - "$dev, 2 ranks, fused gate/up in one chunk failed ($c-dut2.txt)"; continue; }
      two_gemms=1 run "$c-two" "$dev" 2 --token-tile 8 --mlp-chunk-tokens 1048576 || { result "$c" FAILED - "$dev, 2 ranks without the switch failed ($c-two.txt)"; continue; }
      ! cmp -s "$work/$c-two/model.safetensors" "$work/$c-dut2/model.safetensors" ||
        { result "$c" FAILED - "$dev: the model with the fused gate/up GEMM is the one without it, bit for bit: the path was not taken ($c-dut2.txt)"; continue; }
      taken="; another model than without the switch (the path taken)"
      two="gate/up as one GEMM: MLP chunks of one 8-token tile on 1 rank = one chunk on 2 ranks" ;;
    speculative)
      run "$c-dut1" "$dev" 1 --speculative-update on || { result "$c" FAILED - "$dev, 1 rank, --speculative-update on failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 --speculative-update on || { result "$c" FAILED - "$dev, 2 ranks, --speculative-update on failed ($c-dut2.txt)"; continue; }
      # both outcomes of the norm, or the case proved only one of them
      hm=$(sed -n 's/.*speculative update: \([0-9]*\) hits, \([0-9]*\) misses.*/\1 \2/p' "$work/$c-dut1.txt" | head -n 1)
      case "$hm" in
        0\ *|*\ 0|"") result "$c" FAILED - "the run did not both keep and redo speculative updates (hits, misses: ${hm:-none said}; $c-dut1.txt)"; continue ;;
      esac
      two="speculative (${hm% *} hits, ${hm#* } misses) on 2 ranks = on 1" ;;
    copies)
      run "$c-dut1" "$dev" 1 --chunk-mib 0.01 || { result "$c" FAILED - "$dev, asynchronous copies failed ($c-dut1.txt)"; continue; }
      sync_copies=1 run "$c-dut2" "$dev" 2 --chunk-mib 0.01 || { result "$c" FAILED - "$dev, 2 ranks, synchronous copies failed ($c-dut2.txt)"; continue; }
      # one weight buffer: each job's uploads overwrite what the job before
      # read, so an upload not ordered after those kernels shows here
      run "$c-wb1" "$dev" 1 --chunk-mib 0.01 --weight-buffers 1 || { result "$c" FAILED - "$dev, asynchronous copies with --weight-buffers 1 failed ($c-wb1.txt)"; continue; }
      why=$(bits "$c-dut1" "$c-wb1") || { result "$c" FAILED - "--weight-buffers 1: $why"; continue; }
      if [ "$dev" != cpu ]; then # the CPU has no choice, and no line
        grep -q "copies: asynchronous.*ordered with the layers by events" "$work/$c-dut1.txt" ||
          { result "$c" FAILED - "$dev: dut1's log does not say 'copies: asynchronous, ..., ordered with the layers by events' ($c-dut1.txt)"; continue; }
        grep -q "copies: synchronous" "$work/$c-dut2.txt" ||
          { result "$c" FAILED - "$dev: dut2's log does not say 'copies: synchronous' ($c-dut2.txt)"; continue; }
      fi
      two="asynchronous copies in 10 KiB chunks on 1 rank (2 weight buffers and 1) = synchronous on 2" ;;
    checkpoint)
      run "$c-dut1" "$dev" 1 --checkpoint-dir "$work/$c-ck" --checkpoint-every 3 --keep-checkpoints 0 ||
        { result "$c" FAILED - "$dev, checkpointing run failed ($c-dut1.txt)"; continue; }
      [ -f "$work/$c-ck/step-00000003/trainer_state.json" ] ||
        { result "$c" FAILED - "no checkpoint $c-ck/step-00000003"; continue; }
      run "$c-dut2" "$dev" 2 --resume "$work/$c-ck/step-00000003" ||
        { result "$c" FAILED - "$dev, resume on 2 ranks failed ($c-dut2.txt)"; continue; }
      two="resumed at 3 on 2 ranks = straight on 1" ;;
    *)
      run "$c-dut1" "$dev" 1 || { result "$c" FAILED - "$dev, 1 rank failed ($c-dut1.txt)"; continue; }
      run "$c-dut2" "$dev" 2 || { result "$c" FAILED - "$dev, 2 ranks failed ($c-dut2.txt)"; continue; }
      two="2 ranks = 1 rank" ;;
  esac
  close=$($cmpy close "$work/$c-cpu.jsonl" "$work/$c-dut1.jsonl" "$rtol" 2>&1); crc=$?
  echo "$close"
  worst=$(echo "$close" | sed -n 's/^worst \([^ ]*\) .*/\1/p' | tail -1)
  first=1; [ "$c" = checkpoint ] && first=4
  why=$(bits "$c-dut1" "$c-dut2" "$first"); brc=$?
  extra=""
  case $c in bf16-mlp|fused-gate-up) extra=$taken ;; esac
  case $c in checkpoint|fused-xent|speculative) after_qwen3 ;; esac
  if [ "$c" = checkpoint ] && [ -f "$work/qwen3-dut1/model.safetensors" ]; then
    # checkpoints end segments: the model must still be the plain run's
    cmp -s "$work/qwen3-dut1/model.safetensors" "$work/$c-dut1/model.safetensors" &&
      extra="; = qwen3's straight run" || { brc=1; why="$why checkpointing changed the model (vs qwen3-dut1)"; }
  fi
  if [ "$c" = gemm-lt ] && [ "$dev" != cpu ]; then
    # the path was taken: the run's last lines count cuBLASLt's linear forwards
    n=$(sed -n 's/.*linear forwards through cuBLASLt (gemm-lt): \([0-9]*\).*/\1/p' "$work/$c-dut1.txt" | head -n 1)
    [ "${n:-0}" -gt 0 ] && extra="; $n linear forwards through cuBLASLt" ||
      { brc=1; why="$why no linear forward went through cuBLASLt (${n:-no count said}; $c-dut1.txt)"; }
  fi
  if [ "$c" = cudnn-documents ] && [ "$dev" != cpu ]; then
    # the path was taken: the run's last lines count the calls cuDNN ran
    n=$(sed -n 's/.*over documents through cuDNN (cudnn-documents): \([0-9]*\) of \([0-9]*\).*/\1 of \2/p' "$work/$c-dut1.txt" | head -n 1)
    # how its graphs were written, and why cuDNN refused the first call it
    # did not run, where one was
    ways=$(sed -n 's/.*(cudnn-documents): [0-9]* of [0-9]*, \(forward graph with [^;]*\).*/\1/p' "$work/$c-dut1.txt" | head -n 1)
    no=$(sed -n 's/.*(cudnn-documents): .*; the first it refused: //p' "$work/$c-dut1.txt" | head -n 1)
    [ "${n%% *}" -gt 0 ] 2>/dev/null && extra="; $n document attention calls through cuDNN${ways:+ ($ways)}${no:+; the first refused: $no}" ||
      { brc=1; why="$why no document attention call went through cuDNN (${n:-no count said}${no:+; the first refused: $no}; $c-dut1.txt)"; }
  fi
  if [ "$c" = defaults ] && [ "$dev" != cpu ]; then
    # which attention the defaults took, as the run logged it
    n=$(grep -o 'attention: [a-z]* [^(;"]*' "$work/$c-dut1.txt" | head -n 1)
    extra="; ${n:-no attention line}"
  fi
  if [ "$c" = fused-xent ] && [ -f "$work/qwen3-dut1/model.safetensors" ]; then
    # the fused store writes what the convert wrote: the same run, bit for bit
    cmp -s "$work/qwen3-dut1/model.safetensors" "$work/$c-dut1/model.safetensors" &&
      extra="; = qwen3's run with the gradient converted" || { brc=1; why="$why the fused gradient store changed the model (vs qwen3-dut1)"; }
  fi
  if [ "$c" = speculative ] && [ -f "$work/qwen3-dut1/model.safetensors" ]; then
    # the update kept or redone is the plain update, bit for bit
    cmp -s "$work/qwen3-dut1/model.safetensors" "$work/$c-dut1/model.safetensors" &&
      extra="; = qwen3's run without it" || { brc=1; why="$why the speculative update changed the model (vs qwen3-dut1)"; }
  fi
  dt=$(( $(date +%s) - t0 ))
  if [ $crc = 0 ] && [ $brc = 0 ]; then
    result "$c" ok "${worst:--}" "losses within $rtol of the CPU's; $two, bit for bit$extra (${dt} s)"
  else
    msg=""
    [ $crc = 0 ] || msg="beyond $rtol of the CPU's: $(echo "$close" | grep -v '^worst' | head -n 2 | tr '\n' ' ')"
    [ $brc = 0 ] || msg="$msg${msg:+; }not bit-identical: $why"
    result "$c" FAILED "${worst:--}" "$msg (${dt} s)"
  fi
done; }

# The cases run RP_PARITY_JOBS at a time (default 3 on a GPU: each case is a
# few short runs whose start-up, not the GPU, takes most of their time; 1
# with the CPU standing in), each printing into its own file, printed in
# the cases' order at the end; a case that compares its model with the
# qwen3 case's waits for that one (after_qwen3). Bits never depend on what
# else runs on the GPU.
jobs_max=${RP_PARITY_JOBS:-3}; [ "$dev" = cpu ] && jobs_max=${RP_PARITY_JOBS:-1}
: > "$work/results.txt"
rm -f "$work"/started-* "$work"/ended-*
pids=()
for c in $cases; do
  while :; do
    live=0
    for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && live=$((live + 1)); done
    [ "$live" -lt "$jobs_max" ] && break
    sleep 0.3
  done
  : > "$work/started-$c"
  ( one_case "$c" > "$work/case-$c.out" 2>&1; : > "$work/ended-$c" ) &
  pids+=($!)
done
wait "${pids[@]}"
for c in $cases; do cat "$work/case-$c.out"; done
grep -q "$(printf '\tFAILED\t')" "$work/results.txt" && status=1
# the saved models and checkpoints are no evidence once compared, and would
# swell the logs the device call returns (16 MiB a file): logs stay
[ -n "${RP_PARITY_KEEP:-}" ] || find "$work" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
exit $status
