// Detection under MPI launchers (Open MPI's mpirun, MPICH's Hydra, prterun), Flux and LSF, from
// the environments their documentation describes (and, for Open MPI 4.1, the one Debian's mpirun
// gave two processes here: tests/integration/mpirun_test.sh runs the real thing).
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace {

// Open MPI 4.1's mpirun, 2 processes on 2 nodes (one per node), rank <rank>: what Debian's
// mpirun exported here, trimmed to the variables that matter. Rank 0 runs beside mpirun (its
// daemon is mpirun itself, the HNP); rank 1 under the second node's orted.
sched::JobEnvironment ompiRank(int rank) {
  sched::JobEnvironment job;
  job.hostName = "node" + std::to_string(rank + 1);
  const std::string hnp = "1336606720.0;tcp://10.1.0.1,192.168.7.1:59145";
  job.env = {
      {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
      {"OMPI_COMM_WORLD_NODE_RANK", "0"},
      {"OMPI_UNIVERSE_SIZE", "2"},
      {"OMPI_MCA_ess_base_jobid", "1336606721"},
      {"OMPI_MCA_orte_num_nodes", "2"},
      {"OMPI_MCA_orte_hnp_uri", hnp},
      {"OMPI_MCA_orte_local_daemon_uri", rank == 0 ? hnp : "1336606720.1;tcp://10.1.0.2:51713"},
      {"PMIX_NAMESPACE", "1336606721"},
      {"PMIX_RANK", std::to_string(rank)},
      {"PMIX_HOSTNAME", job.hostName}};
  return job;
}

// A task of `flux run -N2 --tasks-per-node=1` (flux-environment(7)), with the PMI variables of
// Flux's pmi shell plugin.
sched::JobEnvironment fluxTask(int rank, const std::string& id = "\xc6\x92uZZybuNNy") {
  sched::JobEnvironment job;
  job.hostName = "fluke" + std::to_string(rank);
  job.env = {{"FLUX_JOB_ID", id},
             {"FLUX_JOB_SIZE", "2"},
             {"FLUX_JOB_NNODES", "2"},
             {"FLUX_TASK_RANK", std::to_string(rank)},
             {"FLUX_TASK_LOCAL_ID", "0"},
             {"FLUX_JOB_TMPDIR", "/tmp/flux-xyz/jobtmp-0-uZZybuNNy"},
             {"FLUX_KVS_NAMESPACE", "job-6731191091817518"},
             {"FLUX_URI", "local:///tmp/flux-xyz/local-0"},
             {"PMI_RANK", std::to_string(rank)},
             {"PMI_SIZE", "2"},
             {"PMI_FD", "12"}};
  return job;
}

// An LSF job (bsub -n 8 -R "span[ptile=4]") seen from host `self`: LSF's job execution
// environment.
sched::JobEnvironment lsfJob(const std::string& self) {
  sched::JobEnvironment job;
  job.hostName = self;
  job.env = {{"LSB_JOBID", "3141"},
             {"LSB_MCPU_HOSTS", "hostA 4 hostB.lsf.example 4 "},
             {"LSB_HOSTS",
              "hostA hostA hostA hostA hostB.lsf.example hostB.lsf.example "
              "hostB.lsf.example hostB.lsf.example"},
             {"LSB_DJOB_HOSTFILE", "/home/u/.lsbatch/1700000000.3141.hostfile"},
             {"LSB_QUEUE", "normal"},
             {"LSF_BINDIR", "/opt/lsf/10.1/linux/bin"}};
  return job;
}

}  // namespace

TEST_CASE("Open MPI's mpirun: ranks as nodes, mpirun's address beside rank 0",
          "[unit][scheduler]") {
  for (const int rank : {0, 1}) {
    const auto a = detected(ompiRank(rank));
    CHECK(a.kind == sched::Kind::kMpi);
    CHECK(a.hosts.empty());
    CHECK(a.nodeCount == 2);
    CHECK(a.nodeIndex == rank);
    CHECK(a.tasksOnThisNode == 1);
    CHECK(a.jobId == "1336606721");
    CHECK(a.jobIdFrom == "PMIX_NAMESPACE");
    CHECK(a.master == "10.1.0.1");  // the first address of mpirun's tcp contact
    CHECK(contains(a.masterFrom, "OMPI_MCA_orte_hnp_uri"));
    CHECK(a.hostsFrom == "OMPI_COMM_WORLD_SIZE=2");
    CHECK(a.nodeIndexFrom == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank));
    CHECK(a.launcher == "mpirun");
    CHECK(sched::jobPort(a) == 26721);
  }
  SECTION("an IPv6-only contact") {
    auto job = ompiRank(1);
    job.env["OMPI_MCA_orte_hnp_uri"] = "7.0;tcp6://[fd00::2]:45119";
    CHECK(detected(job).master == "fd00::2");
  }
}

