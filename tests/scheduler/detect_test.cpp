// Detection over SLURM- and PBS-shaped environments, as srun, sbatch, PBS Pro and Torque set them.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace {

namespace sched = dtrun::scheduler;
using dtrun::testing::contains;
using dtrun::testing::detected;
using dtrun::testing::errorOf;
using Hosts = std::vector<std::string>;

// What `srun` gives task <nodeId> of a 2-node step with one task per node (the local test
// cluster's capture, reference/local-cluster.md).
sched::JobEnvironment srunTask(int nodeId) {
  sched::JobEnvironment job;
  job.hostName = "node" + std::to_string(nodeId + 1);
  job.env = {{"SLURM_JOB_ID", "1234"},
             {"SLURM_JOBID", "1234"},
             {"SLURM_STEP_ID", "0"},
             {"SLURM_STEPID", "0"},
             {"SLURM_JOB_NODELIST", "node[1-2]"},
             {"SLURM_NODELIST", "node[1-2]"},
             {"SLURM_STEP_NODELIST", "node[1-2]"},
             {"SLURM_NNODES", "2"},
             {"SLURM_JOB_NUM_NODES", "2"},
             {"SLURM_STEP_NUM_NODES", "2"},
             {"SLURM_NODEID", std::to_string(nodeId)},
             {"SLURM_PROCID", std::to_string(nodeId)},
             {"SLURM_LOCALID", "0"},
             {"SLURM_TASKS_PER_NODE", "1(x2)"},
             {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
             {"SLURMD_NODENAME", job.hostName}};
  return job;
}

// A PBS job on the host `self` whose node file holds `nodefile`.
sched::JobEnvironment pbsJob(const std::string& self, const std::string& nodefile,
                             const std::string& jobId = "4242.pbs-server") {
  sched::JobEnvironment job;
  job.hostName = self;
  job.env = {{"PBS_JOBID", jobId},
             {"PBS_NODEFILE", "/var/spool/pbs/aux/" + jobId},
             {"PBS_O_WORKDIR", "/home/u"}};
  job.readFile = [path = job.env["PBS_NODEFILE"], nodefile](const std::string& p) {
    return p == path ? std::optional<std::string>(nodefile) : std::nullopt;
  };
  return job;
}
}  // namespace

TEST_CASE("no job id means no scheduler, and --scheduler none ignores one", "[unit][scheduler]") {
  sched::JobEnvironment plain;
  plain.env = {{"HOME", "/root"}, {"SLURM_CONF", "/etc/slurm.conf"}};
  auto none = sched::detect(sched::Mode::kAuto, plain);
  REQUIRE(none.isOk());
  CHECK_FALSE(none.value().has_value());
  auto off = sched::detect(sched::Mode::kNone, srunTask(1));
  REQUIRE(off.isOk());
  CHECK_FALSE(off.value().has_value());
}

TEST_CASE("an srun task reads hosts, node index and job id from the step", "[unit][scheduler]") {
  for (const int node : {0, 1}) {
    const auto a = detected(srunTask(node));
    CHECK(a.kind == sched::Kind::kSlurm);
    CHECK(a.hosts == Hosts{"node1", "node2"});
    CHECK(a.nodeIndex == node);
    CHECK(a.jobId == "1234.0");
    CHECK(a.inStep);
    CHECK(a.tasksOnThisNode == 1);
    CHECK(a.hostsFrom == "SLURM_STEP_NODELIST=node[1-2]");
    CHECK(a.nodeIndexFrom == "SLURM_NODEID=" + std::to_string(node));
    CHECK(a.jobIdFrom == "SLURM_JOB_ID+SLURM_STEP_ID");
  }
}

TEST_CASE("a step on part of the job's nodes uses the step's list", "[unit][scheduler]") {
  auto job = srunTask(1);
  job.env["SLURM_JOB_NODELIST"] = "gpu[01-08]";
  job.env["SLURM_JOB_NUM_NODES"] = "8";
  job.env["SLURM_STEP_NODELIST"] = "gpu[05,07]";
  job.env["SLURM_NODELIST"] = "gpu[05,07]";
  job.env["SLURM_STEP_ID"] = "3";
  const auto a = detected(job);
  CHECK(a.hosts == Hosts{"gpu05", "gpu07"});
  CHECK(a.nodeIndex == 1);
  CHECK(a.jobId == "1234.3");
}

TEST_CASE("the batch script sees the job, outside any step", "[unit][scheduler]") {
  auto job = srunTask(0);
  for (const char* step : {"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NODELIST",
                           "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE"}) {
    job.env.erase(step);
  }
  job.env["SLURM_TASKS_PER_NODE"] = "8(x2)";  // the job's reservation, not dtrun processes
  const auto a = detected(job);
  CHECK_FALSE(a.inStep);
  CHECK(a.jobId == "1234");
  CHECK(a.hosts.size() == 2);
  CHECK(a.tasksOnThisNode == 1);
}

