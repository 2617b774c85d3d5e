// rdzv_bench: the multi-node round protocol (dtrun/round.h) at scale, on one machine. For each
// size N it starts a real StoreServer and KeeperService in this process (or uses the store given
// with --connect, e.g. `dtrun store`, whose keepers then serve the job), and simulates N nodes,
// each one thread with its own RoundMember (two real connections, as an agent has), running the
// real join protocol:
//
//   1. every node connects (RoundMember::connect: two connections, the settings, the keeper);
//   2. once all are connected and the keeper has opened round 0, all are released at once and
//      call join(); each notes when its join started and when it returned its assignment;
//   3. close time = last assignment received - first join started.
//
// Settings: min = max = N nodes, last_call_timeout = 0, keep-alive interval 60 s (so no heartbeat
// interferes; none is sent anyway). Every node must get a distinct node rank in 0..N-1 and world
// size N (nproc 1 per node), or the program exits 1.
//
// Store round trips are counted per node thread: this program interposes libc's send(), which
// the dtrun client calls once per write (pipelined requests, e.g. try_get's CHECK+GET, share one;
// the server uses sendmsg, which is not counted), so "ops/node" is the round trips one node made
// during join(), connect's shown apart. The keeper's own round trips (a few per batch of joins,
// on its own thread) are not in these figures.
//
// Output: one key=value line per run on stdout (for bench/rendezvous/run.sh), then a table:
//
//   rdzv_bench nodes=64 rep=0 close_ms=3.21 connect_ms=10.2 ops_per_node=7.00 max_ops=7
//       connect_ops_per_node=5.00 ok=1
//
// Usage: rdzv_bench [--nodes 8,64,512,4096] [--repeats R] [--connect HOST:PORT]
//                   [--connections 2|1] [--stack-kib 256] [--timeout-s 120]
// Each node needs 2 descriptors (4 with an in-process server): the soft RLIMIT_NOFILE is raised
// to the hard limit at start; a size that cannot fit is reported and the program exits 2.
// --connections 1 opens a node's notification connection only when it first notifies (never,
// in a join): 16,384 nodes then fit a hard limit of 20,000 descriptors per process, with the
// store in its own process (--connect to `dtrun store --max-connections ...`). join() itself
// runs the same requests on the same (waiting) connection either way.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

#include "bench_util.h"
#include "lazy_store.h"
#include "round_codec.h"

namespace {

thread_local std::uint64_t tSends = 0;  // send() calls made by this thread

}  // namespace

// Interposes libc's send() for the whole program: counts the calling thread's requests, then
// makes the system call send() itself is (sendto without an address).
extern "C" ssize_t send(int fd, const void* buf, size_t n, int flags) {
  ++tSends;
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): syscall(2) is variadic
  return static_cast<ssize_t>(::syscall(SYS_sendto, fd, buf, n, flags, nullptr, 0));
}

