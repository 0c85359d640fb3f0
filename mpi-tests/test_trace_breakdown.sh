#!/bin/sh
# Proves tools/trace-breakdown.py (where the steps of a --trace went, the
# GPU window's e2e row): on a hand-made trace, each activity's busy time is
# the union of its spans over all its tracks (an extra lane's overlap
# counted once), clipped to the kept steps (a span across a step's end
# split, the skipped first step's left out), averaged over the ranks, with
# the figures worked by hand below; the device's idle time (the kept steps
# less its layer calls) split by what the host did meanwhile, and the part
# nothing traced covers, also by hand; a file that is no trace, and a trace
# without steps past --skip, are refused naming the file; on a real run's
# trace (2 ranks) every activity's share lies in [0, 1] and compute's is
# positive. SKIP without python3 (a maintainers' tool).
set -u
. "$(dirname "$0")/testlib.sh"
command -v python3 > /dev/null || { echo "SKIP: no python3 (tools/trace-breakdown.py needs it)"; exit 77; }
tb="python3 $src/tools/trace-breakdown.py"

# rank 0: steps 1 [0, 10), 2 [10, 30), 3 [30, 50) ms; compute [12, 20) and
# [25, 35) on its track, [14, 18) on its second lane; waits [0, 5) in the
# skipped step 1 and [20, 24); a weights' upload [22, 28); the device's
# layer calls [13, 19), [26, 34) and [40, 46). rank 1: compute [10, 50).
# compute, rank 0: step 2 [12, 20) + [25, 30) = 13, step 3 [30, 35) = 5:
# 18 of 40 ms, 9.00 a step, 0.450; rank 1: 40 of 40, 1.000; mean 0.725.
# device: rank 0 6 + 8 + 6 = 20 of 40, 0.500; rank 1 none; mean 0.250.
# waits (executor): rank 0 4 of 40, 0.100; mean 0.050. xfer: weights:
# 6 of 40, 0.150; mean 0.075.
# the device idle (rank 0), each step's own (the call after step 2 ends
# makes no idle in it): [10, 13) + [19, 26) + [34, 40) + [46, 50) = 20
# of 40, 0.500, 10.00 a step; during compute [12, 13) + [19, 20) +
# [25, 26) + [34, 35) = 4, 0.200 of it; during waits [20, 24) = 4, 0.200;
# during the upload [22, 26) = 4, 0.200; none of them (they overlap:
# [19, 26) is all covered): 20 - 1 - 7 - 1 = 11, 0.550.
m() { printf '{"ph":"M","name":"thread_name","pid":%s,"tid":%s,"args":{"name":"%s"}},\n' "$@"; }
x() { printf '{"ph":"X","name":"%s","pid":%s,"tid":%s,"ts":%s,"dur":%s},\n' "$@"; }
{ printf '{"traceEvents":[\n'
  m 0 0 compute; m 0 64 "compute #2"; m 0 7 "waits (executor)"; m 0 9 steps; m 0 11 "device: layer calls"
  m 0 2 "xfer: weights"
  m 1 0 compute
  x "step 1" 0 9 0 10000; x "step 2" 0 9 10000 20000; x "step 3" 0 9 30000 20000
  x "F0 m0 (it 2)" 0 0 12000 8000; x "B1 m0 (it 2)" 0 0 25000 10000; x "F1 m1 (it 2)" 0 64 14000 4000
  x "weights of layer 0 (F0, pipeline 0, it 1)" 0 7 0 5000; x "weights of layer 1 (B1, pipeline 0, it 2)" 0 7 20000 4000
  x "layer 1 forward (it 2)" 0 11 13000 6000; x "layer 1 backward (it 2)" 0 11 26000 8000
  x "layer 1 forward (it 3)" 0 11 40000 6000
  x "weights of layer 2" 0 2 22000 6000
  printf '{"ph":"X","name":"F0 m0 (it 2)","pid":1,"tid":0,"ts":10000,"dur":40000}\n]}\n'
} > "$tmp/hand.json"
if $tb "$tmp/hand.json" > "$tmp/hand.txt" 2>&1; then ok; else bad "trace-breakdown on the hand-made trace"; fi
cat "$tmp/hand.txt"
grep -q '^steps 2-3: 2 steps, 20.00 ms each on average; 2 rank(s)$' "$tmp/hand.txt" && ok || bad "the steps kept"
grep -q '^0  *compute  *9.00  *0.450$' "$tmp/hand.txt" && ok || bad "rank 0's compute: 9.00 ms a step, 0.450"
grep -q '^1  *compute  *20.00  *1.000$' "$tmp/hand.txt" && ok || bad "rank 1's compute: 20.00 ms a step, 1.000"
grep -q '^RESULT breakdown 20.00 compute=0.725 device-layer-calls=0.250 waits-executor=0.050 xfer-weights=0.075$' "$tmp/hand.txt" && ok ||
  bad "the RESULT line: 20.00 compute=0.725 device-layer-calls=0.250 waits-executor=0.050 xfer-weights=0.075"
