#!/bin/sh
# Proves: every reader of a user file (config.json of dense, MoE, FP8 and
# gpt-oss models; layer-times files; safetensors headers and data; token,
# mask and document .npy files; model directories, single and sharded;
# LoRA bases with FP8 and MXFP4 tensors; PEFT adapters; checkpoints;
# --plan texts)
# answers a few hundred deterministic mutations of the fixtures each with a
# status, never a crash or a hang, and refuses with a message that names the
# file (mpi-tests/fuzz_readers.c: the same inputs every run; long campaigns
# on a sanitizer build are how it is meant to be used, see its head). And
# end to end: `roundpipe train` given a corrupted model directory, data file
# or checkpoint, `plan` a corrupted config.json and `simulate` a corrupted
# layer-times file exits non-zero with one error naming the file and the
# field, and writes no output.
# Ranks: 1 2
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
fuzz="$build/mpi-tests/fuzz_readers"
fix="$src/mpi-tests/fixtures"
n=${RP_FUZZ_INPUTS:-300}

# --- 1. the readers, in process
reader() { # TAG READER SEED-PATH [EXTRA]
  tag=$1; shift
  if TMPDIR="$tmp" "$fuzz" "$1" "$n" 1 "$2" ${3:+"$3"} > "$tmp/fuzz.txt" 2>&1; then ok; else
    bad "1: $tag (exit $?)"; tail -5 "$tmp/fuzz.txt"; fi
}
reader config-qwen3 config "$fix/golden/qwen3/model/config.json"
reader config-gpt-oss config "$fix/gpt-oss/gpt-oss-20b-config.json"
reader config-fp8-moe config "$fix/golden-fp8/moe-kept/model-fp8/config.json"
reader layers layers "$src/bench/gpu/h100-qwen3-1.7b-layers.txt"
reader layers-h200 layers "$src/bench/gpu/h200-qwen3-1.7b-layers.txt"
reader safetensors-mxfp4 safetensors "$fix/gpt-oss/mxfp4/model.safetensors"
reader safetensors-fp8 safetensors "$fix/golden-fp8/qwen3-kept-model/model.safetensors"
reader npy-tokens npy "$fix/golden/qwen3/data.npy"
reader npy-mask npy "$fix/golden/qwen3/mask.npy"
reader dataset dataset "$fix/golden/qwen3/data.npy"
reader documents documents "$fix/golden/llama-packed/documents.npy" \
  "$fix/golden/llama-packed/data.npy"
reader model model "$fix/golden/llama/model"
# the same model sharded: an index naming one shard
mkdir "$tmp/sharded"
cp "$fix/golden/llama/model/config.json" "$tmp/sharded/"
cp "$fix/golden/llama/model/model.safetensors" "$tmp/sharded/model-00001-of-00001.safetensors"
{ printf '{"metadata": {}, "weight_map": {'
  head -c 8192 "$fix/golden/llama/model/model.safetensors" | \
    grep -ao '"[a-z_.0-9]*":{"dtype"' | \
    sed 's/:{"dtype"/: "model-00001-of-00001.safetensors"/' | paste -sd, -
  printf '}}\n'; } > "$tmp/sharded/model.safetensors.index.json"
reader model-sharded model "$tmp/sharded"
reader base-fp8 base "$fix/golden-fp8/qwen3-kept-model"
reader base-fp8-moe base "$fix/golden-fp8/moe-kept/model-fp8"
reader base-mxfp4 base "$fix/golden-gpt-oss/oss-mxfp4/model-mxfp4"
reader peft peft "$fix/golden-lora/qwen3-all/final" "$fix/golden/qwen3/model/config.json"
reader peft-gpt-oss peft "$fix/golden-gpt-oss/oss-lora/final" \
  "$fix/golden-gpt-oss/oss-lora/model/config.json"
# --plan texts for 10 layers, and what is accepted printed and read back the same
printf 'fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2;width=2;keep=1' > "$tmp/plan.txt"
reader plan plan "$tmp/plan.txt" 10

