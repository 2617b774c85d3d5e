// Status, Result and the error-propagation macros of dtrun/common.h; the shared text, fd and
// signal-mask helpers of common/src.
#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "dtrun/common.h"

#include "fd_io.h"
#include "signal_mask.h"
#include "support/process.h"
#include "text.h"

namespace {

using dtrun::Errc;
using dtrun::Result;
using dtrun::Status;

Status failsWith(Errc code) { return Status::error(code, "inner"); }
Result<int> number(bool ok) {
  if (!ok) {
    return Status::timeout("no number");
  }
  return 42;
}
Result<std::unique_ptr<int>> owned(bool ok) {
  if (!ok) {
    return Status::connection("nothing owned");
  }
  return std::make_unique<int>(7);
}

int reached = 0;  // how far the functions below got

Status tryStatus(bool ok) {
  reached = 0;
  DTRUN_TRY(ok ? Status::ok() : failsWith(Errc::kProtocol));
  reached = 1;
  return Status::ok();
}

Status tryResult(bool ok) {
  reached = 0;
  DTRUN_TRY(number(ok));
  reached = 1;
  return Status::ok();
}

Result<int> assignDeclared(bool ok) {
  DTRUN_ASSIGN_OR_RETURN(const int n, number(ok));
  return n + 1;
}

Result<int> assignExisting(bool ok) {
  int n = 0;
  DTRUN_ASSIGN_OR_RETURN(n, number(ok));
  DTRUN_ASSIGN_OR_RETURN(auto p, owned(true));  // two in one scope: distinct temporaries
  return n + *p;
}

Result<int> assignMoveOnly(bool ok) {
  DTRUN_ASSIGN_OR_RETURN(auto p, owned(ok));
  return *p;
}

}  // namespace

TEST_CASE("Status says what failed and keeps its code through withContext", "[unit][common]") {
  CHECK(Status::ok().isOk());
  CHECK(Status::ok().toString() == "ok");
  const Status s = Status::timeout("wait([k]) on 127.0.0.1:5");
  CHECK_FALSE(s.isOk());
  CHECK(s.code() == Errc::kTimeout);
  CHECK(s.toString() == "timeout: wait([k]) on 127.0.0.1:5");
  const Status wrapped = s.withContext("rendezvous");
  CHECK(wrapped.code() == Errc::kTimeout);
  CHECK(wrapped.message() == "rendezvous: wait([k]) on 127.0.0.1:5");
  CHECK(Status::ok().withContext("x").isOk());
  CHECK(Status::system("open(/x)", ENOENT).message() == "open(/x): No such file or directory");
  CHECK(Status::system("open(/x)", ENOENT).code() == Errc::kSystem);
  CHECK(dtrun::errcName(Errc::kDenied) == "denied");
}

TEST_CASE("Result holds a value or the Status explaining its absence", "[unit][common]") {
  const Result<int> ok = number(true);
  REQUIRE(ok.isOk());
  CHECK(ok.value() == 42);
  CHECK(ok.status().isOk());
  const Result<int> bad = number(false);
  CHECK_FALSE(bad.isOk());
  CHECK(bad.status().code() == Errc::kTimeout);
  CHECK(bad.status().message() == "no number");
  auto p = owned(true);
  REQUIRE(p.isOk());
  const std::unique_ptr<int> taken = std::move(p).value();
  CHECK(*taken == 7);
}

TEST_CASE("DTRUN_TRY returns the first failure of a Status or a Result", "[unit][common]") {
  CHECK(tryStatus(true).isOk());
  CHECK(reached == 1);
  const Status s = tryStatus(false);
  CHECK(s.code() == Errc::kProtocol);
  CHECK(reached == 0);
  CHECK(tryResult(true).isOk());
  CHECK(reached == 1);
  CHECK(tryResult(false).code() == Errc::kTimeout);
  CHECK(reached == 0);
}

TEST_CASE("DTRUN_ASSIGN_OR_RETURN declares, assigns and moves, or returns the failure",
          "[unit][common]") {
  CHECK(assignDeclared(true).value() == 43);
  CHECK(assignDeclared(false).status().code() == Errc::kTimeout);
  CHECK(assignExisting(true).value() == 49);
  CHECK(assignExisting(false).status().message() == "no number");
  CHECK(assignMoveOnly(true).value() == 7);
  CHECK(assignMoveOnly(false).status().code() == Errc::kConnection);
}

