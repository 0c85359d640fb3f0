#!/usr/bin/env bash
# bench_nodes.sh: what several nodes cost and save, measured on one machine
# with pseudo-nodes (--ranks-per-node).
#
# The Qwen3-shaped ~25M-parameter model (bench/qwen3-25m-config.json, fp32,
# tied) trains STEPS steps on 4 ranks as 1, 2 and 4 nodes (--ranks-per-node
# 4, 2, 1; one pipeline per node, 4 microbatches per step, short samples so
# that the optimizer's share of a step is large). From the engine's report
# ("node N of K: sent B bytes per step ... (the rule's R ...); AdamW T ms per
# step on its ranks"), per node count:
#   - the bytes each node sent per step against the rule's count (chain,
#     scatter, all-gather, tied base, losses: engine/node_sums.h) and against
#     the model's fp32 parameter bytes;
#   - each node's AdamW CPU time per step from the third step (the optimizer
#     threads of its ranks, one each on CPU executors: contention for the
#     cores and the first touch of the state's pages do not count) and its
#     ratio to the one-node run's: the optimizer work of a node is 1/N of the
#     model's, so the ratio should approach 1/N;
#   - each node's parameter store in memory (pages held) against one node's:
#     m and v of its slices only.
# The runs share the machine's cores, so compare ratios, not times; each
# configuration runs ROUNDS times and the smallest AdamW time of each node
# is kept (the other figures do not vary).
#
#   bash bench/bench_nodes.sh [STEPS] [ROUNDS]  (default 12, 3; BUILD=build by default)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
steps=${1:-12}
rounds=${2:-3}
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
flags="--oversubscribe"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
one=""
echo "| nodes | node | bytes sent per step | the rule's | / fp32 parameter bytes | AdamW ms per step | / one node's | store MiB in memory | / one node's |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for k in 4 2 1; do
  n=$((4 / k))
  : > "$tmp/all$n"
  for _ in $(seq 1 "$rounds"); do
    mpirun $flags -np 4 "$build/src/roundpipe" train --device cpu --threads 1 --progress none \
      --init-config "$top/bench/qwen3-25m-config.json" --data "$build/examples/data/gnu-licenses.npy" \
      --seq-len 16 --batch-size 4 --microbatches 4 --steps "$steps" --lr 1e-4 --grad-clip 1.0 \
      --ranks-per-node "$k" > "$tmp/out$n" 2>&1 || { echo "run on $n nodes failed"; cat "$tmp/out$n"; exit 1; }
    sed -n 's/.*node \([0-9]*\) of [0-9]*: sent \([0-9]*\) bytes per step .*(the rule.s \([0-9]*\); \([0-9.]*\) x .*AdamW \([0-9.]*\) ms CPU per step.*parameter store \([0-9.]*\) of.*/\1 \2 \3 \4 \5 \6/p' \
      "$tmp/out$n" >> "$tmp/all$n"
  done
  # per node: the smallest AdamW time over the rounds
  sort -k1,1n -k5,5g "$tmp/all$n" | awk '!seen[$1]++' > "$tmp/rows$n"
  [ "$n" = 1 ] && one=$(awk '{print $5}' "$tmp/rows1") && mem=$(awk '{print $6}' "$tmp/rows1")
  awk -v n="$n" -v one="$one" -v mem="$mem" '{ printf "| %d | %d | %d | %d | %.3f | %.2f | %.3f | %.1f | %.3f |\n", n, $1, $2, $3, $4, $5, $5 / one, $6, $6 / mem }' "$tmp/rows$n"
done
