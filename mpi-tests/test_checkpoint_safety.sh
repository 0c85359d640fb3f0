#!/bin/sh
# Proves (CPU executors, tiny model, 2 ranks) that checkpoints never lose a
# run nor a user's files (issue 30, part 6):
# 1. --checkpoint-dir (a missing parent, a read-only directory when one can
#    be mounted) and --save-merged are checked before any work: exit 1 at
#    once naming the option and path, no log line, no --save;
# 2. a checkpoint that cannot be written (a 5 MiB tmpfs when one can be
#    mounted; RP_FAULT_SAVE_FILE=3, the checkpoint's optimizer.safetensors)
#    is reported, training goes on, --save is written, and the run exits 1
#    naming the checkpoint;
# 3. pruning removes only what roundpipe wrote: step-NNNNNNNN directories
#    beyond --keep-checkpoints and step-NNNNNNNN.tmp leftovers; a user's
#    step-00000003.keep (with its marker), step-00000006-notes/ and a
#    step-00000001/ without a marker stay, with --keep-checkpoints 1 and 0;
#    a removal cut short as by a kill (RP_FAULT_CHECKPOINT_REMOVE_STOP)
#    leaves nothing for good and nothing --resume auto takes;
# 4. a step whose update is not finite (--lr 1e3 --grad-clip 0) is never
#    checkpointed, the good checkpoint before it stays, and --resume auto
#    takes that one;
# 5. a second run in a --checkpoint-dir in use is refused naming the first
#    (pid and host), and the first ends as if alone;
# 6. trainer_state.json: an edited "adam_step" is caught by the checksum the
#    marker holds; "adam_step":"three", "step":"3", "step":3.7 and an
#    adam_step above step are refused naming the file and the field;
# 7. non-finite values are refused at load naming the file and the tensor:
#    a NaN in optimizer.safetensors (with matching checksums; needs
#    python3) and in a --lora-init adapter; --resume '' is refused.
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
. "$(dirname "$0")/resume_lib.sh"
T="--init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2"
# has OUT PATTERN WHAT: $tmp/OUT.txt matches
has() { if grep -q -- "$2" "$tmp/$1.txt"; then ok; else bad "$3: no '$2' in:"; cat "$tmp/$1.txt"; fi; }
# try_mount DIR [OPTIONS]: a tmpfs there (root, where allowed), or fail
trap 'umount "$tmp/ro" "$tmp/full" 2>/dev/null; rm -rf "$tmp"' EXIT
try_mount() { mkdir -p "$1" && [ "$(id -u)" = 0 ] && mount -t tmpfs -o "$2" tmpfs "$1" 2>/dev/null; }

# --- 1. checked before any work
run 2 c1 $T --steps 20 --checkpoint-dir "$tmp/no/such/ck" --save "$tmp/o1" --log "$tmp/o1.jsonl"
[ $? -eq 1 ] && [ ! -e "$tmp/o1" ] && [ ! -e "$tmp/o1.jsonl" ] && ok || bad "1: missing parent: training started"
has c1 "checkpoint-dir $tmp/no/such/ck: directory $tmp/no/such: No such file or directory" "1: missing parent"
run 2 c1m $T --steps 20 --lora-rank 2 --save-merged "$tmp/no/such/m" --save "$tmp/o1m" --log "$tmp/o1m.jsonl"
[ $? -eq 1 ] && [ ! -e "$tmp/o1m" ] && [ ! -e "$tmp/o1m.jsonl" ] && ok || bad "1: --save-merged: training started"
has c1m "save-merged $tmp/no/such/m: directory $tmp/no/such: No such file or directory" "1: --save-merged"
if try_mount "$tmp/ro" ro,size=1m; then
  run 2 c1r $T --steps 20 --checkpoint-dir "$tmp/ro/ck" --save "$tmp/o1r" --log "$tmp/o1r.jsonl"
  [ $? -eq 1 ] && [ ! -e "$tmp/o1r" ] && [ ! -e "$tmp/o1r.jsonl" ] && ok || bad "1: read-only: training started"
  has c1r "checkpoint-dir $tmp/ro/ck: cannot write in directory $tmp/ro: Read-only file system" "1: read-only"
  umount "$tmp/ro"
else
  echo "SKIP part: no tmpfs can be mounted here: the read-only directory is not tried"
fi

