#!/bin/sh
# Proves (CPU executors, tiny model, 2 ranks) that checkpoints never lose a
# run nor a user's files (issue 30, part 6):
# 3. pruning removes only what roundpipe wrote: step-NNNNNNNN directories
#    beyond --keep-checkpoints and step-NNNNNNNN.tmp leftovers; a user's
#    step-00000003.keep (with its marker), step-00000006-notes/ and a
#    step-00000001/ without a marker stay, with --keep-checkpoints 1 and 0;
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
. "$(dirname "$0")/resume_lib.sh"
T="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2"
# has OUT PATTERN WHAT: $tmp/OUT.txt matches
has() { if grep -q -- "$2" "$tmp/$1.txt"; then ok; else bad "$3: no '$2' in:"; cat "$tmp/$1.txt"; fi; }

# --- 3. pruning removes only what roundpipe wrote
ck="$tmp/ck3"
mkdir -p "$ck/step-00000003.keep" "$ck/step-00000006-notes" "$ck/step-00000001" "$ck/step-00000002.tmp"
echo "step 3" > "$ck/step-00000003.keep/checkpoint.complete"
echo mine > "$ck/step-00000003.keep/model.safetensors"
echo notes > "$ck/step-00000006-notes/README"
echo mine > "$ck/step-00000001/model.safetensors"
echo left > "$ck/step-00000002.tmp/model.safetensors.tmp-1"
run 2 c3 $T --steps 8 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 1 || { bad "3: run"; cat "$tmp/c3.txt"; }
[ "$(ls "$ck" | tr '\n' ' ')" = "step-00000001 step-00000003.keep step-00000006-notes step-00000008 " ] &&
  [ -f "$ck/step-00000003.keep/checkpoint.complete" ] && [ -f "$ck/step-00000006-notes/README" ] && ok ||
  bad "3: --keep-checkpoints 1 left: $(ls "$ck" | tr '\n' ' ')"
mkdir "$ck/step-00000004.tmp"
run 2 c3b $T --steps 4 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 0 || { bad "3: run, keep 0"; cat "$tmp/c3b.txt"; }
[ "$(ls "$ck" | tr '\n' ' ')" = "step-00000001 step-00000002 step-00000003.keep step-00000004 step-00000006-notes step-00000008 " ] && ok ||
  bad "3: --keep-checkpoints 0 left: $(ls "$ck" | tr '\n' ' ')"

finish
