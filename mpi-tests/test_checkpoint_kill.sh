#!/bin/sh
# Proves: a run killed with SIGKILL at random moments, again and again (one
# rank, or mpirun and then every rank, as a scheduler ends a job), and once
# while a checkpoint is half written (RP_FAULT_CHECKPOINT_HOLD), ends, when
# restarted each time with the same command and --resume auto, with the
# model of a run that was never killed, bit for bit: only complete
# checkpoints are resumed, and the half-written one is ignored and cleaned
# up. 20 kill points; the delays come from a fixed seed.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
args="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4 --steps 200 --lr 3e-3 --seed 9 --progress none --threads 1 --device cpu --timeout 30"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --save "$tmp/ref" > "$tmp/ref.txt" 2>&1 || { bad "reference run"; cat "$tmp/ref.txt"; }
ck="$tmp/ck"
start() { # the run, in the background; $pid is mpirun's
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --checkpoint-dir "$ck" --checkpoint-every 2 \
    --keep-checkpoints 2 --resume auto --save "$tmp/final" >> "$tmp/runs.txt" 2>&1 &
  pid=$!
}
killall_run() { pkill -9 -f "^$bin train .*$ck" 2>/dev/null; }
kills=0
# the first: while a checkpoint is half written
RP_FAULT_CHECKPOINT_HOLD=5 ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --checkpoint-dir "$ck" \
  --checkpoint-every 2 --keep-checkpoints 2 --resume auto --save "$tmp/final" >> "$tmp/runs.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 200 ] && ! ls -d "$ck"/*.tmp > /dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
ls -d "$ck"/*.tmp > /dev/null 2>&1 && ok || bad "no checkpoint was being written"
kill -9 $pid; killall_run; wait $pid 2>/dev/null
kills=$((kills + 1))
ls -d "$ck"/*.tmp > /dev/null 2>&1 && ok || bad "the half-written checkpoint is not there to be ignored"
# delays in tenths of a second, 2..13, from a fixed linear congruential seed
x=12345
while [ $kills -lt 20 ]; do
  x=$(( (x * 1103515245 + 12345) % 2147483648 )); d=$(( 2 + x / 65536 % 12 ))
  start
  sleep "$(printf '%d.%d' $((d / 10)) $((d % 10)))"
  if [ $((kills % 2)) -eq 0 ]; then
    p=$(pgrep -f "^$bin train .*$ck" | head -n 1); [ -n "$p" ] && kill -9 "$p"
  else
    kill -9 $pid 2>/dev/null
  fi
  killall_run
  wait $pid 2>/dev/null
  kills=$((kills + 1))
  [ -e "$tmp/final/model.safetensors" ] && break # finished before the kill
done
echo "$kills kill points; checkpoints left: $(ls "$ck" | tr '\n' ' ')"
# run to the end with the same command
i=0
while [ ! -e "$tmp/final/model.safetensors" ] && [ $i -lt 3 ]; do
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --checkpoint-dir "$ck" --checkpoint-every 2 \
    --keep-checkpoints 2 --resume auto --save "$tmp/final" >> "$tmp/runs.txt" 2>&1
  i=$((i + 1))
done
cmp -s "$tmp/ref/model.safetensors" "$tmp/final/model.safetensors" && ok ||
  { bad "after $kills kills the model differs from the uninterrupted run's"; tail -n 30 "$tmp/runs.txt"; }
[ "$kills" -ge 20 ] && ok || bad "only $kills kill points landed before the run finished"
ls -d "$ck"/*.tmp > /dev/null 2>&1 && bad "a half-written checkpoint was left behind" || ok
[ ! -e "$ck/step-00000002.tmp" ] && ok || bad "the half-written checkpoint was not cleaned up"
grep -q "resuming from $ck/step-" "$tmp/runs.txt" && ok || bad "no run resumed"
finish
