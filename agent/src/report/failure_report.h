// torchrun's failure summary, for the workers of this node. Pure functions (file reads aside).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "workers/workers.h"

namespace dtrun::agent::detail {

struct WorkerFailure {
  int rank = 0;
  int localRank = 0;
  pid_t pid = 0;
  ExitStatus status;
  // When the agent saw it. Exits arrive as events, so this orders failures more precisely than
  // the error files' one-second timestamps would.
  std::chrono::system_clock::time_point time;
  std::string errorFile;  // path; "<N/A>" in the report when not written
  std::string message;    // error file message, else stderr tail, else a hint
  std::string host;       // the node it happened on; "" = the report's host
  int nodeRank = -1;      // multi-node jobs: that node's rank
  // The worker asked not to be restarted: it exited with kExitNoRestart, or its error file says
  // "no_restart": true (at its top level or in "message").
  bool noRestart = false;
};

// A failure as JSON text, for the other nodes of a job (the round's end carries it), and back;
// nullopt for anything malformed.
std::string encodeFailure(const WorkerFailure& failure);
std::optional<WorkerFailure> decodeFailure(const std::string& text);

// Reads a worker's TORCHELASTIC_ERROR_FILE (torchrun's @record format, or the legacy
// {"message": "...", "timestamp": N}); fills errorFile and message. False if absent or unreadable.
bool readErrorFile(const std::string& path, WorkerFailure& failure);

// The last `maxLines` lines of a text file (empty if unreadable).
std::string tailOfFile(const std::string& path, std::size_t maxLines);

// The worker's own account of its failure from its log directory `dir`: its error file, else the
// tail of its stderr; a line saying that neither was kept with --log_dir=/dev/null (`dir` empty).
void describeFromFiles(WorkerFailure& failure, const std::filesystem::path& dir);

// The summary torchrun prints: root cause = the earliest failure; the others are listed first.
std::string formatFailureReport(const std::string& entrypoint, const std::string& host,
                                std::vector<WorkerFailure> failures);

}  // namespace dtrun::agent::detail
