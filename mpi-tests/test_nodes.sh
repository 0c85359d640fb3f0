#!/bin/sh
# Proves, for several nodes (--ranks-per-node K: each K consecutive ranks a
# node with its own host store, the nodes joined by MPI messages only), on
# CPU executors:
# - N nodes of P pipelines give the bits of one node of N x P pipelines:
#   logged losses, lr, grad norms and saved weights identical for 2 nodes x 1
#   rank and 2 nodes x 2 ranks against one node of 2 ranks with --pipelines 2
#   (qwen3: tied, masked, clipping), 3 nodes x 1 against one node with
#   --pipelines 3 (llama: untied, biases, no clipping: the fused update),
#   2 nodes x 2 with --pipelines 2 against one node with --pipelines 4;
#   with bf16 compute; with random delays before every signal (three seeds);
#   with the lagged optimizer (--optimizer-lag 1), also with one stage per
#   layer on 2 nodes x 1 (the embedding's update trails the next tail);
# - checkpoints: written from 2 nodes (qwen3, M = 6, 6 pipelines in all,
#   bf16 compute so the master weights are collected from the nodes' slices)
#   and resumed on 1 node and on 3 nodes, the bits of a run that never
#   stopped; --checkpoint-every with --optimizer-lag 1 on several nodes is
#   refused, but a lagged optimizer's checkpoint written on one node (its
#   pending update) resumes on 2 nodes exactly; SIGUSR1 to mpirun stops a
#   run of 2 nodes after the step in progress (long before its next
#   checkpoint step) with a checkpoint and exit 0, and resuming it on one
#   node gives the bits of a run that never stopped; so does SIGTERM to the
#   ranks of 2 nodes of 2 with the lagged optimizer (a pending update);
# - the trace of 2 nodes passes trace_check and names the waits for
#   another node's messages;
# - the multi-node runs of both golden cases match PyTorch (golden_compare,
#   1e-4 relative, as test_golden.sh);
# - packed documents with a validation set (--documents, --eval-data,
#   --eval-every): 2 nodes give the losses, validation losses (every digit)
#   and weights of one node with --pipelines 2, and the validation loss of
#   the packed golden case matches the float64 reference within 1e-5;
# - memory: each node keeps AdamW's m and v and (bf16 compute) the master
#   weights of its slices only: the parameter store of each of 2 nodes holds
#   at least 0.95 x 6 bytes per parameter less than one node's (the ~25M
#   bench model, bf16), as the engine's report says (the store's pages);
# - bad input fails before any work with a message: a K that does not divide
#   the rank count, N x P pipelines that do not divide the microbatches;
# - a stall planted on one node (its forward never signals) is named by that
#   node within its deadline, the other node (a later deadline) stops on its
#   notice at once without an error of its own, and the job exits non-zero;
#   a node that fails (node 0 diverges at step 7) stops the
#   other at once, which says so, in seconds where --timeout is 30, and so
#   does an interrupt of one node's rank (exit 130); a rank
#   killed on one node ends the whole job (mpirun naming the killed rank).
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
fix="$src/mpi-tests/fixtures/golden"
export RP_INJECT_DELAY_US=0 RP_INJECT_SEED=0 RP_FAULT_DROP_SIGNAL=

