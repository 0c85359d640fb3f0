#!/bin/sh
# Proves: the installed library runs as the README writes it: `make install
# prefix=DIR` into a fresh prefix, then the API example compiled from the
# installed examples directory with the flags the installed roundpipe.pc
# gives (mpicc $(pkg-config --cflags) ... $(pkg-config --libs)) and run with
# mpirun -np 3, without LD_LIBRARY_PATH, trains its 3 steps: the link line
# carries an rpath to the prefix's lib directory, so the loader finds
# libroundpipe.so.0 there. The installed roundpipe runs too, and every
# function roundpipe.h exports has its installed `man rp_x` page and is in
# roundpipe(3)'s NAME.
# Ranks: 3 (mpirun inside).
set -u
. "$(dirname "$0")/testlib.sh"
command -v pkg-config > /dev/null || { echo "SKIP: pkg-config not found"; exit 77; }
command -v "${MPICC:-mpicc}" > /dev/null || { echo "SKIP: ${MPICC:-mpicc} not found"; exit 77; }
prefix="$tmp/prefix"
# a sub-make of `make check`: the parent's jobserver flags are not ours
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$build" install prefix="$prefix" \
  > "$tmp/install.txt" 2>&1 && ok || { bad "make install prefix=$prefix failed"; tail -n 20 "$tmp/install.txt"; finish; exit; }
# `man rp_x` for every function roundpipe.h exports, and roundpipe(3) names it
for f in $(grep -o '^RP_API [^(]*(' "$src/include/roundpipe.h" | sed 's/.*[ *]\(rp_[a-z_]*\)($/\1/'); do
  [ -f "$prefix/share/man/man3/$f.3" ] && ok || bad "no installed man page $f.3"
  sed -n '/^\.SH NAME/,/^\.SH/p' "$src/man/roundpipe.3" | grep -q "\b$f\b" && ok || bad "roundpipe(3)'s NAME lacks $f"
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
unset LD_LIBRARY_PATH
ex=$(pkg-config --variable=examplesdir roundpipe)
[ "$ex" = "$prefix/share/roundpipe/examples" ] && ok || bad "examplesdir is '$ex'"
"${MPICC:-mpicc}" $(pkg-config --cflags roundpipe) -o "$tmp/train_api" "$ex/train_api.c" \
  $(pkg-config --libs roundpipe) > "$tmp/cc.txt" 2>&1 && ok || { bad "compiling train_api"; cat "$tmp/cc.txt"; }
cd "$tmp"
${MPIRUN:-mpirun} $flags -np 3 ./train_api 2 "$ex/tiny-config.json" "$ex/data/gnu-licenses.npy" \
  out > "$tmp/run.txt" 2>&1 && grep -q "^train_api: 3 steps, final loss" "$tmp/run.txt" && ok ||
  { bad "the installed example did not run"; cat "$tmp/run.txt"; }
[ -f "$tmp/out/model.safetensors" ] && ok || bad "no model saved by the installed example"
${MPIRUN:-mpirun} $flags -np 1 "$prefix/bin/roundpipe" plan --init-config "$ex/tiny-config.json" \
  --gpus 1 --microbatches 1 > "$tmp/plan.txt" 2>&1 && ok || { bad "the installed roundpipe"; cat "$tmp/plan.txt"; }
finish
