#!/bin/sh
# Proves: `roundpipe plan` ends with a verdict line: on a GPU of
# --device-memory-mib N it plans under N less train's reserve (5% + 512 MiB
# for the CUDA context, cuBLAS workspace and scratch) and says "fits" with
# buffers + reserve = total of N; a GPU too small for any plan is "does NOT
# fit", naming the layer, exit 1; within --memory-limit-mib it says so and
# the GPU it needs with the reserve; without either (and no GPU here) it
# says it is not checked and the GPU needed; CPU executors are checked
# against host memory; the host memory needed is on the line. When the
# planner's width is free and fewer pipelines are within 3% of the fastest's
# time with at most 90% of its host memory, they are proposed, with the
# fastest named; --pipelines P is train's (width G/P, --width kept),
# --recompute layer counts the per-layer activation checkpoints, with fp32
# activations and with CUDA's default bf16 (half the bytes but the input
# gradients').
set -u
. "$(dirname "$0")/testlib.sh"
cat > "$tmp/mid.json" << 'J'
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
 "intermediate_size": 3072, "num_hidden_layers": 8, "num_attention_heads": 8,
 "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 32000,
 "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
 "tie_word_embeddings": false, "attention_bias": false}
J
base="--init-config $tmp/mid.json --gpus 4 --microbatches 16 --seq-len 4096"
plan() { "$bin" plan $base "$@" > "$tmp/out" 2> "$tmp/err"; }
last() { tail -n 1 "$tmp/out"; }
# the executor's buffers come from the CUDA back end's own sizes where the
# build has it, else from the model: the figures are read, then checked
# against each other, so the test holds for both builds
# (--recompute stage: within a limit auto keeps blocks in the GPU's memory,
# without one none, and the verdicts compare one plan's buffers)
plan --device cuda --memory-limit-mib 100000 --recompute stage && last | grep -q "^verdict: fits within --memory-limit-mib 100000: an executor needs [0-9.]* MiB of buffers (a limit given has no reserve added: a GPU of [0-9]* MiB or more holds them" \
  && ok || { bad "the --memory-limit-mib verdict"; last; }
buf=$(last | sed -n 's/.*an executor needs \([0-9.]*\) MiB of buffers.*/\1/p')
gpu=$(last | sed -n 's/.*a GPU of \([0-9]*\) MiB or more.*/\1/p')
# the GPU named is the smallest whose memory less the reserve (5% + 512 MiB) holds the
# buffers (printed to 0.1 MiB)
awk -v b="$buf" -v g="$gpu" 'BEGIN { exit !(g - 0.05 * g - 512 >= b - 0.050001 && (g - 1) - 0.05 * (g - 1) - 512 < b + 0.050001) }' &&
  ok || bad "a GPU of $gpu MiB for $buf MiB of buffers"
if cuda_usable; then
  plan --device cuda && last | grep -q "^verdict: .* (free on this machine's GPU 0)" && ok || { bad "this GPU's verdict"; last; }
else
  plan --device cuda --recompute stage && last | grep -q "^verdict: not checked against a GPU (--device-memory-mib N checks one of N MiB): an executor needs $buf MiB of buffers, a GPU of $gpu MiB or more" \
    && ok || { bad "the unchecked verdict"; last; }
fi
# auto within the limit keeps blocks below the tail in the GPU's own
# memory (keep=N; their pool in the buffers), without a limit none
plan --device cuda --memory-limit-mib 100000 && grep -q "^plan: .*;keep=[1-9]" "$tmp/out" &&
  grep -q "kept by [1-9] blocks\? instead of recomputed, in the executors' own memory" "$tmp/out" &&
  kbuf=$(last | sed -n 's/.*an executor needs \([0-9.]*\) MiB of buffers.*/\1/p') &&
  awk -v k="$kbuf" -v b="$buf" 'BEGIN { exit !(k > b) }' && ok || { bad "auto within a limit keeps no block on the GPU"; cat "$tmp/out"; }
