// The launcher's model of `dtrun [options] <entrypoint> [args...]`: what the command line said
// (RawOptions), what the host is (HostFacts), and the checked plan (LaunchPlan) that the pure
// validate() builds from them. Where each part lives:
//   option_table.{h,cpp}     the option table and the CLI11 glue
//   value_parsers.{h,cpp}    one option's text -> a value, or a one-line error
//   resolver.h               command line > PET_* > the scheduler's allocation > default
//   scheduler_merge.{h,cpp}  the SLURM/PBS allocation merged below the user's settings
//   launch_plan.cpp          validate(): everything above -> LaunchPlan
//   host_facts.{h,cpp}       readHostFacts(): the launcher's only system calls
//   plan_text.cpp            the banner and --dry-run's text
//   launch_command.cpp       signals blocked, logging, then the agent
// Nothing here is thread-safe or blocks.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtrun/agent.h"
#include "dtrun/common.h"
#include "dtrun/launcher.h"

namespace dtrun::launcher {

// What the command line said, before any checking. Keys are torchrun's argparse dests
// ("nproc_per_node"); flags given on the command line hold "1".
struct RawOptions {
  std::map<std::string, std::string, std::less<>> given;
  std::vector<std::string> program;  // app.remaining(): the entrypoint and its arguments
};

// Everything validate() may learn about this machine and process, gathered once by
// readHostFacts() so that validate() itself stays pure (tests build their own).
struct HostFacts {
  std::map<std::string, std::string, std::less<>> env;  // the process environment
  int gpuCount = 0;                                     // NVIDIA GPUs visible to workers
  int cpuCount = 1;
  // How to run `entrypoint` directly when it is an executable file: the path as given, "./name"
  // for a program in the working directory, or the bare name when PATH has it. nullopt if none.
  std::function<std::optional<std::string>(const std::string& entrypoint)> findExecutable =
      [](const std::string&) { return std::optional<std::string>(); };
  // The file exec'd for a command's first word: a name with a '/' as given, else the first
  // executable file of that name on PATH; nullopt when PATH has none. Resolved here, once: the
  // agent never searches PATH. (Tests take the name as it is.)
  std::function<std::optional<std::string>(const std::string& program)> resolveProgram =
      [](const std::string& program) { return std::optional<std::string>(program); };
  // Whether a script handed to the interpreter exists (tests assume it does).
  std::function<bool(const std::string& path)> fileExists = [](const std::string&) { return true; };
  // Whether `host` (a name or address) is this machine: c10d's is_host guess. readHostFacts:
  // "localhost", loopback addresses, the host name, and the addresses of this host's interfaces.
  std::function<bool(const std::string& host)> isThisHost = [](const std::string&) {
    return false;
  };
  std::string hostName;  // gethostname(): finds this node in PBS_NODEFILE
  // A whole file's text (PBS_NODEFILE); nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> readFile =
      [](const std::string&) { return std::optional<std::string>(); };
  // A fresh run id for --standalone or an empty --rdzv_id (readHostFacts: random UUID text).
  std::function<std::string()> makeRunId = [] { return std::string("random-run-id"); };
};

// The checked launch: the agent's configuration plus what the launcher itself reports.
struct LaunchPlan {
  agent::AgentConfig config;
  int minNodes = 1;
  int maxNodes = 1;
  std::string rdzvBackend;   // "static" or "c10d"
  std::string rdzvEndpoint;  // host:port the store serves ("...:0" = a free port)
  std::vector<std::pair<std::string, std::string>> rdzvConf;
  double monitorInterval = 0.1;  // accepted for compatibility; dtrun does not poll
  std::string logLevel;          // "" = DTRUN_LOG_LEVEL or info
  std::string
      scheduler;  // the banner's account of the batch scheduler: what it supplied, from where
  std::vector<std::string> notices;   // printed verbatim to stderr (torchrun's boxed notices)
  std::vector<std::string> warnings;  // logged at warn level once logging is up
  bool dryRun = false;                // --dry-run: print the plan and start nothing
};

// Registers every torchrun option (dash and underscore spellings, -m, -r, -t) plus --log-level
// on `app`; parsing stores their text into `raw` (which must outlive the parse). Enables
// app.prefix_command() so arguments after the entrypoint reach the program untouched.
void addLaunchOptions(CLI::App& app, RawOptions& raw);

// Checks the options, resolves command line > PET_<DEST> > the batch scheduler's allocation
// (--scheduler) > torchrun's default, and builds the plan. An error's message is one line naming
// the flag (or environment variable) and what was expected, without the "dtrun: " prefix.
[[nodiscard]] Result<LaunchPlan> validate(const RawOptions& raw, const HostFacts& host);

// The store's token from --rdzv_conf token, --rdzv_conf token_file, DTRUN_STORE_TOKEN or
// DTRUN_STORE_TOKEN_FILE (first found wins; "" = none; a file's trailing newline is dropped).
// Errors name the source: an unreadable file, an empty token or one with spaces.
[[nodiscard]] Result<std::string> resolveStoreToken(
    const std::vector<std::pair<std::string, std::string>>& rdzvConf, const HostFacts& host);

// Facts about the running process: its environment, /dev/nvidia[0-9]* and CUDA_VISIBLE_DEVICES,
// std::thread::hardware_concurrency, the filesystem. Call once from main before threads start.
HostFacts readHostFacts();

// torchrun's launch banner (entrypoint, nodes, nproc, run id, rendezvous, restarts, logs, signals).
std::string launchBanner(const LaunchPlan& plan);

// What --dry-run prints: the banner, this node's rank table and, for each worker, the
// environment variables dtrun sets beyond `inherited` ("NAME=value", the launcher's environ).
std::string dryRunText(const LaunchPlan& plan, const std::vector<std::string>& inherited);

// Building blocks of validate(), exposed for tests.

// torchrun's -r/--redirects and -t/--tee: "0".."3", or "local_rank:0-3" pairs joined by commas
// (any number of digits in the local rank, so ranks >= 10 can be addressed). nullopt if malformed.
std::optional<agent::StreamSelection> parseStreamSelection(std::string_view text);

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

// The one line printed for a CLI11 parse error (without "dtrun: "), newlines folded.
std::string parseErrorLine(const CLI::ParseError& error);

}  // namespace dtrun::launcher
