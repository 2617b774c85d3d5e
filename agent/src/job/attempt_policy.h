// What the agent does once its worker group is down: the job's rules for restarts, rounds and exit
// codes, as one pure function, apart from the mechanism that starts and stops processes (as
// torch's SimpleElasticAgent keeps its loop over abstract start/stop/monitor). No I/O, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtrun/common.h"
#include "dtrun/round.h"

namespace dtrun::agent::detail {

// A hang fails the round with timeout(1)'s code, so scripts can tell it from a worker's own.
constexpr int kExitHang = 124;

// Why the group was stopped (or kNone: it ended on its own).
enum class StopReason : std::uint8_t {
  kNone,
  kFailure,     // a worker of this node failed, or a hang was found here
  kSignal,      // a handled signal arrived: exit 128 + signal
  kStartup,     // the group could not be started at all
  kRoundEnded,  // multi-node: the round ended elsewhere (failure, membership change)
  kStoreLost,   // multi-node: the job's store stopped answering
};

// What the policy knows when the last local worker is reaped.
struct AttemptEnd {
  StopReason reason = StopReason::kNone;
  bool multiNode = false;
  bool failed = false;  // this node recorded a failure (a worker's, or a hang found here)
  int restartsUsed = 0;
  int maxRestarts = 0;
  int rootCauseCode = 0;    // the first failure's shell code (128 + signal for a signal)
  int signal = 0;           // reason == kSignal
  int startupExitCode = 1;  // reason == kStartup: 127 when the program cannot run
  // Multi-node: how the round ended, once known (it may arrive after the local group is down).
  std::optional<rdzv::RoundEnd::Kind> roundEnd;
  // Single node (the keeper judges these for a job of several): the failed rank asked not to
  // be restarted; failed attempts in a row, this one included, that made no progress; the
  // limit on those (0 = none).
  bool noRestart = false;
  int noProgressStreak = 0;
  int maxNoProgress = 0;
  // A worker outlived SIGKILL (stuck in the kernel) and was abandoned: this node cannot run
  // another attempt (it may hold the worker's GPU, files, ports).
  bool workerStuck = false;
};

enum class NextStep : std::uint8_t {
  kRestart,           // single node: start the group again (attempt restartsUsed + 1)
  kRendezvous,        // multi-node: join the next round
  kAwaitRoundEnd,     // multi-node: local workers are done; wait at the exit barrier
  kFinishAfterDrain,  // multi-node success: say bye, and a store host waits for every node first
  kFinish,            // exit now with `exitCode`
};

struct Decision {
  NextStep step = NextStep::kFinish;
  int exitCode = 0;
  // Single-node failure with restarts used up: print the failure report first.
  bool reportFailure = false;
  // Multi-node: tell the others this node leaves (its stop was its own, not the round's).
  bool leaveJob = false;
  // Multi-node: this node's workers all succeeded; tell the keeper before waiting.
  bool reportLocalSuccess = false;
  // Why restarts stopped before the budget ran out: one line for the console ("" = they did not).
  std::string stoppedEarly;
};

Decision decideAfterAttempt(const AttemptEnd& end);

// What a node exits with when it could not start (its store, its run directory, its workers):
// 127 when the program cannot be run (kNotFound), 2 when credentials were refused (kDenied:
// a wrong store token, etcd password or TLS certificate), else 1.
int startupExitCode(const Status& error);

}  // namespace dtrun::agent::detail
