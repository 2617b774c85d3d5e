#include "health/health_checks.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>
#include <tuple>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../support/scoped.h"
#include "../support/test_support.h"

namespace {

using dtrun::Errc;
using dtrun::Result;
using dtrun::Status;
using dtrun::agent::AgentConfig;
using dtrun::agent::LocalPlacement;
using namespace dtrun::agent::detail;  // NOLINT(google-build-using-namespace)
using std::chrono::milliseconds;
using Outcome = CheckResult::Outcome;

// Answers from the test; a call may be held until the test releases it (a hung check).
class FakeProbe final : public HealthProbe {
 public:
  Status write = Status::ok();
  std::uint64_t free = std::uint64_t{1} << 30;
  Status exec = Status::ok();
  Status store = Status::ok();
  std::map<std::string, bool> devices;
  milliseconds storeDelay{0};
  std::string seenStoreHost;

  Status writeProbeFile(const std::string& /*dir*/) override { return write; }
  Result<std::uint64_t> freeBytes(const std::string& /*dir*/) override { return free; }
  Status executable(const std::string& /*path*/) override { return exec; }
  Status pingStore(const std::string& host, std::uint16_t /*port*/, const std::string& /*token*/,
                   milliseconds /*connectWait*/, milliseconds /*answerWait*/) override {
    seenStoreHost = host;
    std::this_thread::sleep_for(storeDelay);
    return store;
  }
  bool deviceExists(const std::string& path) override { return devices[path]; }
  // NVML: absent unless the test gives states; each query takes the next answer (the last one
  // repeats), so a test can release a GPU's memory after some queries.
  std::vector<Result<std::vector<GpuState>>> nvml;
  std::atomic<int> nvmlQueries{0};
  Result<std::vector<GpuState>> gpuStates(const std::string& /*library*/,
                                          const std::vector<int>& /*gpus*/) override {
    const auto n = static_cast<std::size_t>(nvmlQueries++);
    if (nvml.empty()) {
      return Status::error(Errc::kNotFound, "cannot open libnvidia-ml.so.1");
    }
    return nvml[std::min(n, nvml.size() - 1)];
  }
  OpenFileRoom files{65536, 65536, 1000000};
  Result<OpenFileRoom> openFileRoom() override { return files; }
};

std::vector<GpuState> gpuStates(std::vector<GpuProcess> onGpu1 = {}, std::string fault1 = {}) {
  GpuState a;
  a.index = 0;
  a.present = true;
  GpuState b;
  b.index = 1;
  b.present = true;
  b.fault = std::move(fault1);
  b.processes = std::move(onGpu1);
  return {a, b};
}

HealthPlan fullPlan() {
  HealthPlan plan;
  plan.logDir = "/logs";
  plan.executable = "/bin/train";
  plan.storeHost = "10.0.0.1";
  plan.storePort = 29500;
  plan.gpus = {0, 1};
  plan.checks.timeout = milliseconds(500);
  return plan;
}

const CheckResult& find(const std::vector<CheckResult>& results, std::string_view check) {
  for (const auto& r : results) {
    if (r.check == check) {
      return r;
    }
  }
  FAIL("no result for " << check);
  return results.front();
}

}  // namespace

TEST_CASE("health checks: every check passes on a healthy node, in a fixed order") {
  auto probe = std::make_shared<FakeProbe>();
  probe->devices = {{"/dev/nvidia0", true}, {"/dev/nvidia1", true}};
  const auto results = runHealthChecks(fullPlan(), probe);
  REQUIRE(results.size() == 5);
  CHECK(results[0].check == "log_dir");
  CHECK(results[1].check == "entrypoint");
  CHECK(results[2].check == "store");
  CHECK(results[3].check == "gpus");
  CHECK(results[4].check == "open_files");
  for (const auto& r : results) {
    CHECK(r.passed());
  }
  CHECK(results[0].detail == "writable, 1.0 GiB free in /logs");
  CHECK(results[3].detail == "2 planned GPU(s) present (NVML absent: device existence only)");
  CHECK(results[4].detail ==
        "a worker may open 65536 files (hard limit 65536), 1000000 file handles free system-wide");
  CHECK(probe->seenStoreHost == "10.0.0.1");
}

