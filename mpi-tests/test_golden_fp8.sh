#!/bin/sh
# Proves: LoRA on an FP8 base (issue 36). Parity with PEFT in float64 on the
# exactly dequantised base (tools/make_fp8_lora_golden.py: e4m3 projections
# with block scales, partial edge blocks both ways; BF16 scales with M = 2,
# F32 scales with M = 1; Qwen3-MoE's experts, routers and aux loss on blocks
# [5, 7], BF16 scales, M = 2; a dense and a MoE case whose config's
# modules_to_not_convert keeps some projections unquantised, bf16 in the
# files: a block's attention, one MLP projection, a MoE block's experts,
# a dense block's down_proj): every logged loss, lr and grad_norm within 1e-4
# relative and every adapter tensor within 1e-4 of its largest entry, and
# the adapters and losses bit-identical on 1-4 ranks. CPU executors map the
# FP8 base in place (not converted into the store); uploaded with the stages
# as FP8 and scales, kept so and each block dequantised for each use (GPU
# executors' path, run on CPU ones with RP_TEST_UPLOAD_BASE=1) it gives the
# same bits under --dtype bf16 on 1-4 ranks, evaluation (--eval-data)
# included. An FP8 checkpoint whose unquantised tensors are not all in one
# dtype (F32 and F16 norms, a kept projection, a router, a whole block in
# F32) is taken as FP8 all the same, those tensors alone in the store,
# with its source's bits on 1 and 2 ranks, in place and uploaded, and its
# source's bytes uploaded per step, and its --save-merged file. The FP8
# base's uploads per step (the closing line) are well below its bf16
# twin's, and the start-up line counts its bytes beside bf16's. `plan` of
# the FP8 config counts the base as its checkpoint maps it (CPU, and GPU
# executors, whose FP8 uploads model no slower than bf16's; with
# RP_DISABLE_CUDA_PATHS=fp8-upload the store's bf16). With Python, torch,
# transformers and peft: the saved adapter loads with PeftModel on the
# dequantised base and its logits equal the --save-merged model's. Full
# fine-tuning from
# an FP8 directory is refused with the reason; --save-merged writes bf16
# without quantization_config. The issue's bad
# input is refused naming the file and the key, writing nothing: an unsupported
# quant_method or fmt, a block size the scales do not fit, F8_E4M3 weights
# in a model whose config has no FP8 quantization_config; a
# modules_to_not_convert pattern of unsupported syntax, a projection it keeps
# unquantised that the files ship as F8_E4M3 (naming the pattern), and one
# it does not keep that they ship in bf16 (saying no pattern matches it).
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden-fp8"
gold="$src/mpi-tests/fixtures/golden"
cmp="$build/mpi-tests/golden_compare"
train() { # np, then train options
  np=$1; shift
  no_grace=""; [ "$np" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $no_grace -np "$np" "$bin" train --device cpu --progress none "$@"
}
metrics() { sed -e 's/"tokens_per_s":[^,]*,//' -e 's/"time":[^,}]*//' "$1"; }

# ---- parity with PEFT on the dequantised base; bits over 1-4 ranks ----------
for case in qwen3-bf16-scales qwen3-f32-scales-m1 moe-bf16-scales qwen3-kept moe-kept; do
  d="$fix/$case"
  if [ -f "$d/inputs.txt" ]; then # a dense case: the base case's data, the model beside
    in="$gold/$(basename "$(cat "$d/inputs.txt")")"; model="$d-model"
  else # the MoE case holds its data and its model
    in="$d"; model="$d/model-fp8"
  fi
  ref=""
  for np in 1 2 3 4; do
    out="$tmp/$case-$np"
    echo "== $case on $np rank(s)"
    # shellcheck disable=SC2046
    if ! train "$np" --model "$model" --data "$in/data.npy" --loss-mask "$in/mask.npy" \
         $(cat "$d/args.txt") --lora-init "$d/lora_init" --log "$out.jsonl" --save "$out" \
         > "$out.txt" 2>&1; then
      bad "$case: roundpipe train on $np ranks failed"; cat "$out.txt"; continue
    fi
    if [ -z "$ref" ]; then
      ref=$out
      # CPU executors read the FP8 base where it lies: mapped, not in the store
      if grep -q "the frozen base .* mapped read-only" "$out.txt" &&
         ! grep -q "converted" "$out.txt"; then ok; else
        bad "$case: the FP8 base is not mapped in place"; cat "$out.txt"; fi
      res=$("$cmp" "$d/expected.jsonl" "$out.jsonl" "$d/final/adapter_model.safetensors" \
            "$out/adapter_model.safetensors" 1e-4)
      echo "$res" | grep -v '^RP-CHECK'
      p=$(echo "$res" | sed -n 's/^RP-CHECK: passed=\([0-9]*\).*/\1/p')
      f=$(echo "$res" | sed -n 's/^RP-CHECK: .*failed=\([0-9]*\)/\1/p')
      passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
    elif cmp -s "$ref/adapter_model.safetensors" "$out/adapter_model.safetensors" &&
         [ "$(metrics "$ref.jsonl")" = "$(metrics "$out.jsonl")" ]; then ok
    else bad "$case: $np ranks differ from 1"; fi
  done
  # the GPU executors' path on CPU ones: the base uploaded with the stages as
  # FP8 and its scales and kept so, each block dequantised into the
  # executor's scratch for each use; the bits of it read in place (in bf16:
  # the other tensors then travel as they lie), on 1-4 ranks (stages of one
  # block and of several)
  for up in 0 1 1-1 1-3 1-4; do
    out="$tmp/$case-bf16-$up"; np=2
    case $up in 1-*) np=${up#1-} ;; esac
    # shellcheck disable=SC2046
    RP_TEST_UPLOAD_BASE=${up%-*} ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np "$np" "$bin" train \
      --device cpu --progress none --model "$model" --data "$in/data.npy" \
      --loss-mask "$in/mask.npy" $(cat "$d/args.txt") --dtype bf16 --lora-init "$d/lora_init" \
      --steps 3 --eval-data "$in/data.npy" --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1 ||
      { bad "$case, bf16, upload $up: train failed"; cat "$out.txt"; }
  done
  out="$tmp/$case-bf16"
  for up in 1 1-1 1-3 1-4; do
    if grep -q "the frozen base as FP8 with its scales" "$out-$up.txt" && grep -q eval "$out-$up.jsonl" &&
       cmp -s "$out-0/adapter_model.safetensors" "$out-$up/adapter_model.safetensors" &&
       [ -s "$out-0.jsonl" ] && [ "$(metrics "$out-0.jsonl")" = "$(metrics "$out-$up.jsonl")" ]
    then ok; else bad "$case: the FP8 base uploaded and dequantised ($up) differs from it in place"
      tail -3 "$out-$up.txt"; fi
  done
done
# ---- unquantised tensors in another dtype (tools/make_fp8_odd_fixtures.py) ---
# a source case's values, some unquantised tensors in F32 or F16 (a block's
# norm and the final one, a projection modules_to_not_convert keeps, a MoE
# router, a whole block unquantised): the base is taken as FP8 all the same
# (the config says so, and the planner counts it so), those tensors alone
# converted into the store; the source's bits (its losses PEFT's, above) on
# 1 and 2 ranks read in place (fp32), and uploaded (bf16) as the source's
# upload run; under one plan its stages upload the source's bytes per step
# (the whole block, no longer FP8, more). They made the whole base be
# converted into the store before, uploaded in bf16.
same_run() { cmp -s "$1/adapter_model.safetensors" "$2/adapter_model.safetensors" &&
  [ -s "$1.jsonl" ] && [ "$(metrics "$1.jsonl")" = "$(metrics "$2.jsonl")" ]; }
odd_dir="$src/mpi-tests/fixtures/fp8-odd"
for odd in norms:qwen3-bf16-scales kept-f32:qwen3-kept block-f32:qwen3-bf16-scales \
           moe-router:moe-bf16-scales; do
  v=${odd%%:*}; case=${odd#*:}; d="$fix/$case"; in="$d"
  [ -f "$d/inputs.txt" ] && in="$gold/$(basename "$(cat "$d/inputs.txt")")"
  for np in 1 2; do
    out="$tmp/odd-$v-$np"
    # shellcheck disable=SC2046
    train "$np" --model "$odd_dir/$v" --data "$in/data.npy" --loss-mask "$in/mask.npy" \
      $(cat "$d/args.txt") --lora-init "$d/lora_init" --log "$out.jsonl" --save "$out" \
      > "$out.txt" 2>&1 || { bad "odd $v: train on $np ranks failed"; cat "$out.txt"; continue; }
    if same_run "$tmp/$case-1" "$out" &&
       grep -q "the frozen base's tensors in another dtype converted into it .* (FP8 e4m3 with its block scales, .* mapped read-only" "$out.txt"
    then ok; else bad "odd $v on $np ranks: not $case's bits, or not mapped as FP8"; grep "host memory per node:" "$out.txt"; fi
  done
  out="$tmp/odd-$v-bf16"
  # shellcheck disable=SC2046
  RP_TEST_UPLOAD_BASE=1 ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np 2 "$bin" train \
    --device cpu --progress none --model "$odd_dir/$v" --data "$in/data.npy" \
    --loss-mask "$in/mask.npy" $(cat "$d/args.txt") --dtype bf16 --lora-init "$d/lora_init" \
    --steps 3 --eval-data "$in/data.npy" --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1 ||
    { bad "odd $v, uploaded: train failed"; cat "$out.txt"; }
  if same_run "$tmp/$case-bf16-1" "$out" && grep -q "the frozen base as FP8 with its scales" "$out.txt"
  then ok; else bad "odd $v, uploaded: not $case's bits"; tail -3 "$out.txt"; fi
  # the bytes its stages upload per step, against the source's under the
  # same plan (the re-plan from measured times may choose other stages)
  plan="fwd=0,1;bwd=2-3,1,0"; [ -f "$d/inputs.txt" ] || plan="fwd=0,1-3;bwd=4,2-3,0-1"
  for which in source odd; do
    mdir="$odd_dir/$v"
    [ $which = source ] && { mdir="$d-model"; [ -f "$d/inputs.txt" ] || mdir="$d/model-fp8"; }
    # shellcheck disable=SC2046
    RP_TEST_UPLOAD_BASE=1 ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np 2 "$bin" train \
      --device cpu --progress none --model "$mdir" --data "$in/data.npy" $(cat "$d/args.txt") \
      --dtype bf16 --steps 2 --plan "$plan" > "$tmp/odd-$v-$which.txt" 2>&1 ||
      { bad "odd $v, $which uploaded: train failed"; cat "$tmp/odd-$v-$which.txt"; }
  done
  moved=$(sed -n 's/.*weights uploaded: .* (\([0-9]*\) bytes over.*/\1/p' "$tmp/odd-$v-odd.txt")
  source=$(sed -n 's/.*weights uploaded: .* (\([0-9]*\) bytes over.*/\1/p' "$tmp/odd-$v-source.txt")
  echo "odd $v: $moved bytes uploaded over 2 steps, its source $case $source"
  if [ -n "$moved" ] && { [ "$moved" = "$source" ] || { [ $v = block-f32 ] && [ "$moved" -gt "${source:-0}" ]; }; }
  then ok; else bad "odd $v: $moved bytes uploaded against its source's $source"; fi
done
# a tensor of a dtype that is no floating point: named, with its file
mkdir -p "$tmp/int-norm" && cp "$odd_dir/norms/config.json" "$tmp/int-norm/" &&
  LC_ALL=C sed 's/"model.layers.0.input_layernorm.weight":{"dtype":"F32"/"model.layers.0.input_layernorm.weight":{"dtype":"I32"/' \
    "$odd_dir/norms/model.safetensors" > "$tmp/int-norm/model.safetensors"

# the re-plan prices each block's dequantisation as measured (the planner's
# dequant_ms): train's re-plan line says it for the FP8 base, not for a bf16 one
grep -q "re-planned from measured layer times (.*; block 1's base dequantised in [0-9.e+-]* ms a use)" \
  "$tmp/qwen3-bf16-scales-2.txt" && ok || { bad "the re-plan does not say the dequantisation it measured"; grep re-planned "$tmp/qwen3-bf16-scales-2.txt"; }
train 2 --model "$gold/qwen3/model" --data "$gold/qwen3/data.npy" $(cat "$fix/qwen3-bf16-scales/args.txt") \
  > "$tmp/bf16-base.txt" 2>&1 && grep -q "re-planned from measured" "$tmp/bf16-base.txt" &&
  ! grep -q "dequantised in" "$tmp/bf16-base.txt" && ok || { bad "a bf16 base's re-plan"; cat "$tmp/bf16-base.txt"; }

# ---- host memory and bytes uploaded per step: FP8 against its bf16 twin -------
d="$fix/qwen3-bf16-scales"; in="$gold/qwen3"
short="--data $in/data.npy --seq-len 16 --batch-size 4 --microbatches 2 --lora-rank 4"
# shellcheck disable=SC2086
train 1 --model "$d-model" $short --steps 1 --lr 0 --save-merged "$tmp/twin" \
  > "$tmp/twin.txt" 2>&1 || { bad "the bf16 twin was not saved"; cat "$tmp/twin.txt"; }
for m in fp8 twin; do
  mdir="$tmp/twin"; [ $m = fp8 ] && mdir="$d-model"
  for up in 0 1; do
    # shellcheck disable=SC2086
    RP_TEST_UPLOAD_BASE=$up ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np 2 "$bin" train \
      --device cpu --progress none --dtype bf16 --model "$mdir" $short --steps 4 \
      > "$tmp/$m-$up.txt" 2>&1 || { bad "$m, upload $up: train failed"; cat "$tmp/$m-$up.txt"; }
  done
done
uploaded() { sed -n 's/.*weights uploaded: .* (\([0-9]*\) bytes over 4 steps.*/\1/p' "$1"; }
u8=$(uploaded "$tmp/fp8-1.txt"); u16=$(uploaded "$tmp/twin-1.txt")
echo "bytes uploaded per 4 steps: FP8 base $u8, its bf16 twin $u16"
if [ -n "$u8" ] && [ -n "$u16" ] && [ $((u8 * 4)) -lt $((u16 * 3)) ]; then ok
else bad "the FP8 base's uploads ($u8 bytes) are not well below bf16's ($u16)"; fi
# the start-up line: the mapped FP8 base beside its size in bf16
line=$(grep "the frozen base .* (FP8 e4m3 with its block scales" "$tmp/fp8-0.txt")
b8=$(echo "$line" | sed -n 's/.*block scales, \([0-9]*\) bytes;.*/\1/p')
b16=$(echo "$line" | sed -n 's/.*, \([0-9]*\) bytes, in bf16.*/\1/p')
echo "host bytes of the frozen base: FP8 $b8, bf16 $b16"
if [ -n "$b8" ] && [ -n "$b16" ] && [ $((b8 * 10)) -lt $((b16 * 6)) ]; then ok
else bad "the start-up line does not count the FP8 base: $line"; fi

# ---- --save-merged writes bf16, never re-quantised ----------------------------
d="$fix/qwen3-bf16-scales"; in="$gold/qwen3"
# shellcheck disable=SC2046
if train 2 --model "$d-model" --data "$in/data.npy" $(cat "$d/args.txt") --steps 2 \
     --save-merged "$tmp/merged" > "$tmp/merged.txt" 2>&1; then
  got=$(head -c 8192 "$tmp/merged/model.safetensors" | tr -d '\0' |
        grep -o '"dtype":"[A-Z0-9_]*"' | sort -u | tr '\n' ' ')
  if [ "$got" = '"dtype":"BF16" ' ] && ! grep -q quantization_config "$tmp/merged/config.json"
  then ok; else bad "--save-merged of the FP8 base: dtypes $got, not BF16 only"; fi
else bad "--save-merged on the FP8 base failed"; cat "$tmp/merged.txt"; fi
# and of a base with odd tensors (F32 and F16 norms; a block in F32), read
# from the store where they were converted: its source's file, byte for byte
for v in norms block-f32; do
  # shellcheck disable=SC2046
  train 2 --model "$odd_dir/$v" --data "$in/data.npy" $(cat "$d/args.txt") --steps 2 \
    --save-merged "$tmp/merged-$v" > "$tmp/merged-$v.txt" 2>&1 &&
    cmp -s "$tmp/merged/model.safetensors" "$tmp/merged-$v/model.safetensors" && ok ||
    { bad "--save-merged of odd $v differs from its source's"; tail -3 "$tmp/merged-$v.txt"; }
done

# ---- PEFT loads the adapter on the dequantised base ---------------------------
# the dequantised base itself: a fresh adapter (B = 0) merged, in fp32 (exact
# with BF16 scales); PEFT's logits with roundpipe's trained adapter on it
# equal roundpipe's --save-merged model's
# shellcheck disable=SC2086
if train 1 --model "$d-model" $short --steps 1 --lr 0 --save-merged "$tmp/deq" \
     --save-dtype fp32 > "$tmp/deq.txt" 2>&1 &&
   train 2 --model "$d-model" $short --steps 3 --lr 3e-3 --lora-alpha 16 --save "$tmp/ad" \
     --save-merged "$tmp/ad-merged" --save-dtype fp32 > "$tmp/ad.txt" 2>&1; then
  python3 "$src/mpi-tests/lora_peft_check.py" "$tmp/deq" "$tmp/ad" "$tmp/ad-merged" \
    "$in/data.npy" 16
  case $? in
    0) ok ;;
    77) echo "skipped the PEFT check (Python, torch, transformers or peft missing)" ;;
    *) bad "PEFT's logits on the dequantised base differ from the merged model's" ;;
  esac