plan --device cuda && ! grep -q "^plan: .*;keep=" "$tmp/out" && ok || { bad "auto without a limit keeps blocks on the GPU"; cat "$tmp/out"; }
# the pool in the JSON and the device line: the H100 layer file's blocks
# keep 453690368 bytes a microbatch, 8 microbatches on one executor
h100="$src/bench/gpu/h100-qwen3-1.7b-layers.txt --bandwidth-gbs 55 --workspace-mib 734 --device-memory-mib 81559 --grad-clip 1 --microbatches 8"
"$bin" plan --layers $h100 --json > "$tmp/out" 2> "$tmp/err" &&
  k=$(sed -n 's/.*"kept_blocks": \([0-9]*\).*/\1/p' "$tmp/out") &&
  [ "${k:-0}" -gt 0 ] && grep -q "\"kept_pool_bytes\": $((k * 8 * 453690368))," "$tmp/out" &&
  "$bin" plan --layers $h100 > "$tmp/out" 2> "$tmp/err" &&
  grep -q "^device memory per executor .* MiB allowed, of them $(awk -v b=$((k * 8 * 453690368)) 'BEGIN { printf "%.1f", b / 1048576 }') MiB the pool of the $k kept blocks" "$tmp/out" &&
  ok || { bad "the pool's bytes in plan's JSON and line"; cat "$tmp/out" "$tmp/err"; }
# on a GPU of that size plus 300 MiB: fits, buffers + reserve = total within it
# (the own attention kernel: nothing kept for cuDNN's, whose term is below)
n=$((gpu + 300))
plan --device cuda --device-memory-mib $n --attention own && ok || { bad "plan on a $n MiB GPU"; cat "$tmp/err"; }
last | grep -q "^verdict: fits: an executor needs [0-9.]* MiB of buffers + [0-9.]* MiB reserved (CUDA context, cuBLAS workspace, scratch: 5% + 512 MiB) = [0-9.]* MiB of the GPU's $n.0 MiB (--device-memory-mib); host memory needed: [0-9.]* GiB per node$" &&
  last | sed 's/.*needs \([0-9.]*\) MiB of buffers + \([0-9.]*\) MiB reserved.* = \([0-9.]*\) MiB of the GPU.s \([0-9.]*\) MiB.*/\1 \2 \3 \4/' |
  awk '{ exit !($1 + $2 - $3 < 0.11 && $3 - $1 - $2 < 0.11 && $3 <= $4 && $2 - (0.05 * $4 + 512) < 0.11 && (0.05 * $4 + 512) - $2 < 0.11) }' \
  && ok || { bad "the $n MiB verdict"; last; }
plan --device cuda --device-memory-mib 600 --attention own && bad "600 MiB accepted" || ok
grep -q "verdict: does NOT fit the GPU's 600.0 MiB (--device-memory-mib; 58.0 MiB after the reserve .*layer 0 (embedding) alone needs" \
  "$tmp/err" && ok || { bad "the 600 MiB verdict"; cat "$tmp/err"; }
plan --device cpu && last | grep -q "^verdict: fits: CPU executors: 4 x .* MiB of buffers and the host store's .* GiB, .* in all of this machine's" \
  && ok || { bad "the CPU verdict"; last; }
plan --device cpu --device-memory-mib 600 && bad "--device-memory-mib for CPU executors" ||
  { grep -q "is a GPU's memory, but the plan is for cpu executors" "$tmp/err" && ok || { bad "its message"; cat "$tmp/err"; }; }
# fewer pipelines for less host memory, at 1024 tokens a sequence: 1
# pipeline (0.2% slower) over the fastest 2 (the planner's times decide
# which: at 4096 tokens, since the attention's backward counts 2.5 times its
# forward, 2 pipelines are the fastest and nothing is proposed)
short="--seq-len 1024"
plan --device cuda $short && grep -q "^pipeline width 4: 1 pipeline(s)" "$tmp/out" &&
  grep -q "^chosen for host memory: 0.2% slower than the fastest, 2 pipeline(s) of width 2 (--pipelines 2: 160.3 ms an iteration), but 3.07 GiB of host memory instead of 3.60 GiB$" "$tmp/out" \
  && ok || { bad "the host-memory choice"; cat "$tmp/out"; }
