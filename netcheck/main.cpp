// dtrun-netcheck: one node's side of the network health check (--health_checks=network). dtrun's
// agent starts it on every node of a round, after the round formed and before the workers, with
// a worker's environment (RANK = the node's rank in the round, WORLD_SIZE = the round's node
// count, MASTER_ADDR/MASTER_PORT = the job's store, DTRUN_STORE_PREFIX = a prefix of this round's
// own). Every pair of nodes exchanges once, in n-1 stages of disjoint pairs (a round-robin
// tournament, so a stage's pairs run at once and no node talks to two peers at a time): 20
// timed 8-byte ping-pongs (the median round trip), then `--bytes` each way (each side times its
// own send until the peer's 1-byte acknowledgement). The figures of every pair then go to every
// node, and each prints them as one JSON document on stdout:
//   {"bytes":4194304,"nodes":[{"rank":0,"host":"a","address":"10.0.0.1"},...],
//    "pairs":[{"a":0,"b":1,"rtt_us":48.2,"gbps_ab":9.4,"gbps_ba":9.3},...]}
// or {"error":"...","timed_out":true,"unreached":{"0":[2],"1":[2],"2":[0]}} with exit 1: on a
// timeout each node leaves the ranks it could not reach in the store and reads the others'
// for a moment (kVoteWait), so that every agent can name the node all the others could not
// reach. Judging is the agent's.
//   Usage: dtrun-netcheck --host NAME [--timeout_ms 5000] [--bytes 4194304]
// Everything, connecting included, ends by --timeout_ms: a peer that never shows up is a
// timeout naming its rank.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "dtrun/rendezvous.h"
#include "dtrun/runtime.h"

