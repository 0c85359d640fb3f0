#!/bin/sh
# Proves: --save copies the tokenizer and generation files found beside
# --model (byte for byte, and nothing else of that directory), so the saved
# directory loads with AutoTokenizer as well as AutoModelForCausalLM (when
# Python with transformers is here: a word-level tokenizer built offline
# with the tokenizers library, no download); saving over the model's own
# directory keeps them; a save that fails while copying them leaves the
# previous save untouched (all or nothing); --init-config runs copy nothing.
# Ranks: 2 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
export OMP_NUM_THREADS=1
gold="$src/mpi-tests/fixtures/golden/llama"
model="$tmp/model"
mkdir -p "$model"
cp "$gold"/model/* "$model/"
# a tokenizer over the fixture's vocabulary, saved as transformers does (the
# script's imports, some seconds, are the availability check too: exit 77)
python3 - "$model" << 'PY'
import json, sys
try:
    import transformers, tokenizers
except ImportError:
    sys.exit(77)
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, GenerationConfig
d = sys.argv[1]
vocab = json.load(open(d + "/config.json"))["vocab_size"]
tok = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(vocab)}, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w1")
fast.save_pretrained(d)
GenerationConfig(max_new_tokens=5).save_pretrained(d)
PY
case $? in
  0) have_py=1 ;;
  77|127) have_py=0
     echo "SKIP part: python3 with transformers and tokenizers not found; plain companion files instead" ;;
  *) have_py=0; bad "could not build the test tokenizer" ;;
esac
[ -f "$model/tokenizer.json" ] || echo '{"version": "1.0"}' > "$model/tokenizer.json"
[ -f "$model/generation_config.json" ] || echo '{"max_new_tokens": 5}' > "$model/generation_config.json"
echo "not a companion" > "$model/notes.txt"
train() { # out [more options]
  out=$1; shift
  ${MPIRUN:-mpirun} $flags -np 2 "$bin" train --data "$gold/data.npy" --seq-len 16 \
    --batch-size 4 --microbatches 4 --steps 2 --device cpu --threads 1 --progress none \
    --save "$out" "$@" > "$tmp/train.txt" 2>&1
}
train "$tmp/out" --model "$model" || { bad "train --model failed"; cat "$tmp/train.txt"; }
n=0
for f in "$model"/*; do
  b=$(basename "$f")
  case $b in
    config.json|model.safetensors|notes.txt) continue ;;
  esac
  n=$((n + 1))
  cmp -s "$f" "$tmp/out/$b" && ok || bad "$b was not copied as it is"
done
[ "$n" -ge 2 ] && ok || bad "only $n companion files to copy"
[ ! -e "$tmp/out/notes.txt" ] && ok || bad "an unrelated file was copied"
grep -q "with the model's tokenizer and generation files" "$tmp/train.txt" && ok ||
  bad "the save line does not say the tokenizer went with it"
if [ "$have_py" = 1 ]; then
  python3 - "$tmp/out" << 'PY' && ok || bad "the saved directory does not load in transformers"
import sys
from transformers import AutoTokenizer, AutoModelForCausalLM, GenerationConfig
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
ids = tok("w5 w7 w9")["input_ids"]
assert ids == [5, 7, 9], ids
assert GenerationConfig.from_pretrained(d).max_new_tokens == 5
try:
    import torch  # noqa: F401  (transformers loads models only with it)
except ImportError:
    print("SKIP part: python3 without torch: the model itself is not loaded in transformers")
else:
    AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
PY
fi
# saving over the model's own directory keeps them
cp -r "$model" "$tmp/self"
train "$tmp/self" --model "$tmp/self" || { bad "saving over --model failed"; cat "$tmp/train.txt"; }
cmp -s "$model/tokenizer.json" "$tmp/self/tokenizer.json" && ok || bad "save over --model lost tokenizer.json"
# a failure while copying them (the 3rd member: after the weights and config.json) leaves the old save
cp "$tmp/out/model.safetensors" "$tmp/before.safetensors"
if RP_FAULT_SAVE_FILE=3 train "$tmp/out" --model "$model" --seed 99; then
  bad "a save that failed on a companion file reported success"
else cmp -s "$tmp/before.safetensors" "$tmp/out/model.safetensors" && ok ||
  bad "a failed save changed the previous model"; fi
# --init-config: nothing to copy, and the line says nothing of it
train "$tmp/init" --init-config "$model/config.json" || bad "train --init-config failed"
[ ! -e "$tmp/init/tokenizer.json" ] && ! grep -q "tokenizer" "$tmp/train.txt" && ok ||
  bad "--init-config run copied or mentioned a tokenizer"
finish
