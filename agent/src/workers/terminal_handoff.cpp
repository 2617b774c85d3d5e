#include "workers/terminal_handoff.h"

#include <csignal>

#include <fcntl.h>
#include <unistd.h>

namespace dtrun::agent::detail {
namespace {

// tcsetpgrp from a background process group raises SIGTTOU: ignored for that one call.
int setForeground(int fd, pid_t group) {
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTTOU, &ignore, &previous);
  const int rc = ::tcsetpgrp(fd, group);
  ::sigaction(SIGTTOU, &previous, nullptr);
  return rc;
}

}  // namespace

TerminalHandoff::TerminalHandoff() {
  if (::isatty(STDIN_FILENO) == 0 || ::tcgetpgrp(STDIN_FILENO) != ::getpgrp()) {
    return;  // no terminal, or dtrun runs in the background: nothing of its own to lend
  }
  fd_ = UniqueFd(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  own_ = ::getpgrp();
}

TerminalHandoff::~TerminalHandoff() { takeBack(); }

bool TerminalHandoff::lend(pid_t group) {
  if (!fd_.valid() || lent_ != 0 || setForeground(fd_.get(), group) != 0) {
    return false;
  }
  lent_ = group;
  ::kill(-group, SIGCONT);
  return true;
}

void TerminalHandoff::release(pid_t group) {
  if (group != 0 && group == lent_) {
    takeBack();
  }
}

void TerminalHandoff::takeBack() {
  if (lent_ != 0 && fd_.valid()) {
    static_cast<void>(setForeground(fd_.get(), own_));
  }
  lent_ = 0;
}

}  // namespace dtrun::agent::detail
