#!/bin/sh
# Proves: every option each command's --help lists (train, plan, simulate,
# topology) has its entry in man/roundpipe.1 (written there as \-\-name), and
# the check itself sees a missing one (a made-up option is not found); every
# default --help states as a number, a one-letter name (default B) or one of
# the option's listed values (auto|line|none) is the default its man entry
# states (in the command's section, else TRAIN OPTIONS), and that check sees
# a wrong one; every environment variable the sources read with getenv is in
# the ENVIRONMENT section (but for mpirun's own), and every CUDA
# path RP_ALLOW_UNPROVEN_CUDA knows in its entry; an unknown option exits
# with the status EXIT STATUS (and the tools' ERRORS) give; the man pages
# render without words run together (with groff); roundpipe-prepare's and
# roundpipe-plot's --help options are in their pages (with python3); every
# number an option's --help gives is in its man entry.
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

# man_entry SECTION OPTION: the text of OPTION's entry in SECTION of the man
# page (its .TP head to the next .TP, .PP or .SH), roff markup removed
man_entry() {
  awk -v sec="$1" -v opt="$2" '
    function flush() { if (keep) print text; keep = 0; text = "" }
    /^\.SH/ { flush(); s = $0; sub(/^\.SH */, "", s); gsub(/"/, "", s); insec = (s == sec); next }
    /^\.(TP|PP|LP|P)( |$)/ { flush(); head = ($1 == ".TP"); next }
    /^\.TQ/ { head = 1; next }
    !insec { next }
    { line = $0; gsub(/\\-/, "-", line); gsub(/\\f[BIRP]/, "", line); gsub(/\\&|\\\(dq|"/, "", line)
      sub(/^\.[A-Z][A-Z]? */, "", line)
      if (head) { head = 0; if (index(" " line " ", "--" opt " ") || index(" " line ",", "--" opt ",")) keep = 1 }
      text = text " " line }
    END { flush() }' "$man"
}
# help_defaults COMMAND: "option default" for each default --help states in
# a form the man page can be held to
help_defaults() {
  awk '
    /^  --/ { if (o != "") print o "\t" m "\t" t; o = $1; m = ($2 ~ /^[^ ]*\|/) ? $2 : "-"; t = $0; next }
    /^     / { if (o != "") t = t " " $0; next }
    { if (o != "") print o "\t" m "\t" t; o = "" }
    END { if (o != "") print o "\t" m "\t" t }' "$tmp/$1.txt" |
  while IFS="$(printf '\t')" read -r o m t; do
    t=$(printf '%s\n' "$t" | tr -s ' ')
    v=$(printf '%s\n' "$t" | sed -n 's/.*[(;] *default:\{0,1\} \([^ ,;:)]*\).*/\1/p')
    [ -n "$v" ] || v=$(printf '%s\n' "$t" | sed -n 's/.* \([^ (]*\) (\(the \)\{0,1\}default[,;)].*/\1/p')
    [ -n "$v" ] || continue
    case "$v" in
      [A-Z]) ;;                                          # a name: default B
      *[!0-9.e+-]*) case "|$m|" in *"|$v|"*) ;; *) continue ;; esac ;;  # a listed value
      *) ;;                                              # a number
    esac
    printf '%s %s\n' "${o#--}" "$v"
  done
}
# man_states_default TEXT VALUE: TEXT gives VALUE as the default
man_states_default() {
  v=$(printf '%s' "$2" | sed 's/[.+]/\\&/g')
  after='([^[:alnum:].]|\.([^0-9]|$)|$)'
  printf '%s\n' "$1" | grep -Eq "[Dd]efaults?.{0,40}[^[:alnum:].]$v$after|(^|[^[:alnum:].])$v$after.{0,30}default"
}
for c in train plan simulate; do
  case $c in train) sec="TRAIN OPTIONS" ;; *) sec="PLAN AND SIMULATE" ;; esac
  help_defaults "$c" > "$tmp/$c.defaults"
  [ -s "$tmp/$c.defaults" ] && ok || bad "$c --help states no default the check reads"
  while read -r o v; do
    e=$(man_entry "$sec" "$o")
    # an entry that takes train's ("same names, values and defaults") is held to train's
    case "$e" in "" | *"values and defaults"*) e="$e $(man_entry "TRAIN OPTIONS" "$o")" ;; esac
    man_states_default "$e" "$v" && ok ||
      bad "roundpipe $c --$o: --help says default $v, its man/roundpipe.1 entry does not (${e:-no entry})"
  done < "$tmp/$c.defaults"