TEST_CASE("several srun tasks on one node are reported from the step's counts",
          "[unit][scheduler]") {
  auto job = srunTask(1);
  job.env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  job.env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  job.env["SLURM_NTASKS_PER_NODE"] = "2";
  const auto a = detected(job);
  CHECK(a.tasksOnThisNode == 2);
  CHECK(a.tasksFrom == "SLURM_STEP_TASKS_PER_NODE=2(x2)");
  job.env["SLURM_STEP_TASKS_PER_NODE"] = "1,3";
  CHECK(detected(job).tasksOnThisNode == 3);
}

TEST_CASE("one-node SLURM jobs need no SLURM_NODEID", "[unit][scheduler]") {
  sched::JobEnvironment job;
  job.env = {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "solo"}};
  const auto a = detected(job);
  CHECK(a.hosts == Hosts{"solo"});
  CHECK(a.nodeIndex == 0);
  CHECK(a.jobId == "7");
}

TEST_CASE("malformed SLURM values name the variable", "[unit][scheduler]") {
  SECTION("a bad host list") {
    auto job = srunTask(0);
    job.env["SLURM_STEP_NODELIST"] = "node[1-2";
    const auto message = errorOf(job);
    CHECK(contains(message, "SLURM_STEP_NODELIST='node[1-2': a '[' that is never closed"));
    CHECK(contains(message, "--scheduler none"));
  }
  SECTION("SLURM_NODEID out of range") {
    auto job = srunTask(0);
    job.env["SLURM_NODEID"] = "2";
    CHECK(contains(errorOf(job),
                   "SLURM_NODEID='2': out of range for the 2 host(s) of "
                   "SLURM_STEP_NODELIST=node[1-2]"));
  }
  SECTION("SLURM_NODEID not a number") {
    auto job = srunTask(0);
    job.env["SLURM_NODEID"] = "first";
    CHECK(contains(errorOf(job), "SLURM_NODEID='first': expected a node index"));
  }
  SECTION("SLURM_NODEID missing in a multi-node job") {
    auto job = srunTask(0);
    job.env.erase("SLURM_NODEID");
    CHECK(contains(errorOf(job), "SLURM_NODEID is not set in a 2-node job"));
  }
  SECTION("a node count that disagrees with the list") {
    auto job = srunTask(0);
    job.env["SLURM_STEP_NUM_NODES"] = "3";
    CHECK(contains(errorOf(job), "SLURM_STEP_NUM_NODES='3': disagrees with the 2 host(s)"));
  }
  SECTION("tasks per node of the wrong length or grammar") {
    auto job = srunTask(0);
    job.env["SLURM_STEP_TASKS_PER_NODE"] = "1(x3)";
    CHECK(contains(errorOf(job), "SLURM_STEP_TASKS_PER_NODE='1(x3)': has 3 entries"));
    job.env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2";
    CHECK(contains(errorOf(job), "SLURM_STEP_TASKS_PER_NODE='1(x2': '1(x2' is neither"));
  }
  SECTION("a node list missing altogether") {
    sched::JobEnvironment job;
    job.env = {{"SLURM_JOB_ID", "9"}};
    CHECK(contains(errorOf(job), "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not"));
  }
}

TEST_CASE("an explicit scheduler must find its job id", "[unit][scheduler]") {
  sched::JobEnvironment plain;
  CHECK(contains(errorOf(plain, sched::Mode::kSlurm), "SLURM_JOB_ID is not set"));
  CHECK(contains(errorOf(plain, sched::Mode::kPbs), "PBS_JOBID is not set"));
  // Forced PBS wins over a SLURM environment.
  auto both = pbsJob("n1", "n1\n");
  both.env["SLURM_JOB_ID"] = "5";
  CHECK(contains(errorOf(both), "both SLURM_JOB_ID and PBS_JOBID are set"));
  CHECK(detected(both, sched::Mode::kPbs).kind == sched::Kind::kPbs);
}

