#!/bin/sh
# Proves: LoRA on an FP8 base (issue 36). Parity with PEFT in float64 on the
# exactly dequantised base (tools/make_fp8_lora_golden.py: e4m3 projections
# with block scales, partial edge blocks both ways; BF16 scales with M = 2,
# F32 scales with M = 1; Qwen3-MoE's experts, routers and aux loss on blocks
# [5, 7], BF16 scales, M = 2): every logged loss, lr and grad_norm within 1e-4
# relative and every adapter tensor within 1e-4 of its largest entry, and
# the adapters and losses bit-identical on 1-4 ranks. CPU executors map the
# FP8 base in place (not converted into the store). Full fine-tuning from
# an FP8 directory is refused with the reason; --save-merged writes bf16
# without quantization_config. The issue's bad
# input is refused naming the file and the key, writing nothing: an unsupported
# quant_method or fmt, a block size the scales do not fit, F8_E4M3 weights
# in a model whose config has no FP8 quantization_config.
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden-fp8"
gold="$src/mpi-tests/fixtures/golden"
cmp="$build/mpi-tests/golden_compare"
train() { # np, then train options
  np=$1; shift
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device cpu --progress none "$@"
}
metrics() { sed -e 's/"tokens_per_s":[^,]*,//' -e 's/"time":[^,}]*//' "$1"; }

# ---- parity with PEFT on the dequantised base; bits over 1-4 ranks ----------
for case in qwen3-bf16-scales qwen3-f32-scales-m1 moe-bf16-scales; do
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
done

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
finish
