// rdzv_sim: the round protocol's join at sizes a thread per node cannot reach. N simulated nodes
// are state machines on a few event loops (epoll, one thread each), every node one non-blocking
// connection to a real store, making the requests RoundMember::join makes, in its order, with
// the same keys and payloads, against the real keeper (dtrun/round.h):
//
//   CHECK+GET round  ->  ADD arrivals (the ticket: slot = value - 1)  ->  QUEUE_PUSH inbox "join
//   <round> <slot> <agent> <record>", then WAIT_GET assign/<slot> (the assignment)
//
// (4 round trips, the push unanswered, each request its own send() as the client's; with
// --wait-get 0, the protocol before WAIT_GET: WAIT, then CHECK+GET, 5 round trips.) A node
// needs one descriptor here (and one at the store) and no thread, so the simulator's CPU per node
// is a fraction of rdzv_bench's (whose 16,384 threads compete with the store for the same cores)
// and the largest round is bounded by the store's descriptors alone (RLIMIT_NOFILE; 20,000 per
// process on this machine).
//
// Each run: an in-process StoreServer and KeeperService (or the store given with --connect, e.g.
// `dtrun store`), one RoundMember::connect that publishes the settings (min = max = N, last call
// 0) and asks for the keeper; every node connects and shakes hands (VALIDATE + PING); once all
// have and the keeper opened round 0, every loop starts its nodes' joins at once. Close time =
// last assignment received - first join started. Every node must get a distinct node rank in
// 0..N-1 and world size N, or the program exits 1.
//
// Output: one key=value line per run (as rdzv_bench's), then a table of medians.
// Usage: rdzv_sim [--nodes 4096,16384] [--repeats R] [--loops L] [--connect HOST:PORT]
//                 [--server-pid PID] [--timeout-s S] [--wait-get 1|0]
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "bench_util.h"
#include "round_codec.h"
#include "sim_event_loop.h"

