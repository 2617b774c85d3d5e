#include "job/attempt_policy.h"

#include "dtrun/agent_config.h"

namespace dtrun::agent::detail {

Decision decideAfterAttempt(const AttemptEnd& end) {
  Decision d;
  switch (end.reason) {
    case StopReason::kStartup:  // not a worker failure: no restart, no report
      d.exitCode = end.startupExitCode;
      d.leaveJob = end.multiNode;
      return d;
    case StopReason::kSignal:  // asked to stop: the signal's code, even with a worker stuck
      d.exitCode = 128 + end.signal;
      d.leaveJob = end.multiNode;
      return d;
    case StopReason::kStoreLost:  // 1, unless a worker is stuck: the node's health comes first
      if (!end.workerStuck) {
        d.exitCode = 1;
        return d;
      }
      break;
    case StopReason::kNone:
    case StopReason::kFailure:
    case StopReason::kRoundEnded:
      break;
  }
  if (end.workerStuck) {  // the node is unhealthy: out of the job, whatever its budget says
    d.exitCode = kExitWorkerStuck;
    d.leaveJob = end.multiNode;
    d.reportFailure = end.failed && !end.multiNode;
    d.stoppedEarly = "a worker of this node could not be killed (exit code " +
                     std::to_string(kExitWorkerStuck) + ")";
    return d;
  }
  if (end.multiNode) {
    // The keeper owns the job's budget: a failure here has already ended the round for every
    // node, and whether a next round runs is its decision, delivered through the next join.
    d.reportLocalSuccess = end.reason == StopReason::kNone && !end.failed;
    if (!end.roundEnd) {
      d.step = NextStep::kAwaitRoundEnd;
    } else if (*end.roundEnd == rdzv::RoundEnd::Kind::kSuccess) {
      d.step = NextStep::kFinishAfterDrain;
      d.exitCode = 0;
    } else {
      d.step = NextStep::kRendezvous;
    }
    return d;
  }
  if (!end.failed) {
    d.exitCode = 0;
    return d;
  }
  d.exitCode = end.rootCauseCode;
  d.reportFailure = true;
  if (end.noRestart) {
    d.stoppedEarly = "the failed rank asked not to be restarted (exit code " +
                     std::to_string(kExitNoRestart) + " or no_restart in its error file)";
    return d;
  }
  if (end.maxNoProgress > 0 && end.noProgressStreak >= end.maxNoProgress) {
    d.exitCode = kExitNoProgress;
    d.stoppedEarly = std::to_string(end.noProgressStreak) +
                     " attempts in a row made no progress (--max_no_progress_attempts=" +
                     std::to_string(end.maxNoProgress) + ")";
    return d;
  }
  if (end.restartsUsed < end.maxRestarts) {
    d.step = NextStep::kRestart;
    d.reportFailure = false;
    d.exitCode = 0;
  }
  return d;
}

int startupExitCode(const Status& error) {
  if (error.code() == Errc::kDenied) {
    return 2;  // refused credentials (etcd's password, a TLS certificate): a setting to fix
  }
  return error.code() == Errc::kNotFound ? kExitCannotRun : 1;
}

}  // namespace dtrun::agent::detail