done
# numbers_of TEXT: the numbers in TEXT, one a line (1e-8 gives 1e and 8 alike
# in --help and the page, so they compare)
numbers_of() {
  printf '%s\n' "$1" | tr -c 'A-Za-z0-9_.\n' ' ' | tr ' ' '\n' | sed 's/\.$//' |
    grep -E '^[0-9]+(\.[0-9]+)?$' | sort -u
}
# every number an option's --help gives (but 0, 1, 2) is in its man entry
# (the command's section and train's): a figure changed in one and not the
# other shows (plan's --speculative-update said 24 bytes, the page 12)
for c in train plan simulate; do
  case $c in train) sec="TRAIN OPTIONS" ;; *) sec="PLAN AND SIMULATE" ;; esac
  awk '
    /^  --/ { if (o != "") print o "\t" t; o = $1; t = $0; next }
    /^     / { if (o != "") t = t " " $0; next }
    { if (o != "") print o "\t" t; o = "" }
    END { if (o != "") print o "\t" t }' "$tmp/$c.txt" > "$tmp/$c.entries"
  while IFS="$(printf '\t')" read -r o t; do
    o=${o#--}
    e="$(man_entry "$sec" "$o") $(man_entry "TRAIN OPTIONS" "$o")"
    have=$(numbers_of "$e")
    for n in $(numbers_of "${t#*--$o}"); do
      case $n in 0 | 1 | 2) continue ;; esac
      printf '%s\n' "$have" | grep -qx "$n" && ok ||
        bad "roundpipe $c --$o: --help says $n, its man/roundpipe.1 entry does not"
    done
  done < "$tmp/$c.entries"
done
numbers_of "backup's 24 bytes, 5% + 512 MiB, 1e-8, sm_80" | tr '\n' ' ' | grep -qx '24 5 512 8 ' && ok ||
  bad "numbers_of reads $(numbers_of "backup's 24 bytes, 5% + 512 MiB, 1e-8, sm_80" | tr '\n' ' ')"
e=$(man_entry "TRAIN OPTIONS" seq-len)
man_states_default "$e" 1024 && ok || bad "the default check misses --seq-len's 1024"
man_states_default "$e" 2048 && bad "the default check takes 2048 for --seq-len's default" || ok
e=$(man_entry "TRAIN OPTIONS" weight-decay)
man_states_default "$e" 0 && bad "the default check takes 0 for 0.01" || ok

# a usage error exits as EXIT STATUS says
exit_section=$(awk '/^\.SH/ { on = ($0 ~ /EXIT STATUS/) } on' "$man" | tr -s ' \n' '  ')
for c in train plan simulate topology; do
  "$bin" "$c" --not-an-option > /dev/null 2>&1; rc=$?
  printf '%s\n' "$exit_section" | grep -q "$rc for a usage error" && ok ||
    bad "roundpipe $c exits $rc on an unknown option; EXIT STATUS does not say $rc for a usage error"
done

# the environment: every variable the library reads is in ENVIRONMENT, but
# for Open MPI's own, which mpirun sets
env_section=$(awk '/^\.SH/ { on = ($0 ~ /ENVIRONMENT/) } on' "$man")
for v in $(grep -rhoE '(getenv|parse_env)\("[A-Z_0-9]+"' "$src/src" | sed 's/.*("//; s/"//' | sort -u); do
  case $v in OMPI_*) continue ;; esac
  printf '%s\n' "$env_section" | grep -q "^\.B $v\$" && ok || bad "$v (read by src/) is not in roundpipe(1)'s ENVIRONMENT"
