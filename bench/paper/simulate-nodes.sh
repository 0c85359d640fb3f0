#!/bin/sh
# The four paper models on 1, 2, 4 and 8 nodes of 8 GPUs at 100 and 400 Gb/s
# per NIC direction (`roundpipe simulate --nodes N --network-gbs X`): one
# markdown row per model, node count and network, with the step's tokens/s
# and scaling efficiency for the exact and the lagged optimizer, the bytes
# each node sends per step and the busiest NIC direction's time per step.
# Extra arguments go to every `roundpipe simulate` call (not --plan,
# --optimizer-lag, --microbatches or --nodes: the script sets them).
#
#   bench/paper/simulate-nodes.sh ROUNDPIPE [simulate options...]
#
# Weak scaling: every node keeps the files' 16 microbatches, so a step of N
# nodes has M = 16 N microbatches (the step's global count, as `roundpipe
# train` reads --microbatches; N x the tokens of one node's step). The
# scaling efficiency is N nodes' tokens/s over N x one node's tokens/s with
# the same plan and 16 microbatches: 1 is perfect weak scaling; above 1
# where one node's optimizer is on its critical path (N nodes update 1/N of
# every layer each). The plan is one node's (simulate plans for one node):
# each mode is planned once, with 16 microbatches on one node, and passed to
# the runs of several nodes with --plan (the plan they would choose anyway).
# The machine: the files' 8 GPUs and hand-over latency, 22 GiB of device
# memory per job, the simulator's defaults otherwise (25 GB/s per GPU link,
# 10 GB/s optimizer per rank, 5 us per network message).
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 ROUNDPIPE [simulate options...]" >&2
    exit 2
fi
rp=$1
shift
dir=$(dirname "$0")

# tokens/s and scaling efficiency of rows[0] (the mode asked for) of a
# --nodes run; the second argument names the mode
nodes_line() {
    printf '%s\n' "$1" | sed -n "s/^nodes: .*(roundpipe, $2 optimizer): \([^ ]*\) tokens\/s, scaling efficiency \([^;]*\);.*/\1 \2/p"
}

# one table row: model, nodes, Gb/s, then exact tokens/s and efficiency,
# lagged tokens/s and efficiency, GB each node sends, busiest NIC ms
row() {
    printf '| %s | %d x 8 | %d | %d (16) | %s | %.3f | %s | %.3f | %.3f | %s |\n' \
        "$1" "$2" "$3" $((16 * $2)) "$4" "$5" "$6" "$7" "$8" "$9"
}

echo "| model | nodes x GPUs | Gb/s | M (per node) | exact tokens/s | exact efficiency | lagged tokens/s | lagged efficiency | GB sent per node per step | busiest NIC ms per step (exact) |"
echo "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"
for m in qwen3-1.7b llama3.1-8b qwen3-32b qwen3-235b-a22b-lora; do
    f="$dir/$m.txt"
    one=$("$rp" simulate --layers "$f" --memory-limit-mib 22528 --microbatches 16 "$@" 2>/dev/null)
    pe=$(printf '%s\n' "$one" | sed -n 's/^plan (roundpipe, exact optimizer): \([^ ]*\) .*/\1/p')
    pl=$(printf '%s\n' "$one" | sed -n 's/^plan (roundpipe, lagged optimizer): \([^ ]*\) .*/\1/p')
    te=$(printf '%s\n' "$one" | awk '/^roundpipe, exact optimizer / { print $5 }')
    tl=$(printf '%s\n' "$one" | awk '/^roundpipe, lagged optimizer / { print $5 }')
    if [ -z "$pe" ] || [ -z "$pl" ] || [ -z "$te" ] || [ -z "$tl" ]; then
        echo "$m: unexpected output from one node" >&2
        exit 1
    fi
    echo "| $m | 1 x 8 | - | 16 (16) | $te | 1.000 | $tl | 1.000 | 0 | 0 |"
    for n in 2 4 8; do
        for bw in 100 400; do
            ex=$("$rp" simulate --layers "$f" --memory-limit-mib 22528 --microbatches $((16 * n)) \
                 --nodes "$n" --network-gbs "$bw" --plan "$pe" "$@" 2>/dev/null)
            lg=$("$rp" simulate --layers "$f" --memory-limit-mib 22528 --microbatches $((16 * n)) \
                 --nodes "$n" --network-gbs "$bw" --plan "$pl" --optimizer-lag 1 "$@" 2>/dev/null)
            e=$(nodes_line "$ex" exact)
            l=$(nodes_line "$lg" lagged)
            net=$(printf '%s\n' "$ex" | sed -n 's/^network per step: each node sends at most \([^ ]*\) GB.*busiest NIC direction \([^ ]*\) ms.*/\1 \2/p')
            if [ -z "$e" ] || [ -z "$l" ] || [ -z "$net" ]; then
                echo "$m, $n nodes, $bw Gb/s: unexpected output" >&2
                exit 1
            fi
            row "$m" "$n" "$bw" $e $l $net
        done
    done
done