# --- 2. the command line on corrupted files
llama="$fix/golden/llama"
run() { # NP [train options...]: a tiny run of the llama fixture; its output in $tmp/out.txt
  np=$1; shift
  no_grace=""; [ "$np" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $no_grace -np "$np" "$bin" train --progress none --threads 1 --timeout 60 \
    --seq-len 16 --batch-size 4 --microbatches 2 --steps 2 "$@" > "$tmp/out.txt" 2>&1
  rc=$?
}
mark="error:" # how a failure's line starts: train's ranks log it, plan and simulate print it
refused() { # WHAT FILE FIELD [OUTPUT]: exit non-zero, one error naming FILE and FIELD, no OUTPUT
  errors=$(grep -c "$mark" "$tmp/out.txt")
  line=$(grep "$mark" "$tmp/out.txt" | head -1)
  if [ "$rc" -ne 0 ] && [ "$errors" -eq 1 ] && echo "$line" | grep -qF "$2" && \
     echo "$line" | grep -qF "$3" && { [ -z "${4:-}" ] || [ ! -e "$4" ]; }; then ok; else
    bad "2: $1: exit $rc, $errors errors, ${4:+$(ls -d "$4" 2>/dev/null) }'$line'"
    cat "$tmp/out.txt"
  fi
}
# a model whose safetensors file was cut short
cp -r "$llama/model" "$tmp/cut"
head -c 100000 "$llama/model/model.safetensors" > "$tmp/cut/model.safetensors"
run 2 --model "$tmp/cut" --data "$llama/data.npy" --save "$tmp/cut-out" \
  --checkpoint-dir "$tmp/cut-ck"
refused "a truncated model.safetensors" "$tmp/cut/model.safetensors" "data_offsets" \
  "$tmp/cut-out"
[ ! -e "$tmp/cut-ck" ] && ok || bad "2: a checkpoint was written for a refused model"
# token data whose header promises more tokens than the file holds
{ head -c 128 "$llama/data.npy" | sed "s/(1\([0-9]*\),)/(9\1,)/"; } > "$tmp/data.npy"
tail -c +129 "$llama/data.npy" >> "$tmp/data.npy"
run 1 --model "$llama/model" --data "$tmp/data.npy" --save "$tmp/data-out"
refused "a .npy shorter than its shape" "$tmp/data.npy" "shape" "$tmp/data-out"
# a checkpoint whose optimizer state was cut short
run 1 --model "$llama/model" --data "$llama/data.npy" --checkpoint-dir "$tmp/ck"
[ "$rc" -eq 0 ] && ok || { bad "2: the checkpoint to corrupt (exit $rc)"; cat "$tmp/out.txt"; }
ck="$tmp/ck/step-00000002"
reader checkpoint checkpoint "$ck"
head -c 1000 "$ck/optimizer.safetensors" > "$tmp/opt" && cat "$tmp/opt" > "$ck/optimizer.safetensors"
run 1 --model "$llama/model" --data "$llama/data.npy" --steps 3 --resume "$ck" \
  --checkpoint-dir "$tmp/ck" --save "$tmp/ck-out"
refused "a truncated optimizer.safetensors" "$ck/optimizer.safetensors" "bytes" "$tmp/ck-out"
[ ! -e "$tmp/ck/step-00000003" ] && ok || bad "2: a checkpoint was written after a refused resume"
# plan: a config.json whose head count is not a number
sed 's/"num_attention_heads": *[0-9]*/"num_attention_heads": "four"/' \
  "$llama/model/config.json" > "$tmp/config.json"
mark="roundpipe plan:"
"$bin" plan --init-config "$tmp/config.json" --gpus 2 > "$tmp/out.txt" 2>&1; rc=$?
refused "plan: a config.json field of the wrong type" "$tmp/config.json" "num_attention_heads"
# simulate: a layer-times file with a negative time
sed 's/fwd_ms=[0-9.]*/fwd_ms=-1/' "$src/bench/gpu/h100-qwen3-1.7b-layers.txt" > "$tmp/layers.txt"
mark="roundpipe simulate:"
"$bin" simulate --layers "$tmp/layers.txt" > "$tmp/out.txt" 2>&1; rc=$?
refused "simulate: a negative time in a layer-times file" "$tmp/layers.txt" "fwd_ms"
finish
