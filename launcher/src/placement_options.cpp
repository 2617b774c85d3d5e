#include "placement_options.h"

#include <algorithm>
#include <set>

#include "dtrun/placement.h"

#include "text.h"

namespace dtrun::launcher {
namespace {

using text::isDigits;
using text::parseInt;
using text::split;
using text::trim;

// --gpus=0,2,5: GPU indices as CUDA_VISIBLE_DEVICES names them, each once.
Result<std::vector<std::string>> parseGpuList(const Setting& setting) {
  std::vector<std::string> gpus;
  for (const std::string_view item : split(setting.text, ',')) {
    const std::string_view entry = trim(item);
    if (!isDigits(entry) || entry.size() > 4) {
      return expected(setting, "GPU indices as CUDA_VISIBLE_DEVICES names them, e.g. 0,2,5");
    }
    const std::string index = std::to_string(*parseInt(entry));
    if (std::find(gpus.begin(), gpus.end(), index) != gpus.end()) {
      return Status::invalidArgument(setting.source + ": GPU " + index + " is listed twice in '" +
                                     setting.text + "'");
    }
    gpus.push_back(index);
  }
  return gpus;
}

Result<int> parseShare(const std::optional<Setting>& setting) {
  if (!setting) {
    return 0;
  }
  const auto value = isDigits(trim(setting->text)) ? parseInt(setting->text) : std::nullopt;
  if (!value || *value < 1 || *value > 1024) {
    return expected(*setting, "a whole number from 1 to 1024");
  }
  return static_cast<int>(*value);
}

std::optional<std::string> envOf(const HostFacts& host, std::string_view name) {
  const auto it = host.env.find(name);
  return it == host.env.end() ? std::nullopt : std::optional(it->second);
}

// The binding mode and how the user named it; torchrun's --numa-binding and dtrun's
// --cpu_binding choose the same thing, so only one may be given.
Result<std::pair<placement::Binding, std::string>> resolveBinding(const Resolver& options) {
  const auto numa = options.find("numa_binding");
  const auto cpu = options.find("cpu_binding");
  if (numa && cpu) {
    return Status::invalidArgument(
        numa->source + " and " + cpu->source +
        " both choose the CPUs of each rank: give one (--numa-binding binds next to each rank's "
        "GPU, --cpu_binding=split divides the CPUs without GPUs)");
  }
  if (numa) {
    const auto mode = placement::parseBinding(numa->text);
    if (!mode || *mode == placement::Binding::kSplit) {
      return expected(*numa, "node, socket, exclusive or core-complex");
    }
    return std::pair{*mode, numa->source + "=" + numa->text};
  }
  if (cpu) {
    const auto mode = placement::parseBinding(cpu->text);
    if (!mode || (*mode != placement::Binding::kSplit && *mode != placement::Binding::kNone)) {
      return expected(*cpu, "split or none");
    }
    return std::pair{*mode, cpu->source + "=" + cpu->text};
  }
  return std::pair{placement::Binding::kNone, std::string()};
}

std::string describeRank(const agent::LocalPlacement& p) {
  std::string text;
  const auto add = [&text](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
  if (!p.gpus.empty()) {
    add(std::string(p.gpus.find(',') == std::string::npos ? "GPU " : "GPUs ") + p.gpus);
  }
  if (!p.cpus.empty()) {
    add("CPUs " + placement::formatCpuList(p.cpus) + " (" + std::to_string(p.cpus.size()) + ")");
  }
  if (!p.memNodes.empty()) {
    add(std::string(p.memNodes.size() == 1 ? "NUMA node " : "NUMA nodes ") +
        placement::formatCpuList(p.memNodes));
  }
  if (p.visibleDevices) {
    add("CUDA_VISIBLE_DEVICES=" + *p.visibleDevices);
  }
  if (p.localRankZero) {
    add("LOCAL_RANK=0");
  }
  return text.empty() ? "(nothing placed)" : text;
}

}  // namespace

Result<int> usableGpuCount(const Resolver& options, const HostFacts& host) {
  if (const auto gpus = options.find("gpus")) {
    DTRUN_ASSIGN_OR_RETURN(auto list, parseGpuList(*gpus));
    return static_cast<int>(list.size());
  }
  return host.gpuCount;
}

Status resolvePlacement(const Resolver& options, const HostFacts& host, bool virtualLocalRank,
                        LaunchPlan& plan) {
  const auto gpusSetting = options.find("gpus");
  const auto perWorker = options.find("gpus_per_worker");
  const auto perGpu = options.find("workers_per_gpu");
  DTRUN_ASSIGN_OR_RETURN(auto binding, resolveBinding(options));
  if (!gpusSetting && !perWorker && !perGpu && !virtualLocalRank &&
      binding.first == placement::Binding::kNone) {
    return Status::ok();
  }
  placement::Request request;
  request.nprocPerNode = plan.config.nprocPerNode;
  request.binding = binding.first;
  request.bindingOption = binding.second.substr(0, binding.second.find('='));
  DTRUN_ASSIGN_OR_RETURN(request.gpusPerWorker, parseShare(perWorker));
  DTRUN_ASSIGN_OR_RETURN(request.workersPerGpu, parseShare(perGpu));
  request.virtualLocalRank = virtualLocalRank;

  // The topology is read only when a binding needs it or GPUs must be counted from it.
  std::optional<placement::Topology> topology;
  const bool needsTopology = request.binding != placement::Binding::kNone;
  if (needsTopology || host.gpuCount == 0) {
    auto read = host.readTopology();
    if (!read.isOk()) {
      if (needsTopology) {
        return Status::invalidArgument(
            binding.second + ": cannot read this machine's topology: " + read.status().message());
      }
    } else {
      topology = std::move(read).value();
    }
  }
  const int gpuCount = topology && !topology->gpus.empty() ? static_cast<int>(topology->gpus.size())
                                                           : host.deviceNodes;
  const auto visible =
      placement::visibleDevices(envOf(host, "CUDA_VISIBLE_DEVICES"), envOf(host, "SLURM_STEP_GPUS"),
                                envOf(host, "SLURM_JOB_GPUS"), gpuCount);
  if (gpusSetting) {
    DTRUN_ASSIGN_OR_RETURN(request.devices, parseGpuList(*gpusSetting));
    request.devicesGiven = true;
    const bool named = envOf(host, "CUDA_VISIBLE_DEVICES").has_value() ||
                       envOf(host, "SLURM_STEP_GPUS").has_value() ||
                       envOf(host, "SLURM_JOB_GPUS").has_value();
    for (const std::string& gpu : request.devices) {
      if (std::find(visible.begin(), visible.end(), gpu) == visible.end()) {
        std::string list;
        for (const auto& v : visible) {
          list += (list.empty() ? "" : ",") + v;
        }
        return Status::invalidArgument(gpusSetting->source + ": GPU " + gpu + " is not " +
                                       (named ? "among the visible GPUs (" + list + ")"
                                              : "on this machine (" + std::to_string(gpuCount) +
                                                    " GPUs: " + (list.empty() ? "none" : list) +
                                                    ")") +
                                       "; name GPUs that " + (named ? "are visible" : "exist"));
      }
    }
  } else {
    request.devices = visible;
  }
  static const placement::Topology kNoTopology;
  DTRUN_ASSIGN_OR_RETURN(auto placed,
                         placement::planPlacement(topology ? *topology : kNoTopology, request));
  std::vector<agent::LocalPlacement>& out = plan.config.placement;
  for (const placement::RankPlacement& r : placed.ranks) {
    agent::LocalPlacement p;
    p.cpus = r.cpus;
    p.memNodes = r.numaNodes;
    for (const auto& gpu : r.gpus) {
      p.gpus += (p.gpus.empty() ? "" : ",") + gpu;
    }
    p.visibleDevices = r.visibleDevices;
    p.localRankZero = r.localRankZero;
    out.push_back(std::move(p));
  }
  std::vector<std::string> asked;
  for (const auto& setting : {gpusSetting, perWorker, perGpu}) {
    if (setting) {
      asked.push_back(setting->source + "=" + setting->text);
    }
  }
  if (virtualLocalRank) {
    asked.emplace_back("--virtual-local-rank");
  }
  if (!binding.second.empty()) {
    asked.push_back(binding.second);
  }
  for (const auto& part : asked) {
    plan.placement += (plan.placement.empty() ? "" : " ") + part;
  }
  for (std::size_t local = 0; local < out.size(); ++local) {
    plan.placementByRank.push_back(describeRank(out[local]));
  }
  return Status::ok();
}

}  // namespace dtrun::launcher
