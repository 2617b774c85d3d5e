// The launch over ssh, run (the plan is ssh_job.h's): one OpenSSH client per host, each in its
// own process group, dying with this dtrun (PR_SET_PDEATHSIG), its stdin a pipe that only this
// dtrun writes (a byte = a signal for the remote agent; its end = the launcher is gone). Every
// host's console comes here as whole lines with "<host>: " in front; SIGINT, SIGTERM, SIGHUP,
// SIGQUIT, SIGUSR1 and SIGUSR2 go to every host. One thread, one poll loop; every wait bounded.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "fanout/ssh_job.h"

namespace dtrun::launcher {

// The working directory ($PWD when it is getcwd()'s directory, else getcwd()), /proc/self/exe,
// and ssh as `resolveProgram` finds it (HostFacts's env and resolveProgram, passed in: the
// fan-out reads nothing of the launcher's model).
SshFacts readSshFacts(
    const std::map<std::string, std::string, std::less<>>& env,
    const std::function<std::optional<std::string>(const std::string& program)>& resolveProgram);

// Runs the job on every host and returns its exit code: 0 when every host's agent exited 0, else
// the first non-zero code a host ended with (ssh's 255 when a host could not be reached). A host
// that fails (unreachable, refusing the key, dtrun missing there, its job failed) is one line
// naming it; the others are stopped.
int runSsh(const SshPlan& plan);

}  // namespace dtrun::launcher
