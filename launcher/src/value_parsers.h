// The launcher's value parsers: each turns one option's text into a value, or a one-line error
// naming the option and what it expects. Pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "launch_model.h"

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
// The most seconds a duration option takes (--shutdown_timeout, --hang_timeout, the health
// checks' waits): keeps the milliseconds far from overflow.
inline constexpr double kMaxDurationSeconds = 1.0e6;
// The store's port when --rdzv_endpoint names none (torchrun's c10d default).
inline constexpr int kDefaultC10dPort = 29400;
// A --rdzv_conf value in seconds.
Result<std::chrono::milliseconds> confSeconds(const std::string& key, const std::string& value);

// torchrun's -r/--redirects and -t/--tee: "0".."3", or "local_rank:0-3" pairs joined by commas
// (any number of digits in the local rank, so ranks >= 10 can be addressed). nullopt if malformed.
std::optional<agent::StreamSelection> parseStreamSelection(std::string_view text);

// --duplicate_std{out,err}_filters: substrings joined by commas, ",," standing for a comma
// (torchrun's comma_separated_list: "Use double comma to escape a comma"). Empty substrings are
// dropped: they would match every line.
std::vector<std::string> parseDuplicateFilters(std::string_view text);

// Signal names ("SIGTERM,SIGUSR1") to numbers; nullopt if any name is unknown or unhandleable.
std::optional<std::vector<int>> parseSignalNames(std::string_view text);

struct Endpoint {
  std::string host;
  std::optional<int> port;
};
// "host", "host:port", "[v6]" or "[v6]:port"; nullopt if malformed (bare IPv6 needs brackets).
std::optional<Endpoint> parseEndpoint(std::string_view text);

// GPUs a worker can use: /dev/nvidia<N> nodes present, narrowed by CUDA_VISIBLE_DEVICES when set
// (parsed as torch.cuda does: stop at the first invalid entry, a repeated entry hides all).
int countVisibleGpus(int deviceNodes, const std::optional<std::string>& cudaVisibleDevices);

}  // namespace dtrun::launcher
