#!/bin/sh
# Configure and build roundpipe out of tree in ./build (re-using it when it
# exists). Extra arguments go to configure. The tools' output goes to
# build/build.log and is shown only when a step fails.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
mkdir -p build
log="$top/build/build.log"
: > "$log"
step() {
  if ! "$@" >> "$log" 2>&1; then
    echo "roundpipe: '$*' failed; the last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
echo "roundpipe: building in build/ (log: build/build.log)"
if [ ! -x configure ] || [ configure.ac -nt configure ]; then step autoreconf -fi; fi
cd build
[ -f Makefile ] || step ../configure "$@"
step make -j"$(nproc)"
