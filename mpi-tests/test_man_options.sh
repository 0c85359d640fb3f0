#!/bin/sh
# Proves: every option each command's --help lists (train, plan, simulate,
# topology) has its entry in man/roundpipe.1 (written there as \-\-name), and
# the check itself sees a missing one (a made-up option is not found).
# Ranks: 1 (no MPI).
set -u
. "$(dirname "$0")/testlib.sh"
man="$src/man/roundpipe.1"
in_man() { # OPTION
  n=$(printf '%s\n' "${1#--}" | sed 's/-/\\\\-/g')
  grep -q -- "\\\\-\\\\-$n\\b" "$man"
}
for c in train plan simulate topology; do
  "$bin" "$c" --help > "$tmp/$c.txt" 2>&1
  grep -o -- '--[a-z][a-z0-9-]*' "$tmp/$c.txt" | sort -u > "$tmp/$c.opts"
  [ -s "$tmp/$c.opts" ] && ok || bad "$c --help lists no option"
  while read -r o; do
    in_man "$o" && ok || bad "roundpipe $c $o is not in man/roundpipe.1"
  done < "$tmp/$c.opts"
done
in_man --not-an-option-of-roundpipe && bad "the check finds an option that is not there" || ok
finish
