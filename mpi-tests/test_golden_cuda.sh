#!/bin/sh
# Proves, on a usable GPU (skips, exit 77, without one): `roundpipe train
# --device cuda` (bf16, the dtype that follows the device) reproduces the
# PyTorch/transformers fixtures of test_golden.sh within 2e-2 relative in
# every step's loss (qwen3, llama); 1, 2 and 4 ranks sharing the GPU save
# identical models; and --pipelines 2 on 2 and 4 ranks gives identical models.
# bench/gpu/run.sh runs this test in its parity phase.
set -u
. "$(dirname "$0")/testlib.sh"
if ! cuda_usable; then echo "SKIP: $(cat "$tmp/cuda.txt")"; exit 77; fi
cat "$tmp/cuda.txt"
fix="$src/mpi-tests/fixtures/golden"
cmp="$build/mpi-tests/golden_compare"
export OMP_NUM_THREADS=1

# train CASE NP OUT [options...]: a CUDA run of the fixture's arguments
# without their --dtype fp32 (CUDA computes in bf16)
train() {
  c=$1; np=$2; out=$3; shift 3
  d="$fix/$c"
  mask=""; [ -f "$d/mask.npy" ] && mask="--loss-mask $d/mask.npy"
  # shellcheck disable=SC2046
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device cuda --model "$d/model" \
    --data "$d/data.npy" $mask $(sed 's/--dtype fp32//' "$d/args.txt") --progress none \
    --timeout 120 --log "$out.jsonl" --save "$out" "$@" > "$out.txt" 2>&1 ||
    { bad "$c on $np rank(s) failed:"; tail -n 20 "$out.txt"; return 1; }
  ok
}

for c in qwen3 llama; do
  train $c 1 "$tmp/$c-1" || continue
  res=$("$cmp" --loss-only "$fix/$c/expected.jsonl" "$tmp/$c-1.jsonl" 2e-2)
  echo "$res" | grep -v 'RP-CHECK' | sed "s/^/$c: /"
  echo "$res" | grep -q '^RP-CHECK: .*failed=0$' && ok || bad "$c: losses beyond 2e-2 of PyTorch"
  for np in 2 4; do
    train $c $np "$tmp/$c-$np" || continue
    cmp -s "$tmp/$c-1/model.safetensors" "$tmp/$c-$np/model.safetensors" && ok ||
      bad "$c: the model of $np ranks differs from 1 rank's"
  done
done
# two pipelines (qwen3 has M = 2)
if train qwen3 2 "$tmp/p2-2" --pipelines 2 && train qwen3 4 "$tmp/p2-4" --pipelines 2; then
  cmp -s "$tmp/p2-2/model.safetensors" "$tmp/p2-4/model.safetensors" && ok ||
    bad "qwen3 --pipelines 2: 2 and 4 ranks differ"
fi
finish