TEST_CASE("PBS Pro node files: FQDN per mpiprocs slot, hosts in chunk order", "[unit][scheduler]") {
  // select=3:ncpus=4:mpiprocs=2 -> each host twice; this host's hostname is the short name.
  const std::string nodefile =
      "cn07.hpc.example.org\ncn07.hpc.example.org\ncn03.hpc.example.org\ncn03.hpc.example.org\n"
      "cn11.hpc.example.org\ncn11.hpc.example.org\n";
  for (const auto& [self, index] :
       std::map<std::string, int>{{"cn07", 0}, {"cn03", 1}, {"cn11.hpc.example.org", 2}}) {
    const auto a = detected(pbsJob(self, nodefile, "118.pbs01"));
    CHECK(a.kind == sched::Kind::kPbs);
    CHECK(a.hosts == Hosts{"cn07.hpc.example.org", "cn03.hpc.example.org", "cn11.hpc.example.org"});
    CHECK(a.nodeIndex == index);
    CHECK(a.slotsPerNode == std::vector<int>{2, 2, 2});
    CHECK(a.jobId == "118.pbs01");
    CHECK(a.jobIdFrom == "PBS_JOBID");
    CHECK(a.hostsFrom == "PBS_NODEFILE=/var/spool/pbs/aux/118.pbs01");
  }
}

TEST_CASE("Torque node files: short names repeated per ppn, uneven counts", "[unit][scheduler]") {
  // nodes=node01:ppn=4+node02:ppn=2, and a host whose hostname is its FQDN.
  const std::string nodefile = "node01\nnode01\nnode01\nnode01\nnode02\nnode02\n";
  const auto a = detected(pbsJob("node02.cluster", nodefile, "77.torque-head.cluster"));
  CHECK(a.hosts == Hosts{"node01", "node02"});
  CHECK(a.nodeIndex == 1);
  CHECK(a.slotsPerNode == std::vector<int>{4, 2});
  // Blank lines and a missing final newline are fine; the order of first appearance counts.
  const auto b = detected(pbsJob("b", "b\n\na\r\nb\na"));
  CHECK(b.hosts == Hosts{"b", "a"});
  CHECK(b.slotsPerNode == std::vector<int>{2, 2});
  CHECK(b.nodeIndex == 0);
}

TEST_CASE("bad PBS node files and hosts name the variable and the fix", "[unit][scheduler]") {
  SECTION("this host is not in the file") {
    const auto message = errorOf(pbsJob("login1", "cn01\ncn02\n"));
    CHECK(contains(message, "this host 'login1' is not among its hosts (cn01, cn02)"));
    CHECK(contains(message, "PBS_NODEFILE='/var/spool/pbs/aux/4242.pbs-server'"));
  }
  SECTION("an unreadable file") {
    auto job = pbsJob("cn01", "cn01\n");
    job.readFile = [](const std::string&) { return std::optional<std::string>(); };
    const auto message = errorOf(job);
    CHECK(contains(message, "cannot be read"));
    CHECK(contains(message, "export PBS_NODEFILE=<the copy> on every node"));
  }
  SECTION("no PBS_NODEFILE") {
    auto job = pbsJob("cn01", "cn01\n");
    job.env.erase("PBS_NODEFILE");
    CHECK(contains(errorOf(job), "PBS_JOBID is set but PBS_NODEFILE is not"));
  }
  SECTION("an empty file") { CHECK(contains(errorOf(pbsJob("cn01", "\n\n")), "lists no host")); }
  SECTION("a hostfile in another launcher's format") {
    CHECK(contains(errorOf(pbsJob("cn01", "cn01\ncn02 slots=4\n")),
                   "line 2: expected one host name per line, got 'cn02 slots=4'"));
  }
  SECTION("a short name that matches two hosts") {
    CHECK(contains(errorOf(pbsJob("cn01", "cn01.a\ncn01.b\n")), "matches several"));
  }
}

TEST_CASE("the job's store port is fixed per job and step, in 20000-29999", "[unit][scheduler]") {
  sched::Allocation a;
  a.kind = sched::Kind::kSlurm;
  const auto port = [&a](const std::string& id) {
    a.jobId = id;
    return sched::jobPort(a);
  };
  CHECK(port("1234.0") == 21234);
  CHECK(port("1234") == 21234);
  CHECK(port("91234.0") == 21234);        // numbers 10000 apart share a port
  CHECK(port("1234.1") == 20000 + 9153);  // (1234 + 7919) mod 10000
  // Neighbouring jobs and the first 20 steps of one job never share a port.
  std::set<int> ports;
  for (int job = 500; job < 520; ++job) {
    for (int step = 0; step < 20; ++step) {
      const int p = port(std::to_string(job) + "." + std::to_string(step));
      CHECK(p >= 20000);
      CHECK(p < 30000);
      ports.insert(p);
    }
  }
  CHECK(ports.size() == 400);
  a.kind = sched::Kind::kPbs;
  CHECK(port("4242.pbs-server") == 24242);
  const int hashed = port("abc.server");
  CHECK(hashed == port("abc.server"));
  CHECK(hashed >= 20000);
  CHECK(hashed < 30000);
}