TEST_CASE("health checks: an unwritable log directory fails with the probe's reason") {
  auto probe = std::make_shared<FakeProbe>();
  probe->write = Status::error(Errc::kSystem, "cannot make /logs: Not a directory");
  auto plan = fullPlan();
  plan.checks.gpus = false;
  const auto results = runHealthChecks(plan, probe);
  const auto& r = find(results, "log_dir");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "cannot make /logs: Not a directory");
  CHECK(failureLine("node-3", r) ==
        "health check log_dir failed on node-3: cannot make /logs: Not a directory");
}

TEST_CASE("health checks: too little free space fails, naming the bound") {
  auto probe = std::make_shared<FakeProbe>();
  probe->free = std::uint64_t{50} << 20;
  auto plan = fullPlan();
  plan.checks.minFreeBytes = std::uint64_t{100} << 20;
  const auto results = runHealthChecks(plan, probe);
  const auto& r = find(results, "log_dir");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "50.0 MiB free in /logs, below the 100.0 MiB needed (--health_min_free_mb)");
}

TEST_CASE("health checks: a missing entrypoint fails") {
  auto probe = std::make_shared<FakeProbe>();
  probe->exec = Status::error(Errc::kNotFound, "/bin/train: No such file or directory");
  const auto results = runHealthChecks(fullPlan(), probe);
  const auto& r = find(results, "entrypoint");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "/bin/train: No such file or directory");
}

TEST_CASE("health checks: a store that stays silent is a timeout, not a failure") {
  auto probe = std::make_shared<FakeProbe>();
  probe->store = Status::timeout("ping: no reply within 500ms");
  const auto results = runHealthChecks(fullPlan(), probe);
  const auto& r = find(results, "store");
  CHECK(r.outcome == Outcome::kTimedOut);
  CHECK(r.detail.find("did not answer within 0.5 s") != std::string::npos);
  CHECK(failureLine("h", r).rfind("health check store timed out on h: ", 0) == 0);
}

TEST_CASE("health checks: a check that hangs is reported as timed out at its bound") {
  auto probe = std::make_shared<FakeProbe>();
  probe->storeDelay = milliseconds(3000);  // the probe itself never gives up in time
  auto plan = fullPlan();
  plan.checks.timeout = milliseconds(300);
  const auto began = std::chrono::steady_clock::now();
  const auto results = runHealthChecks(plan, probe);
  const auto took = std::chrono::steady_clock::now() - began;
  const auto& r = find(results, "store");
  CHECK(r.outcome == Outcome::kTimedOut);
  CHECK(r.detail == "no answer within 0.3 s (--health_check_timeout)");
  CHECK(took >= milliseconds(300));
  CHECK(took < milliseconds(1500));          // the bound, not the probe's 3 s
  CHECK(find(results, "log_dir").passed());  // the others answered meanwhile
}

TEST_CASE("health checks: a planned GPU without its device node fails, naming it") {
  auto probe = std::make_shared<FakeProbe>();
  probe->devices = {{"/dev/nvidia0", true}};
  const auto results = runHealthChecks(fullPlan(), probe);
  const auto& r = find(results, "gpus");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "planned GPU(s) missing: /dev/nvidia1");
}

TEST_CASE("health checks: with NVML, healthy free GPUs pass without their device nodes") {
  auto probe = std::make_shared<FakeProbe>();
  probe->nvml = {gpuStates()};
  const auto results = runHealthChecks(fullPlan(), probe);
  const auto& r = find(results, "gpus");
  CHECK(r.passed());
  CHECK(r.detail == "2 planned GPU(s) healthy and free of other processes (NVML)");
}

TEST_CASE("health checks: with NVML, a GPU it does not have or one needing a reset fails") {
  auto probe = std::make_shared<FakeProbe>();
  auto states = gpuStates();
  states[1].present = false;
  probe->nvml = {states};
  auto r = find(runHealthChecks(fullPlan(), probe), "gpus");  // a copy
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "planned GPU 1 missing: NVML has no device 1");
  probe->nvml = {gpuStates({}, "row remapping pending: the GPU needs a reset")};
  r = find(runHealthChecks(fullPlan(), probe), "gpus");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "GPU 1: row remapping pending: the GPU needs a reset");
  probe->nvml = {Status::error(Errc::kSystem, "nvmlInit: Driver Not Loaded")};
  r = find(runHealthChecks(fullPlan(), probe), "gpus");
  CHECK(r.outcome == Outcome::kFailed);
  CHECK(r.detail == "NVML: nvmlInit: Driver Not Loaded");
}

