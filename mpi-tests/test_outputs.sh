#!/bin/sh
# Proves that nothing a run learns is lost and nothing hangs (issue 19), on
# the qwen3 golden fixture (2 blocks, CPU executors; 1 or 2 ranks):
# 1. output paths are checked before step 1: a --save under a missing parent
#    or onto a file, a --trace under a missing parent, a --log that is a
#    directory fail at once naming the option and path (no log line is
#    written, no save directory made);
# 2. --save-dtype fp16 writes F16 tensors and a float16 config that load
#    again, and a model loaded as F16 is saved as F16 by default;
# 3. saving into a directory holding a sharded checkpoint removes its shards
#    and index, so the directory loads the new weights;
# 4. --log /dev/full is reported at once, the model is still saved, and the
#    run exits non-zero, on 2 ranks without waiting out the CLI's report;
# 5. a save that fails on any of its files (RP_FAULT_SAVE_FILE=1, 2) leaves
#    the previous model byte for byte, loadable, with no temporary file;
# 6. --trace onto a symbolic link, a FIFO and (as root) a device node writes
#    through them and leaves them what they were;
# 7. SIGTERM / SIGINT to the ranks stop the run with "interrupted at step k",
#    exit 143 / 130, no host-store name in /dev/shm and no save; so does a
#    SIGTERM during start-up (where exactly it lands varies); a stale
#    /dev/shm/roundpipe-<dead pid>-* of this user is removed at the next start
#    (the reporting is proved in test_store_shm);
# 8. a rank stopped with SIGSTOP ends a 2-rank job with --timeout 5 within
#    3 x 5 s, with the message naming the rank, the event and the lost rank;
#    so does one stopped at the re-plan (8b) and one stopped between two
#    segments, as one ends or the next starts or makes its host store (8c);
# 10. a NaN weight in the input model is named (file and tensor) at load.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
fix="$src/mpi-tests/fixtures/golden/qwen3"
args="--data $fix/data.npy --seq-len 16 --batch-size 4 --progress none"

# train NP [options...]: output in $tmp/out.txt, exit status in $rc
train() {
  np=$1; shift
  no_grace=""; [ "$np" = 1 ] && no_grace=$one_rank # a failure on one rank: no grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $no_grace -x RP_FAULT_SAVE_FILE -np "$np" "$bin" train $args "$@" \
    > "$tmp/out.txt" 2>&1
  rc=$?
}
# has PATTERN WHAT: the last run's output matches
has() {
  if grep -q -- "$1" "$tmp/out.txt"; then ok; else bad "$2: no '$1' in:"; cat "$tmp/out.txt"; fi
}
# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun)
rank_pid() {
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$r" = "$2" ] && echo "$p"
  done
}
# wait_for FILE: until FILE is non-empty (40 s at most: a start slowed by
# the tests beside this one, or by a sanitizer, must not leave cases 7 and 8
# signalling a rank still starting up, where no step has begun)
wait_for() {
  i=0
  while [ ! -s "$1" ] && [ $i -lt 400 ]; do sleep 0.1; i=$((i + 1)); done
}
export RP_FAULT_SAVE_FILE=

# --- 1. output paths checked before any work
echo x > "$tmp/a-file"
for case in "--save $tmp/no/such/out" "--save $tmp/a-file" "--trace $tmp/no/such/t.json" \
            "--log $tmp"; do
  rm -f "$tmp/l1.jsonl"
  # shellcheck disable=SC2086
  train 2 --model "$fix/model" --steps 200 --log "$tmp/l1.jsonl" --save "$tmp/o1" $case
  [ "$case" = "--log $tmp" ] || [ ! -e "$tmp/l1.jsonl" ] && [ ! -e "$tmp/o1" ] && [ $rc -eq 1 ] \
    && ok || bad "1: $case: exit $rc, or training started (log or save written)"
  has "${case%% *} ${case#* }" "1: $case"
done