namespace {

using dtrun::bench::Clock;
using dtrun::bench::cpuSeconds;
using dtrun::bench::fixed;
using dtrun::bench::LazyStore;
using dtrun::bench::median;
using dtrun::bench::msBetween;
using dtrun::bench::parseEndpoint;
using dtrun::bench::raiseFileLimit;
using dtrun::bench::secondsOf;
using dtrun::bench::waitForKeeper;
using dtrun::rdzv::ClientOptions;
using dtrun::rdzv::JoinOutcome;
using dtrun::rdzv::KeeperService;
using dtrun::rdzv::NodeRecord;
using dtrun::rdzv::RoundMember;
using dtrun::rdzv::RoundSettings;
using dtrun::rdzv::StoreServer;
using std::chrono::milliseconds;

struct Options {
  std::vector<int> nodes{8, 64, 512, 4096};
  int repeats = 1;
  std::string connect;  // HOST:PORT; empty: in-process server and keepers
  int connections = 2;  // per node: 1 = the notification connection only on first use
  int serverPid = 0;    // > 0: also report this process's (the store's) CPU time per round
  int stackKib = 256;
  int timeoutS = 120;
};

// A node's member: RoundMember::connect (two connections), or with --connections 1 one
// connection and a LazyStore for notifications.
dtrun::Result<std::unique_ptr<RoundMember>> connectMember(const ClientOptions& store,
                                                          const std::string& jobId,
                                                          const RoundSettings& settings,
                                                          NodeRecord self, int connections) {
  if (connections >= 2) {
    return RoundMember::connect(store, jobId, settings, std::move(self));
  }
  DTRUN_ASSIGN_OR_RETURN(auto waiter, dtrun::rdzv::connectStore(store));
  return RoundMember::create(std::move(waiter), std::make_unique<LazyStore>(store), jobId, settings,
                             std::move(self));
}

// One simulated node: written by its thread, read by main after the thread was joined.
struct Node {
  int index = 0;
  std::unique_ptr<RoundMember> member;
  std::string error;  // empty: fine
  JoinOutcome outcome;
  Clock::time_point connectStart;
  Clock::time_point connectEnd;
  Clock::time_point joinStart;
  Clock::time_point joinEnd;
  std::uint64_t connectOps = 0;
  std::uint64_t joinOps = 0;
};

// What the node threads of one run share with main.
struct Run {
  ClientOptions store;
  int connections = 2;
  std::string jobId;
  RoundSettings settings;
  std::vector<Node> nodes;
  std::mutex mutex;
  std::condition_variable changed;
  int connected = 0;  // nodes done connecting (well or not)
  // 1 = join now. A futex word, not the condition variable: 16,384 threads woken through one
  // mutex would each take it in turn, and the close time would measure that queue.
  std::atomic<int> go{0};
  // Nodes done with join(); they then wait for `release` before their threads exit, so that
  // 16,384 thread exits do not run (and compete for the CPUs) inside the measured window.
  // Counted without the mutex: main polls it, so that no node wakes main inside the window.
  std::atomic<int> finished{0};
  std::atomic<int> release{0};
  std::atomic<bool> cancel{false};
};

struct NodeThreadArg {
  Run* run;
  Node* node;
};

// Sleeps until `word` no longer holds `value`. A plain futex: std::atomic::wait first spins with
// sched_yield, which 16,384 waiting threads would turn into CPU taken from the nodes still
// joining.
void waitWhile(std::atomic<int>& word, int value) {
  static_assert(sizeof(std::atomic<int>) == sizeof(int));
  while (word.load() == value) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast,cppcoreguidelines-pro-type-vararg)
    ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr,
              0);
  }
}

void wakeAll(std::atomic<int>& word) {
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast,cppcoreguidelines-pro-type-vararg)
  ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
            0);
}

void runNode(Run& run, Node& node) {
  NodeRecord self;
  self.host = "sim-" + std::to_string(node.index);
  self.agentId = self.host + ":" + std::to_string(::getpid());
  self.nproc = 1;
  node.connectStart = Clock::now();
  std::uint64_t before = tSends;
  auto member = connectMember(run.store, run.jobId, run.settings, self, run.connections);
  node.connectOps = tSends - before;
  node.connectEnd = Clock::now();
  if (member.isOk()) {
    node.member = std::move(member).value();
  } else {
    node.error = "connect: " + member.status().toString();
  }
  {
    const std::lock_guard lock(run.mutex);
    ++run.connected;
    run.changed.notify_all();
  }
  waitWhile(run.go, 0);
  if (!node.member || run.cancel.load()) {
    run.finished.fetch_add(1);
    return;
  }
  before = tSends;
  node.joinStart = Clock::now();
  auto outcome = node.member->join(run.cancel, nullptr);
  node.joinEnd = Clock::now();
  node.joinOps = tSends - before;
  if (outcome.isOk()) {
    node.outcome = outcome.value();
  } else {
    node.error = "join: " + outcome.status().toString();
  }
  run.finished.fetch_add(1);
  waitWhile(run.release, 0);
}

void* nodeThread(void* raw) {
  auto* arg = static_cast<NodeThreadArg*>(raw);
  try {
    runNode(*arg->run, *arg->node);
  } catch (const std::exception& e) {
    arg->node->error = std::string("exception: ") + e.what();
    const std::lock_guard lock(arg->run->mutex);
    ++arg->run->connected;            // may count twice on a late throw; main only waits for >= N
    arg->run->finished.fetch_add(1);  // the same
    arg->run->changed.notify_all();
  }
  return nullptr;
}

struct RunResult {
  int nodes = 0;
  bool ok = false;
  double closeMs = 0;
  double startSpreadMs = 0;  // first -> last join() start: how long releasing the threads took
  double nodesCpuMs = 0;     // this process's CPU time while the nodes joined
  double serverCpuMs = -1;   // the store's (--server-pid), or -1
  double connectMs = 0;
  double opsPerNode = 0;
  std::uint64_t maxOps = 0;
  double connectOpsPerNode = 0;
};

