#!/bin/sh
# Proves (CPU executors): LoRA checkpoints and evaluation (issue 13).
# - A LoRA checkpoint holds the adapters (PEFT names) and their AdamW state,
#   never the base; trainer_state.json records the LoRA settings and the
#   base (its absolute path and fingerprint, or for a random base its seed).
# - Resuming is exact: adapters and the metrics of the resumed steps equal,
#   bit for bit, those of a run that never stopped (dropout 0.1, so the
#   masks' keys resume too): on 1 rank without --model (the recorded base),
#   on 2 ranks with --model and --recompute layer, a lagged optimizer's
#   pending update, a random base (--init-config), and a run killed
#   (SIGKILL, its whole process tree) twice at random moments and resumed
#   with --resume auto on 2, then 1, then 2 ranks. A mixture-of-experts
#   model's router and per-expert adapters (moe-lora, aux loss on) resume
#   the same way, on 1 and 2 ranks, and its checkpoint holds them only.
# - Refused, naming trainer_state.json and the field: other LoRA settings
#   (r, alpha, dropout, targets, rslora, the dropout seed), no --lora-rank
#   for a LoRA checkpoint, --lora-rank for a full one, another base
#   directory, a base whose weights changed in place (base.hash), a random
#   base's other seed.
# - --eval-data with LoRA evaluates base + adapters without dropout: the
#   same bits on 1 and 2 ranks, evaluating changes nothing, the loss moves
#   as the adapters train, and it equals (within 1e-5) the evaluation of
#   the model --save-merged writes, run as full fine-tuning with --lr 0,
#   and (with Python, torch, transformers and peft) the float64 loss of
#   PeftModel.from_pretrained on the base with the adapter --save writes;
#   on a bf16 base it has the bits of the base's exact fp32 widening.
# Ranks: 1 2
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
q="$src/mpi-tests/fixtures/golden/qwen3"
base="$tmp/base"
cp -r "$q/model" "$base"
run() { # NP OUT [options...]: a run; its output in $tmp/OUT.txt
  np=$1; out=$2; shift 2
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --progress none --threads 1 --device cpu \
    --timeout 60 "$@" > "$tmp/$out.txt" 2>&1
}
data="--data $q/data.npy --loss-mask $q/mask.npy --seq-len 16 --batch-size 4 --microbatches 2
      --lr 3e-3 --grad-clip 1.0 --seed 7"
lora="--lora-rank 4 --lora-alpha 8 --lora-dropout 0.1 --lora-targets q_proj,v_proj,o_proj,down_proj"
same() { # A B what: the same adapter, and B's steps' metrics are A's
  if ! cmp -s "$tmp/$1/adapter_model.safetensors" "$tmp/$2/adapter_model.safetensors"; then
    bad "$3: adapters differ"; return; fi
  lines=$(grep -c '"loss"' "$tmp/$2.jsonl")
  grep '"loss"' "$tmp/$1.jsonl" | tail -n "$lines" | cut -d, -f1-6 > "$tmp/a.cut"
  grep '"loss"' "$tmp/$2.jsonl" | cut -d, -f1-6 > "$tmp/b.cut"
  if [ "$lines" -gt 0 ] && cmp -s "$tmp/a.cut" "$tmp/b.cut"; then ok; else
    bad "$3: metrics of the resumed steps differ"; fi
}

# ---- what a checkpoint holds; exact resumes --------------------------------
# shellcheck disable=SC2086
run 2 ref --model "$base" $data $lora --steps 8 --save "$tmp/ref" --log "$tmp/ref.jsonl" ||
  { bad "reference run"; cat "$tmp/ref.txt"; }
# shellcheck disable=SC2086
run 2 ck --model "$base" $data $lora --steps 8 --save "$tmp/ck" --log "$tmp/ck.jsonl" \
  --checkpoint-dir "$tmp/cks" --checkpoint-every 2 --keep-checkpoints 0 ||
  { bad "checkpointed run"; cat "$tmp/ck.txt"; }
