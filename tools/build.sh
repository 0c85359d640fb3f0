#!/bin/sh
# Configure and build roundpipe out of tree in ./build (re-using it when it
# exists). Extra arguments go to configure.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi >/dev/null
mkdir -p build
cd build
[ -f Makefile ] || ../configure -q "$@"
make -j"$(nproc)" >/dev/null
