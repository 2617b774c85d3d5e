// Reads the job from what Kubeflow's operators put in each pod's environment: the training
// operator's PyTorchJob (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK; since v1.7 also PET_NNODES,
// PET_NODE_RANK, PET_NPROC_PER_NODE and PET_MASTER_*), the older pytorch-operator (the first four
// only, WORLD_SIZE counting pods), and Kubeflow Trainer's TrainJob (PET_* only). The PET_*
// variables already reach dtrun's options as torchrun's do; this adds what they leave out: the
// node count, node index and master from the older variables, and the banner's account of them.
#include <optional>
#include <string>
#include <string_view>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace dtrun::scheduler::detail {
namespace {

// PET_NNODES: "2", or an elastic job's "1:4" (its largest count).
std::optional<long long> nodesOf(std::string_view text) {
  const auto colon = text.find(':');
  return parseCount(colon == std::string_view::npos ? text : text.substr(colon + 1));
}

}  // namespace

bool looksLikeKubeflowPod(const Env& env) {
  // Kubernetes gives every container KUBERNETES_SERVICE_HOST; a launcher's worker has
  // TORCHELASTIC_RUN_ID, and a dtrun started there is no pod's agent.
  return env.has("KUBERNETES_SERVICE_HOST") && !env.has("TORCHELASTIC_RUN_ID") &&
         ((env.has("MASTER_ADDR") && env.has("WORLD_SIZE") && env.has("RANK")) ||
          (env.has("PET_NNODES") && env.has("PET_NODE_RANK")));
}

Result<Allocation> detectKubeflow(const Env& env) {
  Allocation a;
  a.kind = Kind::kKubeflow;
  a.launcher = "the pod";
  a.onePerNode = "one pod per node, dtrun as its command";
  const auto nodes = env.first({"PET_NNODES"});
  const auto world = env.first({"WORLD_SIZE"});
  if (nodes) {
    const auto n = nodesOf(nodes->second);
    if (!n || *n > static_cast<long long>(kMaxHosts)) {
      return malformed(*nodes, "expected a node count or MIN:MAX");
    }
    a.nodeCount = static_cast<int>(*n);
    a.hostsFrom = nodes->first + "=" + nodes->second;
  } else if (world) {
    // The older operator counts one process per pod: WORLD_SIZE is the pods.
    DTRUN_ASSIGN_OR_RETURN(a.nodeCount, countOf(*world, "a process count"));
    a.hostsFrom = world->first + "=" + world->second + " (pods)";
  } else {
    return Status::invalidArgument(
        "--scheduler kubeflow: neither PET_NNODES nor WORLD_SIZE is set, so no Kubeflow operator "
        "made this pod (use --scheduler auto or none)");
  }
  const auto index = env.first({"PET_NODE_RANK", "RANK"});
  if (!index) {
    return Status::invalidArgument(
        a.hostsFrom +
        " is set but neither PET_NODE_RANK nor RANK: pass --scheduler "
        "none and give --nnodes, --node_rank and --master_addr yourself");
  }
  DTRUN_ASSIGN_OR_RETURN(a.nodeIndex, countOf(*index, "a node rank"));
  if (a.nodeCount == 0 || a.nodeIndex >= a.nodeCount) {
    return malformed(*index, "out of range for " + a.hostsFrom);
  }
  a.nodeIndexFrom = index->first + "=" + index->second;
  // The master pod's own MASTER_ADDR is "localhost": its agent hosts the store there.
  if (const auto master = env.first({"PET_MASTER_ADDR", "MASTER_ADDR"})) {
    a.master = master->second;
    a.masterFrom = master->first;
  } else {
    a.masterMissing =
        "the pod has no MASTER_ADDR or PET_MASTER_ADDR: pass --master_addr=<the "
        "master pod's service name>, or --rdzv_backend=c10d --rdzv_endpoint=<host>:<port>";
  }
  if (const auto port = env.first({"PET_MASTER_PORT", "MASTER_PORT"})) {
    const auto n = parseCount(port->second);
    if (!n || *n == 0 || *n > 65535) {
      return malformed(*port, "expected a port from 1 to 65535");
    }
    a.masterPort = static_cast<std::uint16_t>(*n);
    a.masterPortFrom = port->first;
  }
  return a;
}

}  // namespace dtrun::scheduler::detail