namespace {

namespace rt = dtrun::runtime;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kPings = 20;
// How long a node that timed out waits for the others' lists of ranks they could not reach
// (they time out within moments of each other: their bounds start together).
constexpr milliseconds kVoteWait{1500};
constexpr std::size_t kNameBytes = 160;  // "host address", NUL-padded, per node

struct Options {
  std::string host;
  milliseconds timeout{5000};
  std::size_t bytes = std::size_t{4} << 20;
};

// The address peers reach this node at: the one of the interface routing to the store (as
// libdtrt's Tcp backend advertises), "" when it cannot be told.
std::string routeAddress() {
  const char* master = std::getenv("MASTER_ADDR");  // NOLINT(concurrency-mt-unsafe): one thread
  if (master == nullptr || *master == '\0') {
    return {};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master, "29500", &hints, &found) != 0 || found == nullptr) {
    return {};
  }
  std::string out;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    std::array<char, INET6_ADDRSTRLEN> text{};
    const void* where =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, where, text.data(), text.size()) != nullptr) {
      out = text.data();
    }
  }
  if (fd >= 0) {
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

// Sends and receives with what is left of the check's time as their bound.
class Exchange {
 public:
  Exchange(rt::ProcessGroup& group, Clock::time_point deadline)
      : group_(group), deadline_(deadline) {}

  void send(std::vector<std::uint8_t>& data, std::size_t bytes, int peer) {
    group_.isend(rt::Buffer{data.data(), bytes, rt::DataType::kUInt8}, peer).wait(left());
  }
  void recv(std::vector<std::uint8_t>& data, std::size_t bytes, int peer) {
    group_.irecv(rt::Buffer{data.data(), bytes, rt::DataType::kUInt8}, peer).wait(left());
  }

 private:
  [[nodiscard]] milliseconds left() const {
    const auto ms = std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
    if (ms.count() <= 0) {
      throw rt::TimeoutError("the network check's time is up");
    }
    return ms;
  }
  rt::ProcessGroup& group_;
  Clock::time_point deadline_;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// This node's figures with `peer`: the round trip (measured by the lower rank only) and the
// bandwidth of its own sending.
struct PairFigures {
  double rttUs = -1;
  double gbpsOut = -1;
};

// The bulk exchange grows from kFirstBytes by 4x per round while a round takes under a quarter
// of what is left of the stage's budget, up to `bytes`: a slow link gets a smaller exchange that
// still ends in time (and is judged by its figures), a fast one gets the full size.
constexpr std::size_t kFirstBytes = std::size_t{32} << 10;

PairFigures measurePair(Exchange& x, int self, int peer, std::size_t bytes,
                        std::vector<std::uint8_t>& big, Clock::time_point stageEnd) {
  std::vector<std::uint8_t> small(8, 0);
  const bool first = self < peer;
  PairFigures f;
  // Untimed: the peer may still be busy with its previous stage's partner.
  if (first) {
    x.send(small, small.size(), peer);
    x.recv(small, small.size(), peer);
  } else {
    x.recv(small, small.size(), peer);
    x.send(small, small.size(), peer);
  }
  std::vector<double> rtts;
  for (int k = 0; k < kPings; ++k) {
    if (first) {
      const auto t0 = Clock::now();
      x.send(small, small.size(), peer);
      x.recv(small, small.size(), peer);
      rtts.push_back(seconds(Clock::now() - t0) * 1e6);
    } else {
      x.recv(small, small.size(), peer);
      x.send(small, small.size(), peer);
    }
  }
  if (first) {
    std::nth_element(rtts.begin(), rtts.begin() + kPings / 2, rtts.end());
    f.rttUs = rtts[kPings / 2];
  }
  const auto sendTimed = [&](std::size_t size) {
    const auto t0 = Clock::now();
    x.send(big, size, peer);
    x.recv(small, 1, peer);
    f.gbpsOut = static_cast<double>(size) * 8.0 / seconds(Clock::now() - t0) / 1e9;
  };
  const auto receive = [&](std::size_t size) {
    x.recv(big, size, peer);
    x.send(small, 1, peer);
  };
  // The first node decides each round's size (0 = done) and tells its peer.
  std::vector<std::uint8_t> sizeMessage(sizeof(std::uint64_t), 0);
  std::size_t size = std::min(kFirstBytes, bytes);
  for (;;) {
    std::uint64_t wire = size;
    if (first) {
      std::memcpy(sizeMessage.data(), &wire, sizeof wire);
      x.send(sizeMessage, sizeMessage.size(), peer);
    } else {
      x.recv(sizeMessage, sizeMessage.size(), peer);
      std::memcpy(&wire, sizeMessage.data(), sizeof wire);
      size = static_cast<std::size_t>(wire);
    }
    if (size == 0) {
      break;
    }
    const auto t0 = Clock::now();
    if (first) {
      sendTimed(size);
      receive(size);
    } else {
      receive(size);
      sendTimed(size);
    }
    if (first) {
      const auto took = Clock::now() - t0;
      const bool more = size < bytes && took * 4 * 4 < stageEnd - Clock::now();
      size = more ? std::min(size * 4, bytes) : 0;
    }
  }
  return f;
}

// The peer of `self` in stage `stage` of a round-robin over n nodes (the circle method over an
// even m = n or n + 1); a result >= n is the stand-in of an odd n: no exchange that stage.
int partnerAt(int stage, int self, int n) {
  const int m = n % 2 == 0 ? n : n + 1;
  if (self == m - 1) {
    return stage;
  }
  if (self == stage) {
    return m - 1;
  }
  return ((2 * stage - self) % (m - 1) + (m - 1)) % (m - 1);
}

// v to 1/scale (dividing, so that 8.774 prints as 8.774, not 8.774000000000001).
double rounded(double v, double scale) { return v < 0 ? v : std::round(v * scale) / scale; }

nlohmann::ordered_json run(const Options& options) {
  const auto deadline = Clock::now() + options.timeout;
  rt::InitOptions init;
  init.timeout = options.timeout;
  init.installErrorHandlers = false;
  const rt::Context context = rt::init(init);
  rt::GroupOptions groupOptions;
  groupOptions.timeout =
      std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  const auto group = rt::ProcessGroup::create(context, rt::Backend::kTcp, groupOptions);
  const int n = group->size();
  const int self = group->rank();

  std::string name = options.host + " " + routeAddress();
  name.resize(kNameBytes, '\0');
  std::vector<std::uint8_t> names(kNameBytes * static_cast<std::size_t>(n));
  group->allGather(rt::Buffer{name.data(), kNameBytes, rt::DataType::kUInt8},
                   rt::Buffer{names.data(), names.size(), rt::DataType::kUInt8});

  Exchange x(*group, deadline);
  std::vector<std::uint8_t> big(options.bytes, 0x5a);
  // This node's row: round trips to each peer, then its sending bandwidth to each.
  std::vector<double> row(2 * static_cast<std::size_t>(n), -1.0);
  const int m = n % 2 == 0 ? n : n + 1;
  // Each stage's share of the time left, with room for the last all-gather.
  const auto exchangeEnd = deadline - (deadline - Clock::now()) / 10;
  for (int stage = 0; stage < m - 1; ++stage) {
    const int peer = partnerAt(stage, self, n);
    if (peer >= n) {
      continue;
    }
    const auto stageEnd = Clock::now() + (exchangeEnd - Clock::now()) / (m - 1 - stage);
    PairFigures f;
    try {
      f = measurePair(x, self, peer, options.bytes, big, stageEnd);
    } catch (const rt::TimeoutError& e) {
      throw rt::TimeoutError("exchange with node rank " + std::to_string(peer) + ": " + e.what());
    }
    row[static_cast<std::size_t>(peer)] = f.rttUs;
    row[static_cast<std::size_t>(n) + static_cast<std::size_t>(peer)] = f.gbpsOut;
  }
  std::vector<double> all(row.size() * static_cast<std::size_t>(n));
  group->allGather(rt::Buffer{row.data(), row.size(), rt::DataType::kFloat64},
                   rt::Buffer{all.data(), all.size(), rt::DataType::kFloat64});

  const auto at = [&](int node, int column) {
    return all[static_cast<std::size_t>(node) * row.size() + static_cast<std::size_t>(column)];
  };
  nlohmann::ordered_json doc;
  doc["bytes"] = options.bytes;
  auto& nodes = doc["nodes"] = nlohmann::ordered_json::array();
  for (int r = 0; r < n; ++r) {
    const char* text = reinterpret_cast<const char*>(names.data()) + kNameBytes * r;
    const std::string entry(text, ::strnlen(text, kNameBytes));
    const auto space = entry.rfind(' ');
    nodes.push_back({{"rank", r},
                     {"host", entry.substr(0, space)},
                     {"address", space == std::string::npos ? "" : entry.substr(space + 1)}});
  }
  auto& pairs = doc["pairs"] = nlohmann::ordered_json::array();
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      pairs.push_back({{"a", a},
                       {"b", b},
                       {"rtt_us", rounded(at(a, b), 10)},
                       {"gbps_ab", rounded(at(a, n + b), 1000)},
                       {"gbps_ba", rounded(at(b, n + a), 1000)}});
    }
  }
  return doc;
}

