// The job's log directory on this node: <log_dir>/<run_id>, never reused (logs are never lost).
#pragma once

#include <filesystem>
#include <string>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"

namespace dtrun::agent::detail {

// Creates and returns the run directory (absolute: workers get paths under it and may change
// directory). Without --log_dir, a fresh directory under `tmpDir` (or /tmp). A run id used
// before gets "<run_id>-2", ...; the agents of several nodes may share a log dir (one file
// system under a scheduler): each takes its directory with an atomic mkdir, and a node that
// loses takes "<run_id>-<host>". With --log_dir=/dev/null: nothing is made, the path is empty.
Result<std::filesystem::path> createRunDir(const AgentConfig& config, const std::string& host,
                                           const std::string& tmpDir);

}  // namespace dtrun::agent::detail
