// store_bench: load generator for a TCPStore-compatible server. Forks N client processes that each
// open one dtrun client connection (legacy dialect by default, so the same program can drive
// torch 1.13's own server), start together, run one operation in a closed loop for a fixed
// window, and report per-op latencies to the parent, which prints ONE key=value line:
//
//   store_bench label=dtrun op=add clients=16 ops=123456 window_s=2.001 ops_per_s=61700
//       p50_us=251.2 p99_us=900.5 max_us=4100.0 samples=123456 errors=0
//
// It measures, it never asserts: exit status is non-zero only when an operation failed.
// Single-threaded by design: it forks, and a fork after a thread exists is unsafe.
//
// With --server-pid PID it also reads the server process's CPU time (utime + stime of
// /proc/PID/stat) when the window starts and once every client has reported, and adds
// `server_cpu_s=... server_cpu_s_per_kop=...` (CPU-seconds per 1000 ops of the window): what an
// op costs the server, which ops/s cannot tell once the clients saturate the machine's CPUs.
//
// Usage: store_bench --port P [--clients N] [--op set|get|add|waitset] [--duration-ms D]
//                    [--warmup-ms W] [--value-bytes B] [--label L] [--dialect legacy|v2]
//                    [--server-pid PID]
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

#include "fd_io.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

enum class BenchOp : std::uint8_t { kSet, kGet, kAdd, kWaitSet };

struct BenchOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int clients = 1;
  std::string op = "set";
  int durationMs = 2000;
  int warmupMs = 200;
  int valueBytes = 32;
  std::string label = "store";
  std::string dialect = "legacy";
  int timeoutMs = 20000;  // per store call, and the bound on every wait for a child
  int serverPid = 0;      // > 0: measure this process's CPU time over the window
};

// What a child sends back through its result pipe, followed by `samples` u32 latencies (ns) and
// `errorLength` bytes of error text.
struct ChildReport {
  std::uint64_t ops = 0;
  std::uint64_t samples = 0;
  std::int64_t startNs = 0;  // steady_clock (CLOCK_MONOTONIC, shared by all processes)
  std::int64_t endNs = 0;    // when the last op (and, for set, the drain) completed
  std::uint32_t errorLength = 0;
  std::uint32_t failed = 0;
};

// Sent by the parent through the start pipe, one per child: when to start and when to stop.
struct StartSignal {
  std::int64_t startNs = 0;
  std::int64_t stopNs = 0;
};

// Exit codes of a child (the parent reports them; children never return into main).
constexpr int kChildOk = 0;
constexpr int kChildFailed = 3;
constexpr int kChildParentGone = 4;

// Upper bound on how fast one client can issue requests; sizes the latency buffer (the pages are
// reserved, and touched only as samples arrive).
constexpr std::uint64_t kMaxOpsPerSecondPerClient = 2'000'000;
// Keys a set client cycles through, so a long run does not grow the store without bound.
constexpr std::uint64_t kSetKeyCycle = 1024;

std::int64_t nowNs() {
  return std::chrono::duration_cast<nanoseconds>(Clock::now().time_since_epoch()).count();
}

// utime + stime of process `pid` in seconds (/proc/PID/stat, clock ticks), or -1 if unreadable.
double processCpuSeconds(int pid) {
  std::FILE* file = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "re");
  if (file == nullptr) {
    return -1;
  }
  char line[1024] = {};
  const bool read = std::fgets(line, sizeof line, file) != nullptr;
  static_cast<void>(std::fclose(file));
  // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
  const char* p = read ? std::strrchr(line, ')') : nullptr;
  if (p == nullptr) {
    return -1;
  }
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  // Fields 3..15 after ')': state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
  // majflt, cmajflt, utime, stime.
  // NOLINTNEXTLINE(cert-err34-c): a malformed line is caught by the count
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2) {
    return -1;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int remainingMs(std::int64_t deadlineNs) {
  const std::int64_t left = (deadlineNs - nowNs()) / 1'000'000;
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
}

// Reads exactly `size` bytes before the deadline; false on EOF, error or timeout.
bool readExact(int fd, void* data, std::size_t size, std::int64_t deadlineNs) {
  auto* bytes = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < size) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, remainingMs(deadlineNs));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready <= 0) {
      return false;
    }
    const ssize_t n = ::read(fd, bytes + got, size - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

using dtrun::io::writeAll;

struct Pipe {
  dtrun::UniqueFd read;
  dtrun::UniqueFd write;
};

dtrun::Result<Pipe> makePipe() {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return dtrun::Status::system("pipe2", errno);
  }
  return Pipe{dtrun::UniqueFd(fds[0]), dtrun::UniqueFd(fds[1])};
}

