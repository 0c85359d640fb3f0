#!/bin/sh
# Proves (CPU executors): checkpoints written while training goes on are
# exact snapshots, and checkpoints with a lagged optimizer (--optimizer-lag 1)
# resume exactly.
# - Snapshot: a run of 8 steps writing a checkpoint after every step (with
#   random delays injected into every signal, and a writer slowed to 20 ms
#   a layer, so updates must wait for it) holds, in its checkpoint of
#   step 4, the bytes of the checkpoint a 4-step run writes at its end (a
#   constant lr, so step 4 is the same step in both), with and without
#   clipping (the writer's two layer orders).
# - Lagged: 8 steps straight on 2 ranks equal, bit for bit (final model and
#   the metrics of the resumed steps), 4 steps + resume on 1 rank and on 3
#   ranks with another --plan and --recompute layer; the same for the golden
#   qwen3 and llama models (with the exact optimizer too), --pipelines 2
#   (resumed on 4 ranks), bf16, and a run stopped by SIGUSR1; the checkpoint holds the pending update (the
#   state before it and its gradient); bad input: a lagged checkpoint
#   resumed without --optimizer-lag, a damaged "pending_update", a missing
#   pending gradient file.
# - A checkpoint loads in transformers (when python3 has it): its tensors
#   equal the file's.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
. "$(dirname "$0")/resume_lib.sh"
data="--data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4 --lr 3e-3 --seed 5"
tiny="--init-config $src/examples/tiny-config.json $data"

# ---- snapshots written while training goes on (exact optimizer) ----------
for clip in 0 1.0; do
  c="--lr-schedule constant --grad-clip $clip"
  RP_INJECT_DELAY_US=300 RP_FAULT_CHECKPOINT_LAYER_MS=20 run 2 every$clip $tiny $c --steps 8 --checkpoint-dir "$tmp/every$clip" --checkpoint-every 1 --keep-checkpoints 0 ||
    { bad "checkpoint every step (clip $clip)"; cat "$tmp/every$clip.txt"; continue; }
  run 2 four$clip $tiny $c --steps 4 --checkpoint-dir "$tmp/four$clip"
  a="$tmp/every$clip/step-00000004" b="$tmp/four$clip/step-00000004"
  cmp -s "$a/model.safetensors" "$b/model.safetensors" && cmp -s "$a/optimizer.safetensors" "$b/optimizer.safetensors" && ok ||
    bad "clip $clip: the checkpoint of step 4 written while training went on differs from the one written at the end of a 4-step run"
  grep -q "checkpoint of step 4 written: .* while training went on: [0-9.]* s writing, updates held [0-9.]* s for it" "$tmp/every$clip.txt" && ok ||
    { bad "no line with the time updates were held"; cat "$tmp/every$clip.txt"; }
  [ "$(ls "$tmp/every$clip" | wc -l)" -eq 8 ] && ok || bad "clip $clip: not 8 checkpoints: $(ls "$tmp/every$clip" | tr '\n' ' ')"
done

# ---- a lagged optimizer ---------------------------------------------------
lag="--optimizer-lag 1 --grad-clip 1.0"
run 2 straight $tiny $lag --steps 8 --log "$tmp/straight.jsonl" --save "$tmp/straight" || { bad "straight lagged run"; cat "$tmp/straight.txt"; }
run 2 part $tiny $lag --steps 8 --checkpoint-dir "$tmp/ck" --checkpoint-every 4 --keep-checkpoints 0 --save "$tmp/part" || { bad "lagged run with checkpoints"; cat "$tmp/part.txt"; }
cmp -s "$tmp/straight/model.safetensors" "$tmp/part/model.safetensors" && ok || bad "checkpoints changed a lagged run's model"
c4="$tmp/ck/step-00000004"
[ -f "$c4/pending_gradient.safetensors" ] && grep -q '"pending_update"' "$c4/trainer_state.json" &&
  grep -q '"adam_step":3' "$c4/trainer_state.json" && ok || { bad "step 4's checkpoint does not hold a pending update"; cat "$c4/trainer_state.json"; }
