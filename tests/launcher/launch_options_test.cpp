// torchrun's command line through dtrun's pure pieces: argv -> CLI11 -> RawOptions -> validate().
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <stdlib.h>

#include <catch2/catch.hpp>

#include "dtrun/agent.h"

#include "plan_support.h"
#include "support/scoped.h"

namespace {

namespace launcher = dtrun::launcher;
using dtrun::agent::Streams;
using dtrun::testing::errorOf;
using namespace std::chrono_literals;

// Sets (or, with nullopt, unsets) one environment variable and restores it on destruction.
using dtrun::testing::ScopedEnv;

using dtrun::testing::plan;
using dtrun::testing::planOk;
using dtrun::testing::testHost;
// The message CLI11 itself raises for `args`, as dtrun prints it.
std::string parseErrorOf(const std::vector<std::string>& args) {
  CLI::App app{"dtrun"};
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  std::vector<std::string> argv = {"dtrun"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> pointers;
  for (const std::string& arg : argv) {
    pointers.push_back(arg.c_str());
  }
  try {
    app.parse(launcher::argumentsForParse(static_cast<int>(pointers.size()), pointers.data()));
  } catch (const CLI::ParseError& e) {
    return launcher::parseErrorLine(e);
  }
  FAIL("no parse error");
  return {};
}

using Command = std::vector<std::string>;

}  // namespace

TEST_CASE("defaults are torchrun's", "[unit][launcher]") {
  const auto p = planOk({"train.py"});
  const auto& c = p.config;
  CHECK(c.command == Command{"python3", "-u", "train.py"});
  CHECK(c.entrypointName == "train.py");
  CHECK(c.nprocPerNode == 1);
  CHECK(p.minNodes == 1);
  CHECK(p.maxNodes == 1);
  CHECK(c.role == "default");
  CHECK(c.runId == "none");
  CHECK(c.maxRestarts == 0);
  CHECK(c.shutdownTimeout == 30s);
  CHECK(c.signalsToHandle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(c.signalsToHandleText == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(p.rdzvBackend == "static");
  CHECK(c.masterAddr == "127.0.0.1");
  CHECK(c.storePort == 0);  // no --master_port: a free port, as torchrun's single-node fallback
  CHECK(c.storeListenHost.empty());
  CHECK(p.rdzvEndpoint == "127.0.0.1:0");
  CHECK(p.rdzvConf.empty());
  CHECK(p.monitorInterval == 0.1);
  CHECK(c.logDir.empty());
  CHECK(c.redirects.all == Streams::kNone);
  CHECK(c.redirects.perRank.empty());
  CHECK(c.tee.all == Streams::kNone);
  CHECK_FALSE(c.localRanksFilter.has_value());
  CHECK(c.defaultEnv.empty());
  CHECK(p.notices.empty());
  CHECK(p.warnings.empty());
  CHECK(p.logLevel.empty());
}

TEST_CASE("every multi-word option takes both spellings", "[unit][launcher]") {
  struct Case {
    std::string dest;
    std::string value;
  };
  const auto [dest, value] = GENERATE(values<Case>({
      {"nproc_per_node", "3"},
      {"rdzv_backend", "c10d"},
      {"rdzv_endpoint", "127.0.0.1:5000"},
      {"rdzv_id", "job7"},
      {"rdzv_conf", "join_timeout=5"},
      {"max_restarts", "4"},
      {"monitor_interval", "2.5"},
      {"start_method", "fork"},
      {"event_log_handler", "null"},
      {"log_dir", "/tmp/logs"},
      {"local_ranks_filter", "0,2"},
      {"node_rank", "0"},
      {"master_addr", "10.0.0.1"},
      {"master_port", "29500"},
      {"local_addr", "10.0.0.2"},
      {"signals_to_handle", "SIGUSR1"},
      {"shutdown_timeout", "7"},
  }));
  std::string dashed = dest;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  CAPTURE(dest);
  const auto underscore = planOk({"--" + dest + "=" + value, "train.py"});
  const auto dash = planOk({"--" + dashed, value, "train.py"});
  CHECK(launcher::launchBanner(underscore) == launcher::launchBanner(dash));
  CHECK(underscore.config.localRanksFilter == dash.config.localRanksFilter);
}

TEST_CASE("flags take both spellings too", "[unit][launcher]") {
  {
    CHECK(planOk({"--no-python", "prog"}).config.command == Command{"prog"});
    CHECK(planOk({"--no_python", "prog"}).config.command == Command{"prog"});
    CHECK(planOk({"--run-path", "prog"}).config.command == Command{"python3", "-u", "prog"});
    CHECK(planOk({"--module", "pkg"}).config.command == Command{"python3", "-u", "-m", "pkg"});
    CHECK(planOk({"-m", "pkg"}).config.command == Command{"python3", "-u", "-m", "pkg"});
    CHECK(planOk({"--log-level", "debug", "x.py"}).logLevel == "debug");
    CHECK(planOk({"--log_level=warn", "x.py"}).logLevel == "warn");
  }
}

TEST_CASE("option values land in the agent's configuration", "[unit][launcher]") {
  const auto p =
      planOk({"--nproc_per_node=4", "--max_restarts", "3", "--role", "trainer", "--log_dir",
              "/tmp/l", "--rdzv_id", "job", "--shutdown_timeout", "2.5", "--signals_to_handle",
              "SIGTERM, SIGUSR1", "--rdzv_conf", "join_timeout=60, read_timeout=5,join_timeout=70",
              "--local_ranks_filter", "3,1", "train.py"});
  const auto& c = p.config;
  CHECK(c.nprocPerNode == 4);
  CHECK(c.maxRestarts == 3);
  CHECK(c.role == "trainer");
  CHECK(c.logDir == "/tmp/l");
  CHECK(c.runId == "job");
  CHECK(c.shutdownTimeout == 2500ms);
  CHECK(c.signalsToHandle == std::vector<int>{SIGTERM, SIGUSR1});
  CHECK(c.signalsToHandleText == "SIGTERM, SIGUSR1");
  CHECK(p.rdzvConf == std::vector<std::pair<std::string, std::string>>{{"read_timeout", "5"},
                                                                       {"join_timeout", "70"}});
  REQUIRE(c.localRanksFilter.has_value());
  CHECK(*c.localRanksFilter == std::set<int>{1, 3});
  CHECK(planOk({"--local_ranks_filter=", "x.py"}).config.localRanksFilter == std::nullopt);
  CHECK(planOk({"--nproc_per_node", "2", "--nproc_per_node", "5", "x.py"}).config.nprocPerNode ==
        5);  // argparse: the last one wins
}

TEST_CASE("arguments after the entrypoint reach the program untouched", "[unit][launcher]") {
  const auto p = planOk({"--nproc_per_node=2", "train.py", "--lr", "1", "--nproc_per_node", "5",
                         "store", "${local_rank}", "-m"});
  CHECK(p.config.nprocPerNode == 2);
  CHECK(p.config.command == Command{"python3", "-u", "train.py", "--lr", "1", "--nproc_per_node",
                                    "5", "store", "${local_rank}", "-m"});
  SECTION("-- ends dtrun's options") {
    CHECK(planOk({"--", "-odd.py", "-x"}).config.command ==
          Command{"python3", "-u", "-odd.py", "-x"});
  }
}

TEST_CASE("an empty --option= is an empty value, as argparse reads it", "[unit][launcher]") {
  const auto p = planOk({"--rdzv_id=", "--log_dir=", "x.py", "--lr=", "--rdzv_id="});
  CHECK(p.config.runId == "generated-id");
  CHECK(p.config.logDir.empty());
  CHECK(p.config.command == Command{"python3", "-u", "x.py", "--lr=", "--rdzv_id="});

  const char* argv[] = {"dtrun", "-r", "--x=", "--role=", "-t3", "--standalone", "store", "--a="};
  CHECK(launcher::argumentsForParse(8, argv) == std::vector<std::string>{"--a=", "store",
                                                                         "--standalone", "-t3", "",
                                                                         "--role", "--x=", "-r"});
}

TEST_CASE("PET_ variables sit between the command line and the default", "[unit][launcher]") {
  const ScopedEnv nproc("PET_NPROC_PER_NODE", "4");
  const ScopedEnv restarts("PET_MAX_RESTARTS", "2");
  const ScopedEnv dashedFlag("PET_NO_PYTHON", "1");
  const ScopedEnv omp("OMP_NUM_THREADS", "3");
  auto host = launcher::readHostFacts();
  host.makeRunId = [] { return std::string("generated-id"); };
  // "prog" exists nowhere: the plan is what is checked here, not the PATH lookup.
  host.resolveProgram = [](const std::string& name) { return std::optional<std::string>(name); };

  SECTION("env beats default") {
    const auto p = planOk({"prog"}, host);
    CHECK(p.config.nprocPerNode == 4);
    CHECK(p.config.maxRestarts == 2);
    CHECK(p.config.command == Command{"prog"});
    CHECK(p.config.defaultEnv.empty());  // OMP_NUM_THREADS is set: no default, no notice
    CHECK(p.notices.empty());
  }
  SECTION("command line beats env") {
    const auto p = planOk({"--nproc-per-node", "2", "--max_restarts=0", "prog"}, host);
    CHECK(p.config.nprocPerNode == 2);
    CHECK(p.config.maxRestarts == 0);
  }
  SECTION("a bad env value is named by its variable") {
    const ScopedEnv bad("PET_NNODES", "0");
    CHECK(errorOf({"prog"}, launcher::readHostFacts()) ==
          "PET_NNODES: expected N or MIN:MAX with 0 < MIN <= MAX, got '0'");
  }
}

TEST_CASE("check_env flags read PET_<FLAG>=1|0", "[unit][launcher]") {
  auto host = testHost();
  SECTION("1 turns --standalone on") {
    host.env["PET_STANDALONE"] = "1";
    const auto p = planOk({"x.py"}, host);
    CHECK(p.rdzvBackend == "c10d");
    CHECK(p.config.runId == "generated-id");
  }
  SECTION("0 leaves it off") {
    host.env["PET_STANDALONE"] = "0";
    CHECK(planOk({"x.py"}, host).rdzvBackend == "static");
  }
  SECTION("PET_MODULE=1 runs a module") {
    host.env["PET_MODULE"] = "1";
    CHECK(planOk({"pkg.main"}, host).config.command == Command{"python3", "-u", "-m", "pkg.main"});
  }
  SECTION("anything but an integer is an error") {
    host.env["PET_STANDALONE"] = "yes";
    CHECK(errorOf({"x.py"}, host) == "PET_STANDALONE: expected 1 or 0, got 'yes'");
  }
}

TEST_CASE("entrypoints resolve as torchrun runs them", "[unit][launcher]") {
  auto host = testHost();
  host.findExecutable = [](const std::string& entry) -> std::optional<std::string> {
    if (entry == "mybin") {
      return "./mybin";
    }
    if (entry == "/opt/app/run" || entry == "tool") {
      return entry;
    }
    return std::nullopt;
  };
  CHECK(planOk({"train.py", "a"}, host).config.command ==
        Command{"python3", "-u", "train.py", "a"});
  CHECK(planOk({"-m", "pkg.mod", "a"}, host).config.command ==
        Command{"python3", "-u", "-m", "pkg.mod", "a"});
  CHECK(planOk({"--no_python", "train.py", "a"}, host).config.command == Command{"train.py", "a"});
  CHECK(planOk({"mybin", "a"}, host).config.command == Command{"./mybin", "a"});
  CHECK(planOk({"/opt/app/run"}, host).config.command == Command{"/opt/app/run"});
  CHECK(planOk({"tool"}, host).config.command == Command{"tool"});
  CHECK(planOk({"script_without_suffix"}, host).config.command ==
        Command{"python3", "-u", "script_without_suffix"});
  CHECK(planOk({"--run_path", "mybin"}, host).config.command == Command{"python3", "-u", "mybin"});
  CHECK(planOk({"-m", "pkg.mod"}, host).config.entrypointName == "pkg.mod");
  CHECK(planOk({"mybin"}, host).config.entrypointName == "mybin");

  SECTION("PYTHON_EXEC picks the interpreter") {
    host.env["PYTHON_EXEC"] = "/opt/py/bin/python";
    CHECK(planOk({"train.py"}, host).config.command ==
          Command{"/opt/py/bin/python", "-u", "train.py"});
  }
}

TEST_CASE("an executable file on disk runs directly, anything else through python",
          "[unit][launcher]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dtrun_launcher_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto program = dir / "prog";
  const auto data = dir / "data";
  std::ofstream(program) << "#!/bin/sh\nexit 0\n";
  std::ofstream(data) << "print(1)\n";
  std::filesystem::permissions(program, std::filesystem::perms::owner_all);
  const auto host = launcher::readHostFacts();
  CHECK(planOk({program.string()}, host).config.command == Command{program.string()});
  CHECK(planOk({data.string()}, host).config.command[0] != data.string());
  CHECK(planOk({"sh", "-c", "true"}, host).config.command == Command{"sh", "-c", "true"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("nproc_per_node understands gpu, cpu and auto", "[unit][launcher]") {
  auto host = testHost();
  CHECK(planOk({"--nproc_per_node=cpu", "x.py"}, host).config.nprocPerNode == 8);
  CHECK(planOk({"--nproc_per_node=auto", "x.py"}, host).config.nprocPerNode == 8);
  CHECK(errorOf({"--nproc_per_node=gpu", "x.py"}, host) ==
        "--nproc_per_node: gpu asks for one worker per GPU, but no NVIDIA GPU is visible (no "
        "/dev/nvidia<N>, or CUDA_VISIBLE_DEVICES hides them)");
  host.gpuCount = 2;
  CHECK(planOk({"--nproc_per_node=gpu", "x.py"}, host).config.nprocPerNode == 2);
  CHECK(planOk({"--nproc_per_node=auto", "x.py"}, host).config.nprocPerNode == 2);
  CHECK(planOk({"--nproc_per_node=cpu", "x.py"}, host).config.nprocPerNode == 8);
}

TEST_CASE("visible GPUs follow CUDA_VISIBLE_DEVICES as torch.cuda reads it", "[unit][launcher]") {
  CHECK(launcher::countVisibleGpus(4, std::nullopt) == 4);
  CHECK(launcher::countVisibleGpus(0, std::nullopt) == 0);
  CHECK(launcher::countVisibleGpus(4, "") == 0);
  CHECK(launcher::countVisibleGpus(4, "1,3") == 2);
  CHECK(launcher::countVisibleGpus(4, "2, 0") == 2);
  CHECK(launcher::countVisibleGpus(4, "0,-1,2") == 1);  // -1 ends the list
  CHECK(launcher::countVisibleGpus(4, "0,7,1") == 1);   // a device that does not exist ends it
  CHECK(launcher::countVisibleGpus(4, "0,0") == 0);     // a repeat hides every device
  CHECK(launcher::countVisibleGpus(4, "-1") == 0);
  CHECK(launcher::countVisibleGpus(0, "0,1") == 0);
  CHECK(launcher::countVisibleGpus(2, "GPU-aaaa,GPU-bbbb") == 2);
  CHECK(launcher::countVisibleGpus(1, "GPU-aaaa,GPU-bbbb") == 1);
  CHECK(launcher::countVisibleGpus(8, "MIG-aaaa,0") == 1);
}

TEST_CASE("redirects and tee take torchrun's syntax, for any local rank", "[unit][launcher]") {
  const auto all = launcher::parseStreamSelection("3");
  REQUIRE(all);
  CHECK(all->all == Streams::kBoth);
  CHECK(all->perRank.empty());
  CHECK(all->forRank(17) == Streams::kBoth);

  const auto mapped = launcher::parseStreamSelection("0:3,1:1,12:2");
  REQUIRE(mapped);
  CHECK(mapped->perRank ==
        std::map<int, Streams>{{0, Streams::kBoth}, {1, Streams::kOut}, {12, Streams::kErr}});
  CHECK(mapped->forRank(12) == Streams::kErr);
  CHECK(mapped->forRank(2) == Streams::kNone);
  CHECK(launcher::parseStreamSelection("12:3")->perRank ==
        std::map<int, Streams>{{12, Streams::kBoth}});
  CHECK(launcher::parseStreamSelection("0")->all == Streams::kNone);
  CHECK(launcher::parseStreamSelection("1:1,1:2")->perRank.at(1) == Streams::kErr);

  for (const char* bad : {"", "4", "03", "-1", "0:4", "a:1", ":1", "1:", "0:3,", "0-3", "0:3;1:1",
                          "0:3, 1:1", "99999999999:1"}) {
    CAPTURE(bad);
    CHECK_FALSE(launcher::parseStreamSelection(bad));
  }

  const auto p = planOk({"-r", "12:3,0:1", "-t3", "x.py"});
  CHECK(p.config.redirects.perRank.at(12) == Streams::kBoth);
  CHECK(p.config.redirects.perRank.at(0) == Streams::kOut);
  CHECK(p.config.tee.all == Streams::kBoth);
  CHECK(planOk({"--tee", "1:2", "x.py"}).config.tee.forRank(1) == Streams::kErr);
}

TEST_CASE("signal names become numbers", "[unit][launcher]") {
  CHECK(launcher::parseSignalNames("SIGTERM,SIGINT,SIGHUP,SIGQUIT") ==
        std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK(launcher::parseSignalNames("SIGUSR1,SIGUSR2,SIGUSR1") ==
        std::vector<int>{SIGUSR1, SIGUSR2});
  for (const char* bad : {"", "SIGFOO", "SIGTERM,", "sigterm", "15", "SIGKILL", "SIGSTOP"}) {
    CAPTURE(bad);
    CHECK_FALSE(launcher::parseSignalNames(bad));
  }
}

TEST_CASE("endpoints parse as host[:port] with bracketed IPv6", "[unit][launcher]") {
  const auto check = [](const char* text, const char* host, std::optional<int> port) {
    CAPTURE(text);
    const auto endpoint = launcher::parseEndpoint(text);
    REQUIRE(endpoint);
    CHECK(endpoint->host == host);
    CHECK(endpoint->port == port);
  };
  check("node1", "node1", std::nullopt);
  check("node1.example.com:29400", "node1.example.com", 29400);
  check("10.0.0.1:0", "10.0.0.1", 0);
  check("[::1]:1234", "::1", 1234);
  check("[fe80::1]", "fe80::1", std::nullopt);
  for (const char* bad : {"", ":29400", "host:", "host:x", "host:65536", "::1", "[::1", "[::1]x",
                          "ho st:1", "host:-1"}) {
    CAPTURE(bad);
    CHECK_FALSE(launcher::parseEndpoint(bad));
  }
}

TEST_CASE("rendezvous options choose the store and MASTER_ADDR", "[unit][launcher]") {
  SECTION("static with --master_port listens on it") {
    const auto p = planOk({"--master_addr", "10.1.1.1", "--master_port", "29500", "x.py"});
    CHECK(p.rdzvBackend == "static");
    CHECK(p.config.storePort == 29500);
    CHECK(p.config.masterAddr == "10.1.1.1");
    CHECK(p.rdzvEndpoint == "10.1.1.1:29500");
  }
  SECTION("static with an endpoint takes host and port from it") {
    const auto p = planOk({"--rdzv_endpoint", "[::1]:29600", "--master_port=1", "x.py"});
    CHECK(p.config.storePort == 29600);
    CHECK(p.config.masterAddr == "::1");
    CHECK(p.rdzvEndpoint == "[::1]:29600");
  }
  SECTION("c10d without a port uses 29400") {
    const auto p = planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=localhost", "x.py"});
    CHECK(p.rdzvBackend == "c10d");
    CHECK(p.config.storePort == 29400);
    CHECK(p.config.masterAddr == "localhost");
    CHECK(p.config.runId == "none");
    CHECK(p.warnings.empty());
  }
  SECTION("c10d with a port, and --local_addr as MASTER_ADDR") {
    auto host = testHost();  // the endpoint is this host: one node serves its own store
    host.isThisHost = [](const std::string& h) { return h == "127.0.0.1"; };
    const auto p = planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
                           "--local_addr=10.2.2.2", "--rdzv_id=abc", "x.py"},
                          host);
    CHECK_FALSE(p.config.multiNode.has_value());
    CHECK(p.config.storePort == 0);
    CHECK(p.config.masterAddr == "10.2.2.2");
    CHECK(p.config.runId == "abc");
    CHECK(p.rdzvEndpoint == "127.0.0.1:0");
  }
  SECTION("c10d, one node, an endpoint on this host that a store already serves: a client") {
    // Issue 34, bug 8: --nnodes=1 used to try to serve the store itself and fail on the taken
    // port, where --nnodes=1:2 joined; the taken-port path no longer depends on the node count.
    auto host = testHost();
    host.isThisHost = [](const std::string& h) { return h == "127.0.0.1"; };
    host.acceptsConnection = [](const std::string& h, int port) {
      return h == "127.0.0.1" && port == 29555;
    };
    const auto served = planOk(
        {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29555", "--rdzv_id=q", "x.py"}, host);
    REQUIRE(served.config.multiNode.has_value());
    CHECK_FALSE(served.config.multiNode->hostsStore);
    CHECK(served.config.masterAddr == "127.0.0.1");
    CHECK(served.config.storePort == 29555);
    const auto free = planOk(
        {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29556", "--rdzv_id=q", "x.py"}, host);
    CHECK_FALSE(free.config.multiNode.has_value());
    CHECK(free.config.storePortOption == "--rdzv_endpoint");
  }
  SECTION("c10d warns that --master_addr is ignored") {
    const auto p = planOk({"--rdzv_backend=c10d", "--master_addr=1.2.3.4", "x.py"});
    CHECK(p.config.masterAddr == "localhost");
    CHECK(p.warnings.size() == 1);
  }
  SECTION("--standalone: c10d on a free port with a random run id") {
    const auto p = planOk({"--standalone", "--rdzv_id=ignored", "--rdzv_endpoint=h:1", "x.py"});
    CHECK(p.rdzvBackend == "c10d");
    CHECK(p.config.storePort == 0);
    CHECK(p.config.runId == "generated-id");
    CHECK(p.config.masterAddr == "127.0.0.1");
    CHECK(p.rdzvEndpoint == "localhost:0");
    CHECK(p.warnings == std::vector<std::string>{
                            "--standalone ignores --rdzv_backend, --rdzv_endpoint and --rdzv_id"});
  }
  SECTION("--standalone says it ignores --master_port (issue 34)") {
    const auto p = planOk({"--standalone", "--master_port=29999", "x.py"});
    CHECK(p.config.storePort == 0);
    CHECK(p.warnings == std::vector<std::string>{
                            "--standalone serves its store on a free port: --master_port=29999 is "
                            "ignored (leave out --standalone to use it)"});
  }
  SECTION("an --rdzv_id with '/' is refused, naming itself, not --log_dir (issue 34)") {
    const auto bad = plan({"--rdzv_id=a/b", "x.py"});
    REQUIRE_FALSE(bad.isOk());
    CHECK(bad.status().message() ==
          "--rdzv_id: expected an id without '/' (it names the run's log directory), e.g. job-42, "
          "got 'a/b'");
  }
  SECTION("--local_ranks_filter naming absent local ranks is said (issue 34)") {
    const auto none = planOk({"--nproc_per_node=2", "--local_ranks_filter=5", "x.py"});
    CHECK(none.warnings == std::vector<std::string>{
                               "--local_ranks_filter: local rank(s) 5 do not exist here (0..1): no "
                               "worker's output reaches the console"});
    const auto some = planOk({"--nproc_per_node=2", "--local_ranks_filter=1,5", "x.py"});
    CHECK(some.warnings == std::vector<std::string>{
                               "--local_ranks_filter: local rank(s) 5 do not exist here (0..1)"});
  }
  SECTION("an empty --rdzv_id gets a random one") {
    const auto p = planOk({"--rdzv_id=", "x.py"});
    CHECK(p.config.runId == "generated-id");
    CHECK(p.warnings.size() == 1);
  }
  SECTION("the real run id generator makes UUIDs") {
    auto host = launcher::readHostFacts();
    host.fileExists = [](const std::string&) { return true; };
    const auto a = planOk({"--standalone", "x.py"}, host).config.runId;
    const auto b = planOk({"--standalone", "x.py"}, host).config.runId;
    CHECK(a != b);
    CHECK(a.size() == 36);
    CHECK(a[14] == '4');
  }
}

TEST_CASE("more than one node makes a multi-node configuration", "[unit][launcher]") {
  SECTION("static: node rank 0 hosts the store at --master_port (29500 by default)") {
    const auto p0 = planOk({"--nnodes=2", "--node_rank=0", "x.py"});
    REQUIRE(p0.config.multiNode.has_value());
    CHECK(p0.config.multiNode->hostsStore);
    CHECK(p0.config.multiNode->nodeRank == 0);
    CHECK(p0.config.multiNode->lastCallTimeout.count() == 0);
    CHECK(p0.config.storePort == 29500);
    const auto p1 = planOk({"--nnodes=2", "--node_rank=1", "--master_addr=h0", "x.py"});
    CHECK_FALSE(p1.config.multiNode->hostsStore);
    CHECK(p1.config.masterAddr == "h0");
  }
  SECTION("c10d: MIN:MAX, is_host guessed from the endpoint, --rdzv_conf timeouts") {
    auto host = testHost();
    host.isThisHost = [](const std::string& h) { return h == "me"; };
    const auto p = planOk(
        {"--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_endpoint=me:29401", "--local_addr=10.9.9.9",
         "--rdzv_conf=join_timeout=5,last_call_timeout=0.5,keep_alive_interval=1,"
         "keep_alive_max_attempt=4,read_timeout=7,close_timeout=2,group_size=64",
         "x.py"},
        host);
    const auto& m = *p.config.multiNode;
    CHECK(m.minNodes == 2);
    CHECK(m.maxNodes == 4);
    CHECK(m.hostsStore);
    CHECK(m.hostGuessed);
    CHECK(m.nodeRank == -1);
    CHECK(m.joinTimeout.count() == 5000);
    CHECK(m.lastCallTimeout.count() == 500);
    CHECK(m.keepAliveInterval.count() == 1000);
    CHECK(m.keepAliveMaxAttempt == 4);
    CHECK(m.readTimeout.count() == 7000);
    CHECK(m.closeTimeout.count() == 2000);
    CHECK(m.groupSize == 64);
    CHECK(p.config.masterAddr == "me");  // the store's host, not --local_addr
    const auto q = planOk({"--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_endpoint=other:1",
                           "--rdzv_conf=is_host=1", "x.py"},
                          host);
    CHECK(q.config.multiNode->hostsStore);
    CHECK_FALSE(q.config.multiNode->hostGuessed);
  }
  SECTION("etcd: client URLs, the job's prefix, TLS and auth from --rdzv_conf") {
    auto host = testHost();
    host.env["DTRUN_ETCD_PASSWORD"] = "from-env";
    host.hostName = "node7";
    const auto p = planOk({"--nnodes=2:3", "--rdzv_backend=etcd-v3",
                           "--rdzv_endpoint=https://10.0.0.1:2379/,10.0.0.2:2379", "--rdzv_id=job9",
                           "--master_port=29600",
                           "--rdzv_conf=prefix=/team,cacert=ca.pem,cert=c.pem,key=c.key,"
                           "user=alice,lease_ttl=7,read_timeout=9",
                           "x.py"},
                          host);
    CHECK(p.rdzvBackend == "etcd");
    const auto& m = *p.config.multiNode;
    REQUIRE(m.etcd.has_value());
    CHECK(m.etcd->endpoints == std::vector<std::string>{"10.0.0.1:2379", "10.0.0.2:2379"});
    CHECK(m.etcd->prefix == "/team/job9/");
    CHECK(m.etcd->caFile == "ca.pem");
    CHECK(m.etcd->certFile == "c.pem");
    CHECK(m.etcd->keyFile == "c.key");
    CHECK(m.etcd->user == "alice");
    CHECK(m.etcd->password == "from-env");
    CHECK(m.etcd->leaseTtl.count() == 7);
    CHECK(m.readTimeout.count() == 9000);
    CHECK_FALSE(m.hostsStore);
    CHECK(m.nodeRank == -1);
    CHECK(p.config.masterAddr == "node7");  // the workers' store this node serves, if node 0
    CHECK(p.config.storePort == 29600);
    CHECK(p.warnings.empty());
    // One node still meets through etcd.
    const auto one = planOk({"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:2379", "x.py"});
    REQUIRE(one.config.multiNode.has_value());
    CHECK(one.config.multiNode->etcd->prefix.starts_with("/dtrun/"));
  }
}

TEST_CASE("OMP_NUM_THREADS defaults to 1 for more than one worker", "[unit][launcher]") {
  auto host = testHost();
  const auto p = planOk({"--nproc_per_node=2", "x.py"}, host);
  CHECK(p.config.defaultEnv ==
        std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "1"}});
  REQUIRE(p.notices.size() == 1);
  CHECK(p.notices[0] ==
        "*****************************************\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.\n"
        "*****************************************");
  CHECK(planOk({"x.py"}, host).config.defaultEnv.empty());
  host.env["OMP_NUM_THREADS"] = "";  // set, even if empty: torchrun leaves it alone
  CHECK(planOk({"--nproc_per_node=2", "x.py"}, host).notices.empty());
}

TEST_CASE("shutdown timeout: flag, then PET_, then TORCH_ELASTIC_SHUTDOWN_TIMEOUT, then 30 s",
          "[unit][launcher]") {
  auto host = testHost();
  host.env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "12";
  CHECK(planOk({"x.py"}, host).config.shutdownTimeout == 12s);
  host.env["PET_SHUTDOWN_TIMEOUT"] = "9";
  CHECK(planOk({"x.py"}, host).config.shutdownTimeout == 9s);
  CHECK(planOk({"--shutdown_timeout=0", "x.py"}, host).config.shutdownTimeout == 0s);
  host.env["PET_SHUTDOWN_TIMEOUT"] = "soon";
  CHECK(errorOf({"x.py"}, host) ==
        "PET_SHUTDOWN_TIMEOUT: expected a non-negative number of seconds, got 'soon'");
}

TEST_CASE("kill wait: 30 s after SIGKILL unless --kill_wait says otherwise", "[unit][launcher]") {
  CHECK(planOk({"x.py"}).config.killWait == 30s);
  CHECK(planOk({"--kill_wait=2.5", "x.py"}).config.killWait == 2500ms);
  CHECK(errorOf({"--kill_wait=0", "x.py"}) ==
        "--kill_wait: expected a positive number of seconds, got '0'");
}

TEST_CASE("each bad value is one line naming the flag", "[unit][launcher]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const auto [args, message] = GENERATE(values<Case>({
      {{}, "missing the entrypoint (usage: dtrun [options] <entrypoint> [args...])"},
      {{"--bogus", "x.py"}, "unrecognized option '--bogus' (see dtrun --help)"},
      {{"--bogus=3", "x.py"}, "unrecognized option '--bogus' (see dtrun --help)"},
      {{"--nproc_per_node=abc", "x.py"},
       "--nproc_per_node: expected a positive integer, gpu, cpu or auto (dtrun counts NVIDIA "
       "GPUs only: for xpu or another accelerator, give the number), got 'abc'"},
      {{"--nproc-per-node=0", "x.py"},
       "--nproc_per_node: expected a positive integer, gpu, cpu or auto (dtrun counts NVIDIA "
       "GPUs only: for xpu or another accelerator, give the number), got '0'"},
      {{"--nproc_per_node=xpu", "x.py"},
       "--nproc_per_node: expected a positive integer, gpu, cpu or auto (dtrun counts NVIDIA "
       "GPUs only: for xpu or another accelerator, give the number), got 'xpu'"},
      {{"--nnodes=0", "x.py"}, "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX, got '0'"},
      {{"--nnodes=3:2", "x.py"}, "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX, got '3:2'"},
      {{"--nnodes=1:2:3", "x.py"},
       "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX, got '1:2:3'"},
      {{"--nnodes=1:4", "x.py"},
       "--nnodes: expected a fixed node count with the static backend (use "
       "--rdzv_backend=c10d for MIN:MAX), got '1:4'"},
      {{"--standalone", "--nnodes=2", "x.py"},
       "--nnodes: expected 1 with --standalone (one node by definition), got '2'"},
      {{"--nnodes=2", "--rdzv_conf=join_timeout=soon", "x.py"},
       "--rdzv_conf: join_timeout expects a number of seconds, e.g. join_timeout=30, got 'soon'"},
      {{"--nnodes=2", "--rdzv_conf=is_host=maybe", "x.py"},
       "--rdzv_conf: is_host expects true or false, got 'maybe'"},
      {{"--nnodes=2", "--rdzv_conf=keep_alive_max_attempt=0", "x.py"},
       "--rdzv_conf: keep_alive_max_attempt expects a whole number from 1 to 1000, got '0'"},
      {{"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_conf=group_size=two", "x.py"},
       "--rdzv_conf: group_size expects a whole number of nodes per group, from 0 (no groups) to "
       "65536, got 'two'"},
      {{"--nnodes=2", "--rdzv_conf=group_size=4", "x.py"},
       "--rdzv_conf: group_size needs --rdzv_backend=c10d (static joins every node at one "
       "place)"},
      {{"--node_rank=-1", "x.py"}, "--node_rank: expected a non-negative integer, got '-1'"},
      {{"--node_rank=1", "x.py"}, "--node_rank: must be below --nnodes (1), got '1'"},
      {{"--rdzv_backend=etcd", "x.py"},
       "--rdzv_endpoint: the etcd backend needs etcd's client URLs, e.g. "
       "--rdzv_endpoint=127.0.0.1:2379 (several joined by commas)"},
      {{"--rdzv_backend=etcd-v2", "--rdzv_endpoint=127.0.0.1:2379", "x.py"},
       "--rdzv_backend: expected static, c10d or etcd (etcd-v2 speaks etcd's old v2 API, which "
       "current etcd no longer serves: --rdzv_backend=etcd speaks v3), got 'etcd-v2'"},
      {{"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1", "x.py"},
       "--rdzv_endpoint: etcd's client URLs are host:port[,host:port...] (e.g. 127.0.0.1:2379), "
       "got '127.0.0.1'"},
      {{"--rdzv_backend=etcd", "--rdzv_endpoint=https://127.0.0.1:2379", "x.py"},
       "--rdzv_conf: TLS to etcd needs cacert=<the CA file that signed etcd's certificate>"},
      {{"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:2379",
        "--rdzv_conf=cacert=ca.pem,cert=c.pem", "x.py"},
       "--rdzv_conf: cert and key go together (the client certificate and its private key)"},
      {{"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:2379", "--rdzv_conf=lease_ttl=0", "x.py"},
       "--rdzv_conf lease_ttl: expects whole seconds from 1 to 3600, got '0'"},
      {{"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:2379", "--rdzv_conf=password=x", "x.py"},
       "--rdzv_conf: a password needs user=<etcd user> (or unset DTRUN_ETCD_PASSWORD)"},
      {{"--rdzv_endpoint=::1", "x.py"},
       "--rdzv_endpoint: expected host[:port] or [ipv6]:port with a port from 0 to 65535, got "
       "'::1'"},
      {{"--rdzv_endpoint=h:99999", "x.py"},
       "--rdzv_endpoint: expected host[:port] or [ipv6]:port with a port from 0 to 65535, got "
       "'h:99999'"},
      {{"--rdzv_endpoint=h", "x.py"},
       "--rdzv_endpoint: expected host:port (the static backend needs the port), got 'h'"},
      {{"--rdzv_conf=a", "x.py"},
       "--rdzv_conf: expected key=value pairs separated by commas, e.g. join_timeout=600, got 'a'"},
      {{"--rdzv_conf=a=1,,b=2", "x.py"},
       "--rdzv_conf: expected key=value pairs separated by commas, e.g. join_timeout=600, got "
       "'a=1,,b=2'"},
      {{"--master_port=65536", "x.py"},
       "--master_port: expected a port number from 0 to 65535, got '65536'"},
      {{"--master_addr=", "x.py"}, "--master_addr: expected a host name or address, got ''"},
      {{"--max_restarts=-1", "x.py"}, "--max_restarts: expected a non-negative integer, got '-1'"},
      {{"--max_restarts=two", "x.py"},
       "--max_restarts: expected a non-negative integer, got 'two'"},
      {{"--monitor_interval=0", "x.py"},
       "--monitor_interval: expected a positive number of seconds, got '0'"},
      {{"--monitor_interval=nan", "x.py"},
       "--monitor_interval: expected a positive number of seconds, got 'nan'"},
      {{"--start_method=thread", "x.py"},
       "--start_method: expected spawn, fork or forkserver, got 'thread'"},
      {{"--role=", "x.py"}, "--role: expected a non-empty role name, got ''"},
      {{"-r", "4", "x.py"},
       "--redirects: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs "
       "like 0:3,1:1, got '4'"},
      {{"--tee=0:5", "x.py"},
       "--tee: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs like "
       "0:3,1:1, got '0:5'"},
      {{"--local_ranks_filter=0,-1", "x.py"},
       "--local_ranks_filter: expected a comma-separated list of local ranks, e.g. 0,1,3, got "
       "'0,-1'"},
      {{"--shutdown_timeout=-3", "x.py"},
       "--shutdown_timeout: expected a non-negative number of seconds, got '-3'"},
      {{"--signals_to_handle=SIGTERM,SIGFOO", "x.py"},
       "--signals_to_handle: expected comma-separated signal names like SIGTERM,SIGUSR1 (not "
       "SIGKILL or SIGSTOP), got 'SIGTERM,SIGFOO'"},
      {{"--signals_to_handle=SIGKILL", "x.py"},
       "--signals_to_handle: expected comma-separated signal names like SIGTERM,SIGUSR1 (not "
       "SIGKILL or SIGSTOP), got 'SIGKILL'"},
      {{"-m", "--no_python", "x"},
       "-m/--module and --no_python cannot be used together (a module needs python)"},
      {{"--virtual_local_rank", "x.py"},
       "--virtual-local-rank (a GPU per rank): 1 local ranks need 1 GPUs, but none is visible; "
       "lower --nproc_per_node or make more GPUs visible"},
      {{"--event_log_handler=console", "x.py"},
       "--event_log_handler: only 'null' is supported (torchelastic event handlers are Python "
       "plugins; --report writes the job's events as JSON), got 'console'"},
      {{"--logs_specs=mine", "x.py"},
       "--logs_specs: custom LogsSpecs are Python plugins dtrun cannot load (use --log_dir, "
       "--redirects, --tee and --local_ranks_filter), got 'mine'"},
      {{"--numa_binding=node", "x.py"},
       "--numa_binding=node: cannot read this machine's topology: no topology was recorded"},
      {{"--numa-binding=node", "--cpu_binding=split", "x.py"},
       "--numa_binding and --cpu_binding both choose the CPUs of each rank: give one "
       "(--numa-binding binds next to each rank's GPU, --cpu_binding=split divides the CPUs "
       "without GPUs)"},
      {{"--cpu_binding=even", "x.py"}, "--cpu_binding: expected split or none, got 'even'"},
      {{"--gpus=0,x", "x.py"},
       "--gpus: expected GPU indices as CUDA_VISIBLE_DEVICES names them, e.g. 0,2,5, got '0,x'"},
      {{"--gpus=1,1", "x.py"}, "--gpus: GPU 1 is listed twice in '1,1'"},
      {{"--gpus_per_worker=0", "x.py"},
       "--gpus_per_worker: expected a whole number from 1 to 1024, got '0'"},
      {{"--log-line-prefix-template=[${node}]", "x.py"},
       "--log_line_prefix_template: unknown variable ${node} in '[${node}]'; use ${role_name}, "
       "${rank}, ${local_rank}, ${hostname} or ${pid}"},
      {{"--log-level=loud", "x.py"},
       "--log-level: expected trace, debug, info, warn, error, critical or off, got 'loud'"},
  }));
  CAPTURE(args);
  const std::string got = errorOf(args);
  CHECK(got == message);
  CHECK(got.find('\n') == std::string::npos);
}

TEST_CASE("CLI11's own errors become one line naming the flag", "[unit][launcher]") {
  CHECK(parseErrorOf({"--nproc_per_node"}) == "--nproc_per_node: expected a value");
  CHECK(parseErrorOf({"-r"}) == "--redirects: expected a value");
  CHECK(parseErrorOf({"--standalone=maybe", "x.py"}) == "--standalone: invalid value 'maybe'");
}

TEST_CASE("the banner lists what torchrun's does", "[unit][launcher]") {
  const auto p = planOk({"--nproc_per_node=2", "--max_restarts=1", "--log_dir=/tmp/l", "-m",
                         "pkg.train", "--lr", "0.1"});
  const std::string banner = launcher::launchBanner(p);
  for (const char* expected :
       {"entrypoint          : pkg.train", "command             : python3 -u -m pkg.train --lr 0.1",
        "min_nodes           : 1", "max_nodes           : 1", "nproc_per_node      : 2",
        "run_id              : none", "rdzv_backend        : static",
        "rdzv_endpoint       : 127.0.0.1:0 (a free port)", "max_restarts        : 1",
        "log_dir             : /tmp/l", "signals_to_handle   : SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "shutdown_timeout    : 30 s"}) {
    CAPTURE(expected);
    CHECK(banner.find(expected) != std::string::npos);
  }
}

TEST_CASE("a launch prints one line unless --verbose", "[unit][launcher]") {
  const auto p = planOk({"--nproc_per_node=2", "--log_dir=/tmp/l", "-m", "pkg.train"});
  CHECK(launcher::launchSummary(p) ==
        "dtrun: pkg.train, 2 workers per node, 1 node, run none; logs in /tmp/l "
        "(--verbose: the launch configs)");
  const auto elastic = planOk(
      {"--nnodes=2:4", "--rdzv_backend=c10d", "--rdzv_endpoint=h:29400", "--no_python", "/bin/w"});
  CHECK(
      launcher::launchSummary(elastic).starts_with("dtrun: /bin/w, 1 worker per node, 2-4 nodes"));
  CHECK(launcher::launchSummary(elastic).find('\n') == std::string::npos);
}

TEST_CASE("a script that does not exist fails once, before any worker starts", "[unit][launcher]") {
  auto host = testHost();
  host.fileExists = [](const std::string&) { return false; };
  for (const std::string entry : {"./trian", "train.py"}) {
    const auto result = plan({"--nproc_per_node=2", entry, "--lr", "1"}, host);
    REQUIRE_FALSE(result.isOk());
    CHECK(result.status().code() == dtrun::Errc::kNotFound);
    CHECK(result.status().message() == "cannot run " + entry + ": No such file or directory");
  }
  // A module is looked up by the interpreter, not as a file.
  CHECK(plan({"-m", "pkg.train"}, host).isOk());
}

TEST_CASE("the store token: --rdzv_conf first, then the environment, files lose one newline",
          "[launcher]") {
  auto host = testHost();
  host.readFile = [](const std::string& path) -> std::optional<std::string> {
    if (path == "/secrets/token") {
      return std::string("from-file\n");
    }
    return std::nullopt;
  };
  CHECK(planOk({"prog"}, host).config.storeToken.empty());
  host.env["DTRUN_STORE_TOKEN_FILE"] = "/secrets/token";
  CHECK(planOk({"prog"}, host).config.storeToken == "from-file");
  host.env["DTRUN_STORE_TOKEN"] = "from-env";
  CHECK(planOk({"prog"}, host).config.storeToken == "from-env");
  CHECK(planOk({"--rdzv_conf", "token_file=/secrets/token", "prog"}, host).config.storeToken ==
        "from-file");
  CHECK(planOk({"--rdzv_conf", "token=from-cli", "prog"}, host).config.storeToken == "from-cli");

  CHECK(errorOf({"--rdzv_conf", "token_file=/nope", "prog"}, host) ==
        "--rdzv_conf token_file: cannot read '/nope' (give a readable file holding the store "
        "token)");
  host.env["DTRUN_STORE_TOKEN"] = "two words";
  CHECK(errorOf({"prog"}, host) ==
        "DTRUN_STORE_TOKEN: the store token must be 1 to 4096 characters without spaces or line "
        "breaks");
}
