#!/bin/sh
# Proves (CPU executors): the dense MLP's chunk (--mlp-chunk-tokens, whole
# tiles of --token-tile tokens: model/token_tiles.h) never changes a bit:
# with tiles of 8 tokens, chunks of 1 tile, 2, 3 (24 tokens) and all give
# the same per-step losses and gradient norms and the same saved model, byte
# for byte, on 1-4 ranks (the dense Qwen3 golden model, tied, with its loss
# mask); likewise with tiles of 12 that cut the 16-token samples and leave a
# short last tile (Llama, untied, with biases and llama3 RoPE), and with
# LoRA on all seven projections with dropout (the MLP adapters' masks drawn
# for tiles that start inside a sample); those tiles compute what one tile
# of the whole microbatch does, within 1e-4 (golden_compare: every step's
# loss and grad norm, every adapter tensor; masks drawn for the wrong rows
# are off by O(1)). The option reaches the executors:
# a chunk of one tile takes fewer executor bytes than one of all. Bad values
# are refused naming the option, and plan refuses them for a layer-times
# file.
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
g="$src/mpi-tests/fixtures/golden"
. "$(dirname "$0")/bits_lib.sh"
bytes() { # OUT: the executor bytes train's start-up line reports
  sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/$1.txt" | head -n 1
}
q="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy $(cat "$g/qwen3/args.txt")"
l="--model $g/llama/model --data $g/llama/data.npy $(cat "$g/llama/args.txt")"
# 2 microbatches of 2 x 16 tokens: 4 tiles of 8
run 1 q-all-1 $q --token-tile 8 --mlp-chunk-tokens 1048576
run 1 q-one-1 $q --token-tile 8 --mlp-chunk-tokens 8
run 2 q-two-2 $q --token-tile 8 --mlp-chunk-tokens 16
run 3 q-three-3 $q --token-tile 8 --mlp-chunk-tokens 31
run 4 q-one-4 $q --token-tile 8 --mlp-chunk-tokens 1
same q-all-1 q-one-1 "qwen3, 1 rank: chunks of 1 tile against all"
same q-all-1 q-two-2 "qwen3, 2 ranks: chunks of 2 tiles"
same q-all-1 q-three-3 "qwen3, 3 ranks: 31 tokens, chunks of 3 tiles"
same q-all-1 q-one-4 "qwen3, 4 ranks: 1 token, chunks of 1 tile"
one=$(bytes q-one-1) all=$(bytes q-all-1)
[ -n "$one" ] && [ -n "$all" ] && [ "$one" -lt "$all" ] && ok ||
  bad "a chunk of one tile does not take fewer executor bytes ($one) than all ($all)"
# tiles of 12: 12, 12 and 8 tokens of a 32-token microbatch
run 2 l-all $l --token-tile 12 --mlp-chunk-tokens 1048576
run 2 l-one $l --token-tile 12 --mlp-chunk-tokens 12
same l-all l-one "llama, tiles of 12: chunks of 1 tile against all"
lora="--lora-rank 2 --lora-dropout 0.1 --token-tile 12"
run 2 lora-all $q $lora --mlp-chunk-tokens 1048576
run 3 lora-one $q $lora --mlp-chunk-tokens 12
run 1 lora-two $q $lora --mlp-chunk-tokens 24
same lora-all lora-one "LoRA with dropout, tiles of 12: chunks of 1 tile against all"
same lora-all lora-two "LoRA with dropout, tiles of 12: chunks of 2 tiles on 1 rank"
run 2 lora-whole $q --lora-rank 2 --lora-dropout 0.1
res=$("$build/mpi-tests/golden_compare" "$tmp/lora-whole.jsonl" "$tmp/lora-all.jsonl" \
      "$tmp/lora-whole/adapter_model.safetensors" "$tmp/lora-all/adapter_model.safetensors" 1e-4)
echo "$res" | grep -q '^RP-CHECK: passed=[1-9][0-9]* failed=0$' && ok ||
  { bad "LoRA with dropout: tiles of 12 against one tile"; echo "$res"; }
# refused: the option named, a non-zero exit
for bad_value in "--token-tile -1" "--mlp-chunk-tokens -8" "--token-tile x"; do
  # shellcheck disable=SC2086
  if "$bin" train --device cpu $q $bad_value > "$tmp/refused.txt" 2>&1; then
    bad "$bad_value: accepted"
  else
    grep -q -- "${bad_value%% *}" "$tmp/refused.txt" && ok ||
      { bad "$bad_value: the message does not name the option"; cat "$tmp/refused.txt"; }
  fi
done
printf 'x' > "$tmp/layers.txt"
if "$bin" plan --layers "$tmp/layers.txt" --mlp-chunk-tokens 8 > "$tmp/plan.txt" 2>&1; then
  bad "plan --layers took --mlp-chunk-tokens"
else
  grep -q -- "--mlp-chunk-tokens applies to a config" "$tmp/plan.txt" && ok ||
    { bad "plan --layers --mlp-chunk-tokens: its message"; cat "$tmp/plan.txt"; }
fi
finish
