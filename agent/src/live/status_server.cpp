#include "live/status_server.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "live/live_page.h"
#include "live/metrics_text.h"

namespace dtrun::agent::detail {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// "?token=..." in a request target; "" when absent.
std::string_view queryToken(std::string_view target) {
  const auto query = target.find('?');
  if (query == std::string_view::npos) {
    return {};
  }
  std::string_view rest = target.substr(query + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    if (item.starts_with("token=")) {
      return item.substr(6);
    }
    if (amp == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(amp + 1);
  }
  return {};
}

}  // namespace

class StatusSession;

struct StatusServer::State : std::enable_shared_from_this<StatusServer::State> {
  explicit State(StatusServerOptions o) : options(std::move(o)), acceptor(io), retry(io) {}

  StatusServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // an accept that failed (EMFILE) is tried again after a pause
  std::thread thread;
  std::atomic<std::size_t> connections{0};
  std::uint16_t port = 0;  // the bound one, read before the thread starts
  std::vector<std::weak_ptr<StatusSession>> sessions;  // the io thread's only: closed at the end
  std::mutex mutex;
  std::shared_ptr<const std::string> status = std::make_shared<const std::string>("{}");
  std::shared_ptr<const std::string> metrics = std::make_shared<const std::string>("");
  StacksHandler stacks;  // under mutex

  void accept();
  [[nodiscard]] std::pair<std::shared_ptr<const std::string>, std::shared_ptr<const std::string>>
  published() {
    const std::lock_guard lock(mutex);
    return {status, metrics};
  }
};

namespace {
using Response = http::response<http::string_body>;

Response textResponse(http::status status, std::string body, std::string_view type) {
  Response response{status, 11};
  response.set(http::field::server, "dtrun");
  response.set(http::field::content_type, std::string(type));
  response.set(http::field::cache_control, "no-store");
  response.keep_alive(false);
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

Response errorResponse(http::status status, const std::string& line) {
  return textResponse(status, line + "\n", "text/plain; charset=utf-8");
}

}  // namespace

// One connection: one request read under a deadline, one answer, then close.
class StatusSession : public std::enable_shared_from_this<StatusSession> {
 public:
  StatusSession(tcp::socket socket, std::shared_ptr<StatusServer::State> state)
      : stream_(std::move(socket)), state_(std::move(state)), deadline_(stream_.get_executor()) {
    parser_.header_limit(static_cast<std::uint32_t>(state_->options.headerLimit));
    parser_.body_limit(0);  // GET only: a body is refused
  }
  ~StatusSession() { --state_->connections; }
  StatusSession(const StatusSession&) = delete;
  StatusSession& operator=(const StatusSession&) = delete;
  StatusSession(StatusSession&&) = delete;
  StatusSession& operator=(StatusSession&&) = delete;

  void close() {
    deadline_.cancel();
    stream_.close();
  }

