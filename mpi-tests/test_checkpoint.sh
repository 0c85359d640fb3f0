#!/bin/sh
# Proves (CPU executors): a run of N steps equals, bit for bit (saved model
# and the metrics of the resumed steps, minus timing), a run stopped at a
# checkpoint and resumed for the rest: on another rank count (2 -> 1, 3),
# with another --plan and --recompute layer, with --pipelines 2, and for the
# golden qwen3 fixture (a real model with a loss mask); a resumed run's
# --log keeps its lines of the steps before it; --resume auto takes
# the newest complete checkpoint and skips an incomplete one, or starts
# fresh (saying so) when there is none; --keep-checkpoints prunes; and bad
# input is refused with a message naming the file and field: another
# --seq-len, another --token-tile where the tile acts on the microbatch (a
# tile longer than it resumes; a checkpoint without the field holds the
# default's), another model config, a changed file (checksum), a truncated
# file, a directory without its marker, --checkpoint-every without a
# directory, and nothing left to run; SIGUSR1 and SIGTERM (through mpirun)
# stop after the step in progress with a checkpoint and exit 0, and the
# resumed run ends with the bits of one that never stopped; long work (the
# host stores' allocation, the random start, a checkpoint training waits
# for, --save, --save-merged) says how far it is, but under --progress none.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
. "$(dirname "$0")/resume_lib.sh"
tiny="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4 --steps 8 --lr 3e-3 --seed 5"
run 2 straight $tiny --log "$tmp/straight.jsonl" --save "$tmp/straight" || { bad "straight run"; cat "$tmp/straight.txt"; }
run 2 part $tiny --checkpoint-dir "$tmp/ck" --checkpoint-every 4 --keep-checkpoints 0 --log "$tmp/part.jsonl" || { bad "checkpointing run"; cat "$tmp/part.txt"; }
[ -f "$tmp/ck/step-00000004/checkpoint.complete" ] && [ -f "$tmp/ck/step-00000008/checkpoint.complete" ] && ok || bad "checkpoints of steps 4 and 8 missing"
grep -q "checkpoint of step 4 written" "$tmp/part.txt" && ok || bad "no line naming the checkpoint"
# long work says how far it is (core/slow_work.h; RP_TEST_PROGRESS_DELAY_S=0
# at once): the host stores' allocation, the random start, the checkpoint
# written while training waits, the saved model and a merged LoRA model;
# with --progress none none of them
RP_TEST_PROGRESS_DELAY_S=0 run 2 slow $tiny --steps 2 --checkpoint-dir "$tmp/ckslow" --save "$tmp/slowsave" --progress line || { bad "slow-work run"; cat "$tmp/slow.txt"; }
grep -q "initialising the parameters: .*M of .*M (.*%) drawn in .* s, on the node's 2 rank(s)" "$tmp/slow.txt" &&
  grep -q "writing the checkpoint of step 2: .* of .* MiB (.*%) in .* s" "$tmp/slow.txt" &&
  grep -q "saving $tmp/slowsave/model.safetensors: .* of .* MiB (.*%) in .* s" "$tmp/slow.txt" &&
  grep -q "allocating the host store: 0.0 of .* MiB (0%) in 0 s" "$tmp/slow.txt" &&
  grep -q "allocating the activations' host store: 0.0 of .* MiB (0%) in 0 s" "$tmp/slow.txt" && ok || { bad "no progress lines for long work"; cat "$tmp/slow.txt"; }
RP_TEST_PROGRESS_DELAY_S=0 run 1 slowm $tiny --steps 1 --lora-rank 2 --save-merged "$tmp/slowmerged" --progress line || { bad "slow-work run, LoRA"; cat "$tmp/slowm.txt"; }
grep -q "saving $tmp/slowmerged/model.safetensors: .* of .* MiB (.*%) in .* s" "$tmp/slowm.txt" && ok || { bad "no progress line for the merged save"; cat "$tmp/slowm.txt"; }
RP_TEST_PROGRESS_DELAY_S=0 run 2 slown $tiny --steps 2 --checkpoint-dir "$tmp/ckslown" --save "$tmp/slownsave" --progress none || { bad "slow-work run, --progress none"; cat "$tmp/slown.txt"; }
grep -q "initialising the parameters\|writing the checkpoint\|saving \|allocating " "$tmp/slown.txt" && { bad "progress lines under --progress none"; cat "$tmp/slown.txt"; } || ok
# every key of trainer_state.json (its options included) is described in roundpipe-formats(5)
for k in $(grep -o '^ *"[a-z_0-9]*":' "$tmp/ck/step-00000004/trainer_state.json" | tr -d ' ":'); do
  grep -q "\\b$k\\b" "$src/man/roundpipe-formats.5" && ok || bad "trainer_state.json's $k is not in man/roundpipe-formats.5"
