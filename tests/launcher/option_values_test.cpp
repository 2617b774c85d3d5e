// Every help line true: what `dtrun --help` (and so the man page) says an option takes goes through
// the real parser, validate(), and is accepted: each word of optionValues() (the words the man page
// and the shell completion offer, each of which the help must name), each example the help gives
// ("e.g. 0:3,1:1"), and the default it states, which must also plan the same launch as leaving
// the option out.
#include <algorithm>
#include <cctype>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "dtrun/agent_config.h"

#include "plan_support.h"

namespace {

namespace launcher = dtrun::launcher;
using dtrun::testing::plan;

struct HelpLine {
  std::string dest;  // rdzv_backend
  std::string flag;  // --rdzv_backend
  std::string help;  // as --help prints it, " [env PET_...]" included
};

// Every option of the launch as CLI11 registered it: the help text users read.
std::vector<HelpLine> helpLines() {
  CLI::App app{"dtrun"};
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  std::vector<HelpLine> lines;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_name() == "--help" || option->get_lnames().empty()) {
      continue;
    }
    std::string dest = option->get_lnames().front();
    std::replace(dest.begin(), dest.end(), '-', '_');
    lines.push_back({dest, launcher::flagName(dest), option->get_description()});
  }
  return lines;
}

// A machine where every word can be planned: 8 GPUs on two sockets (tests/placement/topologies).
launcher::HostFacts roomyHost() {
  auto host = dtrun::testing::testHost();
  host.gpuCount = 8;
  host.deviceNodes = 8;
  host.netcheckProgram = "/usr/bin/true";
  host.pythonHookDir = "/hook";
  host.readTopology = [] {
    return dtrun::placement::readTopology(
        std::string(DTRUN_SOURCE_DIR) + "/tests/placement/topologies/amd-2s8g", {});
  };
  return host;
}

// `--<dest>=<value> x.py`, with two workers unless the option is the worker count itself (a
// per-rank example such as 0:3,1:1 names local rank 1).
dtrun::Result<launcher::LaunchPlan> planWith(const HelpLine& line,
                                             const std::optional<std::string>& value,
                                             const launcher::HostFacts& host = roomyHost(),
                                             std::vector<std::string> args = {}) {
  if (line.dest != "nproc_per_node") {
    args.emplace_back("--nproc_per_node=2");
  }
  if (value) {
    args.push_back(line.flag + "=" + *value);
  }
  args.emplace_back("x.py");
  return plan(args, host);
}

bool namesWord(const std::string& help, const std::string& word) {
  std::string escaped;
  for (const char c : word) {
    escaped += std::string(std::isalnum(static_cast<unsigned char>(c)) ? "" : "\\") + c;
  }
  return std::regex_search(help, std::regex("(^|[^A-Za-z0-9_-])" + escaped + "($|[^A-Za-z0-9_-])"));
}

// The default a help line states as a value: "(default 30)", "(default 1:1: one node; ...)",
// "(static backend; default 0)", "(default $VAR or 30)", "none (default)", "ranks (the default:
// ...)"; nullopt when it states none, or states it in words ("(default: a new directory under
// $TMPDIR)").
std::optional<std::string> statedDefault(const std::string& help) {
  static const std::regex kBefore(R"((?:^|\s)([A-Za-z0-9_.:-]+) \((?:the default[:;)]|default\)))");
  static const std::regex kAfter(R"((?:\(|; )default ([^;)]+))");
  std::smatch match;
  if (std::regex_search(help, match, kAfter)) {
    std::string text = match[1].str();
    // "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30", "[${role_name}${local_rank}]:, or $VAR": the
    // literal (the tests' environment is empty).
    if (const auto orAt = text.find(" or "); orAt != std::string::npos) {
      text = text.front() == '$' ? text.substr(orAt + 4) : text.substr(0, orAt);
      if (!text.empty() && text.back() == ',') {
        text.pop_back();
      }
    }
    if (const auto explained = text.find(": "); explained != std::string::npos) {
      text = text.substr(0, explained);  // "0: off", "1:1: one node"
    }
    return text;
  }
  if (std::regex_search(help, match, kBefore)) {
    return match[1].str();
  }
  return std::nullopt;
}

