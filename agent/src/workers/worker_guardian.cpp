#include "workers/worker_guardian.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd_io.h"
#include "helper_children.h"
#include "log.h"
#include "workers/child_process.h"

namespace dtrun::agent::detail {
namespace {

int guardianPipe = -1;     // the write end, close-on-exec; -1 without a guardian
pid_t guardianPid = -1;    // -1 without a guardian
std::string guardianMark;  // "<agent pid>-<random>", in every worker's environment
// The record that says the agent ends normally (group ids are positive, releases negative).
constexpr std::int32_t kNormalEnd = 0;

// Every process whose environment holds `entry` ("DTRUN_GUARDIAN_MARK=<mark>") and that is not
// in one of `groups` (killed already), killed and added to `killed` (a process SIGKILLed a moment
// ago may still be listed). The guardian is one thread (forked before the agent's first), so it
// may allocate.
void killMarked(const std::string& entry, const std::set<pid_t>& groups, std::set<pid_t>& killed) {
  const pid_t self = ::getpid();
  // Entries end in NUL: a whole entry matches, not a prefix of a longer one.
  std::string needle(1, '\0');
  needle += entry;
  needle.push_back('\0');
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    char* end = nullptr;
    const long pid = std::strtol(name.c_str(), &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self || killed.count(static_cast<pid_t>(pid)) != 0 ||
        groups.count(::getpgid(static_cast<pid_t>(pid))) != 0) {
      continue;
    }
    const std::string path = "/proc/" + name + "/environ";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    std::string environment(1, '\0');  // NUL-framed: every entry matches whole
    std::array<char, 4096> chunk{};
    for (ssize_t n = 0; (n = ::read(fd, chunk.data(), chunk.size())) > 0;) {
      environment.append(chunk.data(), static_cast<std::size_t>(n));
    }
    ::close(fd);
    environment.push_back('\0');
    if (environment.find(needle) != std::string::npos) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      killed.insert(static_cast<pid_t>(pid));
    }
  }
}

bool readRecord(int fd, std::int32_t& value) {
  return io::readFull(fd, &value, sizeof value) == static_cast<long>(sizeof value);
}

[[noreturn]] void guardianMain(int readFd, const std::string& mark) {
  // It ends when the agent's end of the pipe closes, not on the terminal's or the scheduler's
  // signals, which reach the agent (and would otherwise end the guard with it).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::sigaction(signal, &ignore, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread here
  ::prctl(PR_SET_NAME, "dtrun-guardian");
  // Only stderr and the pipe stay open: the agent's output pipes must reach EOF when it exits.
  const int devNull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devNull >= 0) {
    ::dup2(devNull, STDIN_FILENO);
    ::dup2(devNull, STDOUT_FILENO);
  }
  if (readFd != STDERR_FILENO + 1) {
    ::dup2(readFd, STDERR_FILENO + 1);
  }
  ::close_range(STDERR_FILENO + 2, ~0U, 0);
  const int fd = STDERR_FILENO + 1;
  std::set<pid_t> groups;
  std::int32_t value = 0;
  bool normalEnd = false;
  while (readRecord(fd, value)) {
    if (value == kNormalEnd) {
      normalEnd = true;
    } else if (value > 0) {
      groups.insert(value);
    } else {
      groups.erase(-value);
    }
  }
  for (const pid_t group : groups) {
    ::kill(-group, SIGKILL);
  }
  if (!groups.empty()) {
    static_cast<void>(
        std::fprintf(stderr, "dtrun: the agent died; killed what was left of %zu worker group(s)\n",
                     groups.size()));
  }
  if (!normalEnd) {
    // Twice: a marked process may have forked between the scan's read and its kill.
    std::set<pid_t> killed;
    killMarked(mark, groups, killed);
    killMarked(mark, groups, killed);
    const std::size_t escaped = killed.size();
    if (escaped > 0) {
      static_cast<void>(std::fprintf(
          stderr,
          "dtrun: the agent died; killed %zu process(es) its workers left outside their groups\n",
          escaped));
    }
  }
  ::_exit(0);
}

void send(std::int32_t value) {
  if (guardianPipe < 0) {
    return;
  }
  // 4 bytes to a pipe are written whole or not at all; a guardian that is gone reads nothing.
  static_cast<void>(io::writeAll(guardianPipe, &value, sizeof value));
}

}  // namespace

void startWorkerGuardian() {
  if (guardianPipe >= 0) {
    return;
  }
  std::array<int, 2> fds{-1, -1};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    log::agent().warn("no worker guardian (pipe2 failed): {}",
                      std::system_category().message(errno));
    return;
  }
  std::random_device random;
  guardianMark =
      std::to_string(::getpid()) + "-" + std::to_string(random()) + std::to_string(random());
  const pid_t pid = ::fork();
  if (pid < 0) {
    guardianMark.clear();
    log::agent().warn("no worker guardian (fork failed): {}",
                      std::system_category().message(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  if (pid == 0) {
    ::close(fds[1]);
    guardianMain(fds[0], "DTRUN_GUARDIAN_MARK=" + guardianMark);
  }
  ::close(fds[0]);
  guardianPipe = fds[1];
  guardianPid = pid;
  registerHelperChild(pid);
}

const std::string& workerGuardianMark() { return guardianMark; }

void stopWorkerGuardian() {
  if (guardianPipe < 0) {
    return;
  }
  send(kNormalEnd);
  ::close(guardianPipe);
  guardianPipe = -1;
  // It exits as soon as it reads EOF: its exit is waited for on a pidfd (a second at most; a
  // poll every 10 ms added 10 ms to most runs' end), then it is reaped here (or, if it died
  // early, already by the agent's orphan reaping: then pidfd_open or waitpid fails at once).
  if (const UniqueFd pidfd(pidfdOpen(guardianPid)); pidfd.valid()) {
    pollfd exited{pidfd.get(), POLLIN, 0};
    while (::poll(&exited, 1, 1000) < 0 && errno == EINTR) {
    }
  }
  int status = 0;
  while (::waitpid(guardianPid, &status, WNOHANG) < 0 && errno == EINTR) {
  }
  forgetHelperChild(guardianPid);
  guardianPid = -1;
  guardianMark.clear();
}

void guardGroup(pid_t group) { send(static_cast<std::int32_t>(group)); }
void releaseGroup(pid_t group) { send(-static_cast<std::int32_t>(group)); }

}  // namespace dtrun::agent::detail
