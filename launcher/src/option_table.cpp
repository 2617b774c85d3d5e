#include "option_table.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <iostream>
#include <regex>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/launcher.h"

namespace dtrun::launcher {
namespace {

constexpr std::array kOptions = {
    OptionSpec{
        "nnodes", "", Kind::kValue, true,
        "Number of nodes, N or MIN:MAX (default 1:1: one node; one dtrun runs on each node)"},
    OptionSpec{"nproc_per_node", "", Kind::kValue, true,
               "Workers on this node: a positive integer, gpu, cpu or auto (default 1)"},
    OptionSpec{"rdzv_backend", "", Kind::kValue, true,
               "Rendezvous backend: static, c10d or etcd (default static)"},
    OptionSpec{"rdzv_endpoint", "", Kind::kValue, true,
               "Rendezvous store host[:port] or [ipv6]:port (c10d without a port: 29400)"},
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
               "torchelastic event handler: only null (the default; handlers are Python plugins)"},
    OptionSpec{"role", "", Kind::kValue, true,
               "Worker role, exported as ROLE_NAME (default default)"},
    OptionSpec{"module", "-m", Kind::kFlag, true,
               "Run the entrypoint as a Python module: python -u -m <entrypoint>"},
    OptionSpec{"no_python", "", Kind::kFlag, true,
               "Execute the entrypoint directly instead of through python -u"},
    OptionSpec{"run_path", "", Kind::kFlag, true,
               "Run the entrypoint as a Python script (python -u <entrypoint>)"},
    OptionSpec{"log_dir", "", Kind::kValue, true,
               "Base directory for worker logs (default: a new directory under $TMPDIR; /dev/null: "
               "no files)"},
    OptionSpec{"redirects", "-r", Kind::kValue, true,
               "Worker streams to log files: 0 none, 1 stdout, 2 stderr, 3 both; or per local "
               "rank, e.g. 0:3,1:1 (default 0)"},
    OptionSpec{"tee", "-t", Kind::kValue, true,
               "Like --redirects (0 none, 1 stdout, 2 stderr, 3 both; or per local rank), and "
               "also copy those streams to the console with a [<role><rank>]: prefix"},
    OptionSpec{"local_ranks_filter", "", Kind::kValue, true,
               "Comma list of local ranks whose output reaches the console (default: every "
               "local rank)"},
    OptionSpec{"node_rank", "", Kind::kValue, true,
               "Rank of this node (static backend; default 0)"},
    OptionSpec{"master_addr", "", Kind::kValue, true,
               "Address workers reach the store at (static backend; default 127.0.0.1)"},
    OptionSpec{
        "master_port", "", Kind::kValue, true,
        "Port of the store (static backend; default: a free port on one node, 29500 on several)"},
    OptionSpec{"local_addr", "", Kind::kValue, true,
               "Address this node advertises (c10d: the workers' MASTER_ADDR)"},
    OptionSpec{"logs_specs", "", Kind::kValue, false,
               "Custom torchelastic LogsSpecs: Python plugins, refused (use --log_dir, -r, -t)"},
    OptionSpec{"numa_binding", "", Kind::kValue, false,
               "Bind each rank's CPUs and memory next to its GPU: node, socket, exclusive or "
               "core-complex (torchrun's modes), or none (the default)"},
    OptionSpec{"cpu_binding", "", Kind::kValue, false,
               "split: divide this process's CPUs among the local ranks by physical core, for "
               "jobs without GPUs; none (default)"},
    OptionSpec{"gpus", "", Kind::kValue, false,
               "The GPUs this node's workers use, as CUDA_VISIBLE_DEVICES names them, e.g. 0,2,5 "
               "(default: every visible GPU); --nproc_per_node=gpu counts them"},
    OptionSpec{"gpus_per_worker", "", Kind::kValue, false,
               "Give each worker N GPUs of its own through CUDA_VISIBLE_DEVICES (LOCAL_RANK "
               "unchanged)"},
    OptionSpec{"workers_per_gpu", "", Kind::kValue, false,
               "Put N workers on each GPU, each seeing only that GPU (LOCAL_RANK unchanged)"},
    OptionSpec{"restart_backoff", "", Kind::kValue, false,
               "Seconds to wait before the first restart, doubled for each next one up to "
               "--restart_backoff_max (default 0: at once, as torchrun)"},
    OptionSpec{"restart_backoff_max", "", Kind::kValue, false,
               "The longest wait between restarts, in seconds (default 60)"},
    OptionSpec{"max_no_progress_attempts", "", Kind::kValue, false,
               "Stop after this many failed attempts in a row that made no progress (no rank "
               "past its start, or no new checkpoint in --progress_file), exit 86 (default 0: "
               "off)"},
    OptionSpec{"progress_file", "", Kind::kValue, false,
               "A file whose number is the last checkpoint's iteration: an attempt that raised it "
               "made progress"},
    OptionSpec{"signals_to_handle", "", Kind::kValue, true,
               "Signals forwarded to the workers before dtrun exits: a comma list of names such "
               "as SIGUSR1 or SIGUSR2, not SIGKILL or SIGSTOP (default "
               "SIGTERM,SIGINT,SIGHUP,SIGQUIT)"},
    OptionSpec{"shutdown_timeout", "", Kind::kValue, true,
               "Seconds from the forwarded signal to SIGKILL (default "
               "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30)"},
    OptionSpec{"kill_wait", "", Kind::kValue, false,
               "Seconds a worker may take to end after SIGKILL before it is named stuck in the "
               "kernel and this node leaves the job with exit 75 (default 30)"},
    OptionSpec{"virtual_local_rank", "", Kind::kFlag, true,
               "Each worker sees only its GPU, as device 0, and gets LOCAL_RANK=0 (torchrun's)"},
    OptionSpec{"duplicate_stdout_filters", "", Kind::kValue, true,
               "Comma list of strings (,, for a comma): tee'd stdout lines containing one are "
               "also copied to <attempt dir>/filtered_stdout.log"},
    OptionSpec{"duplicate_stderr_filters", "", Kind::kValue, true,
               "Comma list of strings: tee'd stderr lines containing one are also copied to "
               "<attempt dir>/filtered_stderr.log"},
    OptionSpec{"log_line_prefix_template", "", Kind::kValue, true,
               "Prefix of tee'd console lines, with ${role_name}, ${rank}, ${local_rank}, "
               "${hostname}, ${pid} (default [${role_name}${local_rank}]:, or "
               "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"},
    OptionSpec{"dry_run", "", Kind::kFlag, false,
               "Print the resolved configuration, the rank table and each worker's environment, "
               "then exit without starting anything"},
    OptionSpec{"report", "", Kind::kValue, false,
               "Write the job's run report (JSON, docs/report.schema.json) to this file at exit"},
    OptionSpec{"console", "", Kind::kValue, false,
               "ranks (the default: each rank's lines) or collapse (a line several ranks print "
               "within 200 ms comes out once, as [ranks 0-7]: line, for the whole job)"},
    OptionSpec{"event_log", "", Kind::kValue, false,
               "Append one JSON line per state change (rounds, attempts, restarts, hangs, "
               "signals; docs/event_log.schema.json) to this file"},
    OptionSpec{"health_checks", "", Kind::kValue, false,
               "Checks before each round (each attempt on one node): comma list of local (= "
               "log_dir,entrypoint,store,gpus,open_files), log_dir, entrypoint, store, gpus, "
               "open_files, network (opt-in: every pair of the round's nodes measured before the "
               "workers start), or none (default local); a node that fails one leaves the job"},
    OptionSpec{"health_check_timeout", "", Kind::kValue, false,
               "Seconds each health check may take before it counts as failed (default 5)"},
    OptionSpec{"health_min_free_mb", "", Kind::kValue, false,
               "Free space the log directory's file system needs, in MiB (default 100)"},
    OptionSpec{"health_min_open_files", "", Kind::kValue, false,
               "Files a worker must be able to open (RLIMIT_NOFILE) and the system have free "
               "(default 1024)"},
    OptionSpec{"health_gpu_memory_wait", "", Kind::kValue, false,
               "Seconds the gpus check (with NVML) waits for another process's memory on a "
               "planned GPU to be released before the node counts as busy (default 30)"},
    OptionSpec{"health_net_min_gbps", "", Kind::kValue, false,
               "The network check's bandwidth floor per pair, Gbit/s each way (default 1; 0 = "
               "not checked)"},
    OptionSpec{"health_net_max_rtt_us", "", Kind::kValue, false,
               "The network check's round-trip ceiling per pair, microseconds (default 10000; 0 = "
               "not checked)"},
    OptionSpec{"status_port", "", Kind::kValue, false,
               "Serve this node's live status on this TCP port: /status (JSON), /metrics "
               "(Prometheus), / (a page); 0 picks a free port (default: off)"},
    OptionSpec{"status_addr", "", Kind::kValue, false,
               "The address --status_port listens on (default 127.0.0.1; 0.0.0.0 for every "
               "interface; with a store token, requests must carry it)"},
    OptionSpec{"straggler_threshold", "", Kind::kValue, false,
               "Seconds a rank must reach a collective after the others to count as late; a "
               "rank late in many of the last --straggler_window collectives is named a "
               "straggler (default: 0.2 with --status_port, else off; 0 = off)"},
    OptionSpec{"straggler_window", "", Kind::kValue, false,
               "How many of the last collectives (those every rank entered) the straggler "
               "judgement looks at (default 50)"},
    OptionSpec{"hang_timeout", "", Kind::kValue, false,
               "Seconds without progress (or a rank lagging by as much) before dtrun dumps every "
               "worker's stack and fails the round (default 0: off)"},
    OptionSpec{"python_hook", "", Kind::kValue, false,
               "Progress reports from unmodified PyTorch scripts (a sitecustomize on the "
               "workers' PYTHONPATH): auto (on with --hang_timeout, --verbose, --status_port or "
               "--straggler_threshold), on or off (default "
               "auto)"},
    OptionSpec{"verbose", "", Kind::kFlag, false,
               "Print each attempt's startup timeline (agent start to communicators ready)"},
    OptionSpec{"scheduler", "", Kind::kValue, false,
               "Batch scheduler or launcher whose job sets --nnodes, --node_rank, --master_addr, "
               "--master_port and --rdzv_id when they are not given: auto, slurm, pbs, lsf, flux, "
               "mpi, kubeflow or none (default auto: the one whose variables are set)"},
    OptionSpec{"hostfile", "", Kind::kValue, false,
               "Start one agent per host over ssh, from a hostfile: one host per line, "
               "'node1 slots=4' (DeepSpeed's and OpenMPI's formats; slots = that host's "
               "--nproc_per_node)"},
    OptionSpec{"hosts", "", Kind::kValue, false,
               "Start one agent per host over ssh: node1,node2,node3 (node1:4 gives it 4 slots)"},
    OptionSpec{"include", "", Kind::kValue, false,
               "With --hostfile/--hosts: run on these hosts only (node1,node2 or node1@node2)"},
    OptionSpec{"exclude", "", Kind::kValue, false,
               "With --hostfile/--hosts: run on every host but these"},
    OptionSpec{"export", "", Kind::kValue, false,
               "With --hostfile/--hosts: environment variables for the remote workers, VAR or "
               "VAR=value, comma-separated (besides PYTHONPATH, PET_*, NCCL_*, GLOO_*, TORCH_* "
               "and a few more; not PATH)"},
    OptionSpec{"remote_workdir", "", Kind::kValue, false,
               "With --hostfile/--hosts: the working directory on every host (default: this "
               "one)"},
    OptionSpec{"remote_dtrun", "", Kind::kValue, false,
               "With --hostfile/--hosts: the dtrun every host runs (default: this dtrun's path)"},
    OptionSpec{"ssh_config", "", Kind::kValue, false,
               "With --hostfile/--hosts: the ssh client's configuration file (ssh -F; default "
               "~/.ssh/config)"},
    OptionSpec{"watch_stdin", "", Kind::kFlag, false,
               "Set by --hostfile/--hosts on the agents it starts: a byte on stdin is a signal "
               "for this agent, the end of stdin stops it"},
    OptionSpec{"log_level", "", Kind::kValue, false,
               "dtrun's own logging: trace, debug, info, warn, error, critical or off (default "
               "$DTRUN_LOG_LEVEL or info)"},
};

}  // namespace

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