# --- 2. fp16 save and reload
train 1 --model "$fix/model" --steps 2 --save "$tmp/f16" --save-dtype fp16
[ $rc -eq 0 ] && head -c 300 "$tmp/f16/model.safetensors" | grep -q '"dtype":"F16"' && \
  grep -q '"torch_dtype": "float16"' "$tmp/f16/config.json" && ok || \
  { bad "2: fp16 save (exit $rc)"; cat "$tmp/out.txt"; }
train 1 --model "$tmp/f16" --steps 2 --save "$tmp/f16b"
[ $rc -eq 0 ] && head -c 300 "$tmp/f16b/model.safetensors" | grep -q '"dtype":"F16"' && ok || \
  { bad "2: an F16 model is not saved as F16 by default (exit $rc)"; cat "$tmp/out.txt"; }

# --- 3. a save replaces a sharded checkpoint
mkdir "$tmp/sh"
cp "$fix/model/config.json" "$tmp/sh/"
cp "$fix/model/model.safetensors" "$tmp/sh/model-00001-of-00001.safetensors"
{ printf '{"metadata": {}, "weight_map": {'
  head -c 4096 "$fix/model/model.safetensors" | grep -ao '"model[a-z_.0-9]*":{"dtype"' | \
    sed 's/:{"dtype"/: "model-00001-of-00001.safetensors"/' | paste -sd, -
  printf '}}\n'; } > "$tmp/sh/model.safetensors.index.json"
train 1 --model "$tmp/sh" --steps 2 --save "$tmp/sh"
[ $rc -eq 0 ] && [ "$(ls "$tmp/sh" | tr '\n' ' ')" = "config.json model.safetensors " ] && ok || \
  { bad "3: stale shards left: $(ls "$tmp/sh" | tr '\n' ' ') (exit $rc)"; cat "$tmp/out.txt"; }

# --- 4. a metrics log that cannot be written (the ranks agree on it: the
# run ends without the CLI's 10 s wait for ranks that never report)
t0=$(date +%s)
train 2 --model "$fix/model" --steps 3 --log /dev/full --save "$tmp/full"
t1=$(date +%s)
[ $rc -ne 0 ] && [ -s "$tmp/full/model.safetensors" ] && ok || bad "4: --log /dev/full: exit $rc"
has "\-\-log /dev/full: write failed at step 1: No space left on device" "4: --log /dev/full"
[ $((t1 - t0)) -lt 8 ] && ok || bad "4: --log /dev/full on 2 ranks took $((t1 - t0)) s (the report's wait)"
[ "$(grep -c 'error: --log /dev/full: write failed at step 1: No space left on device (the log' "$tmp/out.txt")" = 1 ] &&
  ok || { bad "4: --log /dev/full: not one final error line"; cat "$tmp/out.txt"; }

# --- 5. all-or-nothing save under a fault in each file
train 1 --model "$fix/model" --steps 1 --save "$tmp/prev"
cp -r "$tmp/prev" "$tmp/prev-copy"
for n in 1 2; do
  RP_FAULT_SAVE_FILE=$n train 1 --model "$tmp/prev" --steps 1 --save "$tmp/prev"
  [ $rc -ne 0 ] && diff -r "$tmp/prev" "$tmp/prev-copy" > /dev/null && ok || \
    { bad "5: RP_FAULT_SAVE_FILE=$n changed the previous model (exit $rc)"; cat "$tmp/out.txt"; }
  has "RP_FAULT_SAVE_FILE" "5: fault $n"
done
train 1 --model "$tmp/prev" --steps 1
[ $rc -eq 0 ] && ok || { bad "5: the previous model does not load"; cat "$tmp/out.txt"; }

# --- 6. --trace written through links, FIFOs and devices
ln -s "$tmp/target.json" "$tmp/link.json"
train 1 --model "$fix/model" --steps 1 --trace "$tmp/link.json"
[ $rc -eq 0 ] && [ -L "$tmp/link.json" ] && grep -q traceEvents "$tmp/target.json" && ok || \
  bad "6: symlink replaced or target not written (exit $rc)"