std::string env(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): one thread
  return value != nullptr ? value : "";
}

// The ranks a libdtrt error names ("rank 2", "ranks 1, 3"), but `self`.
std::vector<int> ranksIn(const std::string& text, int self) {
  static const std::regex kRanks(R"(ranks? ([0-9]+(?:, [0-9]+)*))");
  std::vector<int> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kRanks);
       it != std::sregex_iterator(); ++it) {
    const std::string list = (*it)[1].str();
    for (std::size_t at = 0; at < list.size();) {
      const int rank = std::atoi(list.c_str() + at);
      if (rank != self && std::find(out.begin(), out.end(), rank) == out.end()) {
        out.push_back(rank);
      }
      const auto comma = list.find(',', at);
      at = comma == std::string::npos ? list.size() : comma + 2;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// This node's unreached ranks into the store, and every other node's that arrive within
// kVoteWait: rank -> the ranks it could not reach. Only this node's when the store is gone.
nlohmann::ordered_json vote(const std::vector<int>& unreached) {
  const int self = std::atoi(env("RANK").c_str());
  const int n = std::atoi(env("WORLD_SIZE").c_str());
  nlohmann::ordered_json reports;
  reports[std::to_string(self)] = unreached;
  dtrun::rdzv::ClientOptions options;
  options.host = env("MASTER_ADDR");
  options.port = static_cast<std::uint16_t>(std::atoi(env("MASTER_PORT").c_str()));
  options.token = env("DTRUN_STORE_TOKEN");
  options.timeout = kVoteWait;
  auto store = dtrun::rdzv::connectStore(options);
  if (!store.isOk()) {
    return reports;
  }
  const std::string prefix = env("DTRUN_STORE_PREFIX") + "/unreached/";
  if (!store.value()
           ->set(prefix + std::to_string(self), reports[std::to_string(self)].dump())
           .isOk()) {
    return reports;
  }
  const auto until = Clock::now() + kVoteWait;
  while (static_cast<int>(reports.size()) < n && Clock::now() < until) {
    for (int r = 0; r < n; ++r) {
      if (reports.contains(std::to_string(r))) {
        continue;
      }
      auto value = store.value()->tryGet(prefix + std::to_string(r));
      if (value.isOk() && value.value()) {
        auto list = nlohmann::ordered_json::parse(*value.value(), nullptr, false);
        if (list.is_array()) {
          reports[std::to_string(r)] = std::move(list);
        }
      }
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return reports;
}

bool parse(int argc, char** argv, Options& options) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string value(args[i + 1]);
    char* end = nullptr;
    if (args[i] == "--host") {
      options.host = value;
      continue;
    }
    const double number = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || number <= 0) {
      return false;
    }
    if (args[i] == "--timeout_ms") {
      options.timeout = milliseconds(static_cast<long long>(number));
    } else if (args[i] == "--bytes") {
      options.bytes = static_cast<std::size_t>(number);
    } else {
      return false;
    }
  }
  return args.size() % 2 == 0 && !options.host.empty();
}

}  // namespace

int main(int argc, char** argv) try {
  Options options;
  if (!parse(argc, argv, options)) {
    std::cerr << "usage: dtrun-netcheck --host NAME [--timeout_ms MS] [--bytes N] (started by "
                 "dtrun's agent for --health_checks=network, with a worker's environment)\n";
    return 2;
  }
  nlohmann::ordered_json out;
  int code = 0;
  try {
    out = run(options);
  } catch (const rt::TimeoutError& e) {
    out = {{"error", e.what()},
           {"timed_out", true},
           {"unreached", vote(ranksIn(e.what(), std::atoi(env("RANK").c_str())))}};
    code = 1;
  } catch (const std::exception& e) {
    out = {{"error", e.what()}, {"timed_out", false}};
    code = 1;
  }
  std::cout << out.dump() << std::endl;
  return code;
} catch (...) {  // printing failed: the agent reads no result and says so
  return 1;
}
