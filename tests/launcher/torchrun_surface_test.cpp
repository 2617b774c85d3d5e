// The rest of torchrun's surface through validate() and the dry-run text: --log_dir=/dev/null,
// dtrun's own TORCHELASTIC_ERROR_FILE, c10d with one node and a remote endpoint, and the refused
// options' one-line reasons.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "plan_support.h"
#include "support/scoped.h"

namespace {

namespace launcher = dtrun::launcher;
using dtrun::testing::errorOf;

using dtrun::testing::plan;
using dtrun::testing::planOk;
using dtrun::testing::testHost;
bool hasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("a log_dir of /dev/null writes no file, as torchrun's", "[unit][launcher]") {
  SECTION("both spellings; workers get an empty TORCHELASTIC_ERROR_FILE") {
    const std::string flag = GENERATE("--log_dir=/dev/null", "--log-dir=/dev/null");
    const auto p = planOk({flag, "--nproc_per_node=2", "--no_python", "/bin/w"});
    CHECK(p.config.discardsLogs());
    CHECK(p.warnings.empty());
    const std::string text = launcher::dryRunText(p, {"TORCHELASTIC_ERROR_FILE=/outer.json"});
    CHECK(hasLine(text, "    TORCHELASTIC_ERROR_FILE="));
    CHECK(hasLine(text, "    DTRUN_LOG_DIR="));
    CHECK(hasLine(text, "    DTRUN_PROGRESS_FILE="));
    CHECK(text.find("(none: --log_dir=/dev/null)") != std::string::npos);
    CHECK(text.find("/dev/null/") == std::string::npos);
  }
  SECTION("another directory is a directory") {
    CHECK_FALSE(planOk({"--log_dir=/dev/null/x", "x.py"}).config.discardsLogs());
    CHECK_FALSE(planOk({"x.py"}).config.discardsLogs());
  }
  SECTION("--hang_timeout needs progress files: refused, naming both and the fix") {
    const std::string error = errorOf({"--log_dir=/dev/null", "--hang_timeout=5", "x.py"});
    CHECK(error.find("--hang_timeout") != std::string::npos);
    CHECK(error.find("--log_dir=/dev/null") != std::string::npos);
    CHECK(error.find("give --log_dir a directory") != std::string::npos);
  }
  SECTION("redirects and duplicate filters have no file: said once each") {
    const auto p =
        planOk({"--log_dir=/dev/null", "-r", "3", "--duplicate_stdout_filters=loss", "x.py"});
    REQUIRE(p.warnings.size() == 2);
    CHECK(p.warnings[0] ==
          "--redirects: --log_dir=/dev/null writes no file; the streams stay on the console");
    CHECK(p.warnings[1] ==
          "--duplicate_stdout_filters: --log_dir=/dev/null writes no file; no line is copied");
    CHECK(planOk({"--log_dir=/dev/null", "-r", "0", "x.py"}).warnings.empty());
  }
}

TEST_CASE("dtrun's own TORCHELASTIC_ERROR_FILE comes from its environment", "[unit][launcher]") {
  auto host = testHost();
  CHECK(planOk({"x.py"}, host).config.errorFile.empty());
  host.env["TORCHELASTIC_ERROR_FILE"] = "/sched/error.json";
  const auto p = planOk({"--nproc_per_node=2", "x.py"}, host);
  CHECK(p.config.errorFile == "/sched/error.json");
  // The workers get their own files, never the launcher's.
  const std::string text = launcher::dryRunText(p, {"TORCHELASTIC_ERROR_FILE=/sched/error.json"});
  CHECK(hasLine(text,
                "    TORCHELASTIC_ERROR_FILE=$TMPDIR/dtrun-XXXXXX/none/attempt_0/1/error.json"));
}

TEST_CASE("c10d, one node: MASTER_ADDR names the host that serves the store", "[unit][launcher]") {
  auto host = testHost();
  host.isThisHost = [](const std::string& h) { return h == "me" || h == "127.0.0.1"; };
  SECTION("an endpoint on another host: a client of the store there, whose host workers get") {
    const auto p = planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=other:29411",
                           "--local_addr=10.0.0.5", "--rdzv_id=j", "x.py"},
                          host);
    REQUIRE(p.config.multiNode.has_value());
    CHECK_FALSE(p.config.multiNode->hostsStore);
    CHECK(p.config.multiNode->minNodes == 1);
    CHECK(p.config.multiNode->maxNodes == 1);
    CHECK(p.config.masterAddr == "other");
    CHECK(p.config.storePort == 29411);
    const std::string text = launcher::dryRunText(p, {});
    CHECK(hasLine(text, "    MASTER_ADDR=other"));
    CHECK(hasLine(text, "    MASTER_PORT=29411"));
    CHECK(hasLine(text, "  hosts_store         : no"));
  }
  SECTION("--rdzv_conf is_host=false: the same, for an endpoint this host could serve") {
    const auto p = planOk(
        {"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29412", "--rdzv_conf=is_host=0", "x.py"},
        host);
    REQUIRE(p.config.multiNode.has_value());
    CHECK_FALSE(p.config.multiNode->hostsStore);
    CHECK(p.config.masterAddr == "127.0.0.1");
  }
  SECTION("an endpoint on this host: its own store there, as before") {
    const auto p = planOk({"--rdzv_backend=c10d", "--rdzv_endpoint=me:29413", "x.py"}, host);
    CHECK_FALSE(p.config.multiNode.has_value());
    CHECK(p.config.masterAddr == "me");
    CHECK(p.config.storePort == 29413);
    const auto q = planOk(
        {"--rdzv_backend=c10d", "--rdzv_endpoint=me:29413", "--local_addr=10.0.0.5", "x.py"}, host);
    CHECK_FALSE(q.config.multiNode.has_value());
    CHECK(q.config.masterAddr == "10.0.0.5");
  }
  SECTION("no endpoint, --standalone and static keep their own store") {
    CHECK_FALSE(planOk({"--rdzv_backend=c10d", "x.py"}, host).config.multiNode.has_value());
    CHECK_FALSE(planOk({"--standalone", "--rdzv_endpoint=other:1", "x.py"}, host)
                    .config.multiNode.has_value());
    CHECK_FALSE(planOk({"--rdzv_endpoint=other:1", "x.py"}, host).config.multiNode.has_value());
  }
}

TEST_CASE("each refused option says why and what to use instead", "[unit][launcher]") {
  struct Refusal {
    std::vector<std::string> args;
    std::vector<std::string> says;
  };
  const std::vector<Refusal> refusals = {
      {{"--logs_specs=my.Specs", "x.py"}, {"--logs_specs", "Python plugin", "--log_dir"}},
      {{"--event_log_handler=console", "x.py"},
       {"--event_log_handler", "Python plugin", "null", "--report"}},
      {{"--rdzv_backend=etcd-v2", "x.py"}, {"--rdzv_backend", "v2 API", "--rdzv_backend=etcd"}},
      {{"--nproc_per_node=xpu", "x.py"}, {"--nproc_per_node", "for xpu", "give the number"}},
  };
  for (const Refusal& r : refusals) {
    const std::string error = errorOf(r.args);
    INFO(error);
    CHECK(error.find('\n') == std::string::npos);
    for (const std::string& piece : r.says) {
      CHECK(error.find(piece) != std::string::npos);
    }
  }
}