// What the plan holds beyond the dry run's text, as the options set it, with the empty settings
// that mean a default spelled out ("" log level = info, "" prefix = torchrun's).
std::string beyondDryRun(const launcher::LaunchPlan& p) {
  const auto& c = p.config;
  const auto& h = c.healthChecks;
  std::ostringstream out;
  out << "checks " << h.logDir << h.entrypoint << h.store << h.gpus << h.openFiles << h.network
      << " min_open_files " << h.minOpenFiles << " min_free " << h.minFreeBytes << " timeout "
      << h.timeout.count() << " gpu_wait " << h.gpuMemoryWait.count() << " gbps " << h.netMinGbps
      << " rtt " << h.netMaxRttUs << " kill_wait " << c.killWait.count() << " backoff "
      << c.restartBackoff.count() << "/" << c.restartBackoffMax.count() << " no_progress "
      << c.maxNoProgressAttempts << " console " << static_cast<int>(c.console) << " hook "
      << c.pythonHookDir << " verbose " << c.verbose << " level "
      << (p.logLevel.empty() ? "info" : p.logLevel) << " prefix "
      << (c.logLinePrefixTemplate.empty() ? dtrun::agent::kDefaultLinePrefixTemplate
                                          : c.logLinePrefixTemplate)
      << " filter " << c.localRanksFilter.has_value() << " binding " << p.placement;
  return out.str();
}

std::string planText(const launcher::LaunchPlan& p) {
  return launcher::dryRunText(p, {}) + "\n" + beyondDryRun(p);
}

}  // namespace

TEST_CASE("every word an option offers is named by its help and accepted by validate()",
          "[unit][launcher]") {
  int words = 0;
  for (const HelpLine& line : helpLines()) {
    for (const std::string& word : launcher::optionValues(line.dest)) {
      INFO(line.flag << "=" << word << ": " << line.help);
      CHECK(namesWord(line.help, word));
      // etcd's endpoint is required, and any answers (nothing connects while planning).
      const bool etcd = line.dest == "rdzv_backend" && word == "etcd";
      const auto planned =
          planWith(line, word, roomyHost(),
                   etcd ? std::vector<std::string>{"--rdzv_endpoint=127.0.0.1:2379"}
                        : std::vector<std::string>{});
      const std::string refusal = planned.isOk() ? "" : planned.status().message();
      INFO(refusal);
      // A scheduler's word plans only inside its job: refused as "--scheduler slurm: SLURM_JOB_ID
      // is not set ...", the word taken, not as "--scheduler: expected ...".
      CHECK((planned.isOk() ||
             (line.dest == "scheduler" && refusal.starts_with("--scheduler " + word + ": "))));
      ++words;
    }
  }
  CHECK(words >= 50);  // the table is read: 58 words of 14 options
  // A dest the table names that no option has would offer words for nothing.
  CHECK(launcher::optionValues("no_such_option").empty());
  CHECK(launcher::optionValues("rdzv_backend") ==
        std::vector<std::string>{"static", "c10d", "etcd"});
}

TEST_CASE("every example a help line gives is accepted by validate()", "[unit][launcher]") {
  static const std::regex kExample(R"(e\.g\. ([^\s;)]+))");
  int examples = 0;
  for (const HelpLine& line : helpLines()) {
    for (auto it = std::sregex_iterator(line.help.begin(), line.help.end(), kExample);
         it != std::sregex_iterator(); ++it) {
      const std::string example = (*it)[1].str();
      const auto planned = planWith(line, example);
      INFO(line.flag << "=" << example << ": " << planned.status().message());
      CHECK(planned.isOk());
      ++examples;
    }
  }
  CHECK(examples >= 2);  // --redirects' 0:3,1:1 and --gpus' 0,2,5 at least
}

TEST_CASE("the default each help line states is accepted and is the default", "[unit][launcher]") {
  const auto host = roomyHost();
  const auto bare = dtrun::testing::planOk({"--nproc_per_node=2", "x.py"}, host);
  int stated = 0;
  for (const HelpLine& line : helpLines()) {
    const auto fallback = statedDefault(line.help);
    if (!fallback) {
      // A default in any other form would escape this test: only "default: <words>" may.
      INFO(line.flag << ": " << line.help);
      CHECK((line.help.find("default") == std::string::npos ||
             line.help.find("default:") != std::string::npos));
      continue;
    }
    ++stated;
    INFO(line.flag << "=" << *fallback << ": " << line.help);
    const auto planned = planWith(line, *fallback, host);
    INFO(planned.status().message());
    REQUIRE(planned.isOk());
    if (line.dest == "nproc_per_node") {
      CHECK(planText(planned.value()) == planText(dtrun::testing::planOk({"x.py"}, host)));
      continue;
    }
    CHECK(planText(planned.value()) == planText(bare));
  }
  CHECK(stated >= 30);
}
