#!/bin/sh
# Proves (CPU executors): the validation loss (--eval-data) of the golden
# packed-documents models (qwen3 with a loss mask, llama), over every sample
# with --eval-mask and --eval-documents, equals the float64 reference of
# tools/make_golden.py (each document its own sequence) within 1e-5, with
# the same bits (all 17 digits) on 1 and 3 ranks; --eval-every N evaluates
# after every N-th step and the last, --eval-samples K takes the first K
# samples, and evaluating does not change the trained model; a resumed run
# keeps the evaluation lines of its log; the progress display shows the
# value; bad input is refused naming the file or the option.
# Ranks: 1 2 3
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
run() { # NP OUT_PREFIX [options...]: a run; its stderr in $tmp/OUT.txt
  np=$1; out=$2; shift 2
  no_grace=""; [ "$np" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $no_grace -np "$np" "$bin" train --device cpu --threads 1 --timeout 60 \
    "$@" > "$tmp/$out.txt" 2>&1
}
field() { # FILE STEP KEY: KEY's value on the evaluation line of STEP
  grep "^{\"step\":$2,\"eval_loss\"" "$1" | sed -n "s/.*\"$3\":\([^,}]*\).*/\1/p"
}
for m in qwen3 llama; do
  g="$src/mpi-tests/fixtures/golden/$m-packed"
  mask=""; [ -f "$g/mask.npy" ] && mask="--loss-mask $g/mask.npy"
  emask=""; [ -f "$g/mask.npy" ] && emask="--eval-mask $g/mask.npy"
  steps=$(sed -n 's/.*--steps \([0-9]*\).*/\1/p' "$g/args.txt")
  for np in 1 3; do
    # shellcheck disable=SC2046
    run $np "$m$np" --model "$g/model" --data "$g/data.npy" $mask --documents "$g/documents.npy" \
      $(cat "$g/args.txt") --progress none --log "$tmp/$m$np.jsonl" \
      --eval-data "$g/data.npy" $emask --eval-documents "$g/documents.npy" ||
      { bad "$m on $np rank(s)"; cat "$tmp/$m$np.txt"; continue; }
  done
  a=$(field "$tmp/${m}1.jsonl" "$steps" eval_loss) b=$(field "$tmp/${m}3.jsonl" "$steps" eval_loss)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$m: eval_loss on 1 rank '$a', on 3 '$b'"
  want=$(sed -n 's/.*"eval_loss": \([^,]*\),.*/\1/p' "$g/final/eval_all.json")
  wtok=$(sed -n 's/.*"eval_tokens": \([0-9]*\),.*/\1/p' "$g/final/eval_all.json")
  awk -v a="$a" -v w="$want" 'BEGIN { d = a - w; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * w) }' &&
    [ "$(field "$tmp/${m}1.jsonl" "$steps" eval_tokens)" = "$wtok" ] && ok ||
    bad "$m: eval_loss $a over $(field "$tmp/${m}1.jsonl" "$steps" eval_tokens) targets, float64 reference $want over $wtok"
done

# --eval-every and --eval-samples on the embedded default's data
data="$build/examples/data/gnu-licenses.npy"
tiny="--init-config $src/examples/tiny-config.json --data $data --seq-len 32 --batch-size 8 --microbatches 4 --steps 5 --lr 3e-3 --seed 4"
run 2 plain $tiny --progress none --save "$tmp/plain"
run 2 ev $tiny --progress line --save "$tmp/ev" --log "$tmp/ev.jsonl" --eval-data "$data" --eval-every 2 --eval-samples 30 ||
  { bad "--eval-every run"; cat "$tmp/ev.txt"; }
[ "$(grep -c '"eval_loss"' "$tmp/ev.jsonl")" -eq 3 ] && [ -n "$(field "$tmp/ev.jsonl" 2 eval_loss)" ] &&
  [ -n "$(field "$tmp/ev.jsonl" 4 eval_loss)" ] && [ "$(field "$tmp/ev.jsonl" 5 eval_samples)" = 30 ] && ok ||
  { bad "--eval-every 2 of 5 steps: not evaluations after steps 2, 4 and 5 of 30 samples"; cat "$tmp/ev.jsonl"; }
cmp -s "$tmp/plain/model.safetensors" "$tmp/ev/model.safetensors" && ok || bad "evaluating changed the trained model"
grep -q "eval after step 4: eval_loss [0-9.]* over [0-9]* counted targets of 30 samples" "$tmp/ev.txt" &&
  grep -q "done: 5 steps in .*, eval loss [0-9.]* after step 5" "$tmp/ev.txt" && ok ||
  { bad "no evaluation line or progress"; cat "$tmp/ev.txt"; }
# a resumed run keeps the log's lines of steps 1-2 with their evaluation
run 2 cka $tiny --progress none --log "$tmp/ck.jsonl" --eval-data "$data" --eval-every 2 --eval-samples 30 --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --keep-checkpoints 0
run 1 ckb --data "$data" --seq-len 32 --batch-size 8 --microbatches 4 --steps 5 --lr 3e-3 --seed 4 --progress none \
  --log "$tmp/ck.jsonl" --eval-data "$data" --eval-every 2 --eval-samples 30 --resume "$tmp/ck/step-00000002" ||
  { bad "resume with evaluations"; cat "$tmp/ckb.txt"; }
grep '"eval_loss"' "$tmp/ev.jsonl" > "$tmp/a.ev"; grep '"eval_loss"' "$tmp/ck.jsonl" > "$tmp/b.ev"
cmp -s "$tmp/a.ev" "$tmp/b.ev" && [ "$(grep -c . "$tmp/ck.jsonl")" -eq 8 ] && ok ||
  { bad "resumed log: evaluation lines differ or lines lost"; cat "$tmp/ck.jsonl"; }

# bad input
short="$tmp/short.npy"
{ printf '\223NUMPY\001\000\166\000'; printf "%-117s\n" "{'descr': '|u1', 'fortran_order': False, 'shape': (10,), }"; printf '0123456789'; } > "$short"
run 1 b1 $tiny --eval-data "$short" && bad "an eval set shorter than a sample accepted" ||
  { grep -q "short.npy: 10 tokens hold no sample of --seq-len 32" "$tmp/b1.txt" && ok || { bad "short eval set: message"; cat "$tmp/b1.txt"; }; }
run 1 b2 $tiny --eval-every 2 && bad "--eval-every without --eval-data accepted" ||
  { grep -q -- "--eval-every and --eval-samples need --eval-data" "$tmp/b2.txt" && ok || { bad "--eval-every alone: message"; cat "$tmp/b2.txt"; }; }
run 1 b3 $tiny --eval-data "$data" --eval-every 2 --optimizer-lag 1 && bad "--eval-every with a lagged optimizer accepted" ||
  { grep -q -- "--eval-every with --optimizer-lag 1" "$tmp/b3.txt" && ok || { bad "lag: message"; cat "$tmp/b3.txt"; }; }
g="$src/mpi-tests/fixtures/golden/llama-packed"  # 180 tokens; starts 0 and 500 (little-endian int64)
{ printf '\223NUMPY\001\000\166\000'; printf "%-117s\n" "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"
  printf '\000\000\000\000\000\000\000\000\364\001\000\000\000\000\000\000'; } > "$tmp/past.npy"
run 1 b4 $tiny --eval-data "$g/data.npy" --eval-documents "$tmp/past.npy" && bad "eval documents past the eval data accepted" ||
  { grep -q "documents $tmp/past.npy: index 1: start 500 is past the 180 tokens of $g/data.npy" "$tmp/b4.txt" && ok || { bad "eval documents: message"; cat "$tmp/b4.txt"; }; }

# a short last microbatch (--eval-samples 3 at 2 samples a microbatch):
# one chunk covers its 24 tokens, so its block keeps the dense MLP's g, u
# and m in the saved area, which a full microbatch of two chunks (tiles of
# 38 tokens, one tile a chunk) does not: the evaluator's buffers are sized
# for every count of samples (memory_model.c). Under RP_TEST_DEVICE_GUARDS=1
# a kernel writing past a buffer's end stops the run (sized for a full
# microbatch alone, as before, both runs abort: "a buffer of 189696 bytes
# was written past its end").
for np in 1 3; do
  ${MPIRUN:-mpirun} $flags -x RP_TEST_DEVICE_GUARDS=1 -np $np "$bin" train --device cpu --threads 1 \
    --timeout 60 --init-config "$src/examples/tiny-config.json" --data "$data" --seq-len 24 \
    --batch-size 4 --microbatches 2 --steps 2 --token-tile 38 --mlp-chunk-tokens 38 \
    --eval-data "$data" --eval-samples 3 --log "$tmp/short-$np.jsonl" > "$tmp/short-$np.txt" 2>&1 &&
    [ -n "$(field "$tmp/short-$np.jsonl" 2 eval_loss)" ] && ok ||
    { bad "a short last evaluation microbatch on $np rank(s)"; tail -n 5 "$tmp/short-$np.txt"; }
done
finish
