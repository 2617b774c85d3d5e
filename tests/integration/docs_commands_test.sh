#!/usr/bin/env bash
# Docs that run: every ```console block of README.md and docs/*.md is run against this build's
# dtrun and each command's output checked against the lines the doc shows, so the docs cannot
# rot; every shell block that is not run must say why (<!-- not run: ... -->), and the count of
# those per file is printed. The format and the scratch directory the blocks run in are in
# scripts/doc_commands.py's header and docs/building.md ("Docs that run").
#   bash tests/integration/docs_commands_test.sh /abs/path/to/build/launcher/dtrun
# DOCS_TEST_FILES="docs/placement.md ..." runs some files only; DOCS_TEST_JOBS (default 1) runs
# that many blocks at once. Every command is bounded (--timeout, 60 s; 120 s in a sanitizer
# tree); the demos the docs name are needed in the build tree.
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" docs_commands_test "$@"
clear_scheduler_env

for demo in barrier p2p collectives; do
  [[ -x $BUILD/demos/$demo/$demo ]] ||
    die "the docs run $BUILD/demos/$demo/$demo: build it (ninja -C $BUILD $demo)"
done

files=()
for f in ${DOCS_TEST_FILES:-}; do files+=("$ROOT/$f"); done
start=$SECONDS
rc=0
timeout -k 5 540 "$PYTHON" "$ROOT/scripts/doc_commands.py" --dtrun "$DTRUN" --build "$BUILD" \
  --timeout "$LIMIT" --jobs "${DOCS_TEST_JOBS:-1}" "${files[@]}" || rc=$?
[[ $rc -eq 0 ]] || die "a doc's command no longer does what the doc shows (exit $rc, above)"
end_test "$((SECONDS - start)) s"
