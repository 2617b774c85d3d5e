// The store server under hostile load, as a separate `dtrun store` process: thousands of held
// connections, a client that never reads its replies, one that sends a byte per second, one that
// lets watch events pile up. Each must cost the server bounded memory (VmRSS of the store
// process, with generous bounds) while a well-behaved client keeps being served, and every limit
// hit must leave its line in the store's log. Timings are bench/store's business, not asserted.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>

#include "protocol.h"
#include "rendezvous/raw_client.h"
#include "support/scoped.h"
#include "support/test_support.h"

using namespace std::chrono_literals;
using dtrun::rdzv::detail::appendBytes;
using dtrun::rdzv::detail::appendU32;
using dtrun::rdzv::detail::kValidationMagic;
using dtrun::rdzv::detail::loadU32;
using dtrun::testing::RawClient;

namespace {

// torch >= 2.2 opcodes (protocol.cpp's table).
constexpr char kV2Set = 1;
constexpr char kV2Get = 3;
constexpr char kV2Ping = 13;
constexpr char kLegacyWatchKey = 7;

std::string validate() {
  std::string wire(1, '\0');
  appendU32(wire, kValidationMagic);
  return wire;
}
std::string ping(std::uint32_t nonce) {
  std::string wire(1, kV2Ping);
  appendU32(wire, nonce);
  return wire;
}
std::string v2Set(std::string_view key, std::string_view value) {
  std::string wire(1, kV2Set);
  appendBytes(wire, key);
  appendBytes(wire, value);
  return wire;
}
std::string v2Get(std::string_view key) {
  std::string wire(1, kV2Get);
  appendBytes(wire, key);
  return wire;
}

// Lifts this process's soft descriptor limit (the store child inherits it) to at least `needed`.
void raiseFileLimit(rlim_t needed) {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  INFO("hard RLIMIT_NOFILE " << limit.rlim_max << " is below the " << needed
                             << " descriptors this test needs (raise it: ulimit -Hn)");
  REQUIRE((limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= needed));
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    limit.rlim_cur = needed;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  }
}

// `dtrun store` on a free loopback port, its stdout and stderr in a log file; killed at the end.
class StoreProcess {
 public:
  explicit StoreProcess(const std::vector<std::string>& flags) {
    REQUIRE(!dir_.path().empty());
    const std::string portFile = dir_.path() / "port";
    std::vector<std::string> args = {"store",       "--host", "127.0.0.1",   "--port", "0",
                                     "--port-file", portFile, "--log-level", "info"};
    args.insert(args.end(), flags.begin(), flags.end());
    const std::string log = logPath();
    child_ = std::make_unique<dtrun::testing::ChildGuard>([&args, &log] {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0) {
        return 126;
      }
      // VmRSS should measure live memory: under ASan, freed blocks wait in a quarantine of up to
      // 256 MiB first, which would swamp the bounds. (No effect on an uninstrumented build.)
      const char* asan = std::getenv("ASAN_OPTIONS");
      const std::string asanOptions =
          std::string(asan != nullptr ? asan : "") + ":quarantine_size_mb=8";
      ::setenv("ASAN_OPTIONS", asanOptions.c_str(), 1);
      const dtrun::testing::Argv argv(DTRUN_BINARY, args);
      ::execv(DTRUN_BINARY, argv.execArgv());
      return 127;
    });
    REQUIRE(dtrun::testing::waitUntil(
        [&] {
          std::ifstream in(portFile);
          int port = 0;
          if (in >> port && port > 0) {
            port_ = static_cast<std::uint16_t>(port);
            return true;
          }
          return false;
        },
        10s));
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  StoreProcess(StoreProcess&&) = delete;
  StoreProcess& operator=(StoreProcess&&) = delete;
  ~StoreProcess() = default;

  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::string log() const {
    std::ifstream in(logPath());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  [[nodiscard]] bool logHas(const std::string& needle) const {
    return dtrun::testing::waitUntil([&] { return log().find(needle) != std::string::npos; }, 10s);
  }
  // Resident memory of the store process, in KiB (VmRSS of /proc/<pid>/status).
  [[nodiscard]] long rssKiB() const {
    std::ifstream in("/proc/" + std::to_string(child_->pid()) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) {
        return std::strtol(line.c_str() + 6, nullptr, 10);
      }
    }
    return -1;
  }

 private:
  [[nodiscard]] std::string logPath() const { return dir_.path() / "store.log"; }
  dtrun::testing::TempDir dir_;
  std::uint16_t port_ = 0;
  // Declared after dir_: the store is killed and reaped before its directory goes.
  std::unique_ptr<dtrun::testing::ChildGuard> child_;
};

// A full round trip on a well-behaved client.
void requireServed(dtrun::rdzv::Store& store, int round) {
  const std::string key = "healthy/" + std::to_string(round);
  REQUIRE(store.set(key, "ok").isOk());
  REQUIRE(store.get(key).value() == "ok");
  REQUIRE(store.add("healthy/count", 1).isOk());
}

}  // namespace

