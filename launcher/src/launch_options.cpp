#include "launch_options.h"

#include <array>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun/launcher.h"
#include "dtrun/scheduler.h"

#include "log.h"

extern char** environ;  // NOLINT(readability-identifier-naming): POSIX spells it so

namespace dtrun::launcher {
namespace {

constexpr std::string_view kUsage = "usage: dtrun [options] <entrypoint> [args...]";
constexpr int kDefaultC10dPort = 29400;
constexpr int kDefaultStaticPort = 29500;  // torchrun's --master_port default
constexpr double kDefaultShutdownSeconds = 30.0;
constexpr double kMaxShutdownSeconds = 1.0e6;  // keeps the milliseconds far from overflow
constexpr std::string_view kDefaultSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
constexpr int kUsageError = 2;

enum class Kind : std::uint8_t { kValue, kFlag };

// One torchrun option. `dest` is argparse's attribute name: the underscore spelling, the dash
// spelling (dest with '-') and the PET_<DEST> environment variable all derive from it.
struct OptionSpec {
  std::string_view dest;
  std::string_view shortName;  // "-m", "-r", "-t" or ""
  Kind kind;
  bool hasEnv;  // torchrun's action=env / check_env
  std::string_view help;
};

constexpr std::array kOptions = {
    OptionSpec{"nnodes", "", Kind::kValue, true,
               "Number of nodes, N or MIN:MAX (default 1:1; this dtrun runs a single node)"},
    OptionSpec{"nproc_per_node", "", Kind::kValue, true,
               "Workers on this node: a positive integer, gpu, cpu or auto (default 1)"},
    OptionSpec{"rdzv_backend", "", Kind::kValue, true,
               "Rendezvous backend: static or c10d (default static)"},
    OptionSpec{"rdzv_endpoint", "", Kind::kValue, true,
               "Rendezvous store host[:port] or [ipv6]:port (c10d's default port 29400)"},
    OptionSpec{"rdzv_id", "", Kind::kValue, true,
               "Job id, exported as TORCHELASTIC_RUN_ID (default none; --standalone: random)"},
    OptionSpec{"rdzv_conf", "", Kind::kValue, true, "Rendezvous settings key1=value1,key2=value2"},
    OptionSpec{"standalone", "", Kind::kFlag, true,
               "Single-node job: c10d store on a free port, random run id"},
    OptionSpec{"max_restarts", "", Kind::kValue, true,
               "Worker-group restarts allowed after failures (default 0)"},
    OptionSpec{"monitor_interval", "", Kind::kValue, true,
               "Seconds between worker polls in torchrun (default 0.1); accepted, dtrun does not "
               "poll"},
    OptionSpec{"start_method", "", Kind::kValue, true,
               "spawn, fork or forkserver (default spawn); accepted, unused by script entrypoints"},
    OptionSpec{"event_log_handler", "", Kind::kValue, true,
               "torchelastic event handler; only null (the default) is supported"},
    OptionSpec{"role", "", Kind::kValue, true,
               "Worker role, exported as ROLE_NAME (default default)"},
    OptionSpec{"module", "-m", Kind::kFlag, true,
               "Run the entrypoint as a Python module: python -u -m <entrypoint>"},
    OptionSpec{"no_python", "", Kind::kFlag, true,
               "Execute the entrypoint directly instead of through python -u"},
    OptionSpec{"run_path", "", Kind::kFlag, true,
               "Run the entrypoint as a Python script (python -u <entrypoint>)"},
    OptionSpec{"log_dir", "", Kind::kValue, true,
               "Base directory for worker logs (default: a new directory under $TMPDIR)"},
    OptionSpec{"redirects", "-r", Kind::kValue, true,
               "Worker streams to log files: 0 none, 1 stdout, 2 stderr, 3 both; or per local "
               "rank, e.g. 0:3,1:1 (default 0)"},
    OptionSpec{"tee", "-t", Kind::kValue, true,
               "Like --redirects, and also copy to the console with a [<role><rank>]: prefix"},
    OptionSpec{"local_ranks_filter", "", Kind::kValue, true,
               "Comma list of local ranks whose output reaches the console (default all)"},
    OptionSpec{"node_rank", "", Kind::kValue, true,
               "Rank of this node (static backend; default 0)"},
    OptionSpec{"master_addr", "", Kind::kValue, true,
               "Address workers reach the store at (static backend; default 127.0.0.1)"},
    OptionSpec{"master_port", "", Kind::kValue, true,
               "Port of the store (static backend; default: a free port)"},
    OptionSpec{"local_addr", "", Kind::kValue, true,
               "Address this node advertises (c10d: the workers' MASTER_ADDR)"},
    OptionSpec{"logs_specs", "", Kind::kValue, false,
               "Custom torchelastic LogsSpecs: not supported"},
    OptionSpec{"numa_binding", "", Kind::kValue, false, "NUMA binding: not supported yet"},
    OptionSpec{"signals_to_handle", "", Kind::kValue, true,
               "Signals forwarded to the workers before dtrun exits (default "
               "SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
    OptionSpec{"shutdown_timeout", "", Kind::kValue, true,
               "Seconds from the forwarded signal to SIGKILL (default "
               "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30)"},
    OptionSpec{"virtual_local_rank", "", Kind::kFlag, true,
               "One visible GPU per worker: not supported yet"},
    OptionSpec{"duplicate_stdout_filters", "", Kind::kValue, true,
               "Copy matching tee'd stdout lines to a file: not supported yet"},
    OptionSpec{"duplicate_stderr_filters", "", Kind::kValue, true,
               "Copy matching tee'd stderr lines to a file: not supported yet"},
    OptionSpec{"dry_run", "", Kind::kFlag, false,
               "Print the resolved configuration, the rank table and each worker's environment, "
               "then exit without starting anything"},
    OptionSpec{"report", "", Kind::kValue, false,
               "Write the job's run report (JSON, docs/report.schema.json) to this file at exit"},
    OptionSpec{"hang_timeout", "", Kind::kValue, false,
               "Seconds without progress (or a rank lagging by as much) before dtrun dumps every "
               "worker's stack and fails the round (default 0: off)"},
    OptionSpec{"verbose", "", Kind::kFlag, false,
               "Print each attempt's startup timeline (agent start to communicators ready)"},
    OptionSpec{"scheduler", "", Kind::kValue, false,
               "Batch scheduler whose allocation sets --nnodes, --node_rank, --master_addr, "
               "--master_port and --rdzv_id when they are not given: auto, slurm, pbs or none "
               "(default auto: SLURM_JOB_ID or PBS_JOBID)"},
    OptionSpec{"log_level", "", Kind::kValue, false,
               "dtrun's own logging: trace, debug, info, warn, error, critical or off (default "
               "$DTRUN_LOG_LEVEL or info)"},
};

const OptionSpec* findSpec(std::string_view dest) {
  for (const OptionSpec& spec : kOptions) {
    if (spec.dest == dest) {
      return &spec;
    }
  }
  return nullptr;
}

std::string flagName(std::string_view dest) {
  if (dest == "log_level") {
    return "--log-level";  // dtrun's own option: dash first, as the rest of dtrun spells it
  }
  return "--" + std::string(dest);
}

std::string envName(std::string_view dest) {
  std::string name = "PET_";
  for (const char c : dest) {
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n\r");
  if (first == std::string_view::npos) {
    return {};
  }
  const auto last = text.find_last_not_of(" \t\n\r");
  return text.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) {
      return parts;
    }
    start = end + 1;
  }
}

// A decimal integer, optionally signed and surrounded by blanks (as Python's int() takes it).
std::optional<long long> parseInt(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') {
    text.remove_prefix(1);
  }
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
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

bool isDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string joinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string formatSeconds(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

std::string randomRunId() {
  std::random_device device;
  std::array<unsigned, 16> bytes{};
  for (unsigned& b : bytes) {
    b = device() & 0xffU;
  }
  bytes[6] = (bytes[6] & 0x0fU) | 0x40U;  // version 4
  bytes[8] = (bytes[8] & 0x3fU) | 0x80U;  // RFC 4122 variant
  constexpr std::string_view kHex = "0123456789abcdef";
  std::string id;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      id += '-';
    }
    id += kHex[bytes[i] >> 4U];
    id += kHex[bytes[i] & 0x0fU];
  }
  return id;
}

bool isExecutableFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// An option's text and where it came from, for messages: "--nproc_per_node" or
// "PET_NPROC_PER_NODE".
struct Setting {
  std::string text;
  std::string source;
};

Status expected(const Setting& setting, std::string_view what) {
  return Status::invalidArgument(setting.source + ": expected " + std::string(what) + ", got '" +
                                 setting.text + "'");
}

// Resolves each option: command line, then PET_<DEST>, then the caller's default.
class Resolver {
 public:
  Resolver(const RawOptions& raw, const HostFacts& host) : raw_(raw), host_(host) {}

