// The agent end to end on shell workers: it runs in a forked child (it blocks signals and becomes
// a subreaper, which must not leak into the test process).
#include "dtrun/agent.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/scoped.h"
#include "support/test_support.h"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dtrun::agent::AgentConfig;

namespace {

using dtrun::testing::TempDir;

AgentConfig shellJob(const TempDir& dir, int nproc, const std::string& script) {
  AgentConfig c;
  c.command = {"/bin/sh", "-c", script};
  c.entrypointName = "job.sh";
  c.nprocPerNode = nproc;
  c.runId = "test";
  c.signalsToHandle = {SIGTERM, SIGINT, SIGHUP};
  c.storeListenHost = "127.0.0.1";
  c.logDir = (dir.path() / "logs").string();
  c.shutdownTimeout = 2s;
  // Not these tests' subject: a machine loaded by three tests at a time and two builds may take
  // longer than the 5 s default for the checks before an attempt (the likely cause of two of
  // them exiting 1 together under such load, before they printed the agent's stderr).
  c.healthChecks.timeout = 60s;
  return c;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the agent in a child whose stdout/stderr go to files in `dir`; returns its exit code.
struct AgentRun {
  int code = -1;
  std::string out;
  std::string err;
};

AgentRun runAgent(const TempDir& dir, const AgentConfig& config,
                  const std::function<void(pid_t)>& whileRunning = {}) {
  const fs::path out = dir.path() / "agent.out";
  const fs::path err = dir.path() / "agent.err";
  // The child must not inherit (and later write out) what Catch has buffered, e.g. "Filters: ...".
  std::cout.flush();
  static_cast<void>(std::fflush(nullptr));
  dtrun::testing::ChildGuard child([&] {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    return dtrun::agent::run(config);
  });
  if (whileRunning) {
    whileRunning(child.pid());
  }
  AgentRun r;
  r.code = child.wait();
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::map<std::string, std::string> readEnv(const fs::path& file) {
  std::map<std::string, std::string> env;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) {
      env[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return env;
}

}  // namespace

TEST_CASE("every rank gets torchrun's environment", "[integration][agent]") {
  const int nproc = GENERATE(1, 3, 8);
  TempDir dir;
  auto config = shellJob(dir, nproc, "env > \"$DTRUN_LOG_DIR/env\"");
  config.defaultEnv = {{"OMP_NUM_THREADS", "1"}};
  const auto run = runAgent(dir, config);
  INFO("the agent's stderr: " << run.err);
  REQUIRE(run.code == 0);
  std::string port;
  for (int rank = 0; rank < nproc; ++rank) {
    const fs::path rankDir = dir.path() / "logs" / "test" / "attempt_0" / std::to_string(rank);
    auto env = readEnv(rankDir / "env");
    INFO("rank " << rank);
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(env["WORLD_SIZE"] == std::to_string(nproc));
    CHECK(env["LOCAL_WORLD_SIZE"] == std::to_string(nproc));
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["GROUP_WORLD_SIZE"] == "1");
    CHECK(env["ROLE_NAME"] == "default");
    CHECK(env["ROLE_RANK"] == std::to_string(rank));
    CHECK(env["ROLE_WORLD_SIZE"] == std::to_string(nproc));
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "0");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "test");
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");
    CHECK(env["TORCHELASTIC_ERROR_FILE"] == (rankDir / "error.json").string());
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "1");  // what torch <= 2.1 reads
    CHECK(env["OMP_NUM_THREADS"] == "1");
    CHECK(env["DTRUN_STORE_PREFIX"] == "/worker/attempt_0");
    CHECK(env["DTRUN_STORE_ADDR"] == "127.0.0.1:" + env["MASTER_PORT"]);
    CHECK(env.count("PATH") == 1);  // the agent's own environment is inherited
    CHECK(std::stoi(env["MASTER_PORT"]) > 0);
    if (rank == 0) {
      port = env["MASTER_PORT"];
    }
    CHECK(env["MASTER_PORT"] == port);
  }
}

