#!/bin/sh
# Proves: --activation-dtype bf16 (every layer's output rounded to bf16
# where it is made, the host store holding the block boundaries in bf16)
# trains bit-identically on 1, 2, 3 and 4 ranks, under forced plans that cut
# the model at different layers, with stage-grain and layer-grain recompute
# and with every block kept (--recompute none), for a mixture of experts
# and for LoRA too: the same losses, gradient norms and saved model; it
# really rounds: the model differs from the fp32
# run's, and step 1's loss is within 2^-7 (relative) of fp32's but not
# equal; every activation the forward saves or reads back travels in half
# the bytes of the fp32 run's (trace), input gradients in fp32 as before;
# the CPU default is fp32 (the same model and losses as --activation-dtype
# fp32); a checkpoint of a bf16 run resumes to the bits of the run that did
# not stop, and refuses to resume with fp32, naming the field; a bad value
# names the option; the evaluation's forward rounds as training's.
# Ranks: 1, 2, 3 and 4 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
data="$build/examples/data/gnu-licenses.npy"
cfg="$src/examples/tiny-config.json" # four blocks: layers 0 (embedding) to 5 (head)
run() { # name ranks activation-dtype [more options]
  name=$1; np_=$2; ad=$3; shift 3
  ${MPIRUN:-mpirun} $flags -np "$np_" "$bin" train --init-config "$cfg" --data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 2 --steps 3 --seed 5 --lr 0.002 \
    --device cpu --threads 1 --progress none --timeout 60 ${ad:+--activation-dtype "$ad"} \
    --log "$tmp/$name.jsonl" --save "$tmp/$name" "$@" > "$tmp/$name.txt" 2>&1 ||
    { bad "$name: train failed"; tail -n 5 "$tmp/$name.txt"; }
}
same() { # the saved model and the losses and norms of every step
  cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" &&
    [ "$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/$1.jsonl")" = \
      "$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/$2.jsonl")" ]
}

# bf16 on 1 to 4 ranks and under plans that cut at other layers
run b1 1 bf16
run b2 2 bf16 --trace "$tmp/b2.trace.json" --plan "fwd=0-2;bwd=3-5,0-2" --recompute stage
run b3 3 bf16 --plan "fwd=0,1-4;bwd=5,2-4,0-1" --recompute stage
run b4 4 bf16 --plan "fwd=0-1,2-3;bwd=4-5,3,2,1,0" --recompute stage
run b2l 2 bf16 --plan "fwd=0,1-2,3-4;bwd=5,4,3,1-2,0" --recompute layer
run b3n 3 bf16 --plan "fwd=0-1,2-4;bwd=5,3-4,1-2,0" --recompute none
for r in b2 b3 b4 b2l b3n; do
  same b1 $r && ok || bad "bf16 activations: run $r differs from the 1-rank run"
done

# a mixture of experts (its load-balancing loss on), and LoRA adapters with
# dropout over a bf16-computed base: the same bits on 1 and 3 ranks
moe="$src/mpi-tests/fixtures/golden-moe/moe-mb"
for np_ in 1 3; do
  ${MPIRUN:-mpirun} $flags -np $np_ "$bin" train --init-config "$moe/model/config.json" \
    --data "$moe/data.npy" --seq-len 8 --batch-size 4 --microbatches 2 --steps 3 --device cpu \
    --threads 1 --progress none --activation-dtype bf16 --router-aux-coef 0.01 \
    --log "$tmp/moe-$np_.jsonl" --save "$tmp/moe-$np_" > "$tmp/moe-$np_.txt" 2>&1 ||
    { bad "moe on $np_ ranks failed"; tail -n 5 "$tmp/moe-$np_.txt"; }
  run lora-$np_ $np_ bf16 --lora-rank 4 --lora-dropout 0.1 --dtype bf16
done
same moe-1 moe-3 && ok || bad "bf16 activations, a mixture of experts: 1 and 3 ranks differ"
cmp -s "$tmp/lora-1/adapter_model.safetensors" "$tmp/lora-3/adapter_model.safetensors" &&
  [ "$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/lora-1.jsonl")" = \
    "$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/lora-3.jsonl")" ] && ok ||
  bad "bf16 activations, LoRA: 1 and 3 ranks differ"

