#!/bin/sh
# Proves: libroundpipe.so exports exactly the functions include/roundpipe.h
# declares, each marked RP_API: no internal symbol (rp_store_create, the
# kernels, the static CUDA runtime) leaks out, and no public function is
# missing. Skips (77) in a build without a shared library.
set -u
. "$(dirname "$0")/testlib.sh"
header="$src/include/roundpipe.h"
lib=""
for d in "$build/.libs" "$build/src/.libs"; do
  [ -f "$d/libroundpipe.so" ] && { lib="$d/libroundpipe.so"; break; }
done
[ -n "$lib" ] || { echo "SKIP: no libroundpipe.so under $build (a static-only build)"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm not found"; exit 77; }

# the functions the header declares: a line that starts with a type and
# names rp_something( (typedefs and macros excluded)
grep -E '^[A-Za-z].*[ *](rp_[a-z0-9_]+)\(' "$header" | grep -vE '^(typedef|#)' > "$tmp/decls"
sed -E 's/.*[ *](rp_[a-z0-9_]+)\(.*/\1/' "$tmp/decls" | sort -u > "$tmp/public"
[ -s "$tmp/public" ] && ok || bad "no function declarations found in $header"
# every declaration carries the export macro
if grep -v '^RP_API ' "$tmp/decls" > "$tmp/unmarked"; then
  bad "declared without RP_API in roundpipe.h:"; cat "$tmp/unmarked"
else ok; fi

# defined dynamic symbols, without the linker's own markers
nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' |
  grep -vxE '_init|_fini|_edata|_end|__bss_start|_IO_stdin_used' | sort -u > "$tmp/exported"
if comm -13 "$tmp/public" "$tmp/exported" > "$tmp/extra" && [ -s "$tmp/extra" ]; then
  bad "$(wc -l < "$tmp/extra") symbol(s) exported by $lib that roundpipe.h does not declare, e.g.:"
  head -n 20 "$tmp/extra"
else ok; fi
if comm -23 "$tmp/public" "$tmp/exported" > "$tmp/missing" && [ -s "$tmp/missing" ]; then
  bad "public function(s) not exported by $lib:"; cat "$tmp/missing"
else ok; fi
finish
