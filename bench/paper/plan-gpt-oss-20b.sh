#!/bin/sh
# `roundpipe plan` for gpt-oss-20b (bench/paper/gpt-oss-20b-config.json, the
# Hub's config.json) on 8 GPUs, full fine-tuning, against the RoundPipe
# paper's reference numbers (issue 35): one markdown row per GPU memory.
#   tokens/s   at the paper's settings: batch 128, sequence 2048, 16 microbatches
#   longest    the longest --seq-len (a multiple of 1024, bisected) whose plan
#              fits with batch 1 and 1 microbatch
#
#   bench/paper/plan-gpt-oss-20b.sh ROUNDPIPE
#
# Each row: the executors' memory limit, the planner's achieved TFLOP/s and
# device GB/s (the FLOP-based times' two inputs), PCIe 25 GB/s each way.
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 ROUNDPIPE" >&2
    exit 2
fi
rp=$1
cfg=$(dirname "$0")/gpt-oss-20b-config.json
# fits LIMIT TFLOPS GBS SEQ: the plan of batch 1, 1 microbatch fits
fits() {
    "$rp" plan --init-config "$cfg" --gpus 8 --device cuda --memory-limit-mib "$1" \
        --tflops "$2" --device-gbs "$3" --seq-len "$4" --batch-size 1 --microbatches 1 \
        2>/dev/null | grep -q '^verdict: fits'
}
echo "| GPUs | --memory-limit-mib | --tflops, --device-gbs | tokens/s (batch 128, seq 2048, M 16) | paper | longest sequence (batch 1, M 1) | paper |"
echo "|---|---:|---|---:|---:|---:|---:|"
for row in "8 x 24 GB (RTX 4090)|22528|100|1000|18,122|39K" \
           "8 x 80 GB (A800)|76800|200|2000|26,203|192K"; do
    IFS='|' read -r name limit tflops gbs ptok pseq <<ROW
$row
ROW
    tok=$("$rp" plan --init-config "$cfg" --gpus 8 --device cuda --memory-limit-mib "$limit" \
        --tflops "$tflops" --device-gbs "$gbs" --seq-len 2048 --batch-size 128 \
        --microbatches 16 2>&1 | sed -n 's/^modelled iteration .*, \([0-9]*\) tokens\/s$/\1/p')
    [ -n "$tok" ] || { echo "$name: the plan at the paper's settings failed" >&2; exit 1; }
    lo=0 hi=1024 # lo fits (0: none yet), hi does not
    while fits "$limit" "$tflops" "$gbs" $((hi * 1024)); do lo=$hi; hi=$((hi * 2)); done
    while [ $((hi - lo)) -gt 1 ]; do
        mid=$(((lo + hi) / 2))
        if fits "$limit" "$tflops" "$gbs" $((mid * 1024)); then lo=$mid; else hi=$mid; fi
    done
    printf '| %s | %s | %s, %s | %s | %s | %s (%sK) | %s |\n' "$name" "$limit" "$tflops" "$gbs" \
        "$tok" "$ptok" $((lo * 1024)) "$lo" "$pseq"
done