# fp32 is the CPU default; bf16 rounds
run f2 2 fp32 --trace "$tmp/f2.trace.json" --plan "fwd=0-2;bwd=3-5,0-2" --recompute stage
run d2 2 "" --plan "fwd=0-2;bwd=3-5,0-2" --recompute stage
same d2 f2 && ok || bad "the CPU default is not --activation-dtype fp32"
same b2 f2 && bad "bf16 activations gave the fp32 run" || ok
field() { sed -n "1s/.*\"$2\":\([^,}]*\).*/\1/p" "$tmp/$1.jsonl"; }
awk -v b="$(field b2 loss)" -v f="$(field f2 loss)" 'BEGIN {
  d = b / f - 1; if (d < 0) d = -d; exit !(d > 0 && d <= 2 ^ -7) }' && ok ||
  bad "step 1 loss $(field b2 loss) vs fp32 $(field f2 loss)"

# the evaluation's forward rounds as training's: with --lr 0 the validation
# loss of the batch trained on is step 1's loss
run e2 2 bf16 --steps 1 --lr 0 --eval-data "$data" --eval-samples 4
awk -v l="$(field e2 loss)" -v e="$(sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$tmp/e2.jsonl")" \
  'BEGIN { exit !(sprintf("%.9g", e) == l) }' && ok ||
  bad "eval loss $(grep eval_loss "$tmp/e2.jsonl") is not step 1's loss $(field e2 loss)"

# what travels between the executors and the host store: activations in
# half the bytes, input gradients as before
bytes() { grep -oE "\"name\": *\"($2) [0-9]+ B\"" "$1" | tr -dc '0-9\n' | sort -n | uniq; }
for tags in "output|checkpoint|input" "input-grad|output-grad"; do
  bytes "$tmp/f2.trace.json" "$tags" > "$tmp/f.bytes"
  bytes "$tmp/b2.trace.json" "$tags" > "$tmp/b.bytes"
  case $tags in input-grad*) cp "$tmp/f.bytes" "$tmp/want.bytes" ;;
    *) awk '{ print $1 / 2 }' "$tmp/f.bytes" > "$tmp/want.bytes" ;; esac
  [ -s "$tmp/f.bytes" ] && cmp -s "$tmp/want.bytes" "$tmp/b.bytes" && ok ||
    bad "$tags transfers: fp32 $(tr '\n' ' ' < "$tmp/f.bytes"), bf16 $(tr '\n' ' ' < "$tmp/b.bytes")"
done

# a checkpoint resumes to the bits of the run that did not stop, on
# another rank count, and only with the dtype it was written with
run c2 2 bf16 --checkpoint-dir "$tmp/ck" --checkpoint-every 1
grep -q '"activation_dtype": *"bf16"' "$tmp/ck/step-00000002/trainer_state.json" && ok ||
  bad "trainer_state.json lacks activation_dtype"
run r3 3 bf16 --resume "$tmp/ck/step-00000002"
same b1 c2 && ok || bad "checkpointing changed the bf16 run"
cmp -s "$tmp/b1/model.safetensors" "$tmp/r3/model.safetensors" &&
  [ "$(tail -n 1 "$tmp/r3.jsonl" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*')" = \
    "$(tail -n 1 "$tmp/b1.jsonl" | grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*')" ] && ok ||
  bad "the bf16 run resumed from step 2 on 3 ranks differs from the one that did not stop"
if ${MPIRUN:-mpirun} $flags -np 1 "$bin" train --init-config "$cfg" --data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 2 --steps 3 --seed 5 --lr 0.002 --device cpu \
    --progress none --resume "$tmp/ck/step-00000002" > "$tmp/rf.txt" 2>&1; then
  bad "resumed a bf16-activation checkpoint with the fp32 default"
else grep -q 'options.activation_dtype is "bf16", this run has "fp32"' "$tmp/rf.txt" && ok ||
  { bad "resume message"; cat "$tmp/rf.txt"; }; fi

# a bad value
if "$bin" train --init-config "$cfg" --data "$data" --activation-dtype fp16 > "$tmp/bad.txt" 2>&1; then
  bad "--activation-dtype fp16 accepted"
else grep -q "activation-dtype: 'fp16' is not one of fp32, bf16" "$tmp/bad.txt" && ok ||
  { bad "--activation-dtype fp16 message"; cat "$tmp/bad.txt"; }; fi
finish
