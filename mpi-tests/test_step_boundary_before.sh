#!/bin/sh
# Proves (CPU executors; 1 and 2 ranks): the test mode
# RP_TEST_STEP_BOUNDARY_BEFORE=1, the GPU window's "before" of issue 33
# (engine/update_gate.h), changes no bits and does what it says. With it,
# every job waits for all its layers' versions before it computes: its
# trace has a wait span over the job's layers ("weights of layers 0-2"),
# which a run without it, streaming layer by layer, never has; and the
# embedding's runs of rows are updated one after another rather than shared
# out over the threads together: the same bits either way (AdamW is
# elementwise), on the tiny model with clipping on 1 rank (2 threads) and on
# the dense Qwen3 golden model on 2 ranks.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=2
. "$(dirname "$0")/bits_lib.sh"
run() { # NP OUT [options...]: bits_lib.sh's run on 2 threads a rank (the rows' split needs them)
  np=$1; out=$2; shift 2
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --progress none --threads 2 --device cpu \
    --timeout 60 --log "$tmp/$out.jsonl" --save "$tmp/$out" "$@" > "$tmp/$out.txt" 2>&1 ||
    { bad "$out: train failed"; cat "$tmp/$out.txt"; }
}
tiny="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2 --steps 4 --grad-clip 1.0 --plan fwd=0-2;bwd=3-5,0-2"
run 1 tiny-after $tiny --trace "$tmp/after.json"
RP_TEST_STEP_BOUNDARY_BEFORE=1 run 1 tiny-before $tiny --trace "$tmp/before.json"
same tiny-after tiny-before "tiny: the step boundary as before issue 33"
grep -q '"name":"weights of layers 0-2 (F0' "$tmp/before.json" && ok ||
  bad "before: no job waited for all its layers' versions at once (before.json)"
grep -q '"name":"weights of layers ' "$tmp/after.json" && bad "after: a job waited for all its layers at once" || ok
RP_TEST_STEP_BOUNDARY_BEFORE=0 run 1 tiny-zero $tiny --trace "$tmp/zero.json"
grep -q '"name":"weights of layers ' "$tmp/zero.json" && bad "RP_TEST_STEP_BOUNDARY_BEFORE=0 turned it on" || ok
g="$src/mpi-tests/fixtures/golden"
q="--model $g/qwen3/model --data $g/qwen3/data.npy --loss-mask $g/qwen3/mask.npy $(cat "$g/qwen3/args.txt")"
run 2 qwen3-after $q
RP_TEST_STEP_BOUNDARY_BEFORE=1 run 2 qwen3-before $q
same qwen3-after qwen3-before "qwen3 on 2 ranks: the step boundary as before issue 33"
finish
