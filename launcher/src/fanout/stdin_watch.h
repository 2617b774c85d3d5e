// --watch_stdin, set by `dtrun --hostfile/--hosts` on the agents it starts over ssh: the agent's
// stdin is the ssh session, and the session's end means the launcher is gone (Ctrl-C'd, killed,
// its host or network down). A helper process forked here reads it: each byte is a signal number
// that the launcher forwards (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2), sent on to the
// agent; end of file is SIGTERM. The first stop signal (or the end) arms a backstop: SIGKILL
// `grace` later if the agent is still there. The agent's own stdin becomes /dev/null. Call once,
// after the signals are blocked and before the agent starts (no thread may exist: it forks).
#pragma once

#include <chrono>
#include <string_view>

#include "dtrun/common.h"

namespace dtrun::launcher {

// Starts the helper and writes `readyLine` + "\n" to stderr (the launcher's sign that the session
// now reaches this dtrun). The helper dies with this process (PR_SET_PDEATHSIG).
[[nodiscard]] Status startStdinWatch(std::chrono::milliseconds grace, std::string_view readyLine);

}  // namespace dtrun::launcher
