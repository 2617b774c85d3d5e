// How restarts behave beyond torchrun's --max_restarts: a backoff before each one, and a stop
// when attempts keep failing without progress (--restart_backoff, --restart_backoff_max,
// --max_no_progress_attempts, --progress_file).
#pragma once

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "resolver.h"

namespace dtrun::launcher {

[[nodiscard]] Status resolveRestarts(const Resolver& options, agent::AgentConfig& config);

}  // namespace dtrun::launcher