TEST_CASE("Open MPI: where mpirun's address cannot be rank 0's, it is not used",
          "[unit][scheduler]") {
  SECTION("rank 0 runs under a daemon of its own (mpirun on a login node)") {
    auto job = ompiRank(0);
    job.env["OMPI_MCA_orte_local_daemon_uri"] = "1336606720.1;tcp://10.1.0.2:51713";
    const auto a = detected(job);
    CHECK(a.master.empty());
    CHECK(contains(a.masterMissing, "rank 0 does not run on mpirun's host"));
    CHECK(contains(a.masterMissing, "--master_addr="));
  }
  SECTION("another rank runs beside mpirun, so rank 0 does not") {
    auto job = ompiRank(1);
    job.env["OMPI_MCA_orte_local_daemon_uri"] = job.env["OMPI_MCA_orte_hnp_uri"];
    CHECK(contains(detected(job).masterMissing, "rank 1 runs on mpirun's host"));
  }
  SECTION("Open MPI 5 (PRRTE) exports no contact of mpirun") {
    auto job = ompiRank(1);
    job.env.erase("OMPI_MCA_orte_hnp_uri");
    job.env.erase("OMPI_MCA_orte_local_daemon_uri");
    job.env.erase("OMPI_MCA_ess_base_jobid");
    job.env["PMIX_NAMESPACE"] = "prterun-login1-4242@1";
    const auto a = detected(job);
    CHECK(a.master.empty());
    CHECK(contains(a.masterMissing, "Open MPI 5"));
    CHECK(a.jobId == "prterun-login1-4242@1");
    const auto port = sched::jobPort(a);  // a hash of the namespace: fixed, in range
    CHECK(port >= 20000);
    CHECK(port < 30000);
  }
}

TEST_CASE("several MPI processes per node are reported with the variable that says so",
          "[unit][scheduler]") {
  auto job = ompiRank(1);
  job.env["OMPI_COMM_WORLD_SIZE"] = "4";
  job.env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  const auto a = detected(job);
  CHECK(a.tasksOnThisNode == 2);
  CHECK(a.tasksFrom == "OMPI_COMM_WORLD_LOCAL_SIZE=2");
  CHECK(a.onePerNode == "mpirun --map-by ppr:1:node");
}

TEST_CASE("MPICH's Hydra and Intel MPI: PMI ranks, no job id, no host", "[unit][scheduler]") {
  sched::JobEnvironment job;
  job.env = {{"PMI_RANK", "1"},        {"PMI_SIZE", "3"},        {"PMI_FD", "6"},
             {"MPI_LOCALNRANKS", "1"}, {"MPI_LOCALRANKID", "0"}, {"HYDI_CONTROL_FD", "5"}};
  const auto a = detected(job);
  CHECK(a.kind == sched::Kind::kMpi);
  CHECK(a.nodeCount == 3);
  CHECK(a.nodeIndex == 1);
  CHECK(a.nodeIndexFrom == "PMI_RANK=1");
  CHECK(a.jobId.empty());
  CHECK(a.master.empty());
  CHECK(contains(a.masterMissing, "mpiexec exports no host of rank 0"));
  job.env["MPI_LOCALNRANKS"] = "2";
  CHECK(detected(job).tasksOnThisNode == 2);
  CHECK(detected(job).onePerNode == "mpiexec -ppn 1");
}

