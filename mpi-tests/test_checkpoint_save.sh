#!/bin/sh
# Proves: a run interrupted after a checkpoint and resumed saves exactly what
# the run that never stopped saves (the --save directories byte for byte,
# file list included), for a --model stored in bf16 with tokenizer and
# generation files: the checkpoints carry those files (with checksums) and
# record the model's dtype ("model_dtype", a bad one refused naming the
# file and field), the save keeps that dtype, and a save still works when
# --keep-checkpoints has removed the checkpoint the run resumed from (with
# the default 2 and --checkpoint-every, and with 1); a resume with nothing
# left to train saves the same. The closing progress line says what is
# true: "done: steps 3-6 of 6" after a resume, "done: nothing left to train"
# (no "nan" loss) when nothing was, "stopped at step K of N" after SIGUSR1.
# Ranks: 2 and 1 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
. "$(dirname "$0")/resume_lib.sh"
args="--data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2 --steps 6 --lr 3e-3 --seed 5"
# the model: saved by roundpipe in bf16, with a tokenizer and generation files beside it
run 1 init --init-config "$src/examples/tiny-config.json" $args --steps 1 --save-dtype bf16 --save "$tmp/model" ||
  { bad "making the bf16 model"; cat "$tmp/init.txt"; }
grep -q '"torch_dtype": "bfloat16"' "$tmp/model/config.json" && ok || bad "the model is not bf16"
echo '{"version": "1.0", "model": {"type": "WordLevel"}}' > "$tmp/model/tokenizer.json"
echo '{"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "w1"}' > "$tmp/model/tokenizer_config.json"
echo '{"max_new_tokens": 5}' > "$tmp/model/generation_config.json"
echo "not a companion" > "$tmp/model/notes.txt"

same_save() { # A B what: the same files, byte for byte
  diff -r "$tmp/$1" "$tmp/$2" > "$tmp/diff" 2>&1 && ok || { bad "$3 save differs"; cat "$tmp/diff"; }
}
run 2 straight --model "$tmp/model" $args --save "$tmp/straight" || { bad "straight run"; cat "$tmp/straight.txt"; }
[ -f "$tmp/straight/tokenizer.json" ] && ok || bad "the straight run saved no tokenizer"
# interrupted after step 2: the checkpoints after it never written
run 2 part --model "$tmp/model" $args --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --keep-checkpoints 0 ||
  { bad "checkpointing run"; cat "$tmp/part.txt"; }
for f in tokenizer.json tokenizer_config.json generation_config.json; do
  cmp -s "$tmp/model/$f" "$tmp/ck/step-00000002/$f" && grep -q "\"$f\"" "$tmp/ck/step-00000002/trainer_state.json" &&
    ok || bad "the checkpoint does not carry $f (with its checksum)"
done
grep -q '"model_dtype": *"BF16"' "$tmp/ck/step-00000002/trainer_state.json" && ok || bad "the checkpoint does not record BF16"
# a bad model_dtype is refused, naming the file and the field
cp -r "$tmp/ck/step-00000002" "$tmp/baddt"
sed -i 's/"model_dtype": *"BF16"/"model_dtype": "bfloat17"/' "$tmp/baddt/trainer_state.json"
# (the marker of a version before it held the state's checksum, which would
# refuse the edited state before its fields are read)
sed -n 1p "$tmp/ck/step-00000002/checkpoint.complete" > "$tmp/baddt/checkpoint.complete"
run 1 baddt $args --resume "$tmp/baddt" && bad "a bad model_dtype accepted" ||
  { grep -q 'baddt/trainer_state.json: "model_dtype" is "bfloat17", not "F32", "BF16" or "F16"' "$tmp/baddt.txt" && ok ||
    { bad "bad model_dtype message"; cat "$tmp/baddt.txt"; }; }
rm -rf "$tmp/ck/step-00000004" "$tmp/ck/step-00000006"
cp -r "$tmp/ck" "$tmp/ck1"
# the default --keep-checkpoints 2: step 2, the source, goes when step 6 is written
run 2 auto $args --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --resume auto --save "$tmp/auto" --progress line ||
  { bad "resume auto with rotation failed"; cat "$tmp/auto.txt"; }
[ ! -e "$tmp/ck/step-00000002" ] && ok || bad "step 2 was not rotated away (the test does not test)"
same_save straight auto "resumed (auto, rotated)"
grep -q "^roundpipe: done: steps 3-6 of 6 in [0-9:]*, final loss [0-9.]*$" "$tmp/auto.txt" && ok ||
  { bad "a resumed run's closing line"; cat "$tmp/auto.txt"; }
# --keep-checkpoints 1, the path named, on 1 rank
run 1 one $args --checkpoint-dir "$tmp/ck1" --keep-checkpoints 1 --resume "$tmp/ck1/step-00000002" --save "$tmp/one" ||
  { bad "resume with --keep-checkpoints 1 failed"; cat "$tmp/one.txt"; }
[ "$(ls "$tmp/ck1")" = step-00000006 ] && ok || bad "--keep-checkpoints 1 kept: $(ls "$tmp/ck1" | tr '\n' ' ')"
same_save straight one "resumed (keep 1)"
# nothing left to train: the save is written from the last checkpoint
run 1 noop $args --checkpoint-dir "$tmp/ck1" --resume auto --save "$tmp/noop" --progress line ||
  { bad "a resume with nothing left failed"; cat "$tmp/noop.txt"; }
same_save straight noop "no-op resume"
grep -q "^roundpipe: done: nothing left to train (all 6 steps were done before this run)$" "$tmp/noop.txt" &&
  ! grep -q nan "$tmp/noop.txt" && ok || { bad "a no-op resume's closing line"; cat "$tmp/noop.txt"; }

# SIGUSR1 through mpirun: the closing line says where the run stopped
long="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 128 --batch-size 8 --microbatches 4 --steps 60 --seed 2"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --threads 1 --device cpu --timeout 60 --progress line $long \
  --checkpoint-dir "$tmp/cks" --log "$tmp/s.jsonl" > "$tmp/s.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 300 ] && [ "$(cat "$tmp/s.jsonl" 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.1; i=$((i + 1)); done
kill -s USR1 $pid; wait $pid
k=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of.*/\1/p' "$tmp/s.txt")
[ -n "$k" ] && [ "$k" -lt 60 ] && grep -q "^roundpipe: stopped at step $k of 60 after [0-9:]*, last loss [0-9.]*$" "$tmp/s.txt" &&
  ! grep -q "roundpipe: done" "$tmp/s.txt" && ok || { bad "a stopped run's closing line"; cat "$tmp/s.txt"; }
finish
