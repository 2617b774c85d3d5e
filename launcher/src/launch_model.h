// The launcher's model of `dtrun [options] <entrypoint> [args...]`: what the command line said
// (RawOptions), what the host is (HostFacts), and the checked plan (LaunchPlan) that the pure
// validate() (launch_plan.h) builds from the two. Plain data; nothing here blocks.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrun/agent.h"
#include "dtrun/placement.h"

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
  int gpuCount = 0;     // NVIDIA GPUs visible to workers (as torch counts them)
  int deviceNodes = 0;  // /dev/nvidia<N>: the machine's GPUs when sysfs lists none
  int cpuCount = 1;
  // How to run `entrypoint` directly when it is an executable file: the path as given, "./name"
  // for a program in the working directory, or the bare name when PATH has it. nullopt if none.
  std::function<std::optional<std::string>(const std::string& entrypoint)> findExecutable =
      [](const std::string&) { return std::optional<std::string>(); };
  // The file exec'd for a command's first word: a name with a '/' as given, else the first
  // executable file of that name on env's PATH (none when PATH is unset); nullopt when PATH has
  // none. Resolved here, once: the agent never searches PATH. (Tests take the name as it is.)
  std::function<std::optional<std::string>(const std::string& program)> resolveProgram =
      [](const std::string& program) { return std::optional<std::string>(program); };
  // Why the file at `path` (a program named with a '/') cannot be exec'd: "" when it can.
  std::function<std::string(const std::string& path)> whyNotRunnable = [](const std::string&) {
    return std::string();
  };
  // Why a file dtrun writes at the end (--report, --event_log, TORCHELASTIC_ERROR_FILE) could not
  // be written at `path`: "" when its directory exists and takes new files. Checked before
  // anything starts, so a whole job never runs only to lose its report. (Tests assume it can.)
  std::function<std::string(const std::string& path)> whyNotWritable = [](const std::string&) {
    return std::string();
  };
  // Whether something accepts TCP connections at host:port now (readHostFacts: one connect).
  std::function<bool(const std::string& host, int port)> acceptsConnection =
      [](const std::string&, int) { return false; };
  // Whether a script handed to the interpreter exists (tests assume it does).
  std::function<bool(const std::string& path)> fileExists = [](const std::string&) { return true; };
  // Whether `host` (a name or address) is this machine: c10d's is_host guess. readHostFacts:
  // "localhost", loopback addresses, the host name, and the addresses of this host's interfaces.
  std::function<bool(const std::string& host)> isThisHost = [](const std::string&) {
    return false;
  };
  std::string hostName;  // gethostname(): finds this node in PBS_NODEFILE
  // Where dtrun's Python hook (python/sitecustomize.py) lives: <prefix>/share/dtrun/python
  // beside an installed dtrun, else the source tree's python/. "" when neither has it.
  std::string pythonHookDir;
  // dtrun-netcheck (--health_checks=network): beside dtrun (installed: <prefix>/bin), else in
  // this build tree (<build>/netcheck). "" when neither has it.
  std::string netcheckProgram;
  // A whole file's text (PBS_NODEFILE); nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> readFile =
      [](const std::string&) { return std::optional<std::string>(); };
  // The machine's CPUs, NUMA nodes and GPUs as this process may use them (readHostFacts: from
  // $DTRUN_SYSFS_ROOT or /sys, the affinity and the cgroup's cpuset). Called only when a
  // placement option needs it.
  std::function<Result<placement::Topology>()> readTopology = [] {
    return Result<placement::Topology>(Status::invalidArgument("no topology was recorded"));
  };
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
  // The banner's account of the batch scheduler: what it supplied, and from where.
  std::string scheduler;
  std::vector<std::string> notices;   // printed verbatim to stderr (torchrun's boxed notices)
  std::vector<std::string> warnings;  // logged at warn level once logging is up
  std::string placement;              // the placement options given ("" = none)
  std::vector<std::string> placementByRank;  // each local rank's placement, in words
  bool dryRun = false;                       // --dry-run: print the plan and start nothing
};

}  // namespace dtrun::launcher
