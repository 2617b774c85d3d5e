// validate() under mpirun, Hydra, flux run and LSF: what their environments supply, the first
// host they cannot name, and several processes per node refused as under srun.
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "launch_options.h"
#include "plan_support.h"

namespace {

namespace launcher = dtrun::launcher;
using dtrun::testing::contains;
using dtrun::testing::errorOf;
using dtrun::testing::plan;
using dtrun::testing::planOk;
using dtrun::testing::testHost;

// Rank <rank> of Open MPI 4's `mpirun -np 2 --map-by ppr:1:node`, rank 0 beside mpirun.
launcher::HostFacts ompiHost(int rank) {
  auto host = dtrun::testing::testHost();
  host.hostName = "node" + std::to_string(rank + 1);
  const std::string hnp = "1336606720.0;tcp://10.1.0.1:59145";
  host.env = {
      {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
      {"OMPI_MCA_orte_hnp_uri", hnp},
      {"OMPI_MCA_orte_local_daemon_uri", rank == 0 ? hnp : "1336606720.1;tcp://10.1.0.2:51713"},
      {"PMIX_NAMESPACE", "1336606721"},
      {"PMIX_RANK", std::to_string(rank)}};
  return host;
}

// Task <rank> of `flux run -N2 --tasks-per-node=1` (job ƒuZZybuNNy = 6731191091817518).
launcher::HostFacts fluxHost(int rank) {
  auto host = dtrun::testing::testHost();
  host.hostName = "fluke" + std::to_string(rank);
  host.env = {{"FLUX_JOB_ID", "\xc6\x92uZZybuNNy"},
              {"FLUX_JOB_SIZE", "2"},
              {"FLUX_JOB_NNODES", "2"},
              {"FLUX_TASK_RANK", std::to_string(rank)},
              {"FLUX_TASK_LOCAL_ID", "0"},
              {"PMI_RANK", std::to_string(rank)},
              {"PMI_SIZE", "2"}};
  return host;
}

// blaunch's task on `self` in LSF job 3141 over hostA and hostB.
launcher::HostFacts lsfHost(const std::string& self) {
  auto host = dtrun::testing::testHost();
  host.hostName = self;
  host.env = {{"LSB_JOBID", "3141"}, {"LSB_MCPU_HOSTS", "hostA 4 hostB 4"}};
  return host;
}

}  // namespace

TEST_CASE("under mpirun, each rank is a node and mpirun's host the master",
          "[unit][launcher][scheduler]") {
  for (const int rank : {0, 1}) {
    const auto p = planOk({"--nproc_per_node=2", "x.py"}, ompiHost(rank));
    CHECK(p.rdzvBackend == "static");
    CHECK(p.maxNodes == 2);
    CHECK(p.config.runId == "1336606721");
    CHECK(p.config.masterAddr == "10.1.0.1");
    CHECK(p.config.storePort == 26721);
    REQUIRE(p.config.multiNode.has_value());
    CHECK(p.config.multiNode->nodeRank == rank);
    CHECK(p.config.multiNode->hostsStore == (rank == 0));
    CHECK(contains(p.scheduler,
                   "mpi (mpirun) job 1336606721: 2 nodes from OMPI_COMM_WORLD_SIZE=2, "
                   "this is node " +
                       std::to_string(rank)));
    CHECK(contains(p.scheduler, "master_addr=10.1.0.1 (mpirun's address in OMPI_MCA_orte_hnp_uri"));
    CHECK(contains(p.scheduler, "master_port=26721 (derived from PMIX_NAMESPACE)"));
  }
}

TEST_CASE("several processes per node are refused under every launcher, as under srun",
          "[unit][launcher][scheduler]") {
  auto ompi = ompiHost(1);
  ompi.env["OMPI_COMM_WORLD_SIZE"] = "4";
  ompi.env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  CHECK(errorOf({"x.py"}, ompi) ==
        "OMPI_COMM_WORLD_LOCAL_SIZE=2: mpirun started 2 dtrun processes on this node, but dtrun "
        "starts the workers itself: run one per node (mpirun --map-by ppr:1:node dtrun "
        "--nproc_per_node=N ...), or pass --scheduler none");
  auto flux = fluxHost(1);
  flux.env["FLUX_JOB_SIZE"] = "4";
  CHECK(contains(errorOf({"x.py"}, flux),
                 "FLUX_JOB_SIZE=4 on FLUX_JOB_NNODES=2: flux run started 2 dtrun processes on this "
                 "node"));
  CHECK(contains(errorOf({"x.py"}, flux), "(flux run -N<nodes> --tasks-per-node=1 dtrun"));
  auto hydra = dtrun::testing::testHost();
  hydra.env = {{"PMI_RANK", "0"}, {"PMI_SIZE", "8"}, {"MPI_LOCALNRANKS", "4"}};
  CHECK(contains(errorOf({"x.py"}, hydra),
                 "MPI_LOCALNRANKS=4: mpiexec started 4 dtrun processes on this node"));
  // --scheduler none ignores them all.
  CHECK_FALSE(planOk({"--scheduler=none", "x.py"}, ompi).config.multiNode.has_value());
}

TEST_CASE("where the environment names no first host, --master_addr must",
          "[unit][launcher][scheduler]") {
  SECTION("flux run") {
    const auto message = errorOf({"x.py"}, fluxHost(1));
    CHECK(contains(message, "flux job with 2 nodes: flux run exports no host"));
    CHECK(contains(message, "--master_addr=<the host of task 0>"));
    const auto p = planOk({"--master_addr=fluke0", "x.py"}, fluxHost(1));
    CHECK(p.config.masterAddr == "fluke0");
    CHECK(p.config.storePort == 27518);
    CHECK(p.config.runId == "6731191091817518");
    CHECK(p.config.multiNode->nodeRank == 1);
    CHECK(contains(p.scheduler,
                   "flux (flux run) job 6731191091817518: 2 nodes from "
                   "FLUX_JOB_NNODES=2, this is node 1 (FLUX_TASK_RANK=1)"));
    CHECK(contains(p.scheduler, "rdzv_id=6731191091817518 (FLUX_JOB_ID=\xc6\x92uZZybuNNy)"));
    CHECK(contains(p.scheduler, "given explicitly: --master_addr"));
    // c10d needs no master: the endpoint names the store.
    const auto q =
        planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=fluke0:29400", "x.py"}, fluxHost(1));
    CHECK(q.maxNodes == 2);
    CHECK(q.config.runId == "6731191091817518");
  }
  SECTION("Hydra: no job id either, so torchrun's port unless given") {
    auto host = dtrun::testing::testHost();
    host.env = {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "1"}};
    CHECK(contains(errorOf({"x.py"}, host), "mpi job with 2 nodes: mpiexec exports no host"));
    const auto p = planOk({"--master_addr=h0", "x.py"}, host);
    CHECK(p.config.multiNode->nodeRank == 1);
    CHECK(p.config.storePort == 29500);
    CHECK(p.config.runId == "none");
    CHECK(contains(p.scheduler, "mpi (mpiexec): 2 nodes from PMI_SIZE=2"));
  }
  SECTION("mpirun whose rank 0 is not beside it") {
    auto host = ompiHost(0);
    host.env["OMPI_MCA_orte_local_daemon_uri"] = "1336606720.1;tcp://10.1.0.2:51713";
    CHECK(contains(errorOf({"x.py"}, host), "rank 0 does not run on mpirun's host"));
    CHECK(planOk({"--master_addr=node1", "x.py"}, host).config.storePort == 26721);
  }
  SECTION("one node needs no master") {
    auto host = fluxHost(0);
    host.env["FLUX_JOB_NNODES"] = "1";
    host.env["FLUX_JOB_SIZE"] = "1";
    const auto p = planOk({"--nproc_per_node=2", "x.py"}, host);
    CHECK_FALSE(p.config.multiNode.has_value());
    CHECK(p.config.runId == "6731191091817518");
  }
}

TEST_CASE("under LSF, the hosts of LSB_MCPU_HOSTS make a static launch",
          "[unit][launcher][scheduler]") {
  const auto p = planOk({"--nproc_per_node=4", "x.py"}, lsfHost("hostB"));
  CHECK(p.maxNodes == 2);
  CHECK(p.config.runId == "3141");
  CHECK(p.config.masterAddr == "hostA");
  CHECK(p.config.storePort == 23141);
  CHECK(p.config.multiNode->nodeRank == 1);
  CHECK(p.config.multiNode->schedulerOrder == 1);
  CHECK(contains(p.scheduler,
                 "lsf job 3141: 2 nodes from LSB_MCPU_HOSTS=hostA 4 hostB 4, this is "
                 "node 1 (LSB_MCPU_HOSTS position of host hostB)"));
  CHECK(contains(p.scheduler, "master_addr=hostA (the first host of LSB_MCPU_HOSTS)"));
  CHECK(contains(errorOf({"x.py"}, lsfHost("login")), "this host 'login' is not among its hosts"));
}
