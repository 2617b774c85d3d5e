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
#include "protocol.h"
#include "round_codec.h"

namespace {

namespace wire = dtrun::rdzv::detail;
using dtrun::bench::Clock;
using dtrun::bench::fixed;
using dtrun::bench::msBetween;
using std::chrono::milliseconds;

struct Options {
  std::vector<int> nodes{4096, 16384};
  int repeats = 1;
  int loops = 1;
  std::string connect;
  int serverPid = 0;
  int timeoutS = 120;
  bool waitGet = true;
};

// Where a node is: each step waits for the replies of the requests it sent.
enum class Step : std::uint8_t {
  kConnecting,  // non-blocking connect() in progress
  kHandshake,   // VALIDATE + PING sent: the PING's echo
  kIdle,        // connected, waiting for the start
  kRound,       // CHECK + GET of the round key
  kTicket,      // ADD on the round's arrivals
  kWait,        // QUEUE_PUSH (no reply) and WAIT on the assignment key (--wait-get 0)
  kAssign,      // CHECK + GET of the assignment, or WAIT_GET's stop byte and value
  kDone,
  kFailed,
};

struct Node {
  int index = 0;
  int fd = -1;
  Step step = Step::kConnecting;
  std::string out;  // requests not yet written
  std::string in;   // reply bytes not yet consumed
  bool wantsWrite = false;
  int round = 0;
  int slot = -1;
  dtrun::rdzv::Assignment assignment;
  std::string error;
  Clock::time_point joinStart;
  Clock::time_point joinEnd;
};

// Reads replies from the front of a node's input; every read fails, consuming nothing, when the
// bytes are not all there yet.
class ReplyReader {
 public:
  explicit ReplyReader(const std::string& input) : input_(input) {}
  bool byte(char& out) {
    if (input_.size() - pos_ < 1) {
      return false;
    }
    out = input_[pos_++];
    return true;
  }
  bool i64(std::int64_t& out) {
    if (input_.size() - pos_ < 8) {
      return false;
    }
    out = static_cast<std::int64_t>(wire::loadU64(input_.data() + pos_));
    pos_ += 8;
    return true;
  }
  bool u32(std::uint32_t& out) {
    if (input_.size() - pos_ < 4) {
      return false;
    }
    out = wire::loadU32(input_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool bytes(std::string& out) {
    std::int64_t length = 0;
    const std::size_t start = pos_;
    if (!i64(length) || input_.size() - pos_ < static_cast<std::uint64_t>(length)) {
      pos_ = start;
      return false;
    }
    out.assign(input_, pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return true;
  }
  // A status byte and a value: CHECK + GET's replies, or WAIT_GET's.
  bool byteAndBytes(char& status, std::string& value) {
    const std::size_t start = pos_;
    if (byte(status) && bytes(value)) {
      return true;
    }
    pos_ = start;
    return false;
  }
  [[nodiscard]] std::size_t consumed() const { return pos_; }

 private:
  const std::string& input_;
  std::size_t pos_ = 0;
};

// One run's shared facts: the keys, the settings, the nodes, and the start signal.
struct Run {
  bool waitGet = true;
  std::string jobId;
  dtrun::rdzv::detail::RoundKeys keys{""};
  std::vector<Node> nodes;
  std::atomic<int> go{0};
  std::atomic<bool> cancel{false};
};

std::string errorText(int error) { return std::generic_category().message(error); }

void encode(Node& node, const wire::Request& request) {
  static_cast<void>(wire::encodeRequest(wire::Dialect::kV2, request, node.out));
}

// Everything one event loop does for its share of the nodes (index % loops == loop).
class EventLoop {
 public:
  EventLoop(Run& run, int loop, int loops) : run_(run), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    for (auto& node : run_.nodes) {
      if (node.index % loops == loop) {
        mine_.push_back(&node);
      }
    }
  }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  EventLoop(EventLoop&&) = delete;
  EventLoop& operator=(EventLoop&&) = delete;
  ~EventLoop() { ::close(epoll_); }

  // Connects and shakes hands for every node, until all are idle (or failed) or `deadline`.
  void connectAll(const sockaddr_in& store, Clock::time_point deadline) {
    for (Node* node : mine_) {
      node->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (node->fd < 0) {
        fail(*node, std::string("socket: ") + errorText(errno));
        continue;
      }
      const int one = 1;
      static_cast<void>(::setsockopt(node->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
      if (::connect(node->fd, reinterpret_cast<const sockaddr*>(&store), sizeof store) != 0 &&
          errno != EINPROGRESS) {
        fail(*node, std::string("connect: ") + errorText(errno));
        continue;
      }
      watch(*node, EPOLLOUT, EPOLL_CTL_ADD);
    }
    pump(deadline, Step::kIdle);
  }

  // Waits for the start, then runs every node's join to its assignment (or `deadline`).
  void joinAll(Clock::time_point deadline) {
    while (run_.go.load() == 0) {
      std::this_thread::yield();
    }
    for (Node* node : mine_) {
      if (node->step != Step::kIdle) {
        continue;
      }
      node->joinStart = Clock::now();
      node->step = Step::kRound;
      const std::string roundKey = run_.keys.round();
      encode(*node, wire::Request{.op = wire::Op::kCheck, .keys = {roundKey}});
      encode(*node, wire::Request{.op = wire::Op::kGet, .key = roundKey});
      write(*node);
    }
    pump(deadline, Step::kDone);
  }

 private:
  void fail(Node& node, std::string why) {
    node.error = std::move(why);
    node.step = Step::kFailed;
  }

  void watch(Node& node, std::uint32_t events, int op) {
    epoll_event event{};
    event.events = events;
    event.data.ptr = &node;
    if (::epoll_ctl(epoll_, op, node.fd, &event) != 0) {
      fail(node, std::string("epoll_ctl: ") + errorText(errno));
    }
  }

  // Runs the loop until every node reached `until` (or failed), or the deadline.
  void pump(Clock::time_point deadline, Step until) {
    constexpr int kBatch = 256;
    std::array<epoll_event, kBatch> events{};
    for (;;) {
      const auto pending = std::count_if(mine_.begin(), mine_.end(), [until](const Node* n) {
        return n->step != until && n->step != Step::kFailed;
      });
      if (pending == 0 || run_.cancel.load()) {
        return;
      }
      const int remaining = static_cast<int>(
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (remaining <= 0) {
        for (Node* node : mine_) {
          if (node->step != until && node->step != Step::kFailed) {
            fail(*node, "no progress before the deadline (step " +
                            std::to_string(static_cast<int>(node->step)) + ")");
          }
        }
        return;
      }
      const int n = ::epoll_wait(epoll_, events.data(), kBatch, std::min(remaining, 100));
      for (int i = 0; i < n; ++i) {
        auto& event = events.at(static_cast<std::size_t>(i));
        handle(*static_cast<Node*>(event.data.ptr), event.events);
      }
    }
  }

  void handle(Node& node, std::uint32_t events) {
    if (node.step == Step::kConnecting) {
      int error = 0;
      socklen_t length = sizeof error;
      static_cast<void>(::getsockopt(node.fd, SOL_SOCKET, SO_ERROR, &error, &length));
      if (error != 0) {
        fail(node, std::string("connect: ") + errorText(error));
        return;
      }
      node.step = Step::kHandshake;
      encode(node, wire::Request{.op = wire::Op::kValidate, .word = wire::kValidationMagic});
      encode(node, wire::Request{.op = wire::Op::kPing, .word = 7});
      watch(node, EPOLLIN, EPOLL_CTL_MOD);
      write(node);
      return;
    }
    if ((events & EPOLLOUT) != 0U) {
      write(node);
    }
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0U) {
      read(node);
    }
  }

  void write(Node& node) {
    while (!node.out.empty()) {
      const ssize_t sent = ::send(node.fd, node.out.data(), node.out.size(), MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EAGAIN) {
          break;
        }
        fail(node, std::string("send: ") + errorText(errno));
        return;
      }
      node.out.erase(0, static_cast<std::size_t>(sent));
    }
    const bool wants = !node.out.empty();
    if (wants != node.wantsWrite) {
      node.wantsWrite = wants;
      watch(node, wants ? EPOLLIN | EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
    }
  }

  void read(Node& node) {
    std::array<char, 4096> buffer{};
    for (;;) {
      const ssize_t got = ::recv(node.fd, buffer.data(), buffer.size(), 0);
      if (got > 0) {
        node.in.append(buffer.data(), static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EAGAIN) {
        break;
      }
      fail(node,
           got == 0 ? "the store closed the connection" : std::string("recv: ") + errorText(errno));
      return;
    }
    while (node.step != Step::kFailed && advance(node)) {
    }
  }

  // Consumes the replies of the node's step if they are all there, and sends the next step's
  // requests. False when it is still waiting.
  bool advance(Node& node) {
    if (node.in.empty()) {
      return false;
    }
    ReplyReader reader(node.in);
    switch (node.step) {
      case Step::kHandshake: {
        std::uint32_t echo = 0;
        if (!reader.u32(echo)) {
          return false;
        }
        node.step = Step::kIdle;
        break;
      }
      case Step::kRound: {
        char present = 0;
        std::string text;
        if (!reader.byteAndBytes(present, text)) {
          return false;
        }
        if (present != wire::kCheckReady ||
            std::from_chars(text.data(), text.data() + text.size(), node.round).ec != std::errc()) {
          fail(node, "the round key is absent or not a number: '" + text + "'");
          return false;
        }
        node.step = Step::kTicket;
        encode(node,
               wire::Request{
                   .op = wire::Op::kAdd, .key = run_.keys.arrivals(node.round), .integer = 1});
        write(node);
        break;
      }
      case Step::kTicket: {
        std::int64_t ticket = 0;
        if (!reader.i64(ticket)) {
          return false;
        }
        node.slot = static_cast<int>(ticket - 1);
        node.step = run_.waitGet ? Step::kAssign : Step::kWait;
        sendJoin(node);
        break;
      }
      case Step::kWait: {
        char stop = 0;
        if (!reader.byte(stop)) {
          return false;
        }
        node.step = Step::kAssign;
        const std::string key = run_.keys.assign(node.round, node.slot);
        encode(node, wire::Request{.op = wire::Op::kCheck, .keys = {key}});
        encode(node, wire::Request{.op = wire::Op::kGet, .key = key});
        write(node);
        break;
      }
      case Step::kAssign: {
        char present = 0;
        std::string text;
        if (!reader.byteAndBytes(present, text)) {
          return false;
        }
        node.joinEnd = Clock::now();
        const auto value = wire::decodeAssign(text);
        const char ready = run_.waitGet ? wire::kStopWaiting : wire::kCheckReady;
        if (present != ready || !value || value->kind != wire::AssignValue::Kind::kMember) {
          fail(node, "no member's assignment: '" + text.substr(0, 200) + "'");
          return false;
        }
        node.assignment = value->assignment;
        node.step = Step::kDone;
        break;
      }
      default:
        fail(node, "a reply the node did not ask for");
        return false;
    }
    node.in.erase(0, reader.consumed());
    return true;
  }

  // The join message and the wait, each its own send() as RoundMember's two calls.
  void sendJoin(Node& node) {
    dtrun::rdzv::NodeRecord self;
    self.host = "sim-" + std::to_string(node.index);
    self.agentId = self.host + ":" + std::to_string(::getpid());
    self.nproc = 1;
    const std::string message = wire::encodeMessage(
        wire::KeeperMessage{"join", node.round, node.slot, self.agentId, wire::encodeRecord(self)});
    const std::string inbox = run_.keys.inbox();
    encode(node, wire::Request{.op = wire::Op::kQueuePush, .key = inbox, .value = message});
    write(node);
    const std::string key = run_.keys.assign(node.round, node.slot);
    if (run_.waitGet) {
      encode(node, wire::Request{.op = wire::Op::kWaitGet, .key = key});
    } else {
      encode(node, wire::Request{.op = wire::Op::kWait, .keys = {key}});
    }
    write(node);
  }

  Run& run_;
  int epoll_;
  std::vector<Node*> mine_;
};

struct RunResult {
  bool ok = false;
  double closeMs = 0;
  double simCpuMs = 0;      // this process's CPU time during the joins
  double serverCpuMs = -1;  // the store's (in process: included in simCpuMs; --server-pid: apart)
  double connectMs = 0;
};

RunResult runOnce(const Options& options, int n, int rep) {
  RunResult result;
  std::unique_ptr<dtrun::rdzv::StoreServer> server;
  std::unique_ptr<dtrun::rdzv::KeeperService> keepers;
  dtrun::rdzv::ClientOptions store;
  store.timeout = std::chrono::seconds(options.timeoutS);
  if (options.connect.empty()) {
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
  Run run;
  run.waitGet = options.waitGet;
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
    return result;
  }
  if (auto s =
          dtrun::bench::waitForKeeper(store, run.jobId, std::chrono::seconds(options.timeoutS));
      !s.isOk()) {
    std::cerr << "rdzv_sim: the keeper did not open round 0: " << s.toString() << "\n";
    return result;
  }

  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(store.port);
  if (::inet_pton(AF_INET, store.host == "localhost" ? "127.0.0.1" : store.host.c_str(),
                  &address.sin_addr) != 1) {
    std::cerr << "rdzv_sim: --connect wants an IPv4 address, not '" << store.host << "'\n";
    return result;
  }
  run.nodes.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    run.nodes[static_cast<std::size_t>(i)].index = i;
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
      threads.emplace_back([&loop, &address, deadline = connectStart + limit] {
        loop->connectAll(address, deadline);
      });
    }
  }
  result.connectMs = msBetween(connectStart, Clock::now());
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
  CLI11_PARSE(app, argc, argv);

  dtrun::rdzv::ClientOptions probe;
  if (!options.connect.empty() && !dtrun::bench::parseEndpoint(options.connect, probe)) {
    std::cerr << "rdzv_sim: --connect wants HOST:PORT, not '" << options.connect << "'\n";
    return 2;
  }
  dtrun::log::init("warn");
  const rlim_t limit = dtrun::bench::raiseFileLimit();
  const int perNode = options.connect.empty() ? 2 : 1;  // and the server's end, in process
  const int largest = *std::max_element(options.nodes.begin(), options.nodes.end());
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
                << " connect_ms=" << fixed(r.connectMs, 1) << " ok=" << (r.ok ? 1 : 0) << std::endl;
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
