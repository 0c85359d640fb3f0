# Sourced by the checkpoint tests after testlib.sh: a CPU training run and
# the comparison of a resumed run with an uninterrupted one.
run() { # NP OUT_PREFIX [options...]: a run; its stderr in $tmp/OUT.txt
  np=$1; out=$2; shift 2
  run_k=""; [ "$np" = 1 ] && run_k=$one_rank # none alive to give a grace (testlib.sh)
  ${MPIRUN:-mpirun} $flags $run_k -np "$np" "$bin" train --progress none --threads 1 --device cpu \
    --timeout 60 "$@" > "$tmp/$out.txt" 2>&1
}
same() { # A B what: saved models and metrics (steps of B) identical
  cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" || { bad "$3: models differ"; return; }
  lines=$(wc -l < "$tmp/$2.jsonl")
  if tail -n "$lines" "$tmp/$1.jsonl" | cut -d, -f1-6 | cmp -s - "$(cut -d, -f1-6 "$tmp/$2.jsonl" > "$tmp/cut"; echo "$tmp/cut")"
  then ok; else bad "$3: metrics of the resumed steps differ"; fi
}
