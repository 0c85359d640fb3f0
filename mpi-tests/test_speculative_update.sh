#!/bin/sh
# Proves (CPU executors; 1, 2 and 3 ranks, and 2 nodes of 1 rank): the
# speculative update (--speculative-update on: each block's AdamW as soon
# as its gradient is summed, kept when the global norm does not clip, else
# restored from its backup and redone) gives the same per-step losses and
# gradient norms and the same saved model, byte for byte, as off, on the
# dense Qwen3 golden model: with a clip that never clips (every step a
# hit), one that always clips (every step a miss) and its own 4.0, where
# some steps clip and some do not (the run's summary counts both); with a
# step that counts no target (no update: not speculated either); on 1
# and 3 ranks, on 2 nodes, with LoRA adapters, on the mixture of experts,
# resumed from a checkpoint in the middle, stopped by SIGUSR1 and resumed,
# stopped in a step whose speculated updates are abandoned before its norm
# (RP_FAULT_STOP_BEFORE_NORM: restored, the stop's checkpoint that of a run
# that never speculated), and under the race injector. A layer summed once everything below it has
# landed (the backward over) is not speculated: it updates after the norm
# (the trace and the summary show it; the same bits).
# It is on only when asked on CPU executors (auto: off, said on the
# start-up line), says its backup's size there and in the host-memory
# line (roundpipe plan counts the same), traces its spans, and `on` is refused when the backup does not fit
# --host-memory-limit-mib, with a message naming the limit.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
g="$src/mpi-tests/fixtures/golden"
. "$(dirname "$0")/bits_lib.sh"
counts() { # OUT HITS MISSES: the summary's counts ("+" : at least one)
  line=$(grep "speculative update: [0-9]* hits" "$tmp/$1.txt")
  h=$(echo "$line" | sed 's/.*update: \([0-9]*\) hits.*/\1/')
  m=$(echo "$line" | sed 's/.* \([0-9]*\) misses.*/\1/')
  { [ "$2" = + ] && [ "${h:-0}" -gt 0 ] || [ "$2" = "${h:-x}" ]; } &&
    { [ "$3" = + ] && [ "${m:-0}" -gt 0 ] || [ "$3" = "${m:-x}" ]; } &&
    ok || { bad "$1: expected $2 hits and $3 misses: ${line:-no summary}"; }
}
pair() { # NAME NP [options...]: off and on, the same bits
  name=$1; np=$2; shift 2
  run "$np" "$name-off" --speculative-update off "$@"
  run "$np" "$name-on" --speculative-update on "$@"
  same "$name-off" "$name-on" "$name: on against off"
  grep -q "speculative update: on (backup of the blocks' master, m and v: [0-9.]* MiB per node" "$tmp/$name-on.txt" &&
    ok || bad "$name: the start-up line does not say it is on with its backup"
}
q="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy $(cat "$g/qwen3/args.txt")"
# its own --grad-clip 4.0: norms 4.33, 6.78, 3.46, 4.51, 3.30, 2.55 (3 misses, 3 hits)
pair mixed 2 $q --trace "$tmp/mixed.trace.json"
counts mixed-on 3 3
pair hit 2 $q --grad-clip 100
counts hit-on 6 0
pair miss 2 $q --grad-clip 1e-3
counts miss-on 0 6
# which layers speculate depends on when the layers below land (not once
# the backward is over), so the trace is checked by pairs: every
# speculated layer of a miss (steps 1, 2, 4) is redone, none of a hit (3,
# 5, 6) is, and something was speculated
spans() { grep -o "\"adamw $1 layer [0-9]* (it [0-9]*)\"" "$tmp/mixed.trace.json" | sed "s/adamw $1 //" | sort; }
spans speculative | grep -E '\(it [124]\)' > "$tmp/spec.miss"
spans redo > "$tmp/redo"
"$build/mpi-tests/trace_check" "$tmp/mixed.trace.json" 6 > "$tmp/mixed.trace.check" &&
  [ -s "$tmp/spec.miss" ] && cmp -s "$tmp/spec.miss" "$tmp/redo" &&
  ok || { bad "trace: not well nested, nothing speculated in the misses, or its redo spans are not the misses' speculated layers"; cat "$tmp/mixed.trace.check" "$tmp/spec.miss" "$tmp/redo"; }
grep -q "host memory per node: .* + the speculative update's backup [0-9.]* MiB in the ranks' own memory = " "$tmp/mixed-on.txt" &&
  ! grep -q "speculative update's backup" "$tmp/mixed-off.txt" &&
  ok || bad "the host-memory line does not count the backup when on, or counts it when off"
