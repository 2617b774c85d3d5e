// The launch over ssh as the fan-out runs it: each host's ssh command line and the job's store,
// planned by ssh_plan.h's planSsh() and run by ssh_fanout.h's runSsh(). Plain data, kept in the
// fan-out's room so that running it needs nothing of the launcher's option parsing.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

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

// The line a remote agent writes to stderr once its stdin is watched (and before its banner): up
// to it, the session's stderr is ssh's and the remote shell's, reported as why a host failed.
inline constexpr std::string_view kRemoteReadyLine = "dtrun: remote agent ready";

}  // namespace dtrun::launcher
