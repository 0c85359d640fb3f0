#!/bin/sh
# Proves: the Chrome trace of a real run (2 ranks, 2 pipelines, so several
# optimizer threads wait at once) has no partially overlapping slices on any
# (pid, tid) track and one "step N" marker per step (trace_check), and a
# span of the first forward job's wait for its weights in each step; the
# checker itself rejects an overlapping pair and a missing step; the metrics
# lines carry a wall-clock "time" and --log writes FILE.run.json describing
# the run; the tracks are those roundpipe-formats(5) names, an extra lane
# (tid = track + K x lane) with the K it gives.
set -u
. "$(dirname "$0")/testlib.sh"
check="$build/mpi-tests/trace_check"

# the checker on hand-made traces: nested is fine, overlap and gaps are not
meta='{"ph":"M","name":"thread_name","pid":0,"tid":8,"args":{"name":"w"}}'
printf '{"traceEvents":[%s,\n{"ph":"X","name":"a","pid":0,"tid":8,"ts":0.000,"dur":10.000},
{"ph":"X","name":"b","pid":0,"tid":8,"ts":2.000,"dur":3.000},
{"ph":"X","name":"step 1","pid":0,"tid":9,"ts":0.000,"dur":10.000}]}\n' "$meta" > "$tmp/nested.json"
sed 's/"dur":3.000/"dur":9.000/' "$tmp/nested.json" > "$tmp/overlap.json"
"$check" "$tmp/nested.json" 1 > /dev/null 2>&1 && ok || bad "trace_check rejects nested slices"
"$check" "$tmp/overlap.json" 1 > /dev/null 2>&1 && bad "trace_check accepts overlapping slices" || ok
"$check" "$tmp/nested.json" 2 > /dev/null 2>&1 && bad "trace_check accepts a missing step 2" || ok

steps=4
before=$(date +%s)
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$src/examples/tiny-config.json" \
  --data "$build/examples/data/gnu-licenses.npy" --seq-len 32 --batch-size 8 --microbatches 4 \
  --pipelines 2 --steps $steps --threads 1 --timeout 60 --progress none --device cpu \
  --trace "$tmp/trace.json" --log "$tmp/m.jsonl" > "$tmp/out" 2>&1 \
  && ok || { bad "traced run failed"; cat "$tmp/out"; }
after=$(date +%s)
if "$check" "$tmp/trace.json" $steps > "$tmp/check" 2>&1; then ok; else bad "trace check"; fi
cat "$tmp/check"
# the tracks are those roundpipe-formats(5) describes: each name (less a
# "#N" suffix) is in its TIMELINE, and an extra lane's tid is its track's
# plus lane times the multiplier it states ("tid = track + K")
timeline=$(sed -n '/^\.SH TIMELINE/,/^\.SH/p' "$src/man/roundpipe-formats.5")
k=$(printf '%s\n' "$timeline" | sed -n 's/.*tid = track + \([0-9]*\) .*/\1/p')
[ -n "$k" ] && ok || bad "roundpipe-formats(5) gives no tid = track + K"
grep -o '"name":"thread_name","pid":[0-9]*,"tid":[0-9]*,"args":{"name":"[^"]*"' "$tmp/trace.json" |
  sed 's/.*"tid":\([0-9]*\),"args":{"name":"\([^"]*\)"/\1 \2/' | sort -un > "$tmp/tracks"
[ "$(grep -c '#2$' "$tmp/tracks")" -gt 0 ] && ok || bad "the traced run has no extra lane"
while read -r tid name; do
  base=${name% #*}
  printf '%s\n' "$timeline" | grep -q "$base" && ok || bad "trace track '$base' is not in roundpipe-formats(5)'s TIMELINE"
  [ "$base" = "$name" ] && continue
  lane=${name##*#}
  btid=$(awk -v n="$base" '{ t = $1; $1 = ""; sub(/^ /, ""); if ($0 == n) print t }' "$tmp/tracks")
  [ -n "$k" ] && [ "$tid" -eq $((btid + k * (lane - 1))) ] && ok ||
    bad "track '$name' has tid $tid, roundpipe-formats(5) gives $btid + $k x $((lane - 1))"
done < "$tmp/tracks"
# the executor's waits for weights are spans naming the layers and the job
for it in 1 $steps; do
  grep -q "\"name\":\"weights of layers\{0,1\} [0-9-]* (F0, pipeline 0, it $it)\"" "$tmp/trace.json" \
    && ok || bad "trace: no span of F0's wait for its weights in step $it"
done

# every metrics line: the fields as before, then "time" within the run
n=0
while IFS= read -r line; do
  n=$((n + 1))
  t=$(printf '%s\n' "$line" | sed -n 's/.*,"time":\([0-9]*\)\.[0-9]*}$/\1/p')
  case $line in
    "{\"step\":$n,\"loss\":"*",\"tokens_per_s\":"*",\"time\":"*) ;;
    *) bad "metrics line $n: $line"; continue ;;
  esac
  [ -n "$t" ] && [ "$t" -ge "$before" ] && [ "$t" -le "$after" ] && ok \
    || bad "metrics line $n: time '$t' not within $before..$after"
done < "$tmp/m.jsonl"
[ "$n" -eq $steps ] && ok || bad "metrics: $n lines, want $steps"

# the run's description beside the metrics
info="$tmp/m.jsonl.run.json"
for want in '"roundpipe_version":"[0-9.]*"' '"ranks":2' '"device":"cpu"' '"nodes":1' \
            '"start_time":[0-9.]*' '"options":{' '"seq-len":32' '"pipelines":2' '"plan":"fwd=' '"keep-checkpoints":2' '"resume":null'; do
  grep -q "$want" "$info" 2>/dev/null && ok || bad "$info has no $want"
done
finish