  void run() {
    // The deadline cancels the read rather than closing the socket (as the stream's own expiry
    // would), so that the slow client still gets its 408.
    deadline_.expires_after(state_->options.requestDeadline);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) {
        self->timedOut_ = true;
        error_code ignored;
        self->stream_.socket().cancel(ignored);
      }
    });
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](error_code ec, std::size_t) { self->onRead(ec); });
  }

 private:
  void onRead(error_code ec) {
    deadline_.cancel();
    if (timedOut_) {
      return reply(errorResponse(http::status::request_timeout,
                                 "the request did not arrive within the deadline"));
    }
    if (ec == http::error::header_limit) {
      return reply(errorResponse(
          http::status::request_header_fields_too_large,
          "request header over " + std::to_string(state_->options.headerLimit) + " bytes"));
    }
    if (ec == http::error::end_of_stream || ec == asio::error::connection_reset) {
      return;  // the client went away
    }
    if (ec) {
      return reply(
          errorResponse(http::status::bad_request, "not an HTTP request: " + ec.message()));
    }
    if (auto response = answer(parser_.get())) {
      reply(std::move(*response));
    }
  }

  // nullopt: the answer comes later (GET /stacks).
  std::optional<Response> answer(const http::request<http::empty_body>& request) {
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return errorResponse(http::status::method_not_allowed, "only GET is served");
    }
    const std::string_view target{request.target().data(), request.target().size()};
    if (!state_->options.token.empty()) {
      const auto auth = request[http::field::authorization];
      const std::string_view header{auth.data(), auth.size()};
      const bool ok = header == "Bearer " + state_->options.token ||
                      queryToken(target) == state_->options.token;
      if (!ok) {
        return errorResponse(http::status::unauthorized,
                             "this job's status needs its store token: send 'Authorization: "
                             "Bearer <token>' or add ?token=<token>");
      }
    }
    const std::string_view path = target.substr(0, target.find('?'));
    const auto [status, metrics] = state_->published();
    if (path == "/status") {
      return textResponse(http::status::ok, *status, "application/json");
    }
    if (path == "/metrics") {
      return textResponse(http::status::ok, *metrics, kMetricsContentType);
    }
    if (path == "/") {
      return textResponse(http::status::ok, std::string(kLivePage), "text/html; charset=utf-8");
    }
    if (path == "/stacks") {
      StatusServer::StacksHandler handler;
      {
        const std::lock_guard lock(state_->mutex);
        handler = state_->stacks;
      }
      if (handler) {
        askStacks(handler);
        return std::nullopt;
      }
    }
    return errorResponse(http::status::not_found, "no such page: " + std::string(path) +
                                                      " (there are /, /status, /metrics, /stacks)");
  }

  // The reply comes from the agent's loop, through this session's strand; the deadline answers
  // 504 first when it does not come in time. The reply holds the server's state, so that its
  // strand is there whenever it is called; a session gone by then (closed) is not answered.
  void askStacks(const StatusServer::StacksHandler& handler) {
    deadline_.expires_after(state_->options.stacksDeadline);
    deadline_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->answered_) {
        self->answered_ = true;
        self->reply(errorResponse(http::status::gateway_timeout,
                                  "the stacks did not come within " +
                                      std::to_string(self->state_->options.stacksDeadline.count()) +
                                      " ms"));
      }
    });
    std::weak_ptr<StatusSession> weak = shared_from_this();
    handler([weak, state = state_, executor = stream_.get_executor()](std::string text) {
      asio::post(executor, [weak, text = std::move(text)]() mutable {
        const auto self = weak.lock();
        if (!self || self->answered_) {
          return;
        }
        self->answered_ = true;
        self->deadline_.cancel();
        self->reply(textResponse(http::status::ok, std::move(text), "text/plain; charset=utf-8"));
      });
    });
  }

  void reply(Response response) {
    response_ = std::move(response);
    stream_.expires_after(state_->options.requestDeadline);
    http::async_write(stream_, response_, [self = shared_from_this()](error_code, std::size_t) {
      error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  beast::tcp_stream stream_;
  std::shared_ptr<StatusServer::State> state_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  Response response_;
  asio::steady_timer deadline_;
  bool timedOut_ = false;
  bool answered_ = false;  // GET /stacks: replied (or timed out)
};

void StatusServer::State::accept() {
  acceptor.async_accept(
      asio::make_strand(io), [self = shared_from_this()](error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted) {
          return;
        }
        if (ec) {
          self->retry.expires_after(std::chrono::milliseconds(50));
          self->retry.async_wait([self](error_code waited) {
            if (!waited) {
              self->accept();
            }
          });
          return;
        }
        if (++self->connections > self->options.maxConnections) {
          --self->connections;
          error_code ignored;
          socket.close(ignored);  // over the limit: closed at once, the loop stays free
        } else {
          std::erase_if(self->sessions, [](const auto& s) { return s.expired(); });
          auto session = std::make_shared<StatusSession>(std::move(socket), self);
          self->sessions.push_back(session);
          session->run();
        }
        self->accept();
      });
}

Result<std::unique_ptr<StatusServer>> StatusServer::start(const StatusServerOptions& options) {
  auto state = std::make_shared<State>(options);
  error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) {
    return Status::invalidArgument("--status_addr: '" + options.address +
                                   "' is not an IP address (use 127.0.0.1, 0.0.0.0 or an address "
                                   "of this host)");
  }
  const tcp::endpoint endpoint(address, options.port);
  state->acceptor.open(endpoint.protocol(), ec);
  if (!ec) {
    state->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    state->acceptor.bind(endpoint, ec);
  }
  if (!ec) {
    state->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    return Status::connection("--status_port: cannot listen on " + options.address + ":" +
                              std::to_string(options.port) + ": " + ec.message() +
                              " (pick another port, or 0 for a free one)");
  }
  state->port = state->acceptor.local_endpoint(ec).port();
  state->accept();
  state->thread = std::thread([s = state.get()] { s->io.run(); });
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(state)));
}

StatusServer::StatusServer(std::shared_ptr<State> state) : state_(std::move(state)) {}

StatusServer::~StatusServer() {
  // Ends every connection on the server's thread; its io_context then runs out of work (no
  // handler is left holding the state) and the thread ends.
  asio::post(state_->io, [s = state_] {
    error_code ignored;
    s->acceptor.close(ignored);
    s->retry.cancel();
    for (const auto& weak : s->sessions) {
      if (const auto session = weak.lock()) {
        session->close();
      }
    }
  });
  if (state_->thread.joinable()) {
    state_->thread.join();
  }
}

std::uint16_t StatusServer::port() const { return state_->port; }

void StatusServer::serveStacks(StacksHandler handler) {
  const std::lock_guard lock(state_->mutex);
  state_->stacks = std::move(handler);
}

void StatusServer::publish(std::string statusJson, std::string metrics) {
  auto status = std::make_shared<const std::string>(std::move(statusJson));
  auto text = std::make_shared<const std::string>(std::move(metrics));
  const std::lock_guard lock(state_->mutex);
  state_->status = std::move(status);
  state_->metrics = std::move(text);
}

}  // namespace dtrun::agent::detail
