#!/usr/bin/python3
"""Runs every command the docs show and checks that its output still matches (docs that run).

Usage: /usr/bin/python3 scripts/doc_commands.py --dtrun PATH [--jobs N] [--list] [FILE.md ...]
(default files: README.md and docs/*.md; tests/integration/docs_commands_test.sh runs it).

The format, in README.md and docs/*.md (docs/building.md, "Docs that run", says the same):

  * Every fenced block names its language; an unnamed fence (```) is an error.
  * A ```console block runs. A line starting with `$ ` is a command (a line ending in `\\`
    continues it on the next line, and so do lines starting with `> `, bash's prompt for the
    rest of a loop or a quote); the lines after it, up to the next `$ ` line or the end of
    the block, are its expected output (stdout and stderr together, as a terminal shows them).
  * Matching: the expected lines must match the whole output, line by line, in order. A line
    `...` (indented or not) matches any number of lines (none included). Inside a line, `<any>` matches any text
    (timings, pids, ports, dates, host names). Trailing blanks and trailing empty lines are
    ignored; nothing else is (no regular expressions).
  * Every command must exit 0: show a failure's code with `cmd; echo "exit code $?"`.
  * The blocks of a file run one after another, each in a bash of its own, from a fresh scratch
    directory that looks like the repository root: every top-level entry of the repository is
    a symlink there (demos/, scripts/, tests/, python/, ...) and build/ is the tested build tree,
    so `build/demos/barrier/barrier` and `demos/python/allreduce.py` resolve. Within a block
    `cd` and `export` carry over; a block's processes that are still there at its end are
    killed. PATH starts with a directory holding `dtrun` (the tested binary) and `python3`
    (/usr/bin/python3, which has torch); TMPDIR is inside the scratch directory; PET_*, SLURM_*,
    PBS_*, LSB_*, FLUX_*, OMPI_*, PMI_*, PMIX_*, TORCHELASTIC_* and DTRUN_* are unset.
  * Each command has --timeout seconds (default 60); past it the block is killed and fails.
  * A block that is not run says why in an HTML comment on the line right before its fence:
    `<!-- not run: needs a GPU -->`. That comment is required on every shell block (```bash,
    ```sh, ```shell) and on any block with a `$ ` line that is not ```console; a ```console
    block may carry it too (then it is shown, not run). Each file's blocks not run are counted
    and their reasons printed, so nothing escapes silently.

A failure prints the doc file and line, the command, and a diff of expected against actual
output. The exit status is 1 if any block failed or broke a rule above, else 0. Each file's line
also says what it cost; blocks of 5 s or more are named (the whole test should stay well under
90 s on a loaded 2-core machine: prefer --dry-run and small jobs). To write a block, run its file
with --show, which prints what each command printed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHELL_LANGS = {"bash", "sh", "shell", "zsh", "shell-session"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
CLEARED_ENV = re.compile(r"^(PET|SLURM|PBS|LSB|FLUX|OMPI|PMI|PMIX|TORCHELASTIC|DTRUN)_")


@dataclasses.dataclass
class Command:
    line: int  # 1-based line of the `$ ` line in the doc
    text: str
    expected: list[str]


@dataclasses.dataclass
class Block:
    path: Path
    line: int  # the opening fence's line
    lang: str
    body: list[str]
    not_run: str | None
    commands: list[Command] = dataclasses.field(default_factory=list)


def parse(path: Path, root: Path) -> tuple[list[Block], list[str]]:
    """Every fenced block of one file, and the rule errors found there."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    errors: list[str] = []
    rel = shown_path(path, root)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m.group(1), m.group(2), i
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        note = NOT_RUN.match(prev)
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            errors.append(f"{rel}:{start + 1}: a fenced block that never closes")
        i += 1
        block = Block(path, start + 1, lang, body, note.group(1) if note else None)
        blocks.append(block)
        where = f"{rel}:{start + 1}"
        has_prompt = any(b.startswith("$ ") for b in body)
        if not lang:
            errors.append(f"{where}: a fence without a language: ```console for commands that "
                          "run (with their output), ```text for output, or ```bash with "
                          "<!-- not run: why --> on the line before")
        elif lang in SHELL_LANGS and block.not_run is None:
            errors.append(f"{where}: a ```{lang} block is not run: make it ```console with its "
                          "output, or put <!-- not run: why --> on the line before it")
        elif lang not in SHELL_LANGS and lang != "console" and has_prompt and not block.not_run:
            errors.append(f"{where}: a ```{lang} block holds `$ ` commands: make it ```console, "
                          "or put <!-- not run: why --> on the line before it")
        elif lang == "console" and block.not_run is None:
            block.commands, problem = split_commands(body, start + 2)
            if problem:
                errors.append(f"{where}: {problem}")
    return blocks, errors


