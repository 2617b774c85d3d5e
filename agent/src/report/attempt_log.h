// The run record (run_report.h's JobRecord) built in one place: attempts begin and end here, and
// each attempt's cause and the job's outcome are classified here, from the same stop reason the
// policy sees. --report's JSON, the summary at exit and --verbose's timeline all print from it.
// Runs on the agent's loop; not thread-safe.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrun/agent_config.h"
#include "dtrun/round.h"

#include "health/health.h"
#include "job/job.h"
#include "report/event_log.h"
#include "report/failure_report.h"
#include "report/run_report.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

class AttemptLog {
 public:
  AttemptLog(const AgentConfig& config, const std::string& host);

  // A new attempt's record, before its workers start. Multi-node jobs pass the round's
  // assignment and when the join was sent and the round closed.
  void begin(int attempt, const std::filesystem::path& attemptDir,
             const std::optional<rdzv::Assignment>& assignment,
             std::optional<Clock::time_point> joinSent,
             std::optional<Clock::time_point> roundClosed);
  void started(const GroupStart& start, const WorkerGroup& group);
  void stopBegan();
  void exited(int localRank, const ExitStatus& status);

  // Ends the current attempt (once; later calls do nothing): its cause from `reason`, its
  // message from the round's end, the signal or the first failure; the workers' startup
  // milestones from their progress files. Prints the timeline with --verbose.
  void end(StopReason reason, const std::vector<WorkerFailure>& failures, bool hang, int signal,
           const std::optional<rdzv::RoundEnd>& roundEnd, const WorkerGroup& group);

  void setRootCause(const WorkerFailure& failure) { record_.rootCause = failure; }
  void setHang(HangRecord hang);
  // A signal the agent received, that stops the job or is only forwarded (--event_log).
  void signalReceived(int sig, bool stops) { events_.signal(sig, stops); }
  // --event_log, for events recorded elsewhere (health checks).
  EventLog& events() { return events_; }
  // --health_checks' results before a round (`attempt`: the restart count then): one
  // health_check event each, and the report's health_checks.
  void healthChecked(const std::vector<CheckResult>& results, int attempt);
  // A rank named a straggler: a straggler event and the report's stragglers.
  void stragglerNamed(StragglerRecord straggler);

  // Where finish() leaves a copy of the report for `dtrun bundle` ("" = nowhere).
  void setRunDir(std::filesystem::path runDir) { runDir_ = std::move(runDir); }

  // The job's end: its outcome from the exit code and the last stop reason; the summary and
  // --report are written when asked for, the run directory's report.json always.
  void finish(int exitCode, StopReason reason);
  // This node's report as it would be written if the job ended now with `exitCode`: what a
  // node leaves for the store's host (JSON text).
  [[nodiscard]] std::string nodeReport(int exitCode, StopReason reason) const;
  // The store's host: every node's report, for its own --report.
  void setNodeReports(std::vector<std::string> reports) {
    record_.nodeReports = std::move(reports);
  }

 private:
  [[nodiscard]] bool open() const { return !record_.attempts.empty() && !attempt().ended; }
  AttemptRecord& attempt() { return record_.attempts.back(); }
  [[nodiscard]] const AttemptRecord& attempt() const { return record_.attempts.back(); }

  const AgentConfig& config_;
  JobRecord record_;
  EventLog events_;  // every record above is also an event line, written as it is made
  std::vector<HealthCheckRecord> healthChecks_;
  std::filesystem::path runDir_;
};

}  // namespace dtrun::agent::detail
