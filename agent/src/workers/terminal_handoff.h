// Who may read dtrun's terminal. Workers run in process groups of their own (so that a stop
// reaches their children), and a process outside the terminal's foreground group that reads it
// is stopped by SIGTTIN: a worker calling breakpoint() or input() under an interactive dtrun
// would hang, silent. When dtrun holds its terminal's foreground, it lends the terminal to the
// first worker group stopped that way (it becomes the foreground group and is continued) and
// takes it back when that group is gone. Meanwhile the terminal's Ctrl-C reaches that group, as
// it reaches the debugged program under pdb. Not thread-safe; on the agent's loop.
#pragma once

#include <sys/types.h>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

class TerminalHandoff {
 public:
  TerminalHandoff();  // finds the terminal: stdin, when it is one and dtrun is its foreground
  TerminalHandoff(const TerminalHandoff&) = delete;
  TerminalHandoff& operator=(const TerminalHandoff&) = delete;
  TerminalHandoff(TerminalHandoff&&) = delete;
  TerminalHandoff& operator=(TerminalHandoff&&) = delete;
  ~TerminalHandoff();  // takes the terminal back

  // Lends the terminal to `group` (stopped by SIGTTIN or SIGTTOU): true when it got it.
  bool lend(pid_t group);
  // `group` is gone: the terminal comes back to dtrun if `group` held it.
  void release(pid_t group);
  // The group that holds the terminal now (0 = dtrun's own, or none was lent).
  [[nodiscard]] pid_t holder() const { return lent_; }
  // Whether dtrun held its terminal's foreground when it started.
  [[nodiscard]] bool available() const { return fd_.valid(); }

 private:
  void takeBack();

  UniqueFd fd_;  // the terminal (a dup of stdin); invalid when there is none to lend
  pid_t own_ = 0;
  pid_t lent_ = 0;
};

}  // namespace dtrun::agent::detail
