// The wiring of one attempt of the worker group: its start, its workers' exits, a hang, its stop,
// and what the policy makes of its end (agent_wiring.h says what the wiring is).
#include <iostream>

#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include "agent_wiring.h"
#include "job/job.h"
#include "log.h"
#include "report/report.h"

namespace dtrun::agent::detail {
namespace {

namespace fs = std::filesystem;

// Every node of a hung job dumps its stacks at about the same time; stopping this node's workers
// at once would break the connections of workers another node is still dumping.
constexpr std::chrono::milliseconds kPeerDumpGrace{2000};

// Where this node's ranks stand in the job for one attempt; one node alone without a round.
GroupPlacement placementFor(const std::optional<rdzv::Assignment>& round, int nprocPerNode,
                            int restartCount, std::uint16_t storePort) {
  GroupPlacement placement;
  placement.rankOffset = round ? round->rankOffset : 0;
  placement.worldSize = round ? round->worldSize : nprocPerNode;
  placement.groupRank = round ? round->nodeRank : 0;
  placement.groupWorldSize = round ? round->nodeCount : 1;
  placement.restartCount = restartCount;
  placement.masterPort = storePort;
  if (round && round->masterPort != 0) {  // etcd or a shared store: node 0's
    placement.masterAddr = round->masterAddr;
    placement.masterPort = static_cast<std::uint16_t>(round->masterPort);
  }
  return placement;
}

}  // namespace

void Agent::startAttempt() {
  // --log_dir=/dev/null: no directory (runDir_ is empty), so none for the attempt either.
  fs::path attemptDir =
      runDir_.empty() ? fs::path() : runDir_ / ("attempt_" + std::to_string(restartCount_));
  std::error_code ec;
  // A membership change keeps the attempt number: its round gets a directory of its own.
  if (assignment_ && !attemptDir.empty() && fs::exists(attemptDir, ec)) {
    attemptDir += "-round" + std::to_string(assignment_->round);
  }
  stopReason_ = StopReason::kNone;
  failures_.clear();
  hangThisAttempt_ = false;
  attemptProgress_ = Progress::kUnknown;
  if (!config_.progressFile.empty()) {
    iterationAtStart_ = readIteration(config_.progressFile);
  }
  attemptSettled_ = false;
  workerStuck_ = false;
  oomKillsBefore_ = oomKills_.kills();
  attemptDir_ = attemptDir;
  log_.begin(restartCount_, attemptDir, assignment_, joinSent_, roundClosed_);
  GroupPlacement placement =
      placementFor(assignment_, config_.nprocPerNode, restartCount_, storePort());
  placement.attemptDir = attemptDir;
  const GroupStart start = group_.start(placement);
  log_.started(start, group_);
  if (!start.status.isOk()) {
    std::cerr << "dtrun: " << start.status.message() << "\n";
    startupExitCode_ = startupExitCode(start.status);
    stopReason_ = StopReason::kStartup;  // not a worker failure: no restart, no report
    beginStop(SIGKILL);
    if (group_.allExited()) {  // nothing is left running: nothing will be reaped
      boost::asio::post(io_, [this] { onAllExited(); });
    }
    return;
  }
  hangWatch_->watch(group_, assignment_,
                    [this](HangDiagnosis diagnosis) { onHang(std::move(diagnosis)); });
}

void Agent::onWorkerExited(const Worker& w, ExitStatus status) {
  if (status.signaled && status.code == SIGKILL) {
    const auto kills = oomKills_.kills();
    if (kills && oomKillsBefore_ && *kills > *oomKillsBefore_) {
      status.killedBy = oomKills_.describeKill();
    }
    oomKillsBefore_ = kills;  // one OOM kill names one worker
  }
  log_.exited(w.localRank, status);
  log::agent().debug("rank {} (pid {}) exited: {}", w.rank, w.child->pid(), status.describe());
  if (stopReason_ == StopReason::kNone && !status.success()) {
    WorkerFailure failure;
    failure.rank = w.rank;
    failure.localRank = w.localRank;
    failure.pid = w.child->pid();
    failure.status = status;
    failure.time = std::chrono::system_clock::now();
    log::agent().warn("rank {} (pid {}) failed: {}; stopping the worker group", w.rank, failure.pid,
                      status.describe());
    if (status.signaled && forwardedSignals_.count(status.code) != 0) {
      log::agent().warn(
          "rank {} died of {}, which dtrun forwarded to it: a worker that does not handle it "
          "ends (list it in --signals_to_handle to stop the job on it instead)",
          w.rank, signalName(status.code));
    }
    stopReason_ = StopReason::kFailure;
    beginStop(SIGTERM);
    describeFromFiles(failure, w.dir);
    failure.noRestart =
        failure.noRestart || (!status.signaled && status.code == agent::kExitNoRestart);
    judgeAttempt();
    if (job_) {  // end the round for every node now, with this failure as its cause
      failure.host = host_;
      failure.nodeRank = assignment_ ? assignment_->nodeRank : -1;
      job_->endRound(roundFailure(
          "rank " + std::to_string(w.rank) + " on " + host_ + " failed: " + status.describe(),
          failure, status.shellCode()));
    }
    failures_.push_back(failure);
  }
  if (group_.allExited()) {
    onAllExited();
  }
}

// Workers SIGKILL could not end were abandoned: each is named with where it waits, and the group
// counts as down without them (the policy then takes this node out of the job).
void Agent::onWorkersStuck() {
  for (const Worker& w : group_.workers()) {
    if (!w.stuck.empty()) {
      std::cerr << "dtrun: rank " << w.rank << " (pid " << w.child->pid() << ") on " << host_
                << " is " << w.stuck << "; not waiting for it\n";
    }
  }
  workerStuck_ = true;
  if (group_.allExited()) {
    onAllExited();
  }
}

// Whether this failed attempt moved the job forward, from its ranks' progress files and the
// user's checkpoint-iteration file; counts failed attempts in a row that did not.
void Agent::judgeAttempt() {
  std::vector<progress::Snapshot> ranks;
  for (const Worker& w : group_.workers()) {
    if (w.progress) {
      if (auto snapshot = w.progress->read()) {
        ranks.push_back(*snapshot);
      }
    }
  }
  const auto iterationNow =
      config_.progressFile.empty() ? std::nullopt : readIteration(config_.progressFile);
  attemptProgress_ = judgeProgress(ranks, iterationAtStart_, iterationNow);
  noProgressStreak_ = attemptProgress_ == Progress::kNone ? noProgressStreak_ + 1 : 0;
}

// Runs `next` after `delay` (at once for 0), unless the job stops meanwhile.
void Agent::after(std::chrono::milliseconds delay, std::function<void()> next) {
  if (delay.count() <= 0) {
    next();
    return;
  }
  restartTimer_.expires_after(delay);
  restartTimer_.async_wait([this, next = std::move(next)](const boost::system::error_code& ec) {
    if (!ec && !finished_ && stopReason_ != StopReason::kSignal) {
      next();
    }
  });
}

// The round's end for a failure here, with what the keeper needs to stop a crash loop.
rdzv::RoundEnd Agent::roundFailure(std::string message, const WorkerFailure& failure,
                                   int code) const {
  rdzv::RoundEnd end{rdzv::RoundEnd::Kind::kFailure, std::move(message), encodeFailure(failure),
                     code};
  end.progressed = attemptProgress_ != Progress::kNone;
  end.noRestart = failure.noRestart;
  return end;
}

// Fails the round as a worker failure would (so the restart rules apply), naming the first
// suspect on whichever node it runs, and dumps the stacks. The round's end goes out before
// the dumps and the stop: the other nodes dump their workers' stacks meanwhile, before this
// node's stopped workers break their connections.
void Agent::onHang(HangDiagnosis diagnosis) {
  log::agent().error("hang: {}", diagnosis.summary);
  const WorkerFailure failure =
      hangFailure(diagnosis, group_, assignment_ ? assignment_->nodeRank : -1, attemptDir_);
  hangThisAttempt_ = true;
  stopReason_ = StopReason::kFailure;
  failures_.push_back(failure);
  judgeAttempt();
  if (job_) {
    job_->endRound(
        roundFailure("hang found on " + host_ + ": " + diagnosis.summary, failure, kExitHang));
  }
  hangWatch_->dump(group_, attemptDir_, std::move(diagnosis),
                   [this](HangRecord hang) { afterDump(std::move(hang)); });
}

// The stacks are in their files: now the workers stop (a signal may have stopped them already).
void Agent::afterDump(HangRecord hang) {
  log_.setHang(std::move(hang));
  if (finished_) {
    return;
  }
  if (stopReason_ != StopReason::kSignal) {
    if (job_) {
      peerGraceTimer_.expires_after(kPeerDumpGrace);
      peerGraceTimer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && !finished_) {
          beginStop(SIGTERM);
        }
      });
    } else {
      beginStop(SIGTERM);
    }
  }
  if (group_.allExited()) {  // the workers ended during the dump
    onAllExited();
  }
}

