// dtrun's own account of the job: --report, --event_log, --console, TORCHELASTIC_ERROR_FILE,
// --hang_timeout, --python_hook, --verbose, --dry-run, and the health checks. Part of validate()
// (launch_plan.h).
#pragma once

#include "dtrun/common.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// dtrun's own job insight: --report, --hang_timeout, --python_hook, --verbose and --dry-run.
[[nodiscard]] Status resolveInsight(const Resolver& options, const HostFacts& host,
                                    LaunchPlan& plan);

}  // namespace dtrun::launcher
