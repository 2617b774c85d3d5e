// launch_timer: runs one launcher command and prints what bench/launch needs about it, one line
// of key=value pairs on stdout:
//
//   launch_timer [--timeout S] [--log FILE] [--agent-rss] -- COMMAND [ARGS...]
//   launch_timer rc=0 exec_ns=... end_ns=... wall_ms=... wait4_maxrss_kb=... agent_hwm_kb=...
//                timed_out=0
//
// exec_ns  CLOCK_REALTIME in the child just before execve(COMMAND): the launcher's start.
// end_ns   CLOCK_REALTIME just after wait4() returned it: the launcher's exit as its parent sees
// it. wall_ms  CLOCK_MONOTONIC from before fork() to after wait4(): the command's total wall time.
// wait4_maxrss_kb  ru_maxrss of wait4(): the launcher's peak RSS, but Linux folds in the largest
//          peak among the children it reaped (RUSAGE_BOTH), i.e. its workers.
// agent_hwm_kb / agent_rss_kb (only with --agent-rss): VmHWM / VmRSS of the launcher process
//          alone, read from /proc/<pid>/status while it is stopped at PTRACE_EVENT_EXIT (its memory
//          still mapped). ptrace adds a stop per signal the launcher receives, so a run with
//          --agent-rss is for memory only; its times are not comparable.
//
// The launcher's stdout and stderr go to --log FILE (default /dev/null). The launcher runs in its
// own process group; after --timeout S (default 60) it gets SIGTERM (both launchers forward that to
// their workers), and 3 s later SIGKILL for it and its group. SIGINT/SIGTERM to launch_timer start
// the same sequence. Exit status: the launcher's (128+signal if it was killed), 124 on timeout.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

volatile sig_atomic_t gChild = 0;
volatile sig_atomic_t gStopping = 0;  // 0 running, 1 SIGTERM sent, 2 SIGKILL sent
volatile sig_atomic_t gTimedOut = 0;

long long clockNs(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void escalate() {
  const pid_t child = gChild;
  if (child <= 0) {
    return;
  }
  if (gStopping == 0) {
    gStopping = 1;
    ::kill(child, SIGTERM);
    ::alarm(3);
  } else {
    gStopping = 2;
    ::kill(-child, SIGKILL);
    ::kill(child, SIGKILL);
  }
}

void onAlarm(int /*signal*/) {
  if (gStopping == 0) {
    gTimedOut = 1;
  }
  escalate();
}

void onTerminate(int /*signal*/) {
  if (gStopping == 0) {
    escalate();
  }
}

void install(int signal, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: wait4() returns EINTR and the loop goes on
  ::sigaction(signal, &action, nullptr);
}

// One "Name:   1234 kB" field of /proc/<pid>/status, in kB; -1 if absent.
long statusField(pid_t pid, const char* name) {
  char path[64];
  static_cast<void>(std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(pid)));
  FILE* file = std::fopen(path, "r");
  if (file == nullptr) {
    return -1;
  }
  char line[256];
  long value = -1;
  const size_t length = std::strlen(name);
  while (std::fgets(line, sizeof line, file) != nullptr) {
    if (std::strncmp(line, name, length) == 0 && line[length] == ':') {
      value = std::strtol(line + length + 1, nullptr, 10);
      break;
    }
  }
  static_cast<void>(std::fclose(file));
  return value;
}

