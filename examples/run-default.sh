#!/bin/sh
# The embedded default: install what is missing, build, and train the tiny
# byte-level model on the bundled corpus with CPU executors on 2 ranks.
# Extra arguments are passed to `roundpipe train` (e.g. --steps 50).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh tools/install-deps.sh
sh tools/build.sh
flags="--oversubscribe"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "roundpipe: training examples/tiny-config.json on examples/data/gnu-licenses.txt (2 ranks)"
mpirun $flags -np 2 build/src/roundpipe train \
    --init-config examples/tiny-config.json \
    --data build/examples/data/gnu-licenses.npy \
    --seq-len 128 --batch-size 8 --microbatches 4 --steps 400 \
    --lr 3e-3 --min-lr 3e-4 --warmup-steps 10 --lr-schedule cosine \
    --weight-decay 0.1 --beta2 0.95 --grad-clip 1.0 --seed 1 \
    --log build/default-train.jsonl --save build/default-model "$@"
echo "roundpipe: metrics in build/default-train.jsonl, model in build/default-model/"
