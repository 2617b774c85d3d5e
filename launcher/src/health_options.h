// The checks before each attempt: --health_checks and their limits. Part of validate()
// (launch_plan.h), through resolveInsight (insight_options.h).
#pragma once

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// --health_checks, --health_check_timeout, --health_min_free_mb, --health_gpu_memory_wait,
// --health_net_min_gbps, --health_net_max_rtt_us.
[[nodiscard]] Status resolveHealthChecks(const Resolver& options, const HostFacts& host,
                                         agent::HealthChecks& checks);

}  // namespace dtrun::launcher
