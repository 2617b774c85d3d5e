// Where the workers' output goes: --role, --log_dir, --redirects, --tee, --local_ranks_filter,
// the line prefix and the duplicate filters, and what --log_dir=/dev/null cannot do. Part of
// validate() (launch_plan.h).
#pragma once

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// Role, log directory, redirects, tee and the console filter.
[[nodiscard]] Status resolveOutput(const Resolver& options, agent::AgentConfig& config);

// torchrun's --log_dir=/dev/null: no file at all. What needs files is refused; what only loses
// them (redirects, duplicate filters) is said once.
[[nodiscard]] Status checkDiscardedLogs(const Resolver& options, LaunchPlan& plan);

}  // namespace dtrun::launcher
