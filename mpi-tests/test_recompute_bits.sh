#!/bin/sh
# Proves (CPU executors; 1 and 2 ranks, and 2 nodes of 1 rank): recompute
# never changes bits: --recompute none (every block below the tail keeps
# its activations), auto (as many as fit), stage and layer give the same
# per-step losses and gradient norms and the same saved model, byte for
# byte, on the dense Qwen3 golden model with its loss mask, with
# --documents (qwen3-packed), with LoRA adapters (dropout on), and on a
# mixture of experts with its load-balancing loss; forced plans that keep
# part of a backward stage (keep=N: its top blocks read, the rest
# recomputed from the stage's checkpoint) and keep under layer-grain
# recompute give the same bits too; all of it again with the kept
# activations in the executors' own memory (GPUs' way), where a forced
# keep of a block whose two jobs run on different executors is refused.
# One weight buffer per executor (--weight-buffers 1) gives the same bits.
# none and auto really keep (train's
# host-memory line names the kept blocks, stage none; auto's line says how
# many it keeps within MemAvailable); auto keeps nothing under a
# --host-memory-limit-mib that leaves no room (and says so), and none is
# refused there with a message naming the limit.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
g="$src/mpi-tests/fixtures/golden"
. "$(dirname "$0")/bits_lib.sh"
kept() { # OUT N: train's host-memory line says N blocks kept (0: none named)
  if [ "$2" = 0 ]; then ! grep -q "kept by" "$tmp/$1.txt"; else grep -q "kept by $2 block" "$tmp/$1.txt"; fi
}
modes() { # NAME NP [options...]: the four modes, the same bits
  name=$1; np=$2; shift 2
  for r in stage layer none auto; do run "$np" "$name-$r" --recompute $r "$@"; done
  for r in layer none auto; do same "$name-stage" "$name-$r" "$name: --recompute $r against stage"; done
  kept "$name-stage" 0 && kept "$name-layer" 0 && grep -q "kept by [1-9]" "$tmp/$name-none.txt" &&
    grep -q "kept by [1-9]" "$tmp/$name-auto.txt" && ok || bad "$name: none and auto do not keep, or stage/layer do"
}
q="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy $(cat "$g/qwen3/args.txt")"
modes qwen3 2 $q
run 1 qwen3-1 $q --recompute auto
same qwen3-stage qwen3-1 "qwen3: auto on 1 rank against stage on 2"
# 2 nodes of 1 rank (2 pipelines in all: their bits are 2 pipelines')
modes nodes 2 $q --ranks-per-node 1
p="--model $g/qwen3-packed/model --data $g/qwen3-packed/data.npy --loss-mask $g/qwen3-packed/mask.npy --documents $g/qwen3-packed/documents.npy $(cat "$g/qwen3-packed/args.txt")"
modes packed 2 $p
modes lora 2 $q --lora-rank 2 --lora-dropout 0.1
m="$src/mpi-tests/fixtures/golden-moe/moe-mb"
moe="--model $m/model --data $m/data.npy --loss-mask $m/mask.npy $(cat "$m/args.txt")"
modes moe 2 $moe
# part of a backward stage kept: blocks 3-4 read, 1-2 recomputed from layer 1's checkpoint
run 2 moe-part $moe --plan "fwd=0,1-3,4;bwd=5-7,1-4,0;keep=2"
kept moe-part 2 && ok || bad "keep=2: not 2 blocks kept"
same moe-stage moe-part "moe: keep=2 of a backward stage"
run 3 moe-part-layer $moe --plan "fwd=0-2,3-4;bwd=5-7,3-4,0-2;keep=3" --recompute layer
same moe-stage moe-part-layer "moe: keep=3 under --recompute layer"
# kept in the executors' own memory, as GPUs keep them (a pool per
# executor, host_memory.h's rp_kept_on_executor; RP_TEST_KEEP_ON_EXECUTOR=1
# runs that path on CPU executors): the same bits as stage for none, auto,
# a forced part of a backward stage, layer grain, bf16 activations,
# documents, LoRA, a mixture of experts, 1 rank and 2 nodes; train's
# host-memory line says where they lie; a forced keep whose block's
# forward and backward jobs run on different executors is refused
exe() { # NP NAME [options...]: a run keeping in the executors' pool
  export RP_TEST_KEEP_ON_EXECUTOR=1
  run "$@"
  unset RP_TEST_KEEP_ON_EXECUTOR
}
for r in none auto; do
  exe 2 pool-$r $q --recompute $r
  same qwen3-stage pool-$r "pool: --recompute $r against stage"
  grep -q "kept by [1-9] blocks\? instead of recomputed, in the executors' own memory" "$tmp/pool-$r.txt" &&
    ok || { bad "pool $r: its host-memory line does not say the executors keep them"; cat "$tmp/pool-$r.txt"; }
