// The plan as text: torchrun's launch banner and what --dry-run prints. Pure.
#pragma once

#include <string>
#include <vector>

#include "launch_model.h"

namespace dtrun::launcher {

// torchrun's launch banner (entrypoint, nodes, nproc, run id, rendezvous, restarts, logs, signals):
// what --verbose and --dry-run print.
std::string launchBanner(const LaunchPlan& plan);

// The one line a launch prints by default: what runs, how many ranks, the run id, the scheduler
// when one was read, and where the logs go when --log_dir says.
std::string launchSummary(const LaunchPlan& plan);

// What --dry-run prints: the banner, this node's rank table and, for each worker, the
// environment variables dtrun sets beyond `inherited` ("NAME=value", the launcher's environ).
std::string dryRunText(const LaunchPlan& plan, const std::vector<std::string>& inherited);

// Seconds as Python prints them ("30", "0.5").
std::string formatSeconds(double seconds);

}  // namespace dtrun::launcher
