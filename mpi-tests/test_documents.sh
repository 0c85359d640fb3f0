#!/bin/sh
# Proves (CPU executors): training with --documents is bit-identical on 1,
# 2, 3 and 4 ranks (and with --pipelines 2 on 2 and 4) and differs from training
# without it; the targets that would predict a document's first token from
# the previous document are not counted (counted_tokens in the metrics);
# a checkpoint records the option and refuses a resume without it; bad
# document files are refused naming the file, the index and the value
# (unsorted, repeated, negative, a first start that is not 0, a start past
# the data, a float file); --device cuda takes --documents (proven on the
# H200 of 2026-11-30) unless RP_DISABLE_CUDA_PATHS names documents, and
# refuses it with --attention cudnn.
# (That packed documents train as separate sequences would, against
# transformers in float64, is test_golden.sh's qwen3-packed and
# llama-packed.)
# Ranks: 1 2 3 4
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
run() { # NP OUT_PREFIX [options...]: a run; its stderr in $tmp/OUT.txt
  np=$1; out=$2; shift 2
  no_grace=""; [ "$np" = 1 ] && no_grace=$one_rank # a refusal on one rank: no grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $no_grace -np "$np" "$bin" train --progress none --threads 1 --timeout 60 \
    "$@" > "$tmp/$out.txt" 2>&1
}
data="$build/examples/data/gnu-licenses.npy"
npy() { # FILE DESCR VALUES...: a one-dimensional .npy of 8-byte little-endian values
  f=$1; d=$2; shift 2
  { printf '\223NUMPY\001\000\166\000'
    printf "%-117s\n" "{'descr': '$d', 'fortran_order': False, 'shape': ($#,), }"
    for v in "$@"; do
      i=0; while [ $i -lt 8 ]; do
        printf "\\$(printf %03o $(( (v >> (8 * i)) & 255 )))"; i=$((i + 1))
      done
    done; } > "$f"
}
# document starts: every 37th token from 0, and a one-token document at 200
docs="$tmp/docs.npy"
npy "$docs" '<i8' 0 37 74 111 148 185 200 201 222 259 296 333 370 407 444 481 518 555
tiny="--init-config $src/examples/tiny-config.json --data $data --seq-len 32 --batch-size 8 --microbatches 4 --steps 4 --lr 3e-3 --seed 3 --device cpu"
for np in 1 2 3 4; do
  run $np r$np $tiny --documents "$docs" --log "$tmp/r$np.jsonl" --save "$tmp/r$np" || { bad "--documents on $np rank(s)"; cat "$tmp/r$np.txt"; }
done
for np in 2 3 4; do
  cmp -s "$tmp/r1/model.safetensors" "$tmp/r$np/model.safetensors" && ok || bad "--documents: $np ranks differ from 1"
done
run 2 p2 $tiny --documents "$docs" --pipelines 2 --save "$tmp/p2"
run 4 p4 $tiny --documents "$docs" --pipelines 2 --save "$tmp/p4"
cmp -s "$tmp/p2/model.safetensors" "$tmp/p4/model.safetensors" && ok || bad "--documents --pipelines 2: 4 ranks differ from 2"
run 2 plain $tiny --log "$tmp/plain.jsonl" --save "$tmp/plain"
cmp -s "$tmp/r1/model.safetensors" "$tmp/plain/model.safetensors" && bad "--documents changed nothing" || ok
# step 1 reads samples 0-7 (tokens 0..256): the targets that are document
# starts 37 74 111 148 185 200 201 222 (8 of them) do not count
c1=$(sed -n '1s/.*"counted_tokens":\([0-9]*\).*/\1/p' "$tmp/r1.jsonl")
p1=$(sed -n '1s/.*"counted_tokens":\([0-9]*\).*/\1/p' "$tmp/plain.jsonl")
[ "$p1" = 256 ] && [ "$c1" = 248 ] && ok || bad "counted targets of step 1: $c1 with documents, $p1 without (want 248, 256)"

# checkpoints: the option is part of the run's semantics
run 2 ck $tiny --documents "$docs" --checkpoint-dir "$tmp/ck" --checkpoint-every 2
grep -q '"documents":true' "$tmp/ck/step-00000002/trainer_state.json" && ok || bad "trainer_state.json does not record documents"
run 1 nodoc --data "$data" --seq-len 32 --batch-size 8 --microbatches 4 --steps 4 --lr 3e-3 --seed 3 --device cpu --resume "$tmp/ck/step-00000002" &&
  bad "a checkpoint with documents resumed without them" ||
  { grep -q "options.documents is true, this run has false" "$tmp/nodoc.txt" && ok || { bad "resume without --documents: message"; cat "$tmp/nodoc.txt"; }; }
run 3 resumed --data "$data" --seq-len 32 --batch-size 8 --microbatches 4 --steps 4 --lr 3e-3 --seed 3 --device cpu --documents "$docs" --resume "$tmp/ck/step-00000002" --save "$tmp/resumed"
cmp -s "$tmp/r1/model.safetensors" "$tmp/resumed/model.safetensors" && ok || { bad "--documents resumed at step 2 on 3 ranks differs"; cat "$tmp/resumed.txt"; }

