// dtrun's own insight options through validate() and the dry-run text: --report, --hang_timeout,
// --verbose and --dry-run (both spellings), their bad values, and what --dry-run prints.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "plan_support.h"
#include "support/scoped.h"

namespace {

namespace launcher = dtrun::launcher;
using namespace std::chrono_literals;

using dtrun::testing::planOk;

// validate() on a machine whose dtrun has its Python hook in `hookDir` ("" = not installed).
dtrun::Result<launcher::LaunchPlan> planWithHook(const std::vector<std::string>& args,
                                                 const std::string& hookDir = "") {
  launcher::HostFacts host = dtrun::testing::testHost();
  host.pythonHookDir = hookDir;
  return dtrun::testing::plan(args, host);
}

}  // namespace

TEST_CASE("insight options are off by default", "[unit][launcher]") {
  const auto p = planOk({"x.py"});
  CHECK_FALSE(p.dryRun);
  CHECK(p.config.reportFile.empty());
  CHECK(p.config.hangTimeout == 0ms);
  CHECK_FALSE(p.config.verbose);
}

TEST_CASE("insight options take both spellings", "[unit][launcher]") {
  const auto spelling = GENERATE(0, 1);
  const auto name = [spelling](std::string dest) {
    if (spelling == 1) {
      std::replace(dest.begin(), dest.end(), '_', '-');
    }
    return "--" + dest;
  };
  const auto p = planOk({name("dry_run"), name("report") + "=/tmp/r.json",
                         name("hang_timeout") + "=2.5", "--verbose", "x.py"});
  CHECK(p.dryRun);
  CHECK(p.config.reportFile == "/tmp/r.json");
  CHECK(p.config.hangTimeout == 2500ms);
  CHECK(p.config.verbose);
}

TEST_CASE("the Python hook comes with --hang_timeout or --verbose unless switched",
          "[unit][launcher]") {
  const std::string dir = "/usr/share/dtrun/python";
  CHECK(planOk({"x.py"}).config.pythonHookDir.empty());
  auto withHang = planWithHook({"--hang_timeout=5", "x.py"}, dir);
  REQUIRE(withHang.isOk());
  CHECK(withHang.value().config.pythonHookDir == dir);
  CHECK(planWithHook({"--hang_timeout=5", "--python_hook=off", "x.py"}, dir)
            .value()
            .config.pythonHookDir == "");
  CHECK(planWithHook({"--python-hook=on", "x.py"}, dir).value().config.pythonHookDir == dir);
  // --verbose's timeline reads an unmodified torch script's store and communicator times from the
  // hook (issue 34: it showed "-" for them unless --python_hook=on).
  CHECK(planWithHook({"--verbose", "x.py"}, dir).value().config.pythonHookDir == dir);
  CHECK(planWithHook({"--verbose", "--python_hook=off", "x.py"}, dir)
            .value()
            .config.pythonHookDir.empty());
  CHECK(planOk({"--verbose", "x.py"}).notices.empty());  // not installed: nothing to judge
  // Not installed: a notice with auto (the job still runs), an error when asked for.
  const auto notInstalled = planOk({"--hang_timeout=5", "x.py"});
  CHECK(notInstalled.config.pythonHookDir.empty());
  REQUIRE(notInstalled.notices.size() == 1);
  CHECK(notInstalled.notices[0].find("not judged") != std::string::npos);
  const auto asked = planWithHook({"--python_hook=on", "x.py"});
  REQUIRE_FALSE(asked.isOk());
  CHECK(asked.status().message().ends_with("reinstall dtrun, or pass --python_hook=off"));
}

