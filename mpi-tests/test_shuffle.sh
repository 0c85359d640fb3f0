#!/bin/sh
# Proves: --shuffle trains bit-identically on 1, 2 and 3 ranks over several
# epochs (the data file holds fewer samples than the run reads), changes the
# results against the file's order, is recorded in run.json and the
# checkpoint, and a run resumed from a checkpoint of step 3 (on another rank
# count) ends bit-identical to the straight run: the order depends only on
# the seed and the position. The order itself is test_io_dataset's.
# Ranks: 1, 2 and 3 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
data="$src/mpi-tests/fixtures/golden/llama/data.npy"
cfg="$src/mpi-tests/fixtures/golden/llama/model/config.json"
run() { # name ranks [more options]
  name=$1; np_=$2; shift 2
  ${MPIRUN:-mpirun} $flags -np "$np_" "$bin" train --init-config "$cfg" --data "$data" \
    --seq-len 16 --batch-size 4 --microbatches 4 --steps 6 --seed 7 --device cpu --threads 1 \
    --progress none --log "$tmp/$name.jsonl" --save "$tmp/$name" "$@" > "$tmp/$name.txt" 2>&1 ||
    { bad "$name: train failed"; cat "$tmp/$name.txt"; }
}
same() { cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; }
run s1 1 --shuffle
run s2 2 --shuffle --checkpoint-dir "$tmp/ck" --checkpoint-every 3
run s3 3 --shuffle
run u2 2
n=$(sed -n 's/.*; \([0-9]*\) samples of 16 tokens.*/\1/p' "$tmp/s1.txt")
[ -n "$n" ] && [ "$n" -lt 24 ] && ok || bad "the data should hold fewer than 6 x 4 samples, has '$n'"
same s1 s2 && same s1 s3 && ok || bad "--shuffle: 1, 2, 3 ranks differ"
same s2 u2 && bad "--shuffle gave the file order's model" || ok
grep -q '"shuffle": *true' "$tmp/s2.jsonl.run.json" && ok || bad "run.json does not record shuffle"
grep -q '"shuffle": *true' "$tmp/ck/step-00000003/trainer_state.json" && ok ||
  bad "the checkpoint does not record shuffle"
run r3 3 --shuffle --resume "$tmp/ck/step-00000003"
same s2 r3 && ok || bad "resumed --shuffle run differs from the straight one"
tail -n 3 "$tmp/s2.jsonl" | cut -d, -f1-4 > "$tmp/a" && tail -n 3 "$tmp/r3.jsonl" | cut -d, -f1-4 > "$tmp/b"
cmp -s "$tmp/a" "$tmp/b" && ok || bad "steps 4-6 logged differently after the resume"
# the seed draws the epochs still to come: another one is refused
if ${MPIRUN:-mpirun} $flags -np 1 "$bin" train --init-config "$cfg" --data "$data" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 6 --seed 8 --device cpu --progress none --shuffle \
    --resume "$tmp/ck/step-00000003" > "$tmp/bad.txt" 2>&1; then
  bad "a --shuffle resume with another seed was accepted"
else grep -q 'options.shuffle_seed is 7, this run has 8' "$tmp/bad.txt" && ok ||
  { bad "the seed refusal's message"; cat "$tmp/bad.txt"; }; fi
finish
