#!/usr/bin/env bash
# bench_train_peer.sh: training throughput of roundpipe's CPU executors against
# a plain PyTorch eager loop (bench/torch_train_peer.py) on the same cores,
# and optionally against a second roundpipe build, interleaved round by round.
#
# Both sides train the same model (default: bench/qwen3-25m-config.json,
# 25,306,624 parameters) from random weights, on the bytes of
# examples/data/gnu-licenses.txt, sequence 256, batch 8, the same number of
# microbatches (PyTorch accumulates gradients over them), fp32, AdamW with
# gradient clipping, with R x N threads in all (roundpipe: mpirun -np R,
# --threads N per rank; PyTorch: torch.set_num_threads(R*N)).
#
# tokens/s, both sides, excludes start-up and the first --warmup steps:
#   roundpipe: from its --log metrics, sum(tokens) / sum(tokens / tokens_per_s)
#     over steps > W, i.e. B*S*(K-W) / (the logger's clock at step K minus at
#     step W; the logger stamps a step when its loss and gradient norm are in);
#   PyTorch: B*S*(K-W) / wall clock from the end of step W to the end of step K.
# Each round runs every peer once, in an order rotated by one each round so
# machine noise and drift hit all of them. At the end: the median and range of
# each peer's tokens/s, and the per-round ratios roundpipe/PyTorch and
# roundpipe/baseline (median and range over rounds).
#
# Without torch/transformers/numpy the PyTorch peer is skipped with a message
# (exit 0; with --require-torch exit 77, the automake "skipped" status).
set -u

top=$(cd "$(dirname "$0")/.." && pwd)

usage() {
    cat <<EOF
usage: $0 [options]
  --roundpipe PATH           roundpipe binary (default $top/build/src/roundpipe)
  --baseline-roundpipe PATH  a second roundpipe run in the same rounds (before/after)
  --ranks R                  MPI ranks (default 1)
  --threads N                threads per rank (default: cores / R, at least 1)
  --steps K                  steps per run, warm-up included (default 6)
  --warmup W                 first steps not timed (default 1, at least 1)
  --rounds N                 rounds (default 3)
  --config 25m|tiny|FILE     model: bench/qwen3-25m-config.json (default),
                             examples/tiny-config.json, or any config.json
  --seq-len S                (default 256)
  --batch-size B             (default 8)
  --microbatches M           (default 8, both peers)
  --data FILE.npy            tokens (default: the bytes of examples/data/gnu-licenses.txt)
  --torch-attn sdpa|eager    transformers attention in the PyTorch peer (default sdpa)
  --python PY                Python interpreter (default python3)
  --no-torch                 skip the PyTorch peer
  --require-torch            exit 77 when PyTorch is not available
  --keep DIR                 keep the logs in DIR (default: a temporary directory, removed)
EOF
}

rp="$top/build/src/roundpipe"
base=""
ranks=1
threads=""
steps=6
warmup=1
rounds=3
config=25m
seq=256
batch=8
micro=8
data=""
attn=sdpa
py=python3
use_torch=1
require_torch=0
keep=""

need() { [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; usage >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
    --roundpipe) need "$@"; rp=$2; shift 2 ;;
    --baseline-roundpipe) need "$@"; base=$2; shift 2 ;;
    --ranks) need "$@"; ranks=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --warmup) need "$@"; warmup=$2; shift 2 ;;
    --rounds) need "$@"; rounds=$2; shift 2 ;;
    --config) need "$@"; config=$2; shift 2 ;;
    --seq-len) need "$@"; seq=$2; shift 2 ;;
    --batch-size) need "$@"; batch=$2; shift 2 ;;
    --microbatches) need "$@"; micro=$2; shift 2 ;;
    --data) need "$@"; data=$2; shift 2 ;;
    --torch-attn) need "$@"; attn=$2; shift 2 ;;
    --python) need "$@"; py=$2; shift 2 ;;
    --no-torch) use_torch=0; shift ;;
    --require-torch) require_torch=1; shift ;;
    --keep) need "$@"; keep=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$0: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

isint() { case "$1" in ''|*[!0-9]*) return 1 ;; *) [ "$1" -ge "${2:-1}" ] ;; esac; }
for v in ranks:$ranks steps:$steps warmup:$warmup rounds:$rounds seq-len:$seq \
         batch-size:$batch microbatches:$micro; do
    isint "${v#*:}" || { echo "$0: --${v%%:*} must be a positive integer ('${v#*:}')" >&2; exit 2; }
