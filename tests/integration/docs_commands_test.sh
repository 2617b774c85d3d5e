#!/usr/bin/env bash
# Docs that run: every ```console block of README.md and docs/*.md is run against this build's
# dtrun and each command's output checked against the lines the doc shows, so the docs cannot
# rot; every shell block that is not run must say why (<!-- not run: ... -->), and the count of
# those per file is printed. The format and the scratch directory the blocks run in are in
# scripts/doc_commands.py's header and docs/building.md ("Docs that run").
#   bash tests/integration/docs_commands_test.sh /abs/path/to/build/launcher/dtrun
# DOCS_TEST_FILES="docs/placement.md ..." runs some files only; DOCS_TEST_JOBS (default 1) runs
# that many blocks at once. Every command is bounded (--timeout, 60 s). The programs the docs
# run from build/ must be built; a sanitizer tree (no libtorch demos) says SKIP (exit 77: skipped).
set -euo pipefail

# shellcheck source=lib/preamble.sh
source "$(dirname "$0")/lib/preamble.sh" docs_commands_test "$@"
clear_scheduler_env

# A sanitizer tree builds no libtorch demos (toy_ddp, resnet_ddp) and would only repeat, 3-10x
# slower, what the release tree's run checks.
release_tree_only "the docs show a release tree's runs"
for program in demos/barrier/barrier demos/p2p/p2p demos/collectives/collectives \
  demos/toy_ddp/toy_ddp demos/resnet_ddp/resnet_ddp tests/worker_runtime/dtrt_hang_worker; do
  [[ -x $BUILD/$program ]] ||
    die "the docs run $BUILD/$program: build it (ninja -C $BUILD $(basename "$program"))"
done

files=()
for f in ${DOCS_TEST_FILES:-}; do files+=("$ROOT/$f"); done
start=$SECONDS
rc=0
timeout -k 5 540 "$PYTHON" "$ROOT/scripts/doc_commands.py" --dtrun "$DTRUN" --build "$BUILD" \
  --timeout "$LIMIT" --jobs "${DOCS_TEST_JOBS:-1}" "${files[@]}" || rc=$?
[[ $rc -eq 0 ]] || die "a doc's command no longer does what the doc shows (exit $rc, above)"
end_test "$((SECONDS - start)) s"
