#!/bin/sh
# Proves: the Chrome trace of a real run (2 ranks, 2 pipelines, so several
# optimizer threads wait at once) has no partially overlapping slices on any
# (pid, tid) track and one "step N" marker per step (trace_check), and a
# span of the first forward job's wait for its weights in each step; the
# checker itself rejects an overlapping pair and a missing step; the metrics
# lines carry a wall-clock "time" and --log writes FILE.run.json describing
# the run; the tracks are those roundpipe-formats(5) names, an extra lane
# (tid = track + K x lane) with the K it gives; the device's track holds
# every layer call of iterations 2 and later on both ranks, each within a
# compute span of its rank (the CPU's calls are the host's; python3).
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

# the device's track: each layer call as a span "layer L forward|backward
# (it N)", on both ranks, of iterations 2 and later but a segment's first
# (the re-plan's clock skips it: here 3, after the re-plan); on the CPU the calls are the host's, so each lies
# within a compute span of its rank (placed from the anchor mark: 0.05 ms
# of slack for the host time read after it)
if command -v python3 > /dev/null; then
  python3 - "$tmp/trace.json" "$steps" > "$tmp/device.txt" 2>&1 <<'PY'
import json, re, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = int(sys.argv[2])
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
dev, comp, bad = {}, {}, 0
for e in ev:
    if e.get("ph") != "X":
        continue
    track = re.sub(r" #[0-9]+$", "", names.get((e["pid"], e["tid"]), ""))
    span = (e["ts"], e["ts"] + e["dur"])
    if track == "device: layer calls":
        m = re.match(r"^layer ([0-9]+) (forward|backward) \(it ([0-9]+)\)$", e["name"])
        if not m or not 2 <= int(m.group(3)) <= steps:
            print("bad device span name:", e["name"]); bad += 1
        dev.setdefault(e["pid"], []).append((span, e["name"]))
    elif track == "compute":
        comp.setdefault(e["pid"], []).append(span)
for r in (0, 1):
    if not dev.get(r):
        print("rank %d: no device spans" % r); bad += 1
    its = {int(re.search(r"it ([0-9]+)", n).group(1)) for _, n in dev.get(r, [])}
    if not (2 in its and steps in its and its <= set(range(2, steps + 1))):
        print("rank %d: device spans of iterations %s" % (r, sorted(its))); bad += 1
    for (a, b), n in dev.get(r, []):
        if not any(c0 - 50 <= a and b <= c1 + 50 for c0, c1 in comp.get(r, [])):
            print("rank %d: %s [%.1f, %.1f] within no compute span" % (r, n, a, b)); bad += 1
print("device spans: %d; bad %d" % (sum(len(v) for v in dev.values()), bad))
sys.exit(1 if bad else 0)
PY
  [ $? = 0 ] && ok || bad "the device's track: $(tail -n 5 "$tmp/device.txt" | tr '\n' ' ')"
  cat "$tmp/device.txt" | tail -n 1
else
  echo "(no python3: the device's track is not checked)"
fi

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
