#!/bin/sh
# Proves: the GPU window's parity cases that move data differently (dense,
# LoRA, MoE, an FP8 base uploaded and dequantised, documents, eval, a
# checkpoint resumed, kept activations, the copies case's 10 KiB chunks;
# bench/gpu/parity.sh, the CPU standing in for the device) keep the copy
# ordering CUDA executors need under RP_ALLOW_UNPROVEN_CUDA=copies, where
# copies run on an upload and a download stream ordered with the kernel ops
# by events alone: under RP_TEST_EVENT_DEVICE=1 (roundpipe(1)) an upload's
# destination holds NaN until the compute stream waits for it, a download
# reads the device as at the download stream's last ordering after the
# kernel ops and fails where ops wrote its bytes after that, and an upload's
# host source changed before its completion fails it; the device under
# test also keeps activations in its own pool and uploads a LoRA base
# (RP_TEST_KEEP_ON_EXECUTOR, RP_TEST_UPLOAD_BASE), as a GPU does. Every case
# must still pass against the plain CPU's reference (the references run
# without the test modes: RP_PARITY_DUT_ENV), with relative error 0, and
# each device run's log must say its copies were the event-ordered ones.
# A removed rp_device_compute_after_copy, a removed
# rp_device_copies_after_compute before a download, or an upload's host
# buffer reused before its completion fails a case here (checked by hand).
# SKIP without bash or python3 (parity.sh compares the logs with it).
set -u
. "$(dirname "$0")/testlib.sh"
command -v bash > /dev/null || { echo "SKIP: no bash"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: no python3 (parity.sh's log comparison)"; exit 77; }
cases="qwen3 lora moe fp8 documents eval checkpoint kept copies"
RP_PARITY_DUT_ENV="RP_TEST_EVENT_DEVICE=1 RP_TEST_KEEP_ON_EXECUTOR=1 RP_TEST_UPLOAD_BASE=1" \
  RP_PARITY_DEVICE=cpu RP_PARITY_OUT="$tmp/parity" RP_BUILDDIR="$build" RP_SRCDIR="$src" \
  bash "$src/bench/gpu/parity.sh" $cases > "$tmp/parity.txt" 2>&1
tab=$(printf '\t')
for c in $cases; do
  if grep -q "^PARITY${tab}$c${tab}ok${tab}0${tab}" "$tmp/parity.txt"; then ok; else
    bad "parity case $c under RP_TEST_EVENT_DEVICE=1"; grep "^PARITY${tab}$c${tab}" "$tmp/parity.txt"
    grep -h "RP_TEST_EVENT_DEVICE\|not finite" "$tmp/parity/$c"-dut*.txt 2> /dev/null | head -n 3
  fi
  # the device runs took the event-ordered copies, the references did not
  if grep -q "copies: asynchronous.*RP_TEST_EVENT_DEVICE" "$tmp/parity/$c-dut1.txt" 2> /dev/null &&
     ! grep -q "copies: asynchronous" "$tmp/parity/$c-cpu.txt" 2> /dev/null; then ok; else
    bad "case $c: dut1's log does not say its copies were event-ordered, or the CPU reference's does"
  fi
done
finish