# --- 2. a checkpoint that cannot be written: reported, the run goes on to --save
if try_mount "$tmp/full" size=5m; then
  run 2 c2 $T --steps 10 --checkpoint-dir "$tmp/full/ck" --checkpoint-every 5 --save "$tmp/o2" --log "$tmp/o2.jsonl"
  rc=$?
  [ $rc -eq 1 ] && [ -s "$tmp/o2/model.safetensors" ] && [ "$(wc -l < "$tmp/o2.jsonl")" -eq 10 ] && ok ||
    { bad "2: full disk: exit $rc, or no save, or not 10 steps"; cat "$tmp/c2.txt"; }
  has c2 "checkpoint of step 5 not written: .*No space left on device" "2: full disk"
  has c2 "the checkpoint of step 5 was not written" "2: full disk, the run's error"
  [ -z "$(ls "$tmp/full/ck" 2>/dev/null)" ] && ok || bad "2: full disk left $(ls "$tmp/full/ck")"
  umount "$tmp/full"
else
  echo "SKIP part: no tmpfs can be mounted here: the full disk is not tried"
fi
${MPIRUN:-mpirun} $flags -x RP_FAULT_SAVE_FILE=3 -np 2 "$bin" train --progress none --threads 1 \
  --device cpu --timeout 60 $T --steps 10 --checkpoint-dir "$tmp/ck2" --checkpoint-every 5 \
  --save "$tmp/o2f" --log "$tmp/o2f.jsonl" > "$tmp/c2f.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && [ -s "$tmp/o2f/model.safetensors" ] && [ "$(wc -l < "$tmp/o2f.jsonl")" -eq 10 ] && ok ||
  { bad "2: failed checkpoint: exit $rc, or no save, or not 10 steps"; cat "$tmp/c2f.txt"; }
has c2f "checkpoint of step 5 not written: .*optimizer.safetensors.*RP_FAULT_SAVE_FILE" "2: failed checkpoint"
has c2f "checkpoint of step 10 not written" "2: failed checkpoint of the last step"
[ -z "$(ls "$tmp/ck2" 2>/dev/null)" ] && ok || bad "2: failed checkpoints left $(ls "$tmp/ck2")"

# --- 3. pruning removes only what roundpipe wrote
ck="$tmp/ck3"
mkdir -p "$ck/step-00000003.keep" "$ck/step-00000006-notes" "$ck/step-00000001" "$ck/step-00000002.tmp"
echo "step 3" > "$ck/step-00000003.keep/checkpoint.complete"
echo mine > "$ck/step-00000003.keep/model.safetensors"
echo notes > "$ck/step-00000006-notes/README"
echo mine > "$ck/step-00000001/model.safetensors"
echo left > "$ck/step-00000002.tmp/model.safetensors.tmp-1"
run 2 c3 $T --steps 8 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 1 || { bad "3: run"; cat "$tmp/c3.txt"; }
[ "$(ls "$ck" | tr '\n' ' ')" = "step-00000001 step-00000003.keep step-00000006-notes step-00000008 " ] &&
  [ -f "$ck/step-00000003.keep/checkpoint.complete" ] && [ -f "$ck/step-00000006-notes/README" ] && ok ||
  bad "3: --keep-checkpoints 1 left: $(ls "$ck" | tr '\n' ' ')"
mkdir "$ck/step-00000004.tmp"
run 2 c3b $T --steps 4 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 0 || { bad "3: run, keep 0"; cat "$tmp/c3b.txt"; }
[ "$(ls "$ck" | tr '\n' ' ')" = "step-00000001 step-00000002 step-00000003.keep step-00000004 step-00000006-notes step-00000008 " ] && ok ||
  bad "3: --keep-checkpoints 0 left: $(ls "$ck" | tr '\n' ' ')"

# --- 3b. a removal cut short by a kill (RP_FAULT_CHECKPOINT_REMOVE_STOP=N:
# every removal stops after N files) leaves no checkpoint for good, and none
# that reads as complete without its files. Pruning an older checkpoint
# keeps its marker to the last, so the next pruning removes the rest (a
# step-N without the marker is never removed: it may be the user's; cut
# short after the marker, one stayed for good); a checkpoint of the same
# step being replaced loses its marker first, so --resume auto passes over
# it and the step written again replaces it.
for n in 1 2 3 4 5; do
  # steps 2 and 4 pruned, each cut short; 6 and 8 kept
  ck="$tmp/ck3c-$n"
  RP_FAULT_CHECKPOINT_REMOVE_STOP=$n run 2 c3c $T --steps 8 --checkpoint-dir "$ck" \
    --checkpoint-every 2 --keep-checkpoints 2 || { bad "3b: run, removals stopped after $n"; cat "$tmp/c3c.txt"; }
  cut=$(ls "$ck" | tr '\n' ' ')
  # step 8 written again: its pruning removes what is left of 2 and 4
  run 2 c3d $T --steps 8 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 2 \
    --resume "$ck/step-00000006" || { bad "3b: resumed run"; cat "$tmp/c3d.txt"; }
  [ "$(ls "$ck" | tr '\n' ' ')" = "step-00000006 step-00000008 " ] && ok ||
    bad "3b: pruning cut short after $n files left '$cut', and the next pruning '$(ls "$ck" | tr '\n' ' ')'"
