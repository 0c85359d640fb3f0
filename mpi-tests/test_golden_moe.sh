#!/bin/sh
# Proves: `roundpipe train` reproduces transformers' Qwen3-MoE
# (Qwen3MoeForCausalLM) trained in float64 by tools/make_moe_golden.py: top-k
# routing with and without renormalised weights, per-expert SwiGLU experts,
# dense blocks among MoE blocks (mlp_only_layers, decoder_sparse_step), and
# the auxiliary load-balancing loss, switched on by config.json
# (output_router_logits, router_aux_loss_coef) or by --router-aux-coef (which
# overrides the config's coefficient), taken per microbatch and averaged
# (a microbatch with no counted target still has one): every logged loss,
# router_aux_loss (which must be absent when the aux loss is off), lr and
# grad_norm, and every final tensor within 1e-4 relative, on 1, 2 and 3 ranks
# and with --pipelines 2 where there are 2 microbatches, and on 2 nodes
# (--ranks-per-node) with the aux loss, bit-identical to one node of 2
# pipelines. The saved model is
# written per expert (mlp.experts.E.{gate,up,down}_proj.weight), tensor for
# tensor the reference's. A model stored in transformers 5's fused layout
# (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I])
# trains to byte-identical logs and saved weights as the same model stored
# per expert. Bit-identical results (saved weights, logged loss, aux and
# norms) for 1-4 ranks, other partitions (a forced plan) and recompute
# grains (--recompute layer: every backward forward recomputed layer by
# layer routes exactly as the forward did); the same bits with
# RP_TEST_UNORDERED_DEVICE=1 (CPU executors checked as CUDA ones without
# RP_ALLOW_UNPROVEN_CUDA=copies: the router statistics, kept in a buffer of
# the executor's, are downloaded only once the block's kernel ops have
# finished, never while they may still be writing them). LoRA on experts (issue 15,
# moe-lora): from a non-zero adapter (--lora-init), all-linear adapts q/k/v/o,
# the router (mlp.gate) and every expert's gate/up/down projections, and the
# dense block's MLP, as PEFT does on per-expert Linears in float64: every
# logged loss, aux, lr and grad_norm, and every adapter tensor (saved per
# expert, mlp.experts.E.gate_proj.lora_A.weight [r, H]) within 1e-4 on 1, 2
# and 3 ranks and 2 pipelines, no other tensor saved; bit-identical adapters
# and logs for 1-4 ranks, forced partitions and --recompute layer; a base read
# in place from the fused layout trains the adapters of the per-expert files
# bit for bit; a fresh adapter (B = 0) leaves the model as it is (its first
# loss and aux are the full model's); dropout is refused on the experts
# (nothing written) and taken on the router and attention, bit-identical on
# 1 and 3 ranks; with Python, torch, transformers and peft, the saved adapter
# loads with PeftModel.from_pretrained on the per-expert model and its logits
# equal the --save-merged model's within 1e-5.
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden-moe"
cmp="$build/mpi-tests/golden_compare"
rtol=1e-4
# the metrics without the timing fields
metrics() { sed -e 's/"tokens_per_s":[^,]*,//' -e 's/"time":[^,}]*//' "$1"; }
# the tensor count of a safetensors file (its JSON header's "dtype" entries)
tensors() {
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  head -c $((8 + n)) "$1" | tail -c "$n" | grep -o '"dtype"' | wc -l
}
# train CASE NP P OUT [MODEL [OPTIONS]]: one run of a case; MODEL defaults to
# model/, OPTIONS are added to args.txt's
train() {
  d="$fix/$1"; model="${5:-$d/model}"
  extra="${6:-}"
  [ -f "$d/mask.npy" ] && extra="$extra --loss-mask $d/mask.npy"
  [ -d "$d/lora_init" ] && extra="$extra --lora-init $d/lora_init"
  no_grace=""; [ "$2" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  # shellcheck disable=SC2046,SC2086
  ${MPIRUN:-mpirun} $flags $no_grace -np "$2" "$bin" train --device cpu --model "$model" \
    --data "$d/data.npy" $extra $(cat "$d/args.txt") --pipelines "$3" --progress none \
    --log "$4.jsonl" --save "$4" > "$4.txt" 2>&1
}

for case in moe-m1 moe-mb moe-noaux moe-lora; do
  d="$fix/$case"
  file=model.safetensors
  [ -d "$d/lora_init" ] && file=adapter_model.safetensors
  # ranks:pipelines (moe-m1 has one microbatch)
  specs="1:1 2:1 3:1 2:2"
  [ "$case" = moe-m1 ] && specs="1:1 2:1 3:1"
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
    # golden_compare finds every reference tensor; no others are saved
    want=$(tensors "$d/final/$file"); got=$(tensors "$out/$file")
    if [ "$want" -eq "$got" ]; then ok; else
      bad "$case: $got tensors saved, the reference has $want"; fi
  done
done

# ---- bit-identical for any rank count, partition and recompute grain --------
same() { # same REF OUT: saved weights (or adapters) and metrics (timing fields aside) equal
  f=model.safetensors; [ -f "$1/$f" ] || f=adapter_model.safetensors
  [ -f "$1/$f" ] && cmp -s "$1/$f" "$2/$f" &&
    [ "$(metrics "$1.jsonl")" = "$(metrics "$2.jsonl")" ]
}
ref="$tmp/moe-mb-1-1"
for run in "4 --recompute layer" "2 --plan fwd=0-2,3-4;bwd=5-7,3-4,0-2" \
           "3 --plan fwd=0,1-2,3-5;bwd=6-7,4-5,3,0-2 --recompute layer"; do
  np=${run%% *}; opts=${run#* }
  out="$tmp/moe-mb-bits-$np"
  echo "== moe-mb on $np rank(s) with $opts"
  d="$fix/moe-mb"
  # shellcheck disable=SC2046,SC2086
  if ! ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device cpu --model "$d/model" \
       --data "$d/data.npy" --loss-mask "$d/mask.npy" $(cat "$d/args.txt") $opts \
       --progress none --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1; then
    bad "moe-mb on $np rank(s) with $opts failed"; cat "$out.txt"; continue
  fi
  if same "$ref" "$out"; then ok; else
    bad "moe-mb on $np rank(s) with $opts: not bit-identical to 1 rank"; fi
done
out="$tmp/moe-mb-unordered"
echo "== moe-mb on 2 ranks, RP_TEST_UNORDERED_DEVICE=1"
d="$fix/moe-mb"
# shellcheck disable=SC2046
if RP_TEST_UNORDERED_DEVICE=1 ${MPIRUN:-mpirun} $flags -x RP_TEST_UNORDERED_DEVICE -np 2 "$bin" train \
     --device cpu --model "$d/model" --data "$d/data.npy" --loss-mask "$d/mask.npy" \
     $(cat "$d/args.txt") --progress none --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1 &&
   same "$ref" "$out"; then ok; else
  bad "moe-mb, RP_TEST_UNORDERED_DEVICE=1: failed or not bit-identical to 1 rank"; tail -n 5 "$out.txt"; fi

# ---- several nodes: the aux of every node's microbatches reaches the log ------
# 2 nodes of 1 rank and 2 nodes of 2 ranks (--ranks-per-node) run one
# microbatch each: transformers' figures, and the bits of one node with 2
# pipelines (the per-microbatch aux gathered with the losses)
for run in "2 --ranks-per-node 1" "4 --ranks-per-node 2"; do
  np=${run%% *}; opts=${run#* }
  out="$tmp/moe-mb-nodes-$np"; d="$fix/moe-mb"
  echo "== moe-mb on $np rank(s) with $opts"
  # shellcheck disable=SC2046,SC2086
  if ! ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device cpu --model "$d/model" \
       --data "$d/data.npy" --loss-mask "$d/mask.npy" $(cat "$d/args.txt") $opts \
       --progress none --log "$out.jsonl" --save "$out" > "$out.txt" 2>&1; then
    bad "moe-mb on $np rank(s) with $opts failed"; cat "$out.txt"; continue
  fi
  res=$("$cmp" "$d/expected.jsonl" "$out.jsonl" "$d/final/model.safetensors" \
        "$out/model.safetensors" $rtol)
  echo "$res" | grep -v '^RP-CHECK'
  p=$(echo "$res" | sed -n 's/^RP-CHECK: passed=\([0-9]*\).*/\1/p')
  f=$(echo "$res" | sed -n 's/^RP-CHECK: .*failed=\([0-9]*\)/\1/p')
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
  if same "$tmp/moe-mb-2-2" "$out"; then ok; else
    bad "moe-mb with $opts: not bit-identical to one node with 2 pipelines"; fi
  # node 1 sends its losses and aux: the bytes it sent are the rule's
  sed -n 's/.*node 1 of 2: sent \([0-9]*\) bytes per step to other nodes (the rule.s \([0-9]*\);.*/\1 \2/p' \
    "$out.txt" > "$out.sent"
  read -r sent rule < "$out.sent" && [ "$sent" = "$rule" ] && ok ||
    { bad "moe-mb with $opts: node 1 sent ${sent:-?} bytes a step, the rule says ${rule:-?}"; }
done

# ---- the fused layout: the same bits as the per-expert files -----------------
for spec in 1:1 3:1 2:2; do
  np=${spec%%:*}; P=${spec#*:}
  ref="$tmp/moe-noaux-$np-$P"; out="$tmp/fused-$np-$P"
  echo "== moe-noaux from model-fused/ on $np rank(s), $P pipeline(s)"
  if ! train moe-noaux "$np" "$P" "$out" "$fix/moe-noaux/model-fused"; then
    bad "moe-noaux: training from model-fused/ failed"; cat "$out.txt"; continue
  fi
  if same "$ref" "$out"; then ok; else
    bad "moe-noaux on $np rank(s), $P pipeline(s): model-fused/ and model/ differ"; fi
done

# ---- LoRA on experts: bits, the fused base, a fresh adapter, dropout, PEFT -----
ref="$tmp/moe-lora-1-1"
for run in "4 --recompute layer" "3 --plan fwd=0-1,2;bwd=3-4,2,0-1" \
           "3 --plan fwd=0,1,2;bwd=3-4,2,1,0 --recompute layer"; do
  np=${run%% *}; opts=${run#* }
  out="$tmp/lora-bits-$np"
  echo "== moe-lora on $np rank(s) with $opts"
  if ! train moe-lora "$np" 1 "$out" "" "$opts"; then
    bad "moe-lora on $np rank(s) with $opts failed"; cat "$out.txt"; continue
  fi
  if same "$ref" "$out"; then ok; else
    bad "moe-lora on $np rank(s) with $opts: not bit-identical to 1 rank"; fi
done
# fresh adapters (B = 0, --seed) over the per-expert and the fused files
for m in model model-fused; do
  out="$tmp/lora-$m"
  echo "== moe-noaux from $m/ with a fresh adapter (--lora-rank 2) on 2 ranks"
  train moe-noaux 2 1 "$out" "$fix/moe-noaux/$m" "--lora-rank 2 --lora-alpha 4" ||
    { bad "moe-noaux: LoRA from $m/ failed"; cat "$out.txt"; }
done
if same "$tmp/lora-model" "$tmp/lora-model-fused"; then ok; else
  bad "LoRA over model-fused/ and model/ differ"; fi
# the first step of a fresh adapter is the full model's (moe-mb: aux on)
first() { head -n 1 "$1" | grep -o '"\(loss\|router_aux_loss\)":[^,}]*'; }
out="$tmp/lora-fresh"
if train moe-mb 1 1 "$out" "" "--lora-rank 4" &&
   [ -n "$(first "$out.jsonl")" ] && [ "$(first "$out.jsonl")" = "$(first "$tmp/moe-mb-1-1.jsonl")" ]
then ok; else bad "a fresh adapter's first loss and aux are not the full model's"; fi
# dropout: refused on the experts, taken on the router and attention
out="$tmp/lora-drop"
if train moe-lora 1 1 "$out" "" "--lora-dropout 0.1"; then
  bad "--lora-dropout 0.1 on the experts was taken"
elif grep -q "dropout 0.1 on a mixture of experts' experts is not supported" "$out.txt" &&
     [ ! -e "$out" ] && [ ! -e "$out.jsonl" ]; then ok; else
  bad "dropout on experts: no message naming it, or something written"; cat "$out.txt"; fi
for np in 1 3; do
  train moe-mb "$np" 1 "$tmp/drop-$np" "" \
    "--lora-rank 2 --lora-targets q_proj,o_proj,gate --lora-dropout 0.2 --recompute layer" ||
    { bad "router dropout on $np rank(s) failed"; cat "$tmp/drop-$np.txt"; }
done
train moe-mb 1 1 "$tmp/drop-0" "" "--lora-rank 2 --lora-targets q_proj,o_proj,gate" ||
  bad "moe-mb with LoRA on q_proj,o_proj,gate failed"
if same "$tmp/drop-1" "$tmp/drop-3" &&
   ! cmp -s "$tmp/drop-1/adapter_model.safetensors" "$tmp/drop-0/adapter_model.safetensors"
then ok; else bad "router dropout: not bit-identical on 1 and 3 ranks, or no effect"; fi
# PEFT loads the per-expert adapter; its logits are the merged model's
out="$tmp/lora-peft"
d="$fix/moe-lora"
if train moe-lora 2 1 "$out" "" "--save-merged $out-merged"; then
  python3 "$src/mpi-tests/lora_moe_peft_check.py" "$src" "$d/model" "$out" "$out-merged" \
    "$d/data.npy" 16 2>/dev/null
  case $? in
    0) ok ;;
    77) echo "skipped the PEFT check (Python, torch, transformers or peft missing)" ;;
    *) bad "PEFT's logits differ from the merged MoE model's" ;;
  esac
else
  bad "moe-lora with --save-merged failed"; cat "$out.txt"
fi
# ---- --router-aux-coef 0: no aux loss, where config.json turns it on --------
# moe-mb's model with output_router_logits true (coefficient 0.001) and
# --router-aux-coef 0 trains as the model with it false and no option (no
# router_aux_loss logged); without the option the config's loss is on. Its
# checkpoints say so (options.router_aux_off): a resume must say it again,
# and a checkpoint without the field (written before it) refuses it.
d="$fix/moe-mb"; on="$tmp/aux-config-on"
cp -r "$d/model" "$on"
sed -i 's/"output_router_logits": false/"output_router_logits": true/' "$on/config.json"
auxrun() { # auxrun OUT MODEL [OPTIONS]: moe-mb's options without its --router-aux-coef
  # shellcheck disable=SC2046,SC2086
  ${MPIRUN:-mpirun} $flags -np 1 "$bin" train --device cpu --model "$2" --data "$d/data.npy" \
    --loss-mask "$d/mask.npy" $(sed 's/--router-aux-coef [0-9.e-]*//' "$d/args.txt") \
    --progress none --log "$1.jsonl" --save "$1" ${3:-} > "$1.txt" 2>&1
}
auxrun "$tmp/aux-off" "$d/model" || { bad "moe-mb without the aux loss failed"; cat "$tmp/aux-off.txt"; }
auxrun "$tmp/aux-default" "$on" || bad "moe-mb with the config's aux loss failed"
auxrun "$tmp/aux-zero" "$on" "--router-aux-coef 0 --checkpoint-dir $tmp/aux-ck --checkpoint-every 2 --keep-checkpoints 0" ||
  { bad "--router-aux-coef 0 failed"; cat "$tmp/aux-zero.txt"; }
if same "$tmp/aux-off" "$tmp/aux-zero" && ! grep -q router_aux_loss "$tmp/aux-zero.jsonl" &&
   grep -q router_aux_loss "$tmp/aux-default.jsonl" &&
   ! cmp -s "$tmp/aux-off/model.safetensors" "$tmp/aux-default/model.safetensors"
then ok; else bad "--router-aux-coef 0 did not turn off the config's aux loss"; fi
ck="$tmp/aux-ck/step-00000002"
if auxrun "$tmp/aux-resume-default" "$on" "--resume $ck"; then
  bad "a checkpoint of --router-aux-coef 0 resumed without it"
elif grep -q "options.router_aux_off is true, this run has false" "$tmp/aux-resume-default.txt"
then ok; else bad "no message naming options.router_aux_off"; cat "$tmp/aux-resume-default.txt"; fi
if auxrun "$tmp/aux-resume-zero" "$on" "--router-aux-coef 0 --resume $ck" &&
   cmp -s "$tmp/aux-zero/model.safetensors" "$tmp/aux-resume-zero/model.safetensors" &&
   [ "$(metrics "$tmp/aux-zero.jsonl" | tail -n 3)" = "$(metrics "$tmp/aux-resume-zero.jsonl")" ]
then ok; else
  bad "--router-aux-coef 0 resumed: not the straight run's bits"; cat "$tmp/aux-resume-zero.txt"; fi
sed -i '/"router_aux_off"/d' "$ck/trainer_state.json" # not the last field: the commas hold
checkpoint_remark "$ck" 2
if auxrun "$tmp/aux-resume-old" "$on" "--router-aux-coef 0 --resume $ck"; then
  bad "a checkpoint without options.router_aux_off resumed with --router-aux-coef 0"
elif grep -q '"options" has no "router_aux_off"' "$tmp/aux-resume-old.txt"; then ok; else
  bad "no message naming the missing router_aux_off"; cat "$tmp/aux-resume-old.txt"; fi
finish