namespace {

// `dtrun --help` by topic, in this order: what to run first, then where and how it recovers, then
// what it shows. Every option has one (options_test checks).
constexpr std::array<std::string_view, 9> kTopics = {
    "Workers",   "Nodes and rendezvous", "Restarts and stopping", "Placement", "Logs and console",
    "Diagnosis", "Health checks",        "Schedulers and ssh",    "dtrun"};

constexpr std::array<std::pair<std::string_view, std::string_view>, 69> kTopicOf = {{
    {"nproc_per_node", "Workers"},
    {"module", "Workers"},
    {"no_python", "Workers"},
    {"run_path", "Workers"},
    {"role", "Workers"},
    {"start_method", "Workers"},
    {"nnodes", "Nodes and rendezvous"},
    {"node_rank", "Nodes and rendezvous"},
    {"rdzv_backend", "Nodes and rendezvous"},
    {"rdzv_endpoint", "Nodes and rendezvous"},
    {"rdzv_id", "Nodes and rendezvous"},
    {"rdzv_conf", "Nodes and rendezvous"},
    {"standalone", "Nodes and rendezvous"},
    {"master_addr", "Nodes and rendezvous"},
    {"master_port", "Nodes and rendezvous"},
    {"local_addr", "Nodes and rendezvous"},
    {"max_restarts", "Restarts and stopping"},
    {"monitor_interval", "Restarts and stopping"},
    {"restart_backoff", "Restarts and stopping"},
    {"restart_backoff_max", "Restarts and stopping"},
    {"max_no_progress_attempts", "Restarts and stopping"},
    {"progress_file", "Restarts and stopping"},
    {"signals_to_handle", "Restarts and stopping"},
    {"shutdown_timeout", "Restarts and stopping"},
    {"kill_wait", "Restarts and stopping"},
    {"numa_binding", "Placement"},
    {"cpu_binding", "Placement"},
    {"gpus", "Placement"},
    {"gpus_per_worker", "Placement"},
    {"workers_per_gpu", "Placement"},
    {"virtual_local_rank", "Placement"},
    {"log_dir", "Logs and console"},
    {"redirects", "Logs and console"},
    {"tee", "Logs and console"},
    {"local_ranks_filter", "Logs and console"},
    {"logs_specs", "Logs and console"},
    {"duplicate_stdout_filters", "Logs and console"},
    {"duplicate_stderr_filters", "Logs and console"},
    {"log_line_prefix_template", "Logs and console"},
    {"console", "Logs and console"},
    {"event_log", "Logs and console"},
    {"event_log_handler", "Logs and console"},
    {"dry_run", "Diagnosis"},
    {"report", "Diagnosis"},
    {"status_port", "Diagnosis"},
    {"status_addr", "Diagnosis"},
    {"straggler_threshold", "Diagnosis"},
    {"straggler_window", "Diagnosis"},
    {"hang_timeout", "Diagnosis"},
    {"python_hook", "Diagnosis"},
    {"verbose", "Diagnosis"},
    {"health_checks", "Health checks"},
    {"health_check_timeout", "Health checks"},
    {"health_min_free_mb", "Health checks"},
    {"health_min_open_files", "Health checks"},
    {"health_gpu_memory_wait", "Health checks"},
    {"health_net_min_gbps", "Health checks"},
    {"health_net_max_rtt_us", "Health checks"},
    {"scheduler", "Schedulers and ssh"},
    {"hostfile", "Schedulers and ssh"},
    {"hosts", "Schedulers and ssh"},
    {"include", "Schedulers and ssh"},
    {"exclude", "Schedulers and ssh"},
    {"export", "Schedulers and ssh"},
    {"remote_workdir", "Schedulers and ssh"},
    {"remote_dtrun", "Schedulers and ssh"},
    {"ssh_config", "Schedulers and ssh"},
    {"watch_stdin", "Schedulers and ssh"},
    {"log_level", "dtrun"},
}};

// The words an option takes as they are (not its numbers, paths or lists of names): what the man
// page lists and the shell completes. Each is named by the option's help and accepted by
// validate(); option_values_test checks both, so the list cannot drift from either.
constexpr std::array<std::pair<std::string_view, std::string_view>, 14> kValuesOf = {{
    {"nproc_per_node", "gpu cpu auto"},
    {"rdzv_backend", "static c10d etcd"},
    {"start_method", "spawn fork forkserver"},
    {"event_log_handler", "null"},
    {"redirects", "0 1 2 3"},
    {"tee", "0 1 2 3"},
    {"numa_binding", "node socket exclusive core-complex none"},
    {"cpu_binding", "split none"},
    {"console", "ranks collapse"},
    {"health_checks", "local log_dir entrypoint store gpus open_files network none"},
    {"python_hook", "auto on off"},
    {"scheduler", "auto slurm pbs lsf flux mpi kubeflow none"},
    {"log_level", "trace debug info warn error critical off"},
    {"signals_to_handle", "SIGTERM SIGINT SIGHUP SIGQUIT SIGUSR1 SIGUSR2"},
}};

}  // namespace

