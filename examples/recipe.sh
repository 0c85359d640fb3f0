#!/bin/sh
# The README's "Your own data" recipe, end to end and offline, on a model
# small enough for a laptop:
#   1. a model directory: a BPE tokenizer trained here on the bundled GNU
#      licences (tokenizers library, with a chat template) and a random
#      Qwen3 of 2 blocks with its vocabulary (transformers);
#   2. a chat JSONL: each licence paragraph as the assistant's answer to a
#      question naming it;
#   3. roundpipe-prepare: tokens, mask (answers only), documents, packed
#      rows of 128 tokens, 10% held out;
#   4. roundpipe train on 2 ranks with --documents and the held-out set as
#      --eval-data, saving the model with its tokenizer;
#   5. roundpipe-plot: the curves (training and validation loss);
#   6. transformers loads the saved directory (AutoTokenizer and
#      AutoModelForCausalLM) and answers a question.
# Needs python3 with numpy, tokenizers, transformers, torch and matplotlib.
#   examples/recipe.sh [OUT_DIR]   (default recipe-out; BUILD=build)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
out=${1:-recipe-out}
mkdir -p "$out"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
flags="--oversubscribe"; [ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"

echo "== 1-2. a tokenizer, a tiny model and a chat JSONL from $top/examples/data/gnu-licenses.txt"
python3 - "$top/examples/data/gnu-licenses.txt" "$out" << 'PY'
import json, re, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
import torch
text, out = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
paras = [p for p in paras if 40 <= len(p) <= 600]
special = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(paras, trainers.BpeTrainer(vocab_size=2048, special_tokens=special,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                               eos_token="<|im_end|>")
fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                      "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                      "{% endif %}")
cfg = Qwen3Config(vocab_size=len(fast), hidden_size=128, intermediate_size=384,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  max_position_embeddings=512, tie_word_embeddings=True,
                  eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
torch.manual_seed(0)
Qwen3ForCausalLM(cfg).save_pretrained(out + "/model")
fast.save_pretrained(out + "/model")
with open(out + "/chats.jsonl", "w") as f:
    for i, p in enumerate(paras):
        q = "What does paragraph %d of the licences say?" % (i + 1)
        f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                         {"role": "assistant", "content": p}]}) + "\n")
print("%d conversations; vocabulary %d; model %.2fM parameters"
      % (len(paras), len(fast), sum(t.numel() for t in Qwen3ForCausalLM(cfg).parameters()) / 1e6))
PY

echo "== 3. roundpipe-prepare"
"$top/scripts/roundpipe-prepare" --tokenizer "$out/model" --input "$out/chats.jsonl" \
  --out "$out/data" --pack 128 --eval-fraction 0.1

echo "== 4. roundpipe train"
mpirun $flags -np 2 "$build/src/roundpipe" train --model "$out/model" --device cpu \
  --data "$out/data/tokens.npy" --loss-mask "$out/data/mask.npy" \
  --documents "$out/data/documents.npy" --seq-len 128 --shuffle \
  --eval-data "$out/data/eval_tokens.npy" --eval-mask "$out/data/eval_mask.npy" \
  --eval-documents "$out/data/eval_documents.npy" --eval-every 25 \
  --batch-size 16 --microbatches 4 --steps 150 --lr 3e-3 --min-lr 3e-4 --warmup-steps 10 \
  --progress line --log "$out/metrics.jsonl" --save "$out/trained"

echo "== 5. roundpipe-plot"
"$top/scripts/roundpipe-plot" "$out/metrics.jsonl" -o "$out/curves.png"

echo "== 6. transformers loads the saved model"
python3 - "$out/trained" << 'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True, dtype=torch.float32)
msgs = [{"role": "user", "content": "What does paragraph 3 of the licences say?"}]
ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt")
ids = ids["input_ids"] if hasattr(ids, "keys") else ids
out = model.generate(ids, max_new_tokens=24, do_sample=False)
print("%s from %s; answer: %r" % (type(model).__name__, d,
                                   tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)))
PY
echo "recipe done: $out/metrics.jsonl, $out/curves.png, $out/trained"