# run CASE NP OUT [options...]: train, leave OUT.jsonl, OUT.txt and OUT/model.safetensors
run() {
  c=$1; np=$2; out=$3; shift 3
  d="$fix/$c"
  mask=""; [ -f "$d/mask.npy" ] && mask="--loss-mask $d/mask.npy"
  # shellcheck disable=SC2046
  ${MPIRUN:-mpirun} $flags -x RP_INJECT_DELAY_US -x RP_INJECT_SEED -x RP_FAULT_DROP_SIGNAL \
    -np "$np" "$bin" train --device cpu --model "$d/model" --data "$d/data.npy" $mask \
    $(cat "$d/args.txt") --progress none --timeout 60 --log "$out.jsonl" --save "$out" "$@" \
    > "$out.txt" 2>&1
}
# same WHAT REF OUT: identical losses, lr and norms (every digit logged) and weights
same() {
  if cmp -s "$2/model.safetensors" "$3/model.safetensors" && \
     [ "$(cut -d, -f1-4 "$2.jsonl")" = "$(cut -d, -f1-4 "$3.jsonl")" ]; then ok
  else bad "$1: $(basename "$3") differs from $(basename "$2")"; cat "$3.txt"; fi
}
# resumed WHAT REF OUT: as same, OUT's log holding the steps after 3 only
resumed() {
  if cmp -s "$2/model.safetensors" "$3/model.safetensors" && \
     [ "$(tail -n +4 "$2.jsonl" | cut -d, -f1-4)" = "$(cut -d, -f1-4 "$3.jsonl")" ]; then ok
  else bad "$1: $(basename "$3") differs from $(basename "$2")"; cat "$3.txt"; fi
}
# golden CASE OUT: within 1e-4 of PyTorch's run
golden() {
  res=$("$build/mpi-tests/golden_compare" "$fix/$1/expected.jsonl" "$2.jsonl" \
        "$fix/$1/final/model.safetensors" "$2/model.safetensors" 1e-4)
  echo "$res" | grep -q '^RP-CHECK: passed=[1-9][0-9]* failed=0$' && ok || \
    { bad "$1: $(basename "$2") does not match PyTorch"; echo "$res" | grep -v '^RP-CHECK'; }
}

# qwen3 (M = 2): 2 pipelines on one node of 2 ranks = 2 nodes of 1 or 2 ranks
run qwen3 2 "$tmp/q-ref" --pipelines 2 || { bad "qwen3 reference failed"; cat "$tmp/q-ref.txt"; }
run qwen3 2 "$tmp/q-2x1" --ranks-per-node 1 && same "2 nodes x 1" "$tmp/q-ref" "$tmp/q-2x1" || \
  bad "qwen3 2 nodes x 1 failed"
grep -q "2 nodes of 1 ranks" "$tmp/q-2x1.txt" && ok || bad "the start-up does not say 2 nodes"
run qwen3 4 "$tmp/q-2x2" --ranks-per-node 2 && same "2 nodes x 2" "$tmp/q-ref" "$tmp/q-2x2" || \
  bad "qwen3 2 nodes x 2 failed"
golden qwen3 "$tmp/q-2x2"
# the trace of 2 nodes: every rank's tracks, the waits for other nodes named, no overlaps
run qwen3 4 "$tmp/q-tr" --ranks-per-node 2 --trace "$tmp/q-tr.json" && \
  "$build/mpi-tests/trace_check" "$tmp/q-tr.json" 6 > "$tmp/q-tr.check" && \
  grep -q '"node 1: partial gradient sum' "$tmp/q-tr.json" && ok || \
  { bad "the trace of 2 nodes"; cat "$tmp/q-tr.txt" "$tmp/q-tr.check"; }
# delays before every signal, three seeds
for seed in 1 2 3; do
  RP_INJECT_DELAY_US=1000 RP_INJECT_SEED=$seed run qwen3 4 "$tmp/q-inj$seed" --ranks-per-node 2 && \
    same "delays, seed $seed" "$tmp/q-ref" "$tmp/q-inj$seed" || bad "qwen3 delays seed $seed failed"
done
# bf16 compute without clipping (the fused update)
run qwen3 2 "$tmp/q-bf" --pipelines 2 --dtype bf16 --grad-clip 0 || bad "bf16 reference failed"
run qwen3 2 "$tmp/q-bf2" --ranks-per-node 1 --dtype bf16 --grad-clip 0 && \
  same "bf16 2 nodes" "$tmp/q-bf" "$tmp/q-bf2" || bad "bf16 2 nodes failed"
