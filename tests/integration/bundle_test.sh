#!/usr/bin/env bash
# `dtrun bundle RUN_DIR`: a failed 2-rank job (rank 1 exits 3 in both attempts, --max_restarts=1,
# a store token, an etcd password in the environment, every rank printing its environment and
# 300 KB of output) packed into one archive, opened with tar and checked:
#   - the run's record (run.json: dtrun's command line and version, host, kernel, placement), the
#     report as JSON and as a page, the event log, a MANIFEST;
#   - per attempt and rank: the environment dtrun gave it (RANK, WORLD_SIZE, the restart count;
#     nothing it inherited), its logs' last 256 KiB from a line's start, stderr's last words;
#   - no secret anywhere in the archive (the token and the password are in the run's own logs, so
#     there was something to redact);
#   - bad input: a missing directory, a directory that holds no run, an output that cannot be
#     written: one line each, exit 2, no archive or partial file left.
#   bash tests/integration/bundle_test.sh /abs/path/to/build/launcher/dtrun
set -uo pipefail
source "$(dirname "$0")/lib/preamble.sh" bundle_test "$@"

token=tok$RANDOM$RANDOM$RANDOM
password=pw$RANDOM$RANDOM$RANDOM
cat >"$work/worker.sh" <<'SH'
#!/usr/bin/env bash
head -c 300000 /dev/zero | tr '\0' 'x' | fold -w 99
env | sort
printf "{'DTRUN_STORE_TOKEN': '%s', 'RANK': '%s'}\n" "$DTRUN_STORE_TOKEN" "$RANK"
echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT: last words" >&2
[[ $RANK != 1 ]] || exit 3
SH
chmod +x "$work/worker.sh"

DTRUN_STORE_TOKEN=$token DTRUN_ETCD_PASSWORD=$password timeout -k 5 "$LIMIT" "$DTRUN" \
  --nproc_per_node=2 --max_restarts=1 --log_dir="$work/logs" --event_log="$work/events.jsonl" \
  --no_python "$work/worker.sh" >"$work/job.out" 2>&1
rc=$?
[[ $rc == 3 ]] || die "the job exited $rc, want 3 (rank 1's code): $(tail -n 5 "$work/job.out")"
runs=("$work"/logs/*/)
((${#runs[@]} == 1)) || die "want one run directory under $work/logs, got: ${runs[*]}"
run=${runs[0]%/}
grep -qF "DTRUN_STORE_TOKEN=$token" "$run/attempt_0/1/stdout.log" ||
  die "rank 0's stdout lacks the token it printed: nothing for the bundle to redact"

# The archive, opened.
(cd "$work" && "$DTRUN" bundle "$run" >"$work/bundle.out" 2>&1) ||
  die "dtrun bundle exited $?: $(cat "$work/bundle.out")"
name=dtrun-bundle-$(basename "$run")
grep -qE "^dtrun bundle: $name\.tar \([0-9]+ files, [0-9]+ KiB" "$work/bundle.out" ||
  note_fail "dtrun bundle's line: $(cat "$work/bundle.out")"
mkdir -p "$work/open"
tar -xf "$work/$name.tar" -C "$work/open" || die "tar cannot read $name.tar"
b=$work/open/$name
for f in MANIFEST.txt run.json report.json report.html events.jsonl attempt_0/environment \
  attempt_0/worker_pids attempt_0/1/stdout.log attempt_1/1/stderr.log attempt_1/environment; do
  [[ -s $b/$f ]] || note_fail "the bundle lacks $f: $(ls -R "$b" | head -n 30)"
done

got=$("$PYTHON" - "$b" "$DTRUN" <<'PY' 2>&1
import json, sys
b, dtrun = sys.argv[1], sys.argv[2]
facts = json.load(open(f"{b}/run.json"))
report = json.load(open(f"{b}/report.json"))
print(facts["command_line"][0] == dtrun, "--nproc_per_node=2" in facts["command_line"],
      facts["dtrun_version"].startswith("dtrun "), facts["kernel"].startswith("Linux"),
      bool(facts["host"]), facts["nproc_per_node"], report["outcome"], len(report["attempts"]))
PY
)
[[ $got == "True True True True True 2 failed 2" ]] ||
  note_fail "run.json and report.json: want the command line, version, kernel, host, 2 ranks, a failed outcome of 2 attempts (True x5, 2 failed 2), got: $got"

# Local rank 1's part of attempt 1's record: from its heading to the next.
env1=$work/env1
sed -n '/^# local rank 1, rank 1$/,/^# local rank [^1]/p' "$b/attempt_1/environment" >"$env1"
for line in RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 TORCHELASTIC_RESTART_COUNT=1 'DTRUN_STORE_TOKEN=<redacted>'; do
  grep -qxF "$line" "$env1" || note_fail "attempt_1/environment, local rank 1, lacks '$line': $(head -c 400 "$env1")"
done
! grep -qE '^(HOME|DTRUN_ETCD_PASSWORD)=' "$b/attempt_1/environment" ||
  note_fail "attempt_1/environment holds what the rank inherited (HOME or DTRUN_ETCD_PASSWORD), not only what dtrun set"

out0=$b/attempt_0/1/stdout.log
size=$(stat -c %s "$out0")
((size <= 262144 && size > 200000)) || note_fail "a log's tail: want at most 256 KiB, got $size bytes"
[[ $(head -c 99 "$out0") == "$(printf 'x%.0s' {1..99})" ]] || note_fail "a log's tail does not begin at a line's start"
grep -qE '^  attempt_0/1/stdout.log: [0-9]+ bytes, the last of [0-9]+' "$b/MANIFEST.txt" ||
  note_fail "the MANIFEST does not say stdout.log is a tail: $(grep stdout "$b/MANIFEST.txt" | head -n 3)"
grep -qF "rank 1 attempt 1: last words" "$b/attempt_1/1/stderr.log" || note_fail "rank 1's stderr lost its last words"
for line in 'DTRUN_STORE_TOKEN=<redacted>' "{'DTRUN_STORE_TOKEN': '<redacted>', 'RANK': '1'}"; do
  grep -qxF "$line" "$out0" || note_fail "rank 1's stdout: want '$line' where it printed the token"
done

for secret in "$token" "$password"; do
  hits=$(grep -rlF "$secret" "$work/open" "$work/$name.tar")
  [[ -z $hits ]] || note_fail "a secret ($secret) is in the bundle: $hits"
done
((fail_count > 0)) || pass "the archive holds the run's record, report, events, each rank's environment and log tails, and no secret"

# Bad input: one line, exit 2, nothing written.
expect_refusal() {  # <what> <text the line must hold> <dtrun bundle args...>
  local what=$1 want=$2 out
  shift 2
  out=$("$DTRUN" bundle "$@" 2>&1)
  local code=$?
  [[ $code == 2 && $(wc -l <<<"$out") == 1 && $out == *"$want"* ]] ||
    note_fail "$what: want exit 2 and one line holding '$want', got $code: $out"
}
expect_refusal "a missing directory" "is not a directory" "$work/nope"
expect_refusal "a directory without a run" "holds no dtrun run" "$work/open"
expect_refusal "an output that cannot be written" "cannot write $work/no/such/b.tar" "$run" \
  --output "$work/no/such/b.tar"
[[ ! -e $work/no ]] || note_fail "a refused bundle left files behind: $(find "$work/no")"
end_test "a failed run packed into one archive, secrets redacted, bad input refused in one line"
