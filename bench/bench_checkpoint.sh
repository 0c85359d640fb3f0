#!/usr/bin/env bash
# bench_checkpoint.sh: how fast roundpipe writes a checkpoint, against what
# the file system takes, in the same run and directory.
#
# A Qwen3-shaped model of about 85M parameters (bench/qwen3-25m-config.json
# with 27 blocks: fp32 master, AdamW m and v = ~1.0 GB of checkpoint) trains
# STEPS steps on 2 ranks with a checkpoint after every step; the time of each
# write comes from the engine's "checkpoint of step K written: ... (SIZE in
# SECONDS)" lines. The ceiling: `dd bs=16M count=64 conv=fsync` of 1 GiB of
# zeros into the same directory, before and after the run (the better of
# the two). Printed: the checkpoint rate (MiB/s while writing, median over
# the writes) and its ratio to dd's; the time the writer held updates per
# checkpoint; and the stall per checkpoint: the median step (steps 2+) of
# the run with a checkpoint after every step against the same run without
# checkpoints. Checkpoints are written while training goes on, each layer
# as soon as its update is in, and hold the layer's next update until it
# is written (engine/checkpoints.h).
#
#   bash bench/bench_checkpoint.sh [DIR] [STEPS]    (default: a temporary
#   directory under /tmp, 4 steps; BUILD=build by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
dir=${1:-$(mktemp -d /tmp/rp-ckbench.XXXXXX)}
steps=${2:-4}
mkdir -p "$dir"
cfg="$dir/q85m.json"
sed 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 27/' "$top/bench/qwen3-25m-config.json" > "$cfg"
dd_rate() {
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$dir/dd.bin" bs=16M count=64 conv=fsync status=none || return 1
  t1=$(date +%s.%N)
  rm -f "$dir/dd.bin"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", 1024 / (b - a) }'
}
d1=$(dd_rate)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
flags="--oversubscribe"; [ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
train() { # the run: $1 its log, the rest extra options
  local log=$1; shift
  mpirun $flags -np 2 "$build/src/roundpipe" train --init-config "$cfg" \
    --data "$build/examples/data/gnu-licenses.npy" --seq-len 64 --batch-size 4 --microbatches 2 \
    --steps "$steps" --progress none --device cpu --log "$log" "$@"
}
train "$dir/plain.jsonl" > "$dir/plain.txt" 2>&1 || { cat "$dir/plain.txt"; exit 1; }
train "$dir/m.jsonl" --checkpoint-dir "$dir/ck" --checkpoint-every 1 --keep-checkpoints 1 \
  > "$dir/run.txt" 2>&1 || { cat "$dir/run.txt"; exit 1; }
d2=$(dd_rate)
python3 - "$dir/run.txt" "$dir/plain.jsonl" "$dir/m.jsonl" "$d1" "$d2" <<'PY'
import json, re, statistics, sys
run, plain, with_ck, d1, d2 = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
text = open(run).read()
# "(SIZE MiB in T s)" after a segment; "(SIZE MiB in T s, while training
# went on: W s writing, updates held H s for it)" by the writer thread
w = [(float(a), float(b), float(c or b), float(d or 0)) for a, b, c, d in re.findall(
    r"written: \S+ \(([0-9.]+) MiB in ([0-9.]+) s(?:, while training went on: ([0-9.]+) s writing, "
    r"updates held ([0-9.]+) s for it)?\)", text)]
rates = [mib / busy for mib, _, busy, _ in w if busy > 0]
held = [h for _, _, _, h in w[:-1]] or [0.0]  # the last is written after the run
def step_times(log):
    steps = [json.loads(l) for l in open(log) if l.strip()]
    return [s["tokens"] / s["tokens_per_s"] for s in steps[1:]] or [float("nan")]
base, ck = statistics.median(step_times(plain)), statistics.median(step_times(with_ck))
ceiling = max(d1, d2)
print(f"checkpoint: {w[0][0]:.0f} MiB, {len(w)} writes, median {statistics.median(rates):.0f} MiB/s "
      f"while writing (range {min(rates):.0f}-{max(rates):.0f})")
print(f"dd conv=fsync, same directory: {d1:.0f} and {d2:.0f} MiB/s (ceiling {ceiling:.0f})")
print(f"RESULT checkpoint_write_ratio {statistics.median(rates) / ceiling:.3f}")
print(f"updates held per checkpoint written during training: median {statistics.median(held):.2f} s")
print(f"step with a checkpoint after every step {ck:.2f} s, without {base:.2f} s: "
      f"stall {max(ck - base, 0):.2f} s per checkpoint (ratio to the step {max(ck - base, 0) / base:.2f})")
PY
