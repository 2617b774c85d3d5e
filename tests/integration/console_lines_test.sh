#!/usr/bin/env bash
# Whole lines on the console in every mode: 8 ranks each print 200 lines of 0.5-2 KB at once
# (workers/long_lines.py: python -u writes a line's text and its newline separately, some lines
# come in several pieces). Every console line must be exactly one rank's line (its checksum
# holds), none lost, with and without --tee; per-rank logs keep the exact bytes. Then '\r'
# progress bars, a 200 KB line (split, never lost), --log-line-prefix-template and
# --duplicate-stdout-filters.
#   bash tests/integration/console_lines_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" console_lines_test "$@"
WORKER=$HERE/workers/long_lines.py
export PYTHON_EXEC=$PYTHON

# check_console <console file> <prefix regex> <label> [<lines expected>]: every "rank R line N"
# line is whole (a "\r\n" end counts as "\n"), and as many as expected (default 8 x 200) came.
check_console() {
  $PYTHON - "$1" "$2" "${4:-1600}" <<'PY' || note_fail "$3"
import re, sys, zlib
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
prefix = re.compile(sys.argv[2])
seen, bad = set(), []
for line in text.split("\n"):
    if " line " not in line or "crc=" not in line:
        continue
    line = line[:-1] if line.endswith("\r") else line
    m = prefix.match(line)
    body = line[m.end():] if m else line
    parts = re.fullmatch(r"(rank (\d+) line (\d+) x+) crc=([0-9a-f]{8})", body)
    if not parts or f"{zlib.crc32(parts.group(1).encode()):08x}" != parts.group(4):
        bad.append(line[:120])
        continue
    seen.add((int(parts.group(2)), int(parts.group(3))))
missing = int(sys.argv[3]) - len(seen)
if bad or missing:
    print(f"{len(bad)} mixed or broken console lines (first: {bad[:1]}), {missing} lines missing",
          file=sys.stderr)
    sys.exit(1)
PY
}

for mode in plain tee; do
  flags=()
  [[ $mode == tee ]] && flags=(--tee=3)
  rc=0
  timeout "$LIMIT" "$DTRUN" --nproc_per_node=8 "${flags[@]}" --log_dir="$work/logs" --rdzv_id="$mode" \
    "$WORKER" >"$work/$mode.out" 2>"$work/$mode.err" || rc=$?
  [[ $rc -eq 0 ]] || { tail -5 "$work/$mode.err" >&2; note_fail "$mode: dtrun exited $rc"; continue; }
  if [[ $mode == tee ]]; then
    check_console "$work/$mode.out" '\[default[0-7]\]:' "tee: the console has mixed or missing lines"
  else
    check_console "$work/$mode.out" '' "plain: the console has mixed or missing lines"
  fi
  for r in 0 7; do
    log=$work/logs/$mode/attempt_0/$r/stdout.log
    [[ $(grep -c "^rank $r line " "$log") -eq 200 ]] || note_fail "$mode: rank $r's log lacks lines"
  done
done
[[ $fail_count -ne 0 ]] || pass "8 ranks x 200 long lines: whole on the console, plain and with --tee"

before=$fail_count
# Lines still being written when the quiet timer fires for an earlier line: each line's rest
# follows its first 100 bytes 3 ms later (well inside the 200 ms), so no line may be cut. And "\r\n" line ends:
# one line each, not a line and an empty prefixed one.
for mode in gap gap-tee crlf-tee; do
  flags=()
  [[ $mode == *-tee ]] && flags=(--tee=3)
  envs=(GAP_MS=3)
  [[ $mode == crlf-* ]] && envs=(CRLF=1)
  rc=0
  env "${envs[@]}" LINES=300 timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 "${flags[@]}" \
    --log_dir="$work/logs" --rdzv_id="$mode" "$WORKER" >"$work/$mode.out" 2>"$work/$mode.err" || rc=$?
  [[ $rc -eq 0 ]] || { tail -5 "$work/$mode.err" >&2; note_fail "$mode: dtrun exited $rc"; continue; }
  check_console "$work/$mode.out" '\[default[01]\]:' "$mode: the console has cut, mixed or missing lines" 600
  if grep -aq $'\r\\[default' "$work/$mode.out"; then
    note_fail "$mode: a \\r\\n line end became a line and an empty prefixed one"
  fi
done
[[ $fail_count -ne $before ]] || pass "lines written in pieces ms apart stay whole; \\r\\n ends one line"

