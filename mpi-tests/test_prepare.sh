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
# output; the files get the umask's mode (0644 under umask 022, not 0600).
# And no traceback, one message and exit 1, whatever the input: every
# malformed line is named in one run (not UTF-8, not JSON, nested too
# deeply, no field), nothing written, and --skip-bad leaves them out naming
# their line numbers; --pack above train's longest --seq-len (and, with the
# packages, longer than all the data); --out naming a file, under a file or
# in a folder that cannot be written; a --tokenizer directory without
# tokenizer files; a write that fails (a file-size limit standing in for a
# full disk) leaves no temporary and names the file; {"text": ""} with a
# tokenizer that adds no EOS is left out, so the mask is as long as the
# tokens. The checks before tokenizing need only python3; the rest is
# skipped without numpy, transformers and tokenizers.
# Ranks: 1 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
prep="$src/scripts/roundpipe-prepare"
command -v python3 > /dev/null || { echo "SKIP: roundpipe-prepare's test needs python3"; exit 77; }

# fails CODE PATTERN -- args: exit CODE, PATTERN in its output, no traceback
fails() {
  want=$1; pat=$2; shift 3
  python3 "$prep" "$@" > "$tmp/f.txt" 2>&1; rc=$?
  if [ "$rc" -ne "$want" ]; then bad "exit $rc (want $want): $*"; cat "$tmp/f.txt"; return; fi
  if grep -q "Traceback" "$tmp/f.txt"; then bad "a traceback: $*"; cat "$tmp/f.txt"; return; fi
  grep -q -- "$pat" "$tmp/f.txt" && ok || { bad "no '$pat': $*"; cat "$tmp/f.txt"; }
}
mkdir "$tmp/notok" "$tmp/anytok"
echo '{}' > "$tmp/anytok/tokenizer.json"   # enough for the checks before loading it
printf '%s\n' '{"text": "a cat"}' > "$tmp/one.jsonl"
fails 1 "pack 100000000000 is above 2147483647" -- --tokenizer "$tmp/anytok" \
  --input "$tmp/one.jsonl" --out "$tmp/o" --pack 100000000000
fails 1 "pack must be positive" -- --tokenizer "$tmp/anytok" --input "$tmp/one.jsonl" \
  --out "$tmp/o" --pack -1
fails 1 "tokenizer $tmp/notok: no tokenizer files" -- --tokenizer "$tmp/notok" \
  --input "$tmp/one.jsonl" --out "$tmp/o"
fails 1 "tokenizer $tmp/one.jsonl: not a directory" -- --tokenizer "$tmp/one.jsonl" \
  --input "$tmp/one.jsonl" --out "$tmp/o"
fails 1 "out $tmp/one.jsonl: exists and is not a directory" -- --tokenizer "$tmp/anytok" \
  --input "$tmp/one.jsonl" --out "$tmp/one.jsonl"
fails 1 "out $tmp/one.jsonl/x: $tmp/one.jsonl is not a directory" -- --tokenizer "$tmp/anytok" \
  --input "$tmp/one.jsonl" --out "$tmp/one.jsonl/x"
# a folder that cannot be written: mode 0555 stops a user, not root; /sys stops root
if [ "$(id -u)" != 0 ]; then ro="$tmp/ro"; mkdir "$ro"; chmod 555 "$ro"
elif [ -d /sys ] && ! touch /sys/roundpipe-prepare-probe 2> /dev/null; then ro=/sys
else ro=; fi
[ -n "$ro" ] && fails 1 "out $ro/out: cannot create files in $ro" -- --tokenizer "$tmp/anytok" \
  --input "$tmp/one.jsonl" --out "$ro/out"
[ "$(id -u)" != 0 ] && [ -d "$tmp/ro" ] && chmod 755 "$tmp/ro"
fails 1 "nonexistent.jsonl: No such file" -- --tokenizer "$tmp/anytok" \
  --input "$tmp/nonexistent.jsonl" --out "$tmp/o"
