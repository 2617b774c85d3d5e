// Reads the machine from sysfs: the same files torch's NUMA binding and numactl read, under a
// root that tests point at recorded machines.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "dtrun/placement.h"

#include "text.h"

namespace dtrun::placement {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> readText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return std::string(text::trim(text.str()));
}

// A CPU list file: nullopt when absent, an error naming the file when malformed.
Result<std::optional<std::vector<int>>> readCpuList(const fs::path& path) {
  const auto text = readText(path);
  if (!text) {
    return std::optional<std::vector<int>>();
  }
  auto cpus = parseCpuList(*text);
  if (!cpus.isOk()) {
    return Status::invalidArgument(path.string() + ": " + cpus.status().message());
  }
  return std::optional<std::vector<int>>(std::move(cpus).value());
}

int readInt(const fs::path& path, int fallback) {
  const auto text = readText(path);
  const auto value = text ? text::parseInt(*text) : std::nullopt;
  return value ? static_cast<int>(*value) : fallback;
}

// The lowest CPU sharing cpu's highest-level data or unified cache (torch's "max level cache").
int lastLevelCacheOf(const fs::path& cpuDir, int cpu) {
  int bestLevel = -1;
  int owner = cpu;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cpuDir / "cache", ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("index") || !text::isDigits(name.substr(5))) {
      continue;
    }
    const auto type = readText(entry.path() / "type");
    const int level = readInt(entry.path() / "level", -1);
    if (!type || (*type != "Unified" && *type != "Data") || level <= bestLevel) {
      continue;
    }
    const auto shared = readText(entry.path() / "shared_cpu_list");
    auto cpus = shared ? parseCpuList(*shared) : Result<std::vector<int>>(std::vector<int>{});
    if (cpus.isOk() && !cpus.value().empty()) {
      bestLevel = level;
      owner = cpus.value().front();
    }
  }
  return owner;
}

// The cpuset of the process's cgroup: v2's cpuset.cpus.effective, else v1's
// cpuset.effective_cpus; nullopt when neither is there.
Result<std::optional<std::vector<int>>> readCpuset(const fs::path& cgroupRoot,
                                                   const std::string& cgroup) {
  std::string v2Path = "/";
  std::string v1Path;
  for (const std::string_view line : text::split(cgroup, '\n')) {
    if (line.starts_with("0::")) {
      v2Path = std::string(line.substr(3));
    }
    const auto at = line.find(":cpuset:");
    if (at != std::string_view::npos) {
      v1Path = std::string(line.substr(at + 8));
    }
  }
  const auto relative = [](const std::string& path) { return fs::path(path).relative_path(); };
  DTRUN_ASSIGN_OR_RETURN(auto v2,
                         readCpuList(cgroupRoot / relative(v2Path) / "cpuset.cpus.effective"));
  if (v2 || v1Path.empty()) {
    return v2;
  }
  return readCpuList(cgroupRoot / "cpuset" / relative(v1Path) / "cpuset.effective_cpus");
}

std::vector<Gpu> readGpus(const fs::path& pciDevices) {
  std::vector<Gpu> gpus;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(pciDevices, ec)) {
    const auto vendor = readText(entry.path() / "vendor");
    const auto pciClass = readText(entry.path() / "class");
    // NVIDIA (0x10de), display controllers: VGA (0x0300xx) or 3D (0x0302xx).
    if (vendor != "0x10de" || !pciClass ||
        !(pciClass->starts_with("0x0300") || pciClass->starts_with("0x0302"))) {
      continue;
    }
    Gpu gpu;
    gpu.pciAddress = entry.path().filename().string();
    gpu.numaNode = std::max(readInt(entry.path() / "numa_node", 0), 0);
    gpus.push_back(gpu);
  }
  // nvidia-smi's order and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID: by PCI address.
  std::sort(gpus.begin(), gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pciAddress < b.pciAddress; });
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    gpus[i].index = static_cast<int>(i);
  }
  return gpus;
}

}  // namespace

Result<Topology> readTopology(const std::string& sysRoot, const ProcessView& process) {
  const fs::path root(sysRoot);
  const fs::path cpuRoot = root / "devices/system/cpu";
  DTRUN_ASSIGN_OR_RETURN(auto online, readCpuList(cpuRoot / "online"));
  if (!online || online->empty()) {
    return Status::invalidArgument(
        (cpuRoot / "online").string() +
        ": missing or empty, so the machine's CPUs are unknown (is sysfs mounted?)");
  }
  std::vector<int> allowed = *online;
  const auto keepOnly = [&allowed](const std::vector<int>& other) {
    std::vector<int> both;
    std::set_intersection(allowed.begin(), allowed.end(), other.begin(), other.end(),
                          std::back_inserter(both));
    allowed = std::move(both);
  };
  if (process.affinity) {
    std::vector<int> affinity = *process.affinity;
    std::sort(affinity.begin(), affinity.end());
    keepOnly(affinity);
  }
  DTRUN_ASSIGN_OR_RETURN(auto cpuset, readCpuset(root / "fs/cgroup", process.cgroup));
  if (cpuset) {
    keepOnly(*cpuset);
  }

  Topology topology;
  topology.machineCpus = static_cast<int>(online->size());
  std::map<int, int> nodeOf;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "devices/system/node", ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("node") || !text::isDigits(name.substr(4))) {
      continue;
    }
    const int node = static_cast<int>(*text::parseInt(name.substr(4)));
    DTRUN_ASSIGN_OR_RETURN(auto cpus, readCpuList(entry.path() / "cpulist"));
    for (const int cpu : cpus.value_or(std::vector<int>{})) {
      nodeOf[cpu] = node;
    }
  }
  for (const int id : allowed) {
    const fs::path dir = cpuRoot / ("cpu" + std::to_string(id));
    Cpu cpu;
    cpu.id = id;
    cpu.numaNode = nodeOf.contains(id) ? nodeOf[id] : 0;
    cpu.socket = std::max(readInt(dir / "topology/physical_package_id", 0), 0);
    DTRUN_ASSIGN_OR_RETURN(auto siblings, readCpuList(dir / "topology/thread_siblings_list"));
    cpu.core = siblings && !siblings->empty() ? siblings->front() : id;
    cpu.cache = lastLevelCacheOf(dir, id);
    topology.cpus.push_back(cpu);
    if (!nodeOf.empty()) {
      topology.numaNodes.push_back(cpu.numaNode);
    }
  }
  std::sort(topology.numaNodes.begin(), topology.numaNodes.end());
  topology.numaNodes.erase(std::unique(topology.numaNodes.begin(), topology.numaNodes.end()),
                           topology.numaNodes.end());
  topology.gpus = readGpus(root / "bus/pci/devices");
  return topology;
}

}  // namespace dtrun::placement
