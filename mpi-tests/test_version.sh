#!/bin/sh
# Proves: `roundpipe version` (and --version) prints one line, the version;
# `version --verbose` prints its report without mpirun, each line in order
# and each figure as an independent source gives it: the processor's online
# CPUs as nproc, memory as /proc/meminfo's MemTotal, json-c's version as
# pkg-config's, Open MPI's as mpirun --version, the GPU line as the device
# probe says (mpi-tests/cuda_usable: the same reason when none is usable);
# in a CUDA build cuBLAS and cuDNN name the files the loader mapped (a file
# that exists), and RP_CUBLAS_LIBRARY naming a missing file is reported as
# not loadable naming it; the environment line lists the RP_* and thread
# variables set, and says none when none is; a bad option exits 2 naming it.
set -u
. "$(dirname "$0")/testlib.sh"

version=$("$bin" version) && [ "$(printf '%s\n' "$version" | wc -l)" = 1 ] &&
  printf '%s\n' "$version" | grep -Eq '^roundpipe [0-9]+\.[0-9]+\.[0-9]+$' && ok ||
  bad "version: '$version'"
[ "$("$bin" --version)" = "$version" ] && ok || bad "--version differs from version"

"$bin" version --verbose > "$tmp/v" 2> "$tmp/err"
rc=$?
[ "$rc" = 0 ] && [ ! -s "$tmp/err" ] && ok || { bad "version --verbose: exit $rc"; cat "$tmp/err"; }
# the lines, in order (cuBLAS and cuDNN in a CUDA build)
keys="roundpipe compiler CUDA MPI hwloc json-c processor CPU CPU memory host GPU"
grep -q '^CUDA: built' "$tmp/v" && keys="$keys cuBLAS cuDNN"
keys="$keys environment"
got=$(sed 's/[: ].*//' "$tmp/v" | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "$keys" ] && ok || { bad "lines: '$got', want '$keys'"; cat "$tmp/v"; }
[ "$(head -n 1 "$tmp/v")" = "$version" ] && ok || bad "first line not the version"

# figures against independent sources
n=$(nproc --all 2>/dev/null || getconf _NPROCESSORS_ONLN)
grep -q "^processor: .*, $(getconf _NPROCESSORS_ONLN) logical CPU(s) online$" "$tmp/v" && ok ||
  { bad "online CPUs: want $n"; grep '^processor' "$tmp/v"; }
total=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
grep -q "^memory: $total GiB, " "$tmp/v" && ok || { bad "memory: want $total GiB"; grep '^memory' "$tmp/v"; }
if command -v pkg-config > /dev/null && pkg-config --exists json-c; then
  grep -qx "json-c: $(pkg-config --modversion json-c)" "$tmp/v" && ok ||
    { bad "json-c: want $(pkg-config --modversion json-c)"; grep '^json-c' "$tmp/v"; }
fi
mpiv=$(mpirun --version 2>/dev/null | sed -n 's/^mpirun (Open MPI) //p')
if [ -n "$mpiv" ]; then
  grep -q "^MPI: Open MPI v$mpiv," "$tmp/v" && ok || { bad "MPI: want v$mpiv"; grep '^MPI' "$tmp/v"; }
fi
grep -q '^CPU BLAS: ' "$tmp/v" && grep -q '^CPU kernels (attention, SwiGLU): exps through' "$tmp/v" &&
  grep -Eq '^hwloc: API [0-9]+\.[0-9]+\.[0-9]+ at run time' "$tmp/v" && ok || bad "BLAS, kernels or hwloc lines"
if cuda_usable; then
  grep -Eq '^GPU: [0-9]+ usable; GPU 0: .*, sm_[0-9]+, ' "$tmp/v" && ok || { bad "GPU line"; grep '^GPU' "$tmp/v"; }
else
  why=$(sed 's/^no usable GPU: //' "$tmp/cuda.txt" | head -n 1)
  grep -qxF "GPU: none usable: $why" "$tmp/v" && ok ||
    { bad "GPU line, want the probe's '$why'"; grep '^GPU' "$tmp/v"; }
fi
if grep -q '^CUDA: built' "$tmp/v"; then
  for lib in cuBLAS cuDNN; do
    line=$(grep "^$lib: " "$tmp/v")
    case $line in
    *"not loadable"*) ok ;; # a machine without the library says why
    *) file=$(printf '%s\n' "$line" | sed 's/^[^(]*(\([^)]*\)).*/\1/'); [ -f "$file" ] && ok ||
         bad "$lib: '$file' is not a file: $line" ;;
    esac
  done
  RP_CUBLAS_LIBRARY=$tmp/none.so "$bin" version --verbose > "$tmp/v2" 2>&1
  grep -q "^cuBLAS: not loadable: RP_CUBLAS_LIBRARY=$tmp/none.so cannot be loaded" "$tmp/v2" && ok ||
    { bad "RP_CUBLAS_LIBRARY missing"; grep '^cuBLAS' "$tmp/v2"; }
else
  grep -q '^CUDA: not built' "$tmp/v" && ok || bad "CUDA line of a build without it"
fi
env -i PATH="$PATH" "$bin" version --verbose > "$tmp/v0" 2>&1
grep -qx 'environment: none of RP_\*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS set' "$tmp/v0" &&
  ok || { bad "environment, none set"; grep '^environment' "$tmp/v0"; }
RP_ALLOW_UNPROVEN_CUDA=documents OMP_NUM_THREADS=3 OMP_NUM_THREADS_X=1 "$bin" version -v > "$tmp/v3" 2>&1
line=$(grep '^environment' "$tmp/v3")
case $line in
*" RP_ALLOW_UNPROVEN_CUDA=documents"*) ok ;;
*) bad "environment: $line" ;;
esac
case $line in
*" OMP_NUM_THREADS=3"*) ok ;;
*) bad "environment: $line" ;;
esac
case $line in
*OMP_NUM_THREADS_X*) bad "a variable merely starting like one listed: $line" ;;
*) ok ;;
esac

"$bin" version --bogus > "$tmp/out" 2> "$tmp/err"
[ $? = 2 ] && grep -q "roundpipe version: unknown option '--bogus'" "$tmp/err" && ok || bad "--bogus"
"$bin" version --help > "$tmp/out" 2>&1 && grep -q '^usage: roundpipe version \[--verbose\]' "$tmp/out" &&
  ok || bad "--help"
finish
