// StoreServer: owns the io_context, the listener, the shared state and the event-loop thread.
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>  // before Asio (see session.h)

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/rendezvous.h"

#include "log.h"
#include "session.h"

namespace dtrun::rdzv {
namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

namespace {

// The kernel clamps the backlog to net.core.somaxconn; asking for that much is the intent.
int listenBacklog() {
  std::ifstream file("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (file >> value && value > 0) {
    return std::max(value, static_cast<int>(asio::socket_base::max_listen_connections));
  }
  return asio::socket_base::max_listen_connections;
}

Status openAcceptor(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, bool dualStack) {
  error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec && dualStack) {
    acceptor.set_option(asio::ip::v6_only(false), ec);
  }
  if (!ec) {
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) {
    acceptor.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor.listen(listenBacklog(), ec);
  }
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    return Status::connection("listen on " + endpoint.address().to_string() + ":" +
                              std::to_string(endpoint.port()) + ": " + ec.message());
  }
  return Status::ok();
}

class AsioStoreServer final : public StoreServer {
 public:
  explicit AsioStoreServer(const ServerOptions& options)
      : core_(
            detail::Limits{options.maxKeyLength, options.maxValueLength, options.maxKeysPerRequest,
                           std::max(std::size_t{64} * 1024 * 1024, 2 * options.maxValueLength)},
            detail::ConnectionLimits{options.maxConnections, options.maxReplyBacklog},
            options.token),
        acceptor_(io_),
        retryTimer_(io_) {}

  AsioStoreServer(const AsioStoreServer&) = delete;
  AsioStoreServer& operator=(const AsioStoreServer&) = delete;
  AsioStoreServer(AsioStoreServer&&) = delete;
  AsioStoreServer& operator=(AsioStoreServer&&) = delete;
  ~AsioStoreServer() override { stop(); }

  Status listen(const ServerOptions& options) {
    if (options.host.empty()) {
      // Dual-stack first: MASTER_ADDR may resolve to IPv6 as well as IPv4.
      if (openAcceptor(acceptor_, tcp::endpoint(asio::ip::address_v6::any(), options.port), true)
              .isOk()) {
        return Status::ok();
      }
      return openAcceptor(acceptor_, tcp::endpoint(asio::ip::address_v4::any(), options.port),
                          false);
    }
    tcp::resolver resolver(io_);
    error_code ec;
    const auto results =
        resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
    if (ec) {
      return Status::invalidArgument("cannot resolve store host '" + options.host +
                                     "': " + ec.message());
    }
    Status last = Status::invalidArgument("store host '" + options.host + "' has no address");
    for (const auto& entry : results) {
      last = openAcceptor(acceptor_, entry.endpoint(), false);
      if (last.isOk()) {
        return last;
      }
    }
    return last;
  }

  void run() {
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] {
      try {
        io_.run();
      } catch (const std::exception& e) {
        log::rdzv().critical("store server event loop failed: {}", e.what());
      }
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
      stoppedCv_.notify_all();
    });
    log::rdzv().info("store listening on {}:{}", acceptor_.local_endpoint().address().to_string(),
                     port_);
  }

  [[nodiscard]] std::uint16_t port() const override { return port_; }

  void stop() override {
    std::call_once(stopOnce_, [this] {
      if (thread_.joinable()) {
        asio::post(io_, [this] {
          error_code ignored;
          acceptor_.close(ignored);
          retryTimer_.cancel();
          core_.closeAll();
          io_.stop();
        });
        thread_.join();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
      stoppedCv_.notify_all();
    });
  }

  void waitUntilStopped() override {
    std::unique_lock<std::mutex> lock(mutex_);
    stoppedCv_.wait(lock, [this] { return stopped_; });
  }

 private:
  void accept() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) {
        return;
      }
      if (ec) {
        // Usually EMFILE: back off briefly instead of spinning on a listener we cannot drain,
        // and say so once per spell, with the fix, not ten times a second.
        if (!acceptFailing_) {
          acceptFailing_ = true;
          log::rdzv().warn(
              "store: cannot accept connections: {}; retrying every 100 ms{}", ec.message(),
              ec == asio::error::no_descriptors
                  ? " (this process's open files are at their limit: raise it with ulimit -n)"
                  : "");
        }
        retryTimer_.expires_after(std::chrono::milliseconds(100));
        retryTimer_.async_wait([this](const error_code& timerEc) {
          if (!timerEc) {
            accept();
          }
        });
        return;
      }
      if (acceptFailing_) {
        acceptFailing_ = false;
        log::rdzv().info("store: accepting connections again");
      }
      error_code ignored;
      if (core_.sessionCount() >= core_.connectionLimits().maxConnections) {
        refuse(socket);
        accept();
        return;
      }
      socket.set_option(tcp::no_delay(true), ignored);
      auto session = std::make_shared<detail::Session>(std::move(socket), nextClient_++, core_);
      core_.add(session);
      session->start();
      accept();
    });
  }

  // Closes a connection over the limit at once (the client sees EOF and retries or fails with
  // its own timeout). Logs the first refusal, then at most one line per second with the count.
  void refuse(tcp::socket& socket) {
    ++refused_;
    const auto now = std::chrono::steady_clock::now();
    if (refused_ == 1 || now - lastRefusalLog_ >= std::chrono::seconds(1)) {
      error_code ec;
      const auto peer = socket.remote_endpoint(ec);
      log::rdzv().warn(
          "connection from {} refused: limit of {} connections reached (--max-connections); "
          "{} refused so far",
          ec ? std::string("unknown peer") : peer.address().to_string(),
          core_.connectionLimits().maxConnections, refused_);
      lastRefusalLog_ = now;
    }
    error_code ignored;
    socket.close(ignored);
  }

  asio::io_context io_;
  detail::ServerCore core_;  // stop() closes every session before any member is destroyed
  tcp::acceptor acceptor_;
  asio::steady_timer retryTimer_;
  bool acceptFailing_ = false;  // in a spell of failed accepts (said once, at its start)
  std::uint16_t port_ = 0;
  detail::ClientId nextClient_ = 1;
  std::uint64_t refused_ = 0;
  std::chrono::steady_clock::time_point lastRefusalLog_;
  std::thread thread_;
  std::once_flag stopOnce_;
  std::mutex mutex_;
  std::condition_variable stoppedCv_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::start(const ServerOptions& options) {
  auto server = std::make_unique<AsioStoreServer>(options);
  DTRUN_TRY(server->listen(options));
  server->run();
  return std::unique_ptr<StoreServer>(std::move(server));
}

}  // namespace dtrun::rdzv
