// The pure half of placement: each local rank's GPUs, CPUs and memory nodes from a topology and
// the user's request. The NUMA modes follow torch/numa/binding.py, so a job moved from torchrun
// binds the same CPUs; the even split is dtrun's own, for jobs without GPUs.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "dtrun/placement.h"

#include "text.h"

namespace dtrun::placement {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "" : ",") + item;
  }
  return out;
}

std::vector<int> sortedUnique(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// Groups `cpus` by `key` (the lowest CPU of a core or of a cache), keys ascending.
template <typename Key>
std::map<int, std::vector<int>> groupBy(const std::vector<Cpu>& cpus, const Key& key) {
  std::map<int, std::vector<int>> groups;
  for (const Cpu& cpu : cpus) {
    groups[key(cpu)].push_back(cpu.id);
  }
  return groups;
}

// Slice `index` of `count` near-equal slices of [0, total): the first total % count get one more.
std::pair<std::size_t, std::size_t> slice(std::size_t total, std::size_t count, std::size_t index) {
  const std::size_t each = total / count;
  const std::size_t extra = total % count;
  const std::size_t begin = index * each + std::min(index, extra);
  return {begin, begin + each + (index < extra ? 1 : 0)};
}

class Planner {
 public:
  Planner(const Topology& topology, const Request& request)
      : topology_(topology), request_(request) {}

  Result<Plan> run() {
    Plan plan;
    plan.ranks.resize(static_cast<std::size_t>(request_.nprocPerNode));
    DTRUN_TRY(assignGpus(plan));
    if (request_.binding == Binding::kSplit) {
      DTRUN_TRY(splitCpus(plan));
    } else if (request_.binding != Binding::kNone) {
      for (std::size_t rank = 0; rank < plan.ranks.size(); ++rank) {
        DTRUN_TRY(bindNearGpu(plan, rank));
      }
    }
    return plan;
  }

 private:
  [[nodiscard]] std::string bindingText() const {
    return request_.bindingOption + "=" + std::string(bindingName(request_.binding));
  }

  Status assignGpus(Plan& plan) const {
    const auto& devices = request_.devices;
    const auto n = plan.ranks.size();
    const int shares = (request_.virtualLocalRank ? 1 : 0) + (request_.gpusPerWorker > 0 ? 1 : 0) +
                       (request_.workersPerGpu > 0 ? 1 : 0);
    if (shares > 1) {
      return Status::invalidArgument(
          "--virtual-local-rank, --gpus_per_worker and --workers_per_gpu each split the GPUs "
          "among workers: give one of them");
    }
    std::size_t per = 1;      // GPUs per rank when split
    std::size_t sharing = 1;  // ranks per GPU when split
    if (request_.gpusPerWorker > 0) {
      per = static_cast<std::size_t>(request_.gpusPerWorker);
    } else if (request_.workersPerGpu > 0) {
      sharing = static_cast<std::size_t>(request_.workersPerGpu);
    }
    const bool split = shares == 1;
    const std::size_t needed = split ? (n * per + sharing - 1) / sharing : 0;
    if (split && needed > devices.size()) {
      const std::string how = request_.virtualLocalRank ? "--virtual-local-rank (a GPU per rank)"
                              : request_.gpusPerWorker > 0
                                  ? "--gpus_per_worker=" + std::to_string(per)
                                  : "--workers_per_gpu=" + std::to_string(sharing);
      return Status::invalidArgument(
          how + ": " + std::to_string(n) + " local ranks need " + std::to_string(needed) +
          " GPUs, but " +
          (devices.empty() ? std::string("none is visible")
                           : std::to_string(devices.size()) + " are (" + joined(devices) + ")") +
          "; lower --nproc_per_node or make more GPUs visible");
    }
    for (std::size_t rank = 0; rank < n; ++rank) {
      RankPlacement& p = plan.ranks[rank];
      if (split) {
        const std::size_t first = rank * per / sharing;
        p.gpus.assign(devices.begin() + static_cast<std::ptrdiff_t>(first),
                      devices.begin() + static_cast<std::ptrdiff_t>(first + per));
        p.visibleDevices = joined(p.gpus);
        p.localRankZero = request_.virtualLocalRank;
      } else {
        // torchrun's assumption: local rank i drives GPU i of what it sees.
        if (rank < devices.size()) {
          p.gpus = {devices[rank]};
        }
        if (request_.devicesGiven) {
          p.visibleDevices = joined(devices);
        }
      }
    }
    return Status::ok();
  }

  // dtrun's even split: whole physical cores, in order of NUMA node and core, the first ranks
  // getting one more when they do not divide evenly; logical CPUs when cores are too few.
  Status splitCpus(Plan& plan) const {
    std::vector<Cpu> cpus = topology_.cpus;
    std::stable_sort(cpus.begin(), cpus.end(), [](const Cpu& a, const Cpu& b) {
      return std::tie(a.numaNode, a.core, a.id) < std::tie(b.numaNode, b.core, b.id);
    });
    std::vector<std::vector<int>> units;  // cores, each a list of CPUs
    int lastCore = -1;
    for (const Cpu& cpu : cpus) {
      if (!units.empty() && cpu.core == lastCore) {
        units.back().push_back(cpu.id);
      } else {
        units.push_back({cpu.id});
        lastCore = cpu.core;
      }
    }
    const std::size_t n = plan.ranks.size();
    if (units.size() < n) {
      units.clear();
      for (const Cpu& cpu : cpus) {
        units.push_back({cpu.id});
      }
    }
    if (units.size() < n) {
      return Status::invalidArgument(bindingText() + ": " + std::to_string(n) +
                                     " local ranks but only " + std::to_string(units.size()) +
                                     " CPUs may be used (" + cpuListOf(cpus) +
                                     "); lower --nproc_per_node or leave the binding out");
    }
    for (std::size_t rank = 0; rank < n; ++rank) {
      const auto [begin, end] = slice(units.size(), n, rank);
      RankPlacement& p = plan.ranks[rank];
      for (std::size_t u = begin; u < end; ++u) {
        p.cpus.insert(p.cpus.end(), units[u].begin(), units[u].end());
      }
      p.cpus = sortedUnique(p.cpus);
      if (topology_.hasNuma()) {
        std::vector<int> nodes;
        for (const int id : p.cpus) {
          nodes.push_back(cpuById(id).numaNode);
        }
        p.numaNodes = sortedUnique(nodes);
      }
    }
    return Status::ok();
  }

  Status bindNearGpu(Plan& plan, std::size_t rank) const {
    if (!topology_.hasNuma()) {
      return Status::invalidArgument(
          bindingText() +
          ": this machine reports no NUMA node (no devices/system/node/node<N> in sysfs), so "
          "there is nothing to bind to; leave the binding out, or use --cpu_binding=split");
    }
    RankPlacement& p = plan.ranks[rank];
    if (p.gpus.empty()) {
      return Status::invalidArgument(
          bindingText() + " binds each rank next to its GPU, but local rank " +
          std::to_string(rank) + " has none (" + std::to_string(request_.devices.size()) +
          " GPUs for " + std::to_string(plan.ranks.size()) +
          " ranks); lower --nproc_per_node, or use --cpu_binding=split for ranks without GPUs");
    }
    DTRUN_ASSIGN_OR_RETURN(const int node, nodeOfDevice(p.gpus.front()));
    std::vector<Cpu> onNode;
    std::copy_if(topology_.cpus.begin(), topology_.cpus.end(), std::back_inserter(onNode),
                 [node](const Cpu& c) { return c.numaNode == node; });
    if (onNode.empty()) {
      return Status::invalidArgument(bindingText() + ": GPU " + p.gpus.front() +
                                     " is on NUMA node " + std::to_string(node) +
                                     ", which has no CPU this process may use (affinity or "
                                     "cpuset); leave the binding out or widen the cpuset");
    }
    switch (request_.binding) {
      case Binding::kNode:
        p.cpus = cpuIds(onNode);
        p.numaNodes = {node};
        return Status::ok();
      case Binding::kSocket: {
        const int socket = onNode.front().socket;  // of the node's lowest allowed CPU, as torch
        std::set<int> nodes;
        for (const Cpu& c : topology_.cpus) {
          if (lowestCpuOfNode(c.numaNode).socket == socket) {
            nodes.insert(c.numaNode);
            p.cpus.push_back(c.id);
          }
        }
        p.cpus = sortedUnique(p.cpus);
        p.numaNodes.assign(nodes.begin(), nodes.end());
        return Status::ok();
      }
      case Binding::kExclusive:
      case Binding::kCoreComplex:
        return bindShareOfNode(plan, rank, node, onNode);
      case Binding::kNone:
      case Binding::kSplit:
        break;
    }
    return Status::ok();
  }

  // exclusive and core-complex: the node's cores (or caches) shared among the GPUs on the node.
  Status bindShareOfNode(Plan& plan, std::size_t rank, int node,
                         const std::vector<Cpu>& onNode) const {
    RankPlacement& p = plan.ranks[rank];
    std::vector<std::string> gpusOnNode;  // the visible GPUs on this node, in visible order
    for (const auto& device : request_.devices) {
      const auto other = nodeOfDevice(device);
      if (other.isOk() && other.value() == node) {
        gpusOnNode.push_back(device);
      }
    }
    const auto position = static_cast<std::size_t>(
        std::find(gpusOnNode.begin(), gpusOnNode.end(), p.gpus.front()) - gpusOnNode.begin());
    p.numaNodes = {node};
    if (request_.binding == Binding::kExclusive) {
      const bool shared =
          request_.workersPerGpu > 1 ||
          std::count_if(plan.ranks.begin(), plan.ranks.end(), [&](const RankPlacement& other) {
            return !other.gpus.empty() && other.gpus.front() == p.gpus.front();
          }) > 1;
      if (shared) {
        return Status::invalidArgument(
            bindingText() + " gives each GPU's rank cores of its own, but GPU " + p.gpus.front() +
            " has several ranks; use one rank per GPU, or --numa-binding=node");
      }
      const auto cores = groupBy(onNode, [](const Cpu& c) { return c.core; });
      if (cores.size() < gpusOnNode.size()) {
        return Status::invalidArgument(
            bindingText() + ": NUMA node " + std::to_string(node) + " has " +
            std::to_string(cores.size()) + " usable physical cores for its " +
            std::to_string(gpusOnNode.size()) + " GPUs; use --numa-binding=node instead");
      }
      const auto [begin, end] = slice(cores.size(), gpusOnNode.size(), position);
      auto it = std::next(cores.begin(), static_cast<std::ptrdiff_t>(begin));
      for (std::size_t i = begin; i < end; ++i, ++it) {
        p.cpus.insert(p.cpus.end(), it->second.begin(), it->second.end());
      }
      p.cpus = sortedUnique(p.cpus);
      return Status::ok();
    }
    const auto caches = groupBy(onNode, [](const Cpu& c) { return c.cache; });
    std::vector<std::pair<int, std::vector<int>>> ordered(caches.begin(), caches.end());
    // torch's order: caches with more usable CPUs first, then the lower CPU id.
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    p.cpus = sortedUnique(ordered[position % ordered.size()].second);
    return Status::ok();
  }

  // The NUMA node of a device named as CUDA_VISIBLE_DEVICES names it (an index of the topology).
  Result<int> nodeOfDevice(const std::string& device) const {
    const auto index = text::isDigits(device) ? text::parseInt(device) : std::nullopt;
    const auto gpu = std::find_if(topology_.gpus.begin(), topology_.gpus.end(),
                                  [&](const Gpu& g) { return index && g.index == *index; });
    if (gpu == topology_.gpus.end()) {
      return Status::invalidArgument(
          bindingText() + ": the NUMA node of GPU " + device + " is unknown (" +
          (index ? "sysfs lists " + std::to_string(topology_.gpus.size()) + " NVIDIA GPUs"
                 : "dtrun reads GPUs by index, not by UUID") +
          "); name GPUs by index in CUDA_VISIBLE_DEVICES or --gpus, or leave the binding out");
    }
    return gpu->numaNode;
  }

  [[nodiscard]] const Cpu& cpuById(int id) const {
    return *std::find_if(topology_.cpus.begin(), topology_.cpus.end(),
                         [id](const Cpu& c) { return c.id == id; });
  }

  [[nodiscard]] const Cpu& lowestCpuOfNode(int node) const {
    return *std::find_if(topology_.cpus.begin(), topology_.cpus.end(),
                         [node](const Cpu& c) { return c.numaNode == node; });
  }

  static std::vector<int> cpuIds(const std::vector<Cpu>& cpus) {
    std::vector<int> ids;
    ids.reserve(cpus.size());
    for (const Cpu& c : cpus) {
      ids.push_back(c.id);
    }
    return sortedUnique(ids);
  }

  static std::string cpuListOf(const std::vector<Cpu>& cpus) { return formatCpuList(cpuIds(cpus)); }

  const Topology& topology_;
  const Request& request_;
};

}  // namespace

