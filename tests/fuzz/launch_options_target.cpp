#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "launch_options.h"

namespace dtrun::fuzz {
namespace {

constexpr std::string_view kLaunchOptions = "launch_options";

void checkValueParsers(std::string_view text) {
  if (const auto endpoint = launcher::parseEndpoint(text)) {
    assertInvariant(!endpoint->host.empty(), kLaunchOptions, "parseEndpoint accepts an empty host");
    assertInvariant(!endpoint->port || (*endpoint->port >= 0 && *endpoint->port <= 65535),
                    kLaunchOptions, "parseEndpoint accepts a port outside 0-65535");
  }
  if (const auto signals = launcher::parseSignalNames(text)) {
    for (const int signal : *signals) {
      assertInvariant(signal > 0 && signal < 65, kLaunchOptions,
                      "parseSignalNames returns a non-signal");
    }
  }
  if (const auto selection = launcher::parseStreamSelection(text)) {
    for (const auto& [rank, streams] : selection->perRank) {
      assertInvariant(rank >= 0, kLaunchOptions, "parseStreamSelection returns a negative rank");
      static_cast<void>(streams);
    }
  }
}

}  // namespace

void launchOptions(const std::uint8_t* data, std::size_t size) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): fuzz input is raw bytes
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  checkValueParsers(text);

  // The input as a command line: one "dest=value" per line ("rdzv_conf=join_timeout=5,..."), and
  // the environment: "env.NAME=value" (PET_* variables, SLURM_* for --scheduler).
  launcher::RawOptions raw;
  launcher::HostFacts host;
  host.cpuCount = 4;
  host.hostName = "node2";
  host.isThisHost = [](const std::string& name) { return name == "localhost"; };
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    const std::size_t equals = line.find('=');
    if (equals != std::string_view::npos && line.starts_with("env.")) {
      host.env[std::string(line.substr(4, equals - 4))] = std::string(line.substr(equals + 1));
    } else if (equals != std::string_view::npos) {
      raw.given[std::string(line.substr(0, equals))] = std::string(line.substr(equals + 1));
    }
    checkValueParsers(line);
    start = end + 1;
  }
  raw.program = {"train.py", "--epochs", "1"};
  const auto plan = launcher::validate(raw, host);
  if (!plan.isOk()) {
    assertOneLineError(kLaunchOptions, plan.status().message());
    return;
  }
  const launcher::LaunchPlan& p = plan.value();
  assertInvariant(p.minNodes >= 1 && p.maxNodes >= p.minNodes, kLaunchOptions,
                  "validate accepts a node range that is empty or below 1");
  assertInvariant(!launcher::launchBanner(p).empty(), kLaunchOptions, "an empty launch banner");
}

}  // namespace dtrun::fuzz
