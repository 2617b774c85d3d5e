#include "scheduler_merge.h"

#include <algorithm>

#include "text.h"

namespace dtrun::launcher {

using text::parseInt;
using text::trim;

// The batch scheduler's allocation, unless --scheduler none or --standalone turns detection off.
Result<std::optional<scheduler::Allocation>> detectScheduler(const Resolver& options,
                                                             const HostFacts& host, bool standalone,
                                                             LaunchPlan& plan) {
  const auto modeSetting = options.get("scheduler", "auto");
  const auto mode = scheduler::parseMode(trim(modeSetting.text));
  if (!mode) {
    return expected(modeSetting, "auto, slurm, pbs or none");
  }
  if (*mode == scheduler::Mode::kNone || standalone) {
    plan.scheduler = standalone ? "none (--standalone)" : "none (--scheduler none)";
    return std::optional<scheduler::Allocation>();
  }
  scheduler::JobEnvironment job;
  job.env = host.env;
  job.hostName = host.hostName;
  job.readFile = host.readFile;
  auto found = scheduler::detect(*mode, job);
  if (found.isOk() && !found.value()) {
    plan.scheduler = "none (neither SLURM_JOB_ID nor PBS_JOBID is set)";
  }
  return found;
}

// Refuses launches that cannot work in the allocation, and supplies the job id and node count.
Status useAllocation(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use) {
  const int nodes = static_cast<int>(a.hosts.size());
  if (a.tasksOnThisNode > 1) {
    // An error, not a warning: every one of them would claim this node's rank (static) or join
    // as a node of its own, and each starts its own workers, so the job cannot be right.
    return Status::invalidArgument(
        a.tasksFrom + ": srun started " + std::to_string(a.tasksOnThisNode) +
        " dtrun processes on this node, but dtrun starts the workers itself: run one per node "
        "(srun --ntasks-per-node=1 dtrun --nproc_per_node=N ...), or pass --scheduler none");
  }
  if (!a.inStep && nodes > 1 && !options.given("nnodes")) {
    return Status::invalidArgument(
        "running in the batch script of a " + std::to_string(nodes) +
        "-node SLURM job (no SLURM_STEP_ID), so it would start on " + a.hosts.front() +
        " only and wait for the others: run one dtrun per node with srun --ntasks-per-node=1 "
        "dtrun ..., or pass --nnodes=1 to use this node alone");
  }
  use.offer(options, "rdzv_id", a.jobId, a.jobIdFrom);
  if (nodes > 1) {
    use.offer(options, "nnodes", std::to_string(nodes), a.hostsFrom);
  }
  return Status::ok();
}

// With the static backend over the allocation's nodes: this node's rank, and the store on the
// first host at the job's port (scheduler::jobPort: fixed per job, so no flag is needed, and two
// jobs sharing a node do not both claim torchrun's 29500).
void useAllocationRanks(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use,
                        LaunchPlan& plan) {
  const int nodes = static_cast<int>(a.hosts.size());
  if (nodes <= 1 || plan.maxNodes != nodes ||
      options.get("rdzv_backend", "static").text != "static") {
    return;
  }
  const auto userRank = options.given("node_rank");
  if (userRank && parseInt(userRank->text) != a.nodeIndex) {
    plan.warnings.push_back(userRank->source + "=" + userRank->text + " but " + a.nodeIndexFrom +
                            " says this is node " + std::to_string(a.nodeIndex) +
                            ": was the variable expanded once in the batch script? (omit " +
                            userRank->source + ": dtrun reads the scheduler's node index itself)");
  }
  use.offer(options, "node_rank", std::to_string(a.nodeIndex), a.nodeIndexFrom);
  if (!options.given("rdzv_endpoint")) {
    const std::string hostsVar = a.hostsFrom.substr(0, a.hostsFrom.find('='));
    use.offer(options, "master_addr", a.hosts.front(), "the first host of " + hostsVar);
    use.offer(options, "master_port", std::to_string(scheduler::jobPort(a)),
              "derived from " + a.jobIdFrom);
  }
}

std::string describeAllocation(const scheduler::Allocation& a, const SchedulerUse& use) {
  const int nodes = static_cast<int>(a.hosts.size());
  std::string text = std::string(scheduler::kindName(a.kind)) + " job " + a.jobId + ": " +
                     std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + " from " +
                     a.hostsFrom + ", this is node " + std::to_string(a.nodeIndex) + " (" +
                     a.nodeIndexFrom + ")";
  const auto join = [](const std::vector<std::string>& items) {
    std::string joined;
    for (const std::string& item : items) {
      joined += (joined.empty() ? "" : ", ") + item;
    }
    return joined;
  };
  if (!use.supplied.empty()) {
    text += "; supplies " + join(use.supplied);
  }
  if (!use.overridden.empty()) {
    text += "; given explicitly: " + join(use.overridden);
  }
  return text;
}
}  // namespace dtrun::launcher
