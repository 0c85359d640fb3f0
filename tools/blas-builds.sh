#!/bin/sh
# Unpack Debian's other OpenBLAS builds (pthread, serial) under
# build/blas-builds/ without installing them: installing one would switch the
# system's libopenblas.so.0 (update-alternatives) for every program. The test
# of rank-count bits (mpi-tests/test_rank_bits.sh) runs roundpipe on each build
# it finds, through LD_LIBRARY_PATH. Best effort: without apt or a network the
# test says which builds it could not try.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dest="$top/build/blas-builds"
command -v apt-get > /dev/null && command -v dpkg > /dev/null || exit 0
mkdir -p "$dest"
for pkg in libopenblas0-pthread libopenblas0-serial; do
  [ -d "$dest/$pkg" ] && continue
  work=$(mktemp -d) || exit 0
  if (cd "$work" && apt-get download -qq "$pkg" > /dev/null 2>&1) &&
     dpkg -x "$work"/"$pkg"_*.deb "$work/x" 2> /dev/null; then
    mv "$work/x" "$dest/$pkg"
  else
    echo "roundpipe: could not fetch $pkg (apt-get download); its OpenBLAS build is not tested" >&2
  fi
  rm -rf "$work"
done
exit 0