  // What the user said: the command line, then PET_<DEST>.
  [[nodiscard]] std::optional<Setting> given(std::string_view dest) const {
    if (const auto it = raw_.given.find(dest); it != raw_.given.end()) {
      return Setting{it->second, flagName(dest)};
    }
    const OptionSpec* spec = findSpec(dest);
    if (spec != nullptr && spec->hasEnv) {
      const std::string name = envName(dest);
      if (const auto it = host_.env.find(name); it != host_.env.end()) {
        return Setting{it->second, name};
      }
    }
    return std::nullopt;
  }

  // What the user said, else what the batch scheduler supplied.
  [[nodiscard]] std::optional<Setting> find(std::string_view dest) const {
    if (auto found = given(dest)) {
      return found;
    }
    if (const auto it = supplied_.find(dest); it != supplied_.end()) {
      return it->second;
    }
    return std::nullopt;
  }

  // A value from the batch scheduler, below anything the user gave. False when the user's wins.
  bool supply(std::string_view dest, Setting setting) {
    supplied_.insert_or_assign(std::string(dest), std::move(setting));
    return !given(dest).has_value();
  }

  [[nodiscard]] Setting get(std::string_view dest, std::string_view fallback) const {
    auto found = find(dest);
    return found ? *found : Setting{std::string(fallback), flagName(dest)};
  }

  // torchrun's check_env: a flag on the command line is true; else PET_<DEST> is an integer,
  // non-zero meaning true; else false.
  [[nodiscard]] Result<bool> flag(std::string_view dest) const {
    const auto found = find(dest);
    if (!found) {
      return false;
    }
    if (found->source.starts_with("--")) {
      return true;
    }
    const auto value = parseInt(found->text);
    if (!value) {
      return expected(*found, "1 or 0");
    }
    return *value != 0;
  }

  [[nodiscard]] std::optional<std::string> env(std::string_view name) const {
    if (const auto it = host_.env.find(name); it != host_.env.end()) {
      return it->second;
    }
    return std::nullopt;
  }