# bad document files, each named with the index and the value
badfile() { # NAME DESCR EXPECTED-MESSAGE VALUES...
  n=$1 d=$2 m=$3; shift 3
  npy "$tmp/$n.npy" "$d" "$@"
  run 1 "b$n" $tiny --documents "$tmp/$n.npy" && bad "$n accepted" ||
    { grep -q -- "$m" "$tmp/b$n.txt" && ok || { bad "$n: message"; cat "$tmp/b$n.txt"; }; }
}
badfile unsorted '<i8' "documents $tmp/unsorted.npy: index 2: start 40 is not above the previous start 50" 0 50 40 90
badfile repeated '<i8' "index 2: start 50 is not above the previous start 50 (starts must be sorted and distinct)" 0 50 50
badfile negative '<i8' "documents $tmp/negative.npy: index 0: start -3 is negative" -3 5
badfile notzero '<i8' "index 0: the first document starts at 4, not 0" 4 50
badfile past '<i8' "index 2: start 99999999 is past the .* tokens of" 0 10 99999999
badfile floats '<f8' "floats.npy" 0 4612811918334230528
# --documents on CUDA: the path the H200 window of 2026-11-30 proved, on by
# default (the run then trains on a GPU, or fails for want of one, with
# another message); RP_DISABLE_CUDA_PATHS=documents turns it off and the
# option is refused, even where RP_ALLOW_UNPROVEN_CUDA names it; turning
# other paths off does not
cudaargs="--init-config $src/examples/tiny-config.json --data $data --seq-len 32 --batch-size 8 --steps 1 --device cuda --documents $docs"
run 1 cuda $cudaargs
grep -q "document segments" "$tmp/cuda.txt" && { bad "--device cuda refused --documents by default"; cat "$tmp/cuda.txt"; } || ok
RP_DISABLE_CUDA_PATHS=" documents " run 1 cuda-off $cudaargs &&
  bad "RP_DISABLE_CUDA_PATHS=documents let --documents run" ||
  { grep -q "documents: attention over document segments on CUDA is turned off (RP_DISABLE_CUDA_PATHS names documents" "$tmp/cuda-off.txt" && ok || { bad "off: message"; cat "$tmp/cuda-off.txt"; }; }
RP_DISABLE_CUDA_PATHS=documents RP_ALLOW_UNPROVEN_CUDA=documents run 1 cuda-both $cudaargs &&
  bad "RP_ALLOW_UNPROVEN_CUDA=documents won over RP_DISABLE_CUDA_PATHS=documents" ||
  { grep -q "document segments on CUDA is turned off" "$tmp/cuda-both.txt" && ok || { bad "both: message"; cat "$tmp/cuda-both.txt"; }; }
RP_DISABLE_CUDA_PATHS=gpt-oss,cudnn run 1 cuda-others $cudaargs
grep -q "document segments" "$tmp/cuda-others.txt" && { bad "RP_DISABLE_CUDA_PATHS=gpt-oss,cudnn refused --documents"; cat "$tmp/cuda-others.txt"; } || ok
# cuDNN takes document segments only where their padded layout fits (the
# cudnn-documents path): --attention cudnn, which never falls back, is
# refused with them up front, naming why, with that path on or off
for allow in "" cudnn-documents; do
  RP_ALLOW_UNPROVEN_CUDA=$allow run 1 cuda-cudnn $cudaargs --attention cudnn &&
    bad "--attention cudnn accepted --documents (allow '$allow')" ||
    { grep -q -- "--attention cudnn with --documents or --eval-documents: cuDNN takes document segments only where their padded layout fits" "$tmp/cuda-cudnn.txt" && ok || { bad "cudnn: message"; cat "$tmp/cuda-cudnn.txt"; }; }
done
RP_DISABLE_CUDA_PATHS=documents,segmnets run 1 cuda-off-typo $cudaargs &&
  bad "RP_DISABLE_CUDA_PATHS with an unknown word accepted" ||
  { grep -q "RP_DISABLE_CUDA_PATHS: 'segmnets' is not a CUDA path that can be turned off (known: documents, fp8-upload, gpt-oss, cudnn, .*fused-gate-up, cudnn-documents, or 1 for all of them, 0 for none)" "$tmp/cuda-off-typo.txt" && ok || { bad "off, unknown word: message"; cat "$tmp/cuda-off-typo.txt"; }; }
RP_ALLOW_UNPROVEN_CUDA=documents,segmnets run 1 cuda-typo --init-config "$src/examples/tiny-config.json" --data "$data" \
  --seq-len 32 --batch-size 8 --steps 1 --device cpu --documents "$docs" &&
  bad "RP_ALLOW_UNPROVEN_CUDA with an unknown word accepted" ||
  { grep -q "RP_ALLOW_UNPROVEN_CUDA: 'segmnets' is not a CUDA path waiting for a GPU (known: documents, fp8-upload, gpt-oss, cudnn, .*gemm-lt, xent-fp32, bf16-mlp, fused-gate-up, cudnn-documents, or 1 for all of them, 0 for none)" "$tmp/cuda-typo.txt" && ok || { bad "unknown word: message"; cat "$tmp/cuda-typo.txt"; }; }
finish