// One client process: connect, prepare, warm up, wait for the start signal, measure, report.
class Client {
 public:
  Client(const BenchOptions& options, BenchOp op, int index)
      : options_(options),
        op_(op),
        prefix_(std::to_string(index)),
        value_(static_cast<std::size_t>(options.valueBytes), 'v') {}

  // Everything up to "ready": connect, put the keys `get` reads, warm up.
  dtrun::Status prepare() {
    dtrun::rdzv::ClientOptions clientOptions;
    clientOptions.host = options_.host;
    clientOptions.port = static_cast<std::uint16_t>(options_.port);
    clientOptions.timeout = milliseconds(options_.timeoutMs);
    clientOptions.dialect =
        options_.dialect == "v2" ? dtrun::rdzv::Dialect::kV2 : dtrun::rdzv::Dialect::kLegacy;
    DTRUN_ASSIGN_OR_RETURN(store_, dtrun::rdzv::connectStore(clientOptions));
    if (op_ == BenchOp::kGet) {
      DTRUN_TRY(store_->set(getKey(), value_));
    }
    const std::int64_t warmupEnd = nowNs() + std::int64_t{options_.warmupMs} * 1'000'000;
    while (nowNs() < warmupEnd) {
      DTRUN_TRY(runOne());
    }
    DTRUN_TRY(drain());
    const auto capacity = static_cast<std::size_t>(
        kMaxOpsPerSecondPerClient * static_cast<std::uint64_t>(options_.durationMs) / 1000);
    latencies_.reserve(std::max<std::size_t>(capacity, 1024));
    return dtrun::Status::ok();
  }

  // The closed loop: one op after another until `stopNs`; the op in flight at the stop finishes.
  dtrun::Status measure(std::int64_t stopNs) {
    report_.startNs = nowNs();
    std::int64_t before = report_.startNs;
    while (before < stopNs) {
      DTRUN_TRY(runOne());
      const std::int64_t after = nowNs();
      ++report_.ops;
      if (latencies_.size() < latencies_.capacity()) {
        latencies_.push_back(static_cast<std::uint32_t>(
            std::min<std::int64_t>(after - before, std::int64_t{UINT32_MAX})));
      }
      before = after;
    }
    // SET has no reply on the wire: what the loop timed is the client handing bytes to the
    // kernel. One round trip after the window makes the window include the server catching up.
    DTRUN_TRY(drain());
    report_.endNs = nowNs();
    report_.samples = latencies_.size();
    return dtrun::Status::ok();
  }

  void sendReport(int fd, const std::string& error) {
    report_.failed = error.empty() ? 0 : 1;
    report_.errorLength = static_cast<std::uint32_t>(error.size());
    report_.samples = latencies_.size();
    static_cast<void>(writeAll(fd, &report_, sizeof report_) &&
                      writeAll(fd, latencies_.data(), latencies_.size() * sizeof(std::uint32_t)) &&
                      writeAll(fd, error.data(), error.size()));
  }

 private:
  [[nodiscard]] std::string getKey() const { return "bench/get/" + prefix_; }

