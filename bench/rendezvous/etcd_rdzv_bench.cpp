// etcd_rdzv_bench: one round of N simulated nodes through etcd against the same round through
// dtrun's store, in one run. Both sides run the same code: the round protocol's members
// (RoundMember, two connections each, as an agent has) and one keeper (runKeeper, as the agent
// elected by the etcd backend runs it); only the store below differs: makeEtcdStore over the
// given etcd endpoints, or a StoreServer in this process.
//
//   1. the keeper starts; every node connects; once all are connected and round 0 is open, all
//      are released at once and call join();
//   2. close time = the last assignment received - the first join started.
//
// Settings: min = max = N, last_call_timeout 0, keep-alive 60 s (no heartbeat interferes). Every
// node must get a distinct node rank in 0..N-1, or the program exits 1.
//
// Output: one line per backend and size, then the ratio:
//   etcd_rdzv_bench backend=etcd nodes=64 rep=0 close_ms=41.2 connect_ms=120.3 ok=1
//   etcd_rdzv_bench nodes=64 etcd_over_store=5.1
//
// Usage: etcd_rdzv_bench --etcd 127.0.0.1:2379[,...] [--nodes 8,64,512] [--repeats R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "dtrun/common.h"
#include "dtrun/etcd.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "round_codec.h"

namespace {

using namespace dtrun::rdzv;  // NOLINT(google-build-using-namespace): a benchmark's main file
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Result {
  bool ok = false;
  double closeMs = 0;
  double connectMs = 0;
  std::string error;
};

double msBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One round of `n` nodes over the stores `stores` opens.
Result runRound(const StoreFactory& stores, int n, const std::string& jobId) {
  RoundSettings settings;
  settings.minNodes = n;
  settings.maxNodes = n;
  settings.lastCallTimeout = milliseconds(0);
  settings.joinTimeout = milliseconds(120000);
  settings.keepAliveInterval = milliseconds(60000);
  std::atomic<bool> stopKeeper{false};
  auto keeperStore = stores();
  if (!keeperStore.isOk()) {
    return {false, 0, 0, keeperStore.status().toString()};
  }
  std::thread keeper([&, s = std::move(keeperStore).value()]() mutable {
    static_cast<void>(runKeeper(std::move(s), jobId, KeeperOptions{}, stopKeeper));
  });

  std::mutex mutex;
  std::condition_variable changed;
  int connected = 0;
  bool go = false;
  const std::atomic<bool> cancel{false};
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<int> ranks(static_cast<std::size_t>(n), -1);
  std::vector<Clock::time_point> joinStart(static_cast<std::size_t>(n));
  std::vector<Clock::time_point> joinEnd(static_cast<std::size_t>(n));
  const auto connectStart = Clock::now();
  Clock::time_point connectEnd;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const auto at = static_cast<std::size_t>(i);
      NodeRecord self;
      self.host = "sim-" + std::to_string(i);
      self.agentId = self.host + ":" + std::to_string(::getpid());
      auto member = RoundMember::connect(stores, jobId, settings, self, false);
      {
        std::unique_lock lock(mutex);
        ++connected;
        changed.notify_all();
        changed.wait(lock, [&] { return go; });
      }
      if (!member.isOk()) {
        errors[at] = member.status().toString();
        return;
      }
      joinStart[at] = Clock::now();
      auto outcome = member.value()->join(cancel, nullptr);
      joinEnd[at] = Clock::now();
      if (outcome.isOk() && !outcome.value().closed) {
        ranks[at] = outcome.value().assignment.nodeRank;
      } else {
        errors[at] = outcome.isOk() ? "closed" : outcome.status().toString();
      }
    });
  }
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return connected == n; });
    connectEnd = Clock::now();
    go = true;
  }
  changed.notify_all();
  for (auto& t : threads) {
    t.join();
  }
  stopKeeper = true;
  keeper.join();

  Result r;
  r.connectMs = msBetween(connectStart, connectEnd);
  r.closeMs = msBetween(*std::min_element(joinStart.begin(), joinStart.end()),
                        *std::max_element(joinEnd.begin(), joinEnd.end()));
  const std::set<int> distinct(ranks.begin(), ranks.end());
  for (const auto& e : errors) {
    if (!e.empty()) {
      r.error = e;
      return r;
    }
  }
  r.ok = static_cast<int>(distinct.size()) == n && *distinct.begin() == 0 &&
         *distinct.rbegin() == n - 1;
  if (!r.ok) {
    r.error = "node ranks are not 0.." + std::to_string(n - 1);
  }
  return r;
}