done
# resume at step 4 on 1 and 3 ranks, with another plan and recompute mode
args="--data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4 --steps 8 --lr 3e-3 --seed 5"
run 1 r1 $args --resume "$tmp/ck/step-00000004" --log "$tmp/r1.jsonl" --save "$tmp/r1" && same straight r1 "resume on 1 rank" || { bad "resume on 1 rank"; cat "$tmp/r1.txt"; }
run 3 r3 $args --resume "$tmp/ck/step-00000004" --log "$tmp/r3.jsonl" --save "$tmp/r3" --plan "fwd=0,1-3;bwd=4-5,2-3,0-1" --recompute layer && same straight r3 "resume on 3 ranks, another plan, recompute layer" || { bad "resume on 3 ranks"; cat "$tmp/r3.txt"; }
grep -q "resuming from $tmp/ck/step-00000004: step 4 done, continuing at step 5" "$tmp/r1.txt" && ok || bad "no resume line"
# resuming with the same --log keeps its lines of steps 1-4 and follows them
run 1 r1log $args --resume "$tmp/ck/step-00000004" --log "$tmp/part.jsonl"
cut -d, -f1-6 "$tmp/straight.jsonl" > "$tmp/a.cut"; cut -d, -f1-6 "$tmp/part.jsonl" > "$tmp/b.cut"
cmp -s "$tmp/a.cut" "$tmp/b.cut" && grep -q "kept the lines of steps 1-4" "$tmp/r1log.txt" && ok ||
  { bad "--log on resume: not steps 1-4 kept and 5-8 after them"; cat "$tmp/part.jsonl"; }

# --pipelines 2
run 2 p2 $tiny --pipelines 2 --log "$tmp/p2.jsonl" --save "$tmp/p2"
run 2 p2a $tiny --pipelines 2 --steps 8 --checkpoint-dir "$tmp/ckp" --checkpoint-every 3
run 1 p2b $args --pipelines 2 --resume "$tmp/ckp/step-00000006" --log "$tmp/p2b.jsonl" --save "$tmp/p2b" && same p2 p2b "--pipelines 2 resumed at 6 on 1 rank" || { bad "--pipelines 2 resume"; cat "$tmp/p2b.txt"; }

# the golden qwen3 fixture (loss mask, clipping, warmup): 6 steps = 2 + 4
g="$src/mpi-tests/fixtures/golden/qwen3"
ga="--data $g/data.npy --loss-mask $g/mask.npy $(cat "$g/args.txt")"
run 2 g6 --model "$g/model" $ga --log "$tmp/g6.jsonl" --save "$tmp/g6"
run 2 g2 --model "$g/model" $ga --checkpoint-dir "$tmp/ckg" --checkpoint-every 2 --keep-checkpoints 1
ls "$tmp/ckg" | grep -q '^step-00000006$' && [ "$(ls "$tmp/ckg" | wc -l)" -eq 1 ] && ok || bad "--keep-checkpoints 1 kept: $(ls "$tmp/ckg" | tr '\n' ' ')"
run 2 g2b --model "$g/model" $ga --checkpoint-dir "$tmp/ckg2" --checkpoint-every 2 --steps 6 --keep-checkpoints 0
run 3 g4 $ga --resume "$tmp/ckg2/step-00000002" --log "$tmp/g4.jsonl" --save "$tmp/g4" && same g6 g4 "qwen3 fixture resumed at 2 on 3 ranks" || { bad "qwen3 resume"; cat "$tmp/g4.txt"; }

# --resume auto: the newest complete one; an incomplete newer one is skipped
mkdir "$tmp/ck/step-00000099" && cp "$tmp/ck/step-00000004/"*.safetensors "$tmp/ck/step-00000099/"
# (--steps differs from the checkpoint's: refused, naming the option)
run 1 auto $args --steps 12 --checkpoint-dir "$tmp/ck" --resume auto
grep -q 'options.steps is 8, this run has 12' "$tmp/auto.txt" && ok || { bad "auto/steps"; cat "$tmp/auto.txt"; }
# (the newest complete one is step 8, the last: nothing to train, the
# outputs are written from it; an explicit path to it is refused)
run 1 auto2 $args --checkpoint-dir "$tmp/ck" --resume auto --steps 8 --keep-checkpoints 0 --save "$tmp/auto2"
grep -q "resuming from $tmp/ck/step-00000008: step 8, the last, is done: nothing left to train" "$tmp/auto2.txt" &&
  cmp -s "$tmp/auto2/model.safetensors" "$tmp/straight/model.safetensors" && ok || { bad "auto took not the newest complete, or saved another model"; cat "$tmp/auto2.txt"; }
