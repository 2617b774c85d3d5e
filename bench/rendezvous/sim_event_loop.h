// rdzv_sim's nodes: each a state machine making RoundMember::join's requests over one
// non-blocking connection, and the event loops (epoll, one thread each) that drive them.
// Header-only: rdzv_sim.cpp is its one user.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dtrun/round.h"

#include "bench_util.h"
#include "protocol.h"
#include "round_codec.h"

namespace dtrun::bench::sim {

namespace wire = dtrun::rdzv::detail;
using std::chrono::milliseconds;

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
  // Where node i connects: the store, or (grouped, groupSize > 0) its group's relay.
  std::vector<sockaddr_in> targets;
  int groupSize = 0;
  [[nodiscard]] const sockaddr_in& targetOf(int index) const {
    return targets.at(groupSize > 0 ? static_cast<std::size_t>(index / groupSize) : 0);
  }
  std::string jobId;
  dtrun::rdzv::detail::RoundKeys keys{""};
  std::vector<Node> nodes;
  std::atomic<int> go{0};
  std::atomic<bool> cancel{false};
};

inline std::string errorText(int error) { return std::generic_category().message(error); }

inline void encode(Node& node, const wire::Request& request) {
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
  void connectAll(Clock::time_point deadline) {
    for (Node* node : mine_) {
      node->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (node->fd < 0) {
        fail(*node, std::string("socket: ") + errorText(errno));
        continue;
      }
      const int one = 1;
      static_cast<void>(::setsockopt(node->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
      const sockaddr_in& target = run_.targetOf(node->index);
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
      if (::connect(node->fd, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0 &&
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

}  // namespace dtrun::bench::sim