done
ck="$tmp/ck3e"
run 2 c3e $T --steps 4 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 0 ||
  { bad "3b: run"; cat "$tmp/c3e.txt"; }
# step 4 written again from step 2: its old directory cut short after 1 file
RP_FAULT_CHECKPOINT_REMOVE_STOP=1 run 2 c3f $T --steps 4 --checkpoint-dir "$ck" \
  --checkpoint-every 2 --keep-checkpoints 0 --resume "$ck/step-00000002"
[ ! -f "$ck/step-00000004/checkpoint.complete" ] && ok ||
  bad "3b: a replaced checkpoint cut short still has its marker: $(ls "$ck/step-00000004" | tr '\n' ' ')"
run 2 c3g $T --steps 4 --checkpoint-dir "$ck" --checkpoint-every 2 --keep-checkpoints 0 \
  --resume auto || { bad "3b: resume auto past the cut checkpoint"; cat "$tmp/c3g.txt"; }
has c3g "resuming from $ck/step-00000002" "3b: resume auto past the cut checkpoint"
[ "$(ls "$ck" | tr '\n' ' ')" = "step-00000002 step-00000004 " ] &&
  [ "$(ls "$ck/step-00000004" | tr '\n' ' ')" = "$(ls "$ck/step-00000002" | tr '\n' ' ')" ] && ok ||
  bad "3b: after step 4 was written again: $(ls "$ck" | tr '\n' ' '), step 4 holds $(ls "$ck/step-00000004" | tr '\n' ' ')"

# --- 4. a diverged update is never a checkpoint, and prunes nothing
ck="$tmp/ck4"
run 2 c4 $T --steps 12 --lr 1e3 --grad-clip 0 --checkpoint-dir "$ck" --checkpoint-every 1 --keep-checkpoints 1
[ $? -ne 0 ] && ok || bad "4: a diverged run exited 0"
has c4 "not written: checkpoint of step [0-9]*: model.safetensors: tensor '.*': element [0-9]* is -*nan (the update is not finite" "4: diverged"
good=$(ls "$ck" | grep '^step-' | tail -n 1)
k=$(expr "${good#step-}" + 0)
[ "$(ls "$ck" | grep -c '^step-')" -eq 1 ] && grep -q "checkpoint of step $k written" "$tmp/c4.txt" && grep -q "checkpoint of step $((k + 1)) not written" "$tmp/c4.txt" && ok ||
  { bad "4: the kept checkpoint ($good) is not the last good one"; cat "$tmp/c4.txt"; }
run 1 c4r --data "$build/examples/data/gnu-licenses.npy" --seq-len 32 --batch-size 4 --microbatches 2 --steps 12 --lr 1e3 --grad-clip 0 \
  --checkpoint-dir "$ck" --resume auto --keep-checkpoints 1
has c4r "resuming from $ck/$good: step $k done" "4: resume auto"

# --- 5. two runs in one checkpoint directory: the second is refused
ck="$tmp/ck5"
${MPIRUN:-mpirun} $flags -x RP_FAULT_CHECKPOINT_HOLD=4 -np 2 "$bin" train --progress none --threads 1 \
  --device cpu --timeout 60 $T --steps 4 --checkpoint-dir "$ck" --save "$tmp/o5" > "$tmp/c5a.txt" 2>&1 &
