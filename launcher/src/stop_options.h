// How the job stops: --signals_to_handle (and the preemption warnings forwarded instead) and
// --shutdown_timeout. Part of validate() (launch_plan.h).
#pragma once

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "resolver.h"

namespace dtrun::launcher {

// How a stop signal is handled: which signals, and the grace period before SIGKILL.
[[nodiscard]] Status resolveStopping(const Resolver& options, agent::AgentConfig& config);

}  // namespace dtrun::launcher
