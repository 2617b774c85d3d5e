#include "report/attempt_log.h"

#include <cerrno>
#include <iostream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "log.h"

namespace dtrun::agent::detail {
namespace {

std::string attemptCause(StopReason reason, bool failed, bool hang) {
  switch (reason) {
    case StopReason::kNone:
      return failed ? "worker_failed" : "succeeded";
    case StopReason::kFailure:
      return hang ? "hang" : "worker_failed";
    case StopReason::kSignal:
      return "signal";
    case StopReason::kStartup:
      return "startup_failed";
    case StopReason::kRoundEnded:
      return "round_ended";
    case StopReason::kStoreLost:
      return "store_lost";
  }
  return "worker_failed";
}

std::string jobOutcome(const JobRecord& record, int exitCode, StopReason reason) {
  if (exitCode == 0) {
    return "succeeded";
  }
  switch (reason) {
    case StopReason::kSignal:
      return "signal";
    case StopReason::kStoreLost:
      return "store_lost";
    case StopReason::kStartup:
      return "startup_failed";
    default:
      break;
  }
  if (record.attempts.empty()) {
    return "startup_failed";
  }
  if (record.rootCause && record.rootCause->status.code == kExitHang &&
      !record.rootCause->status.signaled && record.hang) {
    return "hang";
  }
  return "failed";
}

std::optional<Clock::time_point> clockOf(std::int64_t ns) {
  if (ns == 0) {
    return std::nullopt;
  }
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

}  // namespace

AttemptLog::AttemptLog(const AgentConfig& config, const std::string& host)
    : config_(config), events_(config.eventLogFile, config.runId, host) {
  record_.runId = config.runId;
  record_.entrypoint = config.entrypointName;
  record_.dtrunVersion = config.dtrunVersion;
  record_.command = config.command;
  record_.host = host;
  record_.minNodes = config.multiNode ? config.multiNode->minNodes : 1;
  record_.maxNodes = config.multiNode ? config.multiNode->maxNodes : 1;
  record_.nprocPerNode = config.nprocPerNode;
  record_.maxRestarts = config.maxRestarts;
  record_.agentStart = Clock::now();
  events_.agentStarted(record_);
}

void AttemptLog::begin(int attempt, const std::filesystem::path& attemptDir,
                       const std::optional<rdzv::Assignment>& assignment,
                       std::optional<Clock::time_point> joinSent,
                       std::optional<Clock::time_point> roundClosed) {
  AttemptRecord a;
  a.attempt = attempt;
  if (assignment) {
    a.round = static_cast<int>(assignment->round);
    a.nodeRank = assignment->nodeRank;
    a.nodeCount = assignment->nodeCount;
    a.worldSize = assignment->worldSize;
    a.rendezvousJoined = joinSent;
    a.roundClosed = roundClosed;
  } else {
    a.worldSize = config_.nprocPerNode;
  }
  a.started = Clock::now();
  for (int localRank = 0; localRank < config_.nprocPerNode; ++localRank) {
    RankRecord rank;
    rank.localRank = localRank;
    rank.rank = (assignment ? assignment->rankOffset : 0) + localRank;
    rank.logDir = attemptDir.empty() ? "" : (attemptDir / std::to_string(localRank)).string();
    if (static_cast<std::size_t>(localRank) < config_.placement.size()) {
      rank.placement = config_.placement[static_cast<std::size_t>(localRank)];
    }
    a.ranks.push_back(rank);
  }
  record_.attempts.push_back(std::move(a));
  const std::size_t n = record_.attempts.size();
  events_.attemptBegun(record_.attempts.back(), n > 1 ? &record_.attempts[n - 2] : nullptr);
}

void AttemptLog::started(const GroupStart& start, const WorkerGroup& group) {
  attempt().spawned = start.spawned;
  attempt().firstRunning = start.firstRunning;
  for (const Worker& w : group.workers()) {
    if (w.child) {
      attempt().ranks[static_cast<std::size_t>(w.localRank)].pid = w.child->pid();
    }
  }
  events_.attemptStarted(attempt());
}

void AttemptLog::stopBegan() {
  // A stop asked for after the group ended (a timer that fired as it settled) stops nothing.
  if (!record_.attempts.empty() && !attempt().stopBegan && !attempt().ended) {
    attempt().stopBegan = Clock::now();
  }
}

void AttemptLog::exited(int localRank, const ExitStatus& status) {
  if (!record_.attempts.empty()) {
    RankRecord& rank = attempt().ranks[static_cast<std::size_t>(localRank)];
    rank.exit = status;
    events_.workerExited(attempt(), rank);
  }
}

void AttemptLog::setHang(HangRecord hang) {
  record_.hang = std::move(hang);
  if (!record_.attempts.empty()) {
    events_.hang(attempt(), *record_.hang);
  }
}

void AttemptLog::end(StopReason reason, const std::vector<WorkerFailure>& failures, bool hang,
                     int signal, const std::optional<rdzv::RoundEnd>& roundEnd,
                     const WorkerGroup& group) {
  if (!open()) {
    return;
  }
  for (const Worker& w : group.workers()) {  // the startup milestones the workers wrote
    auto& record = attempt().ranks[static_cast<std::size_t>(w.localRank)];
    record.stuck = w.stuck;
    for (const auto& [pump, name] :
         {std::pair{w.out.get(), "stdout.log"}, {w.err.get(), "stderr.log"}}) {
      if (pump != nullptr && !pump->logError().empty() && record.logError.empty()) {
        record.logError = std::string(name) + ": " + pump->logError();
      }
    }
    if (!w.progress) {
      continue;
    }
    if (const auto snapshot = w.progress->read()) {
      auto& rank = attempt().ranks[static_cast<std::size_t>(w.localRank)];
      rank.storeConnected = clockOf(snapshot->storeConnectedNs);
      rank.communicatorReady = clockOf(snapshot->commReadyNs);
    }
  }
  AttemptRecord& a = attempt();
  a.ended = Clock::now();
  a.cause = attemptCause(reason, !failures.empty(), hang);
  if (reason == StopReason::kSignal) {
    a.message = "received " + signalName(signal);
  } else if (reason == StopReason::kRoundEnded) {
    a.message = roundEnd ? roundEnd->message : "";
  }
  if (!failures.empty() && a.message.empty()) {
    const WorkerFailure& f = failures.front();
    a.message = hang && record_.hang
                    ? record_.hang->summary
                    : "rank " + std::to_string(f.rank) + " failed: " + f.status.describe();
  }
  events_.attemptEnded(a);
  if (config_.verbose) {
    std::cerr << formatTimeline(record_, a);
  }
}

std::string AttemptLog::nodeReport(int exitCode, StopReason reason) const {
  JobRecord node = record_;
  node.ended = Clock::now();
  node.exitCode = exitCode;
  node.outcome = jobOutcome(node, exitCode, reason);
  return withHealthChecks(reportJson(node), healthChecks_);
}

void AttemptLog::healthChecked(const std::vector<CheckResult>& results, int attempt) {
  for (const auto& r : results) {
    events_.other("health_check", checkEventFields(r, attempt, -1));
    healthChecks_.push_back(HealthCheckRecord{r, attempt});
  }
}

void AttemptLog::stragglerNamed(StragglerRecord straggler) {
  const nlohmann::ordered_json fields = {
      {"attempt", straggler.attempt},    {"rank", straggler.rank},
      {"node_rank", straggler.nodeRank}, {"rank_host", straggler.host},
      {"late_s", straggler.lateSeconds}, {"late_count", straggler.lateCount},
      {"judged", straggler.judged}};
  const std::string text = fields.dump();
  events_.other("straggler", text.substr(1, text.size() - 2));
  record_.stragglers.push_back(std::move(straggler));
}

void AttemptLog::finish(int exitCode, StopReason reason) {
  record_.ended = Clock::now();
  record_.exitCode = exitCode;
  record_.outcome = jobOutcome(record_, exitCode, reason);
  events_.jobEnded(record_);
  const std::string report = withHealthChecks(reportJson(record_), healthChecks_);
  if (!runDir_.empty() && !writeFileAtomically((runDir_ / "report.json").string(), report)) {
    log::agent().warn("cannot write {}: `dtrun bundle` will lack the run report",
                      (runDir_ / "report.json").string());
  }
  if (config_.reportFile.empty() && !config_.verbose) {
    return;
  }
  std::cerr << formatSummary(record_);
  if (config_.reportFile.empty()) {
    return;
  }
  if (writeFileAtomically(config_.reportFile, report)) {
    std::cerr << "dtrun: run report in " << config_.reportFile << "\n";
  } else {
    std::cerr << "dtrun: cannot write the run report to " << config_.reportFile << ": "
              << std::error_code(errno, std::generic_category()).message() << "\n";
  }
}

}  // namespace dtrun::agent::detail
