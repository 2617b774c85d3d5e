// The failure and restart rules of docs/exit-codes.md and docs/multi-node.md, one case per row,
// checked on the pure policy: no process, no store, no clock.
#include "job/attempt_policy.h"

#include <catch2/catch.hpp>

#include "dtrun/agent.h"

namespace {

using dtrun::agent::detail::AttemptEnd;
using dtrun::agent::detail::decideAfterAttempt;
using dtrun::agent::detail::Decision;
using dtrun::agent::detail::NextStep;
using dtrun::agent::detail::startupExitCode;
using dtrun::agent::detail::StopReason;
using Kind = dtrun::rdzv::RoundEnd::Kind;

AttemptEnd singleNode(StopReason reason, bool failed, int restartsUsed, int maxRestarts) {
  AttemptEnd end;
  end.reason = reason;
  end.failed = failed;
  end.restartsUsed = restartsUsed;
  end.maxRestarts = maxRestarts;
  return end;
}

AttemptEnd multiNode(StopReason reason, bool failed, std::optional<Kind> roundEnd) {
  AttemptEnd end;
  end.reason = reason;
  end.multiNode = true;
  end.failed = failed;
  end.roundEnd = roundEnd;
  end.restartsUsed = 5;  // the keeper's budget, never the agent's: must not matter
  end.maxRestarts = 0;
  return end;
}

}  // namespace

TEST_CASE("exit 0: every worker succeeded", "[unit][agent][policy]") {
  const Decision d = decideAfterAttempt(singleNode(StopReason::kNone, false, 0, 3));
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 0);
  CHECK_FALSE(d.reportFailure);
}

TEST_CASE("a failing worker restarts the group while --max_restarts allows",
          "[unit][agent][policy]") {
  for (int used = 0; used < 3; ++used) {
    const Decision d = decideAfterAttempt(singleNode(StopReason::kFailure, true, used, 3));
    CHECK(d.step == NextStep::kRestart);
    CHECK_FALSE(d.reportFailure);
  }
}

TEST_CASE("exit N: the root cause's exit code once restarts ran out, with the failure report",
          "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kFailure, true, 3, 3);
  end.rootCauseCode = 7;
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 7);
  CHECK(d.reportFailure);
}

TEST_CASE("exit 128+S: the root-cause worker died of signal S", "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kFailure, true, 0, 0);
  end.rootCauseCode = 128 + 11;  // ExitStatus::shellCode() of a SIGSEGV
  const Decision d = decideAfterAttempt(end);
  CHECK(d.exitCode == 139);
  CHECK(d.reportFailure);
}

TEST_CASE("exit 128+S: dtrun itself got a handled signal, no restart, the job is left",
          "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kSignal, false, 0, 3);
  end.signal = 15;
  Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 143);
  CHECK_FALSE(d.reportFailure);
  CHECK_FALSE(d.leaveJob);

  end.multiNode = true;  // the others re-rendezvous at once instead of waiting for a heartbeat
  end.signal = 2;
  d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 130);
  CHECK(d.leaveJob);
}

TEST_CASE("exit 124: a hang found with restarts used up", "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kFailure, true, 1, 1);
  end.rootCauseCode = dtrun::agent::detail::kExitHang;
  const Decision d = decideAfterAttempt(end);
  CHECK(d.exitCode == 124);
  CHECK(d.reportFailure);
}

TEST_CASE("exit 127: the entrypoint cannot run, never restarted", "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kStartup, false, 0, 3);
  end.startupExitCode =
      startupExitCode(dtrun::Status::error(dtrun::Errc::kNotFound, "cannot run ./trian"));
  CHECK(end.startupExitCode == 127);
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 127);
  CHECK_FALSE(d.reportFailure);
}

TEST_CASE("exit 1: dtrun could not start (its store, its run directory, its workers)",
          "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kStartup, false, 0, 3);
  end.startupExitCode = startupExitCode(dtrun::Status::connection("cannot start the store"));
  CHECK(end.startupExitCode == 1);
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 1);
  CHECK_FALSE(d.reportFailure);
}

TEST_CASE("exit 1: the job's store was lost", "[unit][agent][policy]") {
  const Decision d = decideAfterAttempt(multiNode(StopReason::kStoreLost, false, std::nullopt));
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 1);
  CHECK_FALSE(d.leaveJob);
}