TEST_CASE("bad insight values are one line naming the flag", "[unit][launcher]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const auto [args, message] = GENERATE(values<Case>({
      {{"--hang_timeout=soon", "x.py"},
       "--hang_timeout: expected a non-negative number of seconds (0 = off), got 'soon'"},
      {{"--hang-timeout=-1", "x.py"},
       "--hang_timeout: expected a non-negative number of seconds (0 = off), got '-1'"},
      {{"--report=", "x.py"}, "--report: expected a file path for the JSON report, got ''"},
      {{"--python_hook=yes", "x.py"}, "--python_hook: expected auto, on or off, got 'yes'"},
  }));
  auto result = planWithHook(args);
  REQUIRE_FALSE(result.isOk());
  CHECK(result.status().message() == message);
}

TEST_CASE("the dry run shows this node's ranks and their environment", "[unit][launcher]") {
  const auto p =
      planOk({"--nnodes=3", "--node_rank=2", "--master_addr=h0", "--master_port=29501",
              "--nproc_per_node=2", "--log_dir=/l", "--rdzv_id=j", "--no_python", "./train"});
  const std::string text = launcher::dryRunText(p, {"HOME=/root", "RANK=99"});
  CHECK_THAT(text, Catch::Contains("Rank table (node 2 of 3, world size 6):"));
  CHECK_THAT(text, Catch::Contains("  4     0           2          /l/j/attempt_0/0\n"));
  CHECK_THAT(text, Catch::Contains("  5     1           2          /l/j/attempt_0/1\n"));
  CHECK_THAT(text, Catch::Contains("Worker 5 (local rank 1): ./train\n"));
  CHECK_THAT(text, Catch::Contains("    RANK=5\n"));  // dtrun's value replaces the inherited one
  CHECK_THAT(text, Catch::Contains("    MASTER_PORT=29501\n"));
  CHECK_THAT(text, Catch::Contains("    DTRUN_PROGRESS_FILE=/l/j/attempt_0/progress\n"));
  CHECK_THAT(text, Catch::Contains("    DTRUN_PROGRESS_SLOT=1\n"));
  CHECK_THAT(text, !Catch::Contains("HOME=/root"));  // inherited unchanged: not repeated
}

TEST_CASE(
    "the console options: prefix template, from the flag or torchrun's variable, and "
    "duplicate filters",
    "[unit][launcher]") {
  auto p = planOk(
      {"--log-line-prefix-template=${rank}|${local_rank}: ", "--duplicate-stdout-filters=loss,,acc",
       "--duplicate_stderr_filters=WARN", "x.py"});
  CHECK(p.config.logLinePrefixTemplate == "${rank}|${local_rank}: ");
  // torchrun: "Use double comma to escape a comma".
  CHECK(p.config.duplicateStdoutFilters == std::vector<std::string>{"loss,acc"});
  CHECK(planOk({"--duplicate-stdout-filters=a,b,,,,c,,,", "x.py"}).config.duplicateStdoutFilters ==
        std::vector<std::string>{"a", "b,,c,"});
  CHECK(p.config.duplicateStderrFilters == std::vector<std::string>{"WARN"});
  {
    launcher::HostFacts host;
    host.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "${role_name}-${rank}>";
    CLI::App app{"dtrun"};
    launcher::RawOptions raw;
    launcher::addLaunchOptions(app, raw);
    const dtrun::testing::Argv argv("dtrun", {"x.py"});
    app.parse(launcher::argumentsForParse(argv.argc(), argv.argv()));
    raw.program = app.remaining();
    const auto fromVariable = launcher::validate(raw, host);
    REQUIRE(fromVariable.isOk());
    CHECK(fromVariable.value().config.logLinePrefixTemplate == "${role_name}-${rank}>");
  }
  CHECK(dtrun::agent::expandLinePrefix("[${role_name}${local_rank}|${x}]:",
                                       {{"role_name", "trainer"}, {"local_rank", "3"}}) ==
        "[trainer3|${x}]:");
  CHECK(dtrun::agent::unknownLinePrefixVariable("${rank}${pid}${hostname}").empty());
  CHECK(dtrun::agent::unknownLinePrefixVariable("a ${rank} ${nodes} ${x}") == "${nodes}");
  // Python's string.Template forms, which torchrun's templates may use: "$name" and "$$".
  const std::vector<std::pair<std::string, std::string>> values = {{"rank", "5"},
                                                                   {"local_rank", "1"}};
  CHECK(dtrun::agent::expandLinePrefix("$rank/$local_rank:", values) == "5/1:");
  CHECK(dtrun::agent::expandLinePrefix("$$rank=${rank}$", values) == "$rank=5$");
  CHECK(dtrun::agent::expandLinePrefix("$ 1 ${ rank} $9 $rankx", values) ==
        "$ 1 ${ rank} $9 $rankx");
  CHECK(dtrun::agent::unknownLinePrefixVariable("$rank $$node $node") == "$node");
  CHECK(dtrun::agent::unknownLinePrefixVariable("cost: 5$ ${rank}").empty());
}