TEST_CASE("health checks: another process's GPU memory is waited for, up to its bound") {
  auto probe = std::make_shared<FakeProbe>();
  const GpuProcess foreign{4242, std::uint64_t{3} << 30, "python"};
  auto plan = fullPlan();
  plan.gpuPollInterval = milliseconds(20);
  plan.checks.gpuMemoryWait = milliseconds(300);
  SECTION("released within the wait: passes, saying what it waited for") {
    probe->nvml = {gpuStates({foreign}), gpuStates({foreign}), gpuStates()};
    const auto results = runHealthChecks(plan, probe);
    const auto& r = find(results, "gpus");
    CHECK(r.passed());
    CHECK_THAT(r.detail, Catch::Matches("2 planned GPU\\(s\\) healthy and free of other processes "
                                        "\\(NVML\\) after waiting .* s for GPU 1: pid 4242 "
                                        "\\(python\\) holds 3.0 GiB"));
    CHECK(probe->nvmlQueries == 3);
  }
  SECTION("still there at the end of the wait: fails, naming the GPU and the process") {
    probe->nvml = {gpuStates({foreign})};
    const auto began = std::chrono::steady_clock::now();
    const auto results = runHealthChecks(plan, probe);
    const auto took = std::chrono::steady_clock::now() - began;
    const auto& r = find(results, "gpus");
    CHECK(r.outcome == Outcome::kFailed);
    CHECK_THAT(r.detail, Catch::StartsWith("another process's memory on a planned GPU: GPU 1: "
                                           "pid 4242 (python) holds 3.0 GiB (still there after"));
    CHECK_THAT(r.detail, Catch::EndsWith(", --health_gpu_memory_wait)"));
    CHECK(took >= milliseconds(300));
    CHECK(took < milliseconds(2000));
  }
}

TEST_CASE("health checks: NVML from a library that is not there is absent, not an error") {
  const auto nvml = loadNvml("/nonexistent/libnvidia-ml.so.1");
  REQUIRE_FALSE(nvml.isOk());
  CHECK(nvml.status().code() == Errc::kNotFound);
  CHECK_THAT(nvml.status().message(), Catch::StartsWith("cannot open /nonexistent/"));
}

TEST_CASE("health checks: the plan follows the configuration") {
  AgentConfig config;
  config.executable = "/bin/train";
  config.placement = {LocalPlacement{{}, {}, "1,0", "1,0", false},
                      LocalPlacement{{}, {}, "GPU-5f2a,2", "GPU-5f2a,2", false}};
  auto plan = planHealthChecks(config, "/logs", "127.0.0.1", 29500, milliseconds(0));
  CHECK(plan.checks.logDir);
  CHECK(plan.checks.store);
  CHECK(plan.checks.gpus);
  CHECK(plan.gpus == std::vector<int>{0, 1, 2});  // UUIDs are left out

  config.logDir = "/dev/null";
  config.placement.clear();
  plan = planHealthChecks(config, "/dev/null", "127.0.0.1", 0, milliseconds(0));
  CHECK_FALSE(plan.checks.logDir);  // no log directory at all
  CHECK_FALSE(plan.checks.gpus);    // no GPU in the plan
  CHECK_FALSE(plan.checks.store);   // no store to ask
  CHECK(plan.checks.entrypoint);

  config.healthChecks.entrypoint = false;
  plan = planHealthChecks(config, "/logs", "127.0.0.1", 1, milliseconds(0));
  CHECK_FALSE(plan.checks.entrypoint);
  CHECK(runHealthChecks(HealthPlan{.checks = {false, false, false, false, false}},
                        std::make_shared<FakeProbe>())
            .empty());
}

TEST_CASE("health checks: events and the report carry every result") {
  CheckResult r{"log_dir", Outcome::kFailed, "cannot write in /x: Read-only file system",
                milliseconds(12), std::chrono::system_clock::now()};
  const auto event = nlohmann::json::parse("{" + checkEventFields(r, 2, -1) + "}");
  CHECK(event["check"] == "log_dir");
  CHECK(event["outcome"] == "failed");
  CHECK(event["attempt"] == 2);
  CHECK_FALSE(event.contains("round"));
  CHECK(event["duration_s"] == 0.012);

  const std::string report = "{\n  \"schema\": 1\n}\n";
  CHECK(withHealthChecks(report, {}) == report);
  const auto doc = nlohmann::json::parse(withHealthChecks(report, {{r, 2}}));
  CHECK(doc["schema"] == 1);
  REQUIRE(doc["health_checks"].size() == 1);
  CHECK(doc["health_checks"][0]["outcome"] == "failed");
  CHECK(doc["health_checks"][0]["detail"] == "cannot write in /x: Read-only file system");
}