# the lagged optimizer
run qwen3 2 "$tmp/q-lag" --pipelines 2 --optimizer-lag 1 || bad "lagged reference failed"
RP_INJECT_DELAY_US=1000 RP_INJECT_SEED=4 run qwen3 4 "$tmp/q-lag2" --ranks-per-node 2 --optimizer-lag 1 && \
  same "lagged 2 nodes x 2" "$tmp/q-lag" "$tmp/q-lag2" || bad "lagged 2 nodes failed"
# one stage per layer: the embedding's lagged update of step t waits for
# the last backward job of t+1, which follows t+1's tail (a node's
# communication thread summed t+1's embedding gradient, from the tail's
# tied head on, over t's before that update read it: every run differed)
run qwen3 2 "$tmp/q-lag1" --ranks-per-node 1 --optimizer-lag 1 --plan "fwd=0,1,2;bwd=3,2,1,0" && \
  same "lagged 2 nodes x 1, one stage per layer" "$tmp/q-lag" "$tmp/q-lag1" || \
  bad "lagged 2 nodes x 1, one stage per layer, failed"
# 2 nodes x 2 pipelines = 1 node x 4 pipelines (M = 4)
run qwen3 2 "$tmp/q4-ref" --batch-size 4 --microbatches 4 --pipelines 4 || bad "P=4 reference failed"
run qwen3 4 "$tmp/q4-2x2" --batch-size 4 --microbatches 4 --ranks-per-node 2 --pipelines 2 && \
  same "2 nodes x 2 pipelines" "$tmp/q4-ref" "$tmp/q4-2x2" || bad "2 nodes x --pipelines 2 failed"

# llama (M = 3, untied, no clipping): 3 nodes x 1 = one node with --pipelines 3
run llama 1 "$tmp/l-ref" --pipelines 3 || { bad "llama reference failed"; cat "$tmp/l-ref.txt"; }
run llama 3 "$tmp/l-3x1" --ranks-per-node 1 && same "3 nodes x 1" "$tmp/l-ref" "$tmp/l-3x1" || \
  bad "llama 3 nodes failed"
golden llama "$tmp/l-3x1"

# checkpoints across node counts: 6 pipelines in all (2 x 3, 1 x 6, 3 x 2)
six="--batch-size 6 --microbatches 6 --dtype bf16"
run qwen3 1 "$tmp/c-ref" $six --pipelines 6 || { bad "checkpoint reference failed"; cat "$tmp/c-ref.txt"; }
run qwen3 2 "$tmp/c-2" $six --ranks-per-node 1 --pipelines 3 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 3 --keep-checkpoints 0 && same "checkpointing on 2 nodes" "$tmp/c-ref" "$tmp/c-2" || \
  bad "checkpointing run on 2 nodes failed"
[ -f "$tmp/ck/step-00000003/checkpoint.complete" ] && ok || bad "no checkpoint of step 3 from 2 nodes"
run qwen3 1 "$tmp/c-r1" $six --pipelines 6 --resume "$tmp/ck/step-00000003" && \
  resumed "written on 2 nodes, resumed on 1" "$tmp/c-ref" "$tmp/c-r1" || bad "resume on 1 node failed"
run qwen3 3 "$tmp/c-r3" $six --ranks-per-node 1 --pipelines 2 --resume "$tmp/ck/step-00000003" && \
  resumed "written on 2 nodes, resumed on 3" "$tmp/c-ref" "$tmp/c-r3" || bad "resume on 3 nodes failed"
run qwen3 2 "$tmp/c-lag" --ranks-per-node 1 --optimizer-lag 1 --checkpoint-dir "$tmp/ckl" \
  --checkpoint-every 2 && bad "lagged checkpoints on 2 nodes ran" || ok
grep -q "checkpoint-every with --optimizer-lag 1 on 2 nodes" "$tmp/c-lag.txt" && ok || \
  { bad "lagged checkpoints on 2 nodes: no message"; cat "$tmp/c-lag.txt"; }