done
[ "$warmup" -lt "$steps" ] || { echo "$0: --warmup must be below --steps" >&2; exit 2; }
[ $((batch % micro)) -eq 0 ] || { echo "$0: --microbatches must divide --batch-size" >&2; exit 2; }
cores=$(nproc 2>/dev/null || echo 1)
[ -n "$threads" ] || threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
isint "$threads" || { echo "$0: --threads must be a positive integer ('$threads')" >&2; exit 2; }
case "$config" in
25m) config="$top/bench/qwen3-25m-config.json" ;;
tiny) config="$top/examples/tiny-config.json" ;;
esac
[ -f "$config" ] || { echo "$0: no config file '$config'" >&2; exit 2; }
for b in "$rp" ${base:+"$base"}; do
    [ -x "$b" ] || { echo "$0: '$b' is not an executable (build first: sh tools/build.sh)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "$0: mpirun not found" >&2; exit 2; }

if [ -n "$keep" ]; then
    work=$keep
    mkdir -p "$work" || exit 2
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/rp-peer.XXXXXX") || exit 2
    trap 'rm -rf "$work"' EXIT
fi

if [ -z "$data" ]; then
    # Byte-level tokens (vocabulary 256) as uint16 .npy, as examples/bytes2npy writes them.
    data="$work/gnu-licenses.npy"
    if [ -f "$top/build/examples/data/gnu-licenses.npy" ]; then
        cp "$top/build/examples/data/gnu-licenses.npy" "$data"
    else
        "$py" - "$top/examples/data/gnu-licenses.txt" "$data" <<'EOF' || exit 2
import struct, sys
b = open(sys.argv[1], "rb").read()
h = "{'descr': '<u2', 'fortran_order': False, 'shape': (%d,), }" % len(b)
h += " " * (63 - (10 + len(h)) % 64) + "\n"
with open(sys.argv[2], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
    f.write(struct.pack("<%dH" % len(b), *b))
EOF
    fi
fi

torch_why=""
if [ "$use_torch" = 1 ]; then
    if ! torch_why=$("$py" -c 'import torch, transformers, numpy' 2>&1); then
        torch_why=$(printf '%s\n' "$torch_why" | tail -n 1)
        [ -n "$torch_why" ] || torch_why="$py not found"
        echo "PyTorch not available ($torch_why): skipping the PyTorch peer"
        [ "$require_torch" = 1 ] && exit 77
        use_torch=0
    else
        torch_why=""
    fi
fi

mpiflags="--oversubscribe"
[ "$(id -u)" = 0 ] && mpiflags="$mpiflags --allow-run-as-root"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
unset OMP_NUM_THREADS

# Common training options (roundpipe spelling; the PyTorch peer takes the same).
lr_opts="--lr 3e-4 --min-lr 3e-5 --warmup-steps 0 --weight-decay 0.01 --grad-clip 1.0 --seed 1234"

# The noise meter: how many cores the rest of the machine kept busy during a
# run, from /proc/stat's busy time less the run's own CPU time (user + sys of
# the processes it waited for, e.g. mpirun and its ranks), over the run's wall
# clock (start-up included).
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat 2>/dev/null || echo 0; }
# child_cpu: user + sys seconds of this (sub)shell's finished children
# (times must run in this shell, not in a pipe's subshell)
child_cpu() { times > "$work/.times-$BASHPID"
              awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); c += a[1] * 60 + a[2] } }
                   END { printf "%.2f\n", c }' "$work/.times-$BASHPID"
              rm -f "$work/.times-$BASHPID"; }

# run_rp NAME BINARY ROUND: prints tokens/s and the run's CPU seconds (or nothing on failure).
run_rp() {
    local log="$work/$1-r$3.jsonl" out="$work/$1-r$3.out"
    # shellcheck disable=SC2086
    if ! mpirun $mpiflags -np "$ranks" "$2" train --init-config "$config" --data "$data" \
            --seq-len "$seq" --batch-size "$batch" --microbatches "$micro" --steps "$steps" \
            --threads "$threads" --dtype fp32 $lr_opts --progress none --timeout 600 \
            --log "$log" > "$out" 2>&1; then
        echo "$1 failed in round $3; the last lines of $out:" >&2
        tail -n 20 "$out" >&2
        return 1
    fi
    awk -v w="$warmup" '
        { step = tok = tps = ""
          if (match($0, /"step":[0-9]+/)) step = substr($0, RSTART + 7, RLENGTH - 7) + 0
          if (match($0, /"tokens":[0-9]+/)) tok = substr($0, RSTART + 9, RLENGTH - 9) + 0
          if (match($0, /"tokens_per_s":[0-9.eE+-]+/)) tps = substr($0, RSTART + 15, RLENGTH - 15) + 0
          if (step > w && tps > 0) { T += tok; s += tok / tps } }
        END { if (s > 0) printf "%.1f\n", T / s }' "$log"
    child_cpu
}

