#!/bin/sh
# Proves: a run killed with SIGKILL at random moments, again and again (one
# rank, or mpirun and then every rank, as a scheduler ends a job), and once
# while a checkpoint is half written (RP_FAULT_CHECKPOINT_HOLD), ends, when
# restarted each time with the same command and --resume auto, with the
# model of a run that was never killed, bit for bit: only complete
# checkpoints are resumed, the half-written one is ignored and cleaned up,
# and no checkpoint a kill cut short while removing it is left behind
# without its marker (pruning never removes one). 20 kill points; the delays come from a fixed seed (and the killed
# runs sleep up to 3 ms before every signal, which changes no bits).
# Ctrl-C at a terminal under mpirun (SIGINT to mpirun's process group; the
# ranks get SIGTERM, then SIGKILL a second later): mpirun exits 1, rank 0
# says at once which checkpoint is kept, and the run stops after the step
# in progress with its checkpoint; killed while writing it (held 5 s), the
# half-written step-N.tmp is removed, and named, at the next start, the
# kept checkpoint untouched; without --checkpoint-dir the line says that no
# checkpoint is kept.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
args="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 8 --microbatches 4 --steps 200 --lr 3e-3 --seed 9 --progress none --threads 1 --device cpu --timeout 30"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --save "$tmp/ref" > "$tmp/ref.txt" 2>&1 || { bad "reference run"; cat "$tmp/ref.txt"; }
ck="$tmp/ck"
# start: the run, in the background; $pid is mpirun's. Each kill lands in
# wall time 0.1-1.2 s after the run has trained its first step (its own
# --log, a file per start: rank 0 writes it, not mpirun): a run killed
# during MPI's start-up trains nothing, and under load that start-up alone
# outlasted every delay (a CI run beside other work: 20 kills, no
# checkpoint ever written, "no run resumed"). Up to 3 ms before every
# signal (RP_INJECT_DELAY_US, which changes no bits: test_engine.sh,
# test_nodes.sh) makes a step about 0.1 s, so the runs train a step and
# about 0.65 s each, some 140 steps of 200 in all: the 20 kill points land
# before the run can finish on a faster machine too. The reference and the
# runs to the end after the kills train without the delays.
# The killed runs' mpirun keeps no grace (odls_base_sigkill_timeout 0):
# once a rank is killed it would SIGTERM the other, wait a second and
# SIGKILL it, twice over for ranks the test has already killed (15 s of
# this test); every rank of these runs dies by SIGKILL either way.
no_grace="--mca odls_base_sigkill_timeout 0"
start() {
  log="$tmp/kill-$kills.jsonl"
  RP_INJECT_DELAY_US=3000 ${MPIRUN:-mpirun} $flags $no_grace -x RP_INJECT_DELAY_US -np 2 "$bin" train $args \
    --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 2 --resume auto \
    --save "$tmp/final" --log "$log" >> "$tmp/runs.txt" 2>&1 &
  pid=$!
  w=0
  while ! [ -s "$log" ] && [ $w -lt 600 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1; w=$((w + 1))
  done
}
killall_run() { pkill -9 -f "^$bin train .*$ck" 2>/dev/null; }
kills=0
# the first: while a checkpoint is half written
RP_FAULT_CHECKPOINT_HOLD=5 ${MPIRUN:-mpirun} $flags $no_grace -np 2 "$bin" train $args --checkpoint-dir "$ck" \
  --checkpoint-every 2 --keep-checkpoints 2 --resume auto --save "$tmp/final" >> "$tmp/runs.txt" 2>&1 &
pid=$!
i=0; while [ $i -lt 200 ] && ! ls -d "$ck"/*.tmp > /dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
ls -d "$ck"/*.tmp > /dev/null 2>&1 && ok || bad "no checkpoint was being written"
kill -9 $pid; killall_run; wait $pid 2>/dev/null
kills=$((kills + 1))
ls -d "$ck"/*.tmp > /dev/null 2>&1 && ok || bad "the half-written checkpoint is not there to be ignored"
# delays in tenths of a second, 1..12, from a fixed linear congruential seed
x=12345
while [ $kills -lt 20 ]; do
  x=$(( (x * 1103515245 + 12345) % 2147483648 )); d=$(( 1 + x / 65536 % 12 ))
  start
  sleep "$(printf '%d.%d' $((d / 10)) $((d % 10)))"
  if [ $((kills % 2)) -eq 0 ]; then
    # one rank; on a loaded machine mpirun may not have started them yet:
    # then mpirun (else nothing would stop this run and it would finish)
    p=$(pgrep -f "^$bin train .*$ck" | head -n 1)
    if [ -n "$p" ]; then kill -9 "$p"; else kill -9 $pid 2>/dev/null; fi
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
# no checkpoint cut short by a kill left for good: pruning never removes a
# step-N without its marker
leak=""
for d in "$ck"/step-*; do
  case $d in *.tmp) continue ;; esac
  [ -d "$d" ] && [ ! -f "$d/checkpoint.complete" ] && leak="$leak ${d##*/}"
