#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over dtrun's own sources. Fails on any check listed in
# WarningsAsErrors.
# Usage: scripts/tidy.sh [dir (default build-tidy)]
# It reads each source's flags from the release preset, configured in <dir> and never built
# (nothing dtrun's sources include is generated), and checks the sources in translation units of
# its own, written in <dir>/tidy/. Debian's clang-tidy (14) matches every check over every
# declaration a unit parses, the system headers' too (Asio, Beast, json, fmt, the standard
# library), so a unit costs 10 to 35 CPU-seconds before its own code: a source alone is the
# dearest way, and the units are
#   - a library's sources, merged as a unity build merges them: one unit per target (merging
#     targets costs more, not less: agent/ and libdtrt's core took 72 and 110 CPU-s alone, 360 as
#     one unit);
#   - every program (a source that defines main(): dtrun's, the benchmarks') in one unit, each
#     inside a namespace of its own after every header any of them includes, so that their
#     file-local names (Options, runOnce, ...) do not meet: 49 CPU-s, where one unit per program
#     took about 35 each. A main() there is an ordinary function, which bugprone-exception-escape
#     does not hold to main()'s rules. Two programs whose include directories resolve one header
#     path to two files (agent's and launcher's report/report.h, each its room's interface), or
#     that define one macro two ways, are in two units;
#   - on its own: a source that says "scripts/tidy.sh: a unit of its own" (it defines what
#     another source defines, for another library) and a program with preprocessor lines other
#     than #include (hoisting its includes could change what they mean).
# The sources a unit includes are checked as its own code (HeaderFilterRegex), so the
# diagnostics name them, not the unit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
db=${1:-build-tidy}
[[ $db == /* ]] || db=$root/$db
# Without libtorch: dtrun::ddp is not checked here, and scripts/test.sh starts this while
# libtorch-dev may still be installing.
cmake --preset release -B "$db" -DCMAKE_UNITY_BUILD=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON >/dev/null
mapfile -t files < <(git ls-files 'common/*.cpp' 'scheduler/*.cpp' 'placement/*.cpp' 'rendezvous/*.cpp' 'launcher/*.cpp' 'agent/*.cpp' \
  'worker_runtime/*.cpp' 'bench/*.cpp')
# A unit includes sources as .cpp files, which this check exists to refuse; what it guards (a
# source that includes another) is checked here by hand instead.
if git grep -n -E '^#include "[^"]+\.(cpp|cc)"' -- "${files[@]}"; then
  echo "tidy.sh: a source includes a .cpp file (above): move what it shares into a header" >&2
  exit 1
fi
unit_list=$(python3 - "$db/compile_commands.json" "$root" "$db/tidy" "${files[@]}" <<'EOF'
import json, os, re, shlex, sys
db, root, out, wanted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
entries = {e["file"]: e for e in json.load(open(db))}
os.makedirs(out, exist_ok=True)
for stale in os.listdir(out):
    os.remove(os.path.join(out, stale))


def flags_of(entry):  # the include paths, macros and language standard of one compile command
    args = entry.get("arguments") or shlex.split(entry["command"])
    kept, rest = [], iter(args[1:])
    for arg in rest:
        if arg in ("-I", "-D", "-isystem", "-include"):
            kept.append(arg + next(rest))  # one word each, so that merging keeps the pairs whole
        elif arg.startswith(("-I", "-D", "-isystem", "-include", "-std=")):
            kept.append(arg)
    return args[0], kept


libraries, programs, alone = [], [], []
for source in wanted:
    path = os.path.join(root, source)
    if path not in entries:
        sys.exit(f"tidy.sh: {source} is in no compile command of {db}: is it in a CMakeLists.txt?")
    text = open(path).read()
    if "scripts/tidy.sh: a unit of its own" in text:
        alone.append(path)
    elif re.search(r"^int main\(", text, re.M):
        own_lines = re.findall(r"^\s*#\s*(\w+)", text, re.M)
        (programs if set(own_lines) <= {"include"} else alone).append(path)
    else:
        libraries.append(path)


def write_unit(name, sources, text):
    unit = os.path.join(out, name)
    open(unit, "w").write(text)
    compiler, merged = flags_of(entries[sources[0]])
    for source in sources[1:]:
        merged += [flag for flag in flags_of(entries[source])[1] if flag not in merged]
    return {"directory": entries[sources[0]]["directory"], "file": unit,
            "arguments": [compiler, *merged, "-c", unit], "size": sum(map(os.path.getsize, sources))}


def headers(directory):  # every header under one of the repository's include directories
    if directory not in header_cache:
        found = set()
        if directory.startswith(root + "/"):
            for base, _, names in os.walk(directory):
                found |= {os.path.relpath(os.path.join(base, n), directory) for n in names
                          if n.endswith((".h", ".hpp"))}
        header_cache[directory] = found
    return header_cache[directory]


def resolves(source):  # what each of the headers its -I directories hold resolves to
    dirs = [f[2:] for f in flags_of(entries[source])[1] if f.startswith("-I")]
    seen = {}
    for directory in dirs:
        for header in headers(directory):
            seen.setdefault(header, directory)
    return seen


def defines(source):
    return dict(f[2:].partition("=")[::2] for f in flags_of(entries[source])[1] if f.startswith("-D"))


def clash(a, b):  # one name, two meanings: a header path or a macro that resolves differently
    return any(a[k] != b[k] for k in a.keys() & b.keys())


def shares_of(paths):
    """The programs in as few shares as can be: two whose include directories resolve one header
    path to two files (agent's and launcher's report/report.h, each its room's interface) never
    share a unit, nor two that define one macro two ways."""
    shares = []  # a share: [sources, header resolutions, macros]
    for path in paths:
        mine, macros = resolves(path), defines(path)
        fits = [s for s in shares if not clash(s[1], mine) and not clash(s[2], macros)]
        if not fits:
            fits = [[[], {}, {}]]
            shares.append(fits[0])
        fits[0][0].append(path)
        fits[0][1].update(mine)
        fits[0][2].update(macros)
    return [share[0] for share in shares]


header_cache, units = {}, []
targets = {}  # a library's sources by their flags: a target's (libdtrt's core and backends share
# theirs; host_facts.cpp has its own)
for path in libraries:
    targets.setdefault(tuple(flags_of(entries[path])[1]), []).append(path)
for i, share in enumerate(targets.values()):
    units.append(write_unit(f"library_{i}.cxx", share, "".join(f'#include "{p}"\n' for p in share)))
for i, share in enumerate(shares_of(programs)):
    hoisted, wrapped = [], []
    for path in share:
        n = programs.index(path)
        for kind, name in re.findall(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', open(path).read(), re.M):
            beside = os.path.normpath(os.path.join(os.path.dirname(path), name))
            line = f'#include "{beside}"' if kind == '"' and os.path.exists(beside) else (
                f"#include <{name}>" if kind == "<" else f'#include "{name}"')
            if line not in hoisted:
                hoisted.append(line)
        wrapped.append(f'namespace tidy_program_{n} {{\n#include "{path}"\n}}  // namespace tidy_program_{n}')
    units.append(write_unit(f"programs_{i}.cxx", share, "\n".join(hoisted + wrapped) + "\n"))
for path in alone:
    units.append({**entries[path], "size": os.path.getsize(path)})
units.sort(key=lambda unit: unit["size"], reverse=True)  # the longest start first
json.dump([{k: v for k, v in unit.items() if k != "size"} for unit in units],
          open(os.path.join(out, "compile_commands.json"), "w"), indent=1)
print("\n".join(unit["file"] for unit in units))
EOF
)
mapfile -t units <<<"$unit_list"
printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p "$db/tidy" --quiet \
  --checks=-bugprone-suspicious-include --extra-arg=-Wno-unknown-warning-option 2>/dev/null
