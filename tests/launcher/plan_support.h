// The launcher tests' way into validate(): dtrun's top-level parse of a command line, then the
// plan, on a made-up machine.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "launch_options.h"
#include "support/scoped.h"

namespace dtrun::testing {

// A machine with 8 CPUs, no GPU, an empty environment and a fixed random run id.
inline launcher::HostFacts testHost() {
  launcher::HostFacts host;
  host.cpuCount = 8;
  host.gpuCount = 0;
  host.makeRunId = [] { return std::string("generated-id"); };
  return host;
}

// Parses `args` (without the program name) as dtrun's top level does, then validates.
inline Result<launcher::LaunchPlan> plan(const std::vector<std::string>& args,
                                         const launcher::HostFacts& host = testHost()) {
  CLI::App app{"dtrun"};
  launcher::RawOptions raw;
  launcher::addLaunchOptions(app, raw);
  const Argv argv("dtrun", args);
  app.parse(launcher::argumentsForParse(argv.argc(), argv.argv()));
  raw.program = app.remaining();
  return launcher::validate(raw, host);
}

inline launcher::LaunchPlan planOk(const std::vector<std::string>& args,
                                   const launcher::HostFacts& host = testHost()) {
  auto result = plan(args, host);
  INFO(result.status().message());
  REQUIRE(result.isOk());
  return std::move(result).value();
}

// The message validate() refuses `args` with: an invalid argument (dtrun exits 2), on one line.
inline std::string errorOf(const std::vector<std::string>& args,
                           const launcher::HostFacts& host = testHost()) {
  auto result = plan(args, host);
  REQUIRE_FALSE(result.isOk());
  CHECK(result.status().code() == Errc::kInvalidArgument);
  std::string message = result.status().message();
  CHECK(message.find('\n') == std::string::npos);
  return message;
}

inline bool contains(const std::string& text, const std::string& part) {
  INFO(text);
  return text.find(part) != std::string::npos;
}

}  // namespace dtrun::testing
