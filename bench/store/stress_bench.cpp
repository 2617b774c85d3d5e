// stress_bench: a normal client's latency while the store is under hostile load. Connects to a
// running store (bench/store/stress.sh starts `dtrun store`), then measures the same closed
// loop of round trips (GET of a 32-byte value, torch >= 2.2 dialect) in phases that add one
// stressor each:
//   baseline     nothing else
//   idle-4096    + 4096 connections that are open and silent
//   slow-reader  + a client that asked for 400 MiB of 256 KiB replies and reads none
//   trickle      + a client that sends one byte per second (a request never completes)
// and prints one line per phase:
//   stress_bench phase=slow-reader ops=20000 p50_us=31.2 p99_us=80.5 max_us=900.1 errors=0
// Measures, never asserts: the exit status is non-zero only when a request failed.
// Usage: stress_bench --port P [--ops N] [--connections C]
#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

#include "fd_io.h"

namespace {

using Clock = std::chrono::steady_clock;

// A raw loopback connection for the stressors; blocking, never read from.
dtrun::UniqueFd connectRaw(int port) {
  dtrun::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API wants sockaddr*
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw std::runtime_error("stress_bench: cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  return fd;
}

// SIGPIPE is ignored (runBench): a connection the store closed fails here with EPIPE.
void sendAll(int fd, std::string_view bytes) {
  if (!dtrun::io::writeAll(fd, bytes)) {
    throw std::runtime_error("stress_bench: send to the store failed");
  }
}

void appendU64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((value >> (8U * static_cast<unsigned>(i))) & 0xffU));
  }
}
void appendBytes(std::string& out, std::string_view bytes) {
  appendU64(out, bytes.size());
  out.append(bytes);
}
// torch >= 2.2: VALIDATE with its magic opens every connection.
const std::string kValidate("\x00\xce\xf7\x85\x3c", 5);

double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1));
  return sorted[index];
}

int runBench(int argc, char** argv) {
  CLI::App app("Latency of a normal store client while hostile clients load the store");
  int port = 0;
  int ops = 20000;
  int connections = 4096;
  app.add_option("--port", port, "Store port on 127.0.0.1")->required();
  app.add_option("--ops", ops, "Round trips measured per phase")->capture_default_str();
  app.add_option("--connections", connections, "Idle connections held from phase idle-4096 on")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  static_cast<void>(std::signal(SIGPIPE, SIG_IGN));

  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      std::perror("stress_bench: setrlimit(RLIMIT_NOFILE)");
    }
  }

  dtrun::rdzv::ClientOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.timeout = std::chrono::seconds(20);
  auto connected = dtrun::rdzv::connectStore(options);
  if (!connected.isOk()) {
    static_cast<void>(
        std::fprintf(stderr, "stress_bench: %s\n", connected.status().toString().c_str()));
    return 1;
  }
  auto& store = *connected.value();
  if (!store.set("bench/value", std::string(32, 'v')).isOk()) {
    static_cast<void>(std::fprintf(stderr, "stress_bench: set failed\n"));
    return 1;
  }

  std::vector<dtrun::UniqueFd> idle;
  dtrun::UniqueFd slowReader;
  dtrun::UniqueFd trickle;
  std::string trickled = kValidate + "\x01";  // SET, then a key length that never completes
  appendU64(trickled, 1U << 20U);
  std::size_t trickleSent = 0;
  auto lastTrickle = Clock::now();
  int errors = 0;

  const char* phases[] = {"baseline", "idle-4096", "slow-reader", "trickle"};
  for (const char* phase : phases) {
    const std::string name = phase;
    if (name == "idle-4096") {
      // Each one pinged once (VALIDATE + PING, reply read): all are accepted and served before
      // the measurement starts, then they fall silent.
      for (int i = 0; i < connections; ++i) {
        idle.push_back(connectRaw(port));
        sendAll(idle.back().get(), kValidate + std::string("\x0d\x2a\x00\x00\x00", 5));
      }
      for (const auto& fd : idle) {
        std::array<char, 4> nonce{};
        if (dtrun::io::readFull(fd.get(), nonce.data(), nonce.size()) !=
            static_cast<long>(nonce.size())) {
          throw std::runtime_error("stress_bench: an idle connection got no PING reply");
        }
      }
    } else if (name == "slow-reader") {
      slowReader = connectRaw(port);
      std::string request(1, '\x03');  // GET
      appendBytes(request, "bench/big");
      std::string wire = kValidate + "\x01";  // SET bench/big = 256 KiB
      appendBytes(wire, "bench/big");
      appendBytes(wire, std::string(std::size_t{256} * 1024, 'b'));
      for (int i = 0; i < 1600; ++i) {
        wire += request;
      }
      sendAll(slowReader.get(), wire);
    } else if (name == "trickle") {
      trickle = connectRaw(port);
    }
    std::vector<double> micros;
    micros.reserve(static_cast<std::size_t>(ops));
    for (int i = 0; i < ops; ++i) {
      if (trickle.valid() && trickleSent < trickled.size() &&
          Clock::now() - lastTrickle >= std::chrono::seconds(1)) {
        sendAll(trickle.get(), trickled.substr(trickleSent++, 1));
        lastTrickle = Clock::now();
      }
      const auto start = Clock::now();
      const auto value = store.get("bench/value");
      micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      errors += value.isOk() ? 0 : 1;
    }
    std::sort(micros.begin(), micros.end());
    std::printf("stress_bench phase=%s ops=%d p50_us=%.1f p99_us=%.1f max_us=%.1f errors=%d\n",
                phase, ops, percentile(micros, 0.5), percentile(micros, 0.99),
                micros.empty() ? 0.0 : micros.back(), errors);
    static_cast<void>(std::fflush(stdout));
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runBench(argc, argv);
  } catch (const std::exception& e) {
    static_cast<void>(std::fprintf(stderr, "%s\n", e.what()));
    return 1;
  }
}
