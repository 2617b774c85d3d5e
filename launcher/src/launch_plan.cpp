#include "launch_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <set>

#include "dtrun/scheduler.h"

#include "etcd_options.h"
#include "option_table.h"
#include "placement_options.h"
#include "plan_text.h"
#include "resolver.h"
#include "restart_options.h"
#include "scheduler_merge.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {
namespace {

constexpr int kDefaultC10dPort = 29400;
constexpr int kDefaultStaticPort = 29500;  // torchrun's --master_port default
constexpr double kDefaultShutdownSeconds = 30.0;
constexpr double kMaxShutdownSeconds = 1.0e6;  // keeps the milliseconds far from overflow
constexpr std::string_view kDefaultSignals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

using text::isDigits;
using text::parseInt;
using text::trim;

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
        "plugins; --report writes the job's events as JSON), got '" + handler->text + "'");
  }
  if (const auto specs = options.find("logs_specs")) {
    return Status::invalidArgument(
        specs->source +
        ": custom LogsSpecs are Python plugins dtrun cannot load (use --log_dir, --redirects, " +
        "--tee and --local_ranks_filter), got '" + specs->text + "'");
  }
  return Status::ok();
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
  const bool etcd = isEtcdBackend(backend.text);
  if (backend.text != "static" && backend.text != "c10d" && !etcd) {
    return expected(backend,
                    "static, c10d or etcd (etcd-v2 speaks etcd's old v2 API, which current etcd "
                    "no longer serves: --rdzv_backend=etcd speaks v3)");
  }
  std::optional<int> port;
  if (masterPort) {
    DTRUN_ASSIGN_OR_RETURN(auto parsed, parsePort(*masterPort));
    port = parsed;
  }
  std::optional<Endpoint> parsedEndpoint;
  if (endpoint && !trim(endpoint->text).empty() && !standalone && !etcd) {
    parsedEndpoint = parseEndpoint(endpoint->text);
    if (!parsedEndpoint) {
      return expected(*endpoint, "host[:port] or [ipv6]:port with a port from 0 to 65535");
    }
  }
  if (localAddr && trim(localAddr->text).empty()) {
    return expected(*localAddr, "a host name or address");
  }

  const auto runId = options.get("rdzv_id", "none");
  config.runId = runId.text;
  // The run id names the run's log directory (<log_dir>/<run id>) and its keys.
  if (config.runId.find('/') != std::string::npos || config.runId == "." || config.runId == "..") {
    return expected(runId, "an id without '/' (it names the run's log directory), e.g. job-42");
  }
  if (standalone) {
    if (options.find("rdzv_backend") || options.find("rdzv_endpoint") || options.find("rdzv_id")) {
      plan.warnings.emplace_back(
          "--standalone ignores --rdzv_backend, --rdzv_endpoint and --rdzv_id");
    }
    if (masterPort) {
      plan.warnings.push_back(
          "--standalone serves its store on a free port: " + masterPort->source + "=" +
          masterPort->text + " is ignored (leave out --standalone to use it)");
    }
    plan.rdzvBackend = "c10d";
    config.runId = host.makeRunId();
    config.masterAddr = localAddr ? localAddr->text : "127.0.0.1";
    config.storePort = 0;
    plan.rdzvEndpoint = "localhost:0";
  } else if (etcd) {
    // Every agent serves a workers' store (on --master_port, else a free port); the round's
    // node 0's is MASTER_ADDR:MASTER_PORT, reached at this address (--local_addr or the name).
    plan.rdzvBackend = "etcd";
    if (!endpoint || trim(endpoint->text).empty()) {
      return Status::invalidArgument(
          "--rdzv_endpoint: the etcd backend needs etcd's client URLs, e.g. "
          "--rdzv_endpoint=127.0.0.1:2379 (several joined by commas)");
    }
    config.masterAddr = localAddr ? localAddr->text : host.hostName;
    config.storePort = static_cast<std::uint16_t>(port.value_or(0));
    plan.rdzvEndpoint = std::string(trim(endpoint->text));
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
  } else if (plan.rdzvBackend == "etcd") {
    multi.nodeRank = explicitRank ? nodeRank : -1;
    DTRUN_ASSIGN_OR_RETURN(multi.etcd,
                           resolveEtcd(plan.rdzvEndpoint, plan.rdzvConf, config.runId,
                                       options.env("DTRUN_ETCD_PASSWORD").value_or("")));
  } else {
    multi.nodeRank = explicitRank ? nodeRank : -1;
    const auto endpointHost = plan.rdzvEndpoint.substr(0, plan.rdzvEndpoint.rfind(':'));
    const std::string bare = endpointHost.starts_with('[') && endpointHost.ends_with(']')
                                 ? endpointHost.substr(1, endpointHost.size() - 2)
                                 : endpointHost;
    multi.hostsStore = host.isThisHost(bare);
    multi.hostGuessed = true;
    if (const auto localAddr = options.find("local_addr")) {
      multi.localAddr = std::string(trim(localAddr->text));
    }
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
               key == "token_file" || (multi.etcd && isEtcdConfKey(key))) {
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
      DTRUN_ASSIGN_OR_RETURN(auto duration, confSeconds(key, value));
      *target = duration;
    }
  }
  if (multi.keepAliveInterval.count() <= 0 || multi.readTimeout.count() <= 0) {
    return Status::invalidArgument(
        "--rdzv_conf: keep_alive_interval and read_timeout must be above 0 seconds");
  }
  return multi;
}

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
  DTRUN_ASSIGN_OR_RETURN(auto filter, parseLocalRanksFilter(options.get("local_ranks_filter", "")));
  config.localRanksFilter = std::move(filter);

  auto prefix = options.find("log_line_prefix_template");
  if (!prefix) {
    if (const auto fromEnv = options.env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) {
      prefix = Setting{*fromEnv, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"};
    }
  }
  if (prefix) {
    if (const auto unknown = agent::unknownLinePrefixVariable(prefix->text); !unknown.empty()) {
      return Status::invalidArgument(prefix->source + ": unknown variable " + unknown + " in '" +
                                     prefix->text +
                                     "'; use ${role_name}, ${rank}, ${local_rank}, ${hostname} "
                                     "or ${pid}");
    }
    config.logLinePrefixTemplate = prefix->text;
  }
  for (const auto& [dest, target] :
       {std::pair{"duplicate_stdout_filters", &config.duplicateStdoutFilters},
        std::pair{"duplicate_stderr_filters", &config.duplicateStderrFilters}}) {
    *target = parseDuplicateFilters(options.get(dest, "").text);
  }
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

// --health_checks, --health_check_timeout, --health_min_free_mb, --health_gpu_memory_wait,
// --health_net_min_gbps, --health_net_max_rtt_us.
Status resolveHealthChecks(const Resolver& options, const HostFacts& host,
                           agent::HealthChecks& checks) {
  const auto list = options.get("health_checks", "local");
  checks = agent::HealthChecks{};
  checks.logDir = checks.entrypoint = checks.store = checks.gpus = false;
  const auto names = text::split(list.text, ',');
  for (const auto name : names) {
    const std::string_view n = trim(name);
    if (n == "none" && names.size() == 1) {
      continue;
    }
    if (n == "local") {
      checks.logDir = checks.entrypoint = checks.store = checks.gpus = true;
    } else if (n == "log_dir") {
      checks.logDir = true;
    } else if (n == "entrypoint") {
      checks.entrypoint = true;
    } else if (n == "store") {
      checks.store = true;
    } else if (n == "gpus") {
      checks.gpus = true;
    } else if (n == "network") {
      checks.network = true;
    } else {
      return expected(list,
                      "a comma list of local, log_dir, entrypoint, store, gpus, network, or none");
    }
  }
  if (checks.network) {
    if (host.netcheckProgram.empty()) {
      return Status::invalidArgument(
          "--health_checks=" + list.text +
          ": dtrun-netcheck (the network check's program) is not installed beside this dtrun: "
          "reinstall dtrun, or drop 'network'");
    }
    checks.netcheckProgram = host.netcheckProgram;
  }
  const auto minGbps = options.get("health_net_min_gbps", "1");
  const auto gbps = parseNumber(minGbps.text);
  if (!gbps || *gbps < 0 || *gbps > 1e6) {
    return expected(minGbps, "a non-negative number of Gbit/s (0 = not checked)");
  }
  checks.netMinGbps = *gbps;
  const auto maxRtt = options.get("health_net_max_rtt_us", "10000");
  const auto rtt = parseNumber(maxRtt.text);
  if (!rtt || *rtt < 0 || *rtt > 1e9) {
    return expected(maxRtt, "a non-negative number of microseconds (0 = not checked)");
  }
  checks.netMaxRttUs = *rtt;
  // NVML: the driver's library, or the one DTRUN_NVML_LIBRARY names (a driver outside the
  // loader's path; the tests' fake NVML).
  if (const auto nvml = options.env("DTRUN_NVML_LIBRARY"); nvml && !nvml->empty()) {
    checks.nvmlLibrary = *nvml;
  } else if (options.env("DTRUN_SYSFS_ROOT")) {
    // A recorded machine (the placement tests) plans GPUs this one lacks; a fake NVML that
    // describes them is what checks them.
    checks.gpus = false;
  }
  const auto timeout = options.get("health_check_timeout", "5");
  const auto seconds = parseNumber(timeout.text);
  if (!seconds || *seconds <= 0 || *seconds > kMaxShutdownSeconds) {
    return expected(timeout, "a positive number of seconds");
  }
  checks.timeout = std::chrono::milliseconds(std::llround(*seconds * 1000.0));
  const auto freeSetting = options.get("health_min_free_mb", "100");
  const auto mib = parseNumber(freeSetting.text);
  if (!mib || *mib < 0 || *mib > 1e9) {
    return expected(freeSetting, "a non-negative number of MiB (0 = any free space)");
  }
  checks.minFreeBytes = static_cast<std::uint64_t>(std::llround(*mib * 1024.0 * 1024.0));
  const auto gpuWait = options.get("health_gpu_memory_wait", "30");
  const auto gpuSeconds = parseNumber(gpuWait.text);
  if (!gpuSeconds || *gpuSeconds < 0 || *gpuSeconds > kMaxShutdownSeconds) {
    return expected(gpuWait, "a non-negative number of seconds (0 = no wait)");
  }
  checks.gpuMemoryWait = std::chrono::milliseconds(std::llround(*gpuSeconds * 1000.0));
  return Status::ok();
}

// dtrun's own job insight: --report, --hang_timeout, --python_hook, --verbose and --dry-run.
Status resolveInsight(const Resolver& options, const HostFacts& host, LaunchPlan& plan) {
  agent::AgentConfig& config = plan.config;
  if (const auto report = options.find("report")) {
    if (trim(report->text).empty()) {
      return expected(*report, "a file path for the JSON report");
    }
    if (const std::string why = host.whyNotWritable(report->text); !why.empty()) {
      return Status::invalidArgument("--report=" + report->text + " cannot be written: " + why);
    }
    config.reportFile = report->text;
  }
  if (const auto events = options.find("event_log")) {
    if (trim(events->text).empty()) {
      return expected(*events, "a file path for the JSON-lines event log");
    }
    if (const std::string why = host.whyNotWritable(events->text); !why.empty()) {
      return Status::invalidArgument("--event_log=" + events->text + " cannot be written: " + why);
    }
    config.eventLogFile = events->text;
  }
  DTRUN_TRY(resolveHealthChecks(options, host, config.healthChecks));
  const auto console = options.get("console", "ranks");
  if (console.text != "ranks" && console.text != "collapse") {
    return expected(console, "ranks or collapse");
  }
  config.console = console.text == "collapse" ? agent::AgentConfig::Console::kCollapse
                                              : agent::AgentConfig::Console::kRanks;
  // dtrun's own error file, as torchrun's @record reads it from its environment (the workers
  // get their own per-rank files).
  config.errorFile = options.env("TORCHELASTIC_ERROR_FILE").value_or("");
  if (!config.errorFile.empty()) {
    if (const std::string why = host.whyNotWritable(config.errorFile); !why.empty()) {
      return Status::invalidArgument("TORCHELASTIC_ERROR_FILE=" + config.errorFile +
                                     " cannot be written: " + why +
                                     " (set it to a writable path, or unset it)");
    }
  }
  const auto hangSetting = options.get("hang_timeout", "0");
  const auto hangSeconds = parseNumber(hangSetting.text);
  if (!hangSeconds || *hangSeconds < 0 || *hangSeconds > kMaxShutdownSeconds) {
    return expected(hangSetting, "a non-negative number of seconds (0 = off)");
  }
  config.hangTimeout = std::chrono::milliseconds(std::llround(*hangSeconds * 1000.0));
  DTRUN_ASSIGN_OR_RETURN(config.verbose, options.flag("verbose"));
  const auto hook = options.get("python_hook", "auto");
  if (hook.text != "auto" && hook.text != "on" && hook.text != "off") {
    return expected(hook, "auto, on or off");
  }
  // --verbose's startup timeline reads the store and communicator times from the hook.
  if (hook.text == "on" ||
      (hook.text == "auto" && (config.hangTimeout.count() > 0 || config.verbose))) {
    static constexpr std::string_view kMissing =
        "dtrun's Python hook (share/dtrun/python/sitecustomize.py) is not installed beside this "
        "dtrun";
    if (!host.pythonHookDir.empty()) {
      config.pythonHookDir = host.pythonHookDir;
    } else if (hook.text == "on") {
      return Status::error(Errc::kInvalidArgument,
                           std::string(kMissing) + ": reinstall dtrun, or pass --python_hook=off");
    } else if (config.hangTimeout.count() > 0) {
      plan.notices.push_back("dtrun: " + std::string(kMissing) +
                             ": Python workers that do not import dtrun_progress are not judged "
                             "by --hang_timeout (reinstall dtrun to have them judged)");
    }
  }
  DTRUN_ASSIGN_OR_RETURN(plan.dryRun, options.flag("dry_run"));
  return Status::ok();
}

// torchrun's --log_dir=/dev/null: no file at all. What needs files is refused; what only loses
// them (redirects, duplicate filters) is said once.
Status checkDiscardedLogs(const Resolver& options, LaunchPlan& plan) {
  if (!plan.config.discardsLogs()) {
    return Status::ok();
  }
  if (plan.config.hangTimeout.count() > 0) {
    return Status::invalidArgument(
        "--hang_timeout needs the per-rank progress files, and --log_dir=/dev/null writes no "
        "file: give --log_dir a directory, or leave --hang_timeout out");
  }
  for (const std::string_view dest :
       {"redirects", "duplicate_stdout_filters", "duplicate_stderr_filters"}) {
    if (const auto setting = options.find(dest);
        setting && !setting->text.empty() && setting->text != "0") {
      plan.warnings.push_back(
          setting->source + ": --log_dir=/dev/null writes no file; " +
          (dest == "redirects" ? "the streams stay on the console" : "no line is copied"));
    }
  }
  return Status::ok();
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

Result<LaunchPlan> validate(const RawOptions& raw, const HostFacts& host) {
  Resolver options(raw, host);
  LaunchPlan plan;
  agent::AgentConfig& config = plan.config;

  DTRUN_ASSIGN_OR_RETURN(auto program, programOf(raw));
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
    DTRUN_ASSIGN_OR_RETURN(auto value, options.flag(kFlagDests[i]));
    flags[i] = value;
  }
  const auto [standalone, module, noPython, runPath, virtualLocalRank] = flags;
  if (module && noPython) {
    return Status::invalidArgument(
        "-m/--module and --no_python cannot be used together (a module needs python)");
  }
  DTRUN_TRY(checkUnsupported(options));

  DTRUN_ASSIGN_OR_RETURN(auto allocation, detectScheduler(options, host, standalone, plan));
  const std::optional<scheduler::Allocation>& job = allocation;
  SchedulerUse schedulerUse;
  if (job) {
    DTRUN_TRY(useAllocation(*job, options, schedulerUse));
  }

  const auto nnodesSetting = options.get("nnodes", "1:1");
  DTRUN_ASSIGN_OR_RETURN(auto nnodes, parseNnodes(nnodesSetting));
  std::tie(plan.minNodes, plan.maxNodes) = nnodes;
  if (job) {
    DTRUN_TRY(useAllocationRanks(*job, options, schedulerUse, plan));
    plan.scheduler = describeAllocation(*job, schedulerUse);
  }
  const auto nodeRankSetting = options.get("node_rank", "0");
  DTRUN_ASSIGN_OR_RETURN(auto nodeRank, parseNonNegative(nodeRankSetting));

  DTRUN_ASSIGN_OR_RETURN(const int usableGpus, usableGpuCount(options, host));
  HostFacts counted = host;  // --nproc_per_node=gpu counts --gpus when given
  counted.gpuCount = usableGpus;
  DTRUN_ASSIGN_OR_RETURN(auto nproc, parseNproc(options.get("nproc_per_node", "1"), counted));
  config.nprocPerNode = nproc;
  DTRUN_TRY(resolvePlacement(options, host, virtualLocalRank, plan));

  DTRUN_TRY(resolveRendezvous(options, host, standalone, plan));
  if (plan.rdzvBackend == "static" && nodeRank >= plan.maxNodes) {
    return Status::invalidArgument(nodeRankSetting.source + ": must be below --nnodes (" +
                                   std::to_string(plan.maxNodes) + "), got '" +
                                   nodeRankSetting.text + "'");
  }
  DTRUN_ASSIGN_OR_RETURN(auto rdzvConf, parseRdzvConf(options.get("rdzv_conf", "")));
  plan.rdzvConf = std::move(rdzvConf);
  DTRUN_ASSIGN_OR_RETURN(auto token, resolveStoreToken(plan.rdzvConf, host));
  config.storeToken = std::move(token);
  // etcd: a job of one node still meets (and can be joined) through etcd.
  if (plan.maxNodes > 1 || plan.rdzvBackend == "etcd") {
    if (standalone) {
      return expected(nnodesSetting, "1 with --standalone (one node by definition)");
    }
    if (plan.rdzvBackend == "static" && plan.minNodes != plan.maxNodes) {
      return expected(nnodesSetting,
                      "a fixed node count with the static backend (use --rdzv_backend=c10d for "
                      "MIN:MAX)");
    }
    DTRUN_ASSIGN_OR_RETURN(auto multi, resolveMultiNode(options, host, plan, nodeRank));
    config.multiNode = multi;
    if (job) {
      // The keeper orders nodes by it (after explicit ranks and the store's host), also in an
      // elastic job that may grow beyond the allocation: its nodes then come first, in order.
      config.multiNode->schedulerOrder = job->nodeIndex;
    }
  } else if (plan.rdzvBackend == "c10d" && !standalone && options.find("rdzv_endpoint")) {
    // One node whose c10d endpoint another host serves (or --rdzv_conf is_host=false): as
    // torchrun, it rendezvouses there as a client, and its workers' MASTER_ADDR names the host
    // that serves the store. Guessed to be this host, yet a store (`dtrun store`, another
    // agent) already answers there: a client too, as with --nnodes=1:2. Else it stays a job
    // with its own store.
    const std::string ownAddr = config.masterAddr;
    DTRUN_ASSIGN_OR_RETURN(auto multi, resolveMultiNode(options, host, plan, nodeRank));
    config.storePortOption = "--rdzv_endpoint";
    if (multi.hostsStore && multi.hostGuessed && config.storePort != 0 &&
        host.acceptsConnection(config.masterAddr, config.storePort)) {
      multi.hostsStore = false;
    }
    if (multi.hostsStore) {
      config.masterAddr = ownAddr;
    } else {
      config.multiNode = multi;
    }
  }

  DTRUN_ASSIGN_OR_RETURN(auto maxRestarts, parseNonNegative(options.get("max_restarts", "0")));
  config.maxRestarts = maxRestarts;

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
  DTRUN_TRY(resolveOutput(options, config));
  if (config.localRanksFilter) {
    std::string absent;
    for (const int r : *config.localRanksFilter) {
      if (r >= config.nprocPerNode) {
        absent += (absent.empty() ? "" : ",") + std::to_string(r);
      }
    }
    if (!absent.empty()) {
      const bool none = *config.localRanksFilter->begin() >= config.nprocPerNode;  // sorted
      plan.warnings.push_back("--local_ranks_filter: local rank(s) " + absent +
                              " do not exist here (0.." + std::to_string(config.nprocPerNode - 1) +
                              ")" + (none ? ": no worker's output reaches the console" : ""));
    }
  }
  DTRUN_TRY(resolveStopping(options, config));
  DTRUN_TRY(resolveRestarts(options, config));
  DTRUN_TRY(resolveInsight(options, host, plan));
  DTRUN_TRY(checkDiscardedLogs(options, plan));

  config.command = resolveCommand(program, options, host, module, noPython, runPath);
  config.entrypointName = program.front();
  const std::string& first = config.command.front();
  const bool interpreted = config.command.front() != config.entrypointName;
  // The interpreter as named: PYTHON_EXEC when set (a wrong one fails here, as a wrong program).
  const std::string named =
      interpreted && options.env("PYTHON_EXEC") ? first + " (PYTHON_EXEC)" : first;
  const auto executable = host.resolveProgram(first);
  if (!executable) {
    return Status::error(Errc::kNotFound, "cannot run " + named + ": not found in PATH");
  }
  config.executable = *executable;
  if (config.executable.find('/') != std::string::npos) {
    if (const std::string why = host.whyNotRunnable(config.executable); !why.empty()) {
      return Status::error(
          Errc::kNotFound,
          "cannot run " + (interpreted ? named : config.entrypointName) + ": " + why);
    }
  }
  // A script for the interpreter must exist: say so now, once, rather than through a Python
  // traceback from every rank.
  if (interpreted && !module && !host.fileExists(config.entrypointName)) {
    const std::string why = host.whyNotRunnable(config.entrypointName);
    return Status::error(Errc::kNotFound, "cannot run " + config.entrypointName + ": " +
                                              (why.find("directory,") != std::string::npos
                                                   ? why
                                                   : std::string("No such file or directory")));
  }

  const bool bound = std::any_of(config.placement.begin(), config.placement.end(),
                                 [](const auto& p) { return !p.cpus.empty(); });
  if (config.nprocPerNode > 1 && !options.env("OMP_NUM_THREADS") && !bound) {
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
}  // namespace dtrun::launcher
