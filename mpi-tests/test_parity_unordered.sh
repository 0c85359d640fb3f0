#!/bin/sh
# Proves: every training path of the GPU window's parity cases
# (bench/gpu/parity.sh, all its cases, the CPU standing in for the device)
# keeps the copy ordering CUDA executors need without
# RP_ALLOW_UNPROVEN_CUDA=copies, where the copy stream does not wait for the
# compute stream: under RP_TEST_UNORDERED_DEVICE=1 (roundpipe(1)) a copy that
# reads device memory written by kernel ops issued since the last device
# sync fails, and every case still passes (its CPU reference, its device
# runs on 1 and 2 ranks bit for bit). A copy issued too early (as the MoE
# router statistics' download was) fails its case here. SKIP without bash
# or python3 (parity.sh compares the logs with it).
set -u
. "$(dirname "$0")/testlib.sh"
command -v bash > /dev/null || { echo "SKIP: no bash"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: no python3 (parity.sh's log comparison)"; exit 77; }
RP_TEST_UNORDERED_DEVICE=1 RP_PARITY_DEVICE=cpu RP_PARITY_OUT="$tmp/parity" RP_BUILDDIR="$build" \
  RP_SRCDIR="$src" bash "$src/bench/gpu/parity.sh" > "$tmp/parity.txt" 2>&1
cases=$(sed -n 's/^all="\(.*\)"$/\1/p' "$src/bench/gpu/parity.sh")
[ -n "$cases" ] && ok || bad "no cases read from bench/gpu/parity.sh"
tab=$(printf '\t')
for c in $cases; do
  if grep -q "^PARITY${tab}$c${tab}ok${tab}" "$tmp/parity.txt"; then ok; else
    bad "parity case $c under RP_TEST_UNORDERED_DEVICE=1"; grep "^PARITY${tab}$c${tab}" "$tmp/parity.txt"
    grep -h "before rp_device_sync" "$tmp/parity/"*.txt 2> /dev/null | head -n 3
  fi
done
finish