TEST_CASE("many nodes: a failure anywhere restarts everyone through the next round",
          "[unit][agent][policy]") {
  // Here: this node's worker failed and ended the round; the keeper charges the budget.
  Decision d = decideAfterAttempt(multiNode(StopReason::kFailure, true, Kind::kFailure));
  CHECK(d.step == NextStep::kRendezvous);
  CHECK_FALSE(d.reportLocalSuccess);
  // Elsewhere: the round ended while this node's workers ran.
  d = decideAfterAttempt(multiNode(StopReason::kRoundEnded, false, Kind::kFailure));
  CHECK(d.step == NextStep::kRendezvous);
  // The round's end has not arrived yet: wait for it.
  d = decideAfterAttempt(multiNode(StopReason::kFailure, true, std::nullopt));
  CHECK(d.step == NextStep::kAwaitRoundEnd);
}

TEST_CASE("many nodes: success needs every node (the exit barrier)", "[unit][agent][policy]") {
  Decision d = decideAfterAttempt(multiNode(StopReason::kNone, false, std::nullopt));
  CHECK(d.step == NextStep::kAwaitRoundEnd);
  CHECK(d.reportLocalSuccess);
  d = decideAfterAttempt(multiNode(StopReason::kNone, false, Kind::kSuccess));
  CHECK(d.step == NextStep::kFinishAfterDrain);
  CHECK(d.exitCode == 0);
  // Another node failed while this one waited at the barrier: it rejoins and runs again.
  d = decideAfterAttempt(multiNode(StopReason::kNone, false, Kind::kFailure));
  CHECK(d.step == NextStep::kRendezvous);
}

TEST_CASE("many nodes: a membership change (node lost, late node) re-rendezvouses",
          "[unit][agent][policy]") {
  const Decision d =
      decideAfterAttempt(multiNode(StopReason::kRoundEnded, false, Kind::kMembership));
  CHECK(d.step == NextStep::kRendezvous);
  CHECK_FALSE(d.leaveJob);
}

TEST_CASE("many nodes: a node whose workers cannot start leaves the job with 127",
          "[unit][agent][policy]") {
  AttemptEnd end = multiNode(StopReason::kStartup, false, std::nullopt);
  end.startupExitCode = 127;
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == 127);
  CHECK(d.leaveJob);
}

TEST_CASE("exit N at once: the failed rank asked not to be restarted", "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kFailure, true, 0, 5);
  end.rootCauseCode = dtrun::agent::kExitNoRestart;
  end.noRestart = true;
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == dtrun::agent::kExitNoRestart);
  CHECK(d.reportFailure);
  CHECK(d.stoppedEarly ==
        "the failed rank asked not to be restarted (exit code 87 or no_restart in its error file)");
}

TEST_CASE("exit 86: attempts in a row without progress stop the job before its budget",
          "[unit][agent][policy]") {
  AttemptEnd end = singleNode(StopReason::kFailure, true, 1, 10);
  end.rootCauseCode = 1;
  end.maxNoProgress = 2;
  end.noProgressStreak = 1;
  CHECK(decideAfterAttempt(end).step == NextStep::kRestart);
  end.noProgressStreak = 2;
  const Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == dtrun::agent::kExitNoProgress);
  CHECK(d.stoppedEarly == "2 attempts in a row made no progress (--max_no_progress_attempts=2)");
  end.maxNoProgress = 0;  // off: the budget alone decides
  CHECK(decideAfterAttempt(end).step == NextStep::kRestart);
}

TEST_CASE("exit 75: a worker SIGKILL could not end takes the node out, restarts left or not",
          "[unit][agent][policy]") {
  auto end = singleNode(StopReason::kFailure, true, 0, 3);
  end.rootCauseCode = 1;
  end.workerStuck = true;
  Decision d = decideAfterAttempt(end);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == dtrun::agent::kExitWorkerStuck);
  CHECK(d.reportFailure);
  CHECK(d.stoppedEarly.find("could not be killed") != std::string::npos);
  // Many nodes: whatever the round's end, this node leaves instead of joining the next round.
  auto multi = multiNode(StopReason::kRoundEnded, false, Kind::kFailure);
  multi.workerStuck = true;
  d = decideAfterAttempt(multi);
  CHECK(d.step == NextStep::kFinish);
  CHECK(d.exitCode == dtrun::agent::kExitWorkerStuck);
  CHECK(d.leaveJob);
  CHECK_FALSE(d.reportFailure);
  // Asked to stop by a signal: the signal's code still.
  auto signalled = singleNode(StopReason::kSignal, false, 0, 3);
  signalled.signal = 15;
  signalled.workerStuck = true;
  CHECK(decideAfterAttempt(signalled).exitCode == 143);
  // The store gone while the stuck worker was waited for (the job ended elsewhere): still 75.
  auto lost = multiNode(StopReason::kStoreLost, false, Kind::kFailure);
  lost.workerStuck = true;
  CHECK(decideAfterAttempt(lost).exitCode == dtrun::agent::kExitWorkerStuck);
  lost.workerStuck = false;
  CHECK(decideAfterAttempt(lost).exitCode == 1);
}
