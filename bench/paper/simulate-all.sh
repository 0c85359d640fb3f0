#!/bin/sh
# Simulate the four paper models and print one markdown table row per model:
# exact bubble, lagged bubble, exact/lagged throughput, exact vs GPipe and
# 1F1B, and the widths chosen. Extra arguments go to every `roundpipe
# simulate` call (for example --optimizer-gbs 20, --optimizer-spread 0).
#
#   bench/paper/simulate-all.sh ROUNDPIPE [simulate options...]
#
# The machine: the files' 8 GPUs, 16 microbatches and hand-over latency,
# 22 GiB of device memory per job, the simulator's defaults otherwise.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 ROUNDPIPE [simulate options...]" >&2
    exit 2
fi
rp=$1
shift
dir=$(dirname "$0")
echo "| model | exact bubble | lagged bubble | exact / lagged | exact vs GPipe | exact vs 1F1B | width exact, lagged |"
echo "|---|---:|---:|---:|---:|---:|---|"
for m in qwen3-1.7b llama3.1-8b qwen3-32b qwen3-235b-a22b-lora; do
    out=$("$rp" simulate --layers "$dir/$m.txt" --memory-limit-mib 22528 "$@")
    printf '%s\n' "$out" | awk -v m="$m" '
        /^roundpipe, exact optimizer / { eb = $(NF-2) }
        /^roundpipe, lagged optimizer / { lb = $(NF-2) }
        /^plan \(roundpipe, exact/ { sub(/.*;width=/, ""); ew = $1 }
        /^plan \(roundpipe, lagged/ { sub(/.*;width=/, ""); lw = $1 }
        /^exact \/ lagged throughput:/ { r = $NF }
        /vs GPipe:/ { g = $(NF-3); f = $NF; sub(/,$/, "", g) }
        END {
            if (eb == "" || lb == "" || r == "") { print m ": unexpected output" > "/dev/stderr"; exit 1 }
            printf "| %s | %s | %s | %.3f | %s | %s | %s, %s |\n", m, eb, lb, r, g, f, ew, lw
        }'
done