# the JSON's members (no Python needed: one object on one line)
field() { sed -n "s/.*\"$1\": \([^,]*\),.*/\1/p" "$tmp/out"; }
plan --device cuda $short --json && [ "$(field width)" = 4 ] && [ "$(field fastest_width)" = 2 ] &&
  awk -v c="$(field iteration_ms)" -v f="$(field fastest_iteration_ms)" -v h="$(field host_bytes)" \
    -v fh="$(field fastest_host_bytes)" 'BEGIN { exit !(c <= 1.03 * f && h <= 0.9 * fh) }' &&
  case $(field fits) in null | true | false) true ;; *) false ;; esac && ok || { bad "the JSON of the choice"; cat "$tmp/out"; }
# --pipelines P is train's: width G/P; --width stays
plan --device cuda $short --pipelines 2 && grep -q "^pipeline width 2: 2 pipeline(s)" "$tmp/out" &&
  ! grep -q "^chosen" "$tmp/out" && last | grep -q "host memory needed: 3.6 GiB" && ok || { bad "--pipelines 2"; cat "$tmp/out"; }
plan --device cuda --pipelines 2 && sed -n 3p "$tmp/out" > "$tmp/p2" &&
  plan --device cuda --width 2 && sed -n 3p "$tmp/out" | cmp -s - "$tmp/p2" && ok || bad "--pipelines 2 and --width 2 differ"
plan --pipelines 3 && bad "--pipelines 3 of 4" || { grep -q "pipelines 3 does not divide the 4 executors" "$tmp/err" && ok || bad "its message"; }
plan --pipelines 4 --width 2 && bad "a contradiction" || { grep -q "contradicts --width 2" "$tmp/err" && ok || bad "its message"; }
# --recompute layer: every layer's input saved, on a plan given (the
# planner's own depends on its times). Of T x H fp32 a microbatch (16 MiB):
# 3 forward outputs (the inputs of layers 1, 2 and 8), 4 checkpoints of
# backward stages (at 6, 5, 4 and 3; those at 2 and 1 are forward outputs,
# arena.h) and 2 input-gradient buffers = 9; layer grain 5 more
# checkpoints than the forward outputs (7 less the 2) = 10; beside them the
# loss, norm and router slots (82944 bytes)
forced="--pipelines 2 --plan fwd=0,1,2-7;bwd=8-9,6-7,5,4,3,2,1,0;width=2"
plan --device cuda $forced --activation-dtype fp32 --json && s=$(field host_activation_bytes)
plan --device cuda $forced --recompute layer --activation-dtype fp32 --json && l=$(field host_activation_bytes)
[ "$s" = $((9 * 16 * 16 * 1048576 + 82944)) ] && [ "$l" = 2684437504 ] && ok ||
  bad "--recompute: activations $s and $l"
# CUDA's default, bf16 activations: the outputs and checkpoints in 8 MiB,
# the 2 input-gradient buffers still fp32: 7 x 8 + 2 x 16 = 88 MiB a
# microbatch, at layer grain 8 x 8 + 2 x 16 = 96
plan --device cuda $forced --json && s=$(field host_activation_bytes)
plan --device cuda $forced --recompute layer --json && l=$(field host_activation_bytes)
[ "$s" = $((88 * 16 * 1048576 + 82944)) ] && [ "$l" = $((96 * 16 * 1048576 + 82944)) ] && ok ||
  bad "--recompute, bf16 activations: $s and $l"