  dtrun::Status runOne() {
    const std::uint64_t i = counter_++;
    switch (op_) {
      case BenchOp::kSet:
        lastSetKey_ = "bench/set/" + prefix_ + "/" + std::to_string(i % kSetKeyCycle);
        return store_->set(lastSetKey_, value_);
      case BenchOp::kGet: {
        // Store::get is WAIT then GET: two round trips, as torch's own client does.
        DTRUN_ASSIGN_OR_RETURN(const auto value, store_->get(getKey()));
        if (value.size() != value_.size()) {
          return dtrun::Status::protocol("get(" + getKey() + ") returned " +
                                         std::to_string(value.size()) + " bytes, not " +
                                         std::to_string(value_.size()));
        }
        return dtrun::Status::ok();
      }
      case BenchOp::kAdd: {
        // One counter shared by every client: the hot-key path.
        DTRUN_TRY(store_->add("bench/add/counter", 1));
        return dtrun::Status::ok();
      }
      case BenchOp::kWaitSet: {
        // One pair: a set (no reply) then a wait on that key (one round trip).
        const std::string key = "ws/" + prefix_ + "/" + std::to_string(i);
        DTRUN_TRY(store_->set(key, value_));
        return store_->wait(std::span(&key, 1), milliseconds(options_.timeoutMs));
      }
    }
    return dtrun::Status::invalidArgument("unknown op");
  }

  // After a burst of sets, one round trip proves the server has applied them (a TCP stream is
  // ordered). The other ops already end on a reply.
  dtrun::Status drain() {
    if (op_ != BenchOp::kSet || lastSetKey_.empty()) {
      return dtrun::Status::ok();
    }
    DTRUN_ASSIGN_OR_RETURN(const bool present, store_->check(std::span(&lastSetKey_, 1)));
    return present ? dtrun::Status::ok()
                   : dtrun::Status::protocol("check(" + lastSetKey_ + ") after set: key missing");
  }

  const BenchOptions& options_;
  const BenchOp op_;
  const std::string prefix_;
  const std::string value_;
  std::unique_ptr<dtrun::rdzv::Store> store_;
  std::uint64_t counter_ = 0;
  std::string lastSetKey_;
  std::vector<std::uint32_t> latencies_;
  ChildReport report_;
};

// The child's whole life; returns its exit code. Only _exit() follows.
int runChild(const BenchOptions& options, BenchOp op, int index, pid_t parent, int readyFd,
             int startFd, int resultFd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    return kChildParentGone;
  }
  Client client(options, op, index);
  dtrun::Status status = client.prepare();
  const char ready = status.isOk() ? 'r' : 'f';
  static_cast<void>(writeAll(readyFd, &ready, 1));
  if (status.isOk()) {
    StartSignal start;
    const std::int64_t startDeadline = nowNs() + std::int64_t{options.timeoutMs} * 1'000'000 * 4;
    if (!readExact(startFd, &start, sizeof start, startDeadline)) {
      status = dtrun::Status::error(dtrun::Errc::kCancelled, "no start signal from the parent");
    } else if (start.stopNs != 0) {  // 0: another client failed, the run is off
      // Sleep to the common start time so every client's window begins together.
      const timespec at{static_cast<time_t>(start.startNs / 1'000'000'000),
                        static_cast<long>(start.startNs % 1'000'000'000)};
      while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
      }
      status = client.measure(start.stopNs);
    }
  }
  const std::string error =
      status.isOk() ? std::string() : "client " + std::to_string(index) + ": " + status.toString();
  client.sendReport(resultFd, error);
  return status.isOk() ? kChildOk : kChildFailed;
}

struct Child {
  pid_t pid = -1;
  dtrun::UniqueFd result;
};

// Kills (by pid) and reaps every child still running; bounded.
void reapAll(std::vector<Child>& children, std::int64_t deadlineNs, std::vector<int>& codes) {
  codes.assign(children.size(), -1);
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (children[i].pid <= 0) {
      continue;
    }
    int wstatus = 0;
    for (;;) {
      const pid_t r = ::waitpid(children[i].pid, &wstatus, WNOHANG);
      if (r == children[i].pid) {
        codes[i] = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        break;
      }
      if (r < 0 && errno != EINTR) {
        break;
      }
      if (nowNs() > deadlineNs) {
        ::kill(children[i].pid, SIGKILL);
        static_cast<void>(::waitpid(children[i].pid, &wstatus, 0));
        codes[i] = 128 + SIGKILL;
        break;
      }
      ::usleep(1000);
    }
    children[i].pid = -1;
  }
}

double percentileUs(const std::vector<std::uint32_t>& sorted, double fraction) {
  if (sorted.empty()) {
    return 0.0;
  }
  // Nearest-rank percentile.
  const auto rank = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size()));
  return sorted[std::min(rank, sorted.size() - 1)] / 1000.0;
}

