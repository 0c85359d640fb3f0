#!/usr/bin/env bash
# activation-placement.sh: does --activation-numa reader pay? On a machine
# with several NUMA nodes (a two-socket GPU server), train the same run with
# the activation buffers interleaved over the nodes (the default) and bound
# to their readers' node, alternating A B A B ... so drift hits both, and
# print each round's tokens/s ratio reader / interleave and their median.
# tokens/s excludes the first 2 steps: sum(tokens) / sum(tokens / tokens_per_s)
# over the later steps of the --log metrics.
#
#   bash bench/numa/activation-placement.sh ROUNDPIPE [ROUNDS] -- TRAIN OPTIONS...
#
# e.g. on 8 GPUs:
#   bash bench/numa/activation-placement.sh build/src/roundpipe 5 -- \
#     --init-config bench/gpu/qwen3-1.7b-config.json --data DATA.npy \
#     --seq-len 4096 --batch-size 16 --microbatches 16 --steps 12 --device cuda
# MPIRUN (default "mpirun -np 8") launches it. The run's log says how many
# MiB were bound and how many stay interleaved (read from several nodes): a
# plan whose job count is not a multiple of its width binds little, and the
# ratio then says nothing about placement.
set -u
[ $# -ge 3 ] || { sed -n '2,19p' "$0"; exit 2; }
bin=$1; rounds=${2:-5}
shift 2; [ "${1:-}" = -- ] && shift
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
[ "$(lscpu 2>/dev/null | awk -F: '/^NUMA node\(s\)/ { print $2 + 0 }')" -gt 1 ] 2>/dev/null ||
    echo "note: this machine has one NUMA node: the two placements are the same here" >&2
tps() { # LOG -> tokens/s after step 2
    awk '{ step = tok = t = ""
           if (match($0, /"step":[0-9]+/)) step = substr($0, RSTART + 7, RLENGTH - 7) + 0
           if (match($0, /"tokens":[0-9]+/)) tok = substr($0, RSTART + 9, RLENGTH - 9) + 0
           if (match($0, /"tokens_per_s":[0-9.eE+-]+/)) t = substr($0, RSTART + 15, RLENGTH - 15) + 0
           if (step > 2 && t > 0) { T += tok; s += tok / t } }
         END { if (s > 0) printf "%.1f\n", T / s; else print "NA" }' "$1"
}
ratios=""
for r in $(seq 1 "$rounds"); do
    for p in interleave reader; do
        # shellcheck disable=SC2086
        ${MPIRUN:-mpirun -np 8} "$bin" train "$@" --activation-numa "$p" --progress none \
            --log "$work/$p-$r.log" > "$work/$p-$r.out" 2>&1 ||
            { echo "round $r, $p failed:" >&2; tail -n 20 "$work/$p-$r.out" >&2; exit 1; }
    done
    [ "$r" = 1 ] && grep "activation buffers on their readers" "$work/reader-1.out"
    a=$(tps "$work/interleave-$r.log"); b=$(tps "$work/reader-$r.log")
    q=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0 && b > 0) printf "%.4f", b / a; else print "NA" }')
    echo "round $r: interleave $a tokens/s, reader $b tokens/s, reader / interleave $q"
    ratios="$ratios $q"
done
echo "$ratios" | tr ' ' '\n' | grep -v '^$' | grep -v NA | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "median reader / interleave: %.4f (range %.4f-%.4f, %d rounds)\n", v[int((NR + 1) / 2)], v[1], v[NR], NR }'
