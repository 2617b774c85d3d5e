#include "workers/child_process.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <system_error>
#include <unordered_set>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrun/placement.h"

#include "helper_children.h"
#include "workers/worker_guardian.h"

namespace dtrun::agent::detail {
namespace {

constexpr int kExitParentGone = 126;

// What the child reports through the error pipe before it exits: which step failed, and errno.
enum ChildStep : int { kStepExec = 0, kStepAffinity = 1 };

// The placement a child applies to itself, prepared before fork: the child may not allocate.
struct Placement {
  cpu_set_t* cpus = nullptr;  // CPU_ALLOC'd; null = inherited
  std::size_t cpuSetSize = 0;
  std::vector<unsigned long> nodeMask;       // set_mempolicy's bitmask; empty = default policy
  std::vector<unsigned long> firstNodeMask;  // the lowest node of nodeMask alone
  bool manyNodes = false;

  explicit Placement(const SpawnRequest& request) {
    if (!request.cpus.empty()) {
      const int count = *std::max_element(request.cpus.begin(), request.cpus.end()) + 1;
      cpus = CPU_ALLOC(count);
      cpuSetSize = CPU_ALLOC_SIZE(count);
      CPU_ZERO_S(cpuSetSize, cpus);
      for (const int cpu : request.cpus) {
        CPU_SET_S(static_cast<std::size_t>(cpu), cpuSetSize, cpus);
      }
    }
    constexpr std::size_t kBits = 8 * sizeof(unsigned long);
    const auto setBit = [](std::vector<unsigned long>& mask, std::size_t bit, std::size_t words) {
      mask.resize(words, 0UL);
      mask[bit / kBits] |= 1UL << (bit % kBits);
    };
    if (!request.memNodes.empty()) {
      const auto highest = static_cast<std::size_t>(
          *std::max_element(request.memNodes.begin(), request.memNodes.end()));
      for (const int node : request.memNodes) {
        setBit(nodeMask, static_cast<std::size_t>(node), highest / kBits + 1);
      }
      const auto lowest = static_cast<std::size_t>(
          *std::min_element(request.memNodes.begin(), request.memNodes.end()));
      setBit(firstNodeMask, lowest, highest / kBits + 1);
      manyNodes = lowest != highest;
    }
  }
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;
  Placement(Placement&&) = delete;
  Placement& operator=(Placement&&) = delete;
  ~Placement() {
    if (cpus != nullptr) {
      CPU_FREE(cpus);
    }
  }

