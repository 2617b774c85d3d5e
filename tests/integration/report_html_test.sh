#!/usr/bin/env bash
# `dtrun report FILE --html OUT` opened in a real headless browser (Debian's
# chromium-headless-shell, or chromium): a 4-rank job whose rank 2 fails twice (one restart)
# writes --report; the page's DOM, as the browser built it, has one timeline row per rank, a
# bar per rank and attempt (8), the restart line, rank 2's root-cause text and the attempts
# table; the others' SIGTERM bars are "stopped". A file that is not a report: one line, exit 2.
#   bash tests/integration/report_html_test.sh /abs/path/to/build/launcher/dtrun
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" report_html_test "$@"
browser=$(command -v chromium-headless-shell || command -v chromium || true)
[[ -n $browser ]] || die "no headless browser: run scripts/setup.sh (chromium-headless-shell)"

rc=0
timeout "$LIMIT" "$DTRUN" --nproc_per_node=4 --max_restarts=1 --report="$work/run.json" \
  --log_dir="$work/logs" --no_python "$HERE/workers/flaky.sh" 5 3 2 >"$work/run.out" 2>&1 || rc=$?
[[ $rc -eq 3 ]] || die "the failing job exited $rc, expected 3"
"$DTRUN" report "$work/run.json" --html "$work/run.html" >"$work/report.out" 2>&1 ||
  die "dtrun report failed: $(cat "$work/report.out")"
[[ $(grep -c '<script' "$work/run.html" || true) -eq 0 ]] || note_fail "the page has a script"
grep -q '<link\|src="http' "$work/run.html" && note_fail "the page refers to other files"

# The DOM as the browser built it (a fresh profile in $work; no network is needed).
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" \
  --dump-dom "file://$work/run.html" >"$work/dom.html" 2>"$work/browser.err" ||
  die "$browser failed: $(tail -3 "$work/browser.err")"
$PYTHON - "$work/dom.html" <<'PY' || note_fail "the page's DOM is not what the report says"
import sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.bars, self.restarts, self.causes, self.rows_in_table = [], [], 0, {}, 0
        self.stack, self.root = [], ""
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "").split()
        self.stack.append((tag, cls, a))
        if tag == "g" and "rank-row" in cls:
            self.rows.append(int(a["data-rank"]))
        if tag == "rect" and "attempt" in cls:
            self.bars.append((int(a["data-attempt"]), cls[1]))
        if tag == "g" and "restart" in cls:
            self.restarts += 1
        if tag == "tr" and cls:
            self.rows_in_table += 1
    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass
    def handle_data(self, data):
        if not self.stack:
            return
        tag, cls, a = self.stack[-1]
        if tag == "text" and "cause" in cls:
            self.causes[int(a["data-rank"])] = data
        if tag == "p" and a.get("id") == "root-cause":
            self.root += data

dom = Dom()
dom.feed(open(sys.argv[1]).read())
problems = []
if dom.rows != [0, 1, 2, 3]:
    problems.append(f"rows {dom.rows}, expected one per rank 0-3")
if len(dom.bars) != 8 or sorted({a for a, _ in dom.bars}) != [0, 1]:
    problems.append(f"bars {dom.bars}, expected 4 ranks x 2 attempts")
if [c for _, c in dom.bars].count("failed") != 2:
    problems.append(f"bars {dom.bars}: rank 2's two attempts should be the failed ones")
if dom.restarts != 1:
    problems.append(f"{dom.restarts} restart lines, expected 1")
if "exit code 3" not in dom.causes.get(2, "") or "root cause" not in dom.causes.get(2, ""):
    problems.append(f"rank 2's cause text is {dom.causes.get(2)!r}")
if "rank 2" not in dom.root:
    problems.append(f"root cause paragraph {dom.root!r}")
if dom.rows_in_table != 2:
    problems.append(f"{dom.rows_in_table} attempts in the table, expected 2")
for p in problems:
    print(p, file=sys.stderr)
print(f"{len(dom.rows)} rows, {len(dom.bars)} bars, {dom.restarts} restart, rank 2: {dom.causes.get(2)!r}")
sys.exit(1 if problems else 0)
PY
pass "the browser shows 4 rank rows, 8 attempt bars, the restart and rank 2's root cause"

# Not a report: one line naming the problem, exit 2.
echo '{"x": 1}' >"$work/bad.json"
rc=0
"$DTRUN" report "$work/bad.json" --html "$work/bad.html" >"$work/bad.out" 2>&1 || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/bad.out") -eq 1 ]] ||
  note_fail "a non-report: rc $rc, '$(cat "$work/bad.out")'"
end_test
