// Test helpers for processes and time, on POSIX alone: polling with a deadline, and a forked
// child that is always reaped. Not thread-safe.
#pragma once

#include <cerrno>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>
#include <utility>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dtrun::testing {

// Polls `predicate` until it holds or `timeout` passes; returns its last value.
inline bool waitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return predicate();
}

// Forks; the child runs `body` and _exit()s with its return value (never returning into Catch).
// Destroying the guard kills and reaps a child still running, so a failed REQUIRE leaks nothing.
class ChildGuard {
 public:
  explicit ChildGuard(const std::function<int()>& body) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int code = 99;
      try {
        code = body();
      } catch (...) {
        code = 98;
      }
      ::_exit(code);
    }
    if (pid_ < 0) {
      throw std::runtime_error("fork failed");
    }
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  ChildGuard(ChildGuard&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  ~ChildGuard() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      static_cast<void>(wait());
    }
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  // Exit code, or 128 + signal.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace dtrun::testing