# speculating only while it overlaps the backward: with the embedding's
# backward stage holding block 1 too, block 1's gradient lands with the
# embedding's, so nothing is left to overlap once it is summed: block 1 is
# never speculated (its update follows the norm on both ranks in every
# step, and the summary counts rank 0's 6 after the norm), the head and
# block 2 (the tail's stage) may be; the bits are those of off
pair after 2 $q --plan 'fwd=0-1;bwd=2-3,0-1' --trace "$tmp/after.trace.json"
counts after-on 3 3
! grep -q '"adamw speculative layer 1 ' "$tmp/after.trace.json" &&
  [ "$(grep -c '"adamw layer 1 (it [1-6])"' "$tmp/after.trace.json")" = 12 ] &&
  grep -Eq "rank 0 speculated [0-6] of its 12 updates of the blocks and the head in them, ([6-9]|1[0-2]) after the norm as the backward was over" "$tmp/after-on.txt" &&
  ok || { bad "after: block 1 speculated after the backward was over, or the summary does not say it"; grep "speculative update:" "$tmp/after-on.txt"; }
# a step with no counted target applies no update: nothing speculated in it
k="$g/qwen3-skip"
pair skip 2 --model $k/model --data $k/data.npy --loss-mask $k/mask.npy $(cat "$k/args.txt")
grep -q "speculative update: [0-4] hits, [0-4] misses (of 4 steps" "$tmp/skip-on.txt" &&
  ok || bad "skip: the step with nothing counted was speculated, or another was not"
grep -q '"speculative-update": *"on"' "$tmp/mixed-on.jsonl.run.json" &&
  grep -q '"speculative-update": *"off"' "$tmp/mixed-off.jsonl.run.json" &&
  ok || bad "run.json does not record --speculative-update"
# roundpipe plan counts the same backup as train allocates
"$bin" plan --model $g/qwen3/model --seq-len 16 --batch-size 4 --microbatches 2 --gpus 2 --grad-clip 4 \
  --device cpu --speculative-update on > "$tmp/plan.txt" 2>&1
b=$(grep -o "speculative update's backup [0-9.]* [MG]iB" "$tmp/mixed-on.txt")
[ -n "$b" ] && grep -q "$b in the ranks' own memory" "$tmp/plan.txt" && ok ||
  { bad "plan does not count train's backup (${b:-none in train})"; cat "$tmp/plan.txt"; }
# any rank count: the same bits as 2 ranks' off
run 1 mixed-on1 $q --speculative-update on
same mixed-off mixed-on1 "1 rank on against 2 ranks off"
run 3 mixed-on3 $q --speculative-update on
same mixed-off mixed-on3 "3 ranks on against 2 ranks off"
# 2 nodes of 1 rank: each node speculates on its slices, gathers after the norm
pair nodes 2 $q --ranks-per-node 1
counts nodes-on + +
# LoRA (dropout on): norms 0.37, 0.58, 0.33, 0.66, 0.38, 0.40
pair lora 2 $q --lora-rank 2 --lora-dropout 0.1 --grad-clip 0.5
counts lora-on + +
# the mixture of experts with its load-balancing loss: norms 2.05, 2.22, 1.45, 1.77, 1.27
m="$src/mpi-tests/fixtures/golden-moe/moe-mb"
moe="--model $m/model --data $m/data.npy --loss-mask $m/mask.npy $(cat "$m/args.txt")"
pair moe 2 $moe --grad-clip 1.8
counts moe-on + +
# a checkpoint after every step, resumed from step 3's: as the run off
run 2 ck $q --speculative-update on --checkpoint-dir "$tmp/ck" --checkpoint-every 1 --keep-checkpoints 0
same mixed-off ck "checkpoints written while speculating"
head -n 3 "$tmp/mixed-off.jsonl" > "$tmp/resumed.jsonl"
run 2 resumed $q --speculative-update on --resume "$tmp/ck/step-00000003"
same mixed-off resumed "resumed from step 3 while speculating"
# SIGUSR1 through mpirun: the step in progress ends, its checkpoint resumes
# to the bits of a run that never stopped (the stop is decided before any
# later step's gradient is summed: no speculated update is abandoned; the
# test hook below plants a stop that abandons some)
long="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 64 --batch-size 8 --microbatches 4 --steps 30 --lr 3e-3 --seed 2 --grad-clip 2"
run 2 long $long --speculative-update off
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --threads 1 --device cpu --timeout 60 \
  $long --speculative-update on --checkpoint-dir "$tmp/cks" --log "$tmp/stop.jsonl" --save "$tmp/unused" > "$tmp/stop.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/stop.jsonl" 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.1; i=$((i + 1)); done
kill -s USR1 $pid; wait $pid; rc=$?
[ $rc -eq 0 ] && grep -q "stopped by SIGUSR1 after step [0-9]* of 30" "$tmp/stop.txt" && ok ||
  { bad "SIGUSR1: exit $rc"; cat "$tmp/stop.txt"; }
