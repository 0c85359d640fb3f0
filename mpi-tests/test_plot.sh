#!/bin/sh
# Proves: roundpipe-plot draws a run's --log as four curves (loss, with
# validation points when eval_loss is logged; lr; grad norm; tokens/s)
# and its --trace as a timeline, each a PNG that is not blank (both its
# size and its pixels checked), telling the two kinds of file apart by
# content; a line that is not JSON, a line without an integer step, an
# empty log and a trace without complete events fail naming the file (and
# the line) with nothing written. The pictures are skipped without matplotlib.
# Ranks: 2 (mpirun inside).
# The trace of a 60-step run with an eval every 20 steps and a checkpoint
# every 30 has a step track: 60 labelled bands, numbered 1..60 in order,
# labels thinned to every 2nd so they stay readable, and the eval and
# checkpoint gaps named ("eval after step 20", "checkpoint of step 30"),
# found from the trace alone (the plot's functions, without matplotlib;
# the picture itself with it).
set -u
. "$(dirname "$0")/testlib.sh"
plot="$src/scripts/roundpipe-plot"
command -v python3 > /dev/null || { echo "SKIP: roundpipe-plot's test needs python3"; exit 77; }
fix="$src/mpi-tests/fixtures/golden/llama/data.npy"
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$src/examples/tiny-config.json" \
  --data "$fix" --eval-data "$fix" --eval-every 20 --eval-samples 4 --checkpoint-dir "$tmp/ck" \
  --checkpoint-every 30 --seq-len 16 --batch-size 4 --microbatches 2 --steps 60 --threads 1 \
  --progress none --trace "$tmp/t60.json" > "$tmp/t60.txt" 2>&1 || { bad "the 60-step run"; cat "$tmp/t60.txt"; }
python3 - "$plot" "$tmp/t60.json" << 'PY' && ok || bad "the 60-step trace's step track"
import importlib.machinery, importlib.util, json, sys
loader = importlib.machinery.SourceFileLoader("plot", sys.argv[1])
spec = importlib.util.spec_from_loader("plot", loader)
plot = importlib.util.module_from_spec(spec)
loader.exec_module(plot)
events = json.load(open(sys.argv[2]))["traceEvents"]
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
spans = [e for e in events if e.get("ph") == "X"]
steps, gaps = plot.step_marks(spans, names)
assert [s[2] for s in steps] == [str(i) for i in range(1, 61)], [s[2] for s in steps]
assert all(a[1] <= b[0] + 1 for a, b in zip(steps, steps[1:])), "steps overlap"
labels = [g[2] for g in gaps]
# step 30's checkpoint is written while training goes on, step 60's (the last
# step) between segments: both are named
for want in ("eval after step 20", "eval after step 40", "eval after step 60",
             "checkpoint of step 30", "checkpoint of step 60"):
    assert want in labels, (want, labels)
assert plot.label_every(60, 1056) == 2 and plot.label_every(10, 1056) == 1, "label spacing"
PY
if ! python3 -c 'import matplotlib' 2> /dev/null; then
  echo "SKIP part: python3 without matplotlib: no picture drawn"
  finish; exit
fi
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$src/examples/tiny-config.json" \
  --data "$src/mpi-tests/fixtures/golden/llama/data.npy" --seq-len 16 --batch-size 4 \
  --microbatches 4 --steps 6 --device cpu --threads 1 --progress none --log "$tmp/m.jsonl" \
  --trace "$tmp/t.json" > "$tmp/train.txt" 2>&1 || { bad "train failed"; cat "$tmp/train.txt"; }
# a validation loss on two steps, as issue 14's --eval-every will log it
sed '3s/}$/,"eval_loss":2.5}/; 6s/}$/,"eval_loss":2.25}/' "$tmp/m.jsonl" > "$tmp/e.jsonl"
png_ok() { # file width-at-least: a PNG of that width whose pixels are not all one colour
  python3 - "$1" "$2" << 'PY'
import sys
import matplotlib.image as im
a = im.imread(sys.argv[1])
assert a.shape[1] >= int(sys.argv[2]), a.shape
assert a.std() > 0.01, "blank"
PY
}
"$plot" "$tmp/t60.json" -o "$tmp/t60.png" > "$tmp/p60.txt" 2>&1 && png_ok "$tmp/t60.png" 1000 && ok || { bad "the 60-step picture"; cat "$tmp/p60.txt"; }
"$plot" "$tmp/m.jsonl" > "$tmp/p1.txt" 2>&1 && png_ok "$tmp/m.png" 800 && ok ||
  { bad "the metrics picture"; cat "$tmp/p1.txt"; }
"$plot" "$tmp/e.jsonl" -o "$tmp/e.png" > /dev/null 2>&1 && png_ok "$tmp/e.png" 800 && ok ||
  bad "the metrics picture with a validation loss"
cmp -s "$tmp/m.png" "$tmp/e.png" && bad "the validation loss was not drawn" || ok
"$plot" "$tmp/t.json" -o "$tmp/t.png" > "$tmp/p2.txt" 2>&1 && png_ok "$tmp/t.png" 1000 && ok ||
  { bad "the timeline picture"; cat "$tmp/p2.txt"; }
refuse() { # file message
  if "$plot" "$1" -o "$tmp/bad.png" > "$tmp/b.txt" 2>&1; then bad "accepted $(basename "$1")"
  else grep -q "$2" "$tmp/b.txt" && [ ! -e "$tmp/bad.png" ] && ok ||
    { bad "message for $(basename "$1")"; cat "$tmp/b.txt"; }; fi
}
printf '{"step": 1, "loss": 2}\nnot json\n' > "$tmp/bad1.jsonl"
refuse "$tmp/bad1.jsonl" "bad1.jsonl:2: not JSON"
printf '{"loss": 2}\n' > "$tmp/bad2.jsonl"
refuse "$tmp/bad2.jsonl" "bad2.jsonl:1: a metrics line needs an integer field 'step'"
: > "$tmp/bad3.jsonl"
refuse "$tmp/bad3.jsonl" "bad3.jsonl: no metrics lines"
printf '{"traceEvents": []}\n' > "$tmp/bad4.json"
refuse "$tmp/bad4.json" "bad4.json: no complete events"
finish