plan --recompute block && bad "--recompute block" || { grep -q "recompute: 'block' is not one of stage, layer" "$tmp/err" && ok || bad "its message"; }
# cuDNN's attention (--attention, as train's): a build with cuDNN's headers
# keeps for it beside the plan 2 bytes a score of a microbatch's heads
# (2 x 8 x 4096^2; 4096 is a multiple of the 128 the lengths are padded
# to), 16 + 4 x 128 bytes a row of each head (528 x 8 x 4096: statistics
# and dQ's fp32 accumulator, what cuDNN 9.14 asked on an H200), 1 MiB, and
# its buffers (statistics and Delta 2 x 4096 x 8 x 4; dq, dk, dv in bf16
# 4096 x (1024 + 2 x 512) x 2): 303824896 bytes, out of the planner's limit
# and in the verdict, under cudnn and under auto (the cudnn path proven on
# the H200 of 2026-11-30); own, auto with RP_DISABLE_CUDA_PATHS=cudnn, and
# any run over --documents keep none, unless the cudnn-documents path is on
# (document segments through cuDNN's ragged layout where they fit): then
# twice that workspace (2 x 286785536) and the buffers with statistics and
# Delta for 8 times the rows (2 x 1048576 + 16777216): 592445440 bytes
want=0 dwant=0
grep -q "define RP_HAVE_CUDNN 1" "$build/config.h" 2>/dev/null && want=303824896 dwant=592445440
gpu="--device cuda --device-memory-mib 81559 --json"
plan $gpu && lim0=$(field memory_limit_bytes) && r0=$(field cudnn_reserve_bytes)
plan $gpu --attention cudnn && lim=$(field memory_limit_bytes) && r1=$(field cudnn_reserve_bytes)
RP_DISABLE_CUDA_PATHS=cudnn plan $gpu && own=$(field memory_limit_bytes) && r2=$(field cudnn_reserve_bytes)
plan $gpu --attention own && r3=$(field cudnn_reserve_bytes)
plan $gpu --attention cudnn --documents "$tmp/docs.npy" && r4=$(field cudnn_reserve_bytes) &&
  dlim=$(field memory_limit_bytes)
plan $gpu --documents "$tmp/docs.npy" && r5=$(field cudnn_reserve_bytes)
RP_ALLOW_UNPROVEN_CUDA=cudnn-documents plan $gpu --documents "$tmp/docs.npy" &&
  r6=$(field cudnn_reserve_bytes)
RP_ALLOW_UNPROVEN_CUDA=cudnn-documents RP_DISABLE_CUDA_PATHS=cudnn plan $gpu --documents "$tmp/docs.npy" &&
  r7=$(field cudnn_reserve_bytes)
[ "$r6" = "$dwant" ] && [ "$r7" = 0 ] && ok ||
  bad "cuDNN's reservation over documents with cudnn-documents on: $r6 (want $dwant), with cudnn off $r7"
[ "$r0" = "$want" ] && [ "$r1" = "$want" ] && [ "$lim" = $((own - want)) ] && [ "$lim0" = "$lim" ] &&
  [ "$r2" = 0 ] && [ "$r3" = 0 ] && [ "$r4" = 0 ] && [ "$dlim" = "$own" ] && [ "$r5" = 0 ] && ok ||
  bad "cuDNN's reservation: auto $r0 (limit $lim0), cudnn $r1 (want $want; limit $lim of $own), auto with cudnn off $r2, own $r3, documents: cudnn $r4 (limit $dlim), auto $r5"
plan --device cuda --device-memory-mib 81559 --attention cudnn
if [ "$want" != 0 ]; then
  last | grep -q "reserved (CUDA context, cuBLAS workspace, scratch: 5% + 512 MiB) + 289.8 MiB kept for cuDNN's attention (--attention) = " && ok ||
    { bad "the verdict's cuDNN term"; last; }
else
  last | grep -q "cuDNN" && { bad "a verdict without cuDNN names it"; last; } || ok
fi
plan --attention fast && bad "--attention fast" || { grep -q "attention: 'fast' is not one of auto, cudnn" "$tmp/err" && ok || { bad "its message"; cat "$tmp/err"; }; }
finish