 private:
  const RawOptions& raw_;  // both outlive the Resolver, a local of validate()
  const HostFacts& host_;
  std::map<std::string, Setting, std::less<>> supplied_;
};

// The entrypoint and its arguments, minus a leading "--"; unknown options before the entrypoint
// (CLI11 leaves them in front) are an error.
Result<std::vector<std::string>> programOf(const RawOptions& raw) {
  std::vector<std::string> program = raw.program;
  if (!program.empty() && program.front() == "--") {
    program.erase(program.begin());
  } else if (!program.empty() && program.front().size() > 1 && program.front().front() == '-') {
    const std::string& option = program.front();
    return Status::invalidArgument("unrecognized option '" + option.substr(0, option.find('=')) +
                                   "' (see dtrun --help)");
  }
  if (program.empty() || program.front().empty()) {
    return Status::invalidArgument("missing the entrypoint (" + std::string(kUsage) + ")");
  }
  return program;
}

Status checkUnsupported(const Resolver& options) {
  if (const auto handler = options.find("event_log_handler"); handler && handler->text != "null") {
    return Status::invalidArgument(
        handler->source + ": only 'null' is supported (torchelastic event handlers are Python " +
        "plugins), got '" + handler->text + "'");
  }
  if (const auto specs = options.find("logs_specs")) {
    return Status::invalidArgument(
        specs->source + ": custom LogsSpecs are Python plugins and not supported, got '" +
        specs->text + "'");
  }
  if (const auto numa = options.find("numa_binding")) {
    return Status::invalidArgument(numa->source + ": NUMA binding is not supported yet, got '" +
                                   numa->text + "'");
  }
  for (const std::string_view dest : {"duplicate_stdout_filters", "duplicate_stderr_filters"}) {
    if (const auto filters = options.find(dest); filters && !filters->text.empty()) {
      return Status::invalidArgument(filters->source + ": not supported yet, got '" +
                                     filters->text + "'");
    }
  }
  return Status::ok();
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
    return expected(setting, "a positive integer, gpu, cpu or auto");
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

// The store endpoint, run id and MASTER_ADDR, from the backend and its options.
Status resolveRendezvous(const Resolver& options, const HostFacts& host, bool standalone,
                         LaunchPlan& plan) {
  agent::AgentConfig& config = plan.config;
  const auto backend = options.get("rdzv_backend", "static");
  const auto endpoint = options.find("rdzv_endpoint");
  const auto localAddr = options.find("local_addr");
  const auto masterAddr = options.find("master_addr");
  const auto masterPort = options.find("master_port");
  if (backend.text != "static" && backend.text != "c10d") {
    return expected(backend, "static or c10d (the backends dtrun supports)");
  }
  std::optional<int> port;
  if (masterPort) {
    auto parsed = parsePort(*masterPort);
    if (!parsed.isOk()) {
      return parsed.status();
    }
    port = parsed.value();
  }
  std::optional<Endpoint> parsedEndpoint;
  if (endpoint && !trim(endpoint->text).empty() && !standalone) {
    parsedEndpoint = parseEndpoint(endpoint->text);
    if (!parsedEndpoint) {
      return expected(*endpoint, "host[:port] or [ipv6]:port with a port from 0 to 65535");
    }
  }
  if (localAddr && trim(localAddr->text).empty()) {
    return expected(*localAddr, "a host name or address");
  }

  config.runId = options.get("rdzv_id", "none").text;
  if (standalone) {
    if (options.find("rdzv_backend") || options.find("rdzv_endpoint") || options.find("rdzv_id")) {
      plan.warnings.emplace_back(
          "--standalone ignores --rdzv_backend, --rdzv_endpoint and --rdzv_id");
    }
    plan.rdzvBackend = "c10d";
    config.runId = host.makeRunId();
    config.masterAddr = localAddr ? localAddr->text : "127.0.0.1";
    config.storePort = 0;
    plan.rdzvEndpoint = "localhost:0";
  } else if (backend.text == "static") {
    plan.rdzvBackend = "static";
    if (parsedEndpoint) {
      if (!parsedEndpoint->port) {
        return expected(*endpoint, "host:port (the static backend needs the port)");
      }
      config.masterAddr = parsedEndpoint->host;
      port = parsedEndpoint->port;
    } else if (masterAddr) {
      if (trim(masterAddr->text).empty()) {
        return expected(*masterAddr, "a host name or address");
      }
      config.masterAddr = std::string(trim(masterAddr->text));
    }
    config.storePort = static_cast<std::uint16_t>(port.value_or(0));
    plan.rdzvEndpoint = joinHostPort(config.masterAddr, config.storePort);
  } else {
    plan.rdzvBackend = "c10d";
    if (masterAddr || masterPort) {
      plan.warnings.emplace_back(
          "--master_addr and --master_port apply to the static backend only; ignored with c10d "
          "(use --rdzv_endpoint)");
    }
    const Endpoint where = parsedEndpoint.value_or(Endpoint{"localhost", std::nullopt});
    config.storePort = static_cast<std::uint16_t>(where.port.value_or(kDefaultC10dPort));
    config.masterAddr = localAddr ? localAddr->text : where.host;
    plan.rdzvEndpoint = joinHostPort(where.host, config.storePort);
  }
  config.storeListenHost = "";
  if (config.runId.empty()) {
    config.runId = host.makeRunId();
    plan.warnings.push_back("--rdzv_id is empty; using the random run id " + config.runId);
  }
  return Status::ok();
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

// Multi-node settings: who hosts the store, the node rank hint and the --rdzv_conf timeouts.
Result<agent::MultiNodeConfig> resolveMultiNode(const Resolver& options, const HostFacts& host,
                                                LaunchPlan& plan, int nodeRank) {
  agent::MultiNodeConfig multi;
  agent::AgentConfig& config = plan.config;
  multi.minNodes = plan.minNodes;
  multi.maxNodes = plan.maxNodes;
  const bool explicitRank = options.find("node_rank").has_value();
  if (plan.rdzvBackend == "static") {
    multi.nodeRank = nodeRank;
    multi.hostsStore = nodeRank == 0;
    multi.lastCallTimeout = std::chrono::milliseconds(0);  // every node is expected
    if (config.storePort == 0) {
      config.storePort = kDefaultStaticPort;
      plan.rdzvEndpoint = joinHostPort(config.masterAddr, config.storePort);
    }
  } else {
    multi.nodeRank = explicitRank ? nodeRank : -1;
    const auto endpointHost = plan.rdzvEndpoint.substr(0, plan.rdzvEndpoint.rfind(':'));
    const std::string bare = endpointHost.starts_with('[') && endpointHost.ends_with(']')
                                 ? endpointHost.substr(1, endpointHost.size() - 2)
                                 : endpointHost;
    multi.hostsStore = host.isThisHost(bare);
    multi.hostGuessed = true;
    config.masterAddr = bare;  // every node reaches the store (and workers) there
  }
  for (const auto& [key, value] : plan.rdzvConf) {
    std::chrono::milliseconds* target = nullptr;
    if (key == "join_timeout" || key == "timeout") {
      target = &multi.joinTimeout;
    } else if (key == "last_call_timeout") {
      target = &multi.lastCallTimeout;
    } else if (key == "close_timeout") {
      target = &multi.closeTimeout;
    } else if (key == "keep_alive_interval") {
      target = &multi.keepAliveInterval;
    } else if (key == "read_timeout") {
      target = &multi.readTimeout;
    } else if (key == "keep_alive_max_attempt") {
      const auto n = isDigits(value) ? parseInt(value) : std::nullopt;
      if (!n || *n < 1 || *n > 1000) {
        return Status::invalidArgument(
            "--rdzv_conf: keep_alive_max_attempt expects a whole number from 1 to 1000, got '" +
            value + "'");
      }
      multi.keepAliveMaxAttempt = static_cast<int>(*n);
    } else if (key == "is_host") {
      if (value != "1" && value != "0" && value != "true" && value != "false" && value != "True" &&
          value != "False") {
        return Status::invalidArgument("--rdzv_conf: is_host expects true or false, got '" + value +
                                       "'");
      }
      multi.hostsStore = value == "1" || value == "true" || value == "True";
      multi.hostGuessed = false;
    } else if (key == "heartbeat_timeout" || key == "use_agent_store" || key == "token" ||
               key == "token_file") {
      // torchrun's per-operation heartbeat deadline and store sharing: dtrun's heartbeats are
      // one-way messages and its agents always share their store. The token is
      // resolveStoreToken's, for one node as for many.
    } else {
      plan.warnings.push_back(
          "--rdzv_conf: unknown key '" + key +
          "' ignored (known: " + "join_timeout, last_call_timeout, close_timeout, " +
          "keep_alive_interval, keep_alive_max_attempt, read_timeout, is_host, token, token_file)");
    }
    if (target != nullptr) {
      auto duration = confSeconds(key, value);
      if (!duration.isOk()) {
        return duration.status();
      }
      *target = duration.value();
    }
  }
  if (multi.keepAliveInterval.count() <= 0 || multi.readTimeout.count() <= 0) {
    return Status::invalidArgument(
        "--rdzv_conf: keep_alive_interval and read_timeout must be above 0 seconds");
  }
  return multi;
}

}  // namespace

Result<std::string> resolveStoreToken(
    const std::vector<std::pair<std::string, std::string>>& rdzvConf, const HostFacts& host) {
  std::string source;
  std::optional<std::string> token;
  std::optional<std::string> file;
  for (const auto& [key, value] : rdzvConf) {
    if (key == "token" && !token) {
      token = value;
      source = "--rdzv_conf token";
    } else if (key == "token_file" && !token && !file) {
      file = value;
      source = "--rdzv_conf token_file";
    }
  }
  if (!token && !file) {
    if (const auto it = host.env.find("DTRUN_STORE_TOKEN"); it != host.env.end()) {
      token = it->second;
      source = "DTRUN_STORE_TOKEN";
    } else if (const auto f = host.env.find("DTRUN_STORE_TOKEN_FILE"); f != host.env.end()) {
      file = f->second;
      source = "DTRUN_STORE_TOKEN_FILE";
    }
  }
  if (!token && file) {
    token = host.readFile(*file);
    if (!token) {
      return Status::invalidArgument(source + ": cannot read '" + *file +
                                     "' (give a readable file holding the store token)");
    }
    while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) {
      token->pop_back();
    }
  }
  if (!token) {
    return std::string();
  }
  constexpr std::size_t kMaxToken = 4096;
  if (token->empty() || token->size() > kMaxToken ||
      std::any_of(token->begin(), token->end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; })) {
    return Status::invalidArgument(source +
                                   ": the store token must be 1 to 4096 characters "
                                   "without spaces or line breaks");
  }
  return *token;
}

