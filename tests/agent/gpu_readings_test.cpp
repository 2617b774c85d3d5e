#include "health/gpu_readings.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "../support/scoped.h"

namespace {

using dtrun::Errc;
using namespace dtrun::agent::detail;  // NOLINT(google-build-using-namespace)
namespace fs = std::filesystem;

// A process table of the test's own: pid -> its /proc/<pid>/stat facts.
class ProcTable {
 public:
  ProcTable& add(unsigned pid, unsigned ppid, unsigned pgrp, std::uint64_t start) {
    table_[pid] = ProcStat{pid, 'S', ppid, pgrp, start};
    return *this;
  }
  void remove(unsigned pid) { table_.erase(pid); }
  void exit(unsigned pid) { table_[pid].state = 'Z'; }
  [[nodiscard]] ProcStatReader reader() const {
    return [this](unsigned pid) -> std::optional<ProcStat> {
      const auto it = table_.find(pid);
      return it == table_.end() ? std::nullopt : std::optional<ProcStat>(it->second);
    };
  }

 private:
  std::map<unsigned, ProcStat> table_;
};

WorkerPid worker(unsigned pid, std::uint64_t start, int rank, int localRank) {
  WorkerPid w;
  w.pid = pid;
  w.startTicks = start;
  w.rank = rank;
  w.localRank = localRank;
  w.attempt = "attempt_0";
  return w;
}

void writeText(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("gpu readings: /proc/<pid>/stat's line, a command with spaces and parentheses too") {
  const std::string tail =
      " S 4242 4200 4200 0 -1 4194560 200 0 0 0 3 1 0 0 20 0 1 0 987654 8192000 300";
  auto stat = parseProcStat("4321 (python3)" + tail);
  REQUIRE(stat);
  CHECK(stat->pid == 4321);
  CHECK(stat->state == 'S');
  CHECK(stat->ppid == 4242);
  CHECK(stat->pgrp == 4200);
  CHECK(stat->startTicks == 987654);

  stat = parseProcStat("17 (a (b) c) d)" + tail + "\n");
  REQUIRE(stat);
  CHECK(stat->ppid == 4242);
  CHECK(stat->startTicks == 987654);

  CHECK_FALSE(parseProcStat(""));
  CHECK_FALSE(parseProcStat("4321 (python3) S 4242 4200"));  // cut short
  CHECK_FALSE(parseProcStat("x (python3)" + tail));
  CHECK_FALSE(parseProcStat("4321 python3" + tail));
  CHECK(parseProcStat("4321 (python3) Z" + tail.substr(2))->state == 'Z');
}

TEST_CASE("gpu readings: this process's /proc facts") {
  const auto self = readProcStat(static_cast<unsigned>(::getpid()));
  REQUIRE(self);
  CHECK(self->pid == static_cast<unsigned>(::getpid()));
  CHECK(self->state == 'R');
  CHECK(self->ppid == static_cast<unsigned>(::getppid()));
  CHECK(self->pgrp == static_cast<unsigned>(::getpgrp()));
  CHECK(self->startTicks > 0);
  CHECK_FALSE(readProcStat(0));
}

TEST_CASE("gpu readings: the workers a run directory records") {
  const dtrun::testing::TempDir run;
  const fs::path& dir = run.path();
  // attempt_0: local rank 0 (rank 2), its line written as at a spawn, then a line that is not one.
  const std::string spawned = workerPidLine(0, 2, ::getpid());
  writeText(dir / "attempt_0/worker_pids", spawned + "1 3 zero 5\n");
  // attempt_1-round3: rank 3 again; a pid 0 is nobody's.
  writeText(dir / "attempt_1-round3/worker_pids", "1 3 5151 777\n0 2 0 776\n");
  writeText(dir / "other/worker_pids", "9 9 9999 1\n");  // not an attempt

  const auto workers = readWorkerPids(dir);
  REQUIRE(workers.size() == 2);
  CHECK(workers[0].pid == static_cast<unsigned>(::getpid()));
  CHECK(workers[0].startTicks == readProcStat(static_cast<unsigned>(::getpid()))->startTicks);
  CHECK(workers[0].rank == 2);
  CHECK(workers[0].localRank == 0);
  CHECK(workers[0].attempt == "attempt_0");
  CHECK(workers[1].pid == 5151);
  CHECK(workers[1].startTicks == 777);
  CHECK(workers[1].rank == 3);
  CHECK(workers[1].localRank == 1);
  CHECK(workers[1].attempt == "attempt_1-round3");

  CHECK(spawned ==
        "0 2 " + std::to_string(::getpid()) + " " + std::to_string(workers[0].startTicks) + "\n");
  CHECK(readWorkerPids(dir / "absent").empty());
}

TEST_CASE("gpu readings: a GPU process's rank, through its ancestors or its process group") {
  // Rank 0's worker is 100 (a shell: python 101 below it, and 102 below that); rank 1's is 200.
  const std::vector<WorkerPid> workers = {worker(100, 5000, 0, 0), worker(200, 5001, 1, 1)};
  ProcTable procs;
  procs.add(1, 0, 1, 1).add(50, 1, 50, 4000);  // init; the agent
  procs.add(100, 50, 100, 5000).add(101, 100, 100, 5002).add(102, 101, 100, 5003);
  procs.add(200, 50, 200, 5001);
  procs.add(300, 1, 300, 6000);  // somebody else's

  const auto rankOf = [&](unsigned pid) {
    const WorkerPid* w = workerOf(pid, workers, procs.reader());
    return w == nullptr ? -1 : w->rank;
  };
  CHECK(rankOf(100) == 0);  // the worker itself
  CHECK(rankOf(101) == 0);  // python started by the worker's shell
  CHECK(rankOf(102) == 0);
  CHECK(rankOf(200) == 1);
  CHECK(rankOf(300) == -1);
  CHECK(rankOf(50) == -1);   // the agent is no rank
  CHECK(rankOf(999) == -1);  // gone (or another pid namespace's)

  SECTION("a process whose parent exited keeps the worker's group") {
    procs.add(103, 50, 100, 5004);  // adopted by the agent (the subreaper)
    CHECK(rankOf(103) == 0);
    procs.remove(100);  // and the worker itself gone
    procs.add(101, 1, 100, 5002);
    CHECK(rankOf(101) == 0);
    procs.exit(101);  // exited, waiting to be reaped
    CHECK(rankOf(101) == -1);
  }
  SECTION("a pid reused by a later process is not the worker") {
    procs.add(200, 1, 200, 9000);
    CHECK(rankOf(200) == -1);
    procs.add(201, 200, 200, 9001);  // nor its child, whose group the new process leads
    CHECK(rankOf(201) == -1);
  }
  SECTION("of two records of one pid, the one started when the process did") {
    auto twice = workers;
    twice.push_back(worker(100, 7000, 4, 0));  // attempt_1's rank 4 was given pid 100 again
    procs.add(100, 50, 100, 7000).add(101, 100, 100, 7001);
    const WorkerPid* w = workerOf(101, twice, procs.reader());
    REQUIRE(w != nullptr);
    CHECK(w->rank == 4);
  }
  SECTION("a parent chain that loops ends") {
    procs.add(400, 401, 400, 1).add(401, 400, 400, 2);
    CHECK(rankOf(400) == -1);
  }
}

TEST_CASE("gpu readings: a bad run directory is named before NVML is opened") {
  const dtrun::testing::TempDir empty;
  dtrun::agent::GpuReadOptions options;
  options.nvmlLibrary = "/nonexistent/libnvidia-ml.so.1";
  options.runDir = empty.path() / "absent";
  auto r = dtrun::agent::readGpus(options);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Errc::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("absent is not a directory: give a run's"));

  options.runDir = empty.path();
  r = dtrun::agent::readGpus(options);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Errc::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("holds no dtrun run"));

  writeText(empty.path() / "run.json", "{\"host\": \"h\"}");
  r = dtrun::agent::readGpus(options);  // a run now; no NVML there
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Errc::kNotFound);
  CHECK_THAT(r.status().message(), Catch::StartsWith("cannot open /nonexistent/"));
}