TEST_CASE("health checks: network is opt-in and needs dtrun-netcheck", "[unit][launcher]") {
  launcher::HostFacts host = dtrun::testing::testHost();
  host.netcheckProgram = "/opt/dtrun/bin/dtrun-netcheck";
  const auto p =
      dtrun::testing::plan({"--health_checks=local,network", "--health_net_min_gbps=5",
                            "--health_net_max_rtt_us=0", "--health_gpu_memory_wait=0", "x.py"},
                           host);
  REQUIRE(p.isOk());
  const auto& c = p.value().config.healthChecks;
  CHECK((c.network && c.logDir && c.gpus));
  CHECK(c.netcheckProgram == "/opt/dtrun/bin/dtrun-netcheck");
  CHECK(c.netMinGbps == 5.0);
  CHECK(c.netMaxRttUs == 0.0);
  CHECK(c.gpuMemoryWait == 0ms);
  const auto missing = planWithHook({"--health_checks=network", "x.py"});
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().message() ==
        "--health_checks=network: dtrun-netcheck (the network check's program) is not installed "
        "beside this dtrun: reinstall dtrun, or drop 'network'");
}

TEST_CASE("health checks: local by default, none, a list, and bad values", "[unit][launcher]") {
  auto c = planOk({"x.py"}).config.healthChecks;
  CHECK((c.logDir && c.entrypoint && c.store && c.gpus && c.openFiles));
  CHECK(c.timeout == 5000ms);
  CHECK(c.minFreeBytes == std::uint64_t{100} << 20);
  CHECK(c.minOpenFiles == 1024);
  c = planOk({"--health_checks=none", "x.py"}).config.healthChecks;
  CHECK_FALSE(c.any());
  c = planOk({"--health_checks=log_dir,store", "--health_check_timeout=0.5",
              "--health_min_free_mb=1", "x.py"})
          .config.healthChecks;
  CHECK((c.logDir && c.store && !c.entrypoint && !c.gpus && !c.openFiles));
  CHECK(c.timeout == 500ms);
  CHECK(c.minFreeBytes == std::uint64_t{1} << 20);
  CHECK(c.gpuMemoryWait == 30000ms);
  CHECK_FALSE(c.network);
  c = planOk({"--health_checks=open_files", "--health_min_open_files=4096", "x.py"})
          .config.healthChecks;
  CHECK((c.openFiles && !c.logDir && !c.store && !c.entrypoint && !c.gpus));
  CHECK(c.minOpenFiles == 4096);
  for (const std::string bad :
       {"--health_checks=local,bogus", "--health_checks=network", "--health_checks=none,local",
        "--health_check_timeout=0", "--health_min_free_mb=-1", "--health_gpu_memory_wait=x",
        "--health_net_min_gbps=-1", "--health_net_max_rtt_us=fast", "--health_min_open_files=1.5",
        "--health_min_open_files=-3"}) {
    const auto p = planWithHook({bad, "x.py"});
    REQUIRE_FALSE(p.isOk());
    CHECK(p.status().message().find(bad.substr(0, bad.find('='))) != std::string::npos);
  }
}