[ ! -f "$tmp/ck/step-00000008/pending_gradient.safetensors" ] && ok || bad "the last step's checkpoint holds a pending update"
args="$data $lag --steps 8"
run 1 r1 $args --resume "$c4" --log "$tmp/r1.jsonl" --save "$tmp/r1" && same straight r1 "lagged, resumed on 1 rank" || { bad "lagged resume on 1 rank"; cat "$tmp/r1.txt"; }
run 3 r3 $args --resume "$c4" --log "$tmp/r3.jsonl" --save "$tmp/r3" --plan "fwd=0,1-3;bwd=4-5,2-3,0-1" --recompute layer &&
  same straight r3 "lagged, resumed on 3 ranks, another plan, recompute layer" || { bad "lagged resume on 3 ranks"; cat "$tmp/r3.txt"; }

# --pipelines 2 (a lagged optimizer needs a rank per pipeline), and bf16
run 2 p2 $tiny $lag --steps 8 --pipelines 2 --log "$tmp/p2.jsonl" --save "$tmp/p2"
run 2 p2a $tiny $lag --steps 8 --pipelines 2 --checkpoint-dir "$tmp/ckp" --checkpoint-every 3
run 4 p2b $args --pipelines 2 --resume "$tmp/ckp/step-00000006" --log "$tmp/p2b.jsonl" --save "$tmp/p2b" &&
  same p2 p2b "lagged --pipelines 2 resumed at 6 on 4 ranks" || { bad "lagged --pipelines 2 resume"; cat "$tmp/p2b.txt"; }
run 2 bf $tiny $lag --steps 8 --dtype bf16 --log "$tmp/bf.jsonl" --save "$tmp/bf"
run 2 bfa $tiny $lag --steps 8 --dtype bf16 --checkpoint-dir "$tmp/ckb" --checkpoint-every 5
run 1 bfb $args --dtype bf16 --resume "$tmp/ckb/step-00000005" --log "$tmp/bfb.jsonl" --save "$tmp/bfb" &&
  same bf bfb "lagged bf16 resumed at 5 on 1 rank" || { bad "lagged bf16 resume"; cat "$tmp/bfb.txt"; }

# the golden models, qwen3 (loss mask, clipping, warmup) and llama (biases,
# no clipping), with the exact optimizer too (its checkpoints were written
# while training went on)
for m in qwen3 llama; do
  for lg in 1 0; do
    g="$src/mpi-tests/fixtures/golden/$m" gn="g$m$lg"
    ga="--data $g/data.npy $( [ -f "$g/mask.npy" ] && echo "--loss-mask $g/mask.npy") $(cat "$g/args.txt") --optimizer-lag $lg"
    run 2 "$gn" --model "$g/model" $ga --log "$tmp/$gn.jsonl" --save "$tmp/$gn"
    run 2 "${gn}a" --model "$g/model" $ga --checkpoint-dir "$tmp/ck$gn" --checkpoint-every 2 --keep-checkpoints 0
    run 3 "${gn}b" $ga --resume "$tmp/ck$gn/step-00000002" --log "$tmp/${gn}b.jsonl" --save "$tmp/${gn}b" &&
      same "$gn" "${gn}b" "$m (lag $lg) resumed at 2 on 3 ranks" || { bad "$m (lag $lg) resume"; cat "$tmp/${gn}b.txt"; }
    run 1 "${gn}c" $ga --resume "$tmp/ck$gn/step-00000004" --log "$tmp/${gn}c.jsonl" --save "$tmp/${gn}c" &&
      same "$gn" "${gn}c" "$m (lag $lg) resumed at 4 on 1 rank" || { bad "$m (lag $lg) resume at 4"; cat "$tmp/${gn}c.txt"; }
  done
done
# a checkpoint is a model directory transformers loads, with the file's tensors
# (one Python: its imports, some seconds, are the availability check too)
python3 - "$tmp/ckgqwen30/step-00000004" << 'PY'
import sys
try:
    import transformers, torch, safetensors
