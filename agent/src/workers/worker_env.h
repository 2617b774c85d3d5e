// The environment each worker gets: the agent's own, plus exactly what torchrun sets, plus the
// DTRUN_* variables libdtrt reads. Pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/agent_config.h"

namespace dtrun::agent::detail {

struct WorkerPlacement {
  int localRank = 0;
  int rank = 0;
  int worldSize = 1;
  int groupRank = 0;
  int groupWorldSize = 1;
  int restartCount = 0;
  std::string masterAddr;
  std::uint16_t masterPort = 0;
  std::string errorFile;
  std::string logDir;  // this rank's directory for this attempt
  // DTRUN_PROGRESS_FILE: the node's progress file for this attempt, where the worker reports its
  // progress in slot DTRUN_PROGRESS_SLOT, its local rank.
  std::string progressFile;
};

// torch's NCCL flight recorder files in a rank's directory begin with this (the Python hook sets
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE and _PIPE_FILE to <rank dir>/<this>; torch appends the rank).
inline constexpr std::string_view kFlightRecorderPrefix = "nccl_trace_rank_";

// `inherited` holds "NAME=value" entries (the agent's environ); later entries override earlier
// ones. The result has one entry per name.
std::vector<std::string> workerEnvironment(const std::vector<std::string>& inherited,
                                           const AgentConfig& config,
                                           const WorkerPlacement& placement);

// What dtrun set in a worker's environment (not what it inherited), one "NAME=value" a line, its
// secrets redacted, after a "# local rank L, rank R" line: the rank's part of its attempt's record
// (<attempt dir>/environment: the node's ranks one after another) that `dtrun bundle` packs.
std::string environmentRecord(const AgentConfig& config, const WorkerPlacement& placement);

// Replaces every "${local_rank}" in `args`.
std::vector<std::string> substituteLocalRank(const std::vector<std::string>& args, int localRank);

}  // namespace dtrun::agent::detail