run qwen3 2 "$tmp/c-lck" --pipelines 2 --optimizer-lag 1 --dtype bf16 --checkpoint-dir "$tmp/ckl1" \
  --checkpoint-every 3 || bad "lagged checkpointing run failed"
run qwen3 2 "$tmp/c-lref" --pipelines 2 --optimizer-lag 1 --dtype bf16 || bad "lagged bf16 reference failed"
run qwen3 2 "$tmp/c-lr2" --ranks-per-node 1 --optimizer-lag 1 --dtype bf16 \
  --resume "$tmp/ckl1/step-00000003" && resumed "a pending update resumed on 2 nodes" "$tmp/c-lref" \
  "$tmp/c-lr2" || bad "lagged checkpoint resumed on 2 nodes failed"

# SIGUSR1: on several nodes too the run stops after the step in progress.
# 60 steps, a periodic checkpoint at 30: the signal comes once 2 steps are
# logged, and the signalled runs (3 ms before every signal) take about 0.1 s
# a step here, so 27 steps (some 3 s) lie between the signal and the
# periodic checkpoint; all the check needs is a stop before it. The
# uninterrupted references and the resumed runs (a third of the 200 steps
# this took before) are most of the test's time.
long="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 64 --batch-size 8 --microbatches 4 --steps 60 --lr 3e-3 --seed 2 --device cpu --progress none --timeout 60"
${MPIRUN:-mpirun} $flags -np 1 "$bin" train $long --pipelines 2 --log "$tmp/long.jsonl" --save "$tmp/long" \
  > "$tmp/long.txt" 2>&1 || { bad "long reference failed"; cat "$tmp/long.txt"; }
RP_INJECT_DELAY_US=3000 RP_INJECT_SEED=1 ${MPIRUN:-mpirun} $flags -x RP_INJECT_DELAY_US -x RP_INJECT_SEED \
  -np 2 "$bin" train $long --ranks-per-node 1 --checkpoint-dir "$tmp/cks" --checkpoint-every 30 \
  --log "$tmp/sig.jsonl" --save "$tmp/unused" > "$tmp/sig.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/sig.jsonl" 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.1; i=$((i + 1)); done
kill -s USR1 $pid
wait $pid; rc=$?
k=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of 60.*/\1/p' "$tmp/sig.txt")
[ $rc -eq 0 ] && [ -n "$k" ] && [ "$k" -lt 30 ] && [ "$(wc -l < "$tmp/sig.jsonl")" -eq "$k" ] && \
  [ -f "$tmp/cks/step-$(printf %08d "$k")/checkpoint.complete" ] && ok || \
  { bad "SIGUSR1 on 2 nodes: exit $rc, stopped after step '$k'"; cat "$tmp/sig.txt"; }
echo "SIGUSR1 on 2 nodes: stopped after step $k"
${MPIRUN:-mpirun} $flags -np 1 "$bin" train $long --pipelines 2 --checkpoint-dir "$tmp/cks" --resume auto \
  --log "$tmp/sigr.jsonl" --save "$tmp/sigr" > "$tmp/sigr.txt" 2>&1 && \
  cmp -s "$tmp/long/model.safetensors" "$tmp/sigr/model.safetensors" && ok || \
  { bad "SIGUSR1 on 2 nodes: the resumed run differs"; cat "$tmp/sigr.txt"; }

# SIGTERM to the ranks of 2 nodes of 2 with the lagged optimizer: a pending
# update in the checkpoint, resumed on one node exactly
lag="$long --optimizer-lag 1"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $lag --pipelines 2 --save "$tmp/lagref" > "$tmp/lagref.txt" 2>&1 || \
  { bad "lagged long reference failed"; cat "$tmp/lagref.txt"; }