run_torch() {
    local out="$work/pytorch-r$1.out"
    # shellcheck disable=SC2086
    if ! "$py" "$top/bench/torch_train_peer.py" --config "$config" --data "$data" \
            --seq-len "$seq" --batch-size "$batch" --microbatches "$micro" --steps "$steps" \
            --warmup "$warmup" --threads $((ranks * threads)) --attn "$attn" \
            $lr_opts > "$out" 2> "$work/pytorch-r$1.err"; then
        echo "pytorch failed in round $1; the last lines of $work/pytorch-r$1.err:" >&2
        tail -n 20 "$work/pytorch-r$1.err" >&2
        return 1
    fi
    "$py" -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["tokens_per_s"])' "$out"
    child_cpu
}

peers="roundpipe"
[ -n "$base" ] && peers="$peers baseline"
[ "$use_torch" = 1 ] && peers="$peers pytorch"
npeers=$(echo "$peers" | wc -w)

echo "model $(basename "$config"), seq $seq, batch $batch, microbatches $micro, fp32;" \
     "$steps steps, first $warmup not timed; $rounds rounds"
echo "roundpipe: mpirun -np $ranks x --threads $threads  ($rp)"
[ -n "$base" ] && echo "baseline:  mpirun -np $ranks x --threads $threads  ($base)"
[ "$use_torch" = 1 ] && echo "pytorch:   torch.set_num_threads($((ranks * threads))), attention $attn"
echo "machine: $cores cores; tokens/s (others: cores the rest of the machine kept busy meanwhile):"

declare -A res
fail=0
for r in $(seq 1 "$rounds"); do
    # rotate the order by one each round
    # shellcheck disable=SC2086
    set -- $peers
    order=""
    for i in $(seq 0 $((npeers - 1))); do
        j=$(( (i + r - 1) % npeers + 1 ))
        order="$order ${!j}"
    done
    line="round $r:"
    for p in $order; do
        b0=$(busy); w0=$(date +%s.%N)
        case "$p" in
        roundpipe) v=$(run_rp roundpipe "$rp" "$r") ;;
        baseline) v=$(run_rp baseline "$base" "$r") ;;
        pytorch) v=$(run_torch "$r") ;;
        esac
        b1=$(busy); w1=$(date +%s.%N)
        read -r v cpu <<< "${v//$'\n'/ }"
        other=$(awk -v b="$((b1 - b0))" -v hz="$hz" -v c="${cpu:-0}" -v w0="$w0" -v w1="$w1" \
                'BEGIN { o = (b / hz - c) / (w1 - w0); printf "%.1f", o < 0 ? 0 : o }')
        [ -n "$v" ] || { fail=1; v=NA; }
        res[$p,$r]=$v
        line="$line  $p $v (others $other)"
    done
    echo "$line"
done

# stats "v1 v2 ...": median min max
stats() {
    echo "$1" | tr ' ' '\n' | grep -v '^$' | grep -v NA | sort -g | awk '
        { a[NR] = $1 } END { if (NR == 0) { print "NA NA NA"; exit }
          m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
          printf "%.4g %.4g %.4g\n", m, a[1], a[NR] }'
}
echo "summary (median, range over rounds):"
for p in $peers; do
    vals=""
    for r in $(seq 1 "$rounds"); do vals="$vals ${res[$p,$r]}"; done
    read -r med lo hi <<< "$(stats "$vals")"
    printf '  %-10s %8s tokens/s  (%s .. %s)\n' "$p" "$med" "$lo" "$hi"
done
ratio() { # per-round ratios of peers $1/$2
    local vals="" r a b
    for r in $(seq 1 "$rounds"); do
        a=${res[$1,$r]}; b=${res[$2,$r]}
        [ "$a" != NA ] && [ "$b" != NA ] && vals="$vals $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", a / b }')"
    done
    read -r med lo hi <<< "$(stats "$vals")"
    printf '  %-20s %6s  (rounds: %s .. %s;%s)\n' "$1/$2" "$med" "$lo" "$hi" "$vals"
}
echo "ratios (median of the per-round ratios, range):"
[ "$use_torch" = 1 ] && ratio roundpipe pytorch
[ -n "$base" ] && ratio roundpipe baseline
[ -n "$torch_why" ] && echo "  roundpipe/pytorch: skipped, PyTorch not available ($torch_why)"
[ -n "$keep" ] && echo "logs in $work"
exit $fail
