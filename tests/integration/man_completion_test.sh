#!/usr/bin/env bash
# dtrun(1) and the bash completion as the build writes them (build/docs/man/, target dtrun_man):
#   bash tests/integration/man_completion_test.sh /abs/path/to/dtrun
# Checks: both are what this dtrun prints now (not a stale build); the page renders without a
# warning (groff -ww, man --warnings); every option that `dtrun --help` and each `dtrun <command>
# --help` list, in every spelling, is in the rendered page and offered by the completion for its
# command, and every command has its section; and the completion, sourced into a real bash and
# called as bash calls it (COMP_WORDS, COMP_CWORD, then COMPREPLY), completes an option prefix, an
# option's words after `=` and after a space (as bash splits them and whole), a comma list's next
# item, the commands, a command's own options and words, and files for the program and its
# arguments. (Each word offered is accepted by the parser: tests/launcher/option_values_test.cpp.)
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" man_completion_test "$@"
for tool in groff man; do
  command -v "$tool" >/dev/null || die "$tool not found: scripts/setup.sh installs groff-base and man-db"
done
page=$BUILD/docs/man/dtrun.1
script=$BUILD/docs/man/dtrun.bash
[[ -f $page && -f $script ]] ||
  die "no $page or $script: build them with ninja -C $BUILD dtrun_man (part of all)"
cases=0

# 1. Written by this dtrun: its generated sections are in the page; the script is its output.
"$DTRUN" --print-man >"$work/sections" || die "dtrun --print-man exited $?"
"$DTRUN" completion bash >"$work/completion" || die "dtrun completion bash exited $?"
grep -qx '\.SH OPTIONS' "$work/sections" || die "dtrun --print-man has no OPTIONS: $(head -c 300 "$work/sections")"
# The page is the template around the sections, so the sections appear in it whole.
"$PYTHON" - "$page" "$work/sections" <<'PY' || die "$page is not this dtrun's (rebuild: ninja -C $BUILD dtrun_man)"
import sys
sys.exit(0 if open(sys.argv[2]).read() in open(sys.argv[1]).read() else 1)
PY
cmp -s "$script" "$work/completion" || die "$script differs from dtrun completion bash (rebuild)"
# (Outside the template's comments, which name them.)
if grep -v '^\.\\"' "$page" | grep -q '@DTRUN'; then
  die "$page keeps a template placeholder: $(grep -n '@DTRUN' "$page")"
fi
pass "dtrun.1 holds dtrun --print-man's sections; dtrun.bash is dtrun completion bash"
cases=$((cases + 1))

# 2. Renders without a warning, both as groff checks it and as man reads it.
groff -man -ww -z "$page" 2>"$work/groff.err" || die "groff exited $?: $(cat "$work/groff.err")"
[[ ! -s $work/groff.err ]] || die "groff -man -ww warns: $(head -n 5 "$work/groff.err")"
LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings -l "$page" >"$work/man.txt" 2>"$work/man.err" ||
  die "man -l exited $?: $(cat "$work/man.err")"
[[ ! -s $work/man.err ]] || die "man --warnings -l warns: $(head -n 5 "$work/man.err")"
if ! grep -q '^NAME' "$work/man.txt" || ! grep -q 'EXIT STATUS' "$work/man.txt"; then
  die "man -l rendered no NAME or EXIT STATUS: $(head -n 5 "$work/man.txt")"
fi
# Every exit code docs/exit-codes.md lists is in EXIT STATUS.
for code in $(sed -n 's/^| \([0-9][0-9]*\) |.*/\1/p' "$ROOT/docs/exit-codes.md"); do
  sed -n '/^EXIT STATUS/,/^EXAMPLES/p' "$work/man.txt" | grep -qE "^ +$code\b" ||
    note_fail "exit code $code (docs/exit-codes.md) is not in the page's EXIT STATUS"
done
pass "groff -ww and man --warnings: no warning; EXIT STATUS has docs/exit-codes.md's codes"
cases=$((cases + 1))