TEST_CASE("bad MPI values name the variable", "[unit][scheduler]") {
  auto job = ompiRank(1);
  job.env["OMPI_COMM_WORLD_RANK"] = "2";
  CHECK(
      contains(errorOf(job), "OMPI_COMM_WORLD_RANK='2': out of range for OMPI_COMM_WORLD_SIZE=2"));
  job.env["OMPI_COMM_WORLD_RANK"] = "one";
  CHECK(contains(errorOf(job), "OMPI_COMM_WORLD_RANK='one': expected a rank"));
  sched::JobEnvironment pmix;
  pmix.env = {{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "prterun-x-1@1"}};
  CHECK(contains(errorOf(pmix), "PMIX_RANK is set but no job size"));
  CHECK(contains(errorOf(sched::JobEnvironment{}, sched::Mode::kMpi),
                 "none of OMPI_COMM_WORLD_RANK, PMIX_RANK and PMI_RANK is set"));
}

TEST_CASE("which environment auto reads when launchers nest", "[unit][scheduler]") {
  SECTION("mpirun in a SLURM batch script: Open MPI's ranks, not the job's") {
    auto job = ompiRank(0);
    job.env["SLURM_JOB_ID"] = "77";
    job.env["SLURM_JOB_NODELIST"] = "node[1-2]";
    job.env["SLURM_NODEID"] = "0";
    CHECK(detected(job).kind == sched::Kind::kMpi);
    CHECK(detected(job, sched::Mode::kSlurm).kind == sched::Kind::kSlurm);
  }
  SECTION("srun --mpi=pmix: the PMIx rank is srun's, SLURM is read") {
    sched::JobEnvironment job;
    job.hostName = "node2";
    job.env = {{"SLURM_JOB_ID", "77"},
               {"SLURM_STEP_ID", "0"},
               {"SLURM_STEP_NODELIST", "node[1-2]"},
               {"SLURM_NODEID", "1"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
               {"PMIX_RANK", "1"},
               {"PMIX_NAMESPACE", "slurm.pmix.77.0"}};
    const auto a = detected(job);
    CHECK(a.kind == sched::Kind::kSlurm);
    CHECK(a.launcher == "srun");
  }
  SECTION("Hydra with two processes per node inside PBS: PBS's hosts, refused per node") {
    sched::JobEnvironment job;
    job.hostName = "cn2";
    job.env = {{"PBS_JOBID", "9.srv"}, {"PBS_NODEFILE", "/nodes"}, {"PMI_RANK", "2"},
               {"PMI_SIZE", "4"},      {"MPI_LOCALNRANKS", "2"},   {"MPI_LOCALRANKID", "0"}};
    job.readFile = [](const std::string&) { return std::optional<std::string>("cn1\ncn2\n"); };
    const auto a = detected(job);
    CHECK(a.kind == sched::Kind::kPbs);
    CHECK(a.nodeIndex == 1);
    CHECK(a.tasksOnThisNode == 2);
    CHECK(a.tasksFrom == "MPI_LOCALNRANKS=2");
    CHECK(a.launcher == "mpiexec");
  }
  SECTION("two batch job ids") {
    auto job = lsfJob("hostA");
    job.env["SLURM_JOB_ID"] = "5";
    CHECK(errorOf(job) ==
          "both SLURM_JOB_ID and LSB_JOBID are set: pass --scheduler slurm, --scheduler lsf or "
          "--scheduler none");
    job.env["PBS_JOBID"] = "6";
    CHECK(contains(errorOf(job), "SLURM_JOB_ID, PBS_JOBID and LSB_JOBID are set"));
    CHECK(detected(job, sched::Mode::kLsf).kind == sched::Kind::kLsf);
  }
  SECTION("--scheduler names the kinds") {
    for (const char* name : {"auto", "slurm", "pbs", "lsf", "flux", "mpi", "kubeflow", "none"}) {
      REQUIRE(sched::parseMode(name).has_value());
    }
    CHECK_FALSE(sched::parseMode("sge").has_value());
    CHECK(sched::kindName(sched::Kind::kLsf) == "lsf");
    CHECK(sched::kindName(sched::Kind::kFlux) == "flux");
    CHECK(sched::kindName(sched::Kind::kMpi) == "mpi");
  }
}

TEST_CASE("flux run: task rank as node index, the numeric job id", "[unit][scheduler]") {
  for (const int rank : {0, 1}) {
    const auto a = detected(fluxTask(rank));
    CHECK(a.kind == sched::Kind::kFlux);
    CHECK(a.nodeCount == 2);
    CHECK(a.nodeIndex == rank);
    CHECK(a.nodeIndexFrom == "FLUX_TASK_RANK=" + std::to_string(rank));
    CHECK(a.hostsFrom == "FLUX_JOB_NNODES=2");
    CHECK(a.jobId == "6731191091817518");  // RFC 19's own example
    CHECK(a.tasksOnThisNode == 1);
    CHECK(a.master.empty());
    CHECK(contains(a.masterMissing, "flux hostlist -n 0 local"));
    CHECK(sched::jobPort(a) == 27518);  // the id's last digits
  }
  // The ASCII prefix Flux uses outside UTF-8 locales, and a decimal id.
  CHECK(detected(fluxTask(0, "fuZZybuNNy")).jobId == "6731191091817518");
  CHECK(detected(fluxTask(0, "6731191091817518")).jobId == "6731191091817518");
  // Its PMI variables are Flux's own, not an MPI launcher's.
  CHECK(detected(fluxTask(1)).launcher == "flux run");
}

TEST_CASE("flux run with several tasks per node, and bad Flux values", "[unit][scheduler]") {
  auto job = fluxTask(3);
  job.env["FLUX_JOB_SIZE"] = "4";
  job.env["FLUX_TASK_LOCAL_ID"] = "1";
  const auto a = detected(job);
  CHECK(a.tasksOnThisNode == 2);
  CHECK(a.tasksFrom == "FLUX_JOB_SIZE=4 on FLUX_JOB_NNODES=2");

  CHECK(contains(errorOf(fluxTask(0, "\xc6\x92u0")),
                 "FLUX_JOB_ID='\xc6\x92u0': expected a Flux job id"));
  auto batch = fluxTask(0);
  batch.env.erase("FLUX_TASK_RANK");
  CHECK(contains(errorOf(batch), "FLUX_JOB_ID is set but FLUX_TASK_RANK is not"));
  auto far = fluxTask(0);
  far.env["FLUX_TASK_RANK"] = "2";
  CHECK(contains(errorOf(far), "FLUX_TASK_RANK='2': out of range for FLUX_JOB_NNODES=2"));
  // A flux batch script (the instance's initial program) has no job variables: nothing to read.
  sched::JobEnvironment script;
  script.env = {{"FLUX_URI", "local:///tmp/flux-xyz/local-0"}};
  auto none = sched::detect(sched::Mode::kAuto, script);
  REQUIRE(none.isOk());
  CHECK_FALSE(none.value().has_value());
  CHECK(contains(errorOf(script, sched::Mode::kFlux), "FLUX_JOB_ID is not set"));
}

TEST_CASE("F58 job ids decode as RFC 19 and flux job id do", "[unit][scheduler]") {
  CHECK(sched::parseFluxJobId("\xc6\x92uZZybuNNy") == 6731191091817518ULL);
  CHECK(sched::parseFluxJobId("fuZZybuNNy") == 6731191091817518ULL);
  CHECK(sched::parseFluxJobId("f1") == 0ULL);
  CHECK(sched::parseFluxJobId("f2") == 1ULL);
  CHECK(sched::parseFluxJobId("f21") == 58ULL);
  CHECK(sched::parseFluxJobId("42") == 42ULL);
  CHECK_FALSE(sched::parseFluxJobId("f").has_value());
  CHECK_FALSE(sched::parseFluxJobId("").has_value());
  CHECK_FALSE(sched::parseFluxJobId("fuZZ0").has_value());  // 0 is not a base58 digit
  CHECK_FALSE(sched::parseFluxJobId("0x17e9").has_value());
  CHECK_FALSE(sched::parseFluxJobId("fzzzzzzzzzzzzz").has_value());  // beyond 64 bits
}

TEST_CASE("LSF: hosts from LSB_MCPU_HOSTS, this host by name", "[unit][scheduler]") {
  for (const auto& [self, index] : std::vector<std::pair<std::string, int>>{
           {"hostA", 0}, {"hostB", 1}, {"hostA.lsf.example", 0}}) {
    const auto a = detected(lsfJob(self));
    CHECK(a.kind == sched::Kind::kLsf);
    CHECK(a.hosts == Hosts{"hostA", "hostB.lsf.example"});
    CHECK(a.slotsPerNode == std::vector<int>{4, 4});
    CHECK(a.nodeCount == 2);
    CHECK(a.nodeIndex == index);
    CHECK(a.master == "hostA");
    CHECK(a.masterFrom == "the first host of LSB_MCPU_HOSTS");
    CHECK(a.jobId == "3141");
    CHECK(a.jobIdFrom == "LSB_JOBID");
    CHECK(a.hostsFrom == "LSB_MCPU_HOSTS=hostA 4 hostB.lsf.example 4 ");
    CHECK(sched::jobPort(a) == 23141);
  }
  SECTION("the host file when LSB_MCPU_HOSTS is missing, LSB_HOSTS after it") {
    auto job = lsfJob("hostB");
    job.env.erase("LSB_MCPU_HOSTS");
    job.readFile = [](const std::string& path) {
      return path == "/home/u/.lsbatch/1700000000.3141.hostfile"
                 ? std::optional<std::string>("hostA\nhostA\nhostB\n")
                 : std::nullopt;
    };
    auto a = detected(job);
    CHECK(a.hosts == Hosts{"hostA", "hostB"});
    CHECK(a.slotsPerNode == std::vector<int>{2, 1});
    CHECK(a.nodeIndex == 1);
    CHECK(a.nodeIndexFrom == "LSB_DJOB_HOSTFILE position of host hostB");
    job.env.erase("LSB_DJOB_HOSTFILE");
    a = detected(job);
    CHECK(a.hosts == Hosts{"hostA", "hostB.lsf.example"});
    CHECK(a.hostsFrom.starts_with("LSB_HOSTS="));
  }
  SECTION("an element of a job array has its own id and port") {
    auto job = lsfJob("hostA");
    job.env["LSB_JOBINDEX"] = "3";
    const auto a = detected(job);
    CHECK(a.jobId == "3141.3");
    CHECK(a.jobIdFrom == "LSB_JOBID+LSB_JOBINDEX");
    CHECK(sched::jobPort(a) == 20000 + (3141 + 7919 * 3) % 10000);
    job.env["LSB_JOBINDEX"] = "0";  // not an array job
    CHECK(detected(job).jobId == "3141");
  }
}

TEST_CASE("bad LSF values name the variable and the fix", "[unit][scheduler]") {
  auto job = lsfJob("login1");
  CHECK(contains(errorOf(job),
                 "LSB_MCPU_HOSTS='hostA 4 hostB.lsf.example 4 ': this host 'login1' is not among "
                 "its hosts (hostA, hostB.lsf.example); start dtrun on the job's hosts (blaunch"));
  job = lsfJob("hostA");
  job.env["LSB_MCPU_HOSTS"] = "hostA 4 hostB";
  CHECK(contains(errorOf(job), "LSB_MCPU_HOSTS='hostA 4 hostB': expected pairs of a host"));
  job.env["LSB_MCPU_HOSTS"] = "hostA four";
  CHECK(contains(errorOf(job), "'four' after host 'hostA' is not a slot count"));
  job.env["LSB_MCPU_HOSTS"] = "hostA 1 hostA 1";
  CHECK(contains(errorOf(job), "host 'hostA' appears twice"));
  job.env.erase("LSB_MCPU_HOSTS");
  CHECK(contains(errorOf(job),
                 "LSB_DJOB_HOSTFILE='/home/u/.lsbatch/1700000000.3141.hostfile' "
                 "cannot be read"));
  job.env.erase("LSB_DJOB_HOSTFILE");
  job.env["LSB_HOSTS"] = " \t ";
  CHECK(contains(errorOf(job), "LSB_HOSTS=' \t ': lists no host"));
  job.env["LSB_HOSTS"] = "hostA\thostA";  // tabs separate too
  CHECK(detected(job).hosts == Hosts{"hostA"});
  job.env.erase("LSB_HOSTS");
  CHECK(contains(errorOf(job), "LSB_JOBID is set but none of LSB_MCPU_HOSTS"));
  CHECK(contains(errorOf(sched::JobEnvironment{}, sched::Mode::kLsf), "LSB_JOBID is not set"));
}
