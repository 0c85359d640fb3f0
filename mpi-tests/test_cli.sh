#!/bin/sh
# Proves: `roundpipe train` turns bad usage and bad input into one clear
# message and a non-zero exit (2 for usage, 1 for input), names the option,
# file or field at fault (an unknown option close to a known one with "did
# you mean"; a FIFO where a file belongs, at once), and writes nothing when it fails (a --plan that cannot run
# before the host store is built); and the
# happy paths of --init-config, --dtype bf16, --save-dtype bf16, --log and the
# non-terminal progress lines work. --device and --dtype: auto picks CUDA
# when a GPU is usable (mpi-tests/cuda_usable says) and the CPU otherwise,
# the dtype follows the device (bf16 on CUDA, fp32 on the CPU), the start-up
# line names every rank's executor and dtype, --device cuda is refused with
# the runtime's reason without a usable GPU and --dtype fp32 with it always.
# gpt-oss (issue 35): a tiny config trains on CPU executors and is saved with
# its config.json; LoRA on it is refused naming why, with nothing written;
# plan and simulate take gpt-oss-20b's config. --attention's refusals (below).
# The CPU kernels' exp is named once a run, and falls back to expf where
# the C library's expf differs from the vector exp.
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden/qwen3"

# expect CODE PATTERN -- args...: exit code and a stderr line matching PATTERN
expect() {
  code=$1; pat=$2; shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  if [ "$rc" -ne "$code" ]; then bad "exit $rc (want $code) for: $*"; cat "$tmp/err"; return; fi
  if ! grep -q -- "$pat" "$tmp/err" "$tmp/out"; then bad "no '$pat' for: $*"; cat "$tmp/err"; return; fi
  ok
}
base="--model $fix/model --data $fix/data.npy --seq-len 16 --batch-size 4 --steps 1 --progress none"

# a FIFO where an input file belongs is refused at once, never waited on (an
# open of a FIFO without a writer blocks, deaf to SIGTERM): a config, the
# data, a model's weights (the timeout fails a run that waits)
mkfifo "$tmp/fifo.json" "$tmp/fifo.npy"
mkdir "$tmp/fifomodel" && cp "$fix/model/config.json" "$tmp/fifomodel/" && mkfifo "$tmp/fifomodel/model.safetensors"
for c in "--init-config $tmp/fifo.json --data $fix/data.npy|$tmp/fifo.json" \
         "--model $fix/model --data $tmp/fifo.npy|$tmp/fifo.npy" \
         "--model $tmp/fifomodel --data $fix/data.npy|$tmp/fifomodel/model.safetensors"; do
  timeout -s KILL 60 "$bin" train ${c%%|*} --seq-len 16 --batch-size 4 --steps 1 --progress none > "$tmp/fifo.txt" 2>&1
  rc=$?
  [ "$rc" = 1 ] && grep -q "${c##*|}: not a regular file" "$tmp/fifo.txt" && ok || { bad "a FIFO (${c##*|}): exit $rc"; cat "$tmp/fifo.txt"; }
done

expect 2 "usage: roundpipe" --
expect 2 "unknown command 'trian'" -- trian
# --seq-len beyond max_position_embeddings: one warning at start, and the run goes on
sed 's/"max_position_embeddings": 1024/"max_position_embeddings": 16/' "$src/examples/tiny-config.json" > "$tmp/short.json"
short="--init-config $tmp/short.json --data $build/examples/data/gnu-licenses.npy --batch-size 2 --steps 1 --progress none"
expect 0 "warning: --seq-len 32 is beyond the config's max_position_embeddings 16: the model was not trained on positions past 16" -- train $short --seq-len 32
[ "$(grep -c "max_position_embeddings" "$tmp/err")" = 1 ] && ok || { bad "the warning not once"; cat "$tmp/err"; }
"$bin" train $short --seq-len 16 > "$tmp/out" 2>&1 && ! grep -q max_position_embeddings "$tmp/out" && ok ||
  { bad "a warning at --seq-len 16"; cat "$tmp/out"; }