grep -q '^0  *(idle in all)  *10.00  *0.500$' "$tmp/hand.txt" && ok || bad "rank 0's device idle: 10.00 ms a step, 0.500"
grep -q '^RESULT idle 0.500 compute=0.200 waits-executor=0.200 xfer-weights=0.200 untraced=0.550$' "$tmp/hand.txt" && ok ||
  bad "the idle line: 0.500 compute=0.200 waits-executor=0.200 xfer-weights=0.200 untraced=0.550"
# --skip 0 keeps step 1: rank 0's wait there, 5 + 4 ms of 50
$tb "$tmp/hand.json" --skip 0 | grep -q '^RESULT breakdown 16.67 compute=0.580 device-layer-calls=0.200 waits-executor=0.090 xfer-weights=0.060$' && ok ||
  bad "--skip 0: compute (18 + 40) / 50 / 2 = 0.580, device 20 / 50 / 2 = 0.200, waits 9 / 50 / 2 = 0.090, upload 6 / 50 / 2 = 0.060"

echo 'not json' > "$tmp/bad.json"
$tb "$tmp/bad.json" > "$tmp/bad.txt" 2>&1 && bad "a file that is no trace was taken" ||
  { grep -q "bad.json: not a roundpipe trace" "$tmp/bad.txt" && ok || bad "the refusal names the file: $(cat "$tmp/bad.txt")"; }
$tb "$tmp/hand.json" --skip 3 > "$tmp/few.txt" 2>&1 && bad "a trace without steps past --skip was taken" ||
  { grep -q 'hand.json: no "step N" span of rank 0 past step 3 (3 steps)' "$tmp/few.txt" && ok ||
      bad "the refusal says why: $(cat "$tmp/few.txt")"; }

# a real run's trace
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$src/examples/tiny-config.json" \
  --data "$build/examples/data/gnu-licenses.npy" --seq-len 32 --batch-size 8 --microbatches 4 \
  --steps 3 --threads 1 --timeout 60 --progress none --device cpu --trace "$tmp/run.json" \
  > "$tmp/run.txt" 2>&1 && ok || { bad "traced run failed"; cat "$tmp/run.txt"; }
if $tb "$tmp/run.json" > "$tmp/real.txt" 2>&1; then ok; else bad "trace-breakdown on a run's trace"; fi
cat "$tmp/real.txt"
awk '$1=="RESULT" { n = 0; for (i = 4; i <= NF; i++) { split($i, kv, "="); n++
       if (kv[2] < 0 || kv[2] > 1) bad = 1; if (kv[1] == "compute" && kv[2] > 0) c = 1 } }
     END { exit !(n > 0 && !bad && c) }' "$tmp/real.txt" && ok ||
  bad "a run's shares: each in [0, 1], compute's positive"
finish