else bad "the dequantised base or the adapter was not saved"; cat "$tmp/deq.txt" "$tmp/ad.txt"; fi

# ---- plan: an FP8 config counted as its checkpoint maps it ---------------------
plan() { # device, on|off: the fp8-upload path (on by default: proven on the H200 of 2026-11-30)
  off=""; [ "$2" = off ] && off=fp8-upload
  RP_DISABLE_CUDA_PATHS=$off "$bin" plan --init-config "$d-model/config.json" --device "$1" \
    --gpus 2 --microbatches 2 --seq-len 16 --lora-rank 4 > "$tmp/plan-$1-$2.txt" 2>&1 ||
    { bad "plan --device $1 failed"; cat "$tmp/plan-$1-$2.txt"; }
}
plan cpu on; plan cuda off; plan cuda on
for p in cpu-on cuda-on; do
  if grep -q "the frozen base counted as an FP8 checkpoint of this config" "$tmp/plan-$p.txt" &&
     grep -q "(FP8 e4m3 with its block scales, [0-9]* bytes; .*, 135936 bytes, in bf16) mapped" \
       "$tmp/plan-$p.txt"; then ok; else bad "plan $p: the FP8 base not counted"
    cat "$tmp/plan-$p.txt"; fi
done
# GPU executors take FP8 as it lies unless the path is turned off: then the store's bf16
if grep -q "the frozen base converted into it" "$tmp/plan-cuda-off.txt"; then ok
else bad "plan cuda with RP_DISABLE_CUDA_PATHS=fp8-upload counts FP8"; fi
# and its uploads, half the bytes, make the modelled iteration no slower
tps() { sed -n 's/.*max, \([0-9]*\) tokens\/s.*/\1/p' "$1"; }
t0=$(tps "$tmp/plan-cuda-off.txt"); t1=$(tps "$tmp/plan-cuda-on.txt")
echo "plan, cuda: $t0 tokens/s with a bf16 base, $t1 with FP8 uploads"
if [ -n "$t0" ] && [ -n "$t1" ] && [ "$t1" -ge "$t0" ]; then ok
else bad "plan: FP8 uploads modelled slower ($t1 < $t0 tokens/s)"; fi

