// `dtrun --hostfile=FILE` / `--hosts=a,b,c`: the hosts and the command line of each host's ssh,
// built from the parsed options (pure: the caller reads the hostfile and this host's facts).
// Each host runs `dtrun --watch_stdin` with the local command's flags, c10d on the first host (or
// --rdzv_endpoint's), one --rdzv_id, --nnodes = the host count and --node_rank = its position.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/common.h"

#include "hostfile.h"
#include "launch_model.h"

namespace dtrun::launcher {

// What planning over ssh needs to know beyond HostFacts (readSshFacts() reads them).
struct SshFacts {
  std::string cwd;         // the launcher's working directory: every host's, by default
  std::string selfExe;     // this dtrun: what the hosts run unless --remote_dtrun says otherwise
  std::string sshProgram;  // ssh on this host's PATH; "" when there is none
};

// One host's part of the job.
struct SshNode {
  std::string host;  // as listed (ssh's destination and the console prefix)
  int nodeRank = 0;
  std::vector<std::string> argv;  // ssh's, the remote command last
  std::string remoteCommand;      // what the host's login shell runs
};

struct SshPlan {
  std::vector<SshNode> nodes;
  std::string rdzvId;
  std::string rdzvEndpoint;  // host:port of the job's store
  // The agents' grace before SIGKILL (--shutdown_timeout): bounds the launcher's waits.
  std::chrono::milliseconds shutdownTimeout{0};
  bool dryRun = false;
};

// The options only the ssh launch reads, and the one a remote agent gets.
inline constexpr std::string_view kWatchStdinDest = "watch_stdin";
// The line a remote agent writes to stderr once its stdin is watched (and before its banner): up
// to it, the session's stderr is ssh's and the remote shell's, reported as why a host failed.
inline constexpr std::string_view kRemoteReadyLine = "dtrun: remote agent ready";

// Whether the command line asks for a launch over ssh (--hostfile or --hosts).
bool wantsSsh(const RawOptions& raw);

// An ssh-only option given without --hostfile or --hosts: the one-line error; ok otherwise.
[[nodiscard]] Status checkNoSshOptions(const RawOptions& raw);

// The hosts (hostfile text read through host.readFile), then every host's command. Errors are
// one line naming the option or file:line and the fix. Node 0's options go through validate()
// here (this host's facts, the program taken as found), so a bad flag fails before any ssh.
[[nodiscard]] Result<SshPlan> planSsh(const RawOptions& raw, const HostFacts& host,
                                      const SshFacts& ssh);

// --dry-run's text: the hosts, the store, each host's ssh command.
std::string sshPlanText(const SshPlan& plan);

// `word` as one word for a POSIX shell: as it is when it needs no quoting, else in single quotes.
std::string shellQuote(std::string_view word);

// The c10d port derived from the run id: 20000 + hash mod 10000 (below Linux's ephemeral range),
// the same on every host, different for concurrent jobs whose first host is the same.
int rdzvPortFor(std::string_view rdzvId);

}  // namespace dtrun::launcher
