#!/bin/sh
# Proves: on a terminal (a pseudo-terminal made by script(1)) rank 0 draws
# the live progress line, under mpirun as well as on its own, and a message
# logged meanwhile (the re-plan after step 2) starts on a line of its own
# ("\r\033[K" clears the live line first) and the line is redrawn; when
# mpirun's output is not a terminal, progress is plain periodic lines
# without carriage returns; the re-plan reads layer times that the layer
# clock measured (layer_clock.c: a block's forward and backward and the
# head's call, each above 0 ms). Skips without script(1).
set -u
. "$(dirname "$0")/testlib.sh"
command -v script > /dev/null 2>&1 || { echo "no script(1): skipped"; exit 77; }
esc=$(printf '\033'); cr=$(printf '\r')
args="train --init-config $src/examples/tiny-config.json --data $build/examples/data/gnu-licenses.npy"
args="$args --seq-len 32 --batch-size 4 --microbatches 2 --steps 6 --threads 1 --timeout 60"

# check FILE WHAT: the live line reached step 6, and every message starts a line
check() {
  grep -a -q "${cr}step 6/6 | loss [0-9.]* | [0-9]* tok/s | ETA" "$1" && ok \
    || { bad "$2: no live line"; cat -A "$1" | head -20; }
  grep -a -q "${cr}${esc}\[K\[roundpipe 0\] info: re-planned" "$1" && ok \
    || { bad "$2: the re-plan message does not clear the live line"; cat -A "$1" | head -20; }
  # a message glued to the live line: "[roundpipe" after anything but a line start or a clear
  sed "s/${cr}${esc}\[K\[roundpipe/\n[roundpipe/g" "$1" | grep -a -q '.\[roundpipe' \
    && { bad "$2: a message shares a line with the live line"; cat -A "$1" | head -20; } || ok
}

script -qec "${MPIRUN:-mpirun} $flags -np 2 $bin $args" "$tmp/mpirun.tty" > /dev/null 2>&1 \
  && ok || { bad "training under mpirun on a terminal failed"; cat "$tmp/mpirun.tty"; }
check "$tmp/mpirun.tty" "mpirun on a terminal"
script -qec "$bin $args" "$tmp/alone.tty" > /dev/null 2>&1 \
  && ok || { bad "training on a terminal failed"; cat "$tmp/alone.tty"; }
check "$tmp/alone.tty" "one process on a terminal"

# mpirun writing to files: plain lines on standard error, no live line
${MPIRUN:-mpirun} $flags -np 2 $bin $args > "$tmp/out" 2> "$tmp/err" && ok || bad "training to files failed"
grep -q '^roundpipe: step 1/6 loss [0-9.]* [0-9]* tok/s ETA' "$tmp/err" && ok \
  || { bad "no periodic progress line"; cat "$tmp/err"; }
grep -q "$cr" "$tmp/out" "$tmp/err" && bad "a carriage return in non-terminal output" || ok
times=$(sed -n 's/.*re-planned from measured layer times (block: \([0-9.e+-]*\) ms forward, \([0-9.e+-]*\) ms backward; head: \([0-9.e+-]*\) ms.*/\1 \2 \3/p' "$tmp/out" "$tmp/err")
echo "$times" | awk 'NF == 3 && $1 > 0 && $2 > 0 && $3 > 0 { found = 1 } END { exit !found }' && ok \
  || { bad "the re-plan has no measured layer times: '$times'"; grep re-planned "$tmp/out" "$tmp/err"; }
finish