namespace {

using dtrun::bench::Clock;
using dtrun::bench::fixed;
using dtrun::bench::msBetween;
using dtrun::bench::sim::EventLoop;
using dtrun::bench::sim::Run;
using std::chrono::milliseconds;

struct Options {
  std::vector<int> nodes{4096, 16384};
  int repeats = 1;
  int loops = 1;
  std::string connect;
  int serverPid = 0;
  int timeoutS = 120;
  bool waitGet = true;
  // Grouped (--relays): this process's nodes, --first-node..+--count of --nodes, join job --job
  // through their groups' relays (group_relays' ports file; node i's group is i / --group-size),
  // once --go-file exists.
  std::string job;
  std::string relaysFile;
  int groupSize = 0;
  int firstNode = 0;
  int count = 0;
  std::string goFile;
};

struct RunResult {
  bool ok = false;
  double closeMs = 0;
  double simCpuMs = 0;      // this process's CPU time during the joins
  double serverCpuMs = -1;  // the store's (in process: included in simCpuMs; --server-pid: apart)
  double connectMs = 0;
  // A run split over processes adds up: this one's share, on the machine's monotonic clock.
  std::int64_t firstJoinNs = 0;
  std::int64_t lastAssignedNs = 0;
  long long rankSum = 0;
  long long rankSquares = 0;
};

// group_relays' ports file: one relay per line, on 127.0.0.1.
std::vector<sockaddr_in> readRelays(const std::string& file) {
  std::vector<sockaddr_in> relays;
  std::ifstream in(file);
  int port = 0;
  while (in >> port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    relays.push_back(address);
  }
  return relays;
}

// The start of a run split over processes: every process connected, then the script's file.
bool waitForGo(const std::string& file, Clock::time_point deadline) {
  while (!std::filesystem::exists(file)) {
    if (Clock::now() >= deadline) {
      std::cerr << "rdzv_sim: " << file << " did not appear in time\n";
      return false;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// A run of one process at one store: the job's settings published, its keeper asked for and
// round 0 open; the store's address is every node's target.
bool startFlatRun(const Options& options, int n, int rep, const dtrun::rdzv::ClientOptions& store,
                  Run& run) {
  run.jobId = "sim-" + std::to_string(n) + "-" + std::to_string(rep) + "-" +
              std::to_string(::getpid()) + "-" +
              std::to_string(Clock::now().time_since_epoch().count());
  run.keys = dtrun::rdzv::detail::RoundKeys(run.jobId);
  dtrun::rdzv::RoundSettings settings;
  settings.minNodes = n;
  settings.maxNodes = n;
  settings.lastCallTimeout = milliseconds(0);
  settings.keepAliveInterval = std::chrono::seconds(60);
  settings.joinTimeout = std::chrono::seconds(options.timeoutS);
  dtrun::rdzv::NodeRecord organiser;
  organiser.host = "sim-organiser";
  organiser.agentId = organiser.host + ":" + std::to_string(::getpid());
  auto member = dtrun::rdzv::RoundMember::connect(store, run.jobId, settings, organiser);
  if (!member.isOk()) {
    std::cerr << "rdzv_sim: publishing the settings: " << member.status().toString() << "\n";
    return false;
  }
  if (auto s =
          dtrun::bench::waitForKeeper(store, run.jobId, std::chrono::seconds(options.timeoutS));
      !s.isOk()) {
    std::cerr << "rdzv_sim: the keeper did not open round 0: " << s.toString() << "\n";
    return false;
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(store.port);
  if (::inet_pton(AF_INET, store.host == "localhost" ? "127.0.0.1" : store.host.c_str(),
                  &address.sin_addr) != 1) {
    std::cerr << "rdzv_sim: --connect wants an IPv4 address, not '" << store.host << "'\n";
    return false;
  }
  run.targets = {address};
  return true;
}

RunResult runOnce(const Options& options, int n, int rep) {
  RunResult result;
  std::unique_ptr<dtrun::rdzv::StoreServer> server;
  std::unique_ptr<dtrun::rdzv::KeeperService> keepers;
  dtrun::rdzv::ClientOptions store;
  store.timeout = std::chrono::seconds(options.timeoutS);
  Run run;
  run.waitGet = options.waitGet;
  const bool grouped = !options.relaysFile.empty();
  if (grouped) {
    run.jobId = options.job;
    run.keys = dtrun::rdzv::detail::RoundKeys(run.jobId);
    run.targets = readRelays(options.relaysFile);
    run.groupSize = options.groupSize;
    if (static_cast<long long>(run.targets.size()) * options.groupSize < n) {
      std::cerr << "rdzv_sim: " << run.targets.size() << " relays of " << options.groupSize
                << " nodes cannot hold " << n << " nodes\n";
      return result;
    }
  } else if (options.connect.empty()) {
    dtrun::rdzv::ServerOptions serverOptions;
    serverOptions.host = "127.0.0.1";
    auto started = dtrun::rdzv::StoreServer::start(serverOptions);
    if (!started.isOk()) {
      std::cerr << "rdzv_sim: store server: " << started.status().toString() << "\n";
      return result;
    }
    server = std::move(started).value();
    auto k = dtrun::rdzv::KeeperService::start(server->port());
    if (!k.isOk()) {
      std::cerr << "rdzv_sim: keeper service: " << k.status().toString() << "\n";
      return result;
    }
    keepers = std::move(k).value();
    store.host = "127.0.0.1";
    store.port = server->port();
  } else {
    dtrun::bench::parseEndpoint(options.connect, store);
  }
  if (!grouped && !startFlatRun(options, n, rep, store, run)) {
    return result;
  }
  const int first = grouped ? options.firstNode : 0;
  const int count = grouped && options.count > 0 ? options.count : n;
  run.nodes.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    run.nodes[static_cast<std::size_t>(i)].index = first + i;
  }
  std::vector<std::unique_ptr<EventLoop>> loops;
  loops.reserve(static_cast<std::size_t>(options.loops));
  for (int l = 0; l < options.loops; ++l) {
    loops.push_back(std::make_unique<EventLoop>(run, l, options.loops));
  }
  const auto limit = std::chrono::seconds(options.timeoutS);
  const auto connectStart = Clock::now();
  {
    std::vector<std::jthread> threads;
    threads.reserve(loops.size());
    for (auto& loop : loops) {
      threads.emplace_back(
          [&loop, deadline = connectStart + limit] { loop->connectAll(deadline); });
    }
  }
  result.connectMs = msBetween(connectStart, Clock::now());
  if (!options.goFile.empty()) {
    std::cout << "rdzv_sim connected nodes=" << count << std::endl;
    if (!waitForGo(options.goFile, connectStart + limit)) {
      return result;
    }
  }
  const double serverCpu0 =
      options.serverPid > 0 ? dtrun::bench::cpuSeconds(options.serverPid) : -1;
  const double selfCpu0 = dtrun::bench::cpuSeconds(::getpid());
  {
    std::vector<std::jthread> threads;
    threads.reserve(loops.size());
    const auto deadline = Clock::now() + limit;
    for (auto& loop : loops) {
      threads.emplace_back([&loop, deadline] { loop->joinAll(deadline); });
    }
    run.go.store(1);
  }
  result.simCpuMs = (dtrun::bench::cpuSeconds(::getpid()) - selfCpu0) * 1000;
  if (serverCpu0 >= 0) {
    result.serverCpuMs = (dtrun::bench::cpuSeconds(options.serverPid) - serverCpu0) * 1000;
  }

  std::set<int> ranks;
  int errors = 0;
  auto firstJoin = Clock::time_point::max();
  auto lastAssigned = Clock::time_point::min();
  for (const auto& node : run.nodes) {
    std::string problem = node.error;
    const auto& a = node.assignment;
    if (problem.empty() && (a.worldSize != n || a.nodeCount != n || a.nodeRank < 0 ||
                            a.nodeRank >= n || a.rankOffset != a.nodeRank)) {
      problem = "wrong assignment: node rank " + std::to_string(a.nodeRank) + ", world size " +
                std::to_string(a.worldSize);
    }
    if (problem.empty() && !ranks.insert(a.nodeRank).second) {
      problem = "node rank " + std::to_string(a.nodeRank) + " given twice";
    }
    if (!problem.empty()) {
      if (++errors <= 3) {
        std::cerr << "rdzv_sim: nodes=" << n << " node " << node.index << ": " << problem << "\n";
      }
      continue;
    }
    firstJoin = std::min(firstJoin, node.joinStart);
    lastAssigned = std::max(lastAssigned, node.joinEnd);
    result.rankSum += a.nodeRank;
    result.rankSquares += static_cast<long long>(a.nodeRank) * a.nodeRank;
  }
  for (auto& node : run.nodes) {
    if (node.fd >= 0) {
      ::close(node.fd);
    }
  }
  if (errors > 0) {
    std::cerr << "rdzv_sim: nodes=" << n << ": " << errors << " node(s) failed\n";
    return result;
  }
  result.ok = true;
  result.closeMs = msBetween(firstJoin, lastAssigned);
  result.firstJoinNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(firstJoin.time_since_epoch()).count();
  result.lastAssignedNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(lastAssigned.time_since_epoch()).count();
  return result;  // the organiser's connections close first, then the keepers, the server
}

int runMain(int argc, char** argv) {
  Options options;
  CLI::App app{"rdzv_sim: dtrun's round protocol with N simulated nodes on event loops"};
  app.add_option("--nodes", options.nodes, "Sizes to run, e.g. 4096,16384")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeats", options.repeats, "Runs per size (the table shows medians)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--loops", options.loops, "Event loops (threads) the nodes are spread over")
      ->check(CLI::Range(1, 64));
  app.add_option("--connect", options.connect,
                 "Use this store (IPv4:PORT, e.g. `dtrun store`) instead of an in-process one");
  app.add_option("--server-pid", options.serverPid,
                 "The store's process (with --connect): report its CPU time during the joins")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--timeout-s", options.timeoutS, "Bound on each phase of a run (s)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--wait-get", options.waitGet,
                 "1: the assignment with WAIT_GET (RoundMember's requests); 0: WAIT, then "
                 "CHECK+GET (the protocol before it)");
  auto* relays = app.add_option("--relays", options.relaysFile,
                                "Join through group relays: group_relays' ports file");
  app.add_option("--group-size", options.groupSize, "Nodes per relay (with --relays)")
      ->check(CLI::Range(1, 1 << 20))
      ->needs(relays);
  app.add_option("--job", options.job, "The job the relays serve (with --relays)")->needs(relays);
  app.add_option("--first-node", options.firstNode, "This process's first node (with --relays)")
      ->check(CLI::Range(0, 1 << 22))
      ->needs(relays);
  app.add_option("--count", options.count, "This process's nodes (with --relays; 0 = all)")
      ->check(CLI::Range(0, 1 << 22))
      ->needs(relays);
  app.add_option("--go-file", options.goFile,
                 "Once connected, print a line and start when this file exists");
  CLI11_PARSE(app, argc, argv);
  if (!options.relaysFile.empty() && (options.groupSize < 1 || options.job.empty())) {
    std::cerr << "rdzv_sim: --relays needs --group-size and --job\n";
    return 2;
  }

  dtrun::rdzv::ClientOptions probe;
  if (!options.connect.empty() && !dtrun::bench::parseEndpoint(options.connect, probe)) {
    std::cerr << "rdzv_sim: --connect wants HOST:PORT, not '" << options.connect << "'\n";
    return 2;
  }
  dtrun::log::init("warn");
  const rlim_t limit = dtrun::bench::raiseFileLimit();
  // One descriptor a node, and the server's end when it runs in this process.
  const int perNode = options.connect.empty() && options.relaysFile.empty() ? 2 : 1;
  const int largest = options.count > 0
                          ? options.count
                          : *std::max_element(options.nodes.begin(), options.nodes.end());
  const auto needed = static_cast<rlim_t>(largest) * perNode + 64;
  if (limit < needed) {
    std::cerr << "rdzv_sim: too few file descriptors: " << largest << " nodes need " << needed
              << " > RLIMIT_NOFILE " << limit
              << "; run fewer --nodes, or --connect to a `dtrun store` process (one each side)\n";
    return 2;
  }
  bool allOk = true;
  std::vector<std::pair<int, std::vector<double>>> rows;
  for (const int n : options.nodes) {
    std::vector<double> closes;
    for (int rep = 0; rep < options.repeats && allOk; ++rep) {
      const RunResult r = runOnce(options, n, rep);
      std::cout << "rdzv_sim nodes=" << n << " rep=" << rep << " loops=" << options.loops
                << " wait_get=" << (options.waitGet ? 1 : 0) << " close_ms=" << fixed(r.closeMs, 3)
                << " sim_cpu_ms=" << fixed(r.simCpuMs, 0)
                << " server_cpu_ms=" << fixed(r.serverCpuMs, 0)
                << " connect_ms=" << fixed(r.connectMs, 1) << " first_join_ns=" << r.firstJoinNs
                << " last_assign_ns=" << r.lastAssignedNs << " rank_sum=" << r.rankSum
                << " rank_squares=" << r.rankSquares << " ok=" << (r.ok ? 1 : 0) << std::endl;
      allOk = allOk && r.ok;
      closes.push_back(r.closeMs);
    }
    if (!allOk) {
      break;
    }
    rows.emplace_back(n, closes);
  }
  std::printf("\n%8s | %15s\n", "nodes", "close time (ms)");
  std::printf("---------+----------------\n");
  for (const auto& [n, closes] : rows) {
    std::printf("%8d | %15s\n", n, fixed(dtrun::bench::median(closes), 2).c_str());
  }
  std::printf(
      "\nclose time = first join started -> last node has its assignment (median of %d "
      "run(s)), %d event loop(s)\n",
      options.repeats, options.loops);
  static_cast<void>(std::fflush(stdout));
  return allOk ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rdzv_sim: " << e.what() << "\n";
    return 1;
  }
}