[[noreturn]] void usage() {
  static_cast<void>(std::fprintf(
      stderr,
      "usage: launch_timer [--timeout S] [--log FILE] [--agent-rss] -- COMMAND [ARGS...]\n"));
  std::_Exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  double timeoutS = 60;
  const char* logPath = "/dev/null";
  bool agentRss = false;
  int first = 1;
  for (; first < argc; ++first) {
    const std::string arg = argv[first];
    if (arg == "--") {
      ++first;
      break;
    }
    if (arg == "--timeout" && first + 1 < argc) {
      timeoutS = std::atof(argv[++first]);
    } else if (arg == "--log" && first + 1 < argc) {
      logPath = argv[++first];
    } else if (arg == "--agent-rss") {
      agentRss = true;
    } else {
      usage();
    }
  }
  if (first >= argc) {
    usage();
  }

  // One shared page: the child writes its pre-exec stamp (or its execve errno) there.
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    std::perror("mmap");
    return 2;
  }
  auto* shared = static_cast<volatile long long*>(page);
  shared[0] = 0;  // exec_ns
  shared[1] = 0;  // execve errno

  const int logFd = ::open(logPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logFd < 0) {
    std::perror(logPath);
    return 2;
  }
  install(SIGALRM, onAlarm);
  install(SIGINT, onTerminate);
  install(SIGTERM, onTerminate);

  const long long startMono = clockNs(CLOCK_MONOTONIC);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    return 2;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(logFd, 1);
    ::dup2(logFd, 2);
    static_cast<void>(signal(SIGINT, SIG_DFL));
    static_cast<void>(signal(SIGTERM, SIG_DFL));
    static_cast<void>(signal(SIGALRM, SIG_DFL));
    if (agentRss) {
      ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
      static_cast<void>(::raise(SIGSTOP));  // the parent sets ptrace options, then lets it go on
    }
    shared[0] = clockNs(CLOCK_REALTIME);
    ::execvp(argv[first], argv + first);
    shared[1] = errno;
    ::_exit(127);
  }
  gChild = pid;
  ::setpgid(pid, pid);
  if (timeoutS > 0) {
    itimerval timer{};
    timer.it_value.tv_sec = static_cast<time_t>(timeoutS);
    timer.it_value.tv_usec = static_cast<suseconds_t>(
        (timeoutS - static_cast<double>(static_cast<long>(timeoutS))) * 1e6);
    ::setitimer(ITIMER_REAL, &timer, nullptr);
  }

  int status = 0;
  rusage usage{};
  long agentHwm = -1;
  long agentRssNow = -1;
  bool optionsSet = false;
  for (;;) {
    const pid_t got = ::wait4(pid, &status, agentRss ? __WALL : 0, &usage);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      std::perror("wait4");
      return 2;
    }
    if (!WIFSTOPPED(status)) {
      break;  // exited or killed
    }
    // Only reached with --agent-rss: a ptrace stop.
    const int stopSignal = WSTOPSIG(status);
    const int event = status >> 16;
    int inject = 0;
    if (!optionsSet && stopSignal == SIGSTOP) {
      // ptrace passes its data argument as a pointer-sized integer.
      ::ptrace(PTRACE_SETOPTIONS, pid, nullptr,
               reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
                   PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL));
      optionsSet = true;
    } else if (event == PTRACE_EVENT_EXIT) {
      agentHwm = statusField(pid, "VmHWM");
      agentRssNow = statusField(pid, "VmRSS");
    } else if (event == 0) {
      inject = stopSignal;  // a signal-delivery-stop: deliver the signal as if untraced
    }
    ::ptrace(
        PTRACE_CONT, pid, nullptr,
        reinterpret_cast<void*>(static_cast<long>(inject)));  // NOLINT(performance-no-int-to-ptr)
  }
  const long long endRealtime = clockNs(CLOCK_REALTIME);
  const long long endMono = clockNs(CLOCK_MONOTONIC);
  gChild = 0;
  const itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);

  int rc = 0;
  if (WIFEXITED(status)) {
    rc = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    rc = 128 + WTERMSIG(status);
  }
  if (shared[1] != 0) {
    static_cast<void>(
        std::fprintf(stderr, "launch_timer: cannot run %s: %s\n", argv[first],
                     std::system_category().message(static_cast<int>(shared[1])).c_str()));
  }
  std::printf(
      "launch_timer rc=%d exec_ns=%lld end_ns=%lld wall_ms=%.3f wait4_maxrss_kb=%ld"
      " agent_hwm_kb=%ld agent_rss_kb=%ld timed_out=%d\n",
      rc, static_cast<long long>(shared[0]), endRealtime,
      static_cast<double>(endMono - startMono) / 1e6, usage.ru_maxrss, agentHwm, agentRssNow,
      static_cast<int>(gTimedOut));
  return gTimedOut != 0 ? 124 : rc;
}