before=$fail_count
# '\r' progress bars per rank, and a line far longer than the bound (64 KiB): split, not lost.
rc=0
PROGRESS=1 LINES=1 HUGE=200000 timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --tee=3 \
  --log_dir="$work/logs" --rdzv_id=bars "$WORKER" >"$work/bars.out" 2>/dev/null || rc=$?
[[ $rc -eq 0 ]] || note_fail "bars: dtrun exited $rc"
for r in 0 1; do
  grep -q "\[default$r\]:rank $r progress 100%" "$work/bars.out" || note_fail "bars: rank $r's progress bar lost its last redraw"
  # '\r' ends a console line too: another rank's line may follow a redraw on the same '\n' line.
  ys=$(tr '\r' '\n' <"$work/bars.out" | grep -a "^\[default$r\]:" | grep -ao "y" | wc -l)
  [[ $ys -eq 200000 ]] || note_fail "bars: rank $r's 200 KB line arrived with $ys of 200000 bytes"
  cmp -s <(grep -a "huge" "$work/logs/bars/attempt_0/$r/stdout.log" | tr -d '\n') \
    <(printf 'rank %d huge %s' "$r" "$(printf 'y%.0s' $(seq 200000))") ||
    note_fail "bars: rank $r's log does not hold its huge line exactly"
done
[[ $fail_count -ne $before ]] || pass "progress bars and a 200 KB line"

before=$fail_count
# An unfinished line whose writer still runs stays whole (Python's print writes each argument on
# its own; here a spin of 1-2 s between two pieces, as a loaded machine may make of a slow repr);
# one whose writer waits (a prompt) goes out on its own long before the rest comes.
cat >"$work/pieces.sh" <<'SH'
#!/bin/bash
printf 'rank %s has data ' "$RANK"
end=$((SECONDS + 2))
while ((SECONDS < end)); do :; done
printf 'tensor(0.)\n'
printf 'rank %s prompt> ' "$RANK"
sleep 3
printf 'answered\n'
SH
chmod +x "$work/pieces.sh"
rc=0
timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --tee=3 --log_dir="$work/logs" --rdzv_id=pieces \
  --no_python "$work/pieces.sh" >"$work/pieces.out" 2>/dev/null || rc=$?
[[ $rc -eq 0 ]] || note_fail "pieces: dtrun exited $rc"
for r in 0 1; do
  grep -qxF "[default$r]:rank $r has data tensor(0.)" "$work/pieces.out" ||
    note_fail "pieces: rank $r's line written in two pieces 1-2 s apart was cut: $(grep -F "[default$r]" "$work/pieces.out" | head -3)"
  grep -qxF "[default$r]:rank $r prompt> " "$work/pieces.out" && grep -qxF "[default$r]:answered" "$work/pieces.out" ||
    note_fail "pieces: rank $r's prompt did not go out on its own: $(grep -F "[default$r]" "$work/pieces.out" | tail -2)"
done
[[ $fail_count -ne $before ]] || pass "a line written in pieces by a running worker stays whole; a waiting worker's prompt goes out"

before=$fail_count
# torchrun's --log-line-prefix-template and --duplicate-stdout-filters.
rc=0
CRLF=1 LINES=3 timeout "$LIMIT" "$DTRUN" --nproc_per_node=2 --tee=1 --log_dir="$work/logs" --rdzv_id=prefix \
  '--log-line-prefix-template=<${role_name}:${rank}/${local_rank}@${hostname}>' \
  --duplicate-stdout-filters='line 1 ,line 2 ' "$WORKER" >"$work/prefix.out" 2>/dev/null || rc=$?
[[ $rc -eq 0 ]] || note_fail "prefix: dtrun exited $rc"
host=$(hostname)
grep -q "^<default:1/1@$host>rank 1 line 0 " "$work/prefix.out" || note_fail "prefix: no line behind <default:1/1@$host>"
filtered=$work/logs/prefix/attempt_0/filtered_stdout.log
[[ -f $filtered && $(grep -c " line [12] " "$filtered") -eq 4 && $(wc -l <"$filtered") -eq 4 ]] ||
  note_fail "duplicate filters: want the 4 lines with 'line 1 ' or 'line 2 ' in $filtered"
grep -q "^<default:0/0@$host>rank 0 line 1 " "$filtered" 2>/dev/null || note_fail "duplicate filters: lines keep their prefix"
! grep -q $'\r' "$filtered" 2>/dev/null || note_fail "duplicate filters: a \\r\\n line kept its '\\r' in $filtered"
[[ $fail_count -ne $before ]] || pass "--log-line-prefix-template and --duplicate-stdout-filters"
end_test
