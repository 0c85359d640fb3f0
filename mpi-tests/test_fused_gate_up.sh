#!/bin/sh
# Proves (CPU executors with RP_TEST_FUSED_GATE_UP=1, the test hook that
# runs the dense MLP's gate and up projections as one GEMM, as CUDA
# executors do by default (the fused-gate-up path): model/block.c's
# mlp_fused_gate_up):
# - the golden fixtures still match transformers' references within
#   test_golden's 1e-4 (golden_compare: every logged loss, lr and grad
#   norm, every final weight): qwen3 (tied, GQA, a loss mask, clipping) on
#   1 rank, llama (untied, biases, llama3 RoPE) on 2;
# - the path is taken: qwen3 with the hook does not give the bits of qwen3
#   without it (the input gradient of gate and up is one GEMM's sum over
#   2I, not two GEMMs' added);
# - with the hook, 1, 2 and 3 ranks give the same bits (saved model and
#   every step's loss, lr, grad norm and tokens);
# - with the hook, the MLP in chunks of one tile (--token-tile 8
#   --mlp-chunk-tokens 8: g and u in the workspace, made again by the
#   backward) gives the bits of one chunk of every tile (g and u in the
#   saved area, kept from the forward job for the backward job);
# - with the hook, activations kept in the executors' own memory
#   (RP_TEST_KEEP_ON_EXECUTOR=1, --recompute none: the saved [g | u] rows
#   read by the backward job from the pool) give the same bits;
# - LoRA on every projection (golden-lora's qwen3-all) never takes the
#   path: the same bits with the hook as without it;
# - the executors' buffers are the same bytes with the hook as without it.
# Ranks: 1 2 3
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
g="$src/mpi-tests/fixtures/golden"
cmp="$build/mpi-tests/golden_compare"
. "$(dirname "$0")/bits_lib.sh"
bytes() { # OUT: the executor bytes train's start-up line reports
  sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/$1.txt" | head -n 1
}
golden() { # CASE OUT: OUT's log and model within 1e-4 of the fixture's reference
  res=$("$cmp" "$g/$1/expected.jsonl" "$tmp/$2.jsonl" "$g/$1/final/model.safetensors" \
        "$tmp/$2/model.safetensors" 1e-4)
  r=$?
  echo "$res" | grep -v '^RP-CHECK'
  [ $r -eq 0 ] && ok || bad "$2: not within 1e-4 of the $1 reference"
}
differ() { # A B WHAT: the saved models are not the same bytes
  cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" && bad "$3" || ok
}
q="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy $(cat "$g/qwen3/args.txt")"
l="--model $g/llama/model --data $g/llama/data.npy $(cat "$g/llama/args.txt")"
run 1 q-plain $q
export RP_TEST_FUSED_GATE_UP=1
run 1 q-fused-1 $q
golden qwen3 q-fused-1
differ q-plain q-fused-1 "qwen3: the hook changed no bit (the fused path was not taken)"
run 2 q-fused-2 $q
run 3 q-fused-3 $q
same q-fused-1 q-fused-2 "fused, qwen3: 2 ranks against 1"
same q-fused-1 q-fused-3 "fused, qwen3: 3 ranks against 1"
one=$(bytes q-fused-1) plain=$(bytes q-plain)
[ -n "$one" ] && [ "$one" = "$plain" ] && ok ||
  bad "the executors' buffers: $one bytes with the hook, $plain without"
run 2 l-fused $l
golden llama l-fused
run 1 q-tiles-all $q --token-tile 8 --mlp-chunk-tokens 1048576
run 2 q-tiles-one $q --token-tile 8 --mlp-chunk-tokens 8
same q-tiles-all q-tiles-one "fused, qwen3: chunks of one tile against one chunk"
RP_TEST_KEEP_ON_EXECUTOR=1 run 2 q-pool $q --recompute none
grep -q "kept by [1-9] blocks\? instead of recomputed, in the executors' own memory" "$tmp/q-pool.txt" &&
  ok || { bad "q-pool: the executors keep no block"; cat "$tmp/q-pool.txt"; }
same q-fused-1 q-pool "fused, qwen3: kept in the executors' memory against recomputed"
lo="$src/mpi-tests/fixtures/golden-lora/qwen3-all"
lora="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy --lora-init $lo/lora_init $(cat "$lo/args.txt")"
run 2 lora-fused $lora
unset RP_TEST_FUSED_GATE_UP
run 2 lora-plain $lora
same lora-plain lora-fused "LoRA on gate and up: the hook changed bits"
# the hook, or RP_DISABLE_CUDA_PATHS, on one rank only (a variable mpirun
# did not pass to another node): refused on every rank before any work,
# naming them, not a run whose ranks lay out the MLP's buffers apart
# (RP_ALLOW_UNPROVEN_CUDA naming a proven path changes nothing: no
# refusal then)
mixed() { # OUT VAR=VALUE: rank 0 with VAR=VALUE, rank 1 without it
  # shellcheck disable=SC2086
  ${MPIRUN:-mpirun} $flags -np 1 env "$2" "$bin" train --progress none --threads 1 --device cpu \
    --timeout 60 --save "$tmp/$1" $q : -np 1 env -u "${2%%=*}" "$bin" train --progress none \
    --threads 1 --device cpu --timeout 60 --save "$tmp/$1" $q > "$tmp/$1.txt" 2>&1
  r=$?
  [ $r -ne 0 ] && [ ! -e "$tmp/$1" ] &&
    grep -q "RP_ALLOW_UNPROVEN_CUDA, RP_DISABLE_CUDA_PATHS or RP_TEST_FUSED_GATE_UP is not the same on every rank" "$tmp/$1.txt" &&
    ok || { bad "$1: $2 on one rank of two: exit $r, or something written, or no message"; cat "$tmp/$1.txt"; }
}
mixed mixed-hook RP_TEST_FUSED_GATE_UP=1
mixed mixed-switch RP_DISABLE_CUDA_PATHS=fused-gate-up
finish
