#!/bin/sh
# The four paper models on two 8-GPU PCIe topologies (hwloc XML fixtures
# from tools/make_topology_fixtures.py: four 2-GPU switches on two sockets,
# and two 4-GPU switches), topology-aware planning (the planner and the deal
# know which GPUs share a switch's uplink) against topology-blind planning
# (planned as if every GPU had a link of its own, dealt in bus order), both
# simulated on the real topology; one markdown row per model and topology,
# with the ceiling the same 8 GPUs would reach with a link each (no
# --topology: "own links") and the aware plan's share of it.
# Extra arguments go to every `roundpipe simulate` call.
#
#   bench/paper/simulate-topology.sh ROUNDPIPE [simulate options...]
#
# The machine: the files' 8 GPUs, 16 microbatches and hand-over latency,
# 22 GiB of device memory per job, 25 GB/s per GPU link (--bandwidth-gbs),
# each switch's uplink an x16 like its GPUs'.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 ROUNDPIPE [simulate options...]" >&2
    exit 2
fi
rp=$1
shift
dir=$(dirname "$0")
topo="$dir/../../mpi-tests/fixtures/topology"
echo "| model | topology | aware tokens/s | blind tokens/s | aware / blind | own links tokens/s | aware / own links | aware width, deal | blind width |"
echo "|---|---|---:|---:|---:|---:|---:|---|---:|"
for m in qwen3-1.7b llama3.1-8b qwen3-32b qwen3-235b-a22b-lora; do
    own=$("$rp" simulate --layers "$dir/$m.txt" --memory-limit-mib 22528 --gpus 8 "$@" 2>/dev/null |
          awk '/^roundpipe, exact optimizer / { print $(NF-3) }')
    for t in 8gpu-4switch 8gpu-2switch; do
        out=$("$rp" simulate --layers "$dir/$m.txt" --memory-limit-mib 22528 \
              --topology "$topo/$t.xml" "$@" 2>/dev/null)
        printf '%s\n' "$out" | awk -v m="$m" -v t="$t" -v o="$own" '
            /^roundpipe, exact optimizer / { a = $(NF-3) }
            /^roundpipe, topology-blind / { b = $(NF-3) }
            /^plan \(roundpipe, exact/ { sub(/.*;width=/, ""); w = $1 }
            /^plan \(roundpipe, topology-blind/ { sub(/.*;width=/, ""); bw = $1 }
            /^topology \(roundpipe, exact/ { d = ($0 ~ /interleaved/) ? "interleaved" : "natural" }
            /^topology-aware \/ topology-blind throughput:/ { r = $NF }
            END { printf "| %s | %s | %s | %s | %s | %s | %.4f | %s, %s | %s |\n",
                         m, t, a, b, r, o, (o > 0 ? a / o : 0), w, d, bw }'
    done
done