done
# every CUDA path RP_ALLOW_UNPROVEN_CUDA names (the list its refusal gives) is
# described in its ENVIRONMENT entry
RP_ALLOW_UNPROVEN_CUDA=not-a-path "$bin" plan --layers "$src/bench/paper/qwen3-1.7b.txt" > "$tmp/unproven.txt" 2>&1
names=$(sed -n 's/.*(known: \(.*\), or 1 for all.*/\1/p' "$tmp/unproven.txt" | tr -d ,)
[ -n "$names" ] && ok || { bad "no list of the unproven CUDA paths"; cat "$tmp/unproven.txt"; }
unproven_entry=$(printf '%s\n' "$env_section" | awk '/^\.B RP_ALLOW_UNPROVEN_CUDA$/ { on = 1; next } on && /^\.TP/ { exit } on' | sed 's/\\-/-/g')
for n in $names; do
  printf '%s\n' "$unproven_entry" | grep -q "^\.B $n\$" && ok || bad "RP_ALLOW_UNPROVEN_CUDA's path $n is not described in roundpipe(1)'s ENVIRONMENT"
done
# the pages render with their words apart: a .BR or .IR line with plain text
# after its arguments runs that text together ("--shuffle;adifferenceis...")
if command -v groff > /dev/null; then
  for p in "$src"/man/*.[135]; do
    run=$(groff -man -Tascii -P-cbou "$p" 2>/dev/null |
      grep -oE '[A-Za-z]{22,}|(^|[^_a-z])[a-z]{4,}[,;][a-z]{4,}([^_}a-z]|$)' | head -3 | tr '\n' ' ')
    [ -z "$run" ] && ok || bad "$(basename "$p") renders words run together: $run"
  done
  printf '.TH T 1\n.SH S\nwith\n.BR \\-\\-shuffle ; a difference is refused naming the field\n' > "$tmp/run.1"
  groff -man -Tascii -P-cbou "$tmp/run.1" 2>/dev/null | grep -qE '[A-Za-z]{22,}' && ok ||
    bad "the check does not see words run together"
else
  echo "SKIP part: the man pages' rendering needs groff"
fi
# the Python tools installed with roundpipe: every option of their --help is
# in their man page, and --pack's rows are S tokens, as the page and
# train's samples have them (argparse alone: no package needed)
if command -v python3 > /dev/null; then
  for t in roundpipe-prepare roundpipe-plot; do
    python3 "$src/scripts/$t" --help > "$tmp/$t.txt" 2>&1 && ok || { bad "$t --help"; cat "$tmp/$t.txt"; }
    for o in $(grep -o -- '--[a-z][a-z0-9-]*' "$tmp/$t.txt" | sort -u); do
      [ "$o" = --help ] && continue
      n=$(printf '%s\n' "${o#--}" | sed 's/-/\\\\-/g')
      grep -q -- "\\\\-\\\\-$n\\b" "$src/man/$t.1" && ok || bad "$t $o is not in man/$t.1"
    done
  done
  # the exit status of a usage error is the one the page's ERRORS gives
  for t in roundpipe-prepare roundpipe-plot; do
    python3 "$src/scripts/$t" --not-an-option > /dev/null 2>&1; rc=$?
    sed -n '/^\.SH ERRORS/,/^\.SH/p' "$src/man/$t.1" | tr -s ' \n' '  ' | grep -q "exit status $rc\b" && ok ||
      bad "$t exits $rc on an unknown option; man/$t.1's ERRORS does not say exit status $rc"
  done
  tr -s ' \n' '  ' < "$tmp/roundpipe-prepare.txt" | grep -q -- '--pack S pack documents into rows of S tokens' && ok ||
    bad "roundpipe-prepare --help's --pack does not say rows of S tokens (man/roundpipe-prepare.1)"
else
  echo "SKIP part: the Python tools' --help needs python3"
fi
finish
