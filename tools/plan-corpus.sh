#!/bin/sh
# The planner's corpus: `roundpipe plan` on 50 cases (the Qwen3-1.7B shape and
# the tiny config on 1, 2, 3, 4 and 8 executors, each plain and with clipping,
# clipping without the speculative update, the lagged optimizer, the update
# on the producing rank, one weight buffer, --recompute layer, two nodes and a
# slow optimizer; a Qwen3-30B-A3B MoE with LoRA on each count), every output
# after a "== case" line, on standard output. A change to the planner that
# must not change its plans runs it on the build before and after and
# compares (bench/README.md, "Planner speed"):
#
#   tools/plan-corpus.sh OLD/src/roundpipe > old.txt
#   tools/plan-corpus.sh build/src/roundpipe > new.txt && cmp old.txt new.txt
#
# About 40 s on 2 cores. /dev/shm warnings (this machine's) are left out.
set -u
if [ $# -ne 1 ]; then
  echo "usage: $0 ROUNDPIPE" >&2
  exit 2
fi
rp=$1
top=$(cd "$(dirname "$0")/.." && pwd)
c17=$top/bench/gpu/qwen3-1.7b-config.json
moe=$top/bench/moe/qwen3-30b-a3b-config.json
tiny=$top/examples/tiny-config.json
for g in 1 2 3 4 8; do
  for extra in "" "--grad-clip 1.0" "--grad-clip 1.0 --speculative-update off" "--optimizer-lag 1" \
    "--optimizer-spread 0 --grad-clip 1.0" "--weight-buffers 1" "--recompute layer --grad-clip 1.0" \
    "--nodes 2" "--optimizer-gbs 3 --grad-clip 0.5"; do
    echo "== $g $extra"
    # shellcheck disable=SC2086 # $extra is words
    "$rp" plan --init-config "$c17" --device cuda --gpus $g --microbatches $((2 * g)) \
      --batch-size $((2 * g)) --seq-len 2048 $extra 2>&1 | grep -v "dev/shm has"
    # shellcheck disable=SC2086
    "$rp" plan --init-config "$tiny" --device cpu --gpus $g --microbatches $((g + 1)) \
      --batch-size $((2 * g + 2)) --seq-len 32 $extra 2>&1 | grep -v "dev/shm has"
  done
  echo "== moe $g"
  "$rp" plan --init-config "$moe" --device cuda --gpus $g --microbatches $((4 * g)) \
    --batch-size $((4 * g)) --seq-len 1024 --lora-rank 8 --grad-clip 1.0 2>&1 | grep -v "dev/shm has"
done
