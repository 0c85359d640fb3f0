#!/bin/sh
# Host memory of LoRA against the base it trains on (issue 13): a random
# Qwen3-shaped model in bf16 (bench/lora/make_model.py, default ~1.07B
# parameters), 2 optimizer steps on 2 CPU ranks, measured while it runs:
#   - every rank's private resident memory (RssAnon of /proc/PID/status,
#     sampled every 0.1 s; the peak of the sum over ranks),
#   - the host store's resident bytes (the ranks' Pss of its
#     /dev/shm/roundpipe-* mappings, summed: each resident page once; the
#     peak; Open MPI's own shared-memory segments are not counted),
#   - the mapped base's resident bytes (fincore on model.safetensors, after
#     the run: pages read stay in the page cache).
# Total = the three; the report gives it as a ratio of the base's bytes.
# Mapped file pages and the store's shared pages are counted once, not once
# per rank that maps them (RssFile and RssShmem are left out of the ranks').
#
# usage: bench/lora/memory.sh BUILD_DIR [MODEL_DIR] [-- extra train options]
#   MODEL_DIR is made with make_model.py when it has no model.safetensors.
#   MODE=full measures full fine-tuning instead (it needs about 20 bytes a
#   parameter: use a smaller model, e.g. make_model.py --layers 4).
set -eu
build=${1:?usage: memory.sh BUILD_DIR [MODEL_DIR] [-- train options]}
shift
model=${1:-/tmp/roundpipe-lora-1b}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/src/roundpipe"
mode=${MODE:-lora}
if [ ! -f "$model/model.safetensors" ]; then
  command -v python3 > /dev/null || { echo "memory.sh: needs python3 with numpy to make $model"; exit 77; }
  python3 "$here/make_model.py" "$model"
fi
base_bytes=$(python3 -c "import struct,json,sys
f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n))
print(sum(v['data_offsets'][1]-v['data_offsets'][0] for k,v in h.items() if k!='__metadata__'))" \
  "$model/model.safetensors")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
lora=""
[ "$mode" = lora ] && lora="--lora-rank 8"
# drop the base's pages from the page cache so the resident count is this run's
python3 -c "import os,sys
fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" \
  "$model/model.safetensors" 2>/dev/null || true
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# shellcheck disable=SC2086
${MPIRUN:-mpirun} --oversubscribe -np 2 "$bin" train --device cpu --threads 1 --progress none \
  --model "$model" --data "$model/tokens.npy" --seq-len 64 --batch-size 2 --microbatches 2 \
  --steps 2 --lr 1e-4 $lora --log "$out/log.jsonl" "$@" > "$out/run.txt" 2>&1 &
runner=$!
peak_anon=0 peak_store=0
while kill -0 $runner 2> /dev/null; do
  anon=0 store=0
  for pid in $(pgrep -f "^$bin train" || true); do
    kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2> /dev/null || echo 0)
    anon=$((anon + ${kb:-0}))
    # the store's regions (/dev/shm/roundpipe-*, unlinked once every rank has
    # them): the ranks' proportional shares of their resident pages add up
    # to the pages resident, each counted once
    kb=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {s = ($6 ~ /^\/dev\/shm\/roundpipe-/)}
              /^Pss:/ && s {t += $2} END {print t + 0}' "/proc/$pid/smaps" 2> /dev/null)
    store=$((store + ${kb:-0}))
  done
  [ "$anon" -gt "$peak_anon" ] && peak_anon=$anon
  [ "$store" -gt "$peak_store" ] && peak_store=$store
  sleep 0.1
done
wait $runner || { cat "$out/run.txt"; echo "memory.sh: the run failed"; exit 1; }
mapped=$(fincore --bytes --noheadings --output RES "$model/model.safetensors" | tr -d ' ')
grep "host memory" "$out/run.txt" || true
awk -v anon="$peak_anon" -v store="$peak_store" -v mapped="$mapped" -v base="$base_bytes" \
    -v mode="$mode" 'BEGIN {
  a = anon * 1024; s = store * 1024; t = a + s + mapped
  printf "%s, 2 CPU ranks, 2 steps: base %.3f GiB (bf16)\n", mode, base / 2^30
  printf "  ranks (peak RssAnon, summed)  %8.3f GiB\n", a / 2^30
  printf "  host store (/dev/shm, peak)   %8.3f GiB\n", s / 2^30
  printf "  mapped base (page cache)      %8.3f GiB\n", mapped / 2^30
  printf "  total                         %8.3f GiB = %.3f x the base\n", t / 2^30, t / base
}'
