#include "workers/child_process.h"

#include <array>
#include <fstream>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/test_support.h"

using namespace std::chrono_literals;
using dtrun::agent::detail::ChildProcess;
using dtrun::agent::detail::ExitStatus;
using dtrun::agent::detail::SpawnRequest;

namespace {

SpawnRequest shell(const std::string& script) {
  SpawnRequest r;
  r.path = "/bin/sh";
  r.argv = {"sh", "-c", script};
  r.env = {"PATH=/usr/bin:/bin"};
  return r;
}

ExitStatus waitFor(ChildProcess& child) {
  std::optional<ExitStatus> status;
  REQUIRE(dtrun::testing::waitUntil([&] { return (status = child.tryReap()).has_value(); }, 10s));
  return *status;
}

// Dead includes killed but not yet reaped: a zombie waits for whoever adopted it (init here).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return false;
  }
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
}

}  // namespace

TEST_CASE("a child's exit code and death by signal are reported", "[unit][agent]") {
  auto ok = ChildProcess::spawn(shell("exit 0"));
  REQUIRE(ok.isOk());
  CHECK(waitFor(ok.value()).success());

  auto three = ChildProcess::spawn(shell("exit 3"));
  REQUIRE(three.isOk());
  const auto status = waitFor(three.value());
  CHECK(status.code == 3);
  CHECK(status.shellCode() == 3);

  auto segv = ChildProcess::spawn(shell("kill -SEGV $$"));
  REQUIRE(segv.isOk());
  const auto killed = waitFor(segv.value());
  CHECK(killed.signaled);
  CHECK(killed.shellCode() == 128 + SIGSEGV);
  CHECK(killed.describe() == "signal 11 (SIGSEGV)");
}

TEST_CASE("an exec failure comes back through the pipe with errno's text", "[unit][agent]") {
  SpawnRequest r;
  r.path = "./trian";
  r.argv = {"./trian"};
  const auto child = ChildProcess::spawn(r);
  REQUIRE_FALSE(child.isOk());
  CHECK(child.status().message() == "cannot run ./trian: No such file or directory");
}

TEST_CASE("signalling the group reaches the worker's own children", "[unit][agent]") {
  const std::string pidFile = "/tmp/dtrun-grandchild-" + std::to_string(::getpid());
  auto child = ChildProcess::spawn(shell("sleep 30 & echo $! > " + pidFile + "; wait"));
  REQUIRE(child.isOk());
  pid_t grandchild = 0;
  REQUIRE(dtrun::testing::waitUntil(
      [&] { return (std::ifstream(pidFile) >> grandchild) && grandchild > 0; }, 10s));
  child.value().signalGroup(SIGTERM);
  CHECK(waitFor(child.value()).signaled);
  // sleep was re-parented to init (or reaped by it); it must be gone either way.
  CHECK(dtrun::testing::waitUntil(
      [&] {
        return !alive(grandchild) || [&] {
          int status = 0;
          return ::waitpid(grandchild, &status, WNOHANG) == grandchild;
        }();
      },
      5s));
  std::remove(pidFile.c_str());
}

TEST_CASE("destroying a running child kills and reaps it", "[unit][agent]") {
  pid_t pid = 0;
  {
    auto child = ChildProcess::spawn(shell("sleep 30"));
    REQUIRE(child.isOk());
    pid = child.value().pid();
    CHECK(alive(pid));
  }
  CHECK_FALSE(alive(pid));
}

TEST_CASE("a worker dies with its agent (PR_SET_PDEATHSIG)", "[unit][agent]") {
  const std::string pidFile = "/tmp/dtrun-pdeath-" + std::to_string(::getpid());
  pid_t worker = 0;
  {
    dtrun::testing::ChildGuard agent([&] {
      auto child = ChildProcess::spawn(shell("echo $$ > " + pidFile + "; exec sleep 30"));
      if (!child.isOk()) {
        return 1;
      }
      ::pause();
      return 0;
    });
    REQUIRE(dtrun::testing::waitUntil(
        [&] { return (std::ifstream(pidFile) >> worker) && worker > 0; }, 10s));
    CHECK(alive(worker));
  }  // SIGKILLs the agent
  CHECK(dtrun::testing::waitUntil([&] { return !alive(worker); }, 2s));
  std::remove(pidFile.c_str());
}

TEST_CASE("a worker inherits no file descriptor of the agent's beyond stdio", "[unit][agent]") {
  // Opened without O_CLOEXEC, as asio opens its sockets: the store's listening socket, inherited
  // by a worker's descendants, kept the port bound after the agent was killed.
  std::array<int, 2> fds{};
  REQUIRE(::pipe(fds.data()) == 0);
  const std::string fd = std::to_string(fds[1]);
  auto child = ChildProcess::spawn(shell("[ -L /proc/$$/fd/" + fd + " ] && exit 1; exit 0"));
  REQUIRE(child.isOk());
  CHECK(waitFor(child.value()).success());
  ::close(fds[0]);
  ::close(fds[1]);
}
