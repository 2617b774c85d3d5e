// The wiring of a multi-node job's rounds: join, the round's news, the job's end (agent_wiring.h
// says what the wiring is).
#include <algorithm>
#include <iostream>

#include <signal.h>

#include <boost/asio/post.hpp>

#include "agent_wiring.h"
#include "job/job.h"
#include "log.h"
#include "report/report.h"

namespace dtrun::agent::detail {

void Agent::rendezvous() {
  log::agent().info("rendezvous of job '{}' through {} ({}..{} nodes)", config_.runId,
                    jobStoreName(), config_.multiNode->minNodes, config_.multiNode->maxNodes);
  group_.clear();
  if (!assignment_) {  // the first join was checked in prepare()
    join();
    return;
  }
  health_.checkBeforeRound(healthPlan(std::chrono::milliseconds(0)), [this] { join(); });
}

void Agent::join() {
  // This node's workers' store (etcd, or a shared `dtrun store`) may be the next round's
  // workers': none of the last round's keys.
  const rdzv::StoreServer* workers = etcd_ ? store_.get() : workersStore_.get();
  if (workers != nullptr) {
    if (auto s = clearWorkerStore(workers->port(), config_.storeToken); !s.isOk()) {
      log::agent().warn("emptying this node's workers' store: {}", s.message());
    }
  }
  joinSent_ = Clock::now();
  job_->join([this](const rdzv::JoinOutcome& outcome) { onJoined(outcome); },
             [this](const Status& s) { onStoreLost(s); });
}

void Agent::onJoined(const rdzv::JoinOutcome& outcome) {
  if (finished_ || stopReason_ == StopReason::kSignal) {
    return;
  }
  if (outcome.closed) {
    jobClosed(outcome.end);
    return;
  }
  const auto& a = outcome.assignment;
  assignment_ = a;
  roundClosed_ = Clock::now();
  roundEnd_.reset();
  restartCount_ = a.attempt;
  log::agent().info("round {}: node {} of {}, ranks {}..{} of world size {}, attempt {}", a.round,
                    a.nodeRank, a.nodeCount, a.rankOffset, a.rankOffset + config_.nprocPerNode - 1,
                    a.worldSize, a.attempt);
  job_->watchEnd([this](const rdzv::RoundEnd& end) { onRoundEnded(end); },
                 [this](const Status& s) { onStoreLost(s); });
  if (config_.healthChecks.network && a.nodeCount > 1) {
    checkNetwork();
  } else {
    startAttempt();
  }
}

// --health_checks=network: dtrun-netcheck on this node, off the loop; the workers start once
// every node passed (HealthGate::Hooks::networkPassed).
void Agent::checkNetwork() {
  const auto& a = *assignment_;
  NetcheckPlace place;
  place.nodeRank = a.nodeRank;
  place.nodeCount = a.nodeCount;
  // etcd, or a shared `dtrun store`: node 0's workers' store
  place.masterAddr = a.masterPort != 0 ? a.masterAddr : config_.masterAddr;
  place.masterPort = a.masterPort != 0 ? static_cast<std::uint16_t>(a.masterPort) : storePort();
  place.storeToken = config_.storeToken;
  place.storePrefix = "/dtrun/" + config_.runId + "/netcheck/round_" + std::to_string(a.round);
  health_.checkNetwork(a.round, std::move(place));
}

void Agent::roundEndedBeforeWorkers(const rdzv::RoundEnd& end) {
  if (end.kind == rdzv::RoundEnd::Kind::kClosed) {
    jobClosed(end);
    return;
  }
  log::agent().info("rendezvous again: {}", end.message);
  rendezvous();
}

void Agent::onRoundEnded(const rdzv::RoundEnd& end) {
  roundEnd_ = end;
  if (health_.checkingNetwork()) {  // the round ended before its workers started
    health_.roundEnded([this, end] { roundEndedBeforeWorkers(end); });
    return;
  }
  if (stopReason_ == StopReason::kNone && !group_.allExited()) {
    log::agent().warn("round {} ended: {}; stopping this node's workers", assignment_->round,
                      end.message);
    stopReason_ = StopReason::kRoundEnded;
    if (end.exitCode == kExitHang && config_.hangTimeout.count() > 0) {
      // Another node found a hang: this node's stacks belong in the diagnosis too.
      hangWatch_->cancel();
      hangWatch_->dump(group_, attemptDir_, hangWatch_->peerDiagnosis(end, group_),
                       [this](HangRecord hang) { afterDump(std::move(hang)); });
      return;
    }
    beginStop(SIGTERM);
    return;
  }
  if (!finished_ && attemptSettled_) {  // the local group was already down
    decide(false);
  }
}

// The job is over: with an error, every agent prints its root cause and exits with its code;
// a spare also learns here that the job succeeded without it (exit 0).
void Agent::jobClosed(const rdzv::RoundEnd& end) {
  std::vector<WorkerFailure> failures = failures_;
  const auto root = decodeFailure(end.detail);
  if (root) {
    const bool local = std::any_of(failures.begin(), failures.end(), [&](const auto& f) {
      return f.pid == root->pid && f.rank == root->rank;
    });
    if (!local) {
      failures.push_back(*root);
    }
    recordRootCause(*root);
  }
  std::cerr << "dtrun: job '" << config_.runId << "' is over: " << end.message << "\n";
  if (!failures.empty()) {
    std::cerr << formatFailureReport(config_.entrypointName, host_, failures);
  }
  finishWithJob(end.exitCode);
}

// Leaves the job and exits; a store host first waits until every node has read the news.
// Every node leaves its report in the store before its bye, so past the barrier the store's
// host has them all for the job's one report.
void Agent::finishWithJob(int code) {
  if (auto s = sendNodeReport(jobStore_, config_.runId, log_.nodeReport(code, stopReason_));
      !s.isOk()) {
    log::agent().warn("this node's record is missing from the job's report: {}", s.message());
  }
  job_->bye();
  if (!gathersJob()) {
    finish(code);
    return;
  }
  job_->waitFinished(config_.multiNode->closeTimeout, [this, code] {
    auto reports = gatherNodeReports(jobStore_, config_.runId);
    if (reports.isOk()) {
      log_.setNodeReports(std::move(reports).value());
    } else {
      log::agent().warn("the job's report holds this node only: {}", reports.status().message());
    }
    if (etcd_) {  // every node passed the barrier: nothing of the job stays in etcd
      if (auto s = etcd_->removeJobKeys(); !s.isOk()) {
        log::agent().warn("removing the job's keys from etcd: {}", s.message());
      }
    }
    finish(code);
  });
}

void Agent::onStoreLost(const Status& status) {
  // Already stopping for a signal: a scheduler's scancel reaches every node, and the store's
  // host may be gone first; the exit code must still say "signalled" (128+signal), not 1.
  if (finished_ || stopReason_ == StopReason::kStoreLost || stopReason_ == StopReason::kSignal) {
    return;
  }
  std::cerr << "dtrun: lost " << jobStoreName() << ": " << status.message()
            << "; stopping this node's workers\n";
  stopReason_ = StopReason::kStoreLost;
  beginStop(SIGTERM);
  if (group_.allExited()) {
    boost::asio::post(io_, [this] { onAllExited(); });
  }
}

}  // namespace dtrun::agent::detail
