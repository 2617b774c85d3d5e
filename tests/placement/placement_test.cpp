#include "dtrun/placement.h"

#include <sched.h>

#include <catch2/catch.hpp>

using dtrun::placement::Binding;
using dtrun::placement::Cpu;
using dtrun::placement::formatCpuList;
using dtrun::placement::parseCpuList;
using dtrun::placement::Plan;
using dtrun::placement::planPlacement;
using dtrun::placement::ProcessView;
using dtrun::placement::readTopology;
using dtrun::placement::Request;
using dtrun::placement::Topology;
using dtrun::placement::visibleDevices;

namespace {

Topology recorded(const std::string& name, const ProcessView& process = {}) {
  auto topology = readTopology(std::string(DTRUN_TOPOLOGIES) + "/" + name, process);
  REQUIRE(topology.isOk());
  return std::move(topology).value();
}

std::vector<std::string> indices(int count) { return visibleDevices({}, {}, {}, count); }

Plan planOk(const Topology& topology, const Request& request) {
  auto plan = planPlacement(topology, request);
  INFO((plan.isOk() ? std::string() : plan.status().message()));
  REQUIRE(plan.isOk());
  return std::move(plan).value();
}

std::string refusal(const Topology& topology, const Request& request) {
  auto plan = planPlacement(topology, request);
  REQUIRE_FALSE(plan.isOk());
  return plan.status().message();
}

Request bind(Binding binding, int nproc, std::vector<std::string> devices) {
  Request r;
  r.binding = binding;
  r.bindingOption = binding == Binding::kSplit ? "--cpu_binding" : "--numa-binding";
  r.nprocPerNode = nproc;
  r.devices = std::move(devices);
  return r;
}

}  // namespace