int runMain(int argc, char** argv) {
  CLI::App app{"One round of N simulated nodes through etcd and through dtrun's store"};
  std::string endpoints;
  std::vector<int> sizes{8, 64, 512};
  int repeats = 3;
  app.add_option("--etcd", endpoints, "etcd's client URLs, host:port[,host:port]")->required();
  app.add_option("--nodes", sizes, "node counts")->delimiter(',');
  app.add_option("--repeats", repeats, "rounds per size and backend (the median is the figure)");
  CLI11_PARSE(app, argc, argv);

  EtcdOptions options;
  for (std::size_t start = 0; start <= endpoints.size();) {
    const auto comma = std::min(endpoints.find(',', start), endpoints.size());
    options.endpoints.push_back(endpoints.substr(start, comma - start));
    start = comma + 1;
  }
  options.timeout = std::chrono::seconds(60);
  auto client = EtcdClient::connect(options);
  if (!client.isOk()) {
    std::cerr << "etcd_rdzv_bench: " << client.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<EtcdClient> etcd = std::move(client).value();
  ServerOptions serverOptions;
  serverOptions.host = "127.0.0.1";
  auto server = StoreServer::start(serverOptions);
  if (!server.isOk()) {
    std::cerr << "etcd_rdzv_bench: " << server.status().message() << "\n";
    return 2;
  }
  ClientOptions storeOptions;
  storeOptions.port = server.value()->port();
  storeOptions.timeout = std::chrono::seconds(60);

  int failed = 0;
  for (const int n : sizes) {
    std::vector<double> medians;
    for (const char* backend : {"store", "etcd"}) {
      std::vector<double> closes;
      for (int rep = 0; rep < repeats; ++rep) {
        const std::string job = std::string("bench-") + backend + "-" + std::to_string(n) + "-" +
                                std::to_string(rep) + "-" + std::to_string(::getpid());
        const std::string prefix = "/dtrun-bench/" + job + "/";
        const StoreFactory stores = std::string(backend) == "etcd"
                                        ? StoreFactory([&] { return makeEtcdStore(etcd, prefix); })
                                        : storeFactory(storeOptions);
        const Result r = runRound(stores, n, job);
        std::printf(
            "etcd_rdzv_bench backend=%s nodes=%d rep=%d close_ms=%.2f connect_ms=%.1f ok=%d\n",
            backend, n, rep, r.closeMs, r.connectMs, r.ok ? 1 : 0);
        if (!r.ok) {
          (void)std::fprintf(stderr, "etcd_rdzv_bench: %s %d nodes: %s\n", backend, n,
                             r.error.c_str());
          ++failed;
        }
        closes.push_back(r.closeMs);
        if (std::string(backend) == "etcd") {
          static_cast<void>(etcd->erase(prefix, true));
        }
      }
      std::sort(closes.begin(), closes.end());
      medians.push_back(closes[closes.size() / 2]);
    }
    std::printf(
        "etcd_rdzv_bench nodes=%d store_close_ms=%.2f etcd_close_ms=%.2f etcd_over_store=%.2f\n", n,
        medians[0], medians[1], medians[1] / std::max(medians[0], 1e-3));
    (void)std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::exception& e) {
    (void)std::fprintf(stderr, "etcd_rdzv_bench: %s\n", e.what());
    return 1;
  }
}