expect 0 "plan: warning: --seq-len 32 is beyond the config's max_position_embeddings 16" -- plan --init-config "$tmp/short.json" --seq-len 32
expect 2 "unknown option '--bogus'\$" -- train $base --bogus 1
# a typo of a known option is named: edit distance, with or without =value
expect 2 "unknown option '--lr-shedule'; did you mean --lr-schedule?" -- train $base --lr-shedule cosine
expect 2 "unknown option '--mirobatches=2'; did you mean --microbatches?" -- train $base --mirobatches=2
expect 2 "unknown option '--microbatchs'; did you mean --microbatches?" -- plan --init-config $fix/model/config.json --gpus 2 --microbatchs 2
expect 2 "exactly one of --model" -- train --data "$fix/data.npy"
expect 2 "\-\-data FILE.npy is required" -- train --model "$fix/model"
expect 2 "\-\-microbatches 3 must be >= 1 and divide --batch-size 4" -- train $base --microbatches 3
expect 2 "\-\-pipelines 3 must be >= 1 and divide the 2 microbatches" -- train $base --microbatches 2 --pipelines 3
expect 2 "\-\-pipelines: 'two'" -- train $base --pipelines two
expect 2 "\-\-lr: 'abc' is not a finite number" -- train $base --lr abc
# numbers start with their digits or sign: no blanks (the C library's
# strtoull would take " -5" as 2^64 - 5)
expect 2 "\-\-seed: ' -5' must not be negative" -- train $base --seed " -5"
expect 2 "\-\-seed: ' 5' is not an unsigned integer" -- train $base --seed " 5"
expect 2 "\-\-steps: ' 3' is not an integer" -- train $base --steps " 3"
expect 2 "\-\-lr: ' 1e-3' is not a finite number" -- train $base --lr " 1e-3"
expect 2 "\-\-lr-schedule" -- train $base --lr-schedule wobbly
expect 2 "\-\-dtype: 'fp8' is not one of fp32, bf16" -- train $base --dtype fp8
expect 2 "\-\-device: 'gpu'" -- train $base --device gpu
expect 2 "^roundpipe plan: --device: 'gpu' is not one of cpu, cuda, auto$" -- plan --init-config "$fix/model/config.json" --device gpu
expect 0 "\-\-init-config FILE" -- train --help
expect 2 "\-\-recompute: 'block'" -- train $base --recompute block
# --attention (issue 38): its words; cudnn on CPU executors refused naming
# why, with nothing saved; own runs. On a usable GPU: with RP_CUDNN_LIBRARY
# naming a missing file, auto falls back to the own kernel and logs why once,
# and cudnn is refused with the same reason.
expect 2 "\-\-attention: 'flash' is not one of auto, cudnn, own" -- train $base --attention flash
expect 1 "\-\-attention cudnn: CPU executors compute attention with the CPU kernel" -- train $base --device cpu --attention cudnn --save "$tmp/dnn-save"
[ ! -e "$tmp/dnn-save" ] && ok || bad "a refused --attention cudnn run wrote $tmp/dnn-save"
expect 0 "weights uploaded" -- train $base --device cpu --attention own
# CPU executors say once which exp their kernels call (the vector exp or
# expf, the same bits); where it is the vector exp, glibc told to use its
# non-FMA expf (which rounds two inputs otherwise) makes the self-check
# fall back, naming the input
[ "$(grep -c "CPU kernels (attention, SwiGLU): exps through" "$tmp/err")" = 1 ] && ok ||
  { bad "no exp line, or not once"; cat "$tmp/err"; }
if grep -q "exps through the vector exp" "$tmp/err"; then
  GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA expect 0 "exps through expf (the vector exp differs from this C library's expf at x = 0x1.04845ep+5)" -- train $base --device cpu