namespace {

// Role, log directory, redirects, tee and the console filter.
Status resolveOutput(const Resolver& options, agent::AgentConfig& config) {
  const auto role = options.get("role", "default");
  if (trim(role.text).empty()) {
    return expected(role, "a non-empty role name");
  }
  config.role = role.text;
  config.logDir = options.get("log_dir", "").text;

  for (const auto& [dest, target] :
       {std::pair{"redirects", &config.redirects}, std::pair{"tee", &config.tee}}) {
    const auto setting = options.get(dest, "0");
    auto selection = parseStreamSelection(setting.text);
    if (!selection) {
      return expected(setting,
                      "0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs "
                      "like 0:3,1:1");
    }
    *target = std::move(*selection);
  }
  auto filter = parseLocalRanksFilter(options.get("local_ranks_filter", ""));
  if (!filter.isOk()) {
    return filter.status();
  }
  config.localRanksFilter = std::move(filter).value();
  return Status::ok();
}

// How a stop signal is handled: which signals, and the grace period before SIGKILL.
Status resolveStopping(const Resolver& options, agent::AgentConfig& config) {
  auto shutdown = options.find("shutdown_timeout");
  if (!shutdown) {
    if (const auto fromEnv = options.env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
      shutdown = Setting{*fromEnv, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
    }
  }
  const Setting shutdownSetting =
      shutdown.value_or(Setting{formatSeconds(kDefaultShutdownSeconds), "--shutdown_timeout"});
  const auto shutdownSeconds = parseNumber(shutdownSetting.text);
  if (!shutdownSeconds || *shutdownSeconds < 0 || *shutdownSeconds > kMaxShutdownSeconds) {
    return expected(shutdownSetting, "a non-negative number of seconds");
  }
  config.shutdownTimeout = std::chrono::milliseconds(std::llround(*shutdownSeconds * 1000.0));

  const auto signalsSetting = options.get("signals_to_handle", kDefaultSignals);
  auto signals = parseSignalNames(signalsSetting.text);
  if (!signals) {
    return expected(signalsSetting,
                    "comma-separated signal names like SIGTERM,SIGUSR1 (not SIGKILL or SIGSTOP)");
  }
  config.signalsToHandle = std::move(*signals);
  config.signalsToHandleText = signalsSetting.text;
  // Preemption warnings (SIGUSR1/SIGUSR2, e.g. sbatch --signal=USR1@120) go to the workers and
  // the job goes on, unless --signals_to_handle makes them stop signals as torchrun would.
  for (const int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(config.signalsToHandle.begin(), config.signalsToHandle.end(), sig) ==
        config.signalsToHandle.end()) {
      config.signalsToForward.push_back(sig);
    }
  }
  return Status::ok();
}

// dtrun's own job insight: --report, --hang_timeout, --verbose and --dry-run.
Status resolveInsight(const Resolver& options, LaunchPlan& plan) {
  agent::AgentConfig& config = plan.config;
  if (const auto report = options.find("report")) {
    if (trim(report->text).empty()) {
      return expected(*report, "a file path for the JSON report");
    }
    config.reportFile = report->text;
  }
  const auto hangSetting = options.get("hang_timeout", "0");
  const auto hangSeconds = parseNumber(hangSetting.text);
  if (!hangSeconds || *hangSeconds < 0 || *hangSeconds > kMaxShutdownSeconds) {
    return expected(hangSetting, "a non-negative number of seconds (0 = off)");
  }
  config.hangTimeout = std::chrono::milliseconds(std::llround(*hangSeconds * 1000.0));
  auto verbose = options.flag("verbose");
  auto dryRun = options.flag("dry_run");
  if (!verbose.isOk() || !dryRun.isOk()) {
    return verbose.isOk() ? dryRun.status() : verbose.status();
  }
  config.verbose = verbose.value();
  plan.dryRun = dryRun.value();
  return Status::ok();
}

// The batch scheduler's allocation, unless --scheduler none or --standalone turns detection off.
Result<std::optional<scheduler::Allocation>> detectScheduler(const Resolver& options,
                                                             const HostFacts& host, bool standalone,
                                                             LaunchPlan& plan) {
  const auto modeSetting = options.get("scheduler", "auto");
  const auto mode = scheduler::parseMode(trim(modeSetting.text));
  if (!mode) {
    return expected(modeSetting, "auto, slurm, pbs or none");
  }
  if (*mode == scheduler::Mode::kNone || standalone) {
    plan.scheduler = standalone ? "none (--standalone)" : "none (--scheduler none)";
    return std::optional<scheduler::Allocation>();
  }
  scheduler::JobEnvironment job;
  job.env = host.env;
  job.hostName = host.hostName;
  job.readFile = host.readFile;
  auto found = scheduler::detect(*mode, job);
  if (found.isOk() && !found.value()) {
    plan.scheduler = "none (neither SLURM_JOB_ID nor PBS_JOBID is set)";
  }
  return found;
}

// How the allocation was used, for the launch banner: what it supplied, which flags won.
struct SchedulerUse {
  std::vector<std::string> supplied;
  std::vector<std::string> overridden;

