#include "value_parsers.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>

#include "text.h"

namespace dtrun::launcher {

using text::isDigits;
using text::parseInt;
using text::split;
using text::trim;

Status expected(const Setting& setting, std::string_view what) {
  return Status::invalidArgument(setting.source + ": expected " + std::string(what) + ", got '" +
                                 setting.text + "'");
}

std::optional<double> parseNumber(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  double value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string joinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<std::pair<int, int>> parseNnodes(const Setting& setting) {
  const auto parts = split(setting.text, ':');
  std::optional<long long> min;
  std::optional<long long> max;
  if (parts.size() == 1) {
    min = max = parseInt(parts[0]);
  } else if (parts.size() == 2) {
    min = parseInt(parts[0]);
    max = parseInt(parts[1]);
  }
  if (!min || !max || *min <= 0 || *min > *max || *max > std::numeric_limits<int>::max()) {
    return expected(setting, "N or MIN:MAX with 0 < MIN <= MAX");
  }
  return std::pair{static_cast<int>(*min), static_cast<int>(*max)};
}

Result<int> parseNproc(const Setting& setting, const HostFacts& host) {
  const std::string_view text = trim(setting.text);
  if (text == "gpu") {
    if (host.gpuCount <= 0) {
      return Status::invalidArgument(
          setting.source +
          ": gpu asks for one worker per GPU, but no NVIDIA GPU is visible (no /dev/nvidia<N>, "
          "or CUDA_VISIBLE_DEVICES hides them)");
    }
    return host.gpuCount;
  }
  if (text == "cpu") {
    return std::max(host.cpuCount, 1);
  }
  if (text == "auto") {
    return host.gpuCount > 0 ? host.gpuCount : std::max(host.cpuCount, 1);
  }
  const auto value = parseInt(text);
  if (!value || *value < 1 || *value > std::numeric_limits<int>::max()) {
    return expected(setting,
                    "a positive integer, gpu, cpu or auto (dtrun counts NVIDIA GPUs only: for xpu "
                    "or another accelerator, give the number)");
  }
  return static_cast<int>(*value);
}

Result<int> parseNonNegative(const Setting& setting) {
  const auto value = parseInt(setting.text);
  if (!value || *value < 0 || *value > std::numeric_limits<int>::max()) {
    return expected(setting, "a non-negative integer");
  }
  return static_cast<int>(*value);
}

Result<int> parsePort(const Setting& setting) {
  const auto value = parseInt(setting.text);
  if (!value || *value < 0 || *value > 65535) {
    return expected(setting, "a port number from 0 to 65535");
  }
  return static_cast<int>(*value);
}

Result<std::vector<std::pair<std::string, std::string>>> parseRdzvConf(const Setting& setting) {
  std::vector<std::pair<std::string, std::string>> conf;
  if (trim(setting.text).empty()) {
    return conf;
  }
  for (const std::string_view item : split(setting.text, ',')) {
    const auto equals = item.find('=');
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view{} : trim(item.substr(equals + 1));
    if (key.empty() || value.empty()) {
      return expected(setting, "key=value pairs separated by commas, e.g. join_timeout=600");
    }
    std::erase_if(conf, [key](const auto& kv) { return kv.first == key; });  // last one wins
    conf.emplace_back(key, value);
  }
  return conf;
}

Result<std::optional<std::set<int>>> parseLocalRanksFilter(const Setting& setting) {
  if (trim(setting.text).empty()) {
    return std::optional<std::set<int>>{};
  }
  std::set<int> ranks;
  for (const std::string_view item : split(setting.text, ',')) {
    const std::string_view rank = trim(item);
    const auto value = isDigits(rank) ? parseInt(rank) : std::nullopt;
    if (!value || *value > std::numeric_limits<int>::max()) {
      return expected(setting, "a comma-separated list of local ranks, e.g. 0,1,3");
    }
    ranks.insert(static_cast<int>(*value));
  }
  return std::optional<std::set<int>>(std::move(ranks));
}

// A --rdzv_conf duration in seconds (torchrun's unit), as milliseconds.
Result<std::chrono::milliseconds> confSeconds(const std::string& key, const std::string& value) {
  const auto number = parseNumber(value);
  if (!number || *number < 0 || *number > 1e7) {
    return Status::invalidArgument("--rdzv_conf: " + key + " expects a number of seconds, e.g. " +
                                   key + "=30, got '" + value + "'");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(*number * 1000));
}

std::optional<agent::StreamSelection> parseStreamSelection(std::string_view text) {
  const auto streamsOf = [](std::string_view digit) -> std::optional<agent::Streams> {
    if (digit.size() != 1 || digit[0] < '0' || digit[0] > '3') {
      return std::nullopt;
    }
    return static_cast<agent::Streams>(digit[0] - '0');
  };
  agent::StreamSelection selection;
  if (const auto all = streamsOf(text)) {
    selection.all = *all;
    return selection;
  }
  for (const std::string_view item : split(text, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string_view::npos || !isDigits(item.substr(0, colon))) {
      return std::nullopt;
    }
    const auto rank = parseInt(item.substr(0, colon));
    const auto streams = streamsOf(item.substr(colon + 1));
    if (!rank || *rank > std::numeric_limits<int>::max() || !streams) {
      return std::nullopt;
    }
    selection.perRank[static_cast<int>(*rank)] = *streams;  // as torchrun's dict: last one wins
  }
  return selection;
}

std::optional<std::vector<int>> parseSignalNames(std::string_view text) {
  static const std::map<std::string_view, int> kSignals = {
      {"SIGHUP", SIGHUP},       {"SIGINT", SIGINT},     {"SIGQUIT", SIGQUIT},
      {"SIGILL", SIGILL},       {"SIGTRAP", SIGTRAP},   {"SIGABRT", SIGABRT},
      {"SIGIOT", SIGIOT},       {"SIGBUS", SIGBUS},     {"SIGFPE", SIGFPE},
      {"SIGUSR1", SIGUSR1},     {"SIGSEGV", SIGSEGV},   {"SIGUSR2", SIGUSR2},
      {"SIGPIPE", SIGPIPE},     {"SIGALRM", SIGALRM},   {"SIGTERM", SIGTERM},
      {"SIGCHLD", SIGCHLD},     {"SIGCONT", SIGCONT},   {"SIGTSTP", SIGTSTP},
      {"SIGTTIN", SIGTTIN},     {"SIGTTOU", SIGTTOU},   {"SIGURG", SIGURG},
      {"SIGXCPU", SIGXCPU},     {"SIGXFSZ", SIGXFSZ},   {"SIGVTALRM", SIGVTALRM},
      {"SIGPROF", SIGPROF},     {"SIGWINCH", SIGWINCH}, {"SIGIO", SIGIO},
      {"SIGPOLL", SIGPOLL},     {"SIGPWR", SIGPWR},     {"SIGSYS", SIGSYS},
      {"SIGSTKFLT", SIGSTKFLT},
  };
  std::vector<int> signals;
  for (const std::string_view item : split(text, ',')) {
    const auto it = kSignals.find(trim(item));
    if (it == kSignals.end()) {
      return std::nullopt;
    }
    if (std::find(signals.begin(), signals.end(), it->second) == signals.end()) {
      signals.push_back(it->second);
    }
  }
  return signals;
}

std::optional<Endpoint> parseEndpoint(std::string_view text) {
  text = trim(text);
  Endpoint endpoint;
  std::string_view portText;
  bool hasPort = false;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      return std::nullopt;
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return std::nullopt;
      }
      portText = rest.substr(1);
      hasPort = true;
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon) {
      return std::nullopt;  // a bare IPv6 address: its port would be ambiguous
    }
    endpoint.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      portText = text.substr(colon + 1);
      hasPort = true;
    }
  }
  // torchrun's host check: a dot-separated list of labels, an IPv4 or an IPv6 address.
  const bool hostOk =
      !endpoint.host.empty() && std::all_of(endpoint.host.begin(), endpoint.host.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' ||
               c == ':' || c == '-';
      });
  if (!hostOk) {
    return std::nullopt;
  }
  if (hasPort) {
    const auto port = isDigits(portText) ? parseInt(portText) : std::nullopt;
    if (!port || *port > 65535) {
      return std::nullopt;
    }
    endpoint.port = static_cast<int>(*port);
  }
  return endpoint;
}