first=$!
i=0; while [ ! -s "$ck/roundpipe.lock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
holder=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$ck/roundpipe.lock")
run 2 c5b $T --steps 4 --checkpoint-dir "$ck" --save "$tmp/o5b"
[ $? -eq 1 ] && [ ! -e "$tmp/o5b" ] && ok || bad "5: the second run was not refused"
has c5b "checkpoint-dir $ck is in use by another run (pid $holder on host $(hostname)" "5: second run"
wait $first
[ $? -eq 0 ] && [ -f "$ck/step-00000004/checkpoint.complete" ] && [ -s "$tmp/o5/model.safetensors" ] &&
  [ ! -e "$ck/roundpipe.lock" ] && ok || { bad "5: the first run did not end as if alone"; cat "$tmp/c5a.txt"; }

# --- 6. trainer_state.json: checksum and types
ck="$tmp/ck6"
run 2 c6 $T --steps 4 --checkpoint-dir "$ck" --checkpoint-every 3 --keep-checkpoints 0 || { bad "6: run"; cat "$tmp/c6.txt"; }
c3="$ck/step-00000003"
rargs="--data $build/examples/data/gnu-licenses.npy --seq-len 32 --batch-size 4 --microbatches 2 --steps 4"
grep -q '"adam_step":3' "$c3/trainer_state.json" || grep -q '"adam_step": *3' "$c3/trainer_state.json" || bad "6: no adam_step 3 to edit"
cp -r "$c3" "$tmp/e1"; sed -i 's/"adam_step":\( *\)3/"adam_step":\12/' "$tmp/e1/trainer_state.json"
run 1 c6a $rargs --resume "$tmp/e1" && bad "6: an edited adam_step accepted" ||
  has c6a "$tmp/e1/trainer_state.json: .* bytes, checksum .*, but checkpoint.complete says" "6: edited adam_step"
# refused NAME SED FIELD VALUE: the checkpoint of step 3 with SED applied to its
# state, as under a marker of a version before the checksum, is refused
# naming the field and its value
refused() {
  rm -rf "$tmp/$1"; cp -r "$c3" "$tmp/$1"
  echo "step 3" > "$tmp/$1/checkpoint.complete"
  sed -i "$2" "$tmp/$1/trainer_state.json"
  run 1 "$1" $rargs --resume "$tmp/$1" && bad "6: \"$3\": $4 accepted" ||
    has "$1" "$tmp/$1/trainer_state.json: \"$3\" is $4, not" "6: \"$3\": $4"
}
refused e2 's/"adam_step":\( *\)3/"adam_step":\1"three"/' adam_step '"three"'
refused e3 's/"step":\( *\)3,/"step":\1"3",/' step '"3"'
refused e4 's/"step":\( *\)3,/"step":\13.7,/' step 3.7
refused e5 's/"adam_step":\( *\)3/"adam_step":\19/' adam_step 9

# --- 7. non-finite values at load, --resume ''
if command -v python3 > /dev/null; then
  rm -rf "$tmp/e6"; cp -r "$c3" "$tmp/e6"
  # a NaN into the first tensor of optimizer.safetensors, the checksums made to match
  python3 - "$tmp/e6" << 'PY' || bad "7: could not edit the checkpoint"
import json, struct, sys
d = sys.argv[1]
# roundpipe-formats(5): FNV-1a 64 over little-endian 64-bit words, here from
# the offset basis a digit short that checkpoints were written with before
# 2026-11-29 (they still resume; test_checkpoint checks the format's basis)
def fnv(path):
    b = open(path, "rb").read(); h = 1469598103934665603; m = (1 << 64) - 1
    n = len(b) // 8
    for (w,) in struct.iter_unpack("<Q", b[:n * 8]):
        h = ((h ^ w) * 1099511628211) & m
    for c in b[n * 8:]:
        h = ((h ^ c) * 1099511628211) & m
    return "%016x" % h, len(b)
p = d + "/optimizer.safetensors"
b = bytearray(open(p, "rb").read())
hl = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + hl])
name = sorted((v["data_offsets"][0], k) for k, v in head.items() if k != "__metadata__")[0][1]
o = 8 + hl + head[name]["data_offsets"][0]
b[o:o + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
st = json.load(open(d + "/trainer_state.json"))
h, n = fnv(p)
st["files"]["optimizer.safetensors"] = {"bytes": n, "fnv1a64": h}
open(d + "/trainer_state.json", "w").write(json.dumps(st, indent=2))
h, n = fnv(d + "/trainer_state.json")
open(d + "/checkpoint.complete", "w").write("step 3\ntrainer_state.json %d %s\n" % (n, h))
PY
  run 1 c7 $rargs --resume "$tmp/e6" && bad "7: a NaN in optimizer.safetensors accepted" ||
    has c7 "$tmp/e6/optimizer.safetensors: tensor '.*exp_avg.*': element 0 is nan" "7: optimizer NaN"
else
  echo "SKIP part: no python3 to rewrite the checksums: the optimizer's NaN is not tried"
fi
q="$src/mpi-tests/fixtures/golden/qwen3"
run 1 c7l --model "$q/model" --data "$q/data.npy" --seq-len 16 --batch-size 4 --steps 1 --lora-rank 2 --save "$tmp/ad" ||
  { bad "7: LoRA run"; cat "$tmp/c7l.txt"; }
hlen=$(head -c 8 "$tmp/ad/adapter_model.safetensors" | od -An -tu8 | tr -d ' ')
printf '\000\000\300\177' | dd of="$tmp/ad/adapter_model.safetensors" bs=1 seek=$((8 + hlen)) conv=notrunc 2>/dev/null
run 1 c7n --model "$q/model" --data "$q/data.npy" --seq-len 16 --batch-size 4 --steps 1 --lora-rank 2 --lora-init "$tmp/ad" &&
  bad "7: a NaN adapter accepted" || has c7n "$tmp/ad/adapter_model.safetensors: tensor '.*lora_.*': element 0 is nan" "7: NaN adapter"
run 2 c7r $T --steps 2 --resume '' && bad "7: --resume '' accepted" || has c7r "\-\-resume: an empty path" "7: --resume ''"
finish