  void offer(Resolver& options, std::string_view dest, const std::string& value,
             const std::string& from) {
    if (options.supply(dest, Setting{value, from})) {
      supplied.push_back(std::string(dest) + "=" + value + " (" + from + ")");
    } else {
      overridden.push_back(options.given(dest)->source);
    }
  }
};

// Refuses launches that cannot work in the allocation, and supplies the job id and node count.
Status useAllocation(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use) {
  const int nodes = static_cast<int>(a.hosts.size());
  if (a.tasksOnThisNode > 1) {
    // An error, not a warning: every one of them would claim this node's rank (static) or join
    // as a node of its own, and each starts its own workers, so the job cannot be right.
    return Status::invalidArgument(
        a.tasksFrom + ": srun started " + std::to_string(a.tasksOnThisNode) +
        " dtrun processes on this node, but dtrun starts the workers itself: run one per node "
        "(srun --ntasks-per-node=1 dtrun --nproc_per_node=N ...), or pass --scheduler none");
  }
  if (!a.inStep && nodes > 1 && !options.given("nnodes")) {
    return Status::invalidArgument(
        "running in the batch script of a " + std::to_string(nodes) +
        "-node SLURM job (no SLURM_STEP_ID), so it would start on " + a.hosts.front() +
        " only and wait for the others: run one dtrun per node with srun --ntasks-per-node=1 "
        "dtrun ..., or pass --nnodes=1 to use this node alone");
  }
  use.offer(options, "rdzv_id", a.jobId, a.jobIdFrom);
  if (nodes > 1) {
    use.offer(options, "nnodes", std::to_string(nodes), a.hostsFrom);
  }
  return Status::ok();
}

// With the static backend over the allocation's nodes: this node's rank, and the store on the
// first host at the job's port (scheduler::jobPort: fixed per job, so no flag is needed, and two
// jobs sharing a node do not both claim torchrun's 29500).
void useAllocationRanks(const scheduler::Allocation& a, Resolver& options, SchedulerUse& use,
                        LaunchPlan& plan) {
  const int nodes = static_cast<int>(a.hosts.size());
  if (nodes <= 1 || plan.maxNodes != nodes ||
      options.get("rdzv_backend", "static").text != "static") {
    return;
  }
  const auto userRank = options.given("node_rank");
  if (userRank && parseInt(userRank->text) != a.nodeIndex) {
    plan.warnings.push_back(userRank->source + "=" + userRank->text + " but " + a.nodeIndexFrom +
                            " says this is node " + std::to_string(a.nodeIndex) +
                            ": was the variable expanded once in the batch script? (omit " +
                            userRank->source + ": dtrun reads the scheduler's node index itself)");
  }
  use.offer(options, "node_rank", std::to_string(a.nodeIndex), a.nodeIndexFrom);
  if (!options.given("rdzv_endpoint")) {
    const std::string hostsVar = a.hostsFrom.substr(0, a.hostsFrom.find('='));
    use.offer(options, "master_addr", a.hosts.front(), "the first host of " + hostsVar);
    use.offer(options, "master_port", std::to_string(scheduler::jobPort(a)),
              "derived from " + a.jobIdFrom);
  }
}

std::string describeAllocation(const scheduler::Allocation& a, const SchedulerUse& use) {
  const int nodes = static_cast<int>(a.hosts.size());
  std::string text = std::string(scheduler::kindName(a.kind)) + " job " + a.jobId + ": " +
                     std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + " from " +
                     a.hostsFrom + ", this is node " + std::to_string(a.nodeIndex) + " (" +
                     a.nodeIndexFrom + ")";
  const auto join = [](const std::vector<std::string>& items) {
    std::string joined;
    for (const std::string& item : items) {
      joined += (joined.empty() ? "" : ", ") + item;
    }
    return joined;
  };
  if (!use.supplied.empty()) {
    text += "; supplies " + join(use.supplied);
  }
  if (!use.overridden.empty()) {
    text += "; given explicitly: " + join(use.overridden);
  }
  return text;
}

// What every worker runs, as torchrun builds it (python -u [-m] <script> args, or the binary).
std::vector<std::string> resolveCommand(const std::vector<std::string>& program,
                                        const Resolver& options, const HostFacts& host, bool module,
                                        bool noPython, bool runPath) {
  const std::string python = options.env("PYTHON_EXEC").value_or("python3");
  const std::string& entry = program.front();
  // --run_path wins over --no_python (torchrun checks it first); -m never combines with it.
  std::optional<std::string> direct;
  if (!runPath && !module && noPython) {
    direct = entry;
  } else if (!runPath && !module && !entry.ends_with(".py")) {
    direct = host.findExecutable(entry);  // torchrun would hand this to python; dtrun runs it
  }
  std::vector<std::string> command;
  if (direct) {
    command = {*direct};
  } else {
    command = {python, "-u"};
    if (module && !runPath) {
      command.emplace_back("-m");
    }
    command.push_back(entry);
  }
  command.insert(command.end(), program.begin() + 1, program.end());
  return command;
}

std::string streamsText(const agent::StreamSelection& selection) {
  if (selection.perRank.empty()) {
    return std::to_string(static_cast<int>(selection.all));
  }
  std::string text;
  for (const auto& [rank, streams] : selection.perRank) {
    text += (text.empty() ? "" : ",") + std::to_string(rank) + ":" +
            std::to_string(static_cast<int>(streams));
  }
  return text;
}

std::string quoteCommand(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& word : command) {
    const bool plain = !word.empty() && word.find_first_of(" \t\n'\"\\$") == std::string::npos;
    text += (text.empty() ? "" : " ") + (plain ? word : "'" + word + "'");
  }
  return text;
}

std::vector<std::string> environSnapshot() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    env.emplace_back(*entry);
  }
  return env;
}

int runLaunch(const RawOptions& raw) {
  auto planned = validate(raw, readHostFacts());
  if (!planned.isOk()) {
    std::cerr << "dtrun: " << planned.status().message() << "\n";
    return planned.status().code() == Errc::kNotFound ? agent::kExitCannotRun : kUsageError;
  }
  const LaunchPlan& plan = planned.value();
  // Block the handled signals before any thread exists (every later thread inherits the mask);
  // the agent takes them synchronously.
  sigset_t handled;
  sigemptyset(&handled);
  for (const int signal : plan.config.signalsToHandle) {
    sigaddset(&handled, signal);
  }
  for (const int signal : plan.config.signalsToForward) {
    sigaddset(&handled, signal);
  }
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  log::init(plan.logLevel);
  for (const std::string& notice : plan.notices) {
    std::cerr << notice << "\n";
  }
  for (const std::string& warning : plan.warnings) {
    log::launcher().warn("{}", warning);
  }
  if (plan.dryRun) {
    std::cout << dryRunText(plan, environSnapshot()) << std::flush;
    return 0;
  }
  log::launcher().info("{}", launchBanner(plan));
  return agent::run(plan.config);
}

}  // namespace