TEST_CASE("the Python hook follows the user's PYTHONPATH and keeps the user's torch settings",
          "[integration][agent]") {
  TempDir dir;
  const dtrun::testing::ScopedEnv userPath("PYTHONPATH", std::string("/mine:/theirs"));
  const dtrun::testing::ScopedEnv userDump("TORCH_NCCL_DUMP_ON_TIMEOUT", std::string("0"));
  const dtrun::testing::ScopedEnv userAsync("NCCL_ASYNC_ERROR_HANDLING", std::string("3"));
  auto config = shellJob(dir, 1, "env > \"$DTRUN_LOG_DIR/env\"");
  config.pythonHookDir = "/opt/dtrun/share/dtrun/python";
  const auto run = runAgent(dir, config);
  INFO("the agent's stderr: " << run.err);
  REQUIRE(run.code == 0);
  const fs::path rankDir = dir.path() / "logs" / "test" / "attempt_0" / "0";
  auto env = readEnv(rankDir / "env");
  CHECK(env["PYTHONPATH"] == "/mine:/theirs:/opt/dtrun/share/dtrun/python");
  CHECK(env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0");
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3");  // the user's old-name value, for both
  CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "3");
  CHECK(env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000");
  CHECK(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == (rankDir / "nccl_trace_rank_").string());
  CHECK(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == (rankDir / "nccl_trace_rank_").string());
}

TEST_CASE("${local_rank} in arguments is replaced per worker", "[integration][agent]") {
  TempDir dir;
  auto config = shellJob(dir, 2, "echo \"$0\" > \"$DTRUN_LOG_DIR/arg\"");
  config.command.emplace_back("rank-${local_rank}-of-${local_rank}");
  REQUIRE(runAgent(dir, config).code == 0);
  CHECK(slurp(dir.path() / "logs/test/attempt_0/1/arg") == "rank-1-of-1\n");
}

TEST_CASE("a failing group restarts while the budget allows", "[integration][agent]") {
  TempDir dir;
  // Fails in attempts 0 and 1, succeeds from attempt 2 on.
  const std::string script =
      "echo attempt $TORCHELASTIC_RESTART_COUNT; "
      "if [ $TORCHELASTIC_RESTART_COUNT -lt 2 ] && [ $RANK = 1 ]; then exit 3; fi; exit 0";
  SECTION("enough restarts: success") {
    auto config = shellJob(dir, 2, script);
    config.maxRestarts = 2;
    const auto run = runAgent(dir, config);
    CHECK(run.code == 0);
    CHECK(slurp(dir.path() / "logs/test/attempt_2/1/stdout.log") == "attempt 2\n");
    // Earlier attempts' logs are kept.
    CHECK(slurp(dir.path() / "logs/test/attempt_0/1/stdout.log") == "attempt 0\n");
  }
  SECTION("restarts exhausted: the root cause's exit code and report") {
    auto config = shellJob(dir, 2, script);
    config.maxRestarts = 1;
    const auto run = runAgent(dir, config);
    CHECK(run.code == 3);
    CHECK_THAT(run.err, Catch::Contains("job.sh FAILED"));
    CHECK_THAT(run.err, Catch::Contains("Root Cause (first observed failure):"));
    CHECK_THAT(run.err, Catch::Contains("rank      : 1 (local_rank: 1)"));
    CHECK_THAT(run.err, Catch::Contains("exitcode  : 3"));
    CHECK(fs::exists(dir.path() / "logs/test/attempt_1/1/stdout.log"));
    CHECK_FALSE(fs::exists(dir.path() / "logs/test/attempt_2"));
  }
}

TEST_CASE("dtrun exits with the root cause's code: exit 3, SIGSEGV, SIGKILL",
          "[integration][agent]") {
  const auto [script, code, exitcodeLine] =
      GENERATE(std::make_tuple(std::string("[ $RANK = 1 ] && exit 3; sleep 30"), 3,
                               std::string("exitcode  : 3")),
               std::make_tuple(std::string("[ $RANK = 1 ] && kill -SEGV $$; sleep 30"),
                               128 + SIGSEGV, std::string("exitcode  : -11")),
               std::make_tuple(std::string("[ $RANK = 1 ] && kill -KILL $$; sleep 30"),
                               128 + SIGKILL, std::string("exitcode  : -9")));
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const auto run = runAgent(dir, shellJob(dir, 3, script));
  CHECK(run.code == code);
  CHECK_THAT(run.err, Catch::Contains(exitcodeLine));
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // the sleepers were stopped, not awaited
}

TEST_CASE("the report quotes the error file, else the failed rank's stderr",
          "[integration][agent]") {
  TempDir dir;
  SECTION("stderr tail") {
    const auto run =
        runAgent(dir, shellJob(dir, 1, "echo first >&2; echo 'boom: bad input' >&2; exit 1"));
    CHECK(run.code == 1);
    CHECK_THAT(run.err, Catch::Contains("traceback : first\n    boom: bad input"));
    CHECK_THAT(run.err, Catch::Contains("error_file: <N/A>"));
  }
  SECTION("error file") {
    const auto run = runAgent(
        dir, shellJob(dir, 1,
                      "printf '{\"message\": {\"message\": \"RuntimeError: x\", \"extraInfo\": "
                      "{\"py_callstack\": \"Traceback: boom on rank 0\", \"timestamp\": \"1\"}}}' "
                      "> \"$TORCHELASTIC_ERROR_FILE\"; exit 1"));
    CHECK(run.code == 1);
    CHECK_THAT(run.err, Catch::Contains("traceback : Traceback: boom on rank 0"));
    CHECK_THAT(run.err, Catch::Contains("/error.json"));
  }
}

TEST_CASE("SIGTERM to the agent reaches every worker, one ignoring it is killed after the grace",
          "[integration][agent]") {
  TempDir dir;
  const std::string marks = (dir.path() / "mark").string();
  SECTION("cooperative workers") {
    auto config = shellJob(dir, 3,
                           "trap 'echo $RANK >> " + marks +
                               "; exit 0' TERM; "
                               "echo ready >> " +
                               marks + ".ready; while :; do sleep 0.05; done");
    const auto run = runAgent(dir, config, [&](pid_t agent) {
      REQUIRE(dtrun::testing::waitUntil(
          [&] { return slurp(marks + ".ready").size() == 3 * std::string("ready\n").size(); },
          10s));
      ::kill(agent, SIGTERM);
    });
    CHECK(run.code == 128 + SIGTERM);
    auto lines = slurp(marks);
    CHECK(std::count(lines.begin(), lines.end(), '\n') == 3);
  }
  SECTION("a worker that ignores SIGTERM") {
    auto config = shellJob(
        dir, 2, "trap '' TERM; echo ready >> " + marks + ".ready; while :; do sleep 0.05; done");
    config.shutdownTimeout = 300ms;
    const auto start = std::chrono::steady_clock::now();
    const auto run = runAgent(dir, config, [&](pid_t agent) {
      REQUIRE(dtrun::testing::waitUntil(
          [&] { return slurp(marks + ".ready").size() == 2 * std::string("ready\n").size(); },
          10s));
      ::kill(agent, SIGTERM);
    });
    CHECK(run.code == 128 + SIGTERM);
    CHECK_THAT(run.err, Catch::Contains("sending SIGKILL"));
    CHECK(std::chrono::steady_clock::now() - start < 10s);
  }
}

// The flake table's preemption_signals_test: the round ended (the other node stopped for the
// scheduler's SIGTERM), then this agent's own SIGTERM arrived: a worker checkpointing on the first
// SIGTERM got a second one.
TEST_CASE("a second reason to stop does not signal the workers again", "[integration][agent]") {
  TempDir dir;
  const std::string marks = (dir.path() / "mark").string();
  // Rank 0 fails once the others are ready; they record SIGTERM and go on (a long checkpoint).
  auto config = shellJob(dir, 3,
                         "if [ $RANK = 0 ]; then while [ $(cat " + marks +
                             ".ready 2>/dev/null | wc -l) -lt 2 ]; do sleep 0.05; done; exit 1; "
                             "fi; trap 'echo TERM $RANK >> " +
                             marks + "' TERM; echo ready >> " + marks +
                             ".ready; while :; do sleep 0.05; done");
  config.shutdownTimeout = 5s;
  const auto run = runAgent(dir, config, [&](pid_t agent) {
    // The failure's stop reached both (their traps ran), then dtrun's own SIGTERM comes.
    REQUIRE(dtrun::testing::waitUntil(
        [&] {
          const std::string m = slurp(marks);
          return m.find("TERM 1") != std::string::npos && m.find("TERM 2") != std::string::npos;
        },
        20s));
    ::kill(agent, SIGTERM);
  });
  CHECK(run.code == 128 + SIGTERM);
  const std::string lines = slurp(marks);
  CHECK(lines.find("TERM 1") == lines.rfind("TERM 1"));
  CHECK(lines.find("TERM 2") == lines.rfind("TERM 2"));
}

TEST_CASE("tee prefixes console lines, every rank's output lands in its log files",
          "[integration][agent]") {
  TempDir dir;
  auto config = shellJob(dir, 2, "echo out-$RANK; echo err-$RANK >&2");
  config.tee.all = dtrun::agent::Streams::kOut;
  config.localRanksFilter = std::set<int>{1};
  const auto run = runAgent(dir, config);
  REQUIRE(run.code == 0);
  CHECK(run.out == "[default1]:out-1\n");           // rank 0 filtered from the console
  CHECK_THAT(run.err, Catch::Contains("err-1\n"));  // not tee'd: raw
  CHECK_THAT(run.err, !Catch::Contains("err-0"));
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path d = dir.path() / "logs/test/attempt_0" / std::to_string(rank);
    CHECK(slurp(d / "stdout.log") == "out-" + std::to_string(rank) + "\n");
    CHECK(slurp(d / "stderr.log") == "err-" + std::to_string(rank) + "\n");
  }
}