def shown_path(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def split_commands(body: list[str], first_line: int) -> tuple[list[Command], str | None]:
    commands: list[Command] = []
    k = 0
    if not body:
        return [], "an empty ```console block"
    if not body[0].startswith("$ "):
        return [], "a ```console block must start with a `$ ` command line"
    while k < len(body):
        line_no = first_line + k
        text = body[k][2:]
        k += 1
        # A line ending in a backslash continues on the next; lines starting with `> ` (bash's
        # prompt for the rest of a command: a loop, an open quote) continue it too.
        while k < len(body) and (text.endswith("\\") or body[k].startswith("> ")):
            text += "\n" + body[k].removeprefix("> ")
            k += 1
        expected = []
        while k < len(body) and not body[k].startswith("$ "):
            expected.append(body[k].rstrip())
            k += 1
        while expected and not expected[-1]:
            expected.pop()
        commands.append(Command(line_no, text, expected))
    return commands, None


def line_pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("<any>")), re.DOTALL)


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether expected (with `...` and `<any>`) matches the whole of actual."""
    patterns = [None if e.strip() == "..." else line_pattern(e) for e in expected]
    # reach[j]: expected[:i] can match actual[:j]; one row per expected line.
    reach = [True] + [False] * len(actual)
    for pattern in patterns:
        nxt = [False] * (len(actual) + 1)
        if pattern is None:
            seen = False
            for j in range(len(actual) + 1):
                seen = seen or reach[j]
                nxt[j] = seen
        else:
            for j in range(len(actual)):
                if reach[j] and pattern.fullmatch(actual[j]):
                    nxt[j + 1] = True
        reach = nxt
    return reach[len(actual)]


def session_processes(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            found.append(int(entry))
    return found


def kill_session(sid: int) -> None:
    """SIGKILL to every process of the block's session (the shell is its leader)."""
    for _ in range(3):
        pids = session_processes(sid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def make_scratch(root: Path, build: Path) -> Path:
    scratch = Path(tempfile.mkdtemp(prefix="docrun-"))
    for entry in root.iterdir():
        if entry.name in (".git",) or entry.name.startswith("build"):
            continue
        (scratch / entry.name).symlink_to(entry)
    (scratch / "build").symlink_to(build)
    (scratch / "tmp").mkdir()
    return scratch


def run_block(block: Block, args: argparse.Namespace) -> tuple[list[str], float]:
    """Runs one block's commands; returns the failures' reports (empty: it passed)."""
    started = time.monotonic()
    scratch = make_scratch(args.root, args.build)
    ctl = Path(tempfile.mkdtemp(prefix="docctl-"))
    script = ["exec </dev/null"]
    for n, cmd in enumerate(block.commands):
        # `:` first: a command that is only a comment still makes a group bash accepts.
        script += ["{ :", cmd.text, f"}} >{ctl}/out.{n} 2>&1",
                   f"__rc=$?; echo $__rc >{ctl}/rc.{n}.tmp; mv {ctl}/rc.{n}.tmp {ctl}/rc.{n}",
                   "[ $__rc = 0 ] || exit 0"]
    (ctl / "block.sh").write_text("\n".join(script) + "\n")
    env = {k: v for k, v in os.environ.items() if not CLEARED_ENV.match(k)}
    env.update(PATH=f"{args.bin}:/usr/local/bin:/usr/bin:/bin", TMPDIR=str(scratch / "tmp"),
               PWD=str(scratch), LC_ALL="C.UTF-8", PYTHONDONTWRITEBYTECODE="1")
    env.pop("OLDPWD", None)
    with open(ctl / "shell.err", "wb") as shell_err:
        shell = subprocess.Popen(["bash", "--noprofile", "--norc", str(ctl / "block.sh")],
                                 cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                 stdout=shell_err, stderr=shell_err, start_new_session=True)
    failures: list[str] = []
    rel = shown_path(block.path, args.root)
    n, since, timed_out = 0, time.monotonic(), None
    while shell.poll() is None:
        while n < len(block.commands) and (ctl / f"rc.{n}").exists():
            n, since = n + 1, time.monotonic()
        if n < len(block.commands) and time.monotonic() - since > args.timeout:
            timed_out = n
            break
        time.sleep(0.02)
    kill_session(shell.pid)
    shell.wait()
    for n, cmd in enumerate(block.commands):
        out_file, rc_file = ctl / f"out.{n}", ctl / f"rc.{n}"
        actual = out_file.read_text(errors="replace").splitlines() if out_file.exists() else []
        actual = [a.rstrip() for a in actual]
        while actual and not actual[-1]:
            actual.pop()
        head = f"{rel}:{cmd.line}: $ {cmd.text}"
        if args.show:
            print(f"---- {head}\n" + "\n".join(actual), flush=True)
        if timed_out == n:
            failures.append(f"{head}\n  did not finish within {args.timeout} s (--timeout); "
                            "its output so far:\n" + indent(actual))
            break
        if not rc_file.exists():
            err = (ctl / "shell.err").read_text(errors="replace").strip()
            failures.append(f"{head}\n  never ran: the block's shell stopped before it"
                            + (f" ({err})" if err else ""))
            break
        rc = int(rc_file.read_text())
        if not matches(cmd.expected, actual):
            diff = difflib.unified_diff(cmd.expected, actual, "expected (doc)", "actual",
                                        lineterm="", n=2)
            failures.append(f"{head}\n  output differs (exit code {rc}):\n" + indent(list(diff)))
        if rc != 0:
            if matches(cmd.expected, actual):
                failures.append(f"{head}\n  exit code {rc} (commands must exit 0: append "
                                "`; echo \"exit code $?\"` to show a failure); output:\n"
                                + indent(actual))
            break
    shutil.rmtree(ctl, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return failures, time.monotonic() - started


def indent(lines: list[str]) -> str:
    return "\n".join("    | " + line for line in lines) if lines else "    | (nothing)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtrun", required=True, type=Path, help="the dtrun binary to test")
    parser.add_argument("--build", type=Path, help="the build tree (default: dtrun's ../..)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per command")
    parser.add_argument("--jobs", type=int, default=1, help="blocks run at once")
    parser.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    parser.add_argument("--show", action="store_true",
                        help="print every command's actual output (to write a block's lines)")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    args.root = Path(__file__).resolve().parent.parent
    args.dtrun = args.dtrun.resolve()
    if not os.access(args.dtrun, os.X_OK):
        print(f"doc_commands: --dtrun {args.dtrun} is not an executable file", file=sys.stderr)
        return 2
    args.build = (args.build or args.dtrun.parent.parent).resolve()
    files = [f.resolve() for f in args.files] or \
        [args.root / "README.md"] + sorted((args.root / "docs").glob("*.md"))

    errors: list[str] = []
    per_file: list[tuple[Path, list[Block]]] = []
    for f in files:
        blocks, problems = parse(f, args.root)
        errors += problems
        per_file.append((f, blocks))

    to_run = [b for _, blocks in per_file for b in blocks if b.commands]
    if args.list:
        for b in to_run:
            for c in b.commands:
                print(f"{shown_path(b.path, args.root)}:{c.line}: $ {c.text}")
        return 0

    bindir = Path(tempfile.mkdtemp(prefix="docbin-"))
    (bindir / "dtrun").symlink_to(args.dtrun)
    (bindir / "python3").symlink_to("/usr/bin/python3")
    args.bin = bindir
    failures: dict[int, list[str]] = {}
    took: dict[int, float] = {}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(run_block, b, args): id(b) for b in to_run}
            for fut in concurrent.futures.as_completed(futures):
                failures[futures[fut]], took[futures[fut]] = fut.result()
    finally:
        shutil.rmtree(bindir, ignore_errors=True)

    failed_blocks = 0
    for f, blocks in per_file:
        rel = shown_path(f, args.root)
        ran = [b for b in blocks if b.commands]
        shown = [b for b in blocks if b.not_run is not None]
        bad = [b for b in ran if failures.get(id(b))]
        failed_blocks += len(bad)
        seconds = sum(took.get(id(b), 0) for b in ran)
        print(f"{rel}: {len(ran)} block(s) run ({sum(len(b.commands) for b in ran)} commands, "
              f"{seconds:.1f} s), {len(bad)} failed; {len(shown)} shown, not run")
        for b in shown:
            print(f"  not run, line {b.line} (```{b.lang}): {b.not_run}")
        for b in ran:
            if took.get(id(b), 0) >= 5:  # where the test's time goes
                print(f"  slow: line {b.line} took {took[id(b)]:.1f} s")
        for b in bad:
            for report in failures[id(b)]:
                print("FAIL " + report, file=sys.stderr)
    for e in errors:
        print("ERROR " + e, file=sys.stderr)
    if failed_blocks or errors:
        print(f"doc_commands: {failed_blocks} block(s) failed, {len(errors)} rule error(s)",
              file=sys.stderr)
        return 1
    print(f"doc_commands: every shown command ran as the docs say ({len(to_run)} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