TEST_CASE("CPU lists read and print as the kernel writes them", "[unit][placement]") {
  CHECK(parseCpuList("0-3,8,10-11\n").value() == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parseCpuList("").value().empty());
  CHECK(formatCpuList({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11");
  CHECK(formatCpuList({}).empty());
  CHECK_FALSE(parseCpuList("3-1").isOk());
  CHECK_FALSE(parseCpuList("0-99999999").isOk());
  CHECK(parseCpuList("x").status().message() ==
        "'x' is not a CPU list (expected ids and ranges: 0-3,8)");
}

TEST_CASE("a recorded 2-socket 8-GPU machine is read from its sysfs", "[unit][placement]") {
  const Topology t = recorded("amd-2s8g");
  CHECK(t.cpus.size() == 64);
  CHECK(t.machineCpus == 64);
  CHECK(t.numaNodes == std::vector<int>{0, 1, 2, 3});
  REQUIRE(t.gpus.size() == 8);  // the NVSwitch bridge and the NIC are not GPUs
  CHECK(t.gpus[2].pciAddress == "0000:47:00.0");
  CHECK(t.gpus[2].numaNode == 1);
  const Cpu& cpu37 = t.cpus[37];
  CHECK(cpu37.id == 37);
  CHECK(cpu37.core == 5);   // the sibling of cpu 5
  CHECK(cpu37.cache == 4);  // the core complex of cores 4-7
  CHECK(cpu37.socket == 0);
  CHECK(cpu37.numaNode == 0);
  const Topology intel = recorded("intel-1s4g");
  CHECK(intel.gpus.size() == 4);
  CHECK(intel.gpus[3].numaNode == 0);  // -1, "no affinity", reads as 0 as torch does
  CHECK_FALSE(recorded("no-numa").hasNuma());
  CHECK(recorded("cpu-2s").gpus.empty());
}

TEST_CASE("the allowed CPUs follow the affinity and the cgroup's cpuset", "[unit][placement]") {
  ProcessView affinity;
  affinity.affinity = std::vector<int>{2, 0, 40};
  CHECK(recorded("amd-2s8g", affinity).cpus.size() == 3);
  ProcessView v2;
  v2.cgroup = "0::/job42\n";
  const Topology job42 = recorded("amd-2s8g", v2);
  CHECK(job42.cpus.size() == 16);
  CHECK(job42.numaNodes == std::vector<int>{1});
  CHECK(job42.machineCpus == 64);
  ProcessView v1;
  v1.cgroup = "4:memory:/x\n3:cpuset:/slurm/job7\n0::/\n";
  CHECK(recorded("amd-2s8g", v1).cpus.size() == 8);
  // This machine, as the launcher reads it.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  ProcessView self;
  self.affinity.emplace();
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) {
      self.affinity->push_back(cpu);
    }
  }
  auto here = readTopology("/sys", self);
  REQUIRE(here.isOk());
  CHECK(here.value().cpus.size() == self.affinity->size());
}

TEST_CASE("numa-binding node and socket follow torch's choice of CPUs", "[unit][placement]") {
  const Topology t = recorded("amd-2s8g");
  const Plan node = planOk(t, bind(Binding::kNode, 8, indices(8)));
  CHECK(formatCpuList(node.ranks[0].cpus) == "0-7,32-39");
  CHECK(formatCpuList(node.ranks[5].cpus) == "16-23,48-55");
  CHECK(node.ranks[5].numaNodes == std::vector<int>{2});
  CHECK(node.ranks[5].gpus == std::vector<std::string>{"5"});
  CHECK_FALSE(node.ranks[5].visibleDevices);  // every rank still sees every GPU, as torchrun
  const Plan socket = planOk(t, bind(Binding::kSocket, 8, indices(8)));
  CHECK(formatCpuList(socket.ranks[1].cpus) == "0-15,32-47");
  CHECK(socket.ranks[1].numaNodes == std::vector<int>{0, 1});
  CHECK(formatCpuList(socket.ranks[7].cpus) == "16-31,48-63");
}

TEST_CASE("exclusive splits a node's cores among its GPUs, core-complex gives each an L3",
          "[unit][placement]") {
  const Topology t = recorded("amd-2s8g");
  const Plan exclusive = planOk(t, bind(Binding::kExclusive, 8, indices(8)));
  CHECK(formatCpuList(exclusive.ranks[0].cpus) == "0-3,32-35");
  CHECK(formatCpuList(exclusive.ranks[1].cpus) == "4-7,36-39");
  CHECK(formatCpuList(exclusive.ranks[7].cpus) == "28-31,60-63");
  const Plan complexes = planOk(t, bind(Binding::kCoreComplex, 8, indices(8)));
  CHECK(formatCpuList(complexes.ranks[2].cpus) == "8-11,40-43");
  CHECK(formatCpuList(complexes.ranks[3].cpus) == "12-15,44-47");
  // 1 socket, 8 cores, 4 GPUs: 2 cores (4 CPUs) each.
  const Topology intel = recorded("intel-1s4g");
  const Plan four = planOk(intel, bind(Binding::kExclusive, 4, indices(4)));
  CHECK(formatCpuList(four.ranks[1].cpus) == "4-7");
  CHECK(four.ranks[1].numaNodes == std::vector<int>{0});
  // 3 GPUs over 8 cores: the first two get one core more.
  const Plan three = planOk(intel, bind(Binding::kExclusive, 3, {"0", "1", "2"}));
  CHECK(formatCpuList(three.ranks[0].cpus) == "0-5");
  CHECK(formatCpuList(three.ranks[2].cpus) == "12-15");
}

TEST_CASE("GPUs: a list, one per worker, several per worker, several workers per GPU",
          "[unit][placement]") {
  const Topology t = recorded("amd-2s8g");
  Request listed = bind(Binding::kNode, 2, {"5", "2"});
  listed.devicesGiven = true;
  const Plan list = planOk(t, listed);
  CHECK(list.ranks[0].visibleDevices == "5,2");
  CHECK(formatCpuList(list.ranks[0].cpus) == "16-23,48-55");
  CHECK(formatCpuList(list.ranks[1].cpus) == "8-15,40-47");

  Request virt = bind(Binding::kNone, 8, indices(8));
  virt.virtualLocalRank = true;
  const Plan v = planOk(t, virt);
  CHECK(v.ranks[3].visibleDevices == "3");
  CHECK(v.ranks[3].localRankZero);
  CHECK_FALSE(v.binds());

  Request two = bind(Binding::kNone, 4, indices(8));
  two.gpusPerWorker = 2;
  const Plan pairs = planOk(t, two);
  CHECK(pairs.ranks[1].visibleDevices == "2,3");
  CHECK_FALSE(pairs.ranks[1].localRankZero);

  Request shared = bind(Binding::kNode, 4, indices(8));
  shared.workersPerGpu = 2;
  const Plan halves = planOk(t, shared);
  CHECK(halves.ranks[1].visibleDevices == "0");
  CHECK(halves.ranks[2].visibleDevices == "1");
  CHECK(formatCpuList(halves.ranks[3].cpus) == "0-7,32-39");

  Request uuids = bind(Binding::kNone, 2, {"GPU-aaaa", "GPU-bbbb"});
  uuids.virtualLocalRank = true;
  CHECK(planOk(t, uuids).ranks[1].visibleDevices == "GPU-bbbb");
}

TEST_CASE("the even split divides the allowed CPUs by physical core", "[unit][placement]") {
  const Plan three = planOk(recorded("cpu-2s"), bind(Binding::kSplit, 3, {}));
  CHECK(formatCpuList(three.ranks[0].cpus) == "0-2");
  CHECK(formatCpuList(three.ranks[1].cpus) == "3-5");
  CHECK(three.ranks[1].numaNodes == std::vector<int>{0, 1});
  CHECK(formatCpuList(three.ranks[2].cpus) == "6-7");
  const Plan halves = planOk(recorded("amd-2s8g"), bind(Binding::kSplit, 2, indices(8)));
  CHECK(formatCpuList(halves.ranks[0].cpus) == "0-15,32-47");
  // More ranks than cores: logical CPUs are split instead.
  const Plan threads = planOk(recorded("intel-1s4g"), bind(Binding::kSplit, 16, {}));
  CHECK(formatCpuList(threads.ranks[15].cpus) == "15");
}

TEST_CASE("impossible placements are refused with one line that says what to do",
          "[unit][placement]") {
  const Topology t = recorded("amd-2s8g");
  CHECK(refusal(recorded("no-numa"), bind(Binding::kNode, 1, indices(1))) ==
        "--numa-binding=node: this machine reports no NUMA node (no devices/system/node/node<N> "
        "in sysfs), so there is nothing to bind to; leave the binding out, or use "
        "--cpu_binding=split");
  CHECK(refusal(t, bind(Binding::kNode, 9, indices(8))) ==
        "--numa-binding=node binds each rank next to its GPU, but local rank 8 has none (8 GPUs "
        "for 9 ranks); lower --nproc_per_node, or use --cpu_binding=split for ranks without GPUs");
  Request exclusiveShared = bind(Binding::kExclusive, 4, indices(8));
  exclusiveShared.workersPerGpu = 2;
  CHECK(refusal(t, exclusiveShared) ==
        "--numa-binding=exclusive gives each GPU's rank cores of its own, but GPU 0 has several "
        "ranks; use one rank per GPU, or --numa-binding=node");
  Request tooMany = bind(Binding::kNone, 5, indices(8));
  tooMany.gpusPerWorker = 2;
  CHECK(refusal(t, tooMany) ==
        "--gpus_per_worker=2: 5 local ranks need 10 GPUs, but 8 are (0,1,2,3,4,5,6,7); lower "
        "--nproc_per_node or make more GPUs visible");
  Request both = bind(Binding::kNone, 2, indices(8));
  both.virtualLocalRank = true;
  both.gpusPerWorker = 1;
  CHECK(refusal(t, both).starts_with("--virtual-local-rank, --gpus_per_worker and"));
  CHECK(refusal(t, bind(Binding::kNode, 1, {"GPU-aaaa"})) ==
        "--numa-binding=node: the NUMA node of GPU GPU-aaaa is unknown (dtrun reads GPUs by "
        "index, not by UUID); name GPUs by index in CUDA_VISIBLE_DEVICES or --gpus, or leave "
        "the binding out");
  ProcessView job42;
  job42.cgroup = "0::/job42";
  CHECK(refusal(recorded("amd-2s8g", job42), bind(Binding::kNode, 1, indices(8))) ==
        "--numa-binding=node: GPU 0 is on NUMA node 0, which has no CPU this process may use "
        "(affinity or cpuset); leave the binding out or widen the cpuset");
  CHECK(refusal(recorded("cpu-2s"), bind(Binding::kSplit, 9, {})) ==
        "--cpu_binding=split: 9 local ranks but only 8 CPUs may be used (0-7); lower "
        "--nproc_per_node or leave the binding out");
}

TEST_CASE("visible GPUs come from CUDA_VISIBLE_DEVICES, then SLURM's", "[unit][placement]") {
  CHECK(visibleDevices(std::string("2, 3"), std::string("0"), {}, 8) ==
        std::vector<std::string>{"2", "3"});
  CHECK(visibleDevices(std::string(""), {}, {}, 8).empty());
  CHECK(visibleDevices({}, std::string("1,3"), std::string("0-3"), 8) ==
        std::vector<std::string>{"1", "3"});
  CHECK(visibleDevices({}, {}, std::string("4"), 8) == std::vector<std::string>{"4"});
  CHECK(visibleDevices({}, {}, {}, 2) == std::vector<std::string>{"0", "1"});
}