same ref ck "writing checkpoints"
c2="$tmp/cks/step-00000002"
st="$c2/trainer_state.json"
if grep -aq 'layers.1.mlp.down_proj.lora_B.weight' "$c2/model.safetensors" &&
   grep -aq 'lora_A.weight.exp_avg_sq' "$c2/optimizer.safetensors" &&
   ! grep -aq 'embed_tokens\|self_attn.q_proj.weight\|norm.weight' "$c2/model.safetensors"; then ok
else bad "the checkpoint does not hold exactly the adapters"; fi
if tr -d ' \n' < "$st" | grep -q '"lora":{"r":4,"lora_alpha":8.0,"target_modules":\["q_proj","v_proj","o_proj","down_proj"\],"lora_dropout":0.1[0-9]*,"use_rslora":false,"dropout_seed":7}' &&
   tr -d ' \n' < "$st" | grep -q "\"base\":{\"model\":\"$(cd "$base" && pwd -P | sed 's,/,\\\\/,g')\",\"hash\":\"[0-9a-f]\{16\}\",\"hash_method\":\"fnv1a64-sampled-1\"}"
then ok; else bad "trainer_state.json: lora or base not as recorded"; cat "$st"; fi
# shellcheck disable=SC2086
run 1 r2 $data $lora --steps 8 --resume "$c2" --save "$tmp/r2" --log "$tmp/r2.jsonl" ||
  { bad "resume of step 2 on 1 rank"; cat "$tmp/r2.txt"; }
same ref r2 "step 2 resumed on 1 rank with the recorded base"
# shellcheck disable=SC2086
run 2 r4 --model "$base" $data $lora --steps 8 --recompute layer --resume "$tmp/cks/step-00000004" \
  --save "$tmp/r4" --log "$tmp/r4.jsonl" || { bad "resume of step 4 on 2 ranks"; cat "$tmp/r4.txt"; }
same ref r4 "step 4 resumed on 2 ranks, --recompute layer"

# a lagged optimizer: the checkpoint holds the pending update
# shellcheck disable=SC2086
run 2 lagref --model "$base" $data $lora --optimizer-lag 1 --steps 6 --save "$tmp/lagref" \
  --log "$tmp/lagref.jsonl" || { bad "lagged reference"; cat "$tmp/lagref.txt"; }
# shellcheck disable=SC2086
run 2 lagck --model "$base" $data $lora --optimizer-lag 1 --steps 6 --checkpoint-dir "$tmp/lagcks" \
  --checkpoint-every 2 --keep-checkpoints 0 || { bad "lagged checkpoints"; cat "$tmp/lagck.txt"; }
[ -f "$tmp/lagcks/step-00000002/pending_gradient.safetensors" ] && ok ||
  bad "the lagged checkpoint has no pending gradient"
# shellcheck disable=SC2086
run 1 lagres $data $lora --optimizer-lag 1 --steps 6 --resume "$tmp/lagcks/step-00000002" \
  --save "$tmp/lagres" --log "$tmp/lagres.jsonl" || { bad "lagged resume"; cat "$tmp/lagres.txt"; }
same lagref lagres "a lagged optimizer's pending update resumed"

# a random base: the checkpoint's config and the seed
rnd="--data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4
     --steps 5 --lr 3e-3 --seed 4 --lora-rank 2 --lora-dropout 0.05"
# shellcheck disable=SC2086
run 2 rref --init-config "$src/examples/tiny-config.json" $rnd --save "$tmp/rref" \
  --log "$tmp/rref.jsonl" --checkpoint-dir "$tmp/rcks" --checkpoint-every 2 ||
  { bad "random base"; cat "$tmp/rref.txt"; }
# shellcheck disable=SC2086
run 1 rres $rnd --resume "$tmp/rcks/step-00000004" --save "$tmp/rres" --log "$tmp/rres.jsonl" ||
  { bad "random base resumed"; cat "$tmp/rres.txt"; }
same rref rres "a random base resumed from the checkpoint's config and seed"