RP_INJECT_DELAY_US=3000 RP_INJECT_SEED=2 ${MPIRUN:-mpirun} $flags -x RP_INJECT_DELAY_US -x RP_INJECT_SEED \
  -np 4 "$bin" train $lag --ranks-per-node 2 --checkpoint-dir "$tmp/ckterm" --log "$tmp/term.jsonl" \
  > "$tmp/term.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/term.jsonl" 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.1; i=$((i + 1)); done
pkill -TERM -f "^$bin train .*ckterm"
wait $pid; rc=$?
k=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) of 60.*/\1/p' "$tmp/term.txt")
[ $rc -eq 0 ] && [ -n "$k" ] && [ -f "$tmp/ckterm/step-$(printf %08d "$k")/checkpoint.complete" ] && \
  grep -q pending_update "$tmp/ckterm/step-$(printf %08d "$k")/trainer_state.json" && ok || \
  { bad "SIGTERM on 2 nodes, lagged: exit $rc, stopped after step '$k'"; cat "$tmp/term.txt"; }
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $lag --pipelines 2 --checkpoint-dir "$tmp/ckterm" --resume auto \
  --save "$tmp/termr" > "$tmp/termr.txt" 2>&1 && \
  cmp -s "$tmp/lagref/model.safetensors" "$tmp/termr/model.safetensors" && ok || \
  { bad "SIGTERM on 2 nodes, lagged: the resumed run differs"; cat "$tmp/termr.txt"; }

# packed documents and evaluation on 2 nodes
g="$src/mpi-tests/fixtures/golden/qwen3-packed"
pk() { # NP OUT [options]
  np=$1; out=$2; shift 2
  # shellcheck disable=SC2046
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --device cpu --threads 1 --timeout 60 --progress none \
    --model "$g/model" --data "$g/data.npy" --loss-mask "$g/mask.npy" --documents "$g/documents.npy" \
    $(cat "$g/args.txt") --eval-data "$g/data.npy" --eval-mask "$g/mask.npy" \
    --eval-documents "$g/documents.npy" --eval-every 2 --log "$out.jsonl" --save "$out" "$@" > "$out.txt" 2>&1
}
pk 2 "$tmp/pk1" --pipelines 2 || { bad "packed reference failed"; cat "$tmp/pk1.txt"; }
notime() { sed 's/,"tokens_per_s":[^,]*,"time":[^}]*//' "$1"; }
if pk 2 "$tmp/pk2" --ranks-per-node 1 && cmp -s "$tmp/pk1/model.safetensors" "$tmp/pk2/model.safetensors" &&
   [ "$(notime "$tmp/pk1.jsonl")" = "$(notime "$tmp/pk2.jsonl")" ]; then ok
else bad "packed documents with evaluation: 2 nodes differ from one"; cat "$tmp/pk2.txt"; fi
grep -q '"eval_loss"' "$tmp/pk2.jsonl" && ok || bad "packed on 2 nodes: no evaluation line"
want=$(sed -n 's/.*"eval_loss": \([^,]*\),.*/\1/p' "$g/final/eval_all.json")
got=$(grep '"eval_loss"' "$tmp/pk2.jsonl" | tail -1 | sed -n 's/.*"eval_loss":\([^,]*\),.*/\1/p')
awk -v a="$got" -v w="$want" 'BEGIN { d = a - w; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * w) }' && ok || \
  bad "packed on 2 nodes: eval_loss $got, the reference $want"