run 1 b7 $args --resume "$tmp/ck/step-00000008" && bad "resuming the last step by path accepted" ||
  { grep -q "step-00000008: the checkpoint is of step 8, and --steps is 8: nothing left to run" "$tmp/b7.txt" && ok || { bad "nothing-left message"; cat "$tmp/b7.txt"; }; }
run 1 fresh $tiny --checkpoint-dir "$tmp/empty" --resume auto --steps 2
grep -q "no complete checkpoint under $tmp/empty: starting fresh" "$tmp/fresh.txt" && ok || { bad "auto without checkpoints"; cat "$tmp/fresh.txt"; }

# bad input: each refused, naming the file and field
c4="$tmp/ck/step-00000004"
run 1 b1 $args --seq-len 16 --resume "$c4" && bad "another --seq-len accepted" ||
  { grep -q "trainer_state.json: options.seq_len is 32, this run has 16" "$tmp/b1.txt" && ok || { bad "seq-len message"; cat "$tmp/b1.txt"; }; }
# --token-tile: the tile as it acts on a microbatch (64 tokens here) changes the bits
run 1 b8 $args --token-tile 16 --resume "$c4" && bad "another --token-tile accepted" ||
  { grep -q "trainer_state.json: options.token_tile is 64, this run has 16" "$tmp/b8.txt" && ok || { bad "token-tile message"; cat "$tmp/b8.txt"; }; }
run 1 r1t $args --token-tile 2048 --resume "$c4" --log "$tmp/r1t.jsonl" --save "$tmp/r1t" && same straight r1t "resume with a tile longer than the microbatch" || { bad "resume with --token-tile 2048"; cat "$tmp/r1t.txt"; }
# the marker's checksum of the state is FNV-1a 64 from the format's offset
# basis (testlib.sh's fnv1a64; test_checkpoint_safety writes one in the basis
# of checkpoints before 2026-11-29, which still resume)
grep -q "^trainer_state.json $(wc -c < "$c4/trainer_state.json") $(fnv1a64 "$c4/trainer_state.json")\$" "$c4/checkpoint.complete" &&
  ok || { bad "the marker's checksum is not FNV-1a 64 of trainer_state.json"; cat "$c4/checkpoint.complete"; }
# a checkpoint written before the tile was recorded holds the default's
cp -r "$c4" "$tmp/untiled"
# (and router_aux_off, recorded since)
sed -i -e '/"token_tile"/d' -e '/"router_aux_off"/d' -e 's/"router_aux_coef":\([0-9.e+-]*\),$/"router_aux_coef":\1/' "$tmp/untiled/trainer_state.json"
checkpoint_remark "$tmp/untiled" 4
run 1 r1u $args --resume "$tmp/untiled" --log "$tmp/r1u.jsonl" --save "$tmp/r1u" && same straight r1u "resume of a checkpoint without token_tile" || { bad "resume without token_tile"; cat "$tmp/r1u.txt"; }
run 1 b9 $args --token-tile 16 --resume "$tmp/untiled" && bad "--token-tile 16 accepted for a checkpoint without token_tile" ||
  { grep -q 'trainer_state.json: "options" has no "token_tile"' "$tmp/b9.txt" && ok || { bad "untiled message"; cat "$tmp/b9.txt"; }; }
run 1 b2 $args --resume "$c4" --init-config "$src/mpi-tests/fixtures/golden/llama/model/config.json" && bad "another model accepted" ||
  { grep -q "config.json: model_type is qwen3, but .*llama/model/config.json has llama" "$tmp/b2.txt" && ok || { bad "config message"; cat "$tmp/b2.txt"; }; }
cfg2="$tmp/wider.json"; sed 's/"hidden_size": *[0-9]*/"hidden_size": 96/' "$src/examples/tiny-config.json" > "$cfg2"
run 1 b2b $args --resume "$c4" --init-config "$cfg2" && bad "another hidden_size accepted" ||
  { grep -q "config.json: hidden_size is 128, but $cfg2 has 96" "$tmp/b2b.txt" && ok || { bad "hidden_size message"; cat "$tmp/b2b.txt"; }; }