std::string_view optionTopic(std::string_view dest) {
  for (const auto& [name, topic] : kTopicOf) {
    if (name == dest) {
      return topic;
    }
  }
  return {};
}

std::vector<std::string> optionValues(std::string_view dest) {
  for (const auto& [name, words] : kValuesOf) {
    if (name == dest) {
      std::vector<std::string> values;
      std::string_view rest = words;
      while (!rest.empty()) {
        const auto space = rest.find(' ');
        values.emplace_back(rest.substr(0, space));
        rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      }
      return values;
    }
  }
  return {};
}

void addLaunchOptions(CLI::App& app, RawOptions& raw) {
  // Registered topic by topic: CLI11's help lists groups in the order it first meets them.
  std::vector<const OptionSpec*> ordered;
  for (const std::string_view topic : kTopics) {
    for (const OptionSpec& spec : kOptions) {
      if (optionTopic(spec.dest) == topic) {
        ordered.push_back(&spec);
      }
    }
  }
  for (const OptionSpec* specPtr : ordered) {
    const OptionSpec& spec = *specPtr;
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
    const std::string topic(optionTopic(spec.dest));
    if (spec.kind == Kind::kFlag) {
      app.add_flag_callback(
             joined, [&raw, dest] { raw.given[dest] = "1"; }, help)
          ->group(topic);
    } else {
      app.add_option_function<std::string>(
             joined, [&raw, dest](const std::string& value) { raw.given[dest] = value; }, help)
          // argparse: the last one wins; every --export counts (joined by newlines).
          ->multi_option_policy(dest == "export" ? CLI::MultiOptionPolicy::Join
                                                 : CLI::MultiOptionPolicy::TakeLast)
          ->group(topic);
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

int reportParseError(const CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(error);  // --help: the help text on stdout, exit 0
  }
  std::cerr << "dtrun: " << parseErrorLine(error) << "\n";
  return kUsageError;
}
}  // namespace dtrun::launcher
