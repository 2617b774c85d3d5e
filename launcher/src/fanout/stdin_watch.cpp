#include "fanout/stdin_watch.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fd_io.h"
#include "helper_children.h"

namespace dtrun::launcher {
namespace {

constexpr int kWatchedFd = STDERR_FILENO + 1;

bool forwardable(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT ||
         signal == SIGUSR1 || signal == SIGUSR2;
}

long long nowMs() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// The helper: only system calls from here on (forked from the agent's one thread). The first
// stop signal or the end of the session arms the backstop: SIGKILL `graceMs` later (an agent
// blocked where it cannot take signals, e.g. reaching a store that is gone, still ends).
[[noreturn]] void watch(pid_t agent, long long graceMs) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent) {
    ::_exit(0);  // the agent is gone already
  }
  ::prctl(PR_SET_NAME, "dtrun-stdin");
  std::array<unsigned char, 64> buffer{};
  long long killAt = -1;
  bool open = true;
  for (;;) {
    int waitMs = -1;
    if (killAt >= 0) {
      const long long left = killAt - nowMs();
      if (left <= 0) {
        break;
      }
      waitMs = static_cast<int>(left);
    }
    if (!open) {
      ::poll(nullptr, 0, waitMs);
      continue;
    }
    pollfd fd{kWatchedFd, POLLIN, 0};
    const int ready = ::poll(&fd, 1, waitMs);
    if (ready <= 0) {
      continue;  // the deadline (checked above), or EINTR
    }
    const ssize_t n = ::read(kWatchedFd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {  // end of file, or the session broke: the launcher is gone
      open = false;
      ::kill(agent, SIGTERM);
      if (killAt < 0) {
        killAt = nowMs() + graceMs;
      }
      continue;
    }
    for (ssize_t i = 0; i < n; ++i) {
      const int signal = buffer[static_cast<std::size_t>(i)];
      if (forwardable(signal)) {
        ::kill(agent, signal);
        if (killAt < 0 && signal != SIGUSR1 && signal != SIGUSR2) {
          killAt = nowMs() + graceMs;
        }
      }
    }
  }
  ::kill(agent, SIGKILL);  // still there after its grace: its workers die with it (PDEATHSIG)
  ::_exit(0);
}

}  // namespace

Status startStdinWatch(std::chrono::milliseconds grace, std::string_view readyLine) {
  // Both above the watched descriptor's place in the helper, so that neither dup2 there
  // replaces the other.
  const int opened = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (opened < 0) {
    return Status::system("open /dev/null", errno);
  }
  const int devNull = ::fcntl(opened, F_DUPFD_CLOEXEC, kWatchedFd + 1);
  ::close(opened);
  if (devNull < 0) {
    return Status::system("--watch_stdin: /dev/null", errno);
  }
  const int watched = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, kWatchedFd + 1);
  if (watched < 0) {
    const int err = errno;
    ::close(devNull);
    return Status::system("--watch_stdin: stdin", err);
  }
  const pid_t agent = ::getpid();
  const long long graceMs = grace.count();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(devNull);
    ::close(watched);
    return Status::system("--watch_stdin: fork", err);
  }
  if (pid == 0) {
    // Nothing but the watched stdin stays open: the session's stdout and stderr must reach
    // their end when the agent exits.
    ::dup2(watched, kWatchedFd);
    ::dup2(devNull, STDIN_FILENO);
    ::dup2(devNull, STDOUT_FILENO);
    ::dup2(devNull, STDERR_FILENO);
    ::close_range(kWatchedFd + 1, ~0U, 0);
    watch(agent, graceMs);
  }
  registerHelperChild(pid);  // the agent's, not a worker's: it stays to the end
  ::close(watched);
  ::dup2(devNull, STDIN_FILENO);  // the workers read nothing from the session
  ::close(devNull);
  const std::string line = std::string(readyLine) + "\n";
  static_cast<void>(io::writeAll(STDERR_FILENO, line));
  return Status::ok();
}

}  // namespace dtrun::launcher