int countVisibleGpus(int deviceNodes, const std::optional<std::string>& cudaVisibleDevices) {
  if (!cudaVisibleDevices) {
    return deviceNodes;
  }
  const std::string_view text = *cudaVisibleDevices;
  const auto items = split(text, ',');
  int visible = 0;
  if (text.starts_with("GPU-") || text.starts_with("MIG-")) {
    const std::string_view prefix = text.substr(0, 4);
    std::set<std::string_view> seen;
    for (const std::string_view item : items) {
      if (!item.starts_with(prefix)) {
        break;
      }
      if (!seen.insert(item).second) {
        return 0;
      }
      ++visible;
    }
    return std::min(visible, deviceNodes);
  }
  std::set<long long> seen;
  for (const std::string_view item : items) {
    // torch's _strtoul: the leading [+-]digits of the entry; anything else ends the list.
    const std::string_view entry = trim(item);
    std::size_t length = 0;
    while (length < entry.size() && (std::isdigit(static_cast<unsigned char>(entry[length])) != 0 ||
                                     (length == 0 && (entry[0] == '+' || entry[0] == '-')))) {
      ++length;
    }
    const auto ordinal = parseInt(entry.substr(0, length));
    if (!ordinal || *ordinal < 0) {
      break;
    }
    if (!seen.insert(*ordinal).second) {
      return 0;
    }
    if (*ordinal >= deviceNodes) {
      break;  // torch counts the visible devices up to the first one that does not exist
    }
    ++visible;
  }
  return visible;
}

std::vector<std::string> parseDuplicateFilters(std::string_view text) {
  std::vector<std::string> filters(1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      filters.back() += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      filters.back() += ',';
      ++i;
    } else {
      filters.emplace_back();
    }
  }
  std::erase_if(filters, [](const std::string& filter) { return filter.empty(); });
  return filters;
}
}  // namespace dtrun::launcher