void addLaunchOptions(CLI::App& app, RawOptions& raw) {
  for (const OptionSpec& spec : kOptions) {
    std::vector<std::string> names;
    if (!spec.shortName.empty()) {
      names.emplace_back(spec.shortName);
    }
    const std::string underscored = "--" + std::string(spec.dest);
    std::string dashed = underscored;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    // flagName() first: CLI11's own messages name an option by its first name, and dtrun's
    // messages use torchrun's dest spelling throughout.
    for (const std::string& name : {flagName(spec.dest), underscored, dashed}) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    }
    std::string joined;
    for (const std::string& name : names) {
      joined += (joined.empty() ? "" : ",") + name;
    }
    std::string help(spec.help);
    if (spec.hasEnv) {
      help += " [env " + envName(spec.dest) + "]";
    }
    const std::string dest(spec.dest);
    if (spec.kind == Kind::kFlag) {
      app.add_flag_callback(
          joined, [&raw, dest] { raw.given[dest] = "1"; }, help);
    } else {
      app.add_option_function<std::string>(
             joined, [&raw, dest](const std::string& value) { raw.given[dest] = value; }, help)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // argparse: the last one wins
    }
  }
  app.prefix_command();
  // Subcommands registered earlier copied prefix_command(false) from the app; keep it so.
  for (CLI::App* sub : app.get_subcommands({})) {
    sub->prefix_command(false);
  }
  app.footer(std::string(kUsage) +
             "\n  The entrypoint is a Python script (run as python -u <script>), a module (-m) or a"
             "\n  program (--no_python, or any executable file); its arguments pass through, and"
             "\n  ${local_rank} in them becomes each worker's local rank."
             "\n  dtrun store [options]: serve a rendezvous store alone (dtrun store --help).");
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

std::vector<std::string> argumentsForParse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    args.emplace_back(argv[i]);
  }
  // Walks dtrun's own options only: the first word that is not one (the entrypoint, "store")
  // or "--" ends them, and what follows is left exactly as given.
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') {
      break;
    }
    if (arg == "-r" || arg == "-t") {
      ++i;  // its value is the next word
      continue;
    }
    if (!arg.starts_with("--")) {
      continue;  // -m, -h, or a short option with its value attached ("-r3")
    }
    const auto equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const auto spec = std::find_if(kOptions.begin(), kOptions.end(), [&name](const auto& s) {
      std::string dashed = "--" + std::string(s.dest);
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      return name == "--" + std::string(s.dest) || name == dashed;
    });
    if (spec == kOptions.end() || spec->kind != Kind::kValue) {
      continue;
    }
    if (equals == std::string::npos) {
      ++i;  // its value is the next word
    } else if (equals + 1 == arg.size()) {
      args[i] = name;  // "--rdzv_id=": an empty value, as argparse reads it
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::string());
      ++i;
    }
  }
  std::reverse(args.begin(), args.end());
  return args;
}

std::string parseErrorLine(const CLI::ParseError& error) {
  std::string line;
  bool space = false;
  for (const char c : std::string_view(error.what())) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !line.empty();
      continue;
    }
    if (space) {
      line += ' ';
      space = false;
    }
    line += c;
  }
  // CLI11's "--role: 1 required TEXT missing" says the value after the flag is missing.
  static const std::regex kMissingValue(R"(^(\S+): \d+ required \S+ missing$)");
  if (std::smatch match; std::regex_match(line, match, kMissingValue)) {
    return match[1].str() + ": expected a value";
  }
  // "Could not convert: --module = x": a flag given a value, or a value of the wrong type.
  static const std::regex kBadValue(R"(^Could not convert: (\S+) = (.*)$)");
  if (std::smatch match; std::regex_match(line, match, kBadValue)) {
    return match[1].str() + ": invalid value '" + match[2].str() + "'";
  }
  return line.empty() ? error.get_name() : line;
}

