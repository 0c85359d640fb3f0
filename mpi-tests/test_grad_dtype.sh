#!/bin/sh
# Proves: --grad-dtype bf16 (gradients rounded to bf16 on the executor,
# downloaded, widened on the host) trains bit-identically on 1, 2 and 3
# ranks (one pipeline) and on 1 and 2 ranks with two pipelines; it really
# rounds: the model differs from the fp32 run's, step 1's loss is the same
# (no update yet) and its gradient norm is within the bf16 rounding of the
# fp32 one (relative 2^-9 per element, so at most 2^-9 for the norm) but not
# equal; every gradient transfer in the trace carries half the bytes of the
# fp32 run's; the executors allocate 2 bytes per gradient element more
# (the rounded copy); a bad value names the option; and a checkpoint of one
# grad dtype refuses to resume with the other, naming the field.
# Ranks: 1, 2 and 3 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
data="$src/mpi-tests/fixtures/golden/llama/data.npy"
cfg="$src/mpi-tests/fixtures/golden/llama/model/config.json"
run() { # name ranks pipelines grad-dtype [more options]
  name=$1; np_=$2; pl=$3; gd=$4; shift 4
  ${MPIRUN:-mpirun} $flags -np "$np_" "$bin" train --init-config "$cfg" --data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 4 --pipelines "$pl" --steps 3 --seed 3 \
    --device cpu --threads 1 --progress none --grad-dtype "$gd" --log "$tmp/$name.jsonl" \
    --save "$tmp/$name" "$@" > "$tmp/$name.txt" 2>&1 ||
    { bad "$name: train failed"; cat "$tmp/$name.txt"; }
}
same() { cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; }

run b1 1 1 bf16
run b2 2 1 bf16 --trace "$tmp/b2.trace.json"
run b3 3 1 bf16
run f2 2 1 fp32 --trace "$tmp/f2.trace.json"
run b1p 1 2 bf16
run b2p 2 2 bf16
same b1 b2 && same b1 b3 && ok || bad "bf16 gradients: 1, 2, 3 ranks differ"
same b1p b2p && ok || bad "bf16 gradients, two pipelines: 1 and 2 ranks differ"
same b2 f2 && bad "bf16 gradients gave the fp32 model" || ok

# step 1: same loss, gradient norm within the rounding but not equal
field() { sed -n "1s/.*\"$2\":\([^,}]*\).*/\1/p" "$tmp/$1.jsonl"; }
[ "$(field b2 loss)" = "$(field f2 loss)" ] && ok || bad "step 1 losses differ"
awk -v b="$(field b2 grad_norm)" -v f="$(field f2 grad_norm)" 'BEGIN {
  d = b / f - 1; if (d < 0) d = -d; exit !(d > 0 && d <= 2 ^ -9) }' && ok ||
  bad "step 1 gradient norm $(field b2 grad_norm) vs fp32 $(field f2 grad_norm)"

# the gradient transfers carry half the bytes
bytes() { grep -oE '"name": *"(grads|embedding grad rows|tied-grads) [0-9]+ B"' "$1" |
  tr -dc '0-9\n' | sort -n | uniq; }
bytes "$tmp/f2.trace.json" > "$tmp/f.bytes"
bytes "$tmp/b2.trace.json" > "$tmp/b.bytes"
awk '{ print $1 / 2 }' "$tmp/f.bytes" | sort -n | uniq > "$tmp/half.bytes"
[ -s "$tmp/f.bytes" ] && cmp -s "$tmp/half.bytes" "$tmp/b.bytes" && ok ||
  { bad "gradient transfers: fp32 sizes $(tr '\n' ' ' < "$tmp/f.bytes"), bf16 $(tr '\n' ' ' < "$tmp/b.bytes")"; }

# the executors hold the rounded copy: 2 bytes per gradient element more,
# what roundpipe plan --grad-dtype bf16 counts, to the byte
alloc() { sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/$1.txt" | head -n 1; }
planned() { "$bin" plan --init-config "$cfg" --seq-len 16 --batch-size 4 --microbatches 4 \
  --gpus 2 --plan "fwd=0;bwd=1-3,0" --device cpu --grad-dtype "$1" --json |
  grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9; }
run pf 2 1 fp32 --plan "fwd=0;bwd=1-3,0"
run pb 2 1 bf16 --plan "fwd=0;bwd=1-3,0"
[ -n "$(alloc pb)" ] && [ "$(alloc pb)" -gt "$(alloc pf)" ] && ok ||
  bad "executor buffers: bf16 gradients $(alloc pb), fp32 $(alloc pf)"
[ "$(alloc pb)" = "$(planned bf16)" ] && [ "$(alloc pf)" = "$(planned fp32)" ] && ok ||
  bad "plan counts $(planned fp32) / $(planned bf16) bytes, train allocates $(alloc pf) / $(alloc pb)"

# a bad value
if "$bin" train --init-config "$cfg" --data "$data" --grad-dtype fp16 > "$tmp/bad.txt" 2>&1; then
  bad "--grad-dtype fp16 accepted"
else grep -q "grad-dtype: 'fp16' is not one of fp32, bf16" "$tmp/bad.txt" && ok ||
  { bad "--grad-dtype fp16 message"; cat "$tmp/bad.txt"; }; fi

# a checkpoint's grad dtype is part of the run's semantics
run c1 1 1 fp32 --checkpoint-dir "$tmp/ck" --checkpoint-every 1
grep -q '"grad_dtype": *"fp32"' "$tmp/ck/step-00000003/trainer_state.json" && ok ||
  bad "trainer_state.json lacks grad_dtype"
if ${MPIRUN:-mpirun} $flags -np 1 "$bin" train --init-config "$cfg" --data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 4 --steps 3 --seed 3 --device cpu \
    --progress none --grad-dtype bf16 --resume "$tmp/ck/step-00000002" > "$tmp/r.txt" 2>&1; then
  bad "resumed an fp32-gradient checkpoint with --grad-dtype bf16"
else grep -q 'options.grad_dtype is "fp32", this run has "bf16"' "$tmp/r.txt" && ok ||
  { bad "resume message"; cat "$tmp/r.txt"; }; fi
finish
