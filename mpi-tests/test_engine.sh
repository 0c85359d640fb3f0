#!/bin/sh
# Proves, for the pipeline engine on CPU executors:
# - for fixed M and threads, the logged losses and saved weights are
#   bit-identical for G = 1, 2, 3, 4 executors and for forced partitions
#   (one layer per stage, the whole model in the tail, uneven stages) with
#   stage- and layer-grain recompute, on both golden cases (tied and untied);
# - the same with random delays injected before every signal, over seeds,
#   and for the one-step-stale optimizer (--optimizer-lag 1);
# - a planted deadlock (a producer that never signals) ends within the
#   deadline on every rank with a message naming the rank, the job and the
#   event with its value and the value awaited, and a non-zero exit.
# (That these runs also match PyTorch is test_golden.sh's job.)
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1

# run CASE NP OUT [options...]: train, leave OUT.jsonl and OUT/model.safetensors
run() {
  c=$1; np=$2; out=$3; shift 3
  d="$src/mpi-tests/fixtures/golden/$c"
  mask=""; [ -f "$d/mask.npy" ] && mask="--loss-mask $d/mask.npy"
  # shellcheck disable=SC2046
  ${MPIRUN:-mpirun} $flags -x RP_INJECT_DELAY_US -x RP_INJECT_SEED -x RP_FAULT_DROP_SIGNAL -np "$np" "$bin" train \
    --model "$d/model" --data "$d/data.npy" $mask $(cat "$d/args.txt") --progress none \
    --timeout 60 --log "$out.jsonl" --save "$out" "$@" > "$out.txt" 2>&1
}
# same CASE REF OUT: identical losses (every digit logged) and identical weights
same() {
  if cmp -s "$2/model.safetensors" "$3/model.safetensors" && \
     [ "$(cut -d, -f1-4 "$2.jsonl")" = "$(cut -d, -f1-4 "$3.jsonl")" ]; then ok
  else bad "$1: $(basename "$3") differs from $(basename "$2")"; fi
}
export RP_INJECT_DELAY_US=0 RP_INJECT_SEED=0 RP_FAULT_DROP_SIGNAL=

# qwen3: 4 layers (embedding, 2 blocks, head); llama the same shape
for c in qwen3 llama; do
  run $c 1 "$tmp/$c-ref" || { bad "$c: reference run failed"; cat "$tmp/$c-ref.txt"; continue; }
  ok
  for np in 2 3 4; do
    run $c $np "$tmp/$c-g$np" && same $c "$tmp/$c-ref" "$tmp/$c-g$np" || bad "$c G=$np failed"
  done
  i=0
  for plan in "fwd=0,1,2;bwd=3,2,1,0" "fwd=;bwd=0-3" "fwd=0-1;bwd=2-3,0-1" "fwd=0,1;bwd=2-3,1,0"; do
    for rc in stage layer; do
      i=$((i + 1)); np=$((i % 4 + 1))
      run $c $np "$tmp/$c-p$i" --plan "$plan" --recompute $rc && \
        same $c "$tmp/$c-ref" "$tmp/$c-p$i" || bad "$c plan $plan ($rc) on $np failed"
    done
  done
done

# delay injection: every signal sleeps 0..2 ms, five seeds, 3 executors
for seed in 1 2 3 4 5; do
  RP_INJECT_DELAY_US=2000 RP_INJECT_SEED=$seed run qwen3 3 "$tmp/inj$seed" \
    --plan "fwd=0,1;bwd=2-3,1,0" && same qwen3 "$tmp/qwen3-ref" "$tmp/inj$seed" || \
    bad "delay injection seed $seed"
done

# the one-step-stale optimizer keeps the same guarantees (its parity with a
# lagged PyTorch loop is in test_golden.sh)
run qwen3 1 "$tmp/lag-ref" --optimizer-lag 1 && ok || bad "lag reference run failed"
for np in 2 3 4; do
  RP_INJECT_DELAY_US=1000 RP_INJECT_SEED=$np run qwen3 $np "$tmp/lag$np" --optimizer-lag 1 \
    --plan "fwd=0,1;bwd=2-3,1,0" && same lag "$tmp/lag-ref" "$tmp/lag$np" || bad "lag on $np"
done
i=0
for plan in "fwd=;bwd=0-3" "fwd=0,1,2;bwd=3,2,1,0" "fwd=0-1;bwd=2-3,0-1"; do
  for np in 2 3; do
    i=$((i + 1))
    RP_INJECT_DELAY_US=500 RP_INJECT_SEED=$i run qwen3 $np "$tmp/lagp$i" --optimizer-lag 1 \
      --plan "$plan" && same lag "$tmp/lag-ref" "$tmp/lagp$i" || bad "lag plan $plan on $np"
  done
done
if cmp -s "$tmp/lag-ref/model.safetensors" "$tmp/qwen3-ref/model.safetensors"; then
  bad "lagged and exact runs gave the same weights"; else ok; fi

# planted deadlock: forward stage 0 never signals microbatch 1
start=$(date +%s)
RP_FAULT_DROP_SIGNAL=fwd_out:0:1 run qwen3 3 "$tmp/dead" --timeout 2 \
  2>/dev/null
rc=$?
end=$(date +%s)
[ $rc -ne 0 ] && ok || bad "deadlock: exit 0"
[ $((end - start)) -le 15 ] && ok || bad "deadlock: took $((end - start)) s with --timeout 2"
for r in 0 1 2; do
  grep -q "^\[roundpipe $r\] error: rank $r, job .*waiting for event .*: value [0-9]*, awaited [0-9]*" \
    "$tmp/dead.txt" && ok || bad "deadlock: no naming message from rank $r"
done
grep -q "waiting for event fwd_out\[stage 0, microbatch 1\]: value 0, awaited 1" "$tmp/dead.txt" \
  && ok || { bad "deadlock: the dropped event is not named"; cat "$tmp/dead.txt"; }

finish