# memory: each node's parameter store holds its slices' optimizer state only
mem() { # NP K OUT: one step of the ~25M bench model in bf16
  ${MPIRUN:-mpirun} $flags -np "$1" "$bin" train --device cpu --threads 1 --progress none \
    --init-config "$src/bench/qwen3-25m-config.json" --data "$build/examples/data/gnu-licenses.npy" \
    --seq-len 16 --batch-size 2 --microbatches 2 --steps 1 --dtype bf16 --ranks-per-node "$2" > "$3" 2>&1
}
mem 2 2 "$tmp/mem1.txt" && mem 2 1 "$tmp/mem2.txt" || { bad "memory runs failed"; cat "$tmp/mem1.txt" "$tmp/mem2.txt"; }
held() { sed -n "s/.*node $2 of .*parameter store \([0-9.]*\) of .*/\1/p" "$1"; }
params=$(sed -n 's/.*the model.s \([0-9]*\) fp32 parameter bytes.*/\1/p' "$tmp/mem1.txt" | head -1)
one=$(held "$tmp/mem1.txt" 0); n0=$(held "$tmp/mem2.txt" 0); n1=$(held "$tmp/mem2.txt" 1)
echo "parameter store in memory: one node $one MiB; 2 nodes $n0 and $n1 MiB ($params fp32 parameter bytes)"
awk -v one="$one" -v a="$n0" -v b="$n1" -v p="$params" 'BEGIN {
  need = 0.95 * 6 * (p / 4) / 1048576; exit !(one - a >= need && one - b >= need) }' && ok || \
  bad "2 nodes keep more than their half of m, v and master ($one -> $n0, $n1 MiB)"

# bad input: before any work, a message naming the option
run qwen3 3 "$tmp/bad-k" --ranks-per-node 2 && bad "--ranks-per-node 2 of 3 ranks ran" || ok
grep -q "ranks-per-node 2 does not divide the 3 ranks" "$tmp/bad-k.txt" && ok || \
  { bad "K not dividing: no message"; cat "$tmp/bad-k.txt"; }
run qwen3 4 "$tmp/bad-m" --ranks-per-node 2 --pipelines 2 && bad "4 pipelines over 2 microbatches ran" || ok
grep -q "2 nodes x --pipelines 2 = 4 pipelines must divide the 2 microbatches" "$tmp/bad-m.txt" && ok || \
  { bad "N x P not dividing M: no message"; cat "$tmp/bad-m.txt"; }
[ -e "$tmp/bad-m/model.safetensors" ] && bad "bad input wrote a model" || ok

# a stall on node 0 (its forward stage 0 never signals microbatch 0):
# node 0 names the event it waits for within its deadline, and node 1 stops
# on its notice at once. Node 1's deadline is later (20 s, node 0's 2 s):
# its own executor waits from the same moment for what node 0's gradients
# would give (the embedding's rows), so with equal deadlines whichever node
# passed its first, by milliseconds, named its wait and stopped the other
# (quiet: an echo), and node 0 named nothing one run in three. The clock
# starts once training is under way: a start-up on a loaded machine is not
# what the bound is about.
d="$fix/qwen3"
common="train --device cpu --model $d/model --data $d/data.npy --loss-mask $d/mask.npy $(cat "$d/args.txt") --progress none --ranks-per-node 1"
# shellcheck disable=SC2086
${MPIRUN:-mpirun} $flags -np 1 -x RP_FAULT_DROP_SIGNAL=fwd_out:0:0 "$bin" $common --timeout 2 : \
  -np 1 -x RP_FAULT_DROP_SIGNAL= "$bin" $common --timeout 20 > "$tmp/stall.txt" 2>&1 &
job=$!
i=0; while ! grep -q "info: host store:" "$tmp/stall.txt" && kill -0 $job 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
start=$(date +%s)
wait $job
rc=$?
end=$(date +%s)
[ $rc -ne 0 ] && ok || bad "stall: exit 0"
[ $((end - start)) -le 12 ] && ok || bad "stall: took $((end - start)) s with --timeout 2 on node 0"
grep -q "^\[roundpipe 0\] error: node 0: rank 0, job .*waiting for event fwd_out\[stage 0" \
  "$tmp/stall.txt" && ok || { bad "stall: node 0 does not name its event"; cat "$tmp/stall.txt"; }
