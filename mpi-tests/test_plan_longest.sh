#!/bin/sh
# Proves: `roundpipe plan --seq-len max` finds the longest sequence, in
# steps of 1024 tokens, that the planner fits: under --memory-limit-mib the
# plain `plan --seq-len L` of the length it names fits and that of the next
# step does not; the device memory that bounds it is the one-layer-per-stage
# plan's peak at the next step (as a forced --plan of it counts it), given
# in parts that add up to it, largest first, the largest named; under
# --host-memory-limit-mib the bound is host memory (CPU executors: the store
# and the executors' buffers), within the limit at L and over it one step
# later (CPU executors without it: this machine's memory); --seq-len=max is
# the same search, and --help with it prints the help; the table says the longest length,
# the bound and the host memory; a layer-times file is refused; the paper's
# Llama-3.1-8B and Qwen3-32B configs parse with their public parameter
# counts and bench/paper/max-seq.sh parses. Then train
# runs one step at that length under the limit (CPU executors, two ranks),
# its executors allocating the plan's count to the byte.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
cfg="$src/examples/tiny-config.json"
# two weight buffers throughout (auto's one where two do not fit: below)
base="--init-config $cfg --batch-size 1 --microbatches 1 --gpus 2 --device cpu --weight-buffers 2"
field() { grep -o "\"$1\": [0-9]*" "$2" | head -n 1 | tr -dc 0-9; }

"$bin" plan $base --memory-limit-mib 64 --seq-len max --json > "$tmp/max.json" 2> "$tmp/err" ||
  { bad "--seq-len max failed"; cat "$tmp/err"; }
L=$(field longest_seq_len "$tmp/max.json"); F=$(field first_over_seq_len "$tmp/max.json")
[ -n "$L" ] && [ "$L" -gt 0 ] && [ $((L % 1024)) -eq 0 ] && [ "$F" = $((L + 1024)) ] && ok ||
  bad "longest '$L', first over '$F'"
[ "$(field seq_len "$tmp/max.json")" = "$L" ] && ok || bad "the plan printed is not the longest's"
grep -q '"bound": "device"' "$tmp/max.json" && ok || bad "the bound is not device memory"
# the plain plans either side of it
"$bin" plan $base --memory-limit-mib 64 --seq-len "$L" --json > "$tmp/L.json" 2>/dev/null &&
  [ "$(field peak_bytes "$tmp/L.json")" -le $((64 << 20)) ] && ok || bad "plan --seq-len $L does not fit"
"$bin" plan $base --memory-limit-mib 64 --seq-len "$F" > /dev/null 2>&1 &&
  bad "plan --seq-len $F fits, yet max said $L" || ok
# the need at F: the one-layer-per-stage plan's peak, over the limit, in parts
need=$(field bound_need_bytes "$tmp/max.json")
"$bin" plan $base --seq-len "$F" --plan "fwd=0,1,2,3,4;bwd=5,4,3,2,1,0;width=2" --json \
  > "$tmp/one.json" 2>/dev/null
[ -n "$need" ] && [ "$need" = "$(field peak_bytes "$tmp/one.json")" ] && [ "$need" -gt $((64 << 20)) ] &&
  ok || bad "need '$need' is not the one-layer-per-stage plan's peak over the limit"
parts=$(grep -o '"bound_parts": \[[^]]*\]' "$tmp/max.json" | grep -o '"bytes": [0-9]*' | tr -dc '0-9\n')
sum=0; prev=""; sorted=1
for b in $parts; do
  sum=$((sum + b)); [ -n "$prev" ] && [ "$b" -gt "$prev" ] && sorted=0; prev=$b
done
[ "$sum" = "$need" ] && [ "$sorted" = 1 ] && ok || bad "parts '$parts' do not add up to $need largest first"
first=$(grep -o '"bound_parts": \[{"part": "[^"]*"' "$tmp/max.json" | sed 's/.*"part": "//; s/"$//')
grep -q "\"bound_part\": \"$first\"" "$tmp/max.json" && ok || bad "the bound part is not the largest, $first"
# the table's lines, and --seq-len=max
"$bin" plan $base --memory-limit-mib 64 --seq-len=max > "$tmp/max.txt" 2>/dev/null
grep -q "^longest sequence: $L tokens a sample" "$tmp/max.txt" &&
  grep -q "^bounded by device memory, $first: at $F tokens no plan fits" "$tmp/max.txt" &&
  grep -q "^at $L tokens: host memory per node: " "$tmp/max.txt" && ok ||
  { bad "the table's answer"; tail -n 4 "$tmp/max.txt"; }

# host memory as the bound: store + the CPU executors' buffers within the
# limit at the longest length, over it one step later (where the device fits)
"$bin" plan $base --memory-limit-mib 64 --host-memory-limit-mib 200 --seq-len max --json \
  > "$tmp/host.json" 2>/dev/null
H=$(field longest_seq_len "$tmp/host.json")
grep -q '"bound": "host"' "$tmp/host.json" && [ -n "$H" ] && [ "$H" -gt 0 ] && [ "$H" -lt "$L" ] && ok ||
  bad "host bound: '$(grep -o '"bound": "[a-z]*"' "$tmp/host.json")' at '$H'"
host_at() { # length: the node's host bytes, store and executor buffers
  "$bin" plan $base --memory-limit-mib 64 --host-memory-limit-mib 200 --seq-len "$1" --json \
    > "$tmp/h.json" 2>/dev/null
  echo $(( $(field host_bytes "$tmp/h.json") + 2 * $(field peak_bytes "$tmp/h.json") ))
}
[ "$(host_at "$H")" -le $((200 << 20)) ] && [ "$(host_at $((H + 1024)))" -gt $((200 << 20)) ] &&
  [ "$(field bound_need_bytes "$tmp/host.json")" = "$(host_at $((H + 1024)))" ] && ok ||
  bad "host memory at $H and $((H + 1024)) against 200 MiB"