  // In the child: false with errno when the affinity cannot be set.
  [[nodiscard]] bool apply() const {
    if (cpus != nullptr && ::sched_setaffinity(0, cpuSetSize, cpus) != 0) {
      return false;
    }
    if (!nodeMask.empty()) {
      // MPOL_PREFERRED_MANY (5, Linux 5.15) for several nodes, else MPOL_PREFERRED (1) for the
      // first; a node this kernel lacks leaves the default policy.
      constexpr long kPreferred = 1;
      constexpr long kPreferredMany = 5;
      const unsigned long maxNode = nodeMask.size() * 8 * sizeof(unsigned long) + 1;
      if (!manyNodes ||
          ::syscall(SYS_set_mempolicy, kPreferredMany, nodeMask.data(), maxNode) != 0) {
        static_cast<void>(::syscall(SYS_set_mempolicy, kPreferred, firstNodeMask.data(), maxNode));
      }
    }
    return true;
  }
};

int pidfdSendSignal(int pidfd, int signal) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// Runs in the child between fork and exec: async-signal-safe calls only (no allocation, no
// logging, no exceptions).
[[noreturn]] void execChild(const SpawnRequest& request, const Placement& placement,
                            char* const* argv, char* const* envp, int errorPipe, pid_t parent) {
  ::setpgid(0, 0);  // own group: killpg() reaches the worker's own children
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {  // the agent died before prctl took effect
    ::_exit(kExitParentGone);
  }
  // Handlers first, then the mask: the agent's handlers must never run here (spawnChild blocks
  // every signal across the clone; in the vfork-style child they would run on the agent's
  // memory). The agent's blocked mask would survive exec. The child has a single thread.
  for (int sig = 1; sig < NSIG; ++sig) {
    static_cast<void>(::signal(sig, SIG_DFL));
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe)
  if (request.stdoutFd >= 0) {
    ::dup2(request.stdoutFd, STDOUT_FILENO);
  }
  if (request.stderrFd >= 0) {
    ::dup2(request.stderrFd, STDERR_FILENO);
  }
  // Nothing of the agent's beyond stdio may reach the worker: an inherited listening socket
  // would keep the store's port bound (and accept connections nobody answers) for as long as
  // any descendant of the worker lives, e.g. after the agent was killed. CLOEXEC rather than
  // close: the error pipe must stay usable should execve fail.
  static_cast<void>(::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC));
  std::array<int, 2> failure{kStepAffinity, 0};
  if (placement.apply()) {
    ::execve(request.path.c_str(), argv, envp);
    failure[0] = kStepExec;
  }
  failure[1] = errno;
  [[maybe_unused]] const ssize_t written = ::write(errorPipe, failure.data(), sizeof failure);
  ::_exit(127);
}

struct ChildArgs {
  const SpawnRequest* request;
  const Placement* placement;
  char* const* argv;
  char* const* envp;
  int errorPipe;
  pid_t parent;
};

int childEntry(void* p) {
  const auto* a = static_cast<const ChildArgs*>(p);
  execChild(*a->request, *a->placement, a->argv, a->envp, a->errorPipe, a->parent);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DTRUN_SPAWN_BY_FORK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DTRUN_SPAWN_BY_FORK 1
#endif
#endif

// Starts the child as posix_spawn does: it shares the agent's memory (no page tables copied, no
// copy-on-write faults after it) on a stack of its own, and this thread waits until it has
// exec'd or exited. A fork copies an agent's page tables per worker: 16 workers took ~4 ms of
// forks against ~1 ms this way. Sanitizer builds fork: their runtimes cannot follow a child
// that runs on the agent's memory.
pid_t spawnChild(ChildArgs& args) {
#ifdef DTRUN_SPAWN_BY_FORK
  const pid_t pid = ::fork();
  if (pid == 0) {
    childEntry(&args);
  }
  return pid;
#else
  constexpr std::size_t kStack = std::size_t{256} * 1024;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    return -1;
  }
  sigset_t all;
  sigset_t old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::clone(childEntry, static_cast<char*>(stack) + kStack,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStack);
  errno = err;
  return pid;
#endif
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) {
    out.push_back(const_cast<char*>(s.c_str()));  // NOLINT: execve's signature predates const
  }
  out.push_back(nullptr);
  return out;
}

}  // namespace

int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

std::string signalName(int signal) {
  static constexpr std::array<std::pair<int, const char*>, 21> kNames = {{
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"},
  }};
  for (const auto& [number, name] : kNames) {
    if (number == signal) {
      return name;
    }
  }
  return "signal " + std::to_string(signal);
}

std::string ExitStatus::describe() const {
  if (signaled) {
    return "signal " + std::to_string(code) + " (" + signalName(code) + ")" +
           (killedBy.empty() ? "" : ", " + killedBy);
  }
  return "exit code " + std::to_string(code);
}

namespace {
// Children owned by a ChildProcess, not yet reaped: the subreaper's orphan reaping leaves them to
// their owner (a stack tool is reaped by the thread that runs it, never by the loop).
std::mutex ownedMutex;
std::unordered_set<pid_t> ownedPids;  // guarded by ownedMutex

void setOwned(pid_t pid, bool owned) {
  const std::lock_guard<std::mutex> lock(ownedMutex);
  if (owned) {
    ownedPids.insert(pid);
  } else {
    ownedPids.erase(pid);
  }
}
}  // namespace

bool isOwnedChild(pid_t pid) {
  const std::lock_guard<std::mutex> lock(ownedMutex);
  return ownedPids.count(pid) != 0;
}

std::string kernelWaitOf(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream statFile(proc + "/stat");
  std::string stat;
  std::getline(statFile, stat);
  const auto close = stat.rfind(')');  // "<pid> (<comm>) <state> ...": comm may hold ')'
  if (close == std::string::npos || close + 2 >= stat.size()) {
    return "gone from /proc";
  }
  const char state = stat[close + 2];
  std::string text = std::string("state ") + state;
  switch (state) {
    case 'D':
      text += " (uninterruptible sleep)";
      break;
    case 'Z':
      text += " (exited, not yet reaped)";
      break;
    case 'T':
    case 't':
      text += " (stopped)";
      break;
    default:
      break;
  }
  std::ifstream wchanFile(proc + "/wchan");
  std::string wchan;
  std::getline(wchanFile, wchan);
  if (!wchan.empty() && wchan != "0") {  // "0": not waiting, or hidden from this user
    text += " in the kernel's " + wchan;
  }
  return text;
}