# 3. Every option of every command, as --help lists it: "  -r,--redirects TEXT ..." -> -r
# --redirects. Commands from the top level's "Subcommands:" list.
options_of() {  # <help file>: one spelling per line
  sed -n 's/^  \(-[^ ]*\).*/\1/p' "$1" | tr ',' '\n' | sed 's/=.*//' | sort -u
}
"$DTRUN" --help >"$work/help" || die "dtrun --help exited $?"
commands=$(sed -n '/^Subcommands:/,/^$/p' "$work/help" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
for expected in store report bundle gpus completion; do
  grep -qx "$expected" <<<"$commands" || die "dtrun --help lists no '$expected' command: $commands"
done
# Plain text, one line per paragraph, for a search that hyphenation cannot break.
groff -man -Tascii -P-cbou -rLL=1000n "$page" 2>/dev/null >"$work/page.txt"
listed=0
# shellcheck disable=SC1090
source "$script"
for command in "" $commands; do
  if [[ -n $command ]]; then
    "$DTRUN" "$command" --help >"$work/help" || die "dtrun $command --help exited $?"
    grep -qF "dtrun $command [options]" "$work/page.txt" || note_fail "the page has no section 'dtrun $command [options]'"
  fi
  _dtrun_options "$command"
  offered=" $REPLY "
  while IFS= read -r option; do
    listed=$((listed + 1))
    grep -qE -- "(^|[^A-Za-z0-9_-])$option([^A-Za-z0-9_-]|$)" "$work/page.txt" ||
      note_fail "dtrun ${command:+$command }$option is not in the man page"
    [[ $offered == *" $option "* ]] ||
      note_fail "the completion does not offer $option for dtrun${command:+ $command}"
  done < <(options_of "$work/help")
done
((fail_count == 0)) || die "$fail_count options missing (see above)"
((listed > 140)) || die "only $listed option spellings found in --help: the parse of it broke"
pass "$listed option spellings of $(wc -w <<<"$commands") commands and the launch: in the page and the completion"
cases=$((cases + 1))

# 4. The completion as bash calls it: `complete_line <words...>` sets COMP_WORDS to the words
# (the last is the one under the cursor) and prints COMPREPLY sorted, one per line.
mkdir "$work/cwd" && touch "$work/cwd/train.py" "$work/cwd/trainer.sh" "$work/cwd/other.txt"
complete_line() {
  (
    cd "$work/cwd"
    # shellcheck disable=SC1090
    source "$script"
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    _dtrun dtrun "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    ((${#COMPREPLY[@]} == 0)) || printf '%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort
  )
}
expect() {  # <expected lines, ' '-separated> -- <words...>
  local want=$1 got
  shift 2
  got=$(complete_line "$@" | tr '\n' ' ' | sed 's/ $//')
  if [[ $got == "$want" ]]; then
    cases=$((cases + 1))
  else
    note_fail "completing '$*': got '$got', expected '$want'"
  fi
}
complete -p dtrun >/dev/null 2>&1 || die "sourcing $script registered no completion for dtrun"
expect "--rdzv_backend" -- dtrun --rdzv_b
expect "--rdzv-backend" -- dtrun --rdzv-b
expect "c10d etcd static" -- dtrun --rdzv_backend ""
expect "c10d etcd static" -- dtrun --rdzv_backend "="                    # bash's split at '='
expect "static" -- dtrun --rdzv_backend "=" st
expect "--rdzv_backend=static" -- dtrun --rdzv_backend=st               # no split
expect "0 1 2 3" -- dtrun --nproc_per_node=2 -r ""
expect "auto off on" -- dtrun --standalone --python-hook ""
expect "local,network" -- dtrun --health_checks "=" local,ne
expect "--health_checks=gpus,store" -- dtrun --health_checks=gpus,st
expect "core-complex exclusive node none socket" -- dtrun --numa_binding ""
expect "stacks store" -- dtrun --standalone s
expect "store" -- dtrun sto
expect "train.py trainer.sh" -- dtrun --nproc_per_node 2 tra           # the program: files
expect "other.txt" -- dtrun train.py --rdzv_backend "=" o              # its arguments: files
expect "other.txt" -- dtrun -- o
expect "critical debug error info off trace warn" -- dtrun store --log-level ""
expect "--port --port-file --port_file" -- dtrun store --port
expect "bash" -- dtrun completion ""
expect "--html" -- dtrun report --ht
expect "--json" -- dtrun gpus --j
expect "" -- dtrun --bogus_option_x
end_test "$cases cases"