mkfifo "$tmp/fifo"
cat "$tmp/fifo" > "$tmp/from-fifo" &
reader=$!
train 1 --model "$fix/model" --steps 1 --trace "$tmp/fifo"
# a FIFO that was replaced leaves its reader blocked: end it
i=0
while kill -0 $reader 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i + 1)); done
kill $reader 2>/dev/null
wait $reader
[ $rc -eq 0 ] && [ -p "$tmp/fifo" ] && grep -q traceEvents "$tmp/from-fifo" && ok || \
  bad "6: FIFO replaced or not written through (exit $rc)"
if [ "$(id -u)" = 0 ] && mknod "$tmp/null" c 1 3 2>/dev/null; then
  train 1 --model "$fix/model" --steps 1 --trace "$tmp/null"
  [ $rc -eq 0 ] && [ -c "$tmp/null" ] && ok || bad "6: device node replaced (exit $rc)"
fi

# --- 7. interrupts, and stores left by killed runs
for sig in TERM INT; do
  rm -f "$tmp/l7.jsonl"
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --model "$fix/model" --steps 1000000 \
    --log "$tmp/l7.jsonl" --save "$tmp/o7" > "$tmp/out.txt" 2>&1 &
  mp=$!
  wait_for "$tmp/l7.jsonl"
  pids="$(rank_pid $mp 0) $(rank_pid $mp 1)"
  kill -$sig $pids
  wait $mp
  rc=$?
  want=$([ $sig = TERM ] && echo 143 || echo 130)
  left=$(for p in $pids; do ls /dev/shm | grep "^roundpipe-$p-"; done)
  [ $rc -eq "$want" ] && [ -z "$left" ] && [ ! -e "$tmp/o7" ] && ok || \
    bad "7: SIG$sig: exit $rc (want $want), left '$left', save made: $([ -e "$tmp/o7" ] && echo yes)"
  has "interrupted at step [0-9]* of 1000000 (SIG$sig)" "7: SIG$sig"