# a mixture of experts (issue 15): router and per-expert adapters, aux loss on
moe="$src/mpi-tests/fixtures/golden-moe/moe-lora"
# shellcheck disable=SC2046
moe_args="--model $moe/model --data $moe/data.npy --loss-mask $moe/mask.npy
          --lora-init $moe/lora_init $(cat "$moe/args.txt")"
# shellcheck disable=SC2086
run 2 moeref $moe_args --save "$tmp/moeref" --log "$tmp/moeref.jsonl" \
  --checkpoint-dir "$tmp/moecks" --checkpoint-every 2 --keep-checkpoints 0 ||
  { bad "MoE LoRA checkpointed run"; cat "$tmp/moeref.txt"; }
m2="$tmp/moecks/step-00000002"
if grep -aq 'layers.2.mlp.experts.3.down_proj.lora_B.weight' "$m2/model.safetensors" &&
   grep -aq 'layers.0.mlp.gate.lora_A.weight.exp_avg_sq' "$m2/optimizer.safetensors" &&
   ! grep -aq 'experts.0.gate_proj.weight\|mlp.gate.weight' "$m2/model.safetensors" &&
   tr -d ' \n' < "$m2/trainer_state.json" | grep -q '"target_modules":\["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj","gate"\]'
then ok; else bad "the MoE checkpoint does not hold exactly the per-expert adapters"; fi
# shellcheck disable=SC2086
run 1 moer2 $moe_args --resume "$m2" --save "$tmp/moer2" --log "$tmp/moer2.jsonl" ||
  { bad "MoE resume of step 2 on 1 rank"; cat "$tmp/moer2.txt"; }
same moeref moer2 "MoE: step 2 resumed on 1 rank"
# shellcheck disable=SC2086
run 2 moer4 $moe_args --recompute layer --resume "$tmp/moecks/step-00000004" \
  --save "$tmp/moer4" --log "$tmp/moer4.jsonl" || { bad "MoE resume of step 4"; cat "$tmp/moer4.txt"; }
same moeref moer4 "MoE: step 4 resumed on 2 ranks, --recompute layer"

# ---- killed at random moments, resumed with --resume auto --------------------
kill_tree() { # PID: it and its descendants, by id
  for c in $(pgrep -P "$1"); do kill_tree "$c"; done
  kill -9 "$1" 2>/dev/null
}
long="--model $base $data $lora --steps 200 --checkpoint-dir $tmp/kcks --checkpoint-every 4 --resume auto"
# shellcheck disable=SC2086
run 2 kref --model "$base" $data $lora --steps 200 --save "$tmp/kref" || bad "200-step reference"
newest() { ls -d "$tmp/kcks"/step-[0-9]* 2>/dev/null | grep -v '\.tmp$' | tail -n 1; }
kills=0
for np in 2 1; do
  before=$(newest)
  # shellcheck disable=SC2086
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --progress none --threads 1 --device cpu $long \
    --save "$tmp/kfinal" >> "$tmp/kill.txt" 2>&1 &
  pid=$!
  i=0 # until a checkpoint newer than the last one is there, then a little more
  while [ $i -lt 500 ] && [ "$(newest)" = "$before" ]; do sleep 0.02; i=$((i + 1)); done
  sleep "0.0$((np * 3))"
  kill_tree $pid
  wait $pid 2>/dev/null
  [ -e "$tmp/kfinal/adapter_model.safetensors" ] || kills=$((kills + 1))
done
# shellcheck disable=SC2086
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --threads 1 --device cpu $long \
  --save "$tmp/kfinal" >> "$tmp/kill.txt" 2>&1 || bad "the last resume failed"
echo "killed $kills times; resumed: $(grep -o 'resuming from [^:]*' "$tmp/kill.txt" | tr '\n' ' ')"
[ "$kills" -eq 2 ] && ok || bad "only $kills kills landed before the run ended"
cmp -s "$tmp/kref/adapter_model.safetensors" "$tmp/kfinal/adapter_model.safetensors" && ok ||
  { bad "after $kills kills the adapter differs from the uninterrupted run's"; tail -n 20 "$tmp/kill.txt"; }

