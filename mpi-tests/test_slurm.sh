#!/bin/sh
# Proves: the Slurm batch scripts in examples/slurm parse (bash -n), and the
# single-node script's own command line trains: run outside Slurm with
# mpirun in place of srun, CPU executors and the tiny default model for 3
# steps, it exits 0, logs 3 steps, saves the model and its final checkpoint
# (it asks Slurm for SIGUSR1 before the time limit and resumes with auto).
set -u
. "$(dirname "$0")/testlib.sh"
dir="$src/examples/slurm"
for f in single-node.sbatch multi-node.sbatch; do
  bash -n "$dir/$f" && ok || bad "$f does not parse"
  grep -q '^#SBATCH --gpus-per-task=1$' "$dir/$f" && grep -q '^#SBATCH --mem=' "$dir/$f" \
    && grep -q 'srun --mpi=pmix' "$dir/$f" && ok || bad "$f: one GPU per task, --mem, srun --mpi=pmix"
done
grep -q 'NOT SUPPORTED YET' "$dir/multi-node.sbatch" && ok || bad "multi-node.sbatch must say it is not supported yet"

cd "$tmp" || exit 1
ROUNDPIPE="$bin" MODEL="--init-config $src/examples/tiny-config.json" \
  DATA="$build/examples/data/gnu-licenses.npy" DEVICE=cpu STEPS=3 \
  LAUNCH="${MPIRUN:-mpirun} $flags -np 2" bash "$dir/single-node.sbatch" > out 2>&1 \
  && ok || { bad "single-node.sbatch under mpirun failed"; cat out; }
[ "$(wc -l < roundpipe-local.jsonl)" -eq 3 ] && ok || bad "single-node: log has not 3 lines"
[ -s roundpipe-local-model/model.safetensors ] && ok || bad "single-node: no model saved"
[ -f roundpipe-checkpoints/step-00000003/checkpoint.complete ] && ok || bad "single-node: no final checkpoint"
grep -q '^#SBATCH --signal=USR1@120$' "$dir/single-node.sbatch" && ok || bad "single-node: no --signal"
finish
