// validate() inside SLURM- and PBS-shaped environments: what the allocation supplies, what the
// user's flags override, and the launches it refuses.
#include <csignal>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/agent.h"

#include "launch_options.h"
#include "plan_support.h"

namespace {

namespace launcher = dtrun::launcher;
using dtrun::testing::contains;
using dtrun::testing::errorOf;
using dtrun::testing::planOk;

// srun's environment for task <node> of a 2-node step, one task per node (job 1234, step 0).
launcher::HostFacts slurmHost(int node) {
  launcher::HostFacts host;
  host.cpuCount = 8;
  host.hostName = "node" + std::to_string(node + 1);
  host.env = {{"SLURM_JOB_ID", "1234"},
              {"SLURM_STEP_ID", "0"},
              {"SLURM_JOB_NODELIST", "node[1-2]"},
              {"SLURM_STEP_NODELIST", "node[1-2]"},
              {"SLURM_NNODES", "2"},
              {"SLURM_STEP_NUM_NODES", "2"},
              {"SLURM_NODEID", std::to_string(node)},
              {"SLURM_LOCALID", "0"},
              {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
              {"SLURM_TASKS_PER_NODE", "1(x2)"}};
  return host;
}

// A PBS job whose node file holds `nodefile`, seen from host `self`.
launcher::HostFacts pbsHost(const std::string& self, const std::string& nodefile) {
  launcher::HostFacts host;
  host.cpuCount = 8;
  host.hostName = self;
  host.env = {{"PBS_JOBID", "318.pbs01"}, {"PBS_NODEFILE", "/var/spool/pbs/aux/318.pbs01"}};
  host.readFile = [nodefile](const std::string& path) {
    return path == "/var/spool/pbs/aux/318.pbs01" ? std::optional<std::string>(nodefile)
                                                  : std::nullopt;
  };
  return host;
}

}  // namespace

TEST_CASE("under srun, no flag beyond --nproc_per_node makes a static multi-node launch",
          "[unit][launcher][scheduler]") {
  for (const int node : {0, 1}) {
    const auto p = planOk({"--nproc_per_node=4", "x.py"}, slurmHost(node));
    CHECK(p.minNodes == 2);
    CHECK(p.maxNodes == 2);
    CHECK(p.rdzvBackend == "static");
    CHECK(p.config.runId == "1234.0");
    CHECK(p.config.masterAddr == "node1");
    CHECK(p.config.storePort == 21234);
    CHECK(p.rdzvEndpoint == "node1:21234");
    REQUIRE(p.config.multiNode.has_value());
    CHECK(p.config.multiNode->nodeRank == node);
    CHECK(p.config.multiNode->schedulerOrder == node);
    CHECK(p.config.multiNode->hostsStore == (node == 0));
    // The banner says what was detected and from which variables.
    CHECK(contains(p.scheduler, "slurm job 1234.0: 2 nodes from SLURM_STEP_NODELIST=node[1-2]"));
    CHECK(contains(p.scheduler, "node_rank=" + std::to_string(node) +
                                    " (SLURM_NODEID=" + std::to_string(node) + ")"));
    CHECK(contains(p.scheduler, "master_addr=node1 (the first host of SLURM_STEP_NODELIST)"));
    CHECK(contains(p.scheduler, "master_port=21234 (derived from SLURM_JOB_ID+SLURM_STEP_ID)"));
    CHECK(contains(p.scheduler, "rdzv_id=1234.0 (SLURM_JOB_ID+SLURM_STEP_ID)"));
    CHECK(contains(launcher::launchBanner(p), "scheduler           : slurm job 1234.0"));
  }
}

TEST_CASE("explicit flags and PET_* variables win over the allocation",
          "[unit][launcher][scheduler]") {
  auto host = slurmHost(1);
  host.env["PET_MASTER_PORT"] = "29500";
  const auto p =
      planOk({"--master_addr=10.0.0.5", "--rdzv_id=mine", "--nproc_per_node=2", "x.py"}, host);
  CHECK(p.config.masterAddr == "10.0.0.5");
  CHECK(p.config.storePort == 29500);
  CHECK(p.config.runId == "mine");
  CHECK(p.config.multiNode->nodeRank == 1);  // still from SLURM_NODEID
  CHECK(contains(p.scheduler, "given explicitly: --rdzv_id, --master_addr, PET_MASTER_PORT"));

  SECTION("a --node_rank that disagrees with SLURM_NODEID wins, with a warning") {
    const auto q = planOk({"--node_rank=0", "x.py"}, host);
    CHECK(q.config.multiNode->nodeRank == 0);
    REQUIRE(q.warnings.size() == 1);
    CHECK(contains(q.warnings[0], "--node_rank=0 but SLURM_NODEID=1 says this is node 1"));
  }
  SECTION("--scheduler none ignores the allocation") {
    const auto q = planOk({"--scheduler=none", "x.py"}, host);
    CHECK_FALSE(q.config.multiNode.has_value());
    CHECK(q.config.runId == "none");
    CHECK(q.scheduler == "none (--scheduler none)");
  }
  SECTION("--standalone is one node whatever the allocation") {
    const auto q = planOk({"--standalone", "x.py"}, host);
    CHECK_FALSE(q.config.multiNode.has_value());
    CHECK(q.scheduler == "none (--standalone)");
  }
  SECTION("--nnodes=1 runs this node alone") {
    const auto q = planOk({"--nnodes=1", "x.py"}, host);
    CHECK_FALSE(q.config.multiNode.has_value());
    CHECK(q.config.runId == "1234.0");
  }
}

TEST_CASE("with c10d flags the allocation supplies only the node count, order and job id",
          "[unit][launcher][scheduler]") {
  const auto p =
      planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=node1:29400", "x.py"}, slurmHost(1));
  CHECK(p.rdzvBackend == "c10d");
  CHECK(p.minNodes == 2);
  CHECK(p.maxNodes == 2);
  CHECK(p.config.runId == "1234.0");
  CHECK(p.config.storePort == 29400);
  CHECK(p.config.multiNode->nodeRank == -1);  // c10d assigns ranks; the scheduler's order hints
  CHECK(p.config.multiNode->schedulerOrder == 1);
  CHECK_FALSE(contains(p.scheduler, "master_addr"));
  // An elastic range beyond the allocation keeps the allocation's order as the hint.
  const auto q = planOk({"--nnodes=1:4", "--rdzv_backend=c10d", "--rdzv_endpoint=node1", "x.py"},
                        slurmHost(1));
  CHECK(q.maxNodes == 4);
  CHECK(q.config.multiNode->schedulerOrder == 1);
  CHECK(contains(q.scheduler, "given explicitly: --nnodes"));
}

TEST_CASE("a one-node allocation is a single-node launch", "[unit][launcher][scheduler]") {
  auto host = slurmHost(0);
  host.env["SLURM_STEP_NODELIST"] = "node1";
  host.env["SLURM_STEP_NUM_NODES"] = "1";
  host.env["SLURM_NNODES"] = "1";
  host.env["SLURM_STEP_TASKS_PER_NODE"] = "1";
  const auto p = planOk({"--nproc_per_node=2", "x.py"}, host);
  CHECK_FALSE(p.config.multiNode.has_value());
  CHECK(p.config.storePort == 0);  // a free port, as any single-node launch
  CHECK(p.config.masterAddr == "127.0.0.1");
  CHECK(p.config.runId == "1234.0");
}

TEST_CASE("launches that cannot work in the allocation are refused",
          "[unit][launcher][scheduler]") {
  SECTION("srun started several dtrun per node") {
    auto host = slurmHost(0);
    host.env["SLURM_STEP_TASKS_PER_NODE"] = "4(x2)";
    host.env["SLURM_NTASKS_PER_NODE"] = "4";
    CHECK(contains(errorOf({"x.py"}, host),
                   "SLURM_STEP_TASKS_PER_NODE=4(x2): srun started 4 dtrun processes on this "
                   "node, but dtrun starts the workers itself: run one per node "
                   "(srun --ntasks-per-node=1"));
  }
  SECTION("the batch script of a multi-node job, without srun") {
    auto host = slurmHost(0);
    host.env.erase("SLURM_STEP_ID");
    host.env.erase("SLURM_STEP_NODELIST");
    host.env.erase("SLURM_STEP_NUM_NODES");
    const auto message = errorOf({"x.py"}, host);
    CHECK(contains(message, "running in the batch script of a 2-node SLURM job"));
    CHECK(contains(message, "srun --ntasks-per-node=1 dtrun"));
    CHECK(planOk({"--nnodes=1", "x.py"}, host).config.runId == "1234");
  }
  SECTION("malformed scheduler values") {
    auto host = slurmHost(0);
    host.env["SLURM_STEP_NODELIST"] = "node[2-1]";
    CHECK(contains(errorOf({"x.py"}, host),
                   "SLURM_STEP_NODELIST='node[2-1]': the range '2-1' "
                   "runs backwards"));
    host = slurmHost(0);
    host.env["SLURM_NODEID"] = "7";
    CHECK(contains(errorOf({"x.py"}, host), "SLURM_NODEID='7': out of range"));
  }
  SECTION("a bad --scheduler value") {
    CHECK(errorOf({"--scheduler=sge", "x.py"}, slurmHost(0)) ==
          "--scheduler: expected auto, slurm, pbs, lsf, flux, mpi, kubeflow or none, got 'sge'");
  }
  SECTION("--scheduler pbs outside PBS") {
    CHECK(contains(errorOf({"--scheduler=pbs", "x.py"}, slurmHost(0)), "PBS_JOBID is not set"));
  }
}

TEST_CASE("PBS Pro and Torque node files make a static multi-node launch",
          "[unit][launcher][scheduler]") {
  // PBS Pro, select=2:mpiprocs=4 with FQDNs; Torque, nodes=2:ppn=3 with short names.
  const std::string pro =
      "cn4.hpc.org\ncn4.hpc.org\ncn4.hpc.org\ncn4.hpc.org\n"
      "cn2.hpc.org\ncn2.hpc.org\ncn2.hpc.org\ncn2.hpc.org\n";
  const std::string torque = "t09\nt09\nt09\nt01\nt01\nt01\n";
  for (const auto& [nodefile, self, first, rank] :
       {std::tuple{pro, "cn2", "cn4.hpc.org", 1}, std::tuple{pro, "cn4", "cn4.hpc.org", 0},
        std::tuple{torque, "t01", "t09", 1}, std::tuple{torque, "t09.cluster", "t09", 0}}) {
    INFO(self);
    const auto p = planOk({"--nproc_per_node=4", "x.py"}, pbsHost(self, nodefile));
    CHECK(p.maxNodes == 2);
    CHECK(p.config.masterAddr == first);
    CHECK(p.config.storePort == 20318);
    CHECK(p.config.runId == "318.pbs01");
    CHECK(p.config.multiNode->nodeRank == rank);
    CHECK(p.config.multiNode->schedulerOrder == rank);
    CHECK(contains(p.scheduler,
                   "pbs job 318.pbs01: 2 nodes from "
                   "PBS_NODEFILE=/var/spool/pbs/aux/318.pbs01"));
    CHECK(contains(p.scheduler, "(PBS_NODEFILE position of host"));
  }
}

TEST_CASE("bad PBS facts are refused naming PBS_NODEFILE", "[unit][launcher][scheduler]") {
  CHECK(contains(errorOf({"x.py"}, pbsHost("elsewhere", "a\nb\n")),
                 "this host 'elsewhere' is not among its hosts (a, b)"));
  auto host = pbsHost("a", "a\nb\n");
  host.env["PBS_NODEFILE"] = "/nowhere";
  CHECK(contains(errorOf({"x.py"}, host), "PBS_NODEFILE='/nowhere' cannot be read"));
  // Explicit flags do not make a malformed allocation acceptable; --scheduler none does.
  CHECK(planOk({"--scheduler=none", "--nnodes=2", "--node_rank=1", "--master_addr=a", "x.py"}, host)
            .config.multiNode->nodeRank == 1);
}

TEST_CASE("preemption signals are forwarded unless --signals_to_handle makes them stop signals",
          "[unit][launcher][scheduler]") {
  const launcher::HostFacts host;
  const auto p = planOk({"x.py"}, host);
  CHECK(p.config.signalsToForward == std::vector<int>{SIGUSR1, SIGUSR2});
  CHECK(contains(launcher::launchBanner(p),
                 "signals_forwarded   : SIGUSR1,SIGUSR2 (to every worker; the job goes on if they "
                 "handle them)"));
  const auto q = planOk({"--signals_to_handle=SIGTERM,SIGUSR1", "x.py"}, host);
  CHECK(q.config.signalsToHandle == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(q.config.signalsToForward == std::vector<int>{SIGUSR2});
  const auto r = planOk({"--signals_to_handle=SIGUSR2,SIGUSR1", "x.py"}, host);
  CHECK(r.config.signalsToForward.empty());
  CHECK(contains(launcher::launchBanner(r), "signals_forwarded   : (none)"));
}
