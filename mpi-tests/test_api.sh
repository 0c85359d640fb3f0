#!/bin/sh
# Proves: the public API (include/roundpipe.h) trains when linked into an
# MPI program on a sub-communicator while another rank of MPI_COMM_WORLD
# does something else (examples/train_api.c), and gives bit-for-bit the
# model `roundpipe train` gives with the same options; its step callback
# reports every step with the losses of the CLI's --log; a bad option set
# through the API fails with the CLI's message, a misspelt one naming the
# option meant (from train's option table, as the CLI does); two nodes asked of a program
# that initialised MPI without thread support fail naming the level.
set -u
. "$(dirname "$0")/testlib.sh"
fix="$src/mpi-tests/fixtures/golden/qwen3"
export OMP_NUM_THREADS=1

${MPIRUN:-mpirun} $flags -np 3 "$build/examples/train_api" 2 "$fix/model/config.json" \
  "$fix/data.npy" "$tmp/api" > "$tmp/api.out" && ok || bad "train_api failed"
${MPIRUN:-mpirun} $flags -np 2 "$build/src/roundpipe" train --init-config "$fix/model/config.json" \
  --data "$fix/data.npy" --save "$tmp/cli" --seq-len 16 --batch-size 4 --microbatches 2 \
  --steps 3 --lr 1e-3 --seed 5 --progress none --log "$tmp/cli.jsonl" && ok \
  || bad "roundpipe train failed"
cmp -s "$tmp/api/model.safetensors" "$tmp/cli/model.safetensors" && ok || \
  bad "API and CLI models differ"
# the callback's metrics are the log's, step by step
sed -n 's/^{"step":\([0-9]*\),"loss":\([^,]*\),"lr":\([^,]*\),"grad_norm":\([^,]*\),.*/train_api: step \1 loss \2 lr \3 grad_norm \4/p' \
  "$tmp/cli.jsonl" > "$tmp/want"
grep '^train_api: step ' "$tmp/api.out" > "$tmp/got"
[ "$(wc -l < "$tmp/want")" -eq 3 ] && cmp -s "$tmp/want" "$tmp/got" && ok \
  || { bad "step callback differs from the log"; cat "$tmp/want" "$tmp/got"; }
last=$(sed -n '3s/.*"loss":\([^,]*\),.*/\1/p' "$tmp/cli.jsonl")
grep -q "^train_api: 3 steps, final loss $last\$" "$tmp/api.out" && ok \
  || { bad "no final loss $last from the callback"; cat "$tmp/api.out"; }
# a bad value through the API: the CLI's message, non-zero exit
${MPIRUN:-mpirun} $flags -np 1 "$build/examples/train_api" 1 "$fix/model/config.json" \
  "$tmp/none.npy" "$tmp/x" > "$tmp/err" 2>&1 && bad "missing data accepted" || ok
grep -q "none.npy: cannot open" "$tmp/err" && ok || { bad "no message naming the file"; cat "$tmp/err"; }
# a misspelt option: refused with the nearest option's name, before any training
${MPIRUN:-mpirun} $flags -np 1 "$build/examples/train_api" 1 "$fix/model/config.json" \
  "$fix/data.npy" "$tmp/typo" pipelinse=2 > "$tmp/typo.err" 2>&1 && bad "--pipelinse accepted" || ok
grep -q "unknown option '--pipelinse'; did you mean --pipelines?" "$tmp/typo.err" && ok \
  || { bad "no suggestion for a misspelt API option"; cat "$tmp/typo.err"; }
# several nodes need MPI_THREAD_MULTIPLE, which MPI_Init does not ask for
${MPIRUN:-mpirun} $flags -np 2 "$build/examples/train_api" 2 "$fix/model/config.json" \
  "$fix/data.npy" "$tmp/mn" ranks-per-node=1 > "$tmp/mn.err" 2>&1 && bad "2 nodes without threads ran" || ok
grep -q "2 nodes need MPI_THREAD_MULTIPLE .*this MPI library gave MPI_THREAD_SINGLE" "$tmp/mn.err" && ok \
  || { bad "no message naming the thread level"; cat "$tmp/mn.err"; }
finish