# ---- refusals: a message naming the file and the key, nothing written --------
d="$fix/qwen3-bf16-scales"; q="$gold/qwen3"
refuse() { # model dir, expected text, then options
  m=$1; want=$2; shift 2
  if train 1 --model "$m" --data "$q/data.npy" --seq-len 16 --batch-size 4 --steps 1 \
       --save "$tmp/never" "$@" > "$tmp/err.txt" 2>&1; then
    bad "accepted: $m $*"
  elif ! grep -qF -- "$want" "$tmp/err.txt"; then
    bad "$m $*: message does not say $want:"; cat "$tmp/err.txt"
  elif [ -e "$tmp/never" ]; then
    bad "$m $*: wrote $tmp/never"
  else ok; fi
}
refuse "$d-model" "$d-model/config.json: field 'quantization_config': an FP8 checkpoint is a frozen base for LoRA (--lora-rank) only"
# a config edited, the weights linked
edited() { # name, sed expression: a model dir whose config.json is the fixture's edited
  mkdir -p "$tmp/$1"
  ln -sf "$(cd "$d-model" && pwd)/model.safetensors" "$tmp/$1/model.safetensors"
  sed "$2" "$d-model/config.json" > "$tmp/$1/config.json"
  echo "$tmp/$1"
}
m=$(edited gptq 's/"quant_method": "fp8"/"quant_method": "gptq"/')
refuse "$m" "$m/config.json: field 'quantization_config.quant_method': unsupported quantisation 'gptq'" --lora-rank 4
m=$(edited e5m2 's/"fmt": "e4m3"/"fmt": "e5m2"/')
refuse "$m" "$m/config.json: field 'quantization_config.fmt': unsupported FP8 format 'e5m2'" --lora-rank 4
# [128, 128]: one scale per matrix, but the files have the grid of [24, 40]
m=$(edited blocks '/"weight_block_size"/,/]/c\    "weight_block_size": [128, 128]')
refuse "$m" "model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight_scale_inv' has shape [3, 2]; weight [64, 64] in blocks of [128, 128] (quantization_config.weight_block_size) needs [1, 1]" --lora-rank 4
m=$(edited plain '/"quantization_config"/,/}/d')
refuse "$m" "model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' is F8_E4M3, but $m/config.json has no quantization_config" --lora-rank 4
# modules_to_not_convert: a pattern beyond literal text, '.' and '*'
m=$(edited classes 's/"quant_method": "fp8",/"modules_to_not_convert": ["model.layers.[01].self_attn"], "quant_method": "fp8",/')
refuse "$m" "$m/config.json: field 'quantization_config.modules_to_not_convert': entry 0 is \"model.layers.[01].self_attn\", not a module name or pattern" --lora-rank 4
# a projection it keeps unquantised shipped as FP8: the pattern named
m=$(edited keeps 's/"quant_method": "fp8",/"modules_to_not_convert": ["lm_head", "model.layers.*.self_attn.k_proj"], "quant_method": "fp8",/')
refuse "$m" "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' is F8_E4M3, but $m/config.json's quantization_config.modules_to_not_convert entry 1 \"model.layers.*.self_attn.k_proj\" keeps module 'model.layers.0.self_attn.k_proj' unquantised" --lora-rank 4
# an unquantised tensor the files hold as no floating-point dtype (made above)
refuse "$tmp/int-norm" "$tmp/int-norm/model.safetensors: tensor 'model.layers.0.input_layernorm.weight': dtype I32 cannot be read as floating point" --lora-rank 4
# one it does not keep shipped in bf16 (qwen3-kept's files, its list gone)
d="$fix/qwen3-kept"
m=$(edited unkept '/"modules_to_not_convert"/,/]/d')
refuse "$m" "model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' is BF16, but no entry of $m/config.json's quantization_config.modules_to_not_convert matches module 'model.layers.0.mlp.up_proj': the config says it ships F8_E4M3 with 'model.layers.0.mlp.up_proj.weight_scale_inv'" --lora-rank 4
finish
