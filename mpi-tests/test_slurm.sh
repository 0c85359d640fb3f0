#!/bin/sh
# Proves: the Slurm batch scripts in examples/slurm parse (bash -n), and
# their own command lines train: run outside Slurm with mpirun in place of
# srun, CPU executors and the tiny default model for 3 steps, the
# single-node script exits 0, logs 3 steps, saves the model and its final
# checkpoint (it asks Slurm for SIGUSR1 before the time limit and resumes
# with auto); the multi-node script, on 4 ranks as 2 nodes of 2
# (RANKS_PER_NODE=2), does the same and binds srun's tasks to cores and GPUs.
set -u
. "$(dirname "$0")/testlib.sh"
dir="$src/examples/slurm"
for f in single-node.sbatch multi-node.sbatch; do
  bash -n "$dir/$f" && ok || bad "$f does not parse"
  grep -q '^#SBATCH --gpus-per-task=1$' "$dir/$f" && grep -q '^#SBATCH --mem=' "$dir/$f" \
    && grep -q 'srun --mpi=pmix' "$dir/$f" && ok || bad "$f: one GPU per task, --mem, srun --mpi=pmix"
done

cd "$tmp" || exit 1
ROUNDPIPE="$bin" MODEL="--init-config $src/examples/tiny-config.json" \
  DATA="$build/examples/data/gnu-licenses.npy" DEVICE=cpu STEPS=3 \
  LAUNCH="${MPIRUN:-mpirun} $flags -np 2" bash "$dir/single-node.sbatch" > out 2>&1 \
  && ok || { bad "single-node.sbatch under mpirun failed"; cat out; }
[ "$(wc -l < roundpipe-local.jsonl)" -eq 3 ] && ok || bad "single-node: log has not 3 lines"
[ -s roundpipe-local-model/model.safetensors ] && ok || bad "single-node: no model saved"
[ -f roundpipe-checkpoints/step-00000003/checkpoint.complete ] && ok || bad "single-node: no final checkpoint"
grep -q '^#SBATCH --signal=USR1@120$' "$dir/single-node.sbatch" && ok || bad "single-node: no --signal"
# the multi-node script: 2 nodes of 2 ranks on this machine
mkdir -p "$tmp/multi" && cd "$tmp/multi" || exit 1
ROUNDPIPE="$bin" MODEL="--init-config $src/examples/tiny-config.json" \
  DATA="$build/examples/data/gnu-licenses.npy" DEVICE=cpu STEPS=3 RANKS_PER_NODE=2 \
  LAUNCH="${MPIRUN:-mpirun} $flags -np 4" bash "$dir/multi-node.sbatch" > out 2>&1 \
  && ok || { bad "multi-node.sbatch under mpirun failed"; cat out; }
grep -q "2 nodes of 2 ranks" out && ok || bad "multi-node: not run as 2 nodes"
[ "$(wc -l < roundpipe-local.jsonl)" -eq 3 ] && ok || bad "multi-node: log has not 3 lines"
[ -s roundpipe-local-model/model.safetensors ] && ok || bad "multi-node: no model saved"
[ -f roundpipe-checkpoints/step-00000003/checkpoint.complete ] && ok || bad "multi-node: no final checkpoint"
grep -q 'srun --mpi=pmix --cpu-bind=cores --gpu-bind=closest' "$dir/multi-node.sbatch" && ok || \
  bad "multi-node: srun does not bind cores and GPUs"
finish