// Also: a client that never reads and one that sends a byte per second; memory stays bounded.
TEST_CASE("stress: 4096 connections and a slow reader and a trickling client",
          "[integration][rdzv][stress]") {
  constexpr int kConnections = 4096;
  constexpr std::size_t kBacklog = std::size_t{1} << 20U;
  raiseFileLimit(kConnections + 512);
  StoreProcess store({"--max-connections", std::to_string(kConnections + 16), "--max-reply-backlog",
                      std::to_string(kBacklog)});
  auto healthy = dtrun::testing::connect(store.port());
  requireServed(*healthy, -1);
  const long baselineKiB = store.rssKiB();
  REQUIRE(baselineKiB > 0);

  // A byte per second of one SET, from start to end: the server must not wait for the rest.
  const std::string trickled = validate() + v2Set("trickle", "slowly");
  RawClient trickle(store.port());
  std::atomic<bool> stopTrickle{false};
  std::atomic<std::size_t> trickleSent{0};
  std::thread trickler([&] {
    for (int second = 0; second < 120 && !stopTrickle; ++second) {  // bounded: 2 minutes
      trickle.send(trickled.substr(trickleSent, 1));
      if (++trickleSent == trickled.size() - 1) {
        break;  // the last byte is sent below, once everything else is checked
      }
      for (int tick = 0; tick < 10 && !stopTrickle; ++tick) {
        std::this_thread::sleep_for(100ms);
      }
    }
  });

  // The slow reader: asks for 1600 x 256 KiB (400 MiB) of replies and never reads one.
  RawClient slowReader(store.port());
  const std::string big(std::size_t{256} * 1024, 'x');
  std::string requests = validate() + v2Set("big", big);
  for (int i = 0; i < 1600; ++i) {
    requests += v2Get("big");
  }
  slowReader.send(requests);
  CHECK(store.logHas("is not reading its replies"));

  // 4096 connections at once, each answered while all are open.
  std::vector<std::unique_ptr<RawClient>> held;
  held.reserve(kConnections);
  for (int i = 0; i < kConnections; ++i) {
    held.push_back(std::make_unique<RawClient>(store.port()));
    held.back()->send(validate() + ping(static_cast<std::uint32_t>(i)));
    if (i % 512 == 0) {
      requireServed(*healthy, i);
    }
  }
  int answered = 0;
  for (int i = 0; i < kConnections; ++i) {
    const std::string reply = held[static_cast<std::size_t>(i)]->recv(4);
    answered += reply.size() == 4 && loadU32(reply.data()) == static_cast<std::uint32_t>(i) ? 1 : 0;
  }
  CHECK(answered == kConnections);
  // Served all along while the trickled request is still incomplete (a few seconds).
  for (int round = 0; round < 200 || (trickleSent < 4 && round < 6000); ++round) {
    requireServed(*healthy, round);
    std::this_thread::sleep_for(5ms);
  }
  CHECK(trickleSent >= 4);

  // Without the backlog limit the slow reader alone would cost 400 MiB.
  const long grownKiB = store.rssKiB() - baselineKiB;
  INFO("store VmRSS grew by " << grownKiB / 1024 << " MiB over " << baselineKiB / 1024 << " MiB");
  CHECK(grownKiB < 192L * 1024);

  // The trickled request completes and was understood.
  stopTrickle = true;
  trickler.join();
  trickle.send(trickled.substr(trickleSent));
  trickle.send(v2Get("trickle"));
  std::string expected;
  appendBytes(expected, "slowly");
  CHECK(trickle.recv(expected.size()) == expected);
  CHECK(store.rssKiB() > 0);  // still running
}

TEST_CASE("stress: over --max-connections is refused and logged then accepted again",
          "[integration][rdzv][stress]") {
  StoreProcess store({"--max-connections", "8"});
  // The store's own keeper holds a connection too: fill the rest until one is turned away.
  std::vector<std::unique_ptr<RawClient>> held;
  bool refused = false;
  for (std::uint32_t i = 0; i < 8 && !refused; ++i) {
    auto client = std::make_unique<RawClient>(store.port(), 1000);
    client->send(validate() + ping(i));
    if (client->recv(4).size() == 4) {
      held.push_back(std::move(client));
    } else {
      refused = true;
    }
  }
  REQUIRE(refused);
  REQUIRE(!held.empty());
  CHECK(store.logHas("refused: limit of 8 connections reached (--max-connections)"));

  held.pop_back();
  CHECK(dtrun::testing::waitUntil(
      [&] {
        RawClient again(store.port(), 500);
        again.send(validate() + ping(42));
        return again.recv(4).size() == 4;
      },
      10s));
}

TEST_CASE("stress: a watcher whose events pile up is dropped and logged",
          "[integration][rdzv][stress]") {
  StoreProcess store({"--max-reply-backlog", std::to_string(1U << 20U)});
  RawClient watcher(store.port());
  std::string watch(1, kLegacyWatchKey);
  appendBytes(watch, "watched");
  watcher.send(watch);
  REQUIRE(watcher.recv(1).size() == 1);  // registered; it reads nothing from now on

  auto writer = dtrun::testing::connect(store.port());
  const std::string value(std::size_t{64} * 1024, 'v');
  const long baselineKiB = store.rssKiB();
  for (int i = 0; i < 800; ++i) {  // 800 events of ~128 KiB: 100 MiB if nobody dropped it
    REQUIRE(writer->set("watched", value + std::to_string(i)).isOk());
  }
  CHECK(store.logHas("slow client dropped"));
  requireServed(*writer, 0);
  const long grownKiB = store.rssKiB() - baselineKiB;
  INFO("store VmRSS grew by " << grownKiB / 1024 << " MiB");
  CHECK(grownKiB < 32L * 1024);
}