RunResult runOnce(const Options& options, int n, int rep) {
  RunResult result;
  result.nodes = n;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<KeeperService> keepers;
  Run run;
  run.store.timeout = std::chrono::seconds(options.timeoutS);
  run.connections = options.connections;
  if (options.connect.empty()) {
    dtrun::rdzv::ServerOptions serverOptions;
    serverOptions.host = "127.0.0.1";
    auto started = StoreServer::start(serverOptions);
    if (!started.isOk()) {
      std::cerr << "rdzv_bench: store server: " << started.status().toString() << "\n";
      return result;
    }
    server = std::move(started).value();
    auto k = KeeperService::start(server->port());
    if (!k.isOk()) {
      std::cerr << "rdzv_bench: keeper service: " << k.status().toString() << "\n";
      return result;
    }
    keepers = std::move(k).value();
    run.store.host = "127.0.0.1";
    run.store.port = server->port();
  } else {
    parseEndpoint(options.connect, run.store);
  }
  run.jobId = "bench-" + std::to_string(n) + "-" + std::to_string(rep) + "-" +
              std::to_string(::getpid()) + "-" +
              std::to_string(Clock::now().time_since_epoch().count());
  run.settings.minNodes = n;
  run.settings.maxNodes = n;
  run.settings.lastCallTimeout = milliseconds(0);
  run.settings.keepAliveInterval = std::chrono::seconds(60);
  run.settings.joinTimeout = std::chrono::seconds(options.timeoutS);
  run.nodes.resize(static_cast<std::size_t>(n));

  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, static_cast<std::size_t>(options.stackKib) * 1024);
  std::vector<pthread_t> threads;
  std::vector<NodeThreadArg> args(static_cast<std::size_t>(n));
  threads.reserve(static_cast<std::size_t>(n));
  std::string failure;
  for (int i = 0; i < n; ++i) {
    auto& node = run.nodes[static_cast<std::size_t>(i)];
    node.index = i;
    args[static_cast<std::size_t>(i)] = NodeThreadArg{&run, &node};
    pthread_t thread{};
    const int rc = ::pthread_create(&thread, &attr, nodeThread, &args[static_cast<std::size_t>(i)]);
    if (rc != 0) {
      failure = "cannot start node thread " + std::to_string(i) + " of " + std::to_string(n) +
                ": " + std::system_category().message(rc) +
                " (try a smaller --stack-kib, or check ulimit -u)";
      break;
    }
    threads.push_back(thread);
  }
  ::pthread_attr_destroy(&attr);

  const auto deadline = Clock::now() + std::chrono::seconds(options.timeoutS);
  {
    std::unique_lock lock(run.mutex);
    const auto started = static_cast<int>(threads.size());
    if (!run.changed.wait_until(lock, deadline, [&] { return run.connected >= started; })) {
      failure = "nodes still connecting after " + std::to_string(options.timeoutS) + " s";
    }
  }
  if (failure.empty()) {
    if (auto s = waitForKeeper(run.store, run.jobId, std::chrono::seconds(options.timeoutS));
        !s.isOk()) {
      failure = "keeper did not open round 0: " + s.toString();
    }
  }
  if (!failure.empty()) {
    run.cancel.store(true);  // threads still connecting give up on their own (store timeout)
  }
  const double serverCpu0 = options.serverPid > 0 ? cpuSeconds(options.serverPid) : -1;
  const double selfCpu0 = cpuSeconds(::getpid());
  run.go.store(1);
  wakeAll(run.go);
  {
    // join() is bounded by the join timeout (and the store's), so this wait is too; if it
    // runs out anyway, the stragglers are cancelled and released with the rest.
    const auto started = static_cast<int>(threads.size());
    const auto joinDeadline = Clock::now() + 2 * std::chrono::seconds(options.timeoutS);
    while (run.finished.load() < started) {
      if (Clock::now() >= joinDeadline) {
        run.cancel.store(true);
        if (failure.empty()) {
          failure = "nodes still joining after " + std::to_string(2 * options.timeoutS) + " s";
        }
        break;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  // The join phase's CPU (polled every 10 ms above, so it may include up to 10 ms after it).
  result.nodesCpuMs = (cpuSeconds(::getpid()) - selfCpu0) * 1000;
  if (serverCpu0 >= 0) {
    result.serverCpuMs = (cpuSeconds(options.serverPid) - serverCpu0) * 1000;
  }
  run.release.store(1);
  wakeAll(run.release);
  for (const auto thread : threads) {
    ::pthread_join(thread, nullptr);
  }
  if (!failure.empty()) {
    std::cerr << "rdzv_bench: nodes=" << n << ": " << failure << "\n";
    return result;
  }

  // Check and sum up.
  std::set<int> ranks;
  int errors = 0;
  auto firstJoin = Clock::time_point::max();
  auto lastJoin = Clock::time_point::min();
  auto lastAssigned = Clock::time_point::min();
  auto firstConnect = Clock::time_point::max();
  auto lastConnect = Clock::time_point::min();
  std::uint64_t joinOps = 0;
  std::uint64_t connectOps = 0;
  for (const auto& node : run.nodes) {
    std::string problem = node.error;
    const auto& a = node.outcome.assignment;
    if (problem.empty() && node.outcome.closed) {
      problem = "the job closed: " + node.outcome.end.message;
    }
    if (problem.empty() && (a.worldSize != n || a.nodeCount != n || a.nodeRank < 0 ||
                            a.nodeRank >= n || a.rankOffset != a.nodeRank)) {
      problem = "wrong assignment: node rank " + std::to_string(a.nodeRank) + ", world size " +
                std::to_string(a.worldSize) + ", node count " + std::to_string(a.nodeCount) +
                ", rank offset " + std::to_string(a.rankOffset);
    }
    if (problem.empty() && !ranks.insert(a.nodeRank).second) {
      problem = "node rank " + std::to_string(a.nodeRank) + " given twice";
    }
    if (!problem.empty()) {
      if (++errors <= 3) {
        constexpr std::size_t kShown = 600;  // a keeper's status line names every node
        std::cerr << "rdzv_bench: nodes=" << n << " node " << node.index << ": "
                  << problem.substr(0, kShown) << (problem.size() > kShown ? " [...]" : "") << "\n";
      }
      continue;
    }
    firstJoin = std::min(firstJoin, node.joinStart);
    lastJoin = std::max(lastJoin, node.joinStart);
    lastAssigned = std::max(lastAssigned, node.joinEnd);
    firstConnect = std::min(firstConnect, node.connectStart);
    lastConnect = std::max(lastConnect, node.connectEnd);
    joinOps += node.joinOps;
    connectOps += node.connectOps;
    result.maxOps = std::max(result.maxOps, node.joinOps);
  }
  if (errors > 0) {
    std::cerr << "rdzv_bench: nodes=" << n << ": " << errors << " node(s) failed\n";
    return result;
  }
  result.ok = true;
  result.closeMs = msBetween(firstJoin, lastAssigned);
  result.startSpreadMs = msBetween(firstJoin, lastJoin);
  // For profiles of the join alone (perf record -k CLOCK_MONOTONIC, perf report --time A,B).
  std::cerr << "rdzv_bench: nodes=" << n << " joins from " << fixed(secondsOf(firstJoin), 6)
            << " to " << fixed(secondsOf(lastAssigned), 6) << " s (CLOCK_MONOTONIC)\n";
  result.connectMs = msBetween(firstConnect, lastConnect);
  result.opsPerNode = static_cast<double>(joinOps) / n;
  result.connectOpsPerNode = static_cast<double>(connectOps) / n;
  // Members (their connections) go first, then the keepers, then the server.
  run.nodes.clear();
  keepers.reset();
  server.reset();
  return result;
}

int runMain(int argc, char** argv) {
  Options options;
  CLI::App app{"rdzv_bench: dtrun's multi-node round protocol with N simulated nodes"};
  app.add_option("--nodes", options.nodes, "Sizes to run, e.g. 8,64,512,4096")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeats", options.repeats, "Runs per size (the table shows medians)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--connect", options.connect,
                 "Use this store (HOST:PORT, e.g. `dtrun store`) instead of an in-process one");
  app.add_option("--connections", options.connections,
                 "Store connections per node: 2 (RoundMember::connect) or 1 (the notification "
                 "connection opened on first use, never in a join)")
      ->check(CLI::Range(1, 2));
  app.add_option("--server-pid", options.serverPid,
                 "The store's process (with --connect): report its CPU time during the joins")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--stack-kib", options.stackKib, "Stack size of each node thread (KiB)")
      ->check(CLI::Range(64, 1 << 20));
  app.add_option("--timeout-s", options.timeoutS, "Bound on each phase of a run (s)")
      ->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);

  ClientOptions probe;
  if (!options.connect.empty() && !parseEndpoint(options.connect, probe)) {
    std::cerr << "rdzv_bench: --connect wants HOST:PORT, not '" << options.connect << "'\n";
    return 2;
  }
  dtrun::log::init("warn");
  const rlim_t limit = raiseFileLimit();
  // The client (and, in process, the server) end of each connection.
  const int perNode = options.connections * (options.connect.empty() ? 2 : 1);
  const int largest = *std::max_element(options.nodes.begin(), options.nodes.end());
  const auto needed = static_cast<rlim_t>(largest) * perNode + 64;
  std::cerr << "rdzv_bench: RLIMIT_NOFILE soft limit " << limit << " (hard limit, raised at start)"
            << "; " << largest << " nodes need about " << needed << "\n";
  if (limit < needed) {
    std::cerr << "rdzv_bench: too few file descriptors: " << largest << " nodes x " << perNode
              << " (" << (options.connect.empty() ? "client and server ends of " : "")
              << options.connections << " connection(s) per node) + 64 = " << needed
              << " > RLIMIT_NOFILE " << limit
              << "; raise the hard limit (ulimit -Hn, limits.conf), run fewer --nodes, or use "
                 "--connections 1 with --connect to a `dtrun store`\n";
    return 2;
  }

  struct Row {
    int nodes;
    std::vector<double> close;
    std::vector<double> connect;
    std::vector<double> ops;
    std::uint64_t maxOps = 0;
    std::vector<double> connectOps;
  };
  std::vector<Row> rows;
  bool allOk = true;
  for (const int n : options.nodes) {
    Row row{n, {}, {}, {}, 0, {}};
    for (int rep = 0; rep < options.repeats; ++rep) {
      const RunResult r = runOnce(options, n, rep);
      std::cout << "rdzv_bench nodes=" << n << " rep=" << rep << " close_ms=" << fixed(r.closeMs, 3)
                << " start_spread_ms=" << fixed(r.startSpreadMs, 1)
                << " nodes_cpu_ms=" << fixed(r.nodesCpuMs, 0)
                << " server_cpu_ms=" << fixed(r.serverCpuMs, 0)
                << " connect_ms=" << fixed(r.connectMs, 1)
                << " ops_per_node=" << fixed(r.opsPerNode, 2) << " max_ops=" << r.maxOps
                << " connect_ops_per_node=" << fixed(r.connectOpsPerNode, 2)
                << " ok=" << (r.ok ? 1 : 0) << std::endl;
      if (!r.ok) {
        allOk = false;
        break;
      }
      row.close.push_back(r.closeMs);
      row.connect.push_back(r.connectMs);
      row.ops.push_back(r.opsPerNode);
      row.connectOps.push_back(r.connectOpsPerNode);
      row.maxOps = std::max(row.maxOps, r.maxOps);
    }
    if (!allOk) {
      break;
    }
    rows.push_back(std::move(row));
  }

  std::printf("\n%8s | %15s | %15s | %18s | %16s\n", "nodes", "close time (ms)", "store ops/node",
              "connect ops/node", "connect all (ms)");
  std::printf(
      "---------+-----------------+-----------------+--------------------+-----------------\n");
  for (const auto& row : rows) {
    std::printf("%8d | %15s | %15s | %18s | %16s\n", row.nodes, fixed(median(row.close), 2).c_str(),
                (fixed(median(row.ops), 2) + " (max " + std::to_string(row.maxOps) + ")").c_str(),
                fixed(median(row.connectOps), 2).c_str(), fixed(median(row.connect), 1).c_str());
  }
  std::printf(
      "\nclose time = first join() started -> last node has its assignment (median of %d run(s));\n"
      "store ops/node = round trips one node made during join(); connect = RoundMember::connect\n"
      "(two connections with their handshakes, the settings, the keeper request).\n",
      options.repeats);
  static_cast<void>(std::fflush(stdout));
  return allOk ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return runMain(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "rdzv_bench: " << e.what() << "\n";
    return 1;
  }
}
