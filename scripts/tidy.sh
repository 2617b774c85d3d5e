#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over dtrun's own sources. Fails on any check listed in
# WarningsAsErrors.
# Usage: scripts/tidy.sh [dir (default build-tidy)]
# It reads the unity batches of the release preset (CMakeLists.txt), configured in <dir> and
# never built (nothing dtrun's sources include is generated): a batch parses Asio, Beast, json
# and fmt once for its sources (16, or a whole target: DTRUN_UNITY_BATCH_SIZE below), where one
# clang-tidy run per source parsed them once each (agent/'s first batch of 16: 19 s against 130 s
# of CPU). The sources a batch includes are checked as its own code (HeaderFilterRegex), so the
# diagnostics name them, not the batch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
db=${1:-build-tidy}
[[ $db == /* ]] || db=$root/$db
# Without libtorch: dtrun::ddp is not checked here, and scripts/test.sh starts this while
# libtorch-dev may still be installing.
# DTRUN_UNITY_BATCH_SIZE as scripts/build.sh reads it (scripts/test.sh: 0, a batch per target).
cmake --preset release -B "$db" -DCMAKE_UNITY_BUILD=ON -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON \
  -DCMAKE_UNITY_BUILD_BATCH_SIZE="${DTRUN_UNITY_BATCH_SIZE:-16}" >/dev/null
mapfile -t files < <(git ls-files 'common/*.cpp' 'scheduler/*.cpp' 'placement/*.cpp' 'rendezvous/*.cpp' 'launcher/*.cpp' 'agent/*.cpp' \
  'worker_runtime/*.cpp' 'bench/*.cpp')
# Each source's batch, or the source itself where it is compiled on its own; every source must
# be found in one of the two, so that none goes unchecked.
unit_list=$(python3 - "$db/compile_commands.json" "$root" "${files[@]}" <<'EOF'
import json, re, sys
db, root, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
units, covered = set(), set()
for entry in json.load(open(db)):
    unit = entry["file"]
    if "/Unity/" in unit:
        included = re.findall(r'^#include "([^"]+)"', open(unit).read(), re.M)
    else:
        included = [unit]
    mine = {p[len(root) + 1:] for p in included if p.startswith(root + "/")} & wanted
    if mine:
        units.add(unit)
        covered |= mine
for missing in sorted(wanted - covered):
    print(f"tidy.sh: {missing} is in no compile command of {db}: is it in a CMakeLists.txt?",
          file=sys.stderr)
    sys.exit(1)
print("\n".join(sorted(units)))
EOF
)
mapfile -t units <<<"$unit_list"
# A batch includes its sources as .cpp files, which this check exists to refuse; what it guards
# (a source that includes another) is checked here by hand instead.
if git grep -n -E '^#include "[^"]+\.(cpp|cc)"' -- "${files[@]}"; then
  echo "tidy.sh: a source includes a .cpp file (above): move what it shares into a header" >&2
  exit 1
fi
printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$db" --quiet \
  --checks=-bugprone-suspicious-include --extra-arg=-Wno-unknown-warning-option 2>/dev/null