cp -r "$c4" "$tmp/changed"; printf 'x' | dd of="$tmp/changed/optimizer.safetensors" bs=1 seek=1000 conv=notrunc 2>/dev/null
run 1 b3 $args --resume "$tmp/changed" && bad "a changed file accepted" ||
  { grep -q "optimizer.safetensors: checksum" "$tmp/b3.txt" && ok || { bad "checksum message"; cat "$tmp/b3.txt"; }; }
cp -r "$c4" "$tmp/trunc"; truncate -s 1000 "$tmp/trunc/model.safetensors"
run 1 b4 $args --resume "$tmp/trunc" && bad "a truncated file accepted" ||
  { grep -q "model.safetensors: 1000 bytes, but trainer_state.json says" "$tmp/b4.txt" && ok || { bad "truncation message"; cat "$tmp/b4.txt"; }; }
run 1 b5 $args --resume "$tmp/ck/step-00000099" && bad "a directory without marker accepted" ||
  { grep -q "no checkpoint.complete: not a complete checkpoint" "$tmp/b5.txt" && ok || { bad "marker message"; cat "$tmp/b5.txt"; }; }
run 1 b6 $tiny --checkpoint-every 2 && bad "--checkpoint-every without a directory accepted" ||
  { grep -q -- "--checkpoint-every needs --checkpoint-dir" "$tmp/b6.txt" && ok || { bad "every message"; cat "$tmp/b6.txt"; }; }
# nothing under a complete name was touched by the refusals
cmp -s "$c4/model.safetensors" "$tmp/ck/step-00000004/model.safetensors" && ok || bad "a refused resume changed the checkpoint"

# SIGUSR1 through mpirun and SIGTERM to the ranks: the step in progress ends, a
# checkpoint is written, exit 0 with a line naming it; resuming gives the
# bits of a run that never stopped. 64 tokens a sample (the stop and its
# checkpoint are the same at any length; 128 made the uninterrupted run and
# the two resumed ones twice as long): a step of 2 ranks takes about 0.03 s
# here, the signal comes within a few steps of the third logged one, and
# more than 50 steps are left after it
long="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 64 --batch-size 8 --microbatches 4 --steps 60 --lr 3e-3 --seed 2"
run 2 long $long --log "$tmp/long.jsonl" --save "$tmp/long"
for sig in USR1 TERM; do
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --threads 1 --device cpu --timeout 60 \
    $long --checkpoint-dir "$tmp/cks$sig" --log "$tmp/s$sig.jsonl" --save "$tmp/unused" > "$tmp/s$sig.txt" 2>&1 &
  pid=$!
  i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/s$sig.jsonl" 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.1; i=$((i + 1)); done
  # USR1 to mpirun, which forwards it; TERM to the ranks, as Slurm sends it
  # to every task (mpirun itself exits 1 on SIGTERM whatever its ranks do)
  if [ $sig = USR1 ]; then kill -s USR1 $pid; else pkill -TERM -f "^$bin train .*cks$sig"; fi
  wait $pid; rc=$?
  [ $rc -eq 0 ] && grep -q "stopped by SIG$sig after step [0-9]* of 60: continue with the same command and --resume $tmp/cks$sig/step-" "$tmp/s$sig.txt" && ok ||
    { bad "SIG$sig: exit $rc"; cat "$tmp/s$sig.txt"; continue; }
  k=$(sed -n 's/.*stopped by SIG[A-Z0-9]* after step \([0-9]*\) of.*/\1/p' "$tmp/s$sig.txt")
  [ -f "$tmp/cks$sig/step-$(printf %08d "$k")/checkpoint.complete" ] && [ "$(wc -l < "$tmp/s$sig.jsonl")" -eq "$k" ] && ok || bad "SIG$sig: no checkpoint of step $k, or not $k metrics lines"
  [ ! -e "$tmp/unused" ] && ok || bad "SIG$sig: --save written by a run that stopped early"
  run 1 "r$sig" --data "$build/examples/data/gnu-licenses.npy" --seq-len 64 --batch-size 8 --microbatches 4 --steps 60 --lr 3e-3 --seed 2 \
    --checkpoint-dir "$tmp/cks$sig" --resume auto --log "$tmp/r$sig.jsonl" --save "$tmp/r$sig" &&
    same long "r$sig" "SIG$sig at step $k, resumed on 1 rank" || { bad "SIG$sig resume"; cat "$tmp/r$sig.txt"; }
done
finish