done
[ -z "$leak" ] && ok || bad "checkpoints without their marker left for good:$leak"

# Ctrl-C at a terminal under mpirun: the terminal signals mpirun's process
# group (setsid here: the ranks have groups of their own), mpirun sends the
# ranks SIGTERM, SIGKILLs them about a second later and exits 1 whatever
# they do (Open MPI). Each time rank 0 says what is kept, and nothing
# half-written outlives the next start.
ctrl_c() { # ctrl_c OUT [env] -- train options: a run, Ctrl-C once 3 steps are logged; $rc
  out=$1; shift
  rm -f "$tmp/cc.jsonl"
  env "$@" > "$out" 2>&1 &
  pid=$!
  i=0; while [ "$(cat "$tmp/cc.jsonl" 2>/dev/null | wc -l)" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  kill -INT -$pid
  wait $pid; rc=$?
}
cc="$tmp/cc-ck"
long="$args --steps 100000 --log $tmp/cc.jsonl --checkpoint-dir $cc"
# the step in progress and its checkpoint fit in mpirun's grace here
# shellcheck disable=SC2086
ctrl_c "$tmp/cc1.txt" RP_FAULT_CHECKPOINT_HOLD=0 setsid ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $long
k=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) of 100000: continue with the same command and --resume.*/\1/p' "$tmp/cc1.txt")
[ $rc -eq 1 ] && [ -n "$k" ] && grep -q "SIGTERM: stopping after the step in progress with its checkpoint .*kept: no checkpoint" "$tmp/cc1.txt" &&
  [ -f "$cc/step-$(printf %08d "$k")/checkpoint.complete" ] && ok ||
  { bad "Ctrl-C under mpirun: exit $rc (mpirun's own: 1), stopped after step '$k'"; cat "$tmp/cc1.txt"; }
ls -d "$cc"/*.tmp > /dev/null 2>&1 && bad "Ctrl-C under mpirun: a .tmp left" || ok
# the checkpoint does not (held 5 s): killed while writing it, after saying
# which checkpoint is kept; its temporary directory is left ...
# shellcheck disable=SC2086
ctrl_c "$tmp/cc2.txt" RP_FAULT_CHECKPOINT_HOLD=5 setsid ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $long --resume auto
[ $rc -eq 1 ] && grep -q "SIGTERM: stopping after the step in progress with its checkpoint .*kept: $cc/step-$(printf %08d "$k")\$" "$tmp/cc2.txt" &&
  ls -d "$cc"/step-*.tmp > /dev/null 2>&1 && ok ||
  { bad "Ctrl-C under mpirun, killed while writing: exit $rc, or no line saying what is kept"; cat "$tmp/cc2.txt"; ls "$cc"; }
left=$(cd "$cc" && ls -d step-*.tmp 2>/dev/null | head -n 1)
# ... and removed, and named, at the next start
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --steps 2 --checkpoint-dir "$cc" > "$tmp/cc3.txt" 2>&1
grep -q "removed $cc/$left, a checkpoint a killed run left half-written" "$tmp/cc3.txt" &&
  ! ls -d "$cc"/*.tmp > /dev/null 2>&1 && [ -f "$cc/step-$(printf %08d "$k")/checkpoint.complete" ] && ok ||
  { bad "the half-written $left was not removed at the next start"; cat "$tmp/cc3.txt"; ls "$cc"; }
# without --checkpoint-dir the SIGTERM stops at once, saying nothing is kept
# shellcheck disable=SC2086
ctrl_c "$tmp/cc4.txt" RP_FAULT_CHECKPOINT_HOLD=0 setsid ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --steps 100000 --log "$tmp/cc.jsonl"
[ $rc -eq 1 ] && grep -q "interrupted at step [0-9]* of 100000 (SIGTERM); kept: no checkpoint (no --checkpoint-dir)" "$tmp/cc4.txt" && ok ||
  { bad "Ctrl-C under mpirun without checkpoints: exit $rc"; cat "$tmp/cc4.txt"; }
finish
