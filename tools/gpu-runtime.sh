#!/bin/bash
# Make roundpipe's runtime (Open MPI, hwloc, OpenBLAS, json-c, Check) available
# on the GPU machine, which has CUDA, gcc, cmake and Python but no package
# registry and no MPI. Run it HERE (Debian 12, x86-64) before a GPU session:
#
#   tools/gpu-runtime.sh              download, unpack, prune, check, pack, autogen,
#                                     prebuild (CUDA, sm_90)
#   tools/gpu-runtime.sh --no-prebuild  the runtime and autogen only (~10 s)
#   tools/gpu-runtime.sh --selftest   also prove the relocation here (see below)
#
# It writes, under .carry/ (ignored by git):
#   debroot/          the Debian packages unpacked with dpkg -x and pruned
#   debroot.tar.gz    the same, compressed: what travels to the GPU machine
#   env.sh            `. .carry/env.sh` unpacks debroot.tar.gz if needed and
#                     sets PATH, LD_LIBRARY_PATH, OPAL_* and OMPI_MCA_*
#   autogen/          configure, Makefile.in, aclocal.m4, config.h.in,
#                     build-aux/ and m4/ generated from the current tree: the
#                     GPU machine has no autotools, and these are git-ignored
#   build-sm90/       a CUDA build of the tree for sm_90 (H100/H200), made
#                     with this machine's nvcc and Open MPI (the carried
#                     runtime's sonames); kept, so a re-run rebuilds only
#                     what changed (RP_PREBUILD_ARCH: another SM version)
#   build-sm90.tar.gz the programs of bench/gpu/carried-programs.txt from it,
#                     debug info stripped, with MANIFEST (the tree's digest by
#                     bench/gpu/tree-digest.sh, nvcc's version, the SM): what
#                     travels. bench/gpu/run.sh uses it when the digest is its
#                     tree's and the programs run there, else builds there.
#
# Carry to the device tool: .carry/debroot.tar.gz .carry/env.sh .carry/autogen
# .carry/build-sm90.tar.gz (bench/gpu/run.sh uses them; bench/README.md, "GPU
# machine", has the command).
#
# Why not `apt-cache depends --recurse`: from libopenmpi-dev it drags in every
# Fortran compiler (gfortran, flang-16/19/22 as alternatives), binutils, perl
# and libllvm: hundreds of MB the GPU machine has or does not need. The closure
# is instead checked where it matters, at the ELF level: every DT_NEEDED of
# every carried binary, library and plugin must be carried, or be one of the
# libraries any gcc-equipped glibc system has (BASE_SONAMES), or be a
# "fallback" library (libz, libudev, libquadmath, libgfortran) that env.sh
# links in only when the GPU machine lacks it, so that a newer system copy is
# never shadowed by Debian 12's. Open MPI plugins whose libraries are not
# carried (UCX, libfabric, PSM, verbs, OpenSHMEM, netlink) are dropped: one
# node needs only the shared-memory transports.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
carry="${RP_CARRY:-$top/.carry}"
debs="${RP_DEB_CACHE:-/tmp/rp-gpu-debs}"
prepare=yes
prebuild=yes
selftest=no
selftest_cmd=()
while [ $# -gt 0 ]; do
  case $1 in
    --selftest) selftest=yes; shift; selftest_cmd=("$@"); break ;;
    --no-prepare) prepare=no; prebuild=no ;;
    --no-prebuild) prebuild=no ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu-runtime.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done

# Runtime packages and the -dev packages whose headers/.so links the build
# needs. libopenblas0-openmp: roundpipe links OpenBLAS built with OpenMP.
PACKAGES="libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev
  libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libmunge2
  libhwloc15 libhwloc-plugins libhwloc-dev libpciaccess0
  libjson-c5 libjson-c-dev
  libopenblas0-openmp libopenblas-openmp-dev
  check libsubunit0 libsubunit-dev"
# Present on nearly every system; carried for the one that lacks them.
FALLBACK_PACKAGES="zlib1g libudev1 libquadmath0 libgfortran5"
# Provided by glibc and gcc's runtime on any machine with gcc (the GPU
# machine builds with its own gcc, so its libgomp/libstdc++ must win).
BASE_SONAMES="libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1
  ld-linux-x86-64.so.2 libgcc_s.so.1 libstdc++.so.6 libgomp.so.1"

