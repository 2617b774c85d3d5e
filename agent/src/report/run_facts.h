// The run's own record in its directory (run.json): what a bug report needs that no worker file
// holds: dtrun's version and command line, the host and kernel, the job's shape, where the report
// and the event log go, each local rank's placement. Written once, when the run directory is
// made; `dtrun bundle` packs it. Secrets never reach it (text::redactSecrets).
#pragma once

#include <filesystem>
#include <string>

#include "dtrun/agent_config.h"

namespace dtrun::agent::detail {

// Writes <runDir>/run.json; a run directory that cannot take it only loses the record (a
// warning), never the job.
void writeRunFacts(const std::filesystem::path& runDir, const AgentConfig& config,
                   const std::string& host);

}  // namespace dtrun::agent::detail