std::optional<Binding> parseBinding(std::string_view text) {
  static const std::map<std::string_view, Binding> kNames = {
      {"none", Binding::kNone},
      {"node", Binding::kNode},
      {"socket", Binding::kSocket},
      {"exclusive", Binding::kExclusive},
      {"core-complex", Binding::kCoreComplex},
      {"split", Binding::kSplit}};
  const auto it = kNames.find(text);
  return it == kNames.end() ? std::nullopt : std::optional(it->second);
}

std::string_view bindingName(Binding binding) {
  switch (binding) {
    case Binding::kNone:
      return "none";
    case Binding::kNode:
      return "node";
    case Binding::kSocket:
      return "socket";
    case Binding::kExclusive:
      return "exclusive";
    case Binding::kCoreComplex:
      return "core-complex";
    case Binding::kSplit:
      return "split";
  }
  return "none";
}

bool Plan::binds() const {
  return std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return !r.cpus.empty(); });
}

std::vector<std::string> visibleDevices(const std::optional<std::string>& cuda,
                                        const std::optional<std::string>& slurmStep,
                                        const std::optional<std::string>& slurmJob, int gpuCount) {
  const auto& named = cuda ? cuda : slurmStep ? slurmStep : slurmJob;
  std::vector<std::string> devices;
  if (!named) {
    for (int i = 0; i < gpuCount; ++i) {
      devices.push_back(std::to_string(i));
    }
    return devices;
  }
  for (const std::string_view item : text::split(*named, ',')) {
    const std::string_view entry = text::trim(item);
    if (entry.empty()) {
      break;  // as CUDA reads the list: an invalid entry ends it
    }
    devices.emplace_back(entry);
  }
  return devices;
}

Result<Plan> planPlacement(const Topology& topology, const Request& request) {
  return Planner(topology, request).run();
}

}  // namespace dtrun::placement