# node 1 stopped on node 0's notice, before its own deadline, and never
# echoes node 0's failure
! grep -q "^\[roundpipe 1\] error\|stopped because\|see its message" "$tmp/stall.txt" && ok ||
  { bad "stall: node 1 reports an error of its own or an echo"; cat "$tmp/stall.txt"; }

# a node that fails tells the others at once: node 0 diverges at step 7
# (--lr 1e3 without clipping); node 1, whose waits are for node 0's
# messages, stops with it within seconds (it used to wait for --timeout 30),
# and only node 0 names the error: one error line, node 1 does not echo it
tiny="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2"
start=$(date +%s)
# shellcheck disable=SC2086
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tiny --steps 12 --lr 1e3 --grad-clip 0 \
  --ranks-per-node 1 --timeout 30 --progress none --threads 1 --device cpu > "$tmp/diverge.txt" 2>&1
rc=$?
end=$(date +%s)
[ $rc -ne 0 ] && [ $((end - start)) -le 12 ] && ok ||
  bad "divergence on node 0: exit $rc after $((end - start)) s with --timeout 30"
grep -q "^\[roundpipe 0\] error: node 0: step 7: .*training diverged" "$tmp/diverge.txt" && ok ||
  { bad "divergence on node 0: not named"; cat "$tmp/diverge.txt"; }
[ "$(grep -c "error:" "$tmp/diverge.txt")" = 1 ] &&
  ! grep -q "timed out\|did not answer\|deadline" "$tmp/diverge.txt" && ok ||
  { bad "divergence on node 0: not one error line, from node 0"; cat "$tmp/diverge.txt"; }
# and so does an interrupt of node 0 alone (SIGINT to its rank)
# shellcheck disable=SC2086
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $tiny --steps 1000000 --ranks-per-node 1 \
  --timeout 30 --progress none --threads 1 --device cpu --log "$tmp/int.jsonl" > "$tmp/int.txt" 2>&1 &
job=$!
# (past step 2, the re-plan between segments: a signal there is agreed on instead)
i=0; while [ "$(cat "$tmp/int.jsonl" 2>/dev/null | wc -l)" -lt 5 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
r0=""
for p in $(pgrep -P $job); do
  [ "$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = 0 ] && r0=$p
done
start=$(date +%s)
[ -n "$r0" ] && kill -INT "$r0"
wait $job
rc=$?
end=$(date +%s)
[ -n "$r0" ] && [ $rc -eq 130 ] && [ $((end - start)) -le 12 ] && ok ||
  bad "SIGINT on node 0: exit $rc after $((end - start)) s with --timeout 30 (rank 0: '$r0')"
grep -q "^\[roundpipe 0\] interrupted at step [0-9]* of 1000000 (SIGINT)" "$tmp/int.txt" &&
  ! grep -q "error:" "$tmp/int.txt" && ok ||
  { bad "SIGINT on node 0: messages"; cat "$tmp/int.txt"; }

# a rank killed on node 1 ends the whole job
# shellcheck disable=SC2086
${MPIRUN:-mpirun} $flags -np 4 "$bin" $common --timeout 30 --steps 100000 --ranks-per-node 2 \
  > "$tmp/kill.txt" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 100); do
  # this job's ranks (mpirun's children: another test's ranks may run
  # the same options), the fourth started
  victim=$(pgrep -P "$job" | sort -n | sed -n 4p)
  [ -n "$victim" ] && grep -q "executor buffers" "$tmp/kill.txt" && break
  sleep 0.2
done
start=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
wait $job
rc=$?
end=$(date +%s)
[ -n "$victim" ] && [ $rc -ne 0 ] && ok || bad "kill: the job exited $rc (victim '$victim')"
grep -q "exited on signal 9 (Killed)" "$tmp/kill.txt" && ok || { bad "kill: no message"; cat "$tmp/kill.txt"; }
[ $((end - start)) -le 40 ] && ok || bad "kill: the job took $((end - start)) s to end"
finish