except ImportError:
    sys.exit(77)
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
d = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
want = load_file(d + "/model.safetensors")
have = model.state_dict()
assert all(torch.equal(have[k], v) for k, v in want.items()), "tensors differ"
out = model(torch.tensor([[1, 2, 3, 4]])).logits
assert torch.isfinite(out).all()
print(f"transformers loaded {type(model).__name__} from {d}: {len(want)} tensors equal to the file")
PY
case $? in
  0) ok ;;
  77|127) echo "SKIP part: python3 with transformers, torch and safetensors not found: the checkpoint is not loaded in transformers" ;;
  *) bad "the checkpoint does not load in transformers" ;;
esac
# SIGUSR1: the stop's checkpoint holds the pending update of its step (64
# tokens a sample, as test_checkpoint.sh's signals: the pending update is
# there at any length, and 128 made the uninterrupted and resumed runs
# twice as long; it stopped after step 11 here, 49 steps before the end)
long="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 64 --batch-size 8 --microbatches 4 --steps 60 --lr 3e-3 --seed 2 $lag"
run 2 long $long --log "$tmp/long.jsonl" --save "$tmp/long"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --progress none --threads 1 --device cpu --timeout 60 \
  $long --checkpoint-dir "$tmp/cks" --log "$tmp/sig.jsonl" > "$tmp/sig.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/sig.jsonl" 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.1; i=$((i + 1)); done
kill -s USR1 $pid; wait $pid; rc=$?
k=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of.*/\1/p' "$tmp/sig.txt")
[ $rc -eq 0 ] && [ -n "$k" ] && [ -f "$tmp/cks/step-$(printf %08d "$k")/pending_gradient.safetensors" ] && ok ||
  { bad "SIGUSR1 (lagged): exit $rc, no pending checkpoint of step $k"; cat "$tmp/sig.txt"; }
run 1 rsig --data "$build/examples/data/gnu-licenses.npy" --seq-len 64 --batch-size 8 --microbatches 4 --steps 60 --lr 3e-3 --seed 2 $lag \
  --checkpoint-dir "$tmp/cks" --resume auto --log "$tmp/rsig.jsonl" --save "$tmp/rsig" &&
  same long rsig "lagged, stopped by SIGUSR1 at step $k, resumed on 1 rank" || { bad "lagged SIGUSR1 resume"; cat "$tmp/rsig.txt"; }

# bad input
run 1 b1 $data --steps 8 --grad-clip 1.0 --resume "$c4" && bad "a lagged checkpoint resumed without --optimizer-lag" ||
  { grep -q "trainer_state.json: options.optimizer_lag is 1, this run has 0" "$tmp/b1.txt" && ok || { bad "optimizer_lag message"; cat "$tmp/b1.txt"; }; }
cp -r "$c4" "$tmp/badpending"
sed 's/"clip_coef":[0-9.e-]*/"clip_coef":2.5/' "$c4/trainer_state.json" > "$tmp/badpending/trainer_state.json"
# (the marker of a version before it held the state's checksum, which would
# refuse the edit first: the field's own check is what is tried here)
sed -n 1p "$c4/checkpoint.complete" > "$tmp/badpending/checkpoint.complete"
run 1 b2 $args --resume "$tmp/badpending" && bad "a damaged pending_update accepted" ||
  { grep -q "trainer_state.json: \"pending_update\" is invalid" "$tmp/b2.txt" && ok || { bad "pending_update message"; cat "$tmp/b2.txt"; }; }
cp -r "$c4" "$tmp/nograd"; rm "$tmp/nograd/pending_gradient.safetensors"
run 1 b3 $args --resume "$tmp/nograd" && bad "a missing pending gradient accepted" ||
  { grep -q "nograd/pending_gradient.safetensors: cannot open" "$tmp/b3.txt" && ok || { bad "missing gradient message"; cat "$tmp/b3.txt"; }; }
finish
