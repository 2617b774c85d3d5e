// --event_log=FILE: the run record's state changes as they happen, one JSON object per line
// (docs/event_log.schema.json), the machine-readable counterpart of the console. AttemptLog calls
// it where it records the same facts, so the event log and --report never disagree. Each line
// is one write(2) to a file opened with O_APPEND: agents of one host may share the file and
// their lines never mix. A file that cannot be opened is said once on stderr and the job goes
// on. Runs on the agent's loop; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "dtrun/common.h"

#include "report/run_report.h"

namespace dtrun::agent::detail {

class EventLog {
 public:
  // "" = off.
  EventLog(const std::string& path, std::string runId, std::string host);

  [[nodiscard]] bool enabled() const { return file_.valid(); }

  void agentStarted(const JobRecord& job);
  // A new attempt's record (begun, workers not started yet) and the one before it (null for the
  // first): "restart" when the restart count moved, and the round it joined ("round_opened" at
  // the join, "round_closed" at the assignment).
  void attemptBegun(const AttemptRecord& attempt, const AttemptRecord* previous);
  void attemptStarted(const AttemptRecord& attempt);  // the workers' pids
  void workerExited(const AttemptRecord& attempt, const RankRecord& rank);
  void attemptEnded(const AttemptRecord& attempt);
  void hang(const AttemptRecord& attempt, const HangRecord& hang);
  void signal(int sig, bool stops);
  void jobEnded(const JobRecord& job);
  // Any other event (the health checks' results): `fieldsJson` is a JSON object's members
  // without braces ("" = none), `event` a schema event name.
  void other(const std::string& event, const std::string& fieldsJson);

 private:
  // `body` is the event's own members, a JSON object; `at` its time.
  void write(const std::string& event, Clock::time_point at, const std::string& body);

  UniqueFd file_;
  const std::string runId_;
  const std::string host_;
  std::uint64_t seq_ = 0;
};

}  // namespace dtrun::agent::detail
