// Placement: which GPUs, CPUs and memory each local rank gets, from the machine's topology as
// sysfs describes it (no numactl, no NVML). readTopology() reads a sysfs tree whose root is a
// parameter, so tests use recorded machines; planPlacement() is pure. torchrun's --numa-binding
// modes keep torch's meaning (torch/numa/binding.py): a rank's GPU is the visible GPU at its
// local rank unless GPUs are split among workers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::placement {

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11} (the kernel's cpulist format; sorted, no duplicates).
[[nodiscard]] Result<std::vector<int>> parseCpuList(std::string_view text);
[[nodiscard]] std::string formatCpuList(const std::vector<int>& cpus);

struct Cpu {
  int id = 0;
  int numaNode = 0;  // 0 when the machine reports no NUMA nodes
  int socket = 0;    // physical_package_id
  int core = 0;      // the lowest CPU id of its thread siblings: one value per physical core
  int cache = 0;     // the lowest CPU id sharing its last-level cache (a core complex)
};

struct Gpu {
  int index = 0;           // as CUDA_VISIBLE_DEVICES names it: PCI bus order
  std::string pciAddress;  // "0000:1b:00.0"
  int numaNode = 0;        // the device's numa_node (-1, "no affinity", read as 0, as torch)
};

struct Topology {
  std::vector<Cpu> cpus;       // online CPUs this process may use (affinity and cgroup cpuset)
  std::vector<int> numaNodes;  // with at least one usable CPU; empty: sysfs has no NUMA nodes
  std::vector<Gpu> gpus;       // NVIDIA devices under bus/pci, in index order
  int machineCpus = 0;         // online CPUs of the machine, allowed or not
  [[nodiscard]] bool hasNuma() const { return !numaNodes.empty(); }
};

// What readTopology() reads besides the sysfs tree.
struct ProcessView {
  // sched_getaffinity's CPUs; nullopt = every online CPU (a recorded machine).
  std::optional<std::vector<int>> affinity;
  // /proc/self/cgroup's text, to find the cpuset (v2 "0::<path>", v1 "N:cpuset:<path>"); ""
  // = the root cgroup.
  std::string cgroup;
};

// Reads `sysRoot` ("/sys", or a recorded tree with the same layout: devices/system/cpu,
// devices/system/node, bus/pci/devices, fs/cgroup). Files that are missing give what a machine
// without them has (no NUMA nodes, no GPUs, no cpuset); a CPU list that cannot be parsed is an
// error naming the file.
[[nodiscard]] Result<Topology> readTopology(const std::string& sysRoot, const ProcessView& process);

// torchrun's --numa-binding modes, and dtrun's even split for jobs without GPUs.
enum class Binding : std::uint8_t {
  kNone,
  kNode,         // the CPUs of the NUMA node of the rank's GPU
  kSocket,       // the CPUs of every NUMA node on that node's socket
  kExclusive,    // the node's physical cores divided among the GPUs on it (no core shared)
  kCoreComplex,  // one last-level-cache domain of the node per GPU (round robin)
  kSplit,        // the allowed CPUs divided among the local ranks by physical core (no GPU needed)
};
[[nodiscard]] std::optional<Binding> parseBinding(std::string_view text);  // "node", ..., "split"
[[nodiscard]] std::string_view bindingName(Binding binding);

struct Request {
  int nprocPerNode = 1;
  // The GPUs workers may use, as CUDA_VISIBLE_DEVICES names them (indices, or UUIDs that only
  // --virtual-local-rank and the GPU split can use), in order: visibleDevices() or --gpus.
  std::vector<std::string> devices;
  bool devicesGiven = false;  // --gpus: workers get exactly these as CUDA_VISIBLE_DEVICES
  // Each worker's own share of the GPUs: gpusPerWorker GPUs each, or workersPerGpu workers on
  // each GPU; both 0 = every worker sees every GPU of the list (torchrun's default).
  int gpusPerWorker = 0;
  int workersPerGpu = 0;
  bool virtualLocalRank = false;  // torchrun's: one GPU per worker, seen as device 0, LOCAL_RANK=0
  Binding binding = Binding::kNone;
  // How the user named the options, for messages ("--numa-binding=exclusive", "--gpus").
  std::string bindingOption = "--numa-binding";
  std::string gpusOption = "--gpus";
};

// One local rank's share.
struct RankPlacement {
  std::vector<std::string> gpus;  // the devices it uses, as CUDA_VISIBLE_DEVICES names them
  // The worker's CUDA_VISIBLE_DEVICES; nullopt = inherited unchanged.
  std::optional<std::string> visibleDevices;
  std::vector<int> cpus;       // its CPU affinity; empty = not bound
  std::vector<int> numaNodes;  // preferred memory nodes; empty = the kernel's default policy
  bool localRankZero = false;  // --virtual-local-rank: LOCAL_RANK=0
};

struct Plan {
  std::vector<RankPlacement> ranks;  // one per local rank
  [[nodiscard]] bool binds() const;  // any rank has a CPU binding
};

// The GPUs workers may use when --gpus is not given, as CUDA_VISIBLE_DEVICES names them: the
// launcher's CUDA_VISIBLE_DEVICES when set ("" = none), else SLURM_STEP_GPUS, else
// SLURM_JOB_GPUS, else 0..gpuCount-1 (gpuCount: the topology's GPUs, or /dev/nvidia<N> nodes).
[[nodiscard]] std::vector<std::string> visibleDevices(const std::optional<std::string>& cuda,
                                                      const std::optional<std::string>& slurmStep,
                                                      const std::optional<std::string>& slurmJob,
                                                      int gpuCount);

// The placement of every local rank, or kInvalidArgument with one line naming the option, the
// problem and the fix: a GPU index the machine does not have, more ranks than GPUs with a GPU per
// rank, a binding mode without NUMA information, fewer cores than ranks for an exclusive split.
[[nodiscard]] Result<Plan> planPlacement(const Topology& topology, const Request& request);

}  // namespace dtrun::placement
