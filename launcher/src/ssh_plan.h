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

#include "fanout/fanout.h"
#include "launch_model.h"

namespace dtrun::launcher {

// The options only the ssh launch reads, and the one a remote agent gets.
inline constexpr std::string_view kWatchStdinDest = "watch_stdin";

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
