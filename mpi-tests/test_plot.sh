#!/bin/sh
# Proves: roundpipe-plot draws a run's --log as four curves (loss, with
# validation points when eval_loss is logged; lr; grad norm; tokens/s)
# and its --trace as a timeline, each a PNG that is not blank (both its
# size and its pixels checked), telling the two kinds of file apart by
# content; a line that is not JSON, a line without an integer step, an
# empty log and a trace without complete events fail naming the file (and
# the line) with nothing written. Skipped without python3 and matplotlib.
# Ranks: 2 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
plot="$src/scripts/roundpipe-plot"
if ! python3 -c 'import matplotlib' 2> /dev/null; then
  echo "SKIP: roundpipe-plot's test needs python3 with matplotlib"
  exit 77
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