say() { echo "gpu-runtime: $*"; }
die() { echo "gpu-runtime: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the GPU machine is x86-64: run this on x86-64"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (Debian/Ubuntu)"

prepare_carry() {
# --- 1. download (cached)
mkdir -p "$debs"
missing=""
for p in $PACKAGES $FALLBACK_PACKAGES; do
  ls "$debs/${p}_"*.deb >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "downloading:$missing"
  (cd "$debs" && apt-get download $missing) > "$debs/download.log" 2>&1 ||
    { tail -5 "$debs/download.log" >&2; die "apt-get download failed (try apt-get update)"; }
fi

# --- 2. unpack
root="$carry/debroot"
rm -rf "$root"
mkdir -p "$root" "$root/fallback"
for p in $PACKAGES; do dpkg -x "$(ls "$debs/${p}_"*.deb | tail -1)" "$root"; done
fb_tmp=$(mktemp -d)
trap 'rm -rf "$fb_tmp"' EXIT
for p in $FALLBACK_PACKAGES; do dpkg -x "$(ls "$debs/${p}_"*.deb | tail -1)" "$fb_tmp"; done
# Only the shared objects of the fallback packages, flat, by soname.
find "$fb_tmp" -name '*.so.*' \( -type f -o -type l \) | while read -r f; do
  cp -a "$f" "$root/fallback/"
done
L="$root/usr/lib/x86_64-linux-gnu"

# --- 3. prune: docs, static libs, Fortran/Java/C++/OpenSHMEM bindings,
# LAPACK/BLAS alternatives, tools that need X or OpenCL.
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" \
  "$root/usr/share/lintian" "$root/usr/share/locale" "$root/usr/share/aclocal" \
  "$L/fortran" "$L/cmake" "$L/openblas-openmp/cmake"
find "$root" -name '*.a' ! -name libcheck_pic.a -delete
find "$root" \( -name 'libmpi_java*' -o -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' \
  -o -name 'libmpi_cxx*' -o -name 'liboshmem*' -o -name 'libompitrace*' -o -name 'mpi_java*' \
  -o -name 'ompi_monitoring_prof.so' -o -name 'liblapack.so*' -o -name 'libblas.so*' \
  -o -name 'hwloc_gl.so' -o -name 'hwloc_opencl.so' -o -name 'hwloc_xml_libxml.so' \) \
  \( -type f -o -type l \) -delete
(cd "$root/usr/bin" && rm -f osh* shmem* mpif77* mpif90* mpifort* mpijavac* mpiCC* mpic++* \
  mpicxx* opalc++ profile2mat aggregate_profile oshmem_info checkmk)
rm -rf "$root/usr/share/java" "$root/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_"*oshmem* 2>/dev/null || true
# Debian names the commands through update-alternatives, which dpkg -x skips.
ln -sf mpicc.openmpi "$root/usr/bin/mpicc"
ln -sf mpirun.openmpi "$root/usr/bin/mpirun"
ln -sf mpiexec.openmpi "$root/usr/bin/mpiexec"

# --- 4. ELF closure: drop plugins whose libraries are not carried, then
# demand that everything left resolves.
have_soname() {  # is $1 carried (main tree or fallback) or base?
  local s=$1
  case " $(echo $BASE_SONAMES) " in *" $s "*) return 0 ;; esac
  [ -e "$root/fallback/$s" ] && return 0
  [ -n "$(find "$root/usr/lib" -name "$s" -print -quit)" ]
}
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }
plugin_dirs="$L/openmpi/lib/openmpi3 $L/pmix2/lib/pmix $L/hwloc"
changed=yes
while [ $changed = yes ]; do
  changed=no
  # shellcheck disable=SC2044 # Debian paths have no blanks
  for f in $(find $plugin_dirs -name '*.so' -type f); do
    for s in $(needed "$f"); do
      if ! have_soname "$s"; then
        rm -f "$f"; changed=yes; break
      fi
    done
  done
done
# Libraries only the dropped plugins used.
rm -f "$L"/libmca_common_ofi.* "$L"/libmca_common_ucx.* "$L"/libmca_common_verbs.* \
  "$L"/openmpi/lib/libmca_common_ofi.so "$L"/openmpi/lib/libmca_common_ucx.so \
  "$L"/openmpi/lib/libmca_common_verbs.so
bad=""
maxglibc=0
# shellcheck disable=SC2044
for f in $(find "$root" -type f \( -perm -u+x -o -name '*.so*' \)); do
  is_elf "$f" || continue
  for s in $(needed "$f"); do
    have_soname "$s" || bad="$bad\n  ${f#"$root"/} needs $s"
  done
  v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -1 || true)
  if [ -n "$v" ] && [ "$v" -gt "$maxglibc" ]; then maxglibc=$v; fi
