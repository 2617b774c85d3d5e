// The launcher's value parsers: each turns one option's text into a value or a one-line error
// naming the option and what it expects. Pure functions. (parseStreamSelection,
// parseSignalNames, parseEndpoint and countVisibleGpus are declared in launch_options.h.)
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/common.h"

#include "launch_options.h"

namespace dtrun::launcher {

// An option's text and where it came from, for messages: "--nproc_per_node" or
// "PET_NPROC_PER_NODE".
struct Setting {
  std::string text;
  std::string source;
};

// "<source>: expected <what>, got '<text>'".
Status expected(const Setting& setting, std::string_view what);

// A finite decimal number, optionally signed and surrounded by blanks.
std::optional<double> parseNumber(std::string_view text);
// "host:port", with brackets around an IPv6 address.
std::string joinHostPort(const std::string& host, int port);
// Seconds as Python prints them ("30", "0.5").
std::string formatSeconds(double seconds);

// --nnodes: N or MIN:MAX.
Result<std::pair<int, int>> parseNnodes(const Setting& setting);
// --nproc_per_node: a count, or auto, cpu, gpu as torchrun takes them.
Result<int> parseNproc(const Setting& setting, const HostFacts& host);
Result<int> parseNonNegative(const Setting& setting);
Result<int> parsePort(const Setting& setting);
// --rdzv_conf: key=value pairs joined by commas.
Result<std::vector<std::pair<std::string, std::string>>> parseRdzvConf(const Setting& setting);
// --local_ranks_filter: local ranks joined by commas.
Result<std::optional<std::set<int>>> parseLocalRanksFilter(const Setting& setting);
// A --rdzv_conf value in seconds.
Result<std::chrono::milliseconds> confSeconds(const std::string& key, const std::string& value);

}  // namespace dtrun::launcher
