#!/bin/sh
# Proves: `roundpipe train` reproduces transformers' gpt-oss (GptOssForCausalLM,
# model_type gpt_oss; issue 35) trained in float64 by
# tools/make_gpt_oss_golden.py: q/k/v/o with biases and a q width (heads x
# head_dim) other than hidden, learned sinks (trained), sliding-window blocks
# from layer_types with the window shorter than the sequence, YaRN RoPE scaled
# by its attention factor, the router's bias (top k of the biased logits, a
# softmax over those k), biased experts with the clamped SwiGLU (swiglu_limit,
# a non-default swiglu_alpha; a fifth to two fifths of the values past the
# clamps), and the auxiliary loss with M = 1 and with M = 2 and a large
# coefficient: every logged loss, router_aux_loss, lr and grad_norm, and every
# final tensor (saved fused as transformers saves it: mlp.experts.gate_up_proj
# [E, H, 2I] interleaved, .gate_up_proj_bias, .down_proj [E, I, H],
# .down_proj_bias) within 1e-4 relative, on 1, 2 and 3 ranks and 2
# pipelines where there are 2 microbatches; no tensor saved beyond the
# reference's; oss-hd16 (heads of 16, the model bench/gpu/parity.sh runs on
# CUDA) likewise on 2 ranks. Bit-identical results for 1-4 ranks, a forced partition and
# --recompute layer. The same model shipped MXFP4-quantised as the Hub ships
# gpt-oss (model-mxfp4/: *_blocks and *_scales, quantization_config mxfp4)
# trains to the same bits as its plain copy, and is saved unquantised without
# quantization_config. A checkpoint's model.safetensors holds the fused
# experts (no per-expert name), the last one the bytes --save writes, and it
# resumes on another rank count to the uninterrupted run's bits. With Python,
# torch and transformers, what roundpipe saves (--save, a checkpoint) loads in
# GptOssForCausalLM to the saved tensors, and the checkpoint's logits give
# the cross-entropy roundpipe's eval_loss of the same weights has (1e-4).
# LoRA (oss-lora, tools/gpt_oss_golden_lora.py): from a non-zero adapter
# (--lora-init), the default all-linear adapts q/k/v/o (biased Linears; all
# PEFT's all-linear finds in gpt-oss, whose router and experts are no Linear
# modules) against PEFT on GptOssForCausalLM in float64: every logged
# number and adapter tensor within 1e-4 on 1, 2 and 3 ranks and 2 pipelines,
# the same bits on 1-3 ranks, and from a step-2 checkpoint on another rank
# count; with PEFT, the saved adapter on the base gives the logits of
# roundpipe's --save-merged model; an adapter naming the experts is refused;
# on the MXFP4 shipment (its frozen base decoded) the plain copy's bits.
# LoRA on the router and the experts (oss-lora-params with M = 2,
# oss-lora-params-m1 with M = 1; oss-lora's model): --lora-targets names
# PEFT's target_parameters mlp.experts.gate_up_proj, mlp.experts.down_proj
# and mlp.router.weight beside q/k/v/o; from PEFT's non-zero adapter
# (--lora-init: fused lora_A [r*E, in] and lora_B [out, r*E], gate and up
# sharing A) against PEFT's ParamWrapper in float64 with values past the
# clamps: every logged number and adapter tensor within 1e-4 on 1, 2 and 3
# ranks (and 2 pipelines for M = 2), the same bits on 1-3 ranks, for 2
# pipelines on 2 and 4 ranks and from a step-2 checkpoint on another rank
# count; PEFT loads the saved adapter (fused tensors,
# target_parameters) on the base to the logits of roundpipe's --save-merged
# model (the fused experts merged); dropout on those targets is refused
# naming why, nothing written. PEFT's adapter with target_parameters listed
# down_proj first (oss-lora-params-reversed; PEFT nests the wrappers the
# same way whatever the order, so the same names) trains to
# oss-lora-params' reference within 1e-4 and to the usual order's bits.
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden-gpt-oss"
cmp="$build/mpi-tests/golden_compare"
rtol=1e-4
metrics() { sed -e 's/"tokens_per_s":[^,]*,//' -e 's/"time":[^,}]*//' "$1"; }
tensors() {
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  head -c $((8 + n)) "$1" | tail -c "$n" | grep -o '"dtype"' | wc -l
}
# train CASE NP P OUT [MODEL [OPTIONS]]
train() {
  d="$fix/$1"; model="${5:-$d/model}"
  # the oss-lora-params cases train oss-lora's model (not stored twice)
  [ -z "${5:-}" ] && [ ! -d "$d/model" ] && model="$fix/oss-lora/model"
  extra="${6:-}"
  [ -f "$d/mask.npy" ] && extra="$extra --loss-mask $d/mask.npy"
  [ -d "$d/lora_init" ] && extra="$extra --lora-init $d/lora_init"
  no_grace=""; [ "$2" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  # shellcheck disable=SC2046,SC2086
  ${MPIRUN:-mpirun} $flags $no_grace -np "$2" "$bin" train --device cpu --model "$model" \
    --data "$d/data.npy" $extra $(cat "$d/args.txt") --pipelines "$3" --progress none \
    --log "$4.jsonl" --save "$4" > "$4.txt" 2>&1
}
tensor_names() {
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  head -c $((8 + n)) "$1" | tail -c "$n" | grep -o '"[^"]*":{"dtype"'
}
same() { # same REF OUT: saved weights (or adapters) and metrics (timing fields aside) equal
  f=model.safetensors; [ -f "$1/$f" ] || f=adapter_model.safetensors
  [ -f "$1/$f" ] && cmp -s "$1/$f" "$2/$f" &&
    [ "$(metrics "$1.jsonl")" = "$(metrics "$2.jsonl")" ]
}

for case in oss-m1 oss-m2 oss-hd16 oss-mxfp4 oss-lora oss-lora-params oss-lora-params-m1; do
  d="$fix/$case"
  file=model.safetensors
  [ -d "$d/lora_init" ] && file=adapter_model.safetensors
  specs="1:1 2:2 3:1"
  [ "$case" = oss-m1 ] && specs="1:1 2:1 3:1"
  [ "$case" = oss-mxfp4 ] && specs="2:1"
  [ "$case" = oss-hd16 ] && specs="2:1"
  [ "$case" = oss-lora ] && specs="1:1 2:1 3:1 2:2"
  [ "$case" = oss-lora-params ] && specs="1:1 2:1 3:1 2:2 4:2"
  [ "$case" = oss-lora-params-m1 ] && specs="1:1 2:1 3:1"
  for spec in $specs; do
    np=${spec%%:*}; P=${spec#*:}
    out="$tmp/$case-$np-$P"
    echo "== $case on $np rank(s), $P pipeline(s)"
    if ! train "$case" "$np" "$P" "$out"; then
      bad "$case: roundpipe train failed"; cat "$out.txt"; continue
    fi
    res=$("$cmp" "$d/expected.jsonl" "$out.jsonl" "$d/final/$file" "$out/$file" $rtol)
    echo "$res" | grep -v '^RP-CHECK'
    p=$(echo "$res" | sed -n 's/^RP-CHECK: passed=\([0-9]*\).*/\1/p')
    f=$(echo "$res" | sed -n 's/^RP-CHECK: .*failed=\([0-9]*\)/\1/p')
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
    want=$(tensors "$d/final/$file"); got=$(tensors "$out/$file")
    if [ "$want" -eq "$got" ]; then ok; else
      bad "$case: $got tensors saved, the reference has $want"; fi
  done
done

# ---- bit-identical for any rank count, partition and recompute grain --------
ref="$tmp/oss-m2-1-1"
for run in "4 --recompute layer" "2 --plan fwd=0-1,2;bwd=3-4,2,0-1" \
           "3 --plan fwd=0,1-2,3;bwd=4,3,2,0-1 --recompute layer"; do
  np=${run%% *}; opts=${run#* }
  out="$tmp/oss-m2-bits-$np"
  echo "== oss-m2 on $np rank(s) with $opts"
  if ! train oss-m2 "$np" 1 "$out" "" "$opts"; then
    bad "oss-m2 on $np rank(s) with $opts failed"; cat "$out.txt"; continue
  fi
  if same "$ref" "$out"; then ok; else
    bad "oss-m2 on $np rank(s) with $opts: not bit-identical to 1 rank"; fi
done

# ---- LoRA: 1-3 ranks the same bits; PEFT loads the adapters -------------------
for np in 2 3; do
  if same "$tmp/oss-lora-1-1" "$tmp/oss-lora-$np-1"; then ok; else
    bad "oss-lora on $np ranks: not bit-identical to 1 rank"; fi
done
out="$tmp/oss-lora-peft"; d="$fix/oss-lora"
echo "== oss-lora with --save-merged on 2 ranks, loaded by PEFT"
peft_lora="" # PEFT's check of this adapter runs with oss-lora-params' below (one Python)
if train oss-lora 2 1 "$out" "" "--save-merged $out-merged" && same "$tmp/oss-lora-2-1" "$out"
then peft_lora="$d/model $out $out-merged $d/data.npy 16"
else
  bad "oss-lora with --save-merged failed or differs"; cat "$out.txt"
fi
# a LoRA checkpoint of step 2 resumes on another rank count to the same bits
ck="$tmp/oss-lora-ck"
echo "== oss-lora checkpointed on 2 ranks, resumed from step 2 on 3"
if train oss-lora 2 1 "$tmp/oss-lora-ck-run" "" "--checkpoint-dir $ck --checkpoint-every 2" &&
   train oss-lora 3 1 "$tmp/oss-lora-resumed" "" "--resume $ck/step-00000002" &&
   cmp -s "$tmp/oss-lora-1-1/adapter_model.safetensors" \
     "$tmp/oss-lora-resumed/adapter_model.safetensors"; then ok; else
  bad "oss-lora resumed from its step-2 checkpoint differs from the uninterrupted run"
  cat "$tmp/oss-lora-resumed.txt"; fi
# an adapter naming the experts (or the router) is refused naming why, before any work
init="$tmp/oss-lora-experts"; cp -r "$d/lora_init" "$init"
sed -i 's/"target_modules": \[/&"gate_proj", /' "$init/adapter_config.json"
# shellcheck disable=SC2046
if "$bin" train --device cpu --model "$d/model" --data "$d/data.npy" --lora-init "$init" \
     $(cat "$d/args.txt") --progress none --save "$tmp/oss-lora-refused" > "$init.txt" 2>&1; then
  bad "an adapter on gpt-oss's experts was taken"
elif grep -q "adapter_config.json: target_modules: gpt-oss's router .*target_parameters" "$init.txt" &&
     [ ! -e "$tmp/oss-lora-refused" ]; then ok; else
  bad "the adapter on gpt-oss's experts: not refused with its reason"; cat "$init.txt"; fi

# ---- LoRA on the router and experts (PEFT's target_parameters) ---------------
for case in oss-lora-params oss-lora-params-m1; do
  for np in 2 3; do
    if same "$tmp/$case-1-1" "$tmp/$case-$np-1"; then ok; else
      bad "$case on $np ranks: not bit-identical to 1 rank"; fi
  done
done
if same "$tmp/oss-lora-params-2-2" "$tmp/oss-lora-params-4-2"; then ok; else
  bad "oss-lora-params with 2 pipelines: 4 ranks differ from 2"; fi
out="$tmp/oss-lora-params-peft"; d="$fix/oss-lora-params"; peft_params=""
echo "== oss-lora-params with --save-merged on 2 ranks, loaded by PEFT"
if train oss-lora-params 2 1 "$out" "" "--save-merged $out-merged" &&
   same "$tmp/oss-lora-params-2-1" "$out"; then
  if grep -q '"mlp.experts.gate_up_proj"' "$out/adapter_config.json" &&
     tensor_names "$out/adapter_model.safetensors" | grep -q 'experts\.base_layer\.lora_A'; then
    ok; else bad "the saved adapter has no target_parameters or fused experts tensors"; fi
  peft_params="$fix/oss-lora/model $out $out-merged $d/data.npy 16"
else
  bad "oss-lora-params with --save-merged failed or differs"; cat "$out.txt"
fi
# PEFT's adapters on the base against roundpipe's merged models, in
# transformers: oss-lora's and oss-lora-params', in one Python (its imports
# take seconds; a line for each, "ok ADAPTER_DIR")
# shellcheck disable=SC2086
set -- $peft_lora
[ -n "$peft_lora" ] && [ -n "$peft_params" ] && set -- "$@" --
# shellcheck disable=SC2086
set -- "$@" $peft_params
prc=0
[ $# -gt 0 ] && { python3 "$src/mpi-tests/lora_peft_check.py" "$@" > "$tmp/peft-check.txt" 2>&1; prc=$?
  grep "logit diff" "$tmp/peft-check.txt"; }
peft_said() { # CASE CHECK: the check's adapter (its second word) said "ok"
  [ -n "$2" ] || return 0 # its run failed, said above
  # shellcheck disable=SC2086
  set -- "$1" $2
  if [ $prc = 77 ]; then echo "skipped the PEFT load check (Python, torch, transformers or peft missing)"
  elif grep -qxF "ok $3" "$tmp/peft-check.txt"; then ok
  else bad "PEFT's $1 adapter does not give roundpipe's merged model's logits"
    tail -n 5 "$tmp/peft-check.txt"; fi
}
peft_said oss-lora "$peft_lora"
peft_said oss-lora-params "$peft_params"
# a checkpoint of step 2 (the experts' adapters per expert) resumes on another
# rank count to the same bits
ck="$tmp/oss-params-ck"
echo "== oss-lora-params checkpointed on 2 ranks, resumed from step 2 on 3"
if train oss-lora-params 2 1 "$tmp/oss-params-ck-run" "" "--checkpoint-dir $ck --checkpoint-every 2" &&
   train oss-lora-params 3 1 "$tmp/oss-params-resumed" "" "--resume $ck/step-00000002" &&
   cmp -s "$tmp/oss-lora-params-1-1/adapter_model.safetensors" \
     "$tmp/oss-params-resumed/adapter_model.safetensors"; then ok; else
  bad "oss-lora-params resumed from its step-2 checkpoint differs from the uninterrupted run"
  cat "$tmp/oss-params-resumed.txt"; fi
# dropout on the parameters: PEFT's ParamWrapper refuses it, so does roundpipe
if train oss-lora-params 1 1 "$tmp/oss-params-dropout" "" "--lora-dropout 0.1"; then
  bad "dropout on gpt-oss's target_parameters was taken"
elif grep -q "dropout 0.1 on gpt-oss's target_parameters .*ParamWrapper" \
       "$tmp/oss-params-dropout.txt" && [ ! -e "$tmp/oss-params-dropout" ]; then ok; else
  bad "dropout on gpt-oss's target_parameters: not refused with its reason"
  cat "$tmp/oss-params-dropout.txt"; fi
# down_proj listed first (oss-lora-params-reversed: the adapter PEFT saves
# with the list reversed, the same names): trains to oss-lora-params'
# float64 reference and to the usual order's bits; saved in roundpipe's order
rev="$fix/oss-lora-params-reversed/lora_init"; out="$tmp/oss-params-reversed"
echo "== oss-lora-params from PEFT's adapter with target_parameters down_proj first"
if grep -A1 '"target_parameters"' "$rev/adapter_config.json" | grep -q 'down_proj' &&
   ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --device cpu --model "$fix/oss-lora/model" \
     --data "$d/data.npy" --loss-mask "$d/mask.npy" --lora-init "$rev" $(cat "$d/args.txt") \
     --progress none --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1; then
  res=$("$cmp" "$d/expected.jsonl" "$out.jsonl" "$d/final/adapter_model.safetensors" \
        "$out/adapter_model.safetensors" $rtol)
  echo "$res" | grep -v '^RP-CHECK'
  p=$(echo "$res" | sed -n 's/^RP-CHECK: passed=\([0-9]*\).*/\1/p')
  f=$(echo "$res" | sed -n 's/^RP-CHECK: .*failed=\([0-9]*\)/\1/p')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
  if same "$tmp/oss-lora-params-2-1" "$out"; then ok; else
    bad "the reversed target_parameters' adapter trains to other bits than the usual order's"; fi
  if grep -A1 '"target_parameters"' "$out/adapter_config.json" | grep -q 'gate_up_proj'; then
    ok; else bad "the adapter is not saved with gate_up_proj first"; fi
else
  bad "target_parameters with down_proj first: not taken"; cat "$out.txt"
fi

# ---- MXFP4: the quantised shipment trains to the plain copy's bits -----------
for np in 1 3; do
  out="$tmp/mxfp4-$np"
  echo "== oss-mxfp4 from model-mxfp4/ on $np rank(s)"
  if ! train oss-mxfp4 "$np" 1 "$out" "$fix/oss-mxfp4/model-mxfp4"; then
    bad "oss-mxfp4: training from model-mxfp4/ failed"; cat "$out.txt"; continue
  fi
  if same "$tmp/oss-mxfp4-2-1" "$out"; then ok; else
    bad "oss-mxfp4 on $np rank(s): model-mxfp4/ and model/ differ"; fi
  if grep -q quantization_config "$out/config.json"; then
    bad "the unquantised save keeps quantization_config"; else ok; fi
done

# LoRA on the MXFP4 shipment: its frozen base decoded from the blocks and
# scales, the same adapter bits as on the plain copy
for m in model model-mxfp4; do
  train oss-mxfp4 2 1 "$tmp/lora-$m" "$fix/oss-mxfp4/$m" "--lora-rank 2 --lora-alpha 4" ||
    { bad "oss-mxfp4 with LoRA from $m/ failed"; cat "$tmp/lora-$m.txt"; }
done
if same "$tmp/lora-model" "$tmp/lora-model-mxfp4"; then ok; else
  bad "LoRA on oss-mxfp4: model-mxfp4/ and model/ differ"; fi

# ---- a checkpoint: transformers' names, resumes to the same bits --------------
ck="$tmp/oss-ck"; out="$tmp/oss-resumed"; run="$tmp/oss-ck-run"
echo "== oss-m2 checkpointed on 2 ranks, resumed from step 2 on 3"
if train oss-m2 2 1 "$run" "" "--checkpoint-dir $ck --checkpoint-every 2 --keep-checkpoints 0 --eval-data $fix/oss-m2/data.npy"; then
  for step in 2 4; do
    f="$ck/step-0000000$step/model.safetensors"
    per=$(tensor_names "$f" | grep -c '\.experts\.[0-9]' || true)
    fused=$(tensor_names "$f" | grep -c '\.experts\.gate_up_proj"' || true)
    if [ "$per" -eq 0 ] && [ "$fused" -gt 0 ]; then ok; else
      bad "the step-$step checkpoint holds $per per-expert and $fused fused gate_up_proj tensors"; fi
  done
  if cmp -s "$ck/step-00000004/model.safetensors" "$run/model.safetensors"; then ok; else
    bad "the last checkpoint's model.safetensors is not the bytes --save wrote"; fi
else
  bad "oss-m2 with --checkpoint-dir failed"; cat "$run.txt"
fi
if train oss-m2 3 1 "$out" "" "--resume $ck/step-00000002" &&
   cmp -s "$tmp/oss-m2-1-1/model.safetensors" "$out/model.safetensors"; then ok; else
  bad "oss-m2 resumed from its step-2 checkpoint differs from the uninterrupted run"
  cat "$out.txt"; fi

# ---- transformers loads what roundpipe saved ----------------------------------
# --save's model, and the last checkpoint with its logits' cross-entropy against
# roundpipe's eval_loss of the same weights
# (one Python for both: its imports take seconds; a line each, "ok DIR")
eval_loss=$(sed -n 's/.*"eval_loss":\([^,}]*\).*/\1/p' "$run.jsonl" | tail -n 1)
python3 "$src/mpi-tests/gpt_oss_load_check.py" "$tmp/oss-m2-2-2" -- "$ck/step-00000004" \
  "$fix/oss-m2/data.npy" 16 "${eval_loss:-nan}" > "$tmp/load-check.txt" 2>"$tmp/load-check.err"
lrc=$?
cat "$tmp/load-check.txt"
for dir in "$tmp/oss-m2-2-2" "$ck/step-00000004"; do
  if [ $lrc = 77 ]; then
    echo "skipped the transformers load check (Python, torch or transformers missing)"
  elif grep -qxF "ok $dir" "$tmp/load-check.txt"; then ok
  else bad "transformers does not load $dir to its tensors and roundpipe's loss"
    tail -n 5 "$tmp/load-check.err"; fi
done
finish