std::vector<std::pair<pid_t, std::string>> unownedLiveChildren() {
  std::vector<std::pair<pid_t, std::string>> found;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    std::ifstream statFile(entry.path() / "stat");
    std::string stat;
    std::getline(statFile, stat);
    // "<pid> (<comm>) <state> <ppid> ...": comm may hold spaces and parentheses.
    const auto close = stat.rfind(')');
    const auto open = stat.find('(');
    if (close == std::string::npos || open == std::string::npos || close + 2 >= stat.size()) {
      continue;
    }
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    if (!(rest >> state >> parent) || parent != self || state == 'Z') {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (!isOwnedChild(pid) && !isHelperChild(pid)) {
      found.emplace_back(pid, stat.substr(open + 1, close - open - 1));
    }
  }
  return found;
}

void ChildProcess::markReaped() {
  reaped_ = true;
  setOwned(pid_, false);
}

Result<ChildProcess> ChildProcess::start(const SpawnRequest& request) {
  std::array<int, 2> errorPipe{-1, -1};
  if (::pipe2(errorPipe.data(), O_CLOEXEC) != 0) {
    return Status::system("pipe2", errno);
  }
  UniqueFd errorRead(errorPipe[0]);
  UniqueFd errorWrite(errorPipe[1]);
  const auto argv = pointers(request.argv);
  const auto envp = pointers(request.env);
  const Placement placement(request);
  ChildArgs args{&request, &placement, argv.data(), envp.data(), errorWrite.get(), ::getpid()};
  const pid_t pid = spawnChild(args);
  if (pid < 0) {
    return Status::system("clone", errno);
  }
  ::setpgid(pid, pid);  // also here, so there is no race over who runs first
  setOwned(pid, true);
  guardGroup(pid);
  UniqueFd pidfd(pidfdOpen(pid));
  if (!pidfd.valid()) {
    const int err = errno;
    ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    setOwned(pid, false);
    releaseGroup(pid);  // gone: the guardian must not count it as left behind at the agent's end
    return Status::system("pidfd_open", err);
  }
  return ChildProcess(pid, std::move(pidfd), std::move(errorRead), request.path,
                      placement::formatCpuList(request.cpus));
}

Status ChildProcess::confirmExec() {
  if (!execError_.valid()) {
    return Status::ok();
  }
  std::array<int, 2> failure{};  // {ChildStep, errno}
  ssize_t n = 0;
  do {
    n = ::read(execError_.get(), failure.data(), sizeof failure);
  } while (n < 0 && errno == EINTR);
  execError_.reset();
  if (n != static_cast<ssize_t>(sizeof failure)) {
    return Status::ok();  // EOF: the pipe closed on exec
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  markReaped();
  const std::string why = std::system_category().message(failure[1]);
  if (failure[0] == kStepAffinity) {
    return Status::error(Errc::kInvalidArgument,
                         "cannot bind " + path_ + " to CPUs " + cpus_ + ": " + why);
  }
  return Status::error(Errc::kNotFound, "cannot run " + path_ + ": " + why);
}

Result<ChildProcess> ChildProcess::spawn(const SpawnRequest& request) {
  DTRUN_ASSIGN_OR_RETURN(ChildProcess child, start(request));
  DTRUN_TRY(child.confirmExec());
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      execError_(std::move(other.execError_)),
      path_(std::move(other.path_)),
      cpus_(std::move(other.cpus_)),
      reaped_(std::exchange(other.reaped_, true)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    killAndReap();
    if (pid_ > 0) {
      releaseGroup(pid_);
    }
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    execError_ = std::move(other.execError_);
    path_ = std::move(other.path_);
    cpus_ = std::move(other.cpus_);
    reaped_ = std::exchange(other.reaped_, true);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  killAndReap();
  if (pid_ > 0) {
    releaseGroup(pid_);
  }
}

void ChildProcess::killAndReap() {
  if (!running()) {
    return;
  }
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  markReaped();
}

void ChildProcess::signalGroup(int signal) const {
  if (pid_ <= 0) {
    return;
  }
  // The group outlives its leader while grandchildren remain, so killpg stays right after the
  // leader was reaped; while the leader runs, pidfd_send_signal first closes the pid-reuse race.
  if (!reaped_) {
    static_cast<void>(pidfdSendSignal(pidfd_.get(), signal));
  }
  ::kill(-pid_, signal);
}

std::optional<ExitStatus> ChildProcess::tryReap() {
  if (reaped_) {
    return std::nullopt;
  }
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0) {
    return std::nullopt;
  }
  markReaped();
  ExitStatus status;
  status.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  status.code = info.si_status;
  return status;
}

}  // namespace dtrun::agent::detail