void Agent::beginStop(int sig) {
  log_.stopBegan();
  hangWatch_->cancel();
  peerGraceTimer_.cancel();
  restartTimer_.cancel();
  group_.stop(sig);
}

// The group is down (or, between rounds, there is none): settle it, then ask the policy what
// comes next. Called again when the reason changes (a signal, the store lost) after a settled
// attempt waited at the barrier. A dump under way finishes first (its record belongs to this
// attempt); afterDump() comes back here.
void Agent::onAllExited() {
  if (finished_ || !group_.allExited() || hangWatch_->dumping()) {
    return;
  }
  attemptSettled_ = true;
  hangWatch_->cancel();
  peerGraceTimer_.cancel();
  log_.end(stopReason_, failures_, hangThisAttempt_, stopSignal_, roundEnd_, group_);
  group_.settle();
  decide(true);
}

// `groupJustEnded`: called as the group went down (not later, when the round's end arrived).
void Agent::decide(bool groupJustEnded) {
  AttemptEnd end;
  end.reason = stopReason_;
  end.multiNode = job_ != nullptr;
  end.failed = !failures_.empty();
  end.restartsUsed = restartCount_;
  end.maxRestarts = config_.maxRestarts;
  end.rootCauseCode = failures_.empty() ? 0 : failures_.front().status.shellCode();
  end.noRestart = !failures_.empty() && failures_.front().noRestart;
  end.noProgressStreak = noProgressStreak_;
  end.maxNoProgress = config_.maxNoProgressAttempts;
  end.signal = stopSignal_;
  end.startupExitCode = startupExitCode_;
  end.workerStuck = workerStuck_;
  if (roundEnd_) {
    end.roundEnd = roundEnd_->kind;
  }
  const Decision d = decideAfterAttempt(end);
  if (d.leaveJob && job_) {
    job_->leave(workerStuck_ && stopReason_ != StopReason::kSignal
                    ? "a worker of " + host_ + " could not be killed (stuck in the kernel)"
                : stopReason_ == StopReason::kStartup ? "its workers could not start"
                                                      : "received " + signalName(stopSignal_));
  }
  if (d.reportLocalSuccess && groupJustEnded) {
    log::agent().info("this node's {} worker(s) succeeded; waiting for the other nodes",
                      group_.workers().size());
    job_->done();
  }
  switch (d.step) {
    case NextStep::kAwaitRoundEnd:
      return;  // onRoundEnded() decides again
    case NextStep::kRendezvous: {
      log::agent().info("rendezvous again: {}", roundEnd_->message);
      // After a failure every node waits the same backoff: the attempt number is the job's.
      const auto delay =
          roundEnd_->kind == rdzv::RoundEnd::Kind::kFailure
              ? restartDelay(restartCount_, config_.restartBackoff, config_.restartBackoffMax)
              : std::chrono::milliseconds(0);
      after(delay, [this] { rendezvous(); });
      return;
    }
    case NextStep::kFinishAfterDrain:
      finishWithJob(d.exitCode);
      return;
    case NextStep::kRestart: {
      const auto delay =
          restartDelay(restartCount_, config_.restartBackoff, config_.restartBackoffMax);
      ++restartCount_;
      log::agent().warn("restarting the worker group (restart {} of {}{}) after rank {} failed: {}",
                        restartCount_, config_.maxRestarts,
                        delay.count() > 0 ? ", in " + std::to_string(delay.count()) + " ms" : "",
                        failures_.front().rank, failures_.front().status.describe());
      after(delay, [this] {
        health_.checkBeforeRound(healthPlan(std::chrono::milliseconds(0)),
                                 [this] { startAttempt(); });
      });
      return;
    }
    case NextStep::kFinish:
      break;
  }
  if (!d.stoppedEarly.empty()) {
    std::cerr << "dtrun: not restarting: " << d.stoppedEarly << "\n";
  }
  if (d.reportFailure) {
    for (auto& failure : failures_) {
      if (!hangThisAttempt_) {
        describeFromFiles(failure,
                          group_.workers()[static_cast<std::size_t>(failure.localRank)].dir);
      }
    }
    std::cerr << formatFailureReport(config_.entrypointName, host_, failures_);
    recordRootCause(failures_.front());
  } else if (d.exitCode == 0 && !job_) {
    log::agent().info("all {} worker(s) succeeded", group_.workers().size());
  } else if (stopReason_ == StopReason::kSignal && !config_.errorFile.empty()) {
    writeErrorFile(config_.errorFile, signalErrorJson(::getpid(), stopSignal_));
  }
  finish(d.exitCode);
}

}  // namespace dtrun::agent::detail