Result<LaunchPlan> validate(const RawOptions& raw, const HostFacts& host) {
  Resolver options(raw, host);
  LaunchPlan plan;
  agent::AgentConfig& config = plan.config;

  auto program = programOf(raw);
  if (!program.isOk()) {
    return program.status();
  }
  if (const auto level = options.find("log_level")) {
    static const std::set<std::string_view> kLevels = {"trace", "debug",    "info", "warn",
                                                       "error", "critical", "off"};
    if (!kLevels.contains(level->text)) {
      return expected(*level, "trace, debug, info, warn, error, critical or off");
    }
    plan.logLevel = level->text;
  }

  std::array<bool, 5> flags{};
  constexpr std::array<std::string_view, 5> kFlagDests = {"standalone", "module", "no_python",
                                                          "run_path", "virtual_local_rank"};
  for (std::size_t i = 0; i < std::size(flags); ++i) {
    auto value = options.flag(kFlagDests[i]);
    if (!value.isOk()) {
      return value.status();
    }
    flags[i] = value.value();
  }
  const auto [standalone, module, noPython, runPath, virtualLocalRank] = flags;
  if (module && noPython) {
    return Status::invalidArgument(
        "-m/--module and --no_python cannot be used together (a module needs python)");
  }
  if (virtualLocalRank) {
    return Status::invalidArgument(
        options.find("virtual_local_rank")->source +
        ": not supported yet (every worker sees all GPUs; pick one with LOCAL_RANK)");
  }
  if (auto s = checkUnsupported(options); !s.isOk()) {
    return s;
  }

  auto allocation = detectScheduler(options, host, standalone, plan);
  if (!allocation.isOk()) {
    return allocation.status();
  }
  const std::optional<scheduler::Allocation>& job = allocation.value();
  SchedulerUse schedulerUse;
  if (job) {
    if (auto s = useAllocation(*job, options, schedulerUse); !s.isOk()) {
      return s;
    }
  }

  const auto nnodesSetting = options.get("nnodes", "1:1");
  auto nnodes = parseNnodes(nnodesSetting);
  if (!nnodes.isOk()) {
    return nnodes.status();
  }
  std::tie(plan.minNodes, plan.maxNodes) = nnodes.value();
  if (job) {
    useAllocationRanks(*job, options, schedulerUse, plan);
    plan.scheduler = describeAllocation(*job, schedulerUse);
  }
  const auto nodeRankSetting = options.get("node_rank", "0");
  auto nodeRank = parseNonNegative(nodeRankSetting);
  if (!nodeRank.isOk()) {
    return nodeRank.status();
  }

  auto nproc = parseNproc(options.get("nproc_per_node", "1"), host);
  if (!nproc.isOk()) {
    return nproc.status();
  }
  config.nprocPerNode = nproc.value();

  if (auto s = resolveRendezvous(options, host, standalone, plan); !s.isOk()) {
    return s;
  }
  if (plan.rdzvBackend == "static" && nodeRank.value() >= plan.maxNodes) {
    return Status::invalidArgument(nodeRankSetting.source + ": must be below --nnodes (" +
                                   std::to_string(plan.maxNodes) + "), got '" +
                                   nodeRankSetting.text + "'");
  }
  auto rdzvConf = parseRdzvConf(options.get("rdzv_conf", ""));
  if (!rdzvConf.isOk()) {
    return rdzvConf.status();
  }
  plan.rdzvConf = std::move(rdzvConf).value();
  auto token = resolveStoreToken(plan.rdzvConf, host);
  if (!token.isOk()) {
    return token.status();
  }
  config.storeToken = std::move(token).value();
  if (plan.maxNodes > 1) {
    if (standalone) {
      return expected(nnodesSetting, "1 with --standalone (one node by definition)");
    }
    if (plan.rdzvBackend == "static" && plan.minNodes != plan.maxNodes) {
      return expected(nnodesSetting,
                      "a fixed node count with the static backend (use --rdzv_backend=c10d for "
                      "MIN:MAX)");
    }
    auto multi = resolveMultiNode(options, host, plan, nodeRank.value());
    if (!multi.isOk()) {
      return multi.status();
    }
    config.multiNode = multi.value();
    if (job) {
      // The keeper orders nodes by it (after explicit ranks and the store's host), also in an
      // elastic job that may grow beyond the allocation: its nodes then come first, in order.
      config.multiNode->schedulerOrder = job->nodeIndex;
    }
  }

  auto maxRestarts = parseNonNegative(options.get("max_restarts", "0"));
  if (!maxRestarts.isOk()) {
    return maxRestarts.status();
  }
  config.maxRestarts = maxRestarts.value();

  const auto monitorSetting = options.get("monitor_interval", "0.1");
  const auto monitor = parseNumber(monitorSetting.text);
  if (!monitor || *monitor <= 0) {
    return expected(monitorSetting, "a positive number of seconds");
  }
  plan.monitorInterval = *monitor;

  const auto startMethod = options.get("start_method", "spawn");
  if (startMethod.text != "spawn" && startMethod.text != "fork" &&
      startMethod.text != "forkserver") {
    return expected(startMethod, "spawn, fork or forkserver");
  }
  if (auto s = resolveOutput(options, config); !s.isOk()) {
    return s;
  }
  if (auto s = resolveStopping(options, config); !s.isOk()) {
    return s;
  }
  if (auto s = resolveInsight(options, plan); !s.isOk()) {
    return s;
  }

  config.command = resolveCommand(program.value(), options, host, module, noPython, runPath);
  config.entrypointName = program.value().front();
  const std::string& first = config.command.front();
  const auto executable = host.resolveProgram(first);
  if (!executable) {
    return Status::error(Errc::kNotFound, "cannot run " + first + ": not found in PATH");
  }
  config.executable = *executable;
  // A script for the interpreter must exist: say so now, once, rather than through a Python
  // traceback from every rank.
  const bool interpreted = config.command.front() != config.entrypointName;
  if (interpreted && !module && !host.fileExists(config.entrypointName)) {
    return Status::error(Errc::kNotFound,
                         "cannot run " + config.entrypointName + ": No such file or directory");
  }

  if (config.nprocPerNode > 1 && !options.env("OMP_NUM_THREADS")) {
    config.defaultEnv.emplace_back("OMP_NUM_THREADS", "1");
    plan.notices.emplace_back(
        "*****************************************\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
        "avoid your system being overloaded, please further tune the variable for optimal "
        "performance in your application as needed.\n"
        "*****************************************");
  }
  return plan;
}

// The numeric text of an address (IPv4 or IPv6), for comparing names that resolve alike.
std::string addressText(const sockaddr* address) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  const void* raw =
      address->sa_family == AF_INET
          ? static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in*>(address)->sin_addr)  // NOLINT
          : static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);  // NOLINT
  return ::inet_ntop(address->sa_family, raw, text.data(), text.size()) != nullptr ? text.data()
                                                                                   : "";
}

bool isThisMachine(const std::string& name) {
  std::array<char, 256> own{};
  if (name == "localhost" ||
      (::gethostname(own.data(), own.size() - 1) == 0 && name == own.data())) {
    return true;
  }
  std::set<std::string> local;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) == 0) {
    for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr != nullptr &&
          (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
        local.insert(addressText(i->ifa_addr));
      }
    }
    ::freeifaddrs(interfaces);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) {
    return false;
  }
  bool mine = false;
  for (const addrinfo* a = found; a != nullptr && !mine; a = a->ai_next) {
    const std::string text = addressText(a->ai_addr);
    mine = local.count(text) != 0 || text.starts_with("127.") || text == "::1";
  }
  ::freeaddrinfo(found);
  return mine;
}

HostFacts readHostFacts() {
  HostFacts host;
  host.fileExists = [](const std::string& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
  };
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals != std::string_view::npos) {
      host.env.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  int deviceNodes = 0;
  std::error_code ec;
  for (const auto& node : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = node.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && isDigits(name.substr(6))) {
      ++deviceNodes;
    }
  }
  const auto cvd = host.env.find("CUDA_VISIBLE_DEVICES");
  host.gpuCount = countVisibleGpus(
      deviceNodes, cvd == host.env.end() ? std::nullopt : std::optional<std::string>(cvd->second));
  host.cpuCount = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  const auto path = host.env.find("PATH");
  const std::string searchPath =
      path == host.env.end() ? "/usr/local/bin:/usr/bin:/bin" : path->second;
  host.findExecutable = [searchPath](const std::string& entry) -> std::optional<std::string> {
    if (entry.find('/') != std::string::npos) {
      return isExecutableFile(entry) ? std::optional(entry) : std::nullopt;
    }
    if (isExecutableFile(entry)) {
      return "./" + entry;  // a program in the working directory, as its name was meant
    }
    for (const std::string_view dir : split(searchPath, ':')) {
      const std::string candidate =
          (dir.empty() ? std::string(".") : std::string(dir)) + "/" + entry;
      if (isExecutableFile(candidate)) {
        return entry;  // the agent looks the name up in PATH
      }
    }
    return std::nullopt;
  };
  host.resolveProgram = [searchPath](const std::string& program) -> std::optional<std::string> {
    if (program.find('/') != std::string::npos) {
      return program;  // exec says what is wrong with it, if anything
    }
    for (const std::string_view dir : split(searchPath, ':')) {
      std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + program;
      if (isExecutableFile(candidate)) {
        return candidate;
      }
    }
    return std::nullopt;
  };
  host.makeRunId = randomRunId;
  host.isThisHost = isThisMachine;
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) == 0) {
    host.hostName = name.data();
  }
  host.readFile = [](const std::string& file) -> std::optional<std::string> {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return std::nullopt;
    }
    std::ostringstream text;
    text << in.rdbuf();
    return in.bad() ? std::nullopt : std::optional(text.str());
  };
  return host;
}