int runParent(const BenchOptions& options, BenchOp op) {
  const auto clients = static_cast<std::size_t>(options.clients);
  auto ready = makePipe();
  auto start = makePipe();
  if (!ready.isOk() || !start.isOk()) {
    std::cerr << "store_bench: cannot create pipes\n";
    return 1;
  }
  std::cout.flush();
  std::cerr.flush();
  const pid_t parent = ::getpid();
  std::vector<Child> children(clients);
  std::vector<int> resultReadFds;
  for (std::size_t i = 0; i < clients; ++i) {
    auto result = makePipe();
    if (!result.isOk()) {
      std::cerr << "store_bench: " << result.status().toString() << "\n";
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      // Children forked so far die with this process (PR_SET_PDEATHSIG).
      std::cerr << "store_bench: fork: " << std::system_category().message(errno) << "\n";
      return 1;
    }
    if (pid == 0) {
      for (const int fd : resultReadFds) {
        ::close(fd);
      }
      ::close(result.value().read.release());
      ::close(ready.value().read.release());
      ::close(start.value().write.release());
      int code = kChildFailed;
      try {
        code = runChild(options, op, static_cast<int>(i), parent, ready.value().write.get(),
                        start.value().read.get(), result.value().write.get());
      } catch (...) {
        code = kChildFailed;
      }
      ::_exit(code);
    }
    children[i].pid = pid;
    children[i].result = std::move(result.value().read);
    resultReadFds.push_back(children[i].result.get());
  }
  ready.value().write.reset();  // so a dead child's missing byte reads as EOF, not a hang

  // Every wait below is bounded; a child that overruns is killed by pid.
  const std::int64_t callNs = std::int64_t{options.timeoutMs} * 1'000'000;
  const std::int64_t readyDeadline = nowNs() + callNs + std::int64_t{options.warmupMs} * 1'000'000;
  std::size_t readyCount = 0;
  std::size_t failedToPrepare = 0;
  for (; readyCount < clients; ++readyCount) {
    char byte = 0;
    if (!readExact(ready.value().read.get(), &byte, 1, readyDeadline)) {
      break;
    }
    failedToPrepare += byte == 'r' ? 0 : 1;
  }
  StartSignal signal;
  if (readyCount == clients && failedToPrepare == 0) {
    signal.startNs = nowNs() + 5'000'000;  // 5 ms for every child to wake before the window
    signal.stopNs = signal.startNs + std::int64_t{options.durationMs} * 1'000'000;
  }
  const std::vector<StartSignal> signals(clients, signal);
  static_cast<void>(
      writeAll(start.value().write.get(), signals.data(), signals.size() * sizeof(StartSignal)));
  start.value().write.reset();
  double serverCpuStart = -1;
  if (options.serverPid > 0 && signal.stopNs > 0) {
    const std::int64_t wait = signal.startNs - nowNs();
    if (wait > 0) {
      timespec ts{static_cast<time_t>(wait / 1'000'000'000),
                  static_cast<long>(wait % 1'000'000'000)};
      static_cast<void>(::nanosleep(&ts, nullptr));
    }
    serverCpuStart = processCpuSeconds(options.serverPid);
  }

  // Collect reports. stopNs == 0 tells children not to measure: they report at once.
  const std::int64_t reportDeadline = std::max(signal.stopNs, nowNs()) + callNs + 5'000'000'000LL;
  std::vector<std::uint32_t> all;
  std::uint64_t totalOps = 0;
  std::int64_t firstStart = INT64_MAX;
  std::int64_t lastEnd = 0;
  std::size_t errors = 0;
  std::string firstError;
  for (std::size_t i = 0; i < clients; ++i) {
    ChildReport report;
    if (!readExact(children[i].result.get(), &report, sizeof report, reportDeadline)) {
      ++errors;
      if (firstError.empty()) {
        firstError = "client " + std::to_string(i) + " sent no report";
      }
      continue;
    }
    const std::size_t offset = all.size();
    all.resize(offset + report.samples);
    std::string error(report.errorLength, '\0');
    if (!readExact(children[i].result.get(), all.data() + offset,
                   report.samples * sizeof(std::uint32_t), reportDeadline) ||
        !readExact(children[i].result.get(), error.data(), error.size(), reportDeadline)) {
      all.resize(offset);
      ++errors;
      if (firstError.empty()) {
        firstError = "client " + std::to_string(i) + " sent a truncated report";
      }
      continue;
    }
    if (report.failed != 0) {
      ++errors;
      if (firstError.empty()) {
        firstError = error;
      }
      continue;
    }
    totalOps += report.ops;
    firstStart = std::min(firstStart, report.startNs);
    lastEnd = std::max(lastEnd, report.endNs);
  }
  const double serverCpuEnd = serverCpuStart >= 0 ? processCpuSeconds(options.serverPid) : -1;
  std::vector<int> codes;
  reapAll(children, nowNs() + 5'000'000'000LL, codes);

  std::sort(all.begin(), all.end());
  const double windowS =
      lastEnd > firstStart ? static_cast<double>(lastEnd - firstStart) / 1e9 : 0.0;
  const double opsPerS = windowS > 0 ? static_cast<double>(totalOps) / windowS : 0.0;
  std::printf(
      "store_bench label=%s op=%s clients=%d ops=%llu window_s=%.3f ops_per_s=%.0f p50_us=%.1f "
      "p99_us=%.1f max_us=%.1f samples=%zu errors=%zu",
      options.label.c_str(), options.op.c_str(), options.clients,
      static_cast<unsigned long long>(totalOps), windowS, opsPerS, percentileUs(all, 0.50),
      percentileUs(all, 0.99), all.empty() ? 0.0 : all.back() / 1000.0, all.size(), errors);
  if (serverCpuEnd >= 0 && totalOps > 0) {
    const double cpu = serverCpuEnd - serverCpuStart;
    std::printf(" server_cpu_s=%.3f server_cpu_s_per_kop=%.5f", cpu,
                cpu * 1000.0 / static_cast<double>(totalOps));
  } else if (options.serverPid > 0) {
    std::cerr << "store_bench: cannot read /proc/" << options.serverPid
              << "/stat: no server CPU figure\n";
  }
  std::printf("\n");
  static_cast<void>(std::fflush(stdout));
  if (errors > 0) {
    std::cerr << "store_bench: " << errors << " of " << clients
              << " clients failed; first: " << firstError << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CLI::App app{
        "store_bench: ops/s and latency of a TCPStore-compatible server, N client processes"};
    BenchOptions options;
    app.add_option("--host", options.host, "Server address")->capture_default_str();
    app.add_option("--port", options.port, "Server port")->required()->check(CLI::Range(1, 65535));
    app.add_option("--clients", options.clients, "Client processes")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    app.add_option("--op", options.op, "Operation to measure")
        ->capture_default_str()
        ->check(CLI::IsMember({"set", "get", "add", "waitset"}));
    app.add_option("--duration-ms", options.durationMs, "Measured window")
        ->capture_default_str()
        ->check(CLI::Range(10, 600000));
    app.add_option("--warmup-ms", options.warmupMs, "Unmeasured ops per client before the window")
        ->capture_default_str()
        ->check(CLI::Range(0, 60000));
    app.add_option("--value-bytes", options.valueBytes, "Value size for set, get and waitset")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--label", options.label, "Name printed in the result line")
        ->capture_default_str();
    app.add_option("--dialect", options.dialect,
                   "Client dialect: legacy (torch <= 2.0, what torch 1.13's server speaks) or v2")
        ->capture_default_str()
        ->check(CLI::IsMember({"legacy", "v2"}));
    app.add_option("--timeout-ms", options.timeoutMs, "Deadline of each store call")
        ->capture_default_str()
        ->check(CLI::Range(100, 600000));
    app.add_option("--server-pid", options.serverPid,
                   "Also measure this server process's CPU time over the window (/proc/PID/stat)")
        ->check(CLI::Range(1, 1 << 30));
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    BenchOp op = BenchOp::kSet;
    if (options.op == "get") {
      op = BenchOp::kGet;
    } else if (options.op == "add") {
      op = BenchOp::kAdd;
    } else if (options.op == "waitset") {
      op = BenchOp::kWaitSet;
    }
    return runParent(options, op);
  } catch (const std::exception& e) {
    std::cerr << "store_bench: " << e.what() << "\n";
    return 1;
  }
}
