#include "tcp_setup.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>  // before Asio: Boost 1.74's Asio uses std::exchange without including it

#include <fcntl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "dtrun/runtime.h"

#include "communicator.h"
#include "log.h"
#include "store_handle.h"

namespace dtrun::runtime::detail::tcp {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using Tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x54524454;  // "DTRT"
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHelloBytes = 24;  // magic, version, group hash, from, to
constexpr auto kConnectRetry = std::chrono::milliseconds(20);

struct Hello {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint64_t group = 0;
  std::int32_t from = -1;
  std::int32_t to = -1;
};
using HelloBytes = std::array<unsigned char, kHelloBytes>;

HelloBytes encode(const Hello& h) {
  HelloBytes b{};
  std::memcpy(b.data(), &h.magic, 4);
  std::memcpy(b.data() + 4, &h.version, 4);
  std::memcpy(b.data() + 8, &h.group, 8);
  std::memcpy(b.data() + 16, &h.from, 4);
  std::memcpy(b.data() + 20, &h.to, 4);
  return b;
}

Hello decode(const HelloBytes& b) {
  Hello h;
  std::memcpy(&h.magic, b.data(), 4);
  std::memcpy(&h.version, b.data() + 4, 4);
  std::memcpy(&h.group, b.data() + 8, 8);
  std::memcpy(&h.from, b.data() + 16, 4);
  std::memcpy(&h.to, b.data() + 20, 4);
  return h;
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The address peers should dial: the one of the interface that routes to the store host
// (connecting a UDP socket sends nothing, it only picks the route), so a multi-node job
// advertises a reachable address and a single-node one stays on loopback.
asio::ip::address advertisedAddress(asio::io_context& io) {
  const char* master = std::getenv("MASTER_ADDR");  // NOLINT(concurrency-mt-unsafe): read-only
  if (master == nullptr || *master == '\0') {
    return asio::ip::address_v4::loopback();
  }
  error_code ec;
  asio::ip::udp::resolver resolver(io);
  const auto results = resolver.resolve(master, "29500", ec);
  if (ec || results.empty()) {
    log::runtime().warn("tcp: cannot resolve MASTER_ADDR={} ({}); advertising 127.0.0.1", master,
                        ec.message());
    return asio::ip::address_v4::loopback();
  }
  const auto target = results.begin()->endpoint();
  if (target.address().is_loopback()) {
    return target.address();
  }
  asio::ip::udp::socket probe(io);
  probe.connect(target, ec);
  if (!ec) {
    const auto local = probe.local_endpoint(ec);
    if (!ec) {
      return local.address();
    }
  }
  log::runtime().warn("tcp: no route to MASTER_ADDR={} ({}); advertising 127.0.0.1", master,
                      ec.message());
  return asio::ip::address_v4::loopback();
}

std::string formatEndpoint(const asio::ip::address& address, std::uint16_t port) {
  return address.is_v6() ? "[" + address.to_string() + "]:" + std::to_string(port)
                         : address.to_string() + ":" + std::to_string(port);
}

bool parseEndpoint(const std::string& text, Tcp::endpoint& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return false;
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  char* end = nullptr;
  const long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (ec || end == nullptr || *end != '\0' || port <= 0 || port > 65535) {
    return false;
  }
  out = Tcp::endpoint(address, static_cast<std::uint16_t>(port));
  return true;
}

// One connection in the making, with its handshake buffer.
struct Pending {
  explicit Pending(asio::io_context& io) : socket(io), retry(io) {}
  Tcp::socket socket;
  asio::steady_timer retry;
  HelloBytes buffer{};
  std::string lastError;
};

class MeshBuilder {
 public:
  explicit MeshBuilder(const CommunicatorConfig& config)
      : config_(config),
        deadline_(Clock::now() + config.timeout),
        groupHash_(fnv1a(config.store->prefix() + "/" + config.groupName)),
        acceptor_(io_),
        bound_(static_cast<std::size_t>(config.size), nullptr) {}

  std::vector<UniqueFd> run() {
    listen();
    const std::vector<Tcp::endpoint> targets = lookUpLowerRanks();
    for (int q = 0; q < config_.rank; ++q) {
      connecting_.push_back(std::make_unique<Pending>(io_));
    }
    for (int q = 0; q < config_.rank; ++q) {
      connect(q, targets[static_cast<std::size_t>(q)]);
    }
    if (config_.rank + 1 < config_.size) {
      acceptNext();
    }
    while (missing() > 0 && fatal_.empty()) {
      const auto now = Clock::now();
      if (now >= deadline_ || io_.run_one_for(deadline_ - now) == 0) {
        break;
      }
    }
    if (!fatal_.empty()) {
      throw CommError(what() + ": " + fatal_);
    }
    if (missing() > 0) {
      throw TimeoutError(what() + ": timed out after " + std::to_string(config_.timeout.count()) +
                         " ms waiting for " + rankList(missingRanks()) + " to connect" +
                         lastErrors());
    }
    return release();
  }

 private:
  [[nodiscard]] std::string what() const {
    return "tcp process group '" + config_.groupName + "' set-up";
  }
  [[nodiscard]] int globalRank(int r) const {
    return config_.globalRanks[static_cast<std::size_t>(r)];
  }
  [[nodiscard]] std::string key(int r) const {
    return config_.groupName + "/addr/" + std::to_string(r);
  }

  void listen() {
    const auto address = advertisedAddress(io_);
    error_code ec;
    const Tcp::endpoint endpoint(address, 0);  // port 0: the kernel picks a free one
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) {
      acceptor_.bind(endpoint, ec);
    }
    if (!ec) {
      acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    }
    Tcp::endpoint local;
    if (!ec) {
      local = acceptor_.local_endpoint(ec);
    }
    if (ec) {
      throw CommError(what() + ": cannot listen on " + address.to_string() + ": " + ec.message());
    }
    config_.store->set(key(config_.rank), formatEndpoint(address, local.port()));
  }

  std::vector<Tcp::endpoint> lookUpLowerRanks() {
    std::vector<Tcp::endpoint> targets(static_cast<std::size_t>(config_.rank));
    for (int q = 0; q < config_.rank; ++q) {
      const std::string whose = "rank " + std::to_string(globalRank(q)) + "'s address";
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      try {
        config_.store->wait({key(q)}, std::max(left, std::chrono::milliseconds(1)), whose);
      } catch (const TimeoutError&) {
        throw TimeoutError(what() + ": timed out after " + std::to_string(config_.timeout.count()) +
                           " ms waiting for " + whose);
      }
      const std::string text = config_.store->get(key(q));
      if (!parseEndpoint(text, targets[static_cast<std::size_t>(q)])) {
        throw CommError(what() + ": rank " + std::to_string(globalRank(q)) +
                        " published a malformed address '" + text + "'");
      }
    }
    return targets;
  }

  void connect(int q, const Tcp::endpoint& target) {
    Pending& pending = *connecting_[static_cast<std::size_t>(q)];
    pending.socket.async_connect(target, [this, q, target, &pending](const error_code& ec) {
      if (ec) {
        // Refused or reset: the listener is published before anyone dials it, so this is
        // transient (or the peer is gone, which the deadline reports).
        pending.lastError =
            "connect to " + formatEndpoint(target.address(), target.port()) + ": " + ec.message();
        error_code ignored;
        pending.socket.close(ignored);
        pending.retry.expires_after(kConnectRetry);
        pending.retry.async_wait([this, q, target](const error_code& timerEc) {
          if (!timerEc) {
            connect(q, target);
          }
        });
        return;
      }
      pending.buffer = encode(Hello{kMagic, kVersion, groupHash_, config_.rank, q});
      asio::async_write(pending.socket, asio::buffer(pending.buffer),
                        [this, q, &pending](const error_code& writeEc, std::size_t /*n*/) {
                          if (writeEc) {
                            fatal_ = "handshake with rank " + std::to_string(globalRank(q)) +
                                     " failed: " + writeEc.message();
                            return;
                          }
                          asio::async_read(
                              pending.socket, asio::buffer(pending.buffer),
                              [this, q, &pending](const error_code& readEc, std::size_t /*n*/) {
                                onAck(q, pending, readEc);
                              });
                        });
    });
  }

  void onAck(int q, Pending& pending, const error_code& ec) {
    if (ec) {
      fatal_ = "handshake with rank " + std::to_string(globalRank(q)) + " failed: " +
               (ec == asio::error::eof ? std::string("connection closed") : ec.message());
      return;
    }
    const Hello ack = decode(pending.buffer);
    if (ack.magic != kMagic || ack.version != kVersion || ack.group != groupHash_ ||
        ack.from != q || ack.to != config_.rank) {
      fatal_ = "rank " + std::to_string(globalRank(q)) +
               "'s address answered with a wrong handshake (another job or attempt?)";
      return;
    }
    bound_[static_cast<std::size_t>(q)] = &pending.socket;
  }

  void acceptNext() {
    accepted_.push_back(std::make_unique<Pending>(io_));
    Pending& pending = *accepted_.back();
    acceptor_.async_accept(pending.socket, [this, &pending](const error_code& ec) {
      if (ec) {
        if (ec != asio::error::operation_aborted) {
          log::runtime().warn("tcp: accept failed: {}", ec.message());
          acceptNext();
        }
        return;
      }
      asio::async_read(pending.socket, asio::buffer(pending.buffer),
                       [this, &pending](const error_code& readEc, std::size_t /*n*/) {
                         onHello(pending, readEc);
                       });
      acceptNext();
    });
  }

  void onHello(Pending& pending, const error_code& ec) {
    error_code ignored;
    if (ec) {
      pending.socket.close(ignored);
      return;
    }
    const Hello hello = decode(pending.buffer);
    const bool valid = hello.magic == kMagic && hello.version == kVersion &&
                       hello.group == groupHash_ && hello.to == config_.rank &&
                       hello.from > config_.rank && hello.from < config_.size &&
                       bound_[static_cast<std::size_t>(hello.from)] == nullptr;
    if (!valid) {
      // A stray: a port scanner, or a process of an earlier attempt still dialing.
      log::runtime().warn("tcp: {}: rejected a connection with a foreign handshake", what());
      pending.socket.close(ignored);
      return;
    }
    const int from = hello.from;
    pending.buffer = encode(Hello{kMagic, kVersion, groupHash_, config_.rank, from});
    asio::async_write(pending.socket, asio::buffer(pending.buffer),
                      [this, from, &pending](const error_code& writeEc, std::size_t /*n*/) {
                        if (writeEc) {
                          error_code ignoredEc;
                          pending.socket.close(ignoredEc);
                          return;
                        }
                        if (bound_[static_cast<std::size_t>(from)] == nullptr) {
                          bound_[static_cast<std::size_t>(from)] = &pending.socket;
                        }
                      });
  }

  [[nodiscard]] int missing() const {
    int count = 0;
    for (int r = 0; r < config_.size; ++r) {
      count += r != config_.rank && bound_[static_cast<std::size_t>(r)] == nullptr ? 1 : 0;
    }
    return count;
  }

  [[nodiscard]] std::vector<int> missingRanks() const {
    std::vector<int> ranks;
    for (int r = 0; r < config_.size; ++r) {
      if (r != config_.rank && bound_[static_cast<std::size_t>(r)] == nullptr) {
        ranks.push_back(globalRank(r));
      }
    }
    return ranks;
  }

  [[nodiscard]] std::string lastErrors() const {
    std::string text;
    for (int q = 0; q < config_.rank; ++q) {
      const Pending& pending = *connecting_[static_cast<std::size_t>(q)];
      if (bound_[static_cast<std::size_t>(q)] == nullptr && !pending.lastError.empty()) {
        text += "; " + pending.lastError;
      }
    }
    return text.empty() ? text : " (" + text.substr(2) + ")";
  }

  std::vector<UniqueFd> release() {
    std::vector<UniqueFd> fds(static_cast<std::size_t>(config_.size));
    for (int r = 0; r < config_.size; ++r) {
      Tcp::socket* socket = bound_[static_cast<std::size_t>(r)];
      if (socket == nullptr) {
        continue;
      }
      error_code ec;
      socket->set_option(Tcp::no_delay(true), ec);  // latency: small frames must not wait
      // The kernel's buffer autotuning beats a fixed SO_SNDBUF/SO_RCVBUF here: setting them
      // caps the buffers at net.core.[rw]mem_max, often far below what autotuning reaches.
      UniqueFd fd(socket->release(ec));
      if (ec || !fd.valid()) {
        throw CommError(what() + ": cannot take over the socket of rank " +
                        std::to_string(globalRank(r)) + ": " + ec.message());
      }
      const int flags = ::fcntl(fd.get(), F_GETFL);
      if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
        throw CommError(what() + ": fcntl(O_NONBLOCK): " + std::system_category().message(errno));
      }
      fds[static_cast<std::size_t>(r)] = std::move(fd);
    }
    return fds;
  }

  const CommunicatorConfig& config_;
  const Clock::time_point deadline_;
  const std::uint64_t groupHash_;
  // Declared before every socket: sockets must be destroyed before their io_context.
  asio::io_context io_;
  Tcp::acceptor acceptor_;
  std::vector<std::unique_ptr<Pending>> connecting_;  // index: lower rank
  std::vector<std::unique_ptr<Pending>> accepted_;
  std::vector<Tcp::socket*> bound_;  // group rank -> its handshaken socket (owned above)
  std::string fatal_;
};

}  // namespace

std::vector<UniqueFd> connectMesh(const CommunicatorConfig& config) {
  if (config.size <= 1) {
    return std::vector<UniqueFd>(static_cast<std::size_t>(std::max(config.size, 1)));
  }
  MeshBuilder builder(config);
  return builder.run();
}

}  // namespace dtrun::runtime::detail::tcp