# four malformed lines, all named in one run, nothing written
{ echo '{"text": "a cat"}'; echo 'not json'; printf '\377\376{"text": "x"}\n'
  python3 -c 'print("[" * 100000)'; echo '{"content": "x"}'; echo '{"text": "the cat"}'; } \
  > "$tmp/four.jsonl"
fails 1 "four.jsonl: 4 malformed lines (2, 3, 4, 5); nothing written; --skip-bad" -- \
  --tokenizer "$tmp/anytok" --input "$tmp/four.jsonl" --out "$tmp/fo"
for want in "four.jsonl:2: not JSON" "four.jsonl:3: not UTF-8 (byte 0xff at column 1)" \
    "four.jsonl:4: JSON nested too deeply" "four.jsonl:5: the line has neither"; do
  grep -qF "$want" "$tmp/f.txt" && ok || { bad "not named: $want"; cat "$tmp/f.txt"; }
done
[ ! -e "$tmp/fo" ] && ok || bad "a failed run wrote $tmp/fo"
# --skip-bad: the same lines named as skipped (then, without the packages, it
# stops at the import; with them it writes the two good documents, below)
python3 "$prep" --tokenizer "$tmp/anytok" --input "$tmp/four.jsonl" --out "$tmp/fo" --skip-bad \
  > "$tmp/sk.txt" 2>&1
grep -qF "skipped 4 malformed lines of $tmp/four.jsonl: 2, 3, 4, 5" "$tmp/sk.txt" &&
  grep -qF "four.jsonl:4: JSON nested too deeply, skipped" "$tmp/sk.txt" && ! grep -q Traceback "$tmp/sk.txt" &&
  ok || { bad "--skip-bad's report"; cat "$tmp/sk.txt"; }
# an empty text with a tokenizer that adds no special tokens: no document, and
# the mask as long as the tokens (the script's functions, with a stand-in tokenizer)
python3 - "$prep" << 'PY' && ok || bad "an empty text gives a mask longer than the tokens"
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("prepare", sys.argv[1])
spec = importlib.util.spec_from_loader("prepare", loader)
prepare = importlib.util.module_from_spec(spec)
loader.exec_module(prepare)
class NoEos:
    eos_token_id = None
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [len(w) for w in text.split()]}
docs = [prepare.encode_text(NoEos(), t) for t in ("a cat", "", "the mat")]
tokens, mask, starts = prepare.layout(docs)
assert len(tokens) == len(mask) == 4, (tokens, mask)
assert starts == [0, 2] and mask == [0, 1, 0, 1], (starts, mask)
PY
# (its imports, some seconds, are the availability check too: exit 77)
python3 - "$tmp/tok" << 'PY'
import sys
try:
    import numpy, transformers, tokenizers
except ImportError:
    sys.exit(77)
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
case $? in
  0) ;;
  77) echo "SKIP part: python3 without numpy, transformers and tokenizers: only the checks before tokenizing ran"
      finish; exit ;;
  *) bad "building the tokenizer"; finish; exit ;;
esac
cat > "$tmp/data.jsonl" << 'J'
{"messages": [{"role": "user", "content": "hello how are you"}, {"role": "assistant", "content": "fine thanks"}]}
{"text": "the cat sat on a mat"}

{"messages": [{"role": "user", "content": "what is two plus two"}, {"role": "assistant", "content": "four"}, {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "hello"}]}
{"text": "a cat"}
J
(umask 022; "$prep" --tokenizer "$tmp/tok" --input "$tmp/data.jsonl" --out "$tmp/out" > "$tmp/p.txt" 2>&1) &&
  ok || { bad "prepare failed"; cat "$tmp/p.txt"; }
for f in tokens mask documents; do
  [ "$(stat -c %a "$tmp/out/$f.npy")" = 644 ] && ok || bad "$f.npy has mode $(stat -c %a "$tmp/out/$f.npy") under umask 022"