TEST_CASE("DTRUN_CHECK aborts with the broken invariant named", "[unit][common]") {
  std::array<int, 2> fds{};
  REQUIRE(::pipe(fds.data()) == 0);
  dtrun::testing::ChildGuard child([&fds] {
    ::dup2(fds[1], STDERR_FILENO);
    const int workers = 3;
    DTRUN_CHECK(workers == 4, "the group has every worker");
    return 0;
  });
  ::close(fds[1]);
  std::string text(512, '\0');
  const long n = dtrun::io::readFull(fds[0], text.data(), text.size());
  ::close(fds[0]);
  REQUIRE(n > 0);
  text.resize(static_cast<std::size_t>(n));
  CHECK(child.wait() == 128 + SIGABRT);
  CHECK_THAT(text, Catch::Contains("CHECK(workers == 4) failed: the group has every worker"));
  CHECK_THAT(text, Catch::Contains("status_test.cpp"));
}

TEST_CASE("text helpers: trim, split, isDigits, parseInt", "[unit][common]") {
  using namespace dtrun::text;
  CHECK(trim("  a b\t\r\n") == "a b");
  CHECK(trim(" \t ").empty());
  CHECK(split("a,,b", ',') == std::vector<std::string_view>{"a", "", "b"});
  CHECK(split("", ',') == std::vector<std::string_view>{""});
  CHECK(isDigits("0123"));
  CHECK_FALSE(isDigits(""));
  CHECK_FALSE(isDigits("+1"));
  CHECK_FALSE(isDigits("1 "));
  CHECK(parseInt(" +42 ") == 42);
  CHECK(parseInt("-3") == -3);
  CHECK_FALSE(parseInt("4x").has_value());
  CHECK_FALSE(parseInt("").has_value());
  CHECK_FALSE(parseInt("99999999999999999999").has_value());
}

TEST_CASE("writeAll and readFull move whole buffers through a pipe, readFull stops at EOF",
          "[unit][common]") {
  std::array<int, 2> fds{};
  REQUIRE(::pipe(fds.data()) == 0);
  CHECK(dtrun::io::writeAll(fds[1], std::string_view("hello, pipe")));
  ::close(fds[1]);
  std::array<char, 64> buffer{};
  CHECK(dtrun::io::readFull(fds[0], buffer.data(), 5) == 5);
  CHECK(std::string(buffer.data(), 5) == "hello");
  CHECK(dtrun::io::readFull(fds[0], buffer.data(), buffer.size()) == 6);  // EOF after 6
  CHECK(dtrun::io::readFull(fds[0], buffer.data(), buffer.size()) == 0);
  ::close(fds[0]);
  CHECK_FALSE(dtrun::io::writeAll(-1, std::string_view("x")));
  CHECK(dtrun::io::readFull(-1, buffer.data(), 1) == -1);
}

TEST_CASE("readFull gathers a buffer that arrives in pieces", "[unit][common]") {
  std::array<int, 2> fds{};
  REQUIRE(::pipe(fds.data()) == 0);
  std::thread writer([&fds] {  // three writes, each a short read on the other end
    for (const std::string_view piece : {"par", "tial ", "reads"}) {
      static_cast<void>(dtrun::io::writeAll(fds[1], piece));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::close(fds[1]);
  });
  std::array<char, 13> buffer{};
  const long n = dtrun::io::readFull(fds[0], buffer.data(), buffer.size());
  writer.join();
  ::close(fds[0]);
  CHECK(n == 13);
  CHECK(std::string(buffer.data(), buffer.size()) == "partial reads");
}

TEST_CASE("signals::block blocks exactly the given signals in this thread", "[unit][common]") {
  sigset_t before;
  REQUIRE(pthread_sigmask(SIG_SETMASK, nullptr, &before) == 0);
  const sigset_t set = dtrun::signals::block({SIGUSR2, SIGWINCH});
  CHECK(sigismember(&set, SIGUSR2) == 1);
  CHECK(sigismember(&set, SIGWINCH) == 1);
  CHECK(sigismember(&set, SIGTERM) == 0);
  sigset_t now;
  REQUIRE(pthread_sigmask(SIG_SETMASK, nullptr, &now) == 0);
  CHECK(sigismember(&now, SIGUSR2) == 1);
  CHECK(sigismember(&now, SIGWINCH) == 1);
  REQUIRE(pthread_sigmask(SIG_SETMASK, &before, nullptr) == 0);
}
