#!/bin/sh
# Proves: `roundpipe train` reproduces a PyTorch/transformers training run
# (tools/make_golden.py: Qwen3 with GQA, tied embeddings, a loss mask and
# active clipping; Llama untied with biases and llama3 RoPE scaling; the
# Qwen3 case again with the one-step-stale optimizer, --optimizer-lag 1): every
# logged loss, lr and grad_norm and every final weight within 1e-4 relative,
# on 1 and 3 ranks, and with several pipelines (--pipelines 2 on 2 ranks;
# llama, with 3 microbatches: --pipelines 3 on 3). The saved model is also what the comparison reads, so
# --save is checked on the way.
# Ranks: 1 2 3
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden"
cmp="$build/mpi-tests/golden_compare"
rc=0
for case in qwen3 llama qwen3-lag; do
  d="$fix/$case"
  in="$d"  # model and data, or those of the case named in inputs.txt
  [ -f "$d/inputs.txt" ] && in="$fix/$(cat "$d/inputs.txt")"
  mask=""
  [ -f "$in/mask.npy" ] && mask="--loss-mask $in/mask.npy"
  pp="2:2"; [ "$case" = llama ] && pp="3:3"
  for spec in 1:1 3:1 $pp; do
    np=${spec%%:*}; P=${spec#*:}
    out="$tmp/$case-$np-$P"
    echo "== $case on $np rank(s), $P pipeline(s)"
    # shellcheck disable=SC2046
    if ! ${MPIRUN:-mpirun} $flags -np $np "$bin" train --model "$in/model" --data "$in/data.npy" \
         $mask $(cat "$d/args.txt") --pipelines $P --progress none --log "$out.jsonl" \
         --save "$out"; then
      echo "roundpipe train failed"; failed=$((failed + 1)); rc=1; continue
    fi
    res=$("$cmp" "$d/expected.jsonl" "$out.jsonl" "$d/final/model.safetensors" \
          "$out/model.safetensors" 1e-4)
    r=$?
    echo "$res" | grep -v '^RP-CHECK'
    p=$(echo "$res" | sed -n 's/^RP-CHECK: passed=\([0-9]*\).*/\1/p')
    f=$(echo "$res" | sed -n 's/^RP-CHECK: .*failed=\([0-9]*\)/\1/p')
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
    [ $r -ne 0 ] && rc=1
  done
done
echo "RP-CHECK: passed=$passed failed=$failed"
exit $rc
