#!/bin/bash
# Random configurations, 1 rank against 2-4: draws N model configurations and
# training option sets from a seed (mpi-tests/random_configs_lib.sh, which the
# suite's test_random_configs.sh also uses), trains each on 1 rank and on 2, 3
# or 4 ranks (and, when drawn, resumes a checkpoint on another rank count) and
# reports each run whose losses, gradient norms or saved files differ, that
# crashed or hung, and the combinations the CLI refused. See tools/README.md.
#
#   tools/random-configs.sh --seed S --count N [--first I] [--keep DIR] [--build DIR]
#
# Exit status: 0 when every configuration gave the same bits or was refused on
# both sides, 1 when one differed, crashed, hung or was refused on one side only.
set -u
seed=1 count=10 first=0 keep="" builddir=""
while [ $# -gt 0 ]; do
  case $1 in
    --seed) seed=$2; shift 2 ;;
    --count) count=$2; shift 2 ;;
    --first) first=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --build) builddir=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "random-configs.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$seed$count$first" in
  *[!0-9]*) echo "random-configs.sh: --seed, --count and --first take whole numbers" >&2; exit 2 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
[ -n "$builddir" ] || builddir=$top/build
. "$top/mpi-tests/random_configs_lib.sh"
rc_bin=$builddir/src/roundpipe
rc_data=$builddir/examples/data/gnu-licenses.npy
rc_fixtures=$top/mpi-tests/fixtures
rc_topologies=$rc_fixtures/topology
[ -x "$rc_bin" ] && [ -f "$rc_data" ] ||
  { echo "random-configs.sh: no $rc_bin or $rc_data (build first: sh tools/build.sh)" >&2; exit 2; }
rc_tokens=$(head -c 128 "$rc_data" | LC_ALL=C sed -n "s/.*'shape': (\([0-9]*\),).*/\1/p")
rc_mpirun="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && rc_mpirun="$rc_mpirun --allow-run-as-root"
# another OpenBLAS build (tools/blas-builds.sh) reaches the ranks
[ -n "${LD_LIBRARY_PATH:-}" ] && rc_mpirun="$rc_mpirun -x LD_LIBRARY_PATH"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# a rank that exits 0 has finalized: no false "exiting improperly" (mpi-tests/testlib.sh)
export OMPI_MCA_orte_allowed_exit_without_sync=1
unset OMP_NUM_THREADS
# up to 4 ranks x 2 threads on a machine of 2 cores: OpenMP workers spinning at
# their barriers made a run of one-token tiles 200x slower (a false "hang");
# sleeping ones change nothing but the time
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
rc_timeout=${RC_TIMEOUT:-60}
if [ -n "$keep" ]; then mkdir -p "$keep" && root=$(cd "$keep" && pwd) || exit 2
else root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
fi

# the loop in a function, read whole before it runs: bash reads a script as
# it goes, and a campaign outlives edits of this file
main() {
  same=0 refused=0 bad=0
  i=$first
  while [ "$i" -lt $((first + count)) ]; do
    dir=$root/s$seed-$i
    rm -rf "$dir"; mkdir -p "$dir"
    rc_draw "$seed" "$i" "$dir"
    echo "== seed $seed config $i: $rc_desc"
    echo "   (again: tools/random-configs.sh --seed $seed --first $i --count 1 --keep DIR)"
    rc_commands "$dir" | sed 's/^/   $ /'
    rc_check "$dir"
    case $rc_verdict in
      same) same=$((same + 1)); echo "   same bits" ;;
      refused) refused=$((refused + 1)); echo "   refused: $rc_why" ;;
      *) bad=$((bad + 1)); echo "   FINDING ($rc_verdict): $rc_why"
         for f in one many resumed; do
           [ -f "$dir/$f.txt" ] && grep -v -E '^\[roundpipe [0-9]+\] info:' "$dir/$f.txt" | head -n 8 | sed "s/^/   $f: /"
         done
         [ "$rc_verdict" = differ ] && diff "$dir/one.cut" "$dir/many.cut" 2>/dev/null | head -n 6 | sed 's/^/   /' ;;
    esac
    [ -n "$keep" ] || rm -rf "$dir"
    i=$((i + 1))
  done
  echo "random-configs: seed $seed, configs $first..$((first + count - 1)): $same same, $refused refused, $bad findings"
  [ $bad = 0 ]
}
main
exit
