#!/bin/sh
# Proves that a few configurations drawn by tools/random-configs.sh (from
# random_configs_lib.sh, which this test shares with it) train to the same
# bits on 1 rank and on 2-4 ranks: losses, gradient norms and every saved
# file, and a checkpoint resumed on another rank count where one was drawn.
# The (seed, index) pairs below are fixed and cover, between them, each
# architecture (llama, qwen3, qwen3_moe, gpt_oss), LoRA, packed documents,
# evaluation, several nodes and pipelines, a forced plan and a resume,
# and model directories (an FP8 LoRA base and the MXFP4 gpt-oss model, each
# sharded), a PEFT adapter to start from, an evaluation mask, a longer
# sequence and more steps; each is a few seconds on two cores. A finding of
# the sweep gets its own regression in the test of its feature, not here.
set -u
. "$(dirname "$0")/testlib.sh"
. "$src/mpi-tests/random_configs_lib.sh"
unset OMP_NUM_THREADS
# several ranks of 2 threads share few cores here: workers that sleep at their
# barriers instead of spinning change the time only
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
rc_bin=$bin
rc_data="$build/examples/data/gnu-licenses.npy"
rc_fixtures="$src/mpi-tests/fixtures"
rc_topologies="$rc_fixtures/topology"
rc_tokens=$(head -c 128 "$rc_data" | LC_ALL=C sed -n "s/.*'shape': (\([0-9]*\),).*/\1/p")
rc_mpirun="${MPIRUN:-mpirun} $flags"
rc_timeout=60
drawn=""
for pair in 100:15 101:33 100:44 101:55 102:7 101:47 100:22 102:48 101:5; do
  seed=${pair%:*} index=${pair#*:}
  dir="$tmp/s$seed-$index"; mkdir -p "$dir"
  rc_draw "$seed" "$index" "$dir"
  drawn="$drawn
$rc_desc"
  rc_check "$dir"
  if [ "$rc_verdict" = same ]; then ok
  else
    bad "seed $seed config $index ($rc_desc): $rc_verdict: $rc_why"
    rc_commands "$dir"
  fi
done
# a change of the drawing changes what these pairs draw: say when they no
# longer cover what this test is for
for feature in '^llama ' '^qwen3 ' '^qwen3_moe ' '^gpt_oss ' 'lora(.*dropout' 'merged' \
               'documents' ' eval' 'nodes=[234]' 'pipelines=[234]' 'plan=' ' bf16 ' \
               'resume@' 'model=fp8' 'model=mxfp4' 'sharded=' 'lora-init' 'eval-mask' \
               ' S=[4-9][0-9]' ' steps=[5-8]'; do
  echo "$drawn" | grep -q -e "$feature" && ok ||
    bad "no fixed draw has '$feature' any more: pick other (seed, index) pairs"
done
finish