# ---- refused: a message naming trainer_state.json and the field ---------------
refuse() { # WHAT TEXT [options...]: one process, an MPI singleton (mpirun's teardown
  what=$1; want=$2; shift 2 # of a failed job costs seconds, and rank 0 alone refuses)
  if "$bin" train --progress none --threads 1 --device cpu "$@" --save "$tmp/never" \
       > "$tmp/refused.txt" 2>&1; then bad "$what: accepted"
  elif ! grep -q -- "$want" "$tmp/refused.txt"; then
    bad "$what: message does not say '$want':"; cat "$tmp/refused.txt"
  elif [ -e "$tmp/never" ]; then bad "$what: wrote $tmp/never"
  else ok; fi
}
r="--steps 8 --resume $c2"
# shellcheck disable=SC2086
{
refuse "another rank" "$st: lora.r is 4, this run has 2" $data $r --lora-rank 2 --lora-alpha 8 \
  --lora-dropout 0.1 --lora-targets q_proj,v_proj,o_proj,down_proj
refuse "another alpha" "$st: lora.lora_alpha is 8.0, this run has 4.0" $data $r --lora-rank 4 \
  --lora-dropout 0.1 --lora-targets q_proj,v_proj,o_proj,down_proj
refuse "no dropout" "$st: lora.lora_dropout is 0.1" $data $r --lora-rank 4 --lora-alpha 8 \
  --lora-targets q_proj,v_proj,o_proj,down_proj
refuse "other targets" "$st: lora.target_modules is" $data $r --lora-rank 4 --lora-alpha 8 \
  --lora-dropout 0.1
refuse "rslora" "$st: lora.use_rslora is false, this run has true" $data $r $lora --use-rslora
refuse "another seed" "$st: lora.dropout_seed is 7, this run has 8" $data $r $lora --seed 8
refuse "no --lora-rank" "$st: \"lora\": a checkpoint of LoRA adapters" $data $r
cp -r "$q/model" "$tmp/other"
refuse "another base directory" "$st: base.model is $(cd "$base" && pwd -P), this run has --model $(cd "$tmp/other" && pwd -P)" \
  --model "$tmp/other" $data $r $lora
refuse "a random base for a --model checkpoint" "$st: base.model is .*this run has --init-config" \
  --init-config "$q/model/config.json" $data $r $lora
refuse "a random base's other seed" "rcks/step-00000004/trainer_state.json: base.seed is 4, this run has --seed 5" \
  $rnd --seed 5 --resume "$tmp/rcks/step-00000004"
run 1 full --model "$base" $data --steps 4 --checkpoint-dir "$tmp/fullcks" --checkpoint-every 2 ||
  bad "full fine-tuning run"
refuse "--lora-rank for a full checkpoint" "fullcks/step-00000002/trainer_state.json: no \"lora\": a checkpoint of full fine-tuning" \
  $data --steps 4 --resume "$tmp/fullcks/step-00000002" $lora
# the base's weights changed in place, last: one element of a weight hashed
# whole (64 KiB or less), and the first of one hashed by samples (the tiny
# model's 128 KiB embedding)
flip() { # FILE TENSOR BYTE
  python3 - "$@" <<'EOF' || bad "could not change $1"
import json, struct, sys
p, name, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + json.loads(b[8 : 8 + n])[name]["data_offsets"][0] + at] ^= 0x40
open(p, "wb").write(b)
EOF
}
flip "$base/model.safetensors" model.layers.1.mlp.down_proj.weight 1
refuse "a changed base" "$st: base.hash is [0-9a-f]*, but the weights in $base hash to" \
  $data $r $lora
run 1 tiny --init-config "$src/examples/tiny-config.json" --data "$q/data.npy" --seq-len 16 \
  --batch-size 2 --steps 1 --save "$tmp/tiny" &&
  run 1 tinyck --model "$tmp/tiny" $rnd --steps 4 --checkpoint-every 2 --checkpoint-dir "$tmp/tcks" ||
  { bad "a LoRA run on the tiny model"; cat "$tmp/tiny.txt" "$tmp/tinyck.txt"; }
