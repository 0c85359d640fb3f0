#!/bin/sh
# bench/gpu/tree-digest.sh [TOP]: one SHA-256 over the build inputs of the
# tree at TOP (default: the tree holding this script): every .c, .h, .cu,
# .cuh and .mk under include/ src/ mpi-tests/ bench/ examples/ with
# configure.ac and Makefile.am, path and content. tools/gpu-runtime.sh stores
# it with the carried CUDA build; bench/gpu/run.sh uses that build only when
# the tree it runs in has the same digest. Needs no git (the GPU machine's
# copy of the tree may have none).
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top" || exit 1
{ ls configure.ac Makefile.am
  find include src mpi-tests bench examples -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.cuh' -o -name '*.mk' \) 2>/dev/null
} | LC_ALL=C sort | while read -r f; do
  printf '%s %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
done | sha256sum | cut -d' ' -f1
