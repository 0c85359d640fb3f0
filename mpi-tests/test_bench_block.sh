#!/bin/sh
# Proves: bench/bench_block (one block's forward and backward, op by op
# through the kernels' probe, kernels/ops.h) sees every op the model issues
# and times the whole pass: on the tiny Qwen3 config the forward lists the
# seven projections' linear_forward call sites, the attention and the
# SwiGLU, the backward the seven weight and seven input gradients and the
# attention's backward; with one rep the ops' figures add up to the pass's
# (the marks partition it: no op missed, none counted twice) and the
# shares of GEMMs, attention and the rest add up to 1; without a GPU
# `-d cuda` exits 77 naming the device; bad usage exits 2 and a missing
# config exits 1 naming the file.
set -u
. "$(dirname "$0")/testlib.sh"
bb="$build/bench/bench_block"
cfg="$src/examples/tiny-config.json"

OMP_NUM_THREADS=1 "$bb" -c "$cfg" -t 64 -s 2 -r 1 > "$tmp/out" 2>&1 && ok ||
  { bad "bench_block on the CPU failed"; cat "$tmp/out"; }
sites() {  # PASS OP: the number of distinct call sites of OP in PASS
  awk -v p="$1" -v o="$2" '$1=="RESULT" && $2=="block_op" && $3==p && $4==o' "$tmp/out" | wc -l
}
for want in "forward linear_forward 7" "forward attention_forward 1" "forward swiglu_forward 1" \
            "backward linear_backward_weight 7" "backward linear_backward_input 7" \
            "backward attention_backward 1"; do
  set -- $want
  n=$(sites "$1" "$2")
  [ "$n" -eq "$3" ] && ok || { bad "$1: $n call sites of $2, expected $3"; cat "$tmp/out"; }
done
for p in forward backward; do
  # the ops' milliseconds (4 decimals each) against the pass's, and the
  # shares (3 of 4 decimals each: their sum is 1 within 3 roundings of 5e-5)
  awk -v p=$p '$1=="RESULT" && $2=="block_op" && $3==p { sum += $7; n++ }
               $1=="RESULT" && $2=="block" && $3==p { total = $4; shares = $5 + $6 + $7 }
               END { tol = 0.0001 * (n + 1)
                     if (n == 0 || total <= 0 || sum - total > tol || total - sum > tol ||
                         shares < 1 - 0.00015 || shares > 1 + 0.00015) {
                       printf "%s: ops %.4f ms vs pass %.4f ms (%d ops), shares %.4f\n", p, sum, total, n, shares
                       exit 1 } }' "$tmp/out" && ok || { bad "$p: the ops do not add up to the pass"; cat "$tmp/out"; }
done

"$bb" -c "$cfg" -d cuda -t 64 -r 1 > "$tmp/cuda" 2>&1; rc=$?
if [ $rc = 77 ]; then
  grep -q "no cuda device" "$tmp/cuda" && ok || { bad "exit 77 without saying why"; cat "$tmp/cuda"; }
else
  [ $rc = 0 ] && ok || { bad "bench_block -d cuda: exit $rc"; cat "$tmp/cuda"; }
fi
"$bb" -t 64 > "$tmp/usage" 2>&1; [ $? = 2 ] && grep -q "usage" "$tmp/usage" && ok || bad "no config: not a usage error"
"$bb" -c "$tmp/none.json" > "$tmp/missing" 2>&1; [ $? = 1 ] && grep -q "none.json" "$tmp/missing" && ok ||
  { bad "a missing config does not fail naming it"; cat "$tmp/missing"; }
finish
