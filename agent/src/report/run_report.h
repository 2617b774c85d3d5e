// The job's run report (--report=FILE, docs/report.schema.json): nodes, ranks, every attempt
// with its start, end, cause, per-rank exits and startup timeline, the root cause, the hang
// diagnosis. The agent records events as they happen; the JSON document and the console summary
// at exit are both made from this one record. Not thread-safe (the agent's loop thread only).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "dtrun/agent_config.h"

#include "report/failure_report.h"

namespace dtrun::agent::detail {

using Clock = std::chrono::system_clock;

// What each rank of this node did in one attempt.
struct RankRecord {
  int rank = 0;
  int localRank = 0;
  pid_t pid = 0;
  std::string logDir;
  std::optional<LocalPlacement> placement;  // what it was bound to and saw, if placed
  std::optional<ExitStatus> exit;           // unset: never started, or never reaped
  std::string logError;  // why its log files lost bytes ("" = they have them all)
  std::string stuck;     // where it waited when SIGKILL could not end it ("" = it ended)
  std::optional<Clock::time_point> storeConnected;     // from the rank's progress file
  std::optional<Clock::time_point> communicatorReady;  // (libdtrt or the Python helper)
};

// One suspect or bystander in a hang, as the diagnosis saw it.
struct HangRank {
  int rank = 0;
  std::string host;
  pid_t pid = 0;
  std::uint64_t ops = 0;
  std::string op;  // "" = not in an operation
  std::string group;
  std::uint64_t bytes = 0;
  double inOpSeconds = 0;  // how long it has been in `op`
  double idleSeconds = 0;  // since its last begin or end
  bool suspect = false;
  std::string stackFile;
  std::string stack;  // the native stack, then the Python one when the worker offered it
};

struct HangRecord {
  Clock::time_point detectedAt;
  std::string reason;      // "no_progress" or "lagging_rank"
  std::string summary;     // one line naming the suspects, as the console shows it
  std::string reportFile;  // hang.txt in the attempt's log directory
  std::vector<HangRank> ranks;
};

struct AttemptRecord {
  int attempt = 0;
  std::optional<int> round;  // multi-node jobs
  int nodeRank = 0;
  int nodeCount = 1;
  int worldSize = 1;
  std::optional<Clock::time_point> rendezvousJoined;  // the join request was sent
  std::optional<Clock::time_point> roundClosed;       // the assignment arrived
  Clock::time_point started;                          // the group's start began
  std::optional<Clock::time_point> spawned;           // every fork returned
  std::optional<Clock::time_point> firstRunning;      // the first exec confirmed
  std::optional<Clock::time_point> stopBegan;
  std::optional<Clock::time_point> ended;  // every worker reaped
  std::string
      cause;  // succeeded, worker_failed, hang, round_ended, signal, store_lost, startup_failed
  std::string message;
  std::vector<RankRecord> ranks;
};

// A rank the live view's straggler judgement named (the judging agent only: one node, or the
// store's host): when, in which attempt, how late and how often over the window.
struct StragglerRecord {
  Clock::time_point time;
  int attempt = 0;
  int rank = 0;
  int nodeRank = 0;
  std::string host;
  double lateSeconds = 0;
  int lateCount = 0;
  int judged = 0;
};

struct JobRecord {
  std::string runId;
  std::string entrypoint;
  std::vector<std::string> command;
  std::string host;
  std::string dtrunVersion;  // the --version line of the dtrun that ran this node
  int minNodes = 1;
  int maxNodes = 1;
  int nprocPerNode = 1;
  int maxRestarts = 0;
  Clock::time_point agentStart;
  std::optional<Clock::time_point> ended;
  std::string outcome;  // succeeded, failed, hang, signal, store_lost, startup_failed, job_closed
  int exitCode = 0;
  std::vector<AttemptRecord> attempts;
  std::optional<WorkerFailure> rootCause;
  std::optional<HangRecord> hang;
  std::vector<StragglerRecord> stragglers;  // written as "stragglers" when any was named
  // The store's host of a job of several nodes: every node's own report (JSON text), gathered
  // at the end; written as "node_reports".
  std::vector<std::string> nodeReports;
};

// The report as JSON text (pretty-printed), valid against docs/report.schema.json.
std::string reportJson(const JobRecord& job);

// The console summary at exit: one line for the job, one per attempt, the root cause and the
// hang, from the same record as the JSON.
std::string formatSummary(const JobRecord& job);

// The startup timeline of one attempt as a short table (seconds after the agent started).
std::string formatTimeline(const JobRecord& job, const AttemptRecord& attempt);

// Writes `text` to `path` through a temporary file and a rename. False on any error.
bool writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace dtrun::agent::detail
