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
    return expected(modeSetting, "auto, slurm, pbs, lsf, flux, mpi, kubeflow or none");
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
    plan.scheduler =
        "none (no SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, FLUX_JOB_ID, MPI launcher's rank or "
        "Kubeflow pod's rank is set)";
  }
  return found;
}

// Refuses launches that cannot work in the allocation, and supplies the job id and node count.
Status useAllocation(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use) {
  const int nodes = a.nodeCount;
  if (a.tasksOnThisNode > 1) {
    // An error, not a warning: every one of them would claim this node's rank (static) or join
    // as a node of its own, and each starts its own workers, so the job cannot be right.
    return Status::invalidArgument(
        a.tasksFrom + ": " + a.launcher + " started " + std::to_string(a.tasksOnThisNode) +
        " dtrun processes on this node, but dtrun starts the workers itself: run one per node (" +
        a.onePerNode + " dtrun --nproc_per_node=N ...), or pass --scheduler none");
  }
  if (!a.inStep && nodes > 1 && !options.given("nnodes")) {
    return Status::invalidArgument(
        "running in the batch script of a " + std::to_string(nodes) +
        "-node SLURM job (no SLURM_STEP_ID), so it would start on " + a.hosts.front() +
        " only and wait for the others: run one dtrun per node with srun --ntasks-per-node=1 "
        "dtrun ..., or pass --nnodes=1 to use this node alone");
  }
  if (!a.jobId.empty()) {
    use.offer(options, "rdzv_id", a.jobId, a.jobIdFrom);
  }
  if (nodes > 1) {
    use.offer(options, "nnodes", std::to_string(nodes), a.hostsFrom);
  }
  return Status::ok();
}

// With the static backend over the allocation's nodes: this node's rank, and the store on the
// first host at the job's port (scheduler::jobPort: fixed per job, so no flag is needed, and two
// jobs sharing a node do not both claim torchrun's 29500). Where the environment names no first
// host (Flux, most MPI launchers), --master_addr must: one line says so.
Status useAllocationRanks(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use,
                          LaunchPlan& plan) {
  const int nodes = a.nodeCount;
  if (nodes <= 1 || plan.maxNodes != nodes ||
      options.get("rdzv_backend", "static").text != "static") {
    return Status::ok();
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
    if (!a.master.empty()) {
      use.offer(options, "master_addr", a.master, a.masterFrom);
    } else if (const auto given = options.given("master_addr")) {
      use.overridden.push_back(given->source);
    } else {
      return Status::invalidArgument(std::string(scheduler::kindName(a.kind)) + " job with " +
                                     std::to_string(nodes) + " nodes: " + a.masterMissing);
    }
    if (a.masterPort != 0) {
      use.offer(options, "master_port", std::to_string(a.masterPort), a.masterPortFrom);
    } else if (!a.jobId.empty()) {
      use.offer(options, "master_port", std::to_string(scheduler::jobPort(a)),
                "derived from " + a.jobIdFrom);
    }
  }
  return Status::ok();
}

std::string describeAllocation(const scheduler::Allocation& a, const SchedulerUse& use) {
  const int nodes = a.nodeCount;
  std::string text = std::string(scheduler::kindName(a.kind));
  if (a.kind == scheduler::Kind::kMpi || a.kind == scheduler::Kind::kFlux) {
    text += " (" + a.launcher + ")";
  }
  text += (a.jobId.empty() ? std::string() : " job " + a.jobId) + ": " + std::to_string(nodes) +
          (nodes == 1 ? " node" : " nodes") + " from " + a.hostsFrom + ", this is node " +
          std::to_string(a.nodeIndex) + " (" + a.nodeIndexFrom + ")";
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
