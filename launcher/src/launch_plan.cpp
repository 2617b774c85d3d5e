#include "launch_plan.h"

#include <algorithm>
#include <array>
#include <set>

#include "dtrun/scheduler.h"

#include "insight_options.h"
#include "log_options.h"
#include "option_table.h"
#include "placement_options.h"
#include "plan_text.h"
#include "rendezvous_options.h"
#include "resolver.h"
#include "restart_options.h"
#include "scheduler_merge.h"
#include "stop_options.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {
namespace {

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