flip "$tmp/tiny/model.safetensors" model.embed_tokens.weight 0
refuse "a changed large tensor" "tcks/step-00000002/trainer_state.json: base.hash is" \
  $rnd --steps 4 --resume "$tmp/tcks/step-00000002"
}

# ---- evaluation with the adapters --------------------------------------------
ev="--eval-data $q/data.npy --eval-mask $q/mask.npy --eval-every 2"
for np in 1 2; do
  # shellcheck disable=SC2086
  run $np ev$np --model "$q/model" $data $lora --steps 8 $ev --save "$tmp/ev$np" \
    --save-merged "$tmp/merged$np" --log "$tmp/ev$np.jsonl" || { bad "eval on $np"; cat "$tmp/ev$np.txt"; }
done
evline() { grep "^{\"step\":$2,\"eval_loss\"" "$tmp/$1.jsonl" | sed -n 's/.*"eval_loss":\([^,]*\),.*/\1/p'; }
grep '"eval_loss"' "$tmp/ev1.jsonl" > "$tmp/e1"; grep '"eval_loss"' "$tmp/ev2.jsonl" > "$tmp/e2"
[ "$(grep -c . "$tmp/e1")" -eq 4 ] && cmp -s "$tmp/e1" "$tmp/e2" && ok ||
  { bad "eval lines differ between 1 and 2 ranks"; cat "$tmp/e1" "$tmp/e2"; }
cmp -s "$tmp/ref/adapter_model.safetensors" "$tmp/ev1/adapter_model.safetensors" &&
  cmp -s "$tmp/ev1/adapter_model.safetensors" "$tmp/ev2/adapter_model.safetensors" && ok ||
  bad "evaluating changed the adapters"
e2=$(evline ev1 2) e8=$(evline ev1 8)
awk -v a="$e2" -v b="$e8" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d > 1e-3) }' &&
  ok || bad "eval_loss after step 2 ($e2) and step 8 ($e8): the adapters do not show"
close() { # A B what: |A - B| <= 1e-5 |B|
  if awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-5 * b) }'
  then ok; echo "$3: $1 vs $2"; else bad "$3: $1 vs $2"; fi
}
# the merged model, evaluated as a full model (--lr 0: the weights stay)
# shellcheck disable=SC2086
run 1 merged --model "$tmp/merged1" $data --lr 0 --steps 1 $ev --log "$tmp/merged.jsonl" ||
  { bad "full run on the merged model"; cat "$tmp/merged.txt"; }
close "$e8" "$(evline merged 1)" "eval_loss with adapters vs the --save-merged model's"
# a bf16 base (read where it lies): the bits of its exact fp32 widening
for dt in bf16 fp32; do
  from=$q/model; [ $dt = fp32 ] && from=$tmp/base-bf16
  run 1 save-$dt --model "$from" --data "$q/data.npy" --seq-len 16 --batch-size 4 --steps 1 \
    --lr 0 --save "$tmp/base-$dt" --save-dtype $dt || bad "saving the $dt base"
done
for dt in bf16 fp32; do
  # shellcheck disable=SC2086
  run 2 ev-$dt --model "$tmp/base-$dt" $data $lora --steps 2 $ev --log "$tmp/ev-$dt.jsonl" ||
    { bad "eval on the $dt base"; cat "$tmp/ev-$dt.txt"; }
done
[ -n "$(evline ev-bf16 2)" ] && [ "$(evline ev-bf16 2)" = "$(evline ev-fp32 2)" ] && ok ||
  bad "eval_loss on a bf16 base $(evline ev-bf16 2), on its fp32 widening $(evline ev-fp32 2)"
# PEFT on the base in float64
want=$(python3 "$src/mpi-tests/lora_eval_check.py" "$q/model" "$tmp/ev1" "$q/data.npy" 16 10 \
       "$q/mask.npy" 2> "$tmp/peft.txt")
case $? in
  0) close "$e8" "$want" "eval_loss vs PEFT's (float64)" ;;
  77) echo "skipped the PEFT evaluation ($want)" ;;
  *) bad "lora_eval_check.py failed"; cat "$tmp/peft.txt" ;;
esac
finish
