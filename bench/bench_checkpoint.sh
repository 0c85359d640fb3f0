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
# the two). Printed: the checkpoint rate (MiB/s, median over the writes) and
# its ratio to dd's, and the stall per checkpoint (training stops while one
# is written) against the median step of the same run without checkpoints
# (steps 2+).
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
python3 - "$dir/run.txt" "$dir/plain.jsonl" "$d1" "$d2" <<'PY'
import json, re, statistics, sys
run, log, d1, d2 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
w = [(float(a), float(b)) for a, b in re.findall(r"written: \S+ \(([0-9.]+) MiB in ([0-9.]+) s\)", open(run).read())]
rates = [mib / s for mib, s in w if s > 0]
steps = [json.loads(l) for l in open(log) if l.strip()]
step_s = [s["tokens"] / s["tokens_per_s"] for s in steps[1:]] or [float("nan")]
ceiling = max(d1, d2)
print(f"checkpoint: {w[0][0]:.0f} MiB, {len(w)} writes, median {statistics.median(rates):.0f} MiB/s "
      f"(range {min(rates):.0f}-{max(rates):.0f})")
print(f"dd conv=fsync, same directory: {d1:.0f} and {d2:.0f} MiB/s (ceiling {ceiling:.0f})")
print(f"RESULT checkpoint_write_ratio {statistics.median(rates) / ceiling:.3f}")
stall = statistics.median(s for _, s in w)
print(f"stall per checkpoint {stall:.2f} s against a step of {statistics.median(step_s):.2f} s "
      f"(ratio {stall / statistics.median(step_s):.2f})")
PY