fi
if cuda_usable; then
  RP_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9 "$bin" train $base --device cuda > "$tmp/out" 2>&1 &&
    [ "$(grep -c "attention: own kernel (RP_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9 cannot be loaded" "$tmp/out")" = 1 ] &&
    ok || { bad "auto without cuDNN: no fallback line, or not once"; cat "$tmp/out"; }
  RP_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9 expect 1 "\-\-attention cudnn: RP_CUDNN_LIBRARY=/nonexistent" -- train $base --device cuda --attention cudnn
fi
expect 2 "\-\-optimizer-lag: 2 is outside" -- train $base --optimizer-lag 2
expect 2 "\-\-bind: 'maybe'" -- train $base --bind maybe
expect 2 "\-\-timeout must be > 0" -- train $base --timeout 0
# numeric options are range-checked before any conversion to an integer
expect 2 "\-\-chunk-mib must be between 1 byte" -- train $base --chunk-mib 1e30
expect 2 "\-\-memory-limit-mib must be between 0" -- train $base --memory-limit-mib 1e300
expect 2 "\-\-timeout must be > 0 and at most 31536000" -- train $base --timeout 1e20
expect 0 "uint8/uint16" -- train --help
expect 0 "simulate" -- help

# bad input files: exit 1, the file is named, nothing is written
expect 1 "$tmp/missing.npy" -- train --model "$fix/model" --data "$tmp/missing.npy" --seq-len 16 \
  --save "$tmp/out1" --log "$tmp/log1"
[ ! -e "$tmp/out1" ] && [ ! -e "$tmp/log1" ] && ok || bad "files written after a failed start"
# bytes of the demo corpus exceed the fixture's vocabulary (96): first bad index named
if [ -f "$build/examples/data/gnu-licenses.npy" ]; then
  expect 1 "index" -- train --model "$fix/model" --data "$build/examples/data/gnu-licenses.npy" --seq-len 16
fi
printf '{"model_type": "gpt2", "hidden_size": 8}' > "$tmp/gpt2.json"
expect 1 "gpt2" -- train --init-config "$tmp/gpt2.json" --data "$fix/data.npy" --seq-len 16
printf '{"model_type": "llama", "hidden_size": 8}' > "$tmp/partial.json"
expect 1 "intermediate_size" -- train --init-config "$tmp/partial.json" --data "$fix/data.npy" --seq-len 16
expect 1 "mask" -- train $base --loss-mask "$fix/data.npy"
# a dimension too large for BLAS: the file and the field are named
sed 's/"head_dim": 16/"head_dim": 1000000000/' "$fix/model/config.json" > "$tmp/huge.json"
expect 1 "$tmp/huge.json: model config: field 'num_attention_heads' x 'head_dim' exceeds 2^31-1" -- \
  train --init-config "$tmp/huge.json" --data "$fix/data.npy" --seq-len 16
# a shape whose byte size overflows 64 bits is said so, not as a wrapped count
{ printf '\223NUMPY\001\000\166\000'
  printf "%-117s\n" "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904,), }"
  printf '\000\000\000\000\000\000\000\000'; } > "$tmp/huge.npy"
expect 1 "huge.npy: field 'shape': (4611686018427387904,) of <i8 needs more than 2^64 bytes" -- \
  train --model "$fix/model" --data "$tmp/huge.npy" --seq-len 16
# an output that cannot be opened gives the reason
expect 1 "\-\-log $tmp/no/such.jsonl: directory $tmp/no: No such file or directory" -- \
  train $base --log "$tmp/no/such.jsonl"
expect 1 "no sample" -- train $base --seq-len 100000
if cuda_usable; then
  expect 0 "executors: 1 x cuda:0 (.*GiB), bf16" -- train $base --device cuda
else
  expect 1 "\-\-device cuda: \(no CUDA device\|this roundpipe was built without\|GPU [0-9]* (.*) has compute capability\)" \
    -- train $base --device cuda
fi
expect 2 "\-\-dtype fp32 with \-\-device cuda: the CUDA executor computes in bf16 only" \
  -- train $base --device cuda --dtype fp32
expect 1 "alone needs .* bytes of device memory" -- train $base --memory-limit-mib 0.05
expect 1 "plan" -- train $base --plan "fwd=0-1;bwd=0-3"
expect 1 "plan" -- train $base --plan "fwd=0;bwd=1-2,0"
# a --plan that cannot run is refused before the host store is built: a
# model of some 34 TiB of state (which /dev/shm cannot hold) gets the
# plan's error, not the store's, and a plan that can run gets the store's
sed 's/"hidden_size": 128/"hidden_size": 65536/; s/"intermediate_size": 352/"intermediate_size": 3000000/' \
  "$src/examples/tiny-config.json" > "$tmp/huge.json"
huge="--init-config $tmp/huge.json --data $build/examples/data/gnu-licenses.npy --seq-len 16 --batch-size 2 --steps 1 --progress none --device cpu"
expect 1 "plan 'fwd=0-1;bwd=0-3': plan: tail stage is 0-3, expected 2-5" -- train $huge --plan "fwd=0-1;bwd=0-3"
! grep -q "host store" "$tmp/err" && ok || { bad "a bad --plan: the host store was built first"; cat "$tmp/err"; }
expect 1 "\-\-plan: width 2, but 1 pipeline(s) on 1 executor(s) have width 1" -- train $huge --plan "fwd=0;bwd=1-5,0;width=2"
expect 1 "host store: .* do not fit in" -- train $huge --plan "fwd=0;bwd=1-5,0"

# the default device is auto and the dtype follows it; the start-up line
# gathers every rank's executor (two ranks here)
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $base >"$tmp/out" 2>"$tmp/err"; rc=$?
if cuda_usable; then want="executors: [12] x cuda:0 (.*GiB), bf16"; else want="executors: 2 x cpu (.*GiB, OpenBLAS .* build), fp32"; fi
[ "$rc" -eq 0 ] && grep -q "$want" "$tmp/err" && ok || { bad "default device: no '$want' (exit $rc)"; cat "$tmp/err"; }
expect 0 "executors: 1 x cpu (.*GiB, OpenBLAS .* build), bf16" -- train $base --device cpu --dtype bf16
if cuda_usable; then
  expect 1 "\-\-dtype fp32 with \-\-device auto" -- train $base --dtype fp32
else
  expect 0 "executors: 1 x cpu (.*GiB, OpenBLAS .* build), fp32" -- train $base --device auto --dtype fp32
fi

# happy paths: init from a config, bf16 compute and bf16 save, log lines
expect 0 "done: 3 steps" -- train --init-config "$fix/model/config.json" --data "$fix/data.npy" \
  --seq-len 16 --batch-size 4 --microbatches 2 --steps 3 --dtype bf16 --save-dtype bf16 \
  --save "$tmp/bf" --log "$tmp/bf.jsonl" --progress line
[ "$(wc -l < "$tmp/bf.jsonl")" -eq 3 ] && ok || bad "log has $(wc -l < "$tmp/bf.jsonl") lines, want 3"
grep -q '"step":3,"loss":[0-9.e+-]*,"lr":' "$tmp/bf.jsonl" && ok || bad "log line format"
grep -q '"dtype"\|"torch_dtype"' "$tmp/bf/config.json" && grep -q 'bfloat16' "$tmp/bf/config.json" \
  && ok || bad "saved config does not say bfloat16"
# the safetensors header names BF16 for every tensor
head -c 4096 "$tmp/bf/model.safetensors" | grep -q '"dtype":"BF16"' && \
  ! head -c 4096 "$tmp/bf/model.safetensors" | grep -q '"dtype":"F32"' && ok || bad "saved tensors are not BF16"

# gpt-oss (issue 35): a tiny config trains on CPU executors and saves;
# LoRA on its router or experts is refused before any work (LoRA on its
# attention: test_golden_gpt_oss); plan and simulate take the Hub's
# gpt-oss-20b config
oss="$src/mpi-tests/fixtures/gpt-oss/gpt-oss-20b-config.json"
tiny="$src/mpi-tests/fixtures/golden-gpt-oss/oss-m1/model/config.json"
odata="$src/mpi-tests/fixtures/golden-gpt-oss/oss-m1/data.npy"
expect 0 "done: 2 steps" -- train --init-config "$tiny" --device cpu \
  --data "$odata" --seq-len 16 --batch-size 2 --steps 2 --save "$tmp/oss-save"
[ -f "$tmp/oss-save/model.safetensors" ] && grep -q '"model_type": "gpt_oss"' "$tmp/oss-save/config.json" \
  && ok || bad "a gpt-oss run saved no model"
for t in gate_proj q_proj,gate; do
  expect 1 "--lora-targets $t: gpt-oss's router .* target_parameters" -- train \
    --init-config "$tiny" --device cpu --data "$odata" --seq-len 16 --batch-size 2 --steps 1 \
    --lora-rank 2 --lora-targets "$t" --save "$tmp/oss-lora"
  [ ! -e "$tmp/oss-lora" ] && ok || bad "a refused gpt-oss LoRA run wrote $tmp/oss-lora"
done
# gpt-oss's router and experts by PEFT's target_parameters names: taken on
# gpt-oss (saved under target_parameters), refused on another model
pt=q_proj,mlp.experts.gate_up_proj,mlp.experts.down_proj,mlp.router.weight
expect 0 "done: 1 steps" -- train --init-config "$tiny" --device cpu --data "$odata" \
  --seq-len 16 --batch-size 2 --steps 1 --lora-rank 2 --lora-targets "$pt" \
  --save "$tmp/oss-params"
grep -q '"mlp.experts.gate_up_proj"' "$tmp/oss-params/adapter_config.json" 2>/dev/null \
  && ok || bad "a gpt-oss run with $pt saved no target_parameters"
expect 1 "--lora-targets q_proj,mlp.router.weight: .* are gpt-oss's parameters" -- train \
  --init-config "$src/mpi-tests/fixtures/golden/qwen3/model/config.json" --device cpu \
  --data "$odata" --seq-len 16 --batch-size 2 --steps 1 --lora-rank 2 \
  --lora-targets q_proj,mlp.router.weight --save "$tmp/qwen-params"
[ ! -e "$tmp/qwen-params" ] && ok || bad "a refused LoRA run wrote $tmp/qwen-params"
expect 1 "--lora-targets: gpt-oss's router" -- plan --init-config "$oss" --gpus 8 \
  --device cuda --device-memory-mib 81920 --seq-len 2048 --batch-size 128 --microbatches 16 \
  --lora-rank 8 --lora-targets down_proj
expect 0 "^verdict: fits" -- plan --init-config "$oss" --gpus 8 --device cuda \
  --device-memory-mib 81920 --seq-len 2048 --batch-size 128 --microbatches 16
expect 0 "tokens/s" -- simulate --init-config "$oss" --gpus 8 --device cuda \
  --device-memory-mib 81920 --seq-len 2048 --batch-size 128 --microbatches 16

# one error line per failure, from the rank that found it (issue 37): a file
# every rank fails to open is named once (by rank 0), and a divergence found
# by rank 0 is not echoed by the ranks it stopped ("rank 0 failed")
# one_error WHAT PATTERN -- args...: 3 ranks fail with one line, rank 0's
one_error() {
  what=$1; pat=$2; shift 3
  # shellcheck disable=SC2086
  ${MPIRUN:-mpirun} $flags -q -np 3 "$bin" train "$@" --device cpu --progress none \
    > "$tmp/one.txt" 2>&1 && { bad "$what: exit 0"; return; }
  if [ "$(grep -c 'error:' "$tmp/one.txt")" = 1 ] &&
     grep -q "^\[roundpipe 0\] error: .*$pat" "$tmp/one.txt"; then ok
  else bad "$what: not one error line, from rank 0"; cat "$tmp/one.txt"; fi
}
one_error "missing data" "no-such.npy: cannot open" -- --model "$fix/model" \
  --data "$tmp/no-such.npy" --seq-len 16 --batch-size 4 --steps 1
one_error "divergence" "training diverged" -- --init-config "$src/examples/tiny-config.json" \
  --data "$build/examples/data/gnu-licenses.npy" --seq-len 32 --batch-size 4 --microbatches 2 \
  --steps 12 --lr 1e3 --grad-clip 0 --threads 1

finish
