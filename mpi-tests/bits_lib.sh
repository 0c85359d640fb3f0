# Sourced by the shell tests that compare whole training runs bit for bit
# (test_recompute_bits.sh, test_mlp_chunks.sh), after testlib.sh:
#   run NP OUT [options...]   one CPU training run into $tmp/OUT{.jsonl,.txt,/}
#   same A B WHAT             runs A and B saved the same safetensors and logged
#                             the same step, loss, lr, grad norm and tokens
run() { # NP OUT [options...]: a training run, its stderr in $tmp/OUT.txt
  np=$1; out=$2; shift 2
  ${MPIRUN:-mpirun} $flags -np "$np" "$bin" train --progress none --threads 1 --device cpu \
    --timeout 60 --log "$tmp/$out.jsonl" --save "$tmp/$out" "$@" > "$tmp/$out.txt" 2>&1 ||
    { bad "$out: train failed"; cat "$tmp/$out.txt"; }
}
same() { # A B what: the saved safetensors (a model, or LoRA's adapters) and the metrics
  # (step, loss, lr, grad norm, tokens) identical
  cut -d, -f1-6 "$tmp/$1.jsonl" > "$tmp/a.cut"; cut -d, -f1-6 "$tmp/$2.jsonl" > "$tmp/b.cut"
  files=0 differ=0
  for f in "$tmp/$1"/*.safetensors; do
    [ -f "$f" ] || continue
    files=$((files + 1))
    cmp -s "$f" "$tmp/$2/${f##*/}" || differ=1
  done
  [ -s "$tmp/a.cut" ] && cmp -s "$tmp/a.cut" "$tmp/b.cut" && [ "$files" -gt 0 ] && [ "$differ" = 0 ] &&
    ok || bad "$3: $1 and $2 differ"
}