done
# at start-up (where the signal lands in start-up varies from run to run):
# whatever it interrupts, no host-store name of the job is left
${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --model "$fix/model" --steps 1000000 \
  --save "$tmp/o7" > "$tmp/out.txt" 2>&1 &
mp=$!
i=0
while [ -z "$(rank_pid $mp 1)" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
pids="$(rank_pid $mp 0) $(rank_pid $mp 1)"
sleep 0.3
kill -TERM $pids
wait $mp
rc=$?
left=$(for p in $pids; do ls /dev/shm | grep "^roundpipe-$p-"; done)
[ $rc -ne 0 ] && [ -z "$left" ] && [ ! -e "$tmp/o7" ] && ok || \
  { bad "7: SIGTERM at start-up: exit $rc, left '$left'"; cat "$tmp/out.txt"; }

sh -c 'echo $$ > "$1"' sh "$tmp/dead.pid" # a pid no process has now
stale="/dev/shm/roundpipe-$(cat "$tmp/dead.pid")-0-test"
: > "$stale"
train 1 --model "$fix/model" --steps 1
# (removed by this run, or by another run of this user started meanwhile: the
# message is checked in test_store_shm, where no other run can interfere)
[ $rc -eq 0 ] && [ ! -e "$stale" ] && ok || { bad "7: stale $stale not removed"; rm -f "$stale"; }

# --- 8. a stopped rank ends the job within 3 x --timeout
# (stopped once step 4 is logged: mid-step, in the segment after the re-plan
# of step 2; a rank stopped between two segments, as the next one's host
# store is made, is not bounded: man page, --timeout)
rm -f "$tmp/l8.jsonl"
timeout 60 ${MPIRUN:-mpirun} $flags -np 2 "$bin" train $args --model "$fix/model" \
  --steps 1000000 --timeout 5 --log "$tmp/l8.jsonl" > "$tmp/out.txt" 2>&1 &
mp=$!
i=0
while ! grep -q '"step":4,' "$tmp/l8.jsonl" 2>/dev/null && [ $i -lt 400 ]; do
  sleep 0.1; i=$((i + 1))
done
stopped=$(rank_pid "$(pgrep -P $mp)" 1) # timeout's child is mpirun
t0=$(date +%s)
kill -STOP "$stopped"
wait $mp
rc=$?
dt=$(($(date +%s) - t0))
kill -CONT "$stopped" 2>/dev/null; kill -KILL "$stopped" 2>/dev/null
[ $rc -ne 0 ] && [ $dt -le 15 ] && ok || bad "8: stopped rank: exit $rc after $dt s (want <= 15)"
# (mid-step the event wait runs out; stopped as the first segment ends, at
# the re-plan's exchange: case 8b)
has "rank 0, job .*timed out waiting for event .*then \
other ranks did not answer within --timeout 5 s" "8: stopped rank"

# stalled CASE WHERE RANK TIMEOUT: a 2-rank run of 6 steps in which that
# rank stops itself at WHERE (RP_FAULT_STALL); checks that the job ends
# (not killed by the 60 s timeout) within 3 x TIMEOUT of the moment the rank
# is seen stopped in /proc, so that a start slowed by the tests running
# beside this one does not count against it; its output in $tmp/out.txt
stalled() {
  t0=$(date +%s); ts=""
  RP_FAULT_STALL=$2:$3 timeout 60 ${MPIRUN:-mpirun} $flags -x RP_FAULT_STALL -np 2 "$bin" \
    train $args --model "$fix/model" --steps 6 --timeout "$4" > "$tmp/out.txt" 2>&1 &
  tp=$!
  while kill -0 $tp 2>/dev/null; do
    if [ -z "$ts" ]; then
      p=$(rank_pid "$(pgrep -P $tp)" "$3") # timeout's child is mpirun
      [ -n "$p" ] && [ "$(sed -n 's/^[^)]*) \(.\).*/\1/p' "/proc/$p/stat" 2>/dev/null)" = T ] &&
        ts=$(date +%s)
    fi
    sleep 0.1
  done
  wait $tp
  rc=$?
  t1=$(date +%s)
  seen="never seen stopped"; dt=99
  [ -n "$ts" ] && dt=$((t1 - ts)) && seen="$dt s after it stopped"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -le $((3 * $4)) ] && ok ||
    bad "$1: rank $3 stopped at $2: exit $rc, $((t1 - t0)) s in all, $seen (want <= $((3 * $4)))"
}

# --- 8b. a rank stopped at the re-plan after the first steps (each rank
# comes to it from the end of the first segment): the others wait at most
# --timeout for it, whether it stops before the layer times are summed
# (rank 1: the leader waits in the agreement after its planning) or while
# it plans (rank 0: the others wait in that agreement)
for r in 1 0; do
  stalled 8b replan $r 5
  has "rank $((1 - r)), re-plan after the first steps: other ranks did not answer within --timeout 5 s: ending the job" \
    "8b: rank $r stopped at the re-plan"
done

# --- 8c. a rank stopped between two segments (the re-plan ends the first
# after step 2): the others wait at most --timeout in each exchange that
# ends a segment or starts the next (its agreements, its host store's
# creation) and end the job naming it
for c in segment-end:1:"the end of a segment" segment:1:"the start of the next segment" \
         segment:0:"the start of the next segment" \
         segment-store:1:"the start of the next segment (its host store)" \
         segment-store:0:"the start of the next segment (its host store)"; do
  where=${c%%:*}; rest=${c#*:}; r=${rest%%:*}; what=${rest#*:}
  stalled 8c "$where" "$r" 3
  has "rank $((1 - r)), $what: other ranks did not answer within --timeout 3 s: ending the job" \
    "8c: rank $r stopped at $where"
done

# --- 10. a NaN weight in the input model is named at load
cp -r "$fix/model" "$tmp/nan"
hlen=$(head -c 8 "$tmp/nan/model.safetensors" | od -An -tu8 | tr -d ' ')
printf '\000\000\300\177' | dd of="$tmp/nan/model.safetensors" bs=1 seek=$((8 + hlen)) \
  conv=notrunc 2>/dev/null
train 1 --model "$tmp/nan" --steps 1
[ $rc -eq 1 ] && ok || bad "10: NaN weight: exit $rc"
has "$tmp/nan/model.safetensors: tensor 'model.embed_tokens.weight': element 0 is nan" "10: NaN"

finish
