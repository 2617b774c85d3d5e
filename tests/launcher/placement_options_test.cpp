// The launcher's placement options on recorded machines (tests/placement/topologies).
#include <catch2/catch.hpp>

#include "plan_support.h"
#include "plan_text.h"

using dtrun::testing::planOk;

namespace {

dtrun::launcher::HostFacts recordedHost(const std::string& machine, int gpus) {
  auto host = dtrun::testing::testHost();
  host.gpuCount = gpus;
  host.deviceNodes = gpus;
  host.readTopology = [machine] {
    return dtrun::placement::readTopology(
        std::string(DTRUN_SOURCE_DIR) + "/tests/placement/topologies/" + machine, {});
  };
  return host;
}

}  // namespace

TEST_CASE("placement options reach the agent's configuration", "[unit][launcher]") {
  const auto host = recordedHost("amd-2s8g", 8);
  const auto plain = planOk({"--nproc_per_node=gpu", "x.py"}, host);
  CHECK(plain.config.placement.empty());  // nothing asked: nothing placed, no sysfs read
  CHECK(plain.config.nprocPerNode == 8);

  const auto exclusive = planOk({"--nproc_per_node=gpu", "--numa-binding=exclusive", "x.py"}, host);
  REQUIRE(exclusive.config.placement.size() == 8);
  CHECK(exclusive.config.placement[1].cpus == std::vector<int>{4, 5, 6, 7, 36, 37, 38, 39});
  CHECK(exclusive.config.placement[1].memNodes == std::vector<int>{0});
  CHECK(exclusive.config.placement[1].gpus == "1");
  // A binding sets OMP_NUM_THREADS per rank: torchrun's blanket 1 and its notice are left out.
  CHECK(exclusive.notices.empty());
  CHECK(exclusive.config.defaultEnv.empty());

  const auto listed = planOk({"--nproc_per_node=gpu", "--gpus=6,3", "x.py"}, host);
  CHECK(listed.config.nprocPerNode == 2);
  CHECK(listed.config.placement[0].visibleDevices == "6,3");
  CHECK(listed.config.placement[1].gpus == "3");

  auto cvd = host;
  cvd.env["CUDA_VISIBLE_DEVICES"] = "4,5";
  const auto virt = planOk({"--nproc_per_node=2", "--virtual-local-rank", "x.py"}, cvd);
  CHECK(virt.config.placement[1].visibleDevices == "5");
  CHECK(virt.config.placement[1].localRankZero);
  const auto env = dtrun::agent::plannedWorkerEnvironment(virt.config, {}, 0, 1, 1, "/l/1");
  CHECK(std::find(env.begin(), env.end(), "LOCAL_RANK=0") != env.end());
  CHECK(std::find(env.begin(), env.end(), "CUDA_VISIBLE_DEVICES=5") != env.end());
  CHECK(std::find(env.begin(), env.end(), "RANK=1") != env.end());
}

TEST_CASE("the dry run's rank table shows each rank's GPU, CPUs and NUMA node",
          "[unit][launcher]") {
  const auto plan =
      planOk({"--nproc_per_node=4", "--numa-binding=socket", "x.py"}, recordedHost("amd-2s8g", 8));
  const std::string text = dtrun::launcher::dryRunText(plan, {});
  CHECK(text.find("  rank  local_rank  node_rank  gpu     cpus        numa  log_dir") !=
        std::string::npos);
  CHECK(text.find("  3     3           0          3       0-15,32-47  0-1   ") !=
        std::string::npos);
  CHECK(text.find("placement           : --numa_binding=socket") != std::string::npos);
  CHECK(text.find("DTRUN_CPUS=0-15,32-47") != std::string::npos);
  CHECK(text.find("OMP_NUM_THREADS=32") != std::string::npos);
}

TEST_CASE("nproc_per_node=gpu counts SLURM's GPUs when CUDA_VISIBLE_DEVICES is unset",
          "[unit][launcher]") {
  auto host = recordedHost("amd-2s8g", 8);
  host.env["SLURM_STEP_GPUS"] = "2,3,6";
  const auto plan = planOk({"--nproc_per_node=1", "--numa-binding=node", "x.py"}, host);
  CHECK(plan.config.placement[0].gpus == "2");
  CHECK(plan.config.placement[0].memNodes == std::vector<int>{1});
}
