// stamp_worker: the worker of bench/launch. It records when it started and when it exits, in
// CLOCK_REALTIME nanoseconds (one clock shared by every process on the machine), into one file:
//
//   stamp_worker DIR [ok|fail-first|fail-last|hold-fail]
//   -> DIR/a<TORCHELASTIC_RESTART_COUNT>.r<RANK>.<pid>: "<start_ns> <end_ns> <maxrss_kb> <rc>\n"
//
// fail-first: local rank 0 exits 1 on attempt 0 (TORCHELASTIC_RESTART_COUNT=0) at once, after
//   writing its stamps; every other worker, and every worker of later attempts, exits 0.
// fail-last: the same, but local rank 0 of attempt 0 first waits (polling DIR every 100 us, 10 s
//   at most) until the other LOCAL_WORLD_SIZE - 1 workers of attempt 0 have written their stamps,
//   so it fails while the launcher has nothing else to do (a failure in mid-run).
// hold-fail (a job-wide failure, bench/launch/run_restart.sh): until the failure, every rank
//   but RANK 0 writes "<start_ns>" to DIR/a0.r<RANK>.<pid>.started and then waits (60 s at
//   most) for the launcher's SIGTERM, whose arrival it writes to DIR/term.r<RANK>.<pid> before
//   it exits 143; RANK 0 waits until the other WORLD_SIZE - 1 have started, creates DIR/failed
//   and exits 1 (its end stamp is the failure). Once DIR/failed exists every rank behaves as ok
//   and stamps DIR/after.r<RANK>.<pid>: by the failure, not by TORCHELASTIC_RESTART_COUNT (torchrun
//   restarts the other nodes' workers for a new round without counting a restart).
// Otherwise nothing is done between the two stamps, so start..end is the worker's own run time
// (a few microseconds). Built static where possible, so the dynamic loader adds nothing before
// main() (see bench/launch/CMakeLists.txt).
//
// C library calls only: no iostreams, no static constructors before the start stamp.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

namespace {

long long nowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

const char* envOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): single-threaded
  return (value != nullptr && *value != '\0') ? value : fallback;
}

// Stamp files of attempt 0 in dir ("a0.*").
int attemptZeroStamps(const char* dir) {
  DIR* d = ::opendir(dir);
  if (d == nullptr) {
    return -1;
  }
  int count = 0;
  while (const dirent* entry = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): one thread
    if (std::strncmp(entry->d_name, "a0.", 3) == 0) {
      ++count;
    }
  }
  ::closedir(d);
  return count;
}

// Waits until `others` stamp files of attempt 0 exist in dir, 10 s at most.
void waitForOthers(const char* dir, int others) {
  const timespec pause{0, 100000};
  for (int i = 0; i < 100000 && attemptZeroStamps(dir) < others; ++i) {
    ::nanosleep(&pause, nullptr);
  }
}

// hold-fail: where a held rank writes when SIGTERM arrived (set before the handler is).
char termPath[4096];

void onTerm(int /*signal*/) {
  const long long at = nowNs();
  char line[32];
  const int n = std::snprintf(line, sizeof line, "%lld\n", at);
  const int fd = ::open(termPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0 && n > 0) {
    static_cast<void>(::write(fd, line, static_cast<size_t>(n)));
  }
  ::_exit(143);
}

// hold-fail on attempt 0, a rank other than 0: started, then held until the launcher stops it.
[[noreturn]] void holdUntilStopped(const char* dir, const char* rank, long long start) {
  static_cast<void>(std::snprintf(termPath, sizeof termPath, "%s/term.r%s.%ld", dir, rank,
                                  static_cast<long>(::getpid())));
  struct sigaction term {};
  term.sa_handler = onTerm;
  ::sigaction(SIGTERM, &term, nullptr);
  char path[4096];
  static_cast<void>(std::snprintf(path, sizeof path, "%s/a0.r%s.%ld.started", dir, rank,
                                  static_cast<long>(::getpid())));
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  char line[32];
  const int n = std::snprintf(line, sizeof line, "%lld\n", start);
  if (fd < 0 || ::write(fd, line, static_cast<size_t>(n)) != n) {
    std::perror(path);
    ::_exit(3);
  }
  ::close(fd);
  const timespec second{1, 0};
  for (int i = 0; i < 60; ++i) {
    ::nanosleep(&second, nullptr);
  }
  ::_exit(4);  // never stopped
}

}  // namespace

int main(int argc, char** argv) {
  const long long start = nowNs();
  if (argc < 2) {
    static const char usage[] = "usage: stamp_worker DIR [ok|fail-first|fail-last|hold-fail]\n";
    static_cast<void>(::write(2, usage, sizeof usage - 1));
    return 2;
  }
  const char* mode = argc >= 3 ? argv[2] : "ok";
  const bool failLast = std::strcmp(mode, "fail-last") == 0;
  const bool holdFail = std::strcmp(mode, "hold-fail") == 0;
  const bool fail = failLast || std::strcmp(mode, "fail-first") == 0;
  const char* attempt = envOr("TORCHELASTIC_RESTART_COUNT", "x");
  const char* rank = envOr("RANK", "x");
  const char* localRank = envOr("LOCAL_RANK", "x");
  char failed[4096];
  static_cast<void>(std::snprintf(failed, sizeof failed, "%s/failed", argv[1]));
  const bool afterFailure = holdFail && ::access(failed, F_OK) == 0;
  if (holdFail && !afterFailure && std::strcmp(rank, "0") != 0) {
    holdUntilStopped(argv[1], rank, start);
  }
  const int rc = (fail && std::strcmp(attempt, "0") == 0 && std::strcmp(localRank, "0") == 0) ||
                         (holdFail && !afterFailure)
                     ? 1
                     : 0;
  if (rc != 0 && failLast) {
    waitForOthers(argv[1], std::atoi(envOr("LOCAL_WORLD_SIZE", "1")) - 1);
  } else if (rc != 0 && holdFail) {
    waitForOthers(argv[1], std::atoi(envOr("WORLD_SIZE", "1")) - 1);
    ::close(::open(failed, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  }

  char path[4096];
  if (afterFailure) {
    static_cast<void>(std::snprintf(path, sizeof path, "%s/after.r%s.%ld", argv[1], rank,
                                    static_cast<long>(::getpid())));
  } else {
    static_cast<void>(std::snprintf(path, sizeof path, "%s/a%s.r%s.%ld", argv[1], attempt, rank,
                                    static_cast<long>(::getpid())));
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path);
    return 3;
  }
  const long long end = nowNs();
  char line[128];
  const int n =
      std::snprintf(line, sizeof line, "%lld %lld %ld %d\n", start, end, usage.ru_maxrss, rc);
  if (::write(fd, line, static_cast<size_t>(n)) != n) {
    std::perror(path);
    return 3;
  }
  ::_exit(rc);  // the kernel closes fd; no atexit work after the end stamp
}