TEST_CASE("health checks: the system probe on real files, devices and a store") {
  const dtrun::testing::TempDir dir;
  auto probe = systemHealthProbe();
  CHECK(probe->writeProbeFile((dir.path() / "made" / "here").string()).isOk());
  CHECK(std::filesystem::is_empty(dir.path() / "made" / "here"));  // the probe file is gone
  std::ofstream(dir.path() / "file") << "x";
  const Status notDir = probe->writeProbeFile((dir.path() / "file").string());
  CHECK_FALSE(notDir.isOk());
  const auto free = probe->freeBytes((dir.path() / "not" / "yet").string());
  REQUIRE(free.isOk());
  CHECK(free.value() > 0);
  CHECK(probe->executable("/bin/sh").isOk());
  CHECK_FALSE(probe->executable((dir.path() / "file").string()).isOk());  // not executable
  CHECK(probe->executable((dir.path() / "gone").string()).code() == Errc::kNotFound);
  CHECK(probe->deviceExists("/dev/null"));
  CHECK_FALSE(probe->deviceExists("/dev/nvidia-no-such-gpu"));
  auto server = dtrun::testing::startServer();
  CHECK(probe->pingStore("127.0.0.1", server->port(), "", milliseconds(0), milliseconds(2000))
            .isOk());
}

TEST_CASE("health checks: open files below the floor fail, naming the limit and how to raise it") {
  OpenFileRoom room{256, 4096, 1000000};
  auto [passed, detail] = judgeOpenFiles(room, 1024);
  CHECK_FALSE(passed);
  CHECK(detail ==
        "a worker may open 256 files (RLIMIT_NOFILE), below the 1024 needed "
        "(--health_min_open_files): run `ulimit -n 1024` before dtrun (the hard limit allows "
        "4096)");
  room.hard = 512;
  std::tie(passed, detail) = judgeOpenFiles(room, 1024);
  CHECK_FALSE(passed);
  CHECK(detail.find("the hard limit (512) is below it too") != std::string::npos);
  room = OpenFileRoom{RLIM_INFINITY, RLIM_INFINITY, 100};
  std::tie(passed, detail) = judgeOpenFiles(room, 1024);
  CHECK_FALSE(passed);
  CHECK(detail.rfind("the system can open only 100 more files (fs.file-nr)", 0) == 0);
  room.systemFree.reset();
  std::tie(passed, detail) = judgeOpenFiles(room, 1024);
  CHECK(passed);
  CHECK(detail == "a worker may open unlimited files (hard limit unlimited)");
}

TEST_CASE("health checks: the system probe reads this process's open-file limit") {
  // This process's own soft limit, lowered for the check and put back: what workers inherit.
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  struct rlimit low = saved;
  low.rlim_cur = 200;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  HealthPlan plan;
  plan.checks.logDir = plan.checks.entrypoint = plan.checks.store = plan.checks.gpus = false;
  plan.checks.minOpenFiles = 300;
  const auto results = runHealthChecks(plan, systemHealthProbe());
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(results.size() == 1);
  CHECK(results[0].check == "open_files");
  CHECK(results[0].outcome == Outcome::kFailed);
  CHECK(results[0].detail.rfind("a worker may open 200 files (RLIMIT_NOFILE), below the 300", 0) ==
        0);
  plan.checks.minOpenFiles = 100;
  const auto passed = runHealthChecks(plan, systemHealthProbe());
  REQUIRE(passed.size() == 1);
  CHECK(passed[0].passed());
  CHECK(passed[0].detail.find("file handles free system-wide") != std::string::npos);
}

TEST_CASE("health checks: the system probe times out on a store that accepts and never answers") {
  // A listening socket nobody accepts on: the kernel completes the connection, nothing replies.
  const dtrun::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);  // NOLINT
  REQUIRE(::listen(fd.get(), 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);  // NOLINT
  const auto began = std::chrono::steady_clock::now();
  const Status s = systemHealthProbe()->pingStore("127.0.0.1", ntohs(addr.sin_port), "",
                                                  milliseconds(0), milliseconds(400));
  const auto took = std::chrono::steady_clock::now() - began;
  CHECK(s.code() == Errc::kTimeout);
  CHECK(took >= milliseconds(350));
  CHECK(took < milliseconds(2000));
}