done
[ -z "$bad" ] || die "unresolved libraries:$(printf "$bad")"
say "ELF closure complete; newest glibc symbol needed: GLIBC_2.$maxglibc (the GPU machine's ldd --version must be >= 2.$maxglibc)"
# Dangling symbolic links (targets pruned above) would only confuse.
find "$root" -xtype l -delete

# --- 5. env.sh
cat > "$carry/env.sh" <<'ENV'
# Generated by tools/gpu-runtime.sh. Source it with bash from anywhere:
#   . .carry/env.sh
# It unpacks debroot.tar.gz beside it when debroot/ is missing or older, then
# points PATH, LD_LIBRARY_PATH, pkg-config and Open MPI at the carried tree.
# Open MPI 4.1 is relocatable: OPAL_PREFIX replaces the /usr it was built for
# (bindir, libdir, pkglibdir of the plugins, the wrapper compilers' -I/-L);
# sysconfdir (/etc/openmpi) is outside the prefix, hence OPAL_SYSCONFDIR.
_rp_c=$(cd "$(dirname "${BASH_SOURCE[0]:-${RP_CARRY:-.carry}/env.sh}")" && pwd)
_rp_d=$_rp_c   # where debroot/ is unpacked: beside env.sh, or /tmp if read-only
[ -w "$_rp_c" ] || { _rp_d=${TMPDIR:-/tmp}/rp-carry; mkdir -p "$_rp_d"; }
[ -d "$_rp_c/debroot/usr" ] && [ ! -f "$_rp_c/debroot.tar.gz" ] && _rp_d=$_rp_c
if [ -f "$_rp_c/debroot.tar.gz" ] && { [ ! -d "$_rp_d/debroot/usr" ] || [ "$_rp_c/debroot.tar.gz" -nt "$_rp_d/debroot/.stamp" ]; }; then
  rm -rf "$_rp_d/debroot" && tar -xzf "$_rp_c/debroot.tar.gz" -C "$_rp_d" && touch "$_rp_d/debroot/.stamp"