done
exe 1 pool-1 $q --recompute none
same qwen3-stage pool-1 "pool: none on 1 rank against stage on 2"
exe 2 pool-bf16 $q --recompute none --activation-dtype bf16
run 2 stage-bf16 $q --recompute stage --activation-dtype bf16
same stage-bf16 pool-bf16 "pool: bf16 activations"
exe 2 pool-nodes $q --recompute none --ranks-per-node 1
same nodes-stage pool-nodes "pool: 2 nodes"
exe 2 pool-packed $p --recompute none
same packed-stage pool-packed "pool: --documents"
exe 2 pool-lora $q --lora-rank 2 --lora-dropout 0.1 --recompute none
same lora-stage pool-lora "pool: LoRA"
exe 2 pool-moe $moe --recompute none
same moe-stage pool-moe "pool: moe"
# two pipelines on one rank (its executor runs both, one after the other,
# the pool's slots shared by their microbatches in turn): 2 pipelines' bits
run 1 p2-stage $q --recompute stage --pipelines 2
exe 1 pool-p2 $q --recompute none --pipelines 2
same p2-stage pool-p2 "pool: two pipelines on one rank"
grep -q "kept by [1-9] block" "$tmp/pool-p2.txt" && ok || bad "pool-p2 keeps no block"
exe 2 pool-moe-part $moe --plan "fwd=0,1-2,3-4;bwd=5-7,1-4,0;keep=2"
same moe-stage pool-moe-part "pool: moe keep=2 of a backward stage"
exe 2 pool-moe-layer $moe --plan "fwd=0-2,3-4;bwd=5-7,3-4,0-2;keep=3" --recompute layer
same moe-stage pool-moe-layer "pool: moe keep=3 under --recompute layer"
RP_TEST_KEEP_ON_EXECUTOR=1 ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --device cpu $moe \
  --plan "fwd=0-4;bwd=5-7,3-4,0-2;keep=4" > "$tmp/misplaced.txt" 2>&1 && bad "a kept block on two executors ran" ||
  { grep -q "keep=4, but block 2's forward (job 0) and backward (job 3) run on different executors of a pipeline of width 2.* at most 2 blocks" "$tmp/misplaced.txt" &&
      ok || { bad "a kept block on two executors: its message"; cat "$tmp/misplaced.txt"; }; }
# one weight buffer per executor (--weight-buffers 1: no upload overlaps a
# job) never changes the bits either
run 2 wb1 $q --recompute stage --weight-buffers 1
same qwen3-stage wb1 "--weight-buffers 1"
run 3 wb1-moe $moe --recompute stage --weight-buffers 1
same moe-stage wb1-moe "moe, --weight-buffers 1 on 3 ranks"
# no room: auto keeps none, none is refused naming the limit
run 2 tight $q --host-memory-limit-mib 1
kept tight 0 && same qwen3-stage tight "auto without room" || bad "auto kept blocks over the limit"
grep -q "recompute auto: 0 of the [1-9] blocks below the tail keep their activations, .* the limit: 1.0 MiB, --host-memory-limit-mib" "$tmp/tight.txt" &&
  grep -q "recompute auto: [1-9] of the [1-9] blocks below the tail keep their activations, .* MiB, MemAvailable" "$tmp/qwen3-auto.txt" &&
  ok || { bad "auto: its line does not say how many blocks it keeps within which limit"; cat "$tmp/tight.txt"; }
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --device cpu $q --recompute none \
  --host-memory-limit-mib 1 > "$tmp/refused.txt" 2>&1 && bad "none over the limit ran" ||
  { grep -q "recompute none: keeping the activations of all .* more than the 1.0 MiB of --host-memory-limit-mib" "$tmp/refused.txt" && ok || { bad "none over the limit: its message"; cat "$tmp/refused.txt"; }; }
finish
