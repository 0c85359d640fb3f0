#!/bin/sh
# Proves: roundpipe-prepare turns chat and text JSONL into token files that
# roundpipe train reads: with a word-level tokenizer and a chat template
# built here offline (tokenizers library, no download), the tokens are the
# rendered conversations and texts back to back (uint16), the mask is 1
# exactly on the assistant turns' tokens (as the test tokenizes them itself)
# and on text tokens, never on a document's first token; documents.npy
# holds each document's start; --pack S puts whole documents into rows of S
# tokens (the file is rows*S+1 long, sample i is row i, no document crosses
# a row, padding masked, documents split only when longer than S and the
# count printed); --eval-fraction holds out the last documents; bad lines
# (not JSON, neither text nor messages, a message without role) fail naming
# the file, the line and the field, writing nothing; train accepts the
# output. Skipped without python3, numpy and transformers.
# Ranks: 1 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
prep="$src/scripts/roundpipe-prepare"
if ! python3 -c 'import numpy, transformers, tokenizers' 2> /dev/null; then
  echo "SKIP: roundpipe-prepare's test needs python3 with numpy, transformers and tokenizers"
  exit 77
fi
python3 - "$tmp/tok" << 'PY' || { bad "building the tokenizer"; finish; exit; }
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = "the cat sat on a mat hello how are you fine thanks what is two plus two four".split()
vocab = {w: i for i, w in enumerate(["<unk>", "<pad>", "<eos>"] + words)}
t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", pad_token="<pad>",
                               eos_token="<eos>")
fast.add_special_tokens({"additional_special_tokens": ["<s>", "</s>", "<user>", "<assistant>"]})
fast.chat_template = ("{% for m in messages %}<s> <{{ m['role'] }}> {{ m['content'] }} </s> "
                      "{% endfor %}{% if add_generation_prompt %}<s> <assistant> {% endif %}")
fast.save_pretrained(sys.argv[1])
PY
cat > "$tmp/data.jsonl" << 'J'
{"messages": [{"role": "user", "content": "hello how are you"}, {"role": "assistant", "content": "fine thanks"}]}
{"text": "the cat sat on a mat"}

{"messages": [{"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "four"}, {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "hello"}]}
{"text": "a cat"}
J
"$prep" --tokenizer "$tmp/tok" --input "$tmp/data.jsonl" --out "$tmp/out" > "$tmp/p.txt" 2>&1 &&
  ok || { bad "prepare failed"; cat "$tmp/p.txt"; }
grep -q "4 documents, .* tokens, .* counted targets, 0 padding" "$tmp/p.txt" && ok ||
  { bad "the report line"; cat "$tmp/p.txt"; }
python3 - "$tmp/tok" "$tmp/out" << 'PY' && ok || bad "tokens, mask or documents of the unpacked set"
import sys, numpy as np
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)
d = sys.argv[2]
t, m, s = (np.load(d + "/" + n + ".npy") for n in ("tokens", "mask", "documents"))
assert t.dtype == np.uint16 and m.dtype == np.uint8 and s.dtype == np.int64, (t.dtype, m.dtype)
assert len(t) == len(m) and list(s[:1]) == [0] and len(s) == 4
ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]
end = tok.convert_tokens_to_ids("</s>")
# each document's tokens and counted tokens, worked out here
want_docs = [
    (ids("<s> <user> hello how are you </s> <s> <assistant> fine thanks </s>"),
     ids("fine thanks") + [end]),
    (ids("the cat sat on a mat") + [tok.eos_token_id], None),
    (ids("<s> <user> what is two plus two </s> <s> <assistant> four </s> "
         "<s> <user> thanks </s> <s> <assistant> hello </s>"), ids("four") + [end] + ids("hello") + [end]),
    (ids("a cat") + [tok.eos_token_id], None)]
bounds = list(s) + [len(t)]
for k, (doc, counted) in enumerate(want_docs):
    a, b = bounds[k], bounds[k + 1]
    assert list(t[a:b]) == doc, (k, list(t[a:b]), doc)
    assert m[a] == 0, k
    got = [int(t[p]) for p in range(a, b) if m[p]]
    if counted is None:
        assert got == doc[1:], (k, got)
    else:
        assert got == counted, (k, got, counted)
PY
# packing into rows of 8
"$prep" --tokenizer "$tmp/tok" --input "$tmp/data.jsonl" --out "$tmp/pk" --pack 8 > "$tmp/pk.txt" 2>&1 &&
  ok || { bad "prepare --pack failed"; cat "$tmp/pk.txt"; }
grep -q "split over rows" "$tmp/pk.txt" && ok || bad "--pack 8 does not report the split documents"
python3 - "$tmp/pk" 8 << 'PY' && ok || bad "the packed rows"
import sys, numpy as np
d, S = sys.argv[1], int(sys.argv[2])
t, m, s = (np.load(d + "/" + n + ".npy") for n in ("tokens", "mask", "documents"))
assert (len(t) - 1) % S == 0, len(t)
rows = (len(t) - 1) // S
starts = set(int(x) for x in s)
for r in range(rows):
    assert r * S in starts, r            # every row starts a document
    assert m[r * S] == 0 and m[(r + 1) * S] == 0  # nothing predicted across rows
for a, b in zip(sorted(starts), sorted(starts)[1:] + [rows * S]):
    assert a // S == (b - 1) // S, (a, b)  # no document crosses a row
pad = 1  # <pad>
assert all(m[p] == 0 for p in range(len(t)) if t[p] == pad)
PY
# a held-out set
"$prep" --tokenizer "$tmp/tok" --input "$tmp/data.jsonl" --out "$tmp/ev" --eval-fraction 0.25 \
  > "$tmp/ev.txt" 2>&1 && [ -f "$tmp/ev/eval_tokens.npy" ] && grep -q "eval: 1 documents" "$tmp/ev.txt" &&
  ok || { bad "--eval-fraction"; cat "$tmp/ev.txt"; }
# train reads the output
vocab=$(python3 -c "import sys; from transformers import AutoTokenizer; print(len(AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)))" "$tmp/tok")
sed "s/\"vocab_size\": *[0-9]*/\"vocab_size\": $vocab/" "$src/examples/tiny-config.json" > "$tmp/cfg.json"
${MPIRUN:-mpirun} $flags -np 1 "$build/src/roundpipe" train --init-config "$tmp/cfg.json" \
  --data "$tmp/pk/tokens.npy" --loss-mask "$tmp/pk/mask.npy" --seq-len 8 --batch-size 2 \
  --steps 2 --device cpu --progress none > "$tmp/train.txt" 2>&1 && ok ||
  { bad "train on the packed output"; cat "$tmp/train.txt"; }
# bad lines: named, nothing written
bad_line() { # text field
  printf '%s\n' '{"text": "a cat"}' "$1" > "$tmp/bad.jsonl"
  if "$prep" --tokenizer "$tmp/tok" --input "$tmp/bad.jsonl" --out "$tmp/badout" > "$tmp/b.txt" 2>&1; then
    bad "accepted: $1"
  else grep -q "bad.jsonl:2: .*$2" "$tmp/b.txt" && [ ! -e "$tmp/badout" ] && ok ||
    { bad "message for $1"; cat "$tmp/b.txt"; }; fi
}
bad_line 'not json' "not JSON"
bad_line '{"content": "x"}' "neither 'text' nor 'messages'"
bad_line '{"messages": [{"content": "x"}]}' "messages\[0\] has no field 'role'"
finish
