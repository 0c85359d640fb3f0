#!/bin/sh
# Proves that a run's losses, gradient norms and saved weights are the same
# bits on 1, 2, 3 and 4 ranks (CPU executors, fixed M and --threads), over the
# shapes a random-config check found wanting: one block and five, tied and
# untied, attention biases, odd widths and vocabularies whose head GEMM
# reduces over more than OpenBLAS's block (K = vocab > 384), M = 1, 3 and 5,
# clipping on and off, 1 and 2 threads;
# and that it holds on every OpenBLAS build found (Debian's openmp, pthread
# and serial builds, tried through LD_LIBRARY_PATH; tools/blas-builds.sh
# unpacks the ones not installed). The pthread build ignores OpenMP's thread
# count and takes the CPUs mpirun leaves a rank (one core for 1-2 ranks,
# every core for 3 or more): before --threads reached the BLAS, 3 and 4
# ranks gave other bits there (issue 30). A run on the pthread build says so
# in a warning, and only there.
set -u
. "$(dirname "$0")/testlib.sh"
unset OMP_NUM_THREADS
data="$build/examples/data/gnu-licenses.npy"

# config NAME TYPE BLOCKS HIDDEN INTER HEADS KV HEAD_DIM VOCAB TIED BIAS
config() {
  arch=LlamaForCausalLM; [ "$2" = qwen3 ] && arch=Qwen3ForCausalLM
  cat > "$tmp/$1.json" <<JSON
{"model_type": "$2", "architectures": ["$arch"], "num_hidden_layers": $3,
 "hidden_size": $4, "intermediate_size": $5, "num_attention_heads": $6,
 "num_key_value_heads": $7, "head_dim": $8, "vocab_size": $9,
 "tie_word_embeddings": ${10}, "attention_bias": ${11}, "rms_norm_eps": 1e-6,
 "max_position_embeddings": 128, "rope_theta": 10000.0, "initializer_range": 0.02,
 "torch_dtype": "float32"}
JSON
}
config one llama 1 72 113 8 2 18 523 true true
config five llama 5 84 141 2 2 26 619 false false
config odd qwen3 3 40 77 4 1 10 601 true false
config wide qwen3 2 36 50 2 2 18 700 false true
# case NAME: its training options (--steps 3, a warm and a decayed step)
case_args() {
  case $1 in
    one) echo "--seq-len 13 --batch-size 6 --microbatches 1 --grad-clip 0 --threads 1" ;;
    five) echo "--seq-len 19 --batch-size 4 --microbatches 1 --grad-clip 0.65 --threads 1" ;;
    odd) echo "--seq-len 11 --batch-size 6 --microbatches 3 --grad-clip 1 --threads 1" ;;
    wide) echo "--seq-len 7 --batch-size 5 --microbatches 5 --grad-clip 0 --threads 2" ;;
  esac
}

# the OpenBLAS builds to try: the linked one, then every other build found
builds="default"
for d in /usr/lib/*-linux-gnu/openblas-pthread /usr/lib/*-linux-gnu/openblas-serial \
         "$build"/blas-builds/*/usr/lib/*-linux-gnu/openblas-*; do
  [ -f "$d/libopenblas.so.0" ] && builds="$builds $d"
done
case $builds in
  *openblas-pthread*) ;;
  *) echo "note: no pthread OpenBLAS build here (run tools/blas-builds.sh): only $builds tried" ;;
esac
tried=""
for b in $builds; do
  lib=""; [ "$b" = default ] || lib=$b
  # one run per distinct build (the linked one may be among the others)
  kind=$(LD_LIBRARY_PATH=$lib ${MPIRUN:-mpirun} $flags -x LD_LIBRARY_PATH -np 1 "$bin" train \
           --init-config "$tmp/one.json" --data "$data" --seq-len 8 --batch-size 1 --steps 1 \
           --progress none --device cpu 2>&1 | sed -n 's/.*executors: 1 x cpu (.*GiB, \(.*\)), fp32.*/\1/p')
  [ -n "$kind" ] || { bad "$b: cannot run roundpipe on this BLAS"; continue; }
  case "$tried" in *"[$kind]"*) continue ;; esac
  tried="$tried[$kind]"
  echo "== $kind${lib:+ ($lib)}"
  for c in one five odd wide; do
    for np in 1 2 3 4; do
      # shellcheck disable=SC2046
      LD_LIBRARY_PATH=$lib ${MPIRUN:-mpirun} $flags -x LD_LIBRARY_PATH -np $np "$bin" train \
        --init-config "$tmp/$c.json" --seed 7 --data "$data" $(case_args $c) --steps 3 \
        --lr 0.002 --warmup-steps 1 --lr-schedule cosine --min-lr 0 --weight-decay 0.1 \
        --dtype fp32 --device cpu --progress none --timeout 60 \
        --log "$tmp/$c-$np.jsonl" --save "$tmp/$c-$np" > "$tmp/$c-$np.txt" 2>&1 ||
        { bad "$kind: $c on $np ranks failed"; tail -n 5 "$tmp/$c-$np.txt"; continue; }
      if [ $np = 1 ]; then
        # a pthread build is named in a warning (its workers spin beside ours)
        case $kind in *pthread*) want=1 ;; *) want=0 ;; esac
        [ "$(grep -c "warning: the CPU executors' OpenBLAS is its pthread build" "$tmp/$c-1.txt")" = $want ] &&
          ok || bad "$kind: the pthread build's warning (want $want line)"
        continue
      fi
      if [ "$(cut -d, -f1-4 "$tmp/$c-1.jsonl")" = "$(cut -d, -f1-4 "$tmp/$c-$np.jsonl")" ] &&
         cmp -s "$tmp/$c-1/model.safetensors" "$tmp/$c-$np/model.safetensors"; then ok
      else
        bad "$kind: $c on $np ranks gave other bits than on 1"
        diff "$tmp/$c-1.jsonl" "$tmp/$c-$np.jsonl" | cut -c1-100 | head -n 6
      fi
    done
  done
done
finish
