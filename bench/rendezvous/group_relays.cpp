// group_relays: K group relays (dtrun/group_relay.h, the product's own) for one job at a store,
// as K group leaders' agents would run them, in one process: the grouped round of
// bench/rendezvous/run_groups.sh, whose nodes (rdzv_sim --relays) join through them. Publishes
// the job's settings (min = max = --nodes, last call 0), waits until the keeper opened round 0
// and every relay shows it, writes the relays' ports to --ports-file (one per line, written
// whole), then serves until SIGTERM (or --timeout-s).
// Usage: group_relays --connect HOST:PORT --job ID --nodes N --relays K --ports-file F
//                     [--timeout-s S]
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "dtrun/common.h"
#include "dtrun/group_relay.h"
#include "dtrun/rendezvous.h"

#include "bench_util.h"
#include "log.h"
#include "round_codec.h"

namespace {

int runMain(int argc, char** argv) {
  std::string connect;
  std::string job;
  std::string portsFile;
  int nodes = 0;
  int relays = 1;
  int timeoutS = 300;
  CLI::App app{"group_relays: K group relays of one job, for run_groups.sh"};
  app.add_option("--connect", connect, "The job's store, HOST:PORT")->required();
  app.add_option("--job", job, "The job's id")->required();
  app.add_option("--nodes", nodes, "The job's nodes (min = max)")
      ->required()
      ->check(CLI::Range(1, 1 << 22));
  app.add_option("--relays", relays, "Relays in this process")->check(CLI::Range(1, 4096));
  app.add_option("--ports-file", portsFile, "Where the relays' ports go")->required();
  app.add_option("--timeout-s", timeoutS, "Bound on the wait for the keeper, and on serving")
      ->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);

  dtrun::rdzv::ClientOptions store;
  if (!dtrun::bench::parseEndpoint(connect, store)) {
    std::cerr << "group_relays: --connect wants HOST:PORT, not '" << connect << "'\n";
    return 2;
  }
  store.timeout = std::chrono::seconds(timeoutS);
  dtrun::log::init("warn");
  static_cast<void>(dtrun::bench::raiseFileLimit());
  dtrun::rdzv::RoundSettings settings;
  settings.minNodes = nodes;
  settings.maxNodes = nodes;
  settings.lastCallTimeout = std::chrono::milliseconds(0);
  settings.keepAliveInterval = std::chrono::seconds(60);
  settings.joinTimeout = std::chrono::seconds(timeoutS);
  std::vector<std::unique_ptr<dtrun::rdzv::GroupRelay>> started;
  for (int i = 0; i < relays; ++i) {
    auto relay = dtrun::rdzv::GroupRelay::start(store, job, settings, "127.0.0.1");
    if (!relay.isOk()) {
      std::cerr << "group_relays: relay " << i << ": " << relay.status().toString() << "\n";
      return 1;
    }
    started.push_back(std::move(relay).value());
  }
  const auto limit = std::chrono::seconds(timeoutS);
  if (auto s = dtrun::bench::waitForKeeper(store, job, limit); !s.isOk()) {
    std::cerr << "group_relays: the keeper did not open round 0: " << s.toString() << "\n";
    return 1;
  }
  const std::vector<std::string> roundKey{dtrun::rdzv::detail::RoundKeys(job).round()};
  std::string ports;
  for (const auto& relay : started) {
    dtrun::rdzv::ClientOptions local = store;
    local.host = "127.0.0.1";
    local.port = relay->port();
    auto client = dtrun::rdzv::connectStore(local);
    if (!client.isOk() || !client.value()->wait(roundKey, limit).isOk()) {
      std::cerr << "group_relays: relay at port " << relay->port() << " never showed round 0\n";
      return 1;
    }
    ports += std::to_string(relay->port()) + "\n";
  }
  const std::string partial = portsFile + ".partial";
  std::ofstream(partial) << ports;
  if (std::rename(partial.c_str(), portsFile.c_str()) != 0) {
    std::cerr << "group_relays: cannot write " << portsFile << "\n";
    return 1;
  }
  // Served by the relays' own threads until the run's script stops this process.
  std::this_thread::sleep_for(limit);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "group_relays: " << e.what() << "\n";
    return 1;
  }
}
