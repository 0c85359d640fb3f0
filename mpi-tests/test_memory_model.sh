#!/bin/sh
# Proves: the device memory `roundpipe plan` counts for a config (its
# "peak_bytes", what the partitioner keeps under --memory-limit-mib) is to
# the byte what `roundpipe train`'s executors allocate ("executor buffers:
# ... (N bytes"), for forced plans of a tied model (the tail holds the
# embedding matrix and its gradient) and an untied one, and with
# --documents (the segment starts), CPU executors, two ranks, and with
# --activation-dtype bf16 (device buffers and host store; no device byte
# more where the jobs' workspaces hold its narrowing buffer); a stage with
# the embedding holds on the device only the rows the batch's tokens can
# read (weights and gradient), never the whole table; with one scratch
# per executor for a job's workspace and gradients (a mixture of experts,
# gpt-oss, a tied model of odd sizes, fp32 and bf16 gradients); the host
# store `roundpipe plan` reports (model state and gradients, activations)
# is what train's node allocates, to the byte, for
# bf16 and fp32, one and two pipelines, and train's start-up line on host
# memory is plan's; the same with kept activations (plan.h's kept: the
# inputs and saved areas in the host store, and no device slot for a kept
# layer of a backward stage, which CPU executors read where it lies), forced
# by keep=N, by --recompute none and under --recompute layer, and none kept
# with --recompute stage; the same with LoRA (device buffers, host store, the
# base converted into the store or mapped from the model's files); the
# same with the dense MLP's chunk forced small (--token-tile 8
# --mlp-chunk-tokens 8: one tile of the microbatch's two), with and without
# LoRA, kept blocks included, and plan counts fewer bytes for it than for
# the whole microbatch; device buffers for a mixture of experts, with and
# without LoRA, with its chunks whole and forced small; LoRA on an FP8
# base (dense and a mixture of experts), read in place and uploaded
# (RP_TEST_UPLOAD_BASE=1): its blocks stay FP8 in the stage buffers and are
# dequantised into one scratch per executor, and an uploaded stage of two
# FP8 blocks holds well under its bf16 twin's bytes; the same where the
# config's modules_to_not_convert keeps projections unquantised (plan counts
# them in the compute dtype, as the files ship them); the same where the
# files hold unquantised tensors in another dtype (F32, F16 norms, routers,
# kept projections, a whole block: converted into the store alone, the base
# still FP8), host store and start-up line included; an FP8 config trained
# without its files (--init-config) counted as its random base in the store; a
# --memory-limit-mib under a plan's need refuses that forced plan
# and lets the planner choose one that fits; a limit no layer fits in
# stops with a message naming the layer; kept activations in the
# executors' own memory (GPUs' way): the pool in plan's count, nothing of
# it in the host store; activation saves through two staging slots (CUDA's
# way under RP_ALLOW_UNPROVEN_CUDA=copies, RP_TEST_SAVE_STAGING=1): the
# slots in plan's count, two fp32 activations more than without; a mixture
# of experts' router statistics and load-balancing gradient in buffers of the
# executor's (GPUs' way, RP_TEST_UNORDERED_DEVICE=1): in plan's count, 3 x E
# fp32 more than without; the evaluation's device buffers (--eval-data) are
# to the byte the count train holds against the device memory limit and
# `plan --eval-data` prints (dense tied and untied, bf16, LoRA in place and
# uploaded, FP8 bases, a mixture of experts, documents), plan's verdict
# counts the larger of them and its plan's buffers, and a limit under that
# count is refused before any step, naming --eval-data and both figures.
set -u
. "$(dirname "$0")/testlib.sh"
data="$src/mpi-tests/fixtures/golden/llama/data.npy" # tokens < 96, both vocabularies
export OMP_NUM_THREADS=1
check() { # config plan [options both take]: train's allocation equals plan's count
  cfg=$1; p=$2; shift 2
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$cfg" --data "${cdata:-$data}" \
    --seq-len "${seq:-16}" --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu \
    --plan "$p" "$@" > "$tmp/train.txt" 2>&1 || { bad "$cfg $p: train failed"; cat "$tmp/train.txt"; return; }
  got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/train.txt")
  want=$("$bin" plan --init-config "$cfg" --seq-len "${seq:-16}" --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "$p" --device cpu --json "$@" | grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9)
  [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "$cfg $p $*: executors allocate '$got' bytes, plan counts '$want'"
}
tied="$src/examples/tiny-config.json"
untied="$src/mpi-tests/fixtures/golden/llama/model/config.json"
for p in "fwd=0-2;bwd=3-5,0-2" "fwd=0,1-4;bwd=5,2-4,0-1" "fwd=0;bwd=1-5,0"; do
  check "$tied" "$p"
done
nl=$(sed -n 's/.*"num_hidden_layers": *\([0-9]*\).*/\1/p' "$untied")
check "$untied" "fwd=0;bwd=1-$((nl + 1)),0"
check "$untied" "fwd=0-$nl;bwd=$((nl + 1)),0-$nl"
# the embedding on the device is the rows the batch can read (4 x 16 = 64
# of its 96), in the weights and the gradient buffer, not the whole table:
# a job of the embedding alone counts 64 x hidden fp32 of each, and train
# allocates what plan counts (above, the same plan)
hid=$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$untied")
"$bin" plan --init-config "$untied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --plan "fwd=0;bwd=1-$((nl + 1)),0" --device cpu --json > "$tmp/p.json"
emb=$(grep -o '"kind": "B", "first": 0, "last": 0, "ms_per_microbatch": [0-9.e+-]*, "weight_bytes": [0-9]*, "grad_bytes": [0-9]*' "$tmp/p.json" |
  sed 's/.*"weight_bytes": \([0-9]*\), "grad_bytes": \([0-9]*\)/\1 \2/')
[ "$emb" = "$((64 * hid * 4)) $((64 * hid * 4))" ] && ok ||
  bad "the embedding's job holds '$emb' bytes of weights and gradient, not 64 rows' $((64 * hid * 4))"
# each job's workspace and gradients in one scratch, sized for the job that
# needs the most of both: a tail of the head alone beside stages of blocks,
# for a mixture of experts, gpt-oss, and a tied model of odd sizes (its
# matrix not a whole number of 16-float pieces), fp32 and bf16 gradients;
# 4 x 4 tokens, fewer than their vocabularies (the embedding's rows)
fx="$src/mpi-tests/fixtures"
seq=4 cdata="$fx/golden-moe/moe-m1/data.npy" check "$fx/golden-moe/moe-m1/model/config.json" "fwd=0-4;bwd=5,0-4"
seq=4 cdata="$fx/golden-moe/moe-m1/data.npy" check "$fx/golden-moe/moe-m1/model/config.json" "fwd=0,1-4;bwd=5,3-4,0-2" --grad-dtype bf16
seq=4 cdata="$fx/golden-gpt-oss/oss-m1/data.npy" check "$fx/golden-gpt-oss/oss-m1/model/config.json" "fwd=0-3;bwd=4,0-3"
seq=4 cdata="$fx/golden/tied-odd/data.npy" check "$fx/golden/tied-odd/model/config.json" "fwd=0-1;bwd=2,0-1" --grad-dtype bf16
# --weight-buffers 1: one buffer of the largest stage's weights, no
# prefetch's second (dense tied and untied, a mixture of experts, an FP8
# base uploaded as FP8), and plan counts that
check "$tied" "fwd=0-2;bwd=3-5,0-2" --weight-buffers 1
check "$untied" "fwd=0;bwd=1-$((nl + 1)),0" --weight-buffers 1
seq=4 cdata="$fx/golden-moe/moe-m1/data.npy" check "$fx/golden-moe/moe-m1/model/config.json" "fwd=0,1-4;bwd=5,3-4,0-2" --weight-buffers 1
"$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 --device cpu \
  --plan "fwd=0-2;bwd=3-5,0-2" --json > "$tmp/p2.json" &&
  "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 --device cpu \
  --plan "fwd=0-2;bwd=3-5,0-2" --json --weight-buffers 1 > "$tmp/p1.json" &&
  two=$(grep -o '"peak_bytes": [0-9]*' "$tmp/p2.json" | head -n 1 | tr -dc 0-9) &&
  one=$(grep -o '"peak_bytes": [0-9]*' "$tmp/p1.json" | head -n 1 | tr -dc 0-9) &&
  w=$(grep -o '"kind": "F", "first": 0, "last": 2, "ms_per_microbatch": [0-9.e+-]*, "weight_bytes": [0-9]*' "$tmp/p2.json" | sed 's/.*"weight_bytes": //') &&
  [ -n "$w" ] && [ "$two" -gt "$one" ] && [ $((two - one)) -ge "$w" ] && ok ||
  bad "--weight-buffers 1: plan counts $one bytes against $two with two buffers (a stage: ${w:-?})"
# --weight-buffers auto (the default) in train: where no plan fits the
# limit with two buffers (a block of 60 MiB, 150 MiB at 128 tokens), one,
# said, within the limit; --weight-buffers 2 is refused there
wide() { ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$src/mpi-tests/fixtures/wide/config.json" \
  --data "$build/examples/data/gnu-licenses.npy" --seq-len 128 --batch-size 1 --microbatches 1 \
  --steps 1 --progress none --device cpu --memory-limit-mib 150 "$@"; }
wide > "$tmp/wa.txt" 2>&1 && grep -q "weight-buffers auto: no plan fits the device memory with two" "$tmp/wa.txt" &&
  got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/wa.txt") &&
  [ -n "$got" ] && [ "$got" -le $((150 << 20)) ] && ok || { bad "--weight-buffers auto under 150 MiB"; cat "$tmp/wa.txt"; }
wide --weight-buffers 2 > "$tmp/w2.txt" 2>&1 && bad "--weight-buffers 2 ran under 150 MiB" ||
  { grep -q "alone needs .* in each of two buffers" "$tmp/w2.txt" && ok || { bad "--weight-buffers 2: its refusal"; cat "$tmp/w2.txt"; }; }
# --documents: the executors also hold the microbatch's segment starts
check "$tied" "fwd=0-2;bwd=3-5,0-2" --documents "$src/mpi-tests/fixtures/golden/llama-packed/documents.npy"

# the host store: plan's figures against train's, and train's start-up
# line on host memory is plan's, word for word
host() { # model (--init-config FILE | --model DIR) dtype pipelines plan [options both take]
  m=$1; dt=$2; np_=$3; p=$4; shift 4
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $m --data "$data" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu --dtype "$dt" \
    --pipelines "$np_" --plan "$p" "$@" > "$tmp/train.txt" 2>&1 ||
    { bad "$m $dt $np_ $*: train failed"; cat "$tmp/train.txt"; return; }
  got=$(sed -n 's/.*host store: .*(\([0-9]*\), \([0-9]*\) bytes).*/\1 \2/p' "$tmp/train.txt")
  "$bin" plan $m --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "$p" --device cpu --dtype "$dt" --json "$@" > "$tmp/p.json"
  want="$(grep -o '"host_param_store_bytes": [0-9]*' "$tmp/p.json" | tr -dc 0-9) $(grep -o '"host_activation_bytes": [0-9]*' "$tmp/p.json" | tr -dc 0-9)"
  [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "$m $dt $np_ pipelines $*: train's host store '$got', plan's '$want'"
  "$bin" plan $m --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "$p" --device cpu --dtype "$dt" "$@" > "$tmp/p.txt"
  said=$(sed -n 's/.*info: \(host memory per node: .*\)/\1/p' "$tmp/train.txt")
  planned=$(sed -n 's/^\(host memory per node: .*\); each rank maps the store.*/\1/p' "$tmp/p.txt")
  [ -n "$said" ] && [ "$said" = "$planned" ] && ok ||
    bad "$m $dt $np_ $*: train says '$said', plan '$planned'"
}
host "--init-config $tied" bf16 1 "fwd=0-2;bwd=3-5,0-2"
host "--init-config $tied" fp32 2 "fwd=0-2;bwd=3-5,0-2;width=1"
host "--init-config $untied" bf16 2 "fwd=0;bwd=1-$((nl + 1)),0;width=1"
grep -q '"device": "cpu", "dtype": "bf16"' "$tmp/p.json" && ok || bad "plan's JSON names no device and dtype"
# kept activations: a backward stage whose top blocks are kept (device
# slots only for the others), every block kept, none kept, layer grain
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3"
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=1"
check "$tied" "fwd=0-3;bwd=4-5,0-3" --recompute stage
check "$tied" "fwd=0-3;bwd=4-5,0-3" --recompute none
host "--init-config $tied" fp32 1 "fwd=0-3;bwd=4-5,0-3;keep=3"
grep -q "kept by 3 blocks" "$tmp/train.txt" && ok || bad "keep=3: train's line names no 3 kept blocks"
host "--init-config $tied" bf16 2 "fwd=0,1-3;bwd=4-5,2-3,0-1;width=1" --recompute none
host "--init-config $untied" fp32 1 "fwd=0,1-2;bwd=3-$((nl + 1)),2,0-1;keep=2" --recompute layer
host "--init-config $tied" fp32 1 "fwd=0-3;bwd=4-5,0-3" --recompute stage
grep -q "kept by" "$tmp/train.txt" && bad "--recompute stage keeps blocks" || ok
# kept in the executors' own memory, as GPUs keep them (a pool per
# executor; RP_TEST_KEEP_ON_EXECUTOR=1 runs that path on CPU executors):
# the pool, each kept block's fp32 input and saved area for every
# microbatch of the executor's pipeline, is in plan's count to the byte;
# the host store holds nothing of them (its activations are stage's), and
# train's line says where they are
export RP_TEST_KEEP_ON_EXECUTOR=1
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3"
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=1"
check "$tied" "fwd=0-3;bwd=4-5,0-3" --recompute none
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3" --activation-dtype bf16
check "$untied" "fwd=0,1-2;bwd=3-$((nl + 1)),2,0-1;keep=1" --recompute layer
host "--init-config $tied" fp32 1 "fwd=0-3;bwd=4-5,0-3;keep=3"
grep -q "kept by 3 blocks instead of recomputed, in the executors' own memory" "$tmp/train.txt" &&
  ok || bad "keep=3 in the pool: train's line does not say the executors keep 3 blocks"
host "--init-config $tied" bf16 2 "fwd=0,1-3;bwd=4-5,2-3,0-1;width=1" --recompute none
hostact() { "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --plan "$1" --device cpu --json | grep -o '"host_activation_bytes": [0-9]*' | tr -dc 0-9; }
a=$(hostact "fwd=0-3;bwd=4-5,0-3;keep=3"); b=$(hostact "fwd=0-3;bwd=4-5,0-3;keep=0")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "the pool's blocks in the host store too: $a against stage's $b bytes"
unset RP_TEST_KEEP_ON_EXECUTOR

# activation saves through staging slots (staged_saves.c: CUDA executors'
# under RP_ALLOW_UNPROVEN_CUDA=copies; RP_TEST_SAVE_STAGING=1 runs that path
# on CPU executors): two slots of a microbatch's activation in fp32 (16
# tokens x hidden), in plan's count to the byte, and exactly those bytes
# more than without them
check "$tied" "fwd=0-2;bwd=3-5,0-2"
plain=$got
export RP_TEST_SAVE_STAGING=1
check "$tied" "fwd=0-2;bwd=3-5,0-2"
staged=$got
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3" --activation-dtype bf16
unset RP_TEST_SAVE_STAGING
thid=$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$tied")
[ -n "$plain" ] && [ -n "$staged" ] && [ $((staged - plain)) -eq $((2 * 16 * thid * 4)) ] && ok ||
  bad "staged saves: $staged bytes against $plain without, not two slots of 16 x $thid fp32 more"

# a mixture of experts' router statistics [2E] and aux gradient [E] in
# buffers of the executor's, as on a GPU (RP_TEST_UNORDERED_DEVICE=1 moves
# them so on CPU executors): in plan's count to the byte, 3 x E fp32 more
moe1="$fx/golden-moe/moe-m1"
seq=4 cdata="$moe1/data.npy" check "$moe1/model/config.json" "fwd=0-4;bwd=5,0-4"
plain=$got
RP_TEST_UNORDERED_DEVICE=1 seq=4 cdata="$moe1/data.npy" check "$moe1/model/config.json" "fwd=0-4;bwd=5,0-4"
E=$(sed -n 's/.*"num_experts": *\([0-9]*\).*/\1/p' "$moe1/model/config.json")
[ -n "$plain" ] && [ -n "$got" ] && [ -n "$E" ] && [ $((got - plain)) -eq $((3 * E * 4)) ] && ok ||
  bad "router statistics moved: $got bytes against $plain without, not 3 x $E fp32 more"

# --activation-dtype bf16 (the block boundaries in bf16 in the arena, and
# every job's workspace at least the buffer they are narrowed in and
# widened from, an embedding job's included): the
# device buffers and the host store as plan counts them, stage and layer
# grain, kept blocks (their inputs in bf16, widened into a device slot),
# a mixture of experts;
# the arena holds fewer bytes than fp32's
check "$tied" "fwd=0-2;bwd=3-5,0-2" --activation-dtype bf16
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3" --activation-dtype bf16
check "$untied" "fwd=0;bwd=1-$((nl + 1)),0" --activation-dtype bf16 --recompute layer
# under --recompute layer a backward job holds one layer's saved area at a
# time, not its stage's (plan counted the stage's sum: 758928 against
# the 714512 bytes allocated)
check "$untied" "fwd=0,1-2;bwd=3-$((nl + 1)),2,0-1" --recompute layer
check "$untied" "fwd=0-2;bwd=3-$((nl + 1)),0-2" --recompute layer
seq=4 cdata="$src/mpi-tests/fixtures/golden-moe/moe-m1/data.npy" check "$src/mpi-tests/fixtures/golden-moe/moe-m1/model/config.json" "fwd=0,1-4;bwd=5,3-4,0-2" --activation-dtype bf16
host "--init-config $tied" fp32 2 "fwd=0,1-3;bwd=4-5,2-3,0-1;width=1" --activation-dtype bf16
host "--init-config $tied" fp32 1 "fwd=0-3;bwd=4-5,0-3;keep=3" --activation-dtype bf16
host "--init-config $untied" bf16 1 "fwd=0,1-2;bwd=3-$((nl + 1)),2,0-1" --recompute layer --activation-dtype bf16
arena() { "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --plan "fwd=0,1-3;bwd=4-5,2-3,0-1" --device cpu --recompute layer --json "$@" |
  grep -o '"host_activation_bytes": [0-9]*' | tr -dc 0-9; }
# the narrowing buffer lies in a job's workspace, free between layer calls:
# where every job's workspace is larger, bf16 activations cost the device nothing
dpeak() { "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --plan "fwd=0-2;bwd=3-5,0-2" --device cpu --json "$@" | grep -o '"peak_bytes": [0-9]*' |
  head -n 1 | tr -dc 0-9; }
d32=$(dpeak --activation-dtype fp32) d16=$(dpeak --activation-dtype bf16)
[ -n "$d16" ] && [ "$d16" = "$d32" ] && ok ||
  bad "plan: bf16 activations need '$d16' device bytes, fp32 '$d32'"
a32=$(arena --activation-dtype fp32) a16=$(arena --activation-dtype bf16)
[ -n "$a16" ] && [ -n "$a32" ] && [ "$a16" -lt "$a32" ] && ok ||
  bad "plan: the arena of bf16 activations '$a16' bytes, of fp32 '$a32'"

# LoRA: the executors' buffers (adapters; CPU executors read the frozen base
# where it lies) and the host store (the adapters' state, and the base when
# it is converted into it: random initialisation) as plan counts them; the
# base mapped from fp32 files for fp32 executors, whose bytes plan counts
# from the files (the start-up line's words equal plan's)
check "$tied" "fwd=0-2;bwd=3-5,0-2" --lora-rank 4
check "$untied" "fwd=0;bwd=1-$((nl + 1)),0" --lora-rank 2 --lora-targets q_proj,down_proj
check "$tied" "fwd=0-2;bwd=3-5,0-2" --lora-rank 4 --lora-dropout 0.1
model="$src/mpi-tests/fixtures/golden/llama/model"
host "--init-config $tied" bf16 1 "fwd=0-2;bwd=3-5,0-2" --lora-rank 4
host "--init-config $untied" fp32 2 "fwd=0;bwd=1-$((nl + 1)),0;width=1" --lora-rank 2
host "--model $model" fp32 1 "fwd=0;bwd=1-$((nl + 1)),0" --lora-rank 4
grep -q 'mapped read-only' "$tmp/train.txt" && ok || bad "fp32 files for fp32 executors: the base not said to be mapped"
grep -q '"host_base_mapped_bytes": [1-9]' "$tmp/p.json" && ok || bad "plan counts no mapped base"

# the dense MLP in chunks of one tile of 8 tokens (microbatches of 16)
small="--token-tile 8 --mlp-chunk-tokens 8"
check "$tied" "fwd=0-2;bwd=3-5,0-2" $small
check "$untied" "fwd=0;bwd=1-$((nl + 1)),0" $small
check "$tied" "fwd=0-2;bwd=3-5,0-2" --lora-rank 4 --lora-dropout 0.1 $small
check "$tied" "fwd=0-3;bwd=4-5,0-3;keep=3" $small
host "--init-config $tied" fp32 1 "fwd=0-3;bwd=4-5,0-3;keep=3" $small
host "--init-config $untied" bf16 2 "fwd=0;bwd=1-$((nl + 1)),0;width=1" --lora-rank 2 $small
peak() { # [options]: plan's peak bytes for the tied config
  "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "fwd=0-2;bwd=3-5,0-2" --device cpu --json "$@" | grep -o '"peak_bytes": [0-9]*' |
    head -n 1 | tr -dc 0-9
}
one=$(peak $small) whole=$(peak --token-tile 8 --mlp-chunk-tokens 16)
[ -n "$one" ] && [ -n "$whole" ] && [ "$one" -lt "$whole" ] && ok ||
  bad "plan: a chunk of one tile counts '$one' bytes, not fewer than the whole microbatch's '$whole'"

# a mixture of experts (dense and expert blocks; the experts' chunked
# buffers and their adapters', model/moe.h), on its own tokens (vocabulary 40)
moe="$src/mpi-tests/fixtures/golden-moe/moe-mb/model/config.json"
dense_data=$data
data="$src/mpi-tests/fixtures/golden-moe/moe-mb/data.npy"
check "$moe" "fwd=0-3;bwd=4-7,0-3"
check "$moe" "fwd=0-3;bwd=4-7,0-3" --lora-rank 2
check "$moe" "fwd=0-3;bwd=4-7,0-3" $small
check "$moe" "fwd=0-3;bwd=4-7,0-3" --lora-rank 2 $small
data=$dense_data

# LoRA on an FP8 base (issue 36), mapped from its files: each block's base is
# dequantised for each use into one scratch per executor in the compute
# dtype, from where it lies (CPU executors) or, uploaded as GPU executors
# take it (RP_TEST_UPLOAD_BASE=1, which plan counts too), from the stage
# buffer, which holds it as FP8 and scales; plan counts what train
# allocates, dense and a mixture of experts, stages of one block and of
# several, and with the upload the jobs' stage buffers hold fewer bytes than
# the same plan's of its bf16 twin (the base saved merged with an adapter of
# zeros: the same tensors, dequantised)
fp8="$src/mpi-tests/fixtures/golden-fp8"
fp8_check() { # upload model data plan: train's allocation equals plan's count
  up=$1; m=$2; d=$3; p=$4
  RP_TEST_UPLOAD_BASE=$up ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np 2 "$bin" train \
    --model "$m" --data "$d" --seq-len 16 --batch-size 4 --microbatches 4 --steps 1 \
    --progress none --device cpu --dtype bf16 --lora-rank 2 --plan "$p" > "$tmp/train.txt" 2>&1 ||
    { bad "FP8 $m upload $up $p: train failed"; cat "$tmp/train.txt"; return; }
  got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/train.txt")
  want=$(RP_TEST_UPLOAD_BASE=$up "$bin" plan --model "$m" --seq-len 16 --batch-size 4 \
    --microbatches 4 --gpus 2 --plan "$p" --device cpu --dtype bf16 --lora-rank 2 --json |
    grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9)
  [ -n "$got" ] && [ "$got" = "$want" ] && ok ||
    bad "FP8 $m upload $up $p: executors allocate '$got' bytes, plan counts '$want'"
}
for up in 0 1; do
  fp8_check $up "$fp8/qwen3-bf16-scales-model" "$dense_data" "fwd=0-1;bwd=2-3,0-1"
  fp8_check $up "$fp8/qwen3-bf16-scales-model" "$dense_data" "fwd=0,1;bwd=2-3,1,0"
  fp8_check $up "$fp8/moe-bf16-scales/model-fp8" "$fp8/moe-bf16-scales/data.npy" "fwd=0,1-3;bwd=4,2-3,0-1"
  # projections its modules_to_not_convert keeps unquantised (bf16 in the
  # files): counted so, not as FP8 (block 1's attention, block 0's up_proj;
  # a MoE block's experts, a dense block's down_proj, another's attention)
  fp8_check $up "$fp8/qwen3-kept-model" "$dense_data" "fwd=0,1;bwd=2-3,1,0"
  fp8_check $up "$fp8/moe-kept/model-fp8" "$fp8/moe-kept/data.npy" "fwd=0,1-3;bwd=4,2-3,0-1"
  fp8_check $up "$fp8/moe-kept/model-fp8" "$fp8/moe-kept/data.npy" "fwd=0-3;bwd=4,3,2,1,0"
  # unquantised tensors the files hold in another dtype than the rest
  # (tools/make_fp8_odd_fixtures.py: a block's norm in F32 and the final one
  # in F16, a projection modules_to_not_convert keeps in F32, a whole block
  # unquantised in F32, a MoE router in F32): the base is still taken as FP8,
  # as plan counts it from the config, those tensors alone converted into
  # the store (they made the executors convert the whole base there, so
  # they allocated less, or more, than plan counted)
  fp8_check $up "$fx/fp8-odd/norms" "$dense_data" "fwd=0,1;bwd=2-3,1,0"
  fp8_check $up "$fx/fp8-odd/kept-f32" "$dense_data" "fwd=0,1;bwd=2-3,1,0"
  fp8_check $up "$fx/fp8-odd/block-f32" "$dense_data" "fwd=0-1;bwd=2-3,0-1"
  fp8_check $up "$fx/fp8-odd/moe-router" "$fp8/moe-bf16-scales/data.npy" "fwd=0,1-3;bwd=4,2-3,0-1"
done
# their host store (the odd tensors) and start-up line are plan's, in bf16
# and fp32 (where they are converted in the compute dtype, not rounded)
host "--model $fx/fp8-odd/norms" bf16 1 "fwd=0,1;bwd=2-3,1,0" --lora-rank 2
host "--model $fx/fp8-odd/block-f32" fp32 2 "fwd=0,1;bwd=2-3,1,0;width=1" --lora-rank 2
grep -q "the frozen base's tensors in another dtype converted into it .* + the frozen base .* (FP8 e4m3 with its block scales" "$tmp/train.txt" && ok ||
  { bad "the odd FP8 base's start-up line"; cat "$tmp/train.txt"; }
# train from an FP8 config without its files (--init-config): the random base
# is in the store, nothing FP8, and train's planner counts it so (it counted
# FP8 blocks and refused a limit its executors' buffers fit in); `plan
# --init-config` counts the FP8 checkpoint the config describes instead
sed '/"quantization_config"/,/}/d' "$fp8/qwen3-bf16-scales-model/config.json" > "$tmp/plain-config.json"
want=$("$bin" plan --init-config "$tmp/plain-config.json" --seq-len 16 --batch-size 4 --microbatches 4 \
  --gpus 2 --plan "fwd=0,1;bwd=2-3,1,0" --device cpu --dtype bf16 --lora-rank 2 --json |
  grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9)
limit=$(awk "BEGIN { printf \"%.9f\", (${want:-0} + 1) / 1048576 }")
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$fp8/qwen3-bf16-scales-model/config.json" \
  --data "$dense_data" --seq-len 16 --batch-size 4 --microbatches 4 --steps 1 --progress none \
  --device cpu --dtype bf16 --lora-rank 2 --plan "fwd=0,1;bwd=2-3,1,0" --memory-limit-mib "$limit" \
  > "$tmp/train.txt" 2>&1 || { bad "FP8 config, --init-config: train refused a limit of $want bytes"; cat "$tmp/train.txt"; }
got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/train.txt")
[ -n "$got" ] && [ "$got" = "$want" ] && ok ||
  bad "FP8 config, --init-config: executors allocate '$got' bytes, its plain twin's plan '$want'"
${MPIRUN:-mpirun} $flags -np 1 "$bin" train --model "$fp8/qwen3-bf16-scales-model" --data "$dense_data" \
  --seq-len 16 --batch-size 4 --steps 1 --lr 0 --lora-rank 2 --progress none --device cpu \
  --save-merged "$tmp/fp8-twin" > "$tmp/twin.txt" 2>&1 || { bad "the bf16 twin was not saved"; cat "$tmp/twin.txt"; }
weights() { # model: the largest stage's weights, two buffers of them (plan's parts)
  RP_TEST_UPLOAD_BASE=1 "$bin" plan --model "$1" --seq-len 16 --batch-size 4 --microbatches 4 \
    --gpus 2 --plan "fwd=0-2;bwd=3,1-2,0" --device cpu --dtype bf16 --lora-rank 2 --json |
    grep -o '"weight_bytes": [0-9]*' | tr -dc '0-9\n' | sort -n | tail -n 1
}
w8=$(weights "$fp8/qwen3-bf16-scales-model") w16=$(weights "$tmp/fp8-twin")
echo "uploaded base, a stage of two blocks: $w8 bytes of weights with FP8, $w16 with its bf16 twin"
[ -n "$w8" ] && [ -n "$w16" ] && [ $((w8 * 10)) -lt $((w16 * 6)) ] && ok ||
  bad "the uploaded FP8 base's stage holds '$w8' bytes, not well below its bf16 twin's '$w16'"

# the evaluation (--eval-data, engine/eval.c: between segments, in place of
# the executor buffers): what its first evaluation allocates ("evaluation
# buffers: ... (N bytes), allocated") is, to the byte, the count train's
# start-up line says and holds against the device memory limit
# (memory_model.h's rp_memory_model_eval) and `plan --eval-data` says: a tied and an untied model, fp32
# and bf16; LoRA read in place (its dropout off: inference) and uploaded
# (RP_TEST_UPLOAD_BASE=1); an FP8 base in place and uploaded (its blocks'
# staging as the bound the executors reserve, BF16 and F32 scales, and a
# mixture of experts); a mixture of experts with and without LoRA;
# documents (--eval-documents: the segment starts)
eval_check() { # upload data "model options" [train's options]
  up=$1; d=$2; m=$3; shift 3
  # shellcheck disable=SC2086
  RP_TEST_UPLOAD_BASE=$up ${MPIRUN:-mpirun} $flags -x RP_TEST_UPLOAD_BASE -np 1 "$bin" train $m \
    --data "$d" --eval-data "$d" --eval-samples 4 --seq-len 16 --batch-size 4 --microbatches 2 \
    --steps 1 --progress none --device cpu "$@" > "$tmp/ev.txt" 2>&1 ||
    { bad "evaluation of $m $* (upload $up): train failed"; cat "$tmp/ev.txt"; return; }
  got=$(sed -n 's/.*evaluation buffers: .*(\([0-9]*\) bytes), allocated.*/\1/p' "$tmp/ev.txt")
  said=$(sed -n 's/.*evaluation (--eval-data): .*(\([0-9]*\) bytes; .*/\1/p' "$tmp/ev.txt")
  # shellcheck disable=SC2086
  want=$(RP_TEST_UPLOAD_BASE=$up "$bin" plan $m --seq-len 16 --batch-size 4 --microbatches 2 \
    --gpus 1 --device cpu --eval-data "$d" "$@" --json | grep -o '"eval_bytes": [0-9]*' | tr -dc 0-9)
  [ -n "$got" ] && [ "$got" = "$said" ] && [ "$got" = "$want" ] && ok ||
    bad "evaluation of $m $* (upload $up): allocated '$got' bytes, counted '$said', plan '$want'"
}
eval_check 0 "$data" "--init-config $tied"
eval_check 0 "$data" "--init-config $untied"
eval_check 0 "$data" "--init-config $tied" --dtype bf16
eval_check 0 "$data" "--init-config $untied --lora-rank 4 --lora-dropout 0.1"
eval_check 1 "$data" "--init-config $untied --lora-rank 4" --dtype bf16
eval_check 1 "$data" "--init-config $tied --lora-rank 2"
for up in 0 1; do
  eval_check $up "$data" "--model $fp8/qwen3-bf16-scales-model --lora-rank 2" --dtype bf16
  eval_check $up "$data" "--model $fp8/qwen3-f32-scales-m1-model --lora-rank 2" --dtype bf16
  eval_check $up "$fp8/moe-bf16-scales/data.npy" "--model $fp8/moe-bf16-scales/model-fp8 --lora-rank 2" --dtype bf16
  eval_check $up "$data" "--model $fx/fp8-odd/norms --lora-rank 2" --dtype bf16
  eval_check $up "$fp8/moe-bf16-scales/data.npy" "--model $fx/fp8-odd/moe-router --lora-rank 2" --dtype bf16
done
eval_check 0 "$fx/golden-moe/moe-mb/data.npy" "--init-config $fx/golden-moe/moe-mb/model/config.json"
eval_check 0 "$fx/golden-moe/moe-mb/data.npy" "--init-config $fx/golden-moe/moe-mb/model/config.json --lora-rank 2"
packed="$fx/golden/llama-packed"
eval_check 0 "$packed/data.npy" "--model $packed/model" --eval-documents "$packed/documents.npy"
eval_check 0 "$packed/data.npy" "--model $packed/model" --documents "$packed/documents.npy" --eval-documents "$packed/documents.npy" --dtype bf16
# a device memory limit the evaluation does not fit is refused before any
# step, naming --eval-data and both figures; one it fits runs. The
# training's buffers must fit the limit too (a forced plan is held to it),
# so the case is one whose evaluation needs more than its training: LoRA
# (the frozen base read where it lies, no gradient for it) with one stage
# weight buffer and one-layer stages, whose training allocates 251664 bytes
# here against the evaluation's 255250 (the whole embedding).
singles_plan="fwd=0,1,2,3,4;bwd=5,4,3,2,1,0"
ev_run() { # limit-MiB out
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --eval-data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu \
    --lora-rank 2 --weight-buffers 1 \
    --plan "$singles_plan" --memory-limit-mib "$1" --log "$tmp/$2.jsonl" --save "$tmp/$2-model" > "$tmp/$2.txt" 2>&1
}
ev_run 64 evfree || { bad "evaluation under 64 MiB: train failed"; cat "$tmp/evfree.txt"; }
evb=$(sed -n 's/.*evaluation (--eval-data): .*(\([0-9]*\) bytes; limit 64.0 MiB).*/\1/p' "$tmp/evfree.txt")
trb=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/evfree.txt")
[ -n "$evb" ] && [ -n "$trb" ] && [ "$trb" -lt $(( evb - 64 )) ] && ok ||
  bad "the evaluation's '$evb' bytes, the executor buffers' '$trb'"
under=$(awk -v b="$evb" 'BEGIN { printf "%.6f", (b - 64) / 1048576 }')
over=$(awk -v b="$evb" 'BEGIN { printf "%.6f", (b + 64) / 1048576 }')
if ev_run "$under" evunder; then bad "an evaluation over --memory-limit-mib $under ran"
else
  grep -q -- "--eval-data: an evaluation needs [0-9.]* MiB of device memory per executor ($evb bytes: .*more than the limit of [0-9.]* MiB ([0-9]* bytes, --memory-limit-mib)" "$tmp/evunder.txt" &&
    ! grep -q '"step"' "$tmp/evunder.jsonl" 2>/dev/null && [ ! -e "$tmp/evunder-model" ] && ok ||
    { bad "the evaluation over the limit: message, or a step ran"; cat "$tmp/evunder.txt"; }
fi
ev_run "$over" evover && grep -q "evaluation buffers: .*($evb bytes), allocated" "$tmp/evover.txt" && ok ||
  { bad "an evaluation within --memory-limit-mib $over"; cat "$tmp/evover.txt"; }
# plan --eval-data: its line says the evaluation's bytes, its verdict
# counts the larger of them and the plan's buffers; refused without a
# config, and --eval-documents without --eval-data
"$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --device cpu --lora-rank 2 --weight-buffers 1 --plan "$singles_plan" --eval-data "$data" > "$tmp/evp.txt" 2>&1
grep -q "^evaluation (--eval-data): [0-9.]* MiB of device memory per executor ($evb bytes), in place of those buffers between segments" "$tmp/evp.txt" &&
  grep -q "^verdict: .*the buffers are the larger of the plan's [0-9.]* MiB and the evaluation's [0-9.]* MiB (--eval-data)" "$tmp/evp.txt" && ok ||
  { bad "plan --eval-data: the evaluation's line or verdict"; cat "$tmp/evp.txt"; }
"$bin" plan --layers "$src/bench/paper/qwen3-1.7b.txt" --eval-data "$data" > "$tmp/evl.txt" 2>&1 &&
  bad "plan --eval-data with a layer-times file accepted" ||
  { grep -q -- "--eval-data applies to a config" "$tmp/evl.txt" && ok || { bad "plan --layers --eval-data: message"; cat "$tmp/evl.txt"; }; }
"$bin" plan --init-config "$tied" --eval-documents "$data" > "$tmp/evd.txt" 2>&1 &&
  bad "plan --eval-documents without --eval-data accepted" ||
  { grep -q -- "--eval-documents needs --eval-data" "$tmp/evd.txt" && ok || { bad "plan --eval-documents alone: message"; cat "$tmp/evd.txt"; }; }

# a limit below the forced plan's need: refused, naming the limit
need=$("$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
  --plan "fwd=0;bwd=1-5,0" --device cpu --json | grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9)
mib=$(( need / 1048576 ))
if "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "fwd=0;bwd=1-5,0" --device cpu --memory-limit-mib "$mib" > "$tmp/p.txt" 2>&1; then
  bad "a forced plan over --memory-limit-mib was accepted"
else grep -q "more than the limit" "$tmp/p.txt" && ok || { bad "refusal message"; cat "$tmp/p.txt"; }; fi
# train holds a forced plan to the limit as plan does: refused before any
# step, naming both figures and the job, nothing saved
if ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu --plan "fwd=0;bwd=1-5,0" \
    --memory-limit-mib "$mib" --log "$tmp/fo.jsonl" --save "$tmp/fo-model" > "$tmp/fo.txt" 2>&1; then
  bad "train ran a forced plan over --memory-limit-mib $mib"
else
  grep -q -- "--plan: its executor buffers need [0-9.]* MiB of device memory per executor ($need bytes; job [0-9]* needs the most), more than the limit of $mib.0 MiB ([0-9]* bytes, --memory-limit-mib)" "$tmp/fo.txt" &&
    ! grep -q '"step"' "$tmp/fo.jsonl" 2>/dev/null && [ ! -e "$tmp/fo-model" ] && ok ||
    { bad "train's refusal of a forced plan over the limit"; cat "$tmp/fo.txt"; }
fi
# the planner's own choice under that limit fits it, and train runs under it
if "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --device cpu --memory-limit-mib "$mib" --json > "$tmp/p.json" 2>&1; then
  peak=$(grep -o '"peak_bytes": [0-9]*' "$tmp/p.json" | head -n 1 | tr -dc 0-9)
  [ "$peak" -le $(( mib * 1048576 )) ] && ok || bad "planner chose $peak bytes over $mib MiB"
else bad "no plan under $mib MiB"; cat "$tmp/p.json"; fi
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
  --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu \
  --memory-limit-mib "$mib" > "$tmp/t.txt" 2>&1 && ok || { bad "train under $mib MiB failed"; cat "$tmp/t.txt"; }
got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/t.txt")
[ -n "$got" ] && [ "$got" -le $(( mib * 1048576 )) ] && ok || bad "train allocated '$got' bytes over $mib MiB"
# a limit no layer fits in: the layer named
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
  --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu \
  --memory-limit-mib 0.5 > "$tmp/t2.txt" 2>&1 && bad "train under 0.5 MiB ran" ||
  { grep -q "alone needs" "$tmp/t2.txt" && ok || { bad "no layer named"; cat "$tmp/t2.txt"; }; }
# train's planner counts what its executors allocate in the run's dtype:
# under --dtype bf16 its need is plan's to the byte (it counted fp32
# weights, the zeroed probe's dtype, before the parameters were attached)
for dt in bf16 fp32; do
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 1 --progress none --device cpu --dtype $dt \
    --memory-limit-mib 1 > "$tmp/t3.txt" 2>&1
  "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --device cpu --dtype $dt --memory-limit-mib 1 > "$tmp/p3.txt" 2>&1
  a=$(sed -n 's/.*alone needs \([0-9]*\) bytes.*/\1/p' "$tmp/t3.txt")
  b=$(sed -n 's/.*alone needs \([0-9]*\) bytes.*/\1/p' "$tmp/p3.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "--dtype $dt: train's planner needs '$a' bytes for a layer, plan '$b'"
done
# what the run maps: while train runs (held in its first checkpoint's
# write), the kernel's record of the ranks' mappings of the host store in
# /dev/shm (/proc/PID/maps), read independently of any formula: both ranks
# map the same two segments, the model state's of exactly the bytes train
# reports (and plan counts), the activations' of those bytes plus the
# events and link boards beside them (a few KiB, not counted), page-rounded
RP_FAULT_CHECKPOINT_HOLD=3 ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" \
  --data "$data" --seq-len 16 --batch-size 4 --microbatches 4 --steps 2 --progress none \
  --device cpu --plan "fwd=0-2;bwd=3-5,0-2" --checkpoint-dir "$tmp/maps-ck" --checkpoint-every 1 \
  > "$tmp/maps-train.txt" 2>&1 &
run=$!
: > "$tmp/maps"
for i in $(seq 1 100); do # until both ranks map both segments
  : > "$tmp/maps"
  for pid in $(pgrep -f -- "--checkpoint-dir $tmp/maps-ck" || true); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = roundpipe ] || continue
    sed -n "s|^\([0-9a-f]*\)-\([0-9a-f]*\) rw-s .*/dev/shm/\(roundpipe-[^ ]*\).*|$pid \3 \1 \2|p" \
      /proc/$pid/maps >> "$tmp/maps" 2>/dev/null
  done
  [ "$(wc -l < "$tmp/maps")" -ge 4 ] && break
  sleep 0.1
done
wait $run || { bad "train for the mappings failed"; cat "$tmp/maps-train.txt"; }
# segment names roundpipe-PID-SEQ-...: SEQ 0 the model state, 1 the activations
seg_bytes() {
  while read -r pid name lo hi; do
    case $name in roundpipe-*-"$1"-*) echo $((0x$hi - 0x$lo)) ;; esac
  done < "$tmp/maps" | sort -u
}
ranks=$(awk '{ print $1 }' "$tmp/maps" | sort -u | wc -l)
names=$(awk '{ print $2 }' "$tmp/maps" | sort -u | wc -l)
reported=$(sed -n 's/.*host store: .*(\([0-9]*\), \([0-9]*\) bytes).*/\1 \2/p' "$tmp/maps-train.txt")
state=${reported% *}; acts=${reported#* }
mapped_state=$(seg_bytes 0); mapped_acts=$(seg_bytes 1)
page=$(getconf PAGESIZE)
[ "$ranks" = 2 ] && [ "$names" = 2 ] && [ -n "$state" ] &&
  [ "$mapped_state" = $(( (state + page - 1) / page * page )) ] &&
  [ "$mapped_acts" -ge "$acts" ] && [ "$mapped_acts" -lt $((acts + 65536)) ] && ok ||
  { bad "train reports '$reported' bytes of host store; the ranks map: $(cat "$tmp/maps" | tr '\n' ';')"; }
# a checkpoint at a forward stage's first layer is that stage's input, the
# previous stage's output: the arena holds it once. Two plans alike but for
# where the backward stages start (at the forward stages' first layers 1
# and 3, or at 2 and 4) differ by those two checkpoints, M buffers each;
# train's allocation is plan's; and both train to the same bits, exact and
# with the lagged optimizer (whose next forward may overwrite an output
# before the backward read it as a checkpoint, unless it waits)
at_fwd="fwd=0,1-2,3-4;bwd=5,3-4,1-2,0"; apart="fwd=0,1-2,3-4;bwd=5,4,2-3,0-1"
acts_of() {
  "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "$1" --device cpu --recompute stage --json | grep -o '"host_activation_bytes": [0-9]*' | tr -dc 0-9
}
hidden=$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$tied")
[ $(( $(acts_of "$apart") - $(acts_of "$at_fwd") )) = $((2 * 4 * 16 * hidden * 4)) ] && ok ||
  bad "activations: $(acts_of "$at_fwd") bytes with the checkpoints at forward stage starts, $(acts_of "$apart") apart"
host "--init-config $tied" fp32 1 "$at_fwd" --recompute stage
# the backward stages' input gradients: each is read by the stage below
# before that stage writes its own, so stages of one parity take turns in
# one buffer: under --recompute layer (a checkpoint for every block either
# way) 4 backward stages and 6 hold the same activations; the 6 train to
# the same bits as the others, exact and lagged
singles="fwd=0,1,2,3,4;bwd=5,4,3,2,1,0"
acts_layer() {
  "$bin" plan --init-config "$tied" --seq-len 16 --batch-size 4 --microbatches 4 --gpus 2 \
    --plan "$1" --device cpu --recompute layer --json | grep -o '"host_activation_bytes": [0-9]*' | tr -dc 0-9
}
[ "$(acts_layer "fwd=0-4;bwd=5,3-4,1-2,0")" = "$(acts_layer "fwd=0-4;bwd=5,4,3,2,1,0")" ] && ok ||
  bad "input gradients: 4 backward stages hold $(acts_layer "fwd=0-4;bwd=5,3-4,1-2,0") bytes, 6 hold $(acts_layer "fwd=0-4;bwd=5,4,3,2,1,0")"
host "--init-config $tied" bf16 2 "$singles;width=1" --recompute layer
for lag in 0 1; do
  for which in at_fwd apart singles; do
    eval "p=\$$which"
    ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
      --batch-size 4 --microbatches 4 --steps 4 --lr 1e-2 --progress none --device cpu --threads 1 \
      --recompute stage --optimizer-lag $lag --plan "$p" --log "$tmp/lag$lag-$which.jsonl" \
      > "$tmp/lag.txt" 2>&1 || { bad "lag $lag $p: train failed"; cat "$tmp/lag.txt"; }
  done
  a=$(cut -d, -f1-6 "$tmp/lag$lag-at_fwd.jsonl"); b=$(cut -d, -f1-6 "$tmp/lag$lag-apart.jsonl")
  c=$(cut -d, -f1-6 "$tmp/lag$lag-singles.jsonl")
  [ "$(echo "$a" | wc -l)" = 4 ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok ||
    bad "lag $lag: the plans' steps differ: $a / $b / $c"
done
# the lagged optimizer lets a forward of the next iteration run while the
# backward still reads: with random delays before every signal (three
# ranks, 5 ms), a writer of a shared buffer that did not wait for its last
# reader changed the losses (seeds 3 and 4, when tried without the waits)
lagged() { # seed delay_us log
  RP_INJECT_DELAY_US=$2 RP_INJECT_SEED=$1 ${MPIRUN:-mpirun} $flags -x RP_INJECT_DELAY_US \
    -x RP_INJECT_SEED -np 3 "$bin" train --init-config "$tied" --data "$data" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 6 --lr 1e-2 --progress none --device cpu --threads 1 \
    --recompute stage --optimizer-lag 1 --plan "$singles" --log "$3" > "$tmp/lag.txt" 2>&1 ||
    { bad "lagged, seed $1: train failed"; cat "$tmp/lag.txt"; }
}
lagged 0 0 "$tmp/calm.jsonl"
for seed in 3 4; do
  lagged $seed 5000 "$tmp/delayed.jsonl"
  [ "$(cut -d, -f1-6 "$tmp/calm.jsonl")" = "$(cut -d, -f1-6 "$tmp/delayed.jsonl")" ] &&
    [ "$(wc -l < "$tmp/calm.jsonl")" = 6 ] && ok || bad "lagged, delays of seed $seed: the steps differ"
done
# The head's chunk on GPUs (issue 38), from the plan's count alone (no GPU
# here: the CUDA back end's sizes): without a memory figure 832 rows of a
# 151936 vocabulary (2^27 logits, in 64s); with one, as many rows as 1/16 of
# it holds in fp32 logits and their bf16 gradient (6 bytes each, in 64s):
# 1728 of 24 GiB, 5888 of 80 GiB, clamped to the microbatch's 4096 tokens;
# --memory-limit-mib gives the chunk --device-memory-mib of the same figure
# gives (train takes one of them, never the share of a GPU some ranks use);
# plan's device count (peak_bytes, a forced plan: the tail job's scratch
# holds the head's workspace) grows by exactly the head's workspace grown;
# CPU executors keep their 64 rows whatever the figure.
cat > "$tmp/vocab.json" << 'J'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
 "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 151936,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
 "tie_word_embeddings": false, "attention_bias": false}
J
head_plan() { # device [options]: plan --json's head and peak fields
  "$bin" plan --init-config "$tmp/vocab.json" --seq-len 4096 --batch-size 1 --microbatches 1 \
    --gpus 1 --plan "fwd=0-1;bwd=2-3,0-1" --recompute stage --device "$@" --json > "$tmp/head.json" 2>&1 ||
    { bad "plan --device $*"; cat "$tmp/head.json"; }
  rows=$(grep -o '"head_chunk_rows": [0-9]*' "$tmp/head.json" | tr -dc 0-9)
  hws=$(grep -o '"head_workspace_bytes": [0-9]*' "$tmp/head.json" | tr -dc 0-9)
  peak=$(grep -o '"peak_bytes": [0-9]*' "$tmp/head.json" | head -n 1 | tr -dc 0-9)
}
head_plan cuda; rows0=$rows hws0=$hws peak0=$peak
[ "$rows0" = 832 ] && ok || bad "no memory figure: head chunk '$rows0' rows, not 832"
head_plan cuda --device-memory-mib 24576
[ "$rows" = 1728 ] && [ "$hws" -gt "$hws0" ] && ok || bad "24 GiB: head chunk '$rows' rows (1728), workspace $hws"
head_plan cuda --device-memory-mib 81920; rows1=$rows hws1=$hws
[ "$rows1" = 4096 ] && ok || bad "80 GiB: head chunk '$rows1' rows, not the microbatch's 4096"
head_plan cuda --memory-limit-mib 81920
[ -n "$rows" ] && [ "$rows" = "$rows1" ] && [ "$hws" = "$hws1" ] && [ "$hws1" -gt "$hws0" ] &&
  [ $((peak - peak0)) = $((hws1 - hws0)) ] && ok ||
  bad "--memory-limit-mib 81920: chunk '$rows' (--device-memory-mib: $rows1), workspace $hws, peak $peak - $peak0 for $hws1 - $hws0"
head_plan cpu --memory-limit-mib 81920
[ "$rows" = 64 ] && ok || bad "CPU executors: head chunk '$rows' rows, not 64"
finish