fi
export RP_DEBROOT="$_rp_d/debroot"
[ -x "$RP_DEBROOT/usr/bin/orterun" ] || echo "env.sh: no carried runtime in $RP_DEBROOT (run tools/gpu-runtime.sh)" >&2
_rp_l="$RP_DEBROOT/usr/lib/x86_64-linux-gnu"
# Fallback libraries: linked in one by one, only those this system lacks, so a
# newer system libz/libudev/libgfortran is never shadowed.
_rp_fb="$_rp_d/fallback-active"
rm -rf "$_rp_fb"; mkdir -p "$_rp_fb"
for _rp_f in "$RP_DEBROOT"/fallback/*.so.*; do
  _rp_s=$(basename "$_rp_f")
  case $_rp_s in *.so.[0-9]|*.so.[0-9][0-9]) ;; *) continue ;; esac   # sonames only
  # not grep -q: it ends at the first match, ldconfig dies of SIGPIPE, and
  # under run.sh's pipefail the pipeline reads as no match at random
  if ! { /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null; } | grep "^[[:space:]]*$_rp_s " > /dev/null; then
    ln -sf "$_rp_f" "$_rp_fb/$_rp_s"
    echo "env.sh: using carried $_rp_s (none on this system)" >&2
  fi
done
export PATH="$RP_DEBROOT/usr/bin:$PATH"
export LD_LIBRARY_PATH="$_rp_l:$_rp_l/openmpi/lib:$_rp_l/openblas-openmp:$_rp_l/pmix2/lib:$_rp_fb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$RP_DEBROOT/usr"
export OPAL_SYSCONFDIR="$RP_DEBROOT/etc/openmpi"
export PMIX_DESTDIR="$RP_DEBROOT"   # PMIx's datadir/plugin dir are absolute in Debian's build: DESTDIR moves them all
export PMIX_MCA_mca_base_component_path="$_rp_l/pmix2/lib/pmix"
export HWLOC_PLUGINS_PATH="$_rp_l/hwloc"
export PKG_CONFIG_SYSROOT_DIR="$RP_DEBROOT"
export PKG_CONFIG_LIBDIR="$_rp_l/pkgconfig:$_rp_l/openblas-openmp/pkgconfig:$_rp_l/openmpi/lib/pkgconfig"
# The GPU machine runs commands as root, has no ssh, and one node: launch
# locally (plm isolated), shared-memory transports only, no CMA single-copy
# (ptrace-based; refused in many VMs and containers).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm=isolated
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mca_base_component_show_load_errors=0
unset _rp_c _rp_d _rp_l _rp_fb _rp_f _rp_s
ENV

# --- 6. pack what travels
touch "$root/.stamp"
tar -czf "$carry/debroot.tar.gz.new" -C "$carry" debroot
mv "$carry/debroot.tar.gz.new" "$carry/debroot.tar.gz"
touch "$root/.stamp"

# --- 7. autotools output for the current tree (generated in a copy, so the
# shared checkout's own generated files are left alone).
gen=$(mktemp -d)
trap 'rm -rf "$fb_tmp" "$gen"' EXIT
(cd "$top" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$gen" 2>/dev/null) || true
(cd "$gen" && autoreconf -fi >autoreconf.log 2>&1) || { tail "$gen/autoreconf.log" >&2; die "autoreconf failed"; }
rm -rf "$carry/autogen"
mkdir -p "$carry/autogen"
# the digest bench/gpu/run.sh compares: what automake read
(cd "$gen" && { cat configure.ac Makefile.am; sed -n 's/^include //p' Makefile.am | while read -r f; do cat "$f"; done; } |
  sha256sum | cut -d' ' -f1) > "$carry/autogen/inputs.sha256"
(cd "$gen" && find . \( -name Makefile.in -o -name configure -o -name aclocal.m4 -o -name config.h.in \
   -o -path './build-aux/*' -o -path './m4/*' \) -type f | grep -v autom4te | tar -cf - -T - ) |
  tar -xpf - -C "$carry/autogen"

du_k() { du -sk "$@" | awk '{s += $1} END {print s}'; }
say "debroot: $(du -sh "$root" | cut -f1) unpacked, debroot.tar.gz $(du -sh "$carry/debroot.tar.gz" | cut -f1)"
say "runtime and autogen: $(( $(du_k "$carry/debroot.tar.gz" "$carry/env.sh" "$carry/autogen") / 1024 )) MiB" \
    "(+ working tree $(( $(cd "$top" && git ls-files -co --exclude-standard -z | du -ck --files0-from=- | tail -1 | cut -f1) / 1024 )) MiB; device limit 64 MiB)"

}

# --- 8. prebuild: the CUDA build bench/gpu/run.sh carries (see the top).
# Out of tree with a relative source path, configured once; make builds only
# the carried programs (librp and what they link), so a re-run after an edit
# recompiles only what changed.
prebuild_carry() {
  local arch=${RP_PREBUILD_ARCH:-90} b="$carry/build-sm${RP_PREBUILD_ARCH:-90}" progs p t0
  local nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$nvcc" ] || die "prebuild: no nvcc (PATH or /usr/local/cuda/bin); --no-prebuild skips the CUDA build"
  local cudadir; cudadir=$(cd "$(dirname "$nvcc")/.." && pwd)
  t0=$(date +%s)
  if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
    say "prebuild: autoreconf -fi in the tree (its generated files are git-ignored)"
    (cd "$top" && autoreconf -fi) > "$carry/prebuild.log" 2>&1 || { tail "$carry/prebuild.log" >&2; die "autoreconf failed"; }
  fi
  mkdir -p "$b"
  if [ ! -f "$b/Makefile" ]; then
    say "prebuild: configure --with-cuda=$cudadir --with-cuda-arch=$arch in ${b#"$top"/}"
    (cd "$b" && "$(realpath --relative-to="$b" "$top")/configure" -q --with-cuda="$cudadir" \
      --with-cuda-arch="$arch") >> "$carry/prebuild.log" 2>&1 || { tail -20 "$carry/prebuild.log" >&2; die "prebuild: configure failed"; }
  fi
  grep -q 'define RP_HAVE_CUDA 1' "$b/config.h" || die "prebuild: configure did not enable CUDA (see $b/config.log)"
  progs=$(grep -v '^#' "$top/bench/gpu/carried-programs.txt")
  say "prebuild: make -j$(nproc) $(echo "$progs" | wc -l) programs (log: .carry/prebuild.log; minutes on 2 busy cores, once)"
  # shellcheck disable=SC2086
  make -C "$b" -j"$(nproc)" $progs >> "$carry/prebuild.log" 2>&1 || { tail -30 "$carry/prebuild.log" >&2; die "prebuild: make failed"; }
  # the package: stripped copies, the manifest
  local pk; pk=$(mktemp -d)
  mkdir -p "$pk/build-sm$arch"
  for p in $progs; do
    mkdir -p "$pk/build-sm$arch/$(dirname "$p")"
    if is_elf_file "$b/$p"; then strip -g -o "$pk/build-sm$arch/$p" "$b/$p"; else cp -p "$b/$p" "$pk/build-sm$arch/$p"; fi
  done
  cp "$b/config.h" "$pk/build-sm$arch/"
  {
    echo "digest $(sh "$top/bench/gpu/tree-digest.sh" "$top")"
    echo "arch $arch"
    echo "nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n)"
    echo "configure --with-cuda=$cudadir --with-cuda-arch=$arch"
  } > "$pk/build-sm$arch/MANIFEST"
  tar -czf "$carry/build-sm$arch.tar.gz.new" -C "$pk" "build-sm$arch"
  mv "$carry/build-sm$arch.tar.gz.new" "$carry/build-sm$arch.tar.gz"
  rm -rf "$pk"
  say "prebuild: $(( $(date +%s) - t0 )) s; .carry/build-sm$arch.tar.gz $(du -k "$carry/build-sm$arch.tar.gz" | cut -f1) KiB" \
      "(digest $(sed -n 's/^digest //p' < <(tar -xzOf "$carry/build-sm$arch.tar.gz" "build-sm$arch/MANIFEST") | cut -c1-12))"
}
is_elf_file() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# what a call carries, against the device's 64 MiB
carried_size() {
  local k w
  k=$(du -ck "$carry/debroot.tar.gz" "$carry/env.sh" "$carry/autogen" "$carry"/build-sm*.tar.gz 2>/dev/null | tail -1 | cut -f1)
  w=$(cd "$top" && git ls-files -co --exclude-standard -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  say "carried: $(( k / 1024 )) MiB in .carry + working tree $(( w / 1024 )) MiB = $(( (k + w) / 1024 )) MiB (device limit 64 MiB)"
  [ $(( k + w )) -lt $(( 64 * 1024 )) ] || die "over the device's 64 MiB: carry less"
}

# --- 9. self-test: the carried runtime alone. In a private mount namespace
# (root only; nothing outside this process tree sees it) the system's Open MPI,
# hwloc, json-c, OpenBLAS, Check, libevent, PMIx, libgfortran, libquadmath and
# ssh are hidden behind /dev/null or an empty folder, the dynamic linker's
# cache is rebuilt without them (so env.sh's fallback path is exercised), and
# .carry/env.sh is sourced. Then, by default: the carried mpicc builds an MPI
# program (MPI-3 shared window) that the carried mpirun runs on 2 ranks, and
# `roundpipe train` (RP_SELFTEST_BIN, default build/src/roundpipe) trains the
# golden qwen3 fixture for 2 steps on 2 ranks. With a command after
# --selftest, that command runs there instead (e.g. bash bench/gpu/run.sh).
selftest_run() {
  [ "$(id -u)" = 0 ] || die "--selftest needs root (a private mount namespace)"
  command -v unshare >/dev/null || die "--selftest needs unshare (util-linux)"
  [ -f "$carry/env.sh" ] || die "no $carry/env.sh: run tools/gpu-runtime.sh first"
  # The script goes in by -c, not stdin: mpirun forwards stdin to rank 0.
  local script
  script=$(cat <<'NS'
set -eu
top=$1; carry=$2; shift 2
empty=$(mktemp -d /tmp/rp-selftest-empty.XXXXXX)
hidden=0
hide() {
  local p t
  for p in "$@"; do
    [ -e "$p" ] || continue
    t=$(readlink -f "$p")
    if [ -d "$t" ]; then mount --bind "$empty" "$t"; else mount --bind /dev/null "$t"; fi
    hidden=$((hidden + 1))
  done
}
lib=/usr/lib/x86_64-linux-gnu
hide $lib/openmpi $lib/openblas-openmp $lib/pmix2 $lib/hwloc /etc/openmpi /usr/share/openmpi \
  /usr/include/hwloc /usr/include/json-c /usr/include/x86_64-linux-gnu/openblas-openmp
for pat in libmpi libopen-pal libopen-rte libhwloc libjson-c libopenblas libblas liblapack \
           libevent libpmix libmunge libcheck libsubunit libpciaccess libgfortran libquadmath; do
  hide $lib/$pat*
done
hide /usr/bin/orterun /usr/bin/orted /usr/bin/opal_wrapper /usr/bin/ompi_info /usr/bin/ssh /usr/bin/rsh \
  /usr/include/hwloc.h /usr/include/check.h /usr/include/cblas.h \
  $lib/pkgconfig/hwloc.pc $lib/pkgconfig/json-c.pc $lib/pkgconfig/check.pc $lib/pkgconfig/openblas.pc
ldconfig -X -C "$empty.cache" 2>/dev/null
mount --bind "$empty.cache" /etc/ld.so.cache
echo "selftest: hid $hidden system paths; ld.so.cache rebuilt without them"
. "$carry/env.sh"
echo "selftest: mpirun = $(command -v mpirun), mpicc = $(command -v mpicc)"
if [ $# -gt 0 ]; then "$@"; exit $?; fi
t=$(mktemp -d)
cat > "$t/win.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Win w; int *p;
  MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &p, &w);
  *p = r + 1;
  MPI_Win_fence(0, w);
  int sum = 0;
  for (int i = 0; i < n; i++) { MPI_Aint sz; int du; int *q; MPI_Win_shared_query(w, i, &sz, &du, &q); sum += *q; }
  char v[MPI_MAX_LIBRARY_VERSION_STRING]; int len; MPI_Get_library_version(v, &len);
  if (r == 0) printf("selftest: %d ranks, shared-window sum %d (expect %d); %.40s\n", n, sum, n * (n + 1) / 2, v);
  MPI_Win_free(&w); MPI_Finalize(); return sum == n * (n + 1) / 2 ? 0 : 1;
}
C
mpicc -o "$t/win" "$t/win.c"
echo "selftest: $t/win links: $(ldd "$t/win" | awk '/libmpi|libopen-pal|libhwloc|libevent/ {print $3}' | tr '\n' ' ')"
mpirun -np 2 "$t/win"
bin=${RP_SELFTEST_BIN:-$top/build/src/roundpipe}
fx=$top/mpi-tests/fixtures/golden/qwen3
if [ -x "$bin" ]; then
  echo "selftest: $bin resolves: $(ldd "$bin" | awk '/=>/ && $3 !~ /^\/(usr\/)?lib/ {print $1 "=" $3}' | tr '\n' ' ')"
  ldd "$bin" | grep 'not found' > /dev/null && { ldd "$bin"; exit 1; }
  # shellcheck disable=SC2046
  mpirun -np 2 "$bin" train --model "$fx/model" --data "$fx/data.npy" --loss-mask "$fx/mask.npy" \
    $(cat "$fx/args.txt" | sed 's/--steps [0-9]*//') --steps 2 --progress none --log "$t/log.jsonl"
  echo "selftest: losses: $(cut -d, -f1-2 "$t/log.jsonl" | tr '\n' ' ')"
  echo "selftest: expected: $(head -2 "$fx/expected.jsonl" | cut -d, -f1-2 | tr '\n' ' ')"
else
  echo "selftest: no roundpipe binary at $bin (set RP_SELFTEST_BIN); skipped the training run"
fi
rm -rf "$t"
echo "selftest: passed"
NS
)
  unshare -m --propagation private bash -c "$script" selftest "$top" "$carry" "${selftest_cmd[@]}" </dev/null
}

[ $prepare = yes ] && prepare_carry
[ $prebuild = yes ] && prebuild_carry
[ $prepare = yes ] && carried_size
[ $selftest = yes ] && selftest_run
exit 0
