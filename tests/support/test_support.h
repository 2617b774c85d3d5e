// Helpers shared by dtrun's tests: a store server on a free port, a child process that is always
// reaped, and polling with a deadline. Not thread-safe unless a helper says so.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtrun/rendezvous.h"

namespace dtrun::testing {

// A store server on port 0 for the duration of a test.
inline std::unique_ptr<rdzv::StoreServer> startServer(rdzv::ServerOptions options = {}) {
  options.host = options.host.empty() ? "127.0.0.1" : options.host;
  auto server = rdzv::StoreServer::start(options);
  if (!server.isOk()) {
    throw std::runtime_error(server.status().toString());
  }
  return std::move(server).value();
}

inline std::unique_ptr<rdzv::Store> connect(
    std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  rdzv::ClientOptions options;
  options.port = port;
  options.timeout = timeout;
  auto store = rdzv::connectStore(options);
  if (!store.isOk()) {
    throw std::runtime_error(store.status().toString());
  }
  return std::move(store).value();
}

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