TEST_CASE("an entrypoint that cannot run fails at once with a clear line", "[integration][agent]") {
  TempDir dir;
  auto config = shellJob(dir, 2, "");
  config.command = {"./trian"};
  const auto run = runAgent(dir, config);
  CHECK(run.code == 127);
  CHECK_THAT(run.err, Catch::Contains("cannot run ./trian: No such file or directory"));
}

namespace {

char processState(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

}  // namespace

// eu-stack, dumping a hung worker's stack, is such a tracer: a worker that exits meanwhile is its
// zombie to see first, and the agent's waitid finds nothing although the pidfd turned readable.
TEST_CASE("a worker that exits while another process traces it is still seen to exit",
          "[integration][agent]") {
  TempDir dir;
  const std::string pidFile = (dir.path() / "worker.pid").string();
  const std::string go = (dir.path() / "go").string();
  REQUIRE(::mkfifo(go.c_str(), 0600) == 0);
  // Builtins, then one read: no child of its own, so no SIGCHLD stops the traced worker. It exits
  // on the byte the tracer writes once it holds it.
  auto config = shellJob(dir, 1, "echo $$ > " + pidFile + "; exec head -c 1 " + go + " >/dev/null");
  const auto run = runAgent(dir, config, [&](pid_t agent) {
    REQUIRE(dtrun::testing::waitUntil(
        [&] {
          const std::string text = slurp(pidFile);
          return !text.empty() && text.back() == '\n';
        },
        10s));
    const pid_t worker = std::stoi(slurp(pidFile));
    dtrun::testing::ChildGuard tracer([&] {
      const bool seized = ::ptrace(PTRACE_SEIZE, worker, nullptr, nullptr) == 0;
      std::ofstream(go).put('\n');
      // Holds the zombie a while without waiting for it; exiting detaches it.
      static_cast<void>(
          dtrun::testing::waitUntil([&] { return processState(worker) == 'Z'; }, 10s));
      std::this_thread::sleep_for(300ms);
      return seized ? 0 : 2;
    });
    REQUIRE(tracer.wait() == 0);
    REQUIRE(dtrun::testing::waitUntil([&] { return processState(agent) == 'Z'; }, 10s));
  });
  CHECK(run.code == 0);
}