done
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
# train reads the output; the tokenizer's size for its config, and (for the
# empty text below) the same tokenizer with its EOS unset, in one Python:
# its imports take seconds
vocab=$(python3 - "$tmp/tok" "$tmp/noeos" << 'PY'
import sys
from transformers import AutoTokenizer
print(len(AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)), flush=True)
t = AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)
t.eos_token = None
t.save_pretrained(sys.argv[2])
PY
) || bad "building the tokenizer without EOS"
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
# --skip-bad with the tokenizer: the two good lines written
"$prep" --tokenizer "$tmp/tok" --input "$tmp/four.jsonl" --out "$tmp/sk" --skip-bad > "$tmp/sk.txt" 2>&1 &&
  grep -q "2 documents" "$tmp/sk.txt" && [ -f "$tmp/sk/tokens.npy" ] && ok ||
  { bad "--skip-bad did not write the good lines"; cat "$tmp/sk.txt"; }
# a row longer than all the data: refused before it is built
"$prep" --tokenizer "$tmp/tok" --input "$tmp/data.jsonl" --out "$tmp/big" --pack 1000000000 \
  > "$tmp/bp.txt" 2>&1 && bad "--pack 1000000000 accepted" ||
  { grep -q "pack 1000000000 is longer than all" "$tmp/bp.txt" && ok || { bad "--pack's message"; cat "$tmp/bp.txt"; }; }
# a write that fails (a file-size limit as a stand-in for a full disk): the
# file named, exit 1, no temporary left, no directory made
i=0; while [ $i -lt 400 ]; do echo '{"text": "the cat sat on a mat the cat sat on a mat"}'; i=$((i + 1)); done > "$tmp/many.jsonl"
(ulimit -f 2; "$prep" --tokenizer "$tmp/tok" --input "$tmp/many.jsonl" --out "$tmp/full" > "$tmp/full.txt" 2>&1) &&
  bad "a write over the file-size limit succeeded" ||
  { grep -q "full: writing tokens.npy failed: .*nothing written" "$tmp/full.txt" && ! grep -q Traceback "$tmp/full.txt" &&
    ok || { bad "the failed write's message"; cat "$tmp/full.txt"; }; }
[ ! -e "$tmp/full" ] && ok || { bad "the failed write left files"; ls -A "$tmp/full"; }
mkdir "$tmp/full2"
(ulimit -f 2; "$prep" --tokenizer "$tmp/tok" --input "$tmp/many.jsonl" --out "$tmp/full2" > /dev/null 2>&1)
[ -z "$(ls -A "$tmp/full2")" ] && ok || { bad "temporaries left behind"; ls -A "$tmp/full2"; }
# a directory with only tokenizer_config.json: refused, not an empty tokenizer
mkdir "$tmp/cfgonly"; cp "$tmp/tok/tokenizer_config.json" "$tmp/cfgonly/"
"$prep" --tokenizer "$tmp/cfgonly" --input "$tmp/data.jsonl" --out "$tmp/co" > "$tmp/co.txt" 2>&1 &&
  bad "a tokenizer without files accepted" || { grep -q "no tokenizer files" "$tmp/co.txt" && ok ||
  { bad "the missing tokenizer's message"; cat "$tmp/co.txt"; }; }
# {"text": ""} with a tokenizer without EOS (the word-level one with its EOS
# unset, made above)
printf '%s\n' '{"text": "the cat"}' '{"text": ""}' '{"text": "a mat"}' > "$tmp/empty.jsonl"
"$prep" --tokenizer "$tmp/noeos" --input "$tmp/empty.jsonl" --out "$tmp/em" > "$tmp/em.txt" 2>&1 &&
  grep -q "1 line of .*empty.jsonl gave no tokens and is left out: 2" "$tmp/em.txt" && ok ||
  { bad "the empty text"; cat "$tmp/em.txt"; }
python3 -c "import sys, numpy as np; t = np.load(sys.argv[1] + '/tokens.npy'); m = np.load(sys.argv[1] + '/mask.npy'); assert len(t) == len(m) == 4, (len(t), len(m))" \
  "$tmp/em" && ok || bad "mask and tokens differ in length"
finish
