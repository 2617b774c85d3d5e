// Detection in Kubeflow's pods, from the environment the training operator's PyTorchJob, the
// older pytorch-operator and Kubeflow Trainer's TrainJob give each container (their sources:
// pkg/controller.v1/pytorch/envvar.go, master.go; tests/integration/kubeflow_netns_test.sh runs
// two such pods).
#include <string>

#include <catch2/catch.hpp>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace {

using dtrun::testing::contains;
using dtrun::testing::detected;
using dtrun::testing::errorOf;
namespace sched = dtrun::scheduler;

// A PyTorchJob pod (Master + 1 Worker, nprocPerNode 2): the master's MASTER_ADDR is localhost.
sched::JobEnvironment pytorchJobPod(int rank) {
  sched::JobEnvironment job;
  const std::string master = rank == 0 ? "localhost" : "train-master-0";
  job.env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
             {"MASTER_ADDR", master},
             {"MASTER_PORT", "23456"},
             {"WORLD_SIZE", "4"},
             {"RANK", std::to_string(rank)},
             {"PET_MASTER_ADDR", master},
             {"PET_MASTER_PORT", "23456"},
             {"PET_NNODES", "2"},
             {"PET_NODE_RANK", std::to_string(rank)},
             {"PET_NPROC_PER_NODE", "2"}};
  return job;
}

TEST_CASE("a PyTorchJob pod: its node rank, PET_NNODES and the master it names",
          "[unit][scheduler]") {
  for (const int rank : {0, 1}) {
    const auto a = detected(pytorchJobPod(rank));
    CHECK(a.kind == sched::Kind::kKubeflow);
    CHECK(sched::kindName(a.kind) == "kubeflow");
    CHECK(a.nodeCount == 2);
    CHECK(a.hostsFrom == "PET_NNODES=2");
    CHECK(a.nodeIndex == rank);
    CHECK(a.nodeIndexFrom == "PET_NODE_RANK=" + std::to_string(rank));
    CHECK(a.master == (rank == 0 ? "localhost" : "train-master-0"));
    CHECK(a.masterFrom == "PET_MASTER_ADDR");
    CHECK(a.masterPort == 23456);
    CHECK(a.hosts.empty());
  }
}

TEST_CASE("the older pytorch-operator: WORLD_SIZE counts pods, RANK is the pod's index",
          "[unit][scheduler]") {
  sched::JobEnvironment job;
  job.env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
             {"MASTER_ADDR", "old-master-0"},
             {"MASTER_PORT", "23456"},
             {"WORLD_SIZE", "3"},
             {"RANK", "2"}};
  const auto a = detected(job);
  CHECK(a.kind == sched::Kind::kKubeflow);
  CHECK(a.nodeCount == 3);
  CHECK(a.hostsFrom == "WORLD_SIZE=3 (pods)");
  CHECK(a.nodeIndex == 2);
  CHECK(a.nodeIndexFrom == "RANK=2");
  CHECK(a.master == "old-master-0");
  CHECK(a.masterFrom == "MASTER_ADDR");
  CHECK(a.masterPort == 23456);
}

TEST_CASE("Kubeflow detection needs a pod and stays out of launchers' workers",
          "[unit][scheduler]") {
  SECTION("MASTER_ADDR, WORLD_SIZE and RANK outside Kubernetes are nobody's job") {
    auto job = pytorchJobPod(1);
    job.env.erase("KUBERNETES_SERVICE_HOST");
    CHECK_FALSE(sched::detect(sched::Mode::kAuto, job).value().has_value());
  }
  SECTION("a dtrun started by a worker of another launcher in a pod") {
    auto job = pytorchJobPod(1);
    job.env["TORCHELASTIC_RUN_ID"] = "job";
    CHECK_FALSE(sched::detect(sched::Mode::kAuto, job).value().has_value());
  }
  SECTION("a batch scheduler's variables win under auto") {
    auto job = pytorchJobPod(1);
    job.env["FLUX_JOB_ID"] = "f1";
    job.env["FLUX_JOB_NNODES"] = "2";
    job.env["FLUX_TASK_RANK"] = "0";
    CHECK(detected(job).kind == sched::Kind::kFlux);
    CHECK(detected(job, sched::Mode::kKubeflow).kind == sched::Kind::kKubeflow);
  }
  SECTION("an elastic job's PET_NNODES range counts its largest size") {
    auto job = pytorchJobPod(0);
    job.env["PET_NNODES"] = "1:4";
    CHECK(detected(job).nodeCount == 4);
  }
}

TEST_CASE("bad Kubeflow variables are one line naming the variable", "[unit][scheduler]") {
  auto job = pytorchJobPod(1);
  job.env["PET_NODE_RANK"] = "2";
  CHECK(contains(errorOf(job), "PET_NODE_RANK='2': out of range for PET_NNODES=2"));
  job = pytorchJobPod(1);
  job.env["MASTER_PORT"] = "99999";
  job.env.erase("PET_MASTER_PORT");
  CHECK(contains(errorOf(job), "MASTER_PORT='99999': expected a port from 1 to 65535"));
  job = pytorchJobPod(1);
  job.env["PET_NNODES"] = "two";
  CHECK(contains(errorOf(job), "PET_NNODES='two': expected a node count or MIN:MAX"));
  CHECK(contains(errorOf(sched::JobEnvironment{}, sched::Mode::kKubeflow),
                 "neither PET_NNODES nor WORLD_SIZE is set"));
}

}  // namespace
