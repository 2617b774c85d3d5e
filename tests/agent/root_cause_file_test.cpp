// dtrun's own TORCHELASTIC_ERROR_FILE (root_cause_file.h) in torch's format, and the workers'
// per-rank error files (worker_env.h), which never are the launcher's.
#include "report/root_cause_file.h"

#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/scoped.h"
#include "workers/worker_env.h"

namespace {

using dtrun::agent::detail::ExitStatus;
using dtrun::agent::detail::rootCauseErrorJson;
using dtrun::agent::detail::WorkerFailure;
using nlohmann::json;

WorkerFailure failureOf(ExitStatus status) {
  WorkerFailure f;
  f.rank = 5;
  f.localRank = 1;
  f.pid = 4321;
  f.status = status;
  f.time = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  return f;
}

std::string envOf(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& entry : env) {
    if (entry.rfind(name + "=", 0) == 0) {
      return entry.substr(name.size() + 1);
    }
  }
  return "<unset>";
}

}  // namespace

TEST_CASE("the worker's error file is copied with errorCode, as @record does", "[unit][agent]") {
  const std::string child = R"({"message": {"message": "RuntimeError: boom", "extraInfo": )"
                            R"({"py_callstack": "Traceback ...", "timestamp": "123"}}})";
  SECTION("an exit code") {
    const auto out = json::parse(rootCauseErrorJson(failureOf({false, 3}), "h", child));
    CHECK(out["message"]["message"] == "RuntimeError: boom");
    CHECK(out["message"]["extraInfo"]["py_callstack"] == "Traceback ...");
    CHECK(out["message"]["extraInfo"]["timestamp"] == "123");
    CHECK(out["message"]["errorCode"] == 3);
  }
  SECTION("a signal: torch's negative exit code") {
    const auto out = json::parse(rootCauseErrorJson(failureOf({true, 11}), "h", child));
    CHECK(out["message"]["errorCode"] == -11);
  }
  SECTION("the legacy string form is copied as it is") {
    const std::string legacy = R"({"message": "boom", "timestamp": 5})";
    CHECK(json::parse(rootCauseErrorJson(failureOf({false, 1}), "h", legacy)) ==
          json::parse(legacy));
  }
}

TEST_CASE("without a worker error file the message names rank, host and exit", "[unit][agent]") {
  const std::optional<std::string> none;
  const std::string notJson = "Traceback, not JSON";
  for (const auto& child : {none, std::optional<std::string>(notJson)}) {
    auto f = failureOf({false, 7});
    const auto out = json::parse(rootCauseErrorJson(f, "node9", child));
    CHECK(out["message"]["message"] ==
          "rank 5 (local_rank 1) on node9 failed: exit code 7 (pid 4321)");
    CHECK(out["message"]["extraInfo"]["py_callstack"] == out["message"]["message"]);
    CHECK(out["message"]["extraInfo"]["timestamp"] == "1700000000");
    CHECK(out["message"]["errorCode"] == 7);
  }
  auto f = failureOf({true, 9});
  f.host = "node3";  // a failure another node reported
  f.message = "last stderr line";
  const auto out = json::parse(rootCauseErrorJson(f, "node9", std::nullopt));
  CHECK(out["message"]["message"] ==
        "rank 5 (local_rank 1) on node3 failed: signal 9 (SIGKILL) (pid 4321)");
  CHECK(out["message"]["extraInfo"]["py_callstack"] == "last stderr line");
  CHECK(out["message"]["errorCode"] == -9);
}

TEST_CASE("writeRootCauseErrorFile replaces the file with the worker's copy", "[unit][agent]") {
  const dtrun::testing::TempDir dir;
  const std::string childFile = (dir.path() / "child.json").string();
  const std::string parentFile = (dir.path() / "parent.json").string();
  std::ofstream(childFile) << R"({"message": {"message": "E: x", "extraInfo": {}}})";
  std::ofstream(parentFile) << "stale";
  auto f = failureOf({false, 2});
  f.errorFile = childFile;
  dtrun::agent::detail::writeRootCauseErrorFile(parentFile, f, "h");
  std::ifstream in(parentFile);
  const auto out = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  CHECK(out["message"]["message"] == "E: x");
  CHECK(out["message"]["errorCode"] == 2);
}

TEST_CASE("workers get their own error file, never the launcher's", "[unit][agent]") {
  dtrun::agent::AgentConfig config;
  const std::vector<std::string> inherited = {"TORCHELASTIC_ERROR_FILE=/sched/error.json",
                                              "DTRUN_PROGRESS_FILE=/outer/progress",
                                              "DTRUN_PROGRESS_SLOT=3"};
  dtrun::agent::detail::WorkerPlacement placement;
  placement.errorFile = "/logs/j/attempt_0/0/error.json";
  CHECK(envOf(dtrun::agent::detail::workerEnvironment(inherited, config, placement),
              "TORCHELASTIC_ERROR_FILE") == "/logs/j/attempt_0/0/error.json");
  // --log_dir=/dev/null: empty, as torchrun's, and no outer dtrun's files either.
  const auto env =
      dtrun::agent::detail::workerEnvironment(inherited, config, {} /* no directory */);
  CHECK(envOf(env, "TORCHELASTIC_ERROR_FILE").empty());
  CHECK(envOf(env, "DTRUN_PROGRESS_FILE").empty());
  CHECK(envOf(env, "DTRUN_PROGRESS_SLOT").empty());
  CHECK(envOf(env, "DTRUN_LOG_DIR").empty());
}
