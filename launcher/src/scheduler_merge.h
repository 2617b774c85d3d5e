// The batch scheduler's allocation merged into the launch: SLURM, PBS, LSF, Flux and MPI launcher
// detection (scheduler/) and
// what it may supply below the user's own settings (nnodes, node_rank, master_addr/port, rdzv_id),
// with the banner's account of what was used and from where.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/scheduler.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// How the allocation was used, for the launch banner: what it supplied, which flags won.
struct SchedulerUse {
  std::vector<std::string> supplied;
  std::vector<std::string> overridden;

  void offer(Resolver& options, std::string_view dest, const std::string& value,
             const std::string& from) {
    if (options.supply(dest, Setting{value, from})) {
      supplied.push_back(std::string(dest) + "=" + value + " (" + from + ")");
    } else {
      overridden.push_back(options.given(dest)->source);
    }
  }
};

// The allocation --scheduler names (auto: see scheduler::Mode); nullopt when none applies.
Result<std::optional<scheduler::Allocation>> detectScheduler(const Resolver& options,
                                                             const HostFacts& host, bool standalone,
                                                             LaunchPlan& plan);
// Supplies rdzv_id and nnodes from the allocation (before they are parsed).
[[nodiscard]] Status useAllocation(const scheduler::Allocation& a, Resolver& options,
                                   SchedulerUse& use);
// For a static launch over exactly the allocation's nodes: node_rank, master_addr, master_port;
// an error when the first node's address is needed but unknown and --master_addr is not given.
[[nodiscard]] Status useAllocationRanks(const scheduler::Allocation& a, Resolver& options,
                                        SchedulerUse& use, LaunchPlan& plan);
// The banner's line: what the scheduler supplied and from which variables.
std::string describeAllocation(const scheduler::Allocation& a, const SchedulerUse& use);

}  // namespace dtrun::launcher