# CPU executors without --host-memory-limit-mib: this machine's memory bounds them, as
# the verdict checks it
"$bin" plan $base --seq-len max --json > "$tmp/cpu.json" 2>/dev/null
grep -q '"bound": "host"' "$tmp/cpu.json" && grep -q "within this machine's memory" "$tmp/cpu.json" &&
  ok || bad "CPU executors without limits: $(grep -o '"bound": "[a-z]*"' "$tmp/cpu.json")"
"$bin" plan --seq-len max --help > "$tmp/o" 2>&1 && grep -q "^usage: roundpipe plan" "$tmp/o" && ok ||
  bad "--seq-len max --help"

# a layer-times file: nothing to search
"$bin" plan --layers "$src/bench/gpu/h100-qwen3-1.7b-layers.txt" --seq-len max > "$tmp/o" 2>&1 &&
  bad "--seq-len max with --layers ran" || { grep -q "needs a config" "$tmp/o" && ok || bad "its message"; }

# the paper's configs bench/paper/max-seq.sh plans parse, with their public
# parameter counts: a forced plan's backward jobs hold every layer once (bf16),
# the embedding alone in the last (its device buffer holds the rows a step
# reads, so its vocab x hidden come from the config)
params() { # config plan: the backward jobs' weights but the embedding's, and its table
  "$bin" plan --init-config "$1" --seq-len 1024 --gpus 1 --device cuda --plan "$2" --json 2>/dev/null |
    grep -o '"kind": "[TB]", "first": [1-9][0-9]*, "last": [0-9]*, "ms_per_microbatch": [0-9.e+-]*, "weight_bytes": [0-9]*' |
    sed 's/.*: //' | awk -v v="$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$1")" \
      -v h="$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$1")" \
      '{ s += $1 } END { printf "%.0f\n", s / 2 + v * h }'
}
[ "$(params "$src/bench/paper/llama3.1-8b-config.json" "fwd=0-16;bwd=17-33,1-16,0")" = 8030261248 ] && ok ||
  bad "Llama-3.1-8B's config: $(params "$src/bench/paper/llama3.1-8b-config.json" "fwd=0-16;bwd=17-33,1-16,0") parameters"
[ "$(params "$src/bench/paper/qwen3-32b-config.json" "fwd=0-32;bwd=33-65,1-32,0")" = 32762123264 ] && ok ||
  bad "Qwen3-32B's config: $(params "$src/bench/paper/qwen3-32b-config.json" "fwd=0-32;bwd=33-65,1-32,0") parameters"
sh -n "$src/bench/paper/max-seq.sh" && ok || bad "bench/paper/max-seq.sh does not parse"

# train at the longest length: the executors allocate what plan counts
p=$(grep -o '"plan": "[^"]*"' "$tmp/max.json" | sed 's/"plan": "//; s/"$//')
want=$("$bin" plan $base --seq-len "$L" --plan "$p" --json 2>/dev/null | grep -o '"peak_bytes": [0-9]*' | head -n 1 | tr -dc 0-9)
${MPIRUN:-mpirun} $flags -np 2 "$bin" train --init-config "$cfg" --data "$build/examples/data/gnu-licenses.npy" \
  --seq-len "$L" --batch-size 1 --microbatches 1 --steps 1 --progress none --device cpu \
  --memory-limit-mib 64 --plan "$p" > "$tmp/train.txt" 2>&1 || { bad "train at $L failed"; tail -n 5 "$tmp/train.txt"; }
got=$(sed -n 's/.*executor buffers: .*(\([0-9]*\) bytes.*/\1/p' "$tmp/train.txt")
[ -n "$got" ] && [ "$got" = "$want" ] && [ "$got" -le $((64 << 20)) ] && ok ||
  bad "train at $L allocates '$got' bytes, plan counts '$want'"
# --weight-buffers 1: one buffer of the largest stage's weights, so a model
# whose weights bound it reaches further (a block of 60 MiB, 450 MiB:
# 2048 tokens with two buffers, 3072 with one), and the bound says so;
# auto, the default, takes one where two do not fit: 3072, and says so
# (fixtures/wide: two blocks of hidden 1024 and intermediate 4096)
wide="--init-config $src/mpi-tests/fixtures/wide/config.json --batch-size 1 --microbatches 1 --gpus 2 --device cpu --memory-limit-mib 450 --seq-len max"
"$bin" plan $wide --json --weight-buffers 2 > "$tmp/w2.json" 2>/dev/null && "$bin" plan $wide --json --weight-buffers 1 > "$tmp/w1.json" 2>/dev/null &&
  [ "$(field longest_seq_len "$tmp/w2.json")" = 2048 ] && [ "$(field longest_seq_len "$tmp/w1.json")" = 3072 ] &&
  "$bin" plan $wide --json > "$tmp/wa.json" 2>/dev/null && [ "$(field longest_seq_len "$tmp/wa.json")" = 3072 ] &&
  [ "$(field weight_buffers "$tmp/wa.json")" = 1 ] && [ "$(field weight_buffers "$tmp/w2.json")" = 2 ] &&
  "$bin" plan $wide 2>&1 | grep -q "^weight buffers: one per executor (--weight-buffers auto: no plan fits with two)" &&
  "$bin" plan $wide --weight-buffers 1 2>&1 | grep -q "weights 60.0 MiB (one buffer of the largest stage's 60.0 MiB (--weight-buffers 1)" &&
  ok || bad "--weight-buffers 1: longest $(field longest_seq_len "$tmp/w1.json") against $(field longest_seq_len "$tmp/w2.json") with two"
finish