cp "$tmp/stop.jsonl" "$tmp/stopped.jsonl"
run 2 stopped $long --speculative-update on --checkpoint-dir "$tmp/cks" --resume auto
same long stopped "stopped by SIGUSR1 while speculating, resumed"
# a step abandoned before its norm (RP_FAULT_STOP_BEFORE_NORM=K: a stop
# decided after step K-1 once step K's blocks and head are summed, every
# share of them speculated, and before the embedding's sum, which the norm
# waits for): each rank's speculated updates restored from their backup, no
# version raised, so the stop's checkpoint of step K-1 holds the tensors of
# an uninterrupted run's checkpoint of K-1 and, resumed to the end, gives
# the log and the model of a run with --speculative-update off. A clip that
# never clips (hit) and one that always clips (miss); 1, 2 and 3 ranks;
# K = 2 (in the first segment, before the re-plan), 3 (its first step
# after) and 4.
for clip in hit:100 miss:1e-3; do
  cn=${clip%%:*}; c=${clip#*:}
  run 2 ab-$cn $q --grad-clip $c --speculative-update off --checkpoint-dir "$tmp/ab-$cn.ck" \
    --checkpoint-every 1 --keep-checkpoints 0
  for case in 1:2 2:4 3:3; do
    np=${case%:*}; k=${case#*:}; out=ab-$cn-$np
    ${MPIRUN:-mpirun} $flags -x RP_FAULT_STOP_BEFORE_NORM=$k -np $np "$bin" train --progress none \
      --threads 1 --device cpu --timeout 60 $q --grad-clip $c --speculative-update on \
      --checkpoint-dir "$tmp/$out.ck" --log "$tmp/$out.jsonl" > "$tmp/$out.stop.txt" 2>&1 &&
      grep -q "stopped by SIGUSR1 after step $((k - 1)) of 6" "$tmp/$out.stop.txt" &&
      grep -Eq "info: speculative update: step $k ended before its gradient norm was known \(the run stops after an earlier step\): this rank's speculative updates of [1-9][0-9]* layers? restored from their backup, no version raised" "$tmp/$out.stop.txt" &&
      ok || { bad "$out: not stopped after step $((k - 1)) with step $k's speculation abandoned"; cat "$tmp/$out.stop.txt"; }
    # the summary counts the steps done, not the abandoned one's updates
    # (1 rank: its shares are the 3 layers above the embedding, 1 step)
    [ $np != 1 ] || { grep -Eq "speculative update: [01] hits, [01] misses \(of 1 steps that may speculate[^)]*\); rank 0 speculated [0-3] of its 3 updates" "$tmp/$out.stop.txt" &&
      ok || { bad "$out: the summary counts the abandoned step"; grep "speculative update: [0-9]* hits" "$tmp/$out.stop.txt"; }; }
    ck=$(printf 'step-%08d' $((k - 1))) differ=
    for f in model optimizer; do
      cmp -s "$tmp/$out.ck/$ck/$f.safetensors" "$tmp/ab-$cn.ck/$ck/$f.safetensors" || differ="$differ $f"
    done
    [ -z "$differ" ] && ok || bad "$out: the stop's checkpoint of step $((k - 1)) is not the uninterrupted run's:$differ.safetensors"
    run $np $out $q --grad-clip $c --speculative-update on --checkpoint-dir "$tmp/$out.ck" --resume auto
    same ab-$cn $out "$out: abandoned at step $k, stopped, resumed, against off"
  done
done
# the hook where its stop would not be the step before (no clipping: each
# update made as its gradient is summed): refused, naming it
${MPIRUN:-mpirun} $flags -x RP_FAULT_STOP_BEFORE_NORM=2 -np 2 "$bin" train --progress none --device cpu \
  $q --grad-clip 0 --checkpoint-dir "$tmp/ab-noclip.ck" > "$tmp/ab-noclip.txt" 2>&1 &&
  bad "RP_FAULT_STOP_BEFORE_NORM without clipping ran" ||
  { grep -q "RP_FAULT_STOP_BEFORE_NORM=2: no --grad-clip" "$tmp/ab-noclip.txt" && ok ||
    { bad "RP_FAULT_STOP_BEFORE_NORM without clipping: its message"; cat "$tmp/ab-noclip.txt"; }; }
# the race injector: random delays in every producer, 3 ranks
RP_INJECT_DELAY_US=2000 RP_INJECT_SEED=7 run 3 race $q --speculative-update on
same mixed-off race "under RP_INJECT_DELAY_US"
# auto: off on CPU executors, said why
run 2 auto $q
grep -q "speculative update: off (auto: CPU executors, whose optimizer keeps to one thread" "$tmp/auto.txt" &&
  ! grep -q "speculative update: [0-9]* hits" "$tmp/auto.txt" &&
  ok || bad "auto on CPU executors: not off, or not said"
# on without room for the backup: refused, naming the limit
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --device cpu $q --speculative-update on \
  --host-memory-limit-mib 1 > "$tmp/refused.txt" 2>&1 && bad "on over the limit ran" ||
  { grep -q "speculative-update on: the backup of master, m and v of the blocks .* more than the 1.0 MiB of --host-memory-limit-mib" "$tmp/refused.txt" &&
    ok || { bad "on over the limit: its message"; cat "$tmp/refused.txt"; }; }
finish