std::string launchBanner(const LaunchPlan& plan) {
  const agent::AgentConfig& config = plan.config;
  std::string conf;
  for (const auto& [key, value] : plan.rdzvConf) {
    conf.append(conf.empty() ? "" : ", ").append(key).append(": ").append(value);
  }
  std::string text = "Starting dtrun with launch configs:";
  const auto row = [&text](std::string_view name, const std::string& value) {
    text += "\n  ";
    text += name;
    text.append(20 - std::min<std::size_t>(name.size(), 19), ' ');
    text += ": " + value;
  };
  row("entrypoint", config.entrypointName);
  row("command", quoteCommand(config.command));
  row("min_nodes", std::to_string(plan.minNodes));
  row("max_nodes", std::to_string(plan.maxNodes));
  row("nproc_per_node", std::to_string(config.nprocPerNode));
  row("run_id", config.runId);
  row("rdzv_backend", plan.rdzvBackend);
  row("rdzv_endpoint", plan.rdzvEndpoint + (config.storePort == 0 ? " (a free port)" : ""));
  row("rdzv_configs", "{" + conf + "}");
  row("master_addr", config.masterAddr);
  row("scheduler", plan.scheduler);
  row("max_restarts", std::to_string(config.maxRestarts));
  row("monitor_interval", formatSeconds(plan.monitorInterval) + " (unused: dtrun does not poll)");
  row("role", config.role);
  row("log_dir", config.logDir.empty() ? "(a new directory under $TMPDIR)" : config.logDir);
  row("redirects", streamsText(config.redirects));
  row("tee", streamsText(config.tee));
  row("signals_to_handle", config.signalsToHandleText);
  std::string forwarded;
  for (const int sig : config.signalsToForward) {
    forwarded +=
        (forwarded.empty() ? "" : ",") + std::string(sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
  }
  row("signals_forwarded", forwarded.empty() ? "(none)" : forwarded + " (the job keeps running)");
  row("shutdown_timeout",
      formatSeconds(static_cast<double>(config.shutdownTimeout.count()) / 1000) + " s");
  row("hang_timeout",
      config.hangTimeout.count() == 0
          ? std::string("0 (off)")
          : formatSeconds(static_cast<double>(config.hangTimeout.count()) / 1000) + " s");
  row("report", config.reportFile.empty() ? "(none)" : config.reportFile);
  return text;
}

std::string dryRunText(const LaunchPlan& plan, const std::vector<std::string>& inherited) {
  const agent::AgentConfig& config = plan.config;
  const auto& multi = config.multiNode;
  // Node ranks of a c10d job are assigned at rendezvous; the table shows the node this agent
  // asks to be (its --node_rank, else 0) in a job of max_nodes nodes with equal nproc_per_node.
  const int nodeCount = plan.maxNodes;
  const int nodeRank = multi && multi->nodeRank >= 0 ? multi->nodeRank : 0;
  const bool assignedLater = multi && (plan.rdzvBackend == "c10d" || multi->nodeRank < 0);
  const std::string logBase =
      (config.logDir.empty() ? std::string("$TMPDIR/dtrun-XXXXXX") : config.logDir) + "/" +
      config.runId + "/attempt_0";
  std::ostringstream out;
  out << "dtrun --dry-run: nothing is started.\n" << launchBanner(plan) << "\n";
  if (multi) {
    out << "  " << std::left << std::setw(20) << "node_rank"
        << ": " << nodeRank
        << (assignedLater ? " (assigned at rendezvous; shown as if this node got it)" : "") << "\n"
        << "  " << std::setw(20) << "hosts_store"
        << ": " << (multi->hostsStore ? "yes" : "no") << "\n";
  }
  out << "\nRank table (node " << nodeRank << " of " << nodeCount << ", world size "
      << nodeCount * config.nprocPerNode << "):\n"
      << "  rank  local_rank  node_rank  log_dir\n";
  const int offset = nodeRank * config.nprocPerNode;
  for (int local = 0; local < config.nprocPerNode; ++local) {
    out << "  " << std::left << std::setw(6) << offset + local << std::setw(12) << local
        << std::setw(11) << nodeRank << logBase << "/" << local << "\n";
  }
  std::set<std::string> inheritedEntries(inherited.begin(), inherited.end());
  for (int local = 0; local < config.nprocPerNode; ++local) {
    out << "\nWorker " << offset + local << " (local rank " << local
        << "): " << quoteCommand(config.command) << "\n"
        << "  environment set by dtrun (the rest is inherited):\n";
    for (std::string entry :
         agent::plannedWorkerEnvironment(config, inherited, nodeRank, nodeCount, local,
                                         logBase + "/" + std::to_string(local))) {
      if (inheritedEntries.count(entry) != 0) {
        continue;
      }
      const bool portEntry = entry == "MASTER_PORT=0" ||
                             (entry.starts_with("DTRUN_STORE_ADDR=") && entry.ends_with(":0"));
      if (config.storePort == 0 && portEntry) {  // the store picks its port when it starts
        entry.replace(entry.size() - 1, 1, "<free port>");
      }
      out << "    " << entry << "\n";
    }
  }
  return out.str();
}

std::function<int()> addLaunchCommand(CLI::App& app) {
  auto raw = std::make_shared<RawOptions>();
  addLaunchOptions(app, *raw);
  // `app` outlives the returned function (both live in main).
  return [&app, raw] {
    raw->program = app.remaining();
    return runLaunch(*raw);
  };
}

int reportParseError(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(error);  // --help: the help text on stdout, exit 0
  }
  std::cerr << "dtrun: " << parseErrorLine(error) << "\n";
  return kUsageError;
}

}  // namespace dtrun::launcher
