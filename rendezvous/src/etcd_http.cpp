#include "etcd_http.h"

#include <cerrno>
#include <optional>
#include <system_error>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace dtrun::rdzv::detail {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = EtcdHttp::Clock;

constexpr std::chrono::milliseconds kCancelCheck{200};
constexpr std::uint64_t kBodyLimit = std::uint64_t{64} << 20;

struct Target {
  std::string host;
  std::string port;
};

Target splitEndpoint(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  Target t{endpoint.substr(0, colon),
           colon == std::string::npos ? "2379" : endpoint.substr(colon + 1)};
  if (t.host.size() > 1 && t.host.front() == '[' && t.host.back() == ']') {
    t.host = t.host.substr(1, t.host.size() - 2);
  }
  return t;
}

// Why an operation ended: its error, or that time ran out (the deadline, or a cancel).
struct Outcome {
  error_code ec;
  bool timedOut = false;
  bool cancelled = false;
};

// Runs one asynchronous operation (`start` gets the completion handler) on `io` until it
// completes or the deadline passes or `cancel` is set; then `abort` closes the socket so the
// operation ends, and its handler runs before this returns.
template <typename Start, typename Abort>
Outcome await(asio::io_context& io, Clock::time_point deadline, const std::atomic<bool>* cancel,
              Start&& start, Abort&& abort) {
  std::optional<error_code> done;
  std::forward<Start>(start)([&done](error_code ec, auto&&...) { done = ec; });
  io.restart();
  Outcome out;
  while (!done) {
    const auto now = Clock::now();
    if (now >= deadline || (cancel != nullptr && cancel->load())) {
      out.timedOut = now >= deadline;
      out.cancelled = !out.timedOut;
      std::forward<Abort>(abort)();
      io.restart();
      io.run();  // the aborted operation's handler
      break;
    }
    io.run_one_until(std::min(deadline, now + kCancelCheck));
  }
  out.ec = done.value_or(error_code());
  return out;
}

bool isTlsError(const error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() ||
         ec.category() == asio::ssl::error::get_stream_category();
}

Status failure(const std::string& endpoint, const char* step, const Outcome& o) {
  if (o.cancelled) {
    return Status::error(Errc::kCancelled,
                         std::string(step) + " etcd at " + endpoint + ": cancelled");
  }
  if (o.timedOut) {
    return Status::timeout(std::string(step) + " etcd at " + endpoint + ": no answer in time");
  }
  if (isTlsError(o.ec)) {
    return Status::error(Errc::kDenied,
                         "TLS with etcd at " + endpoint + " failed: " + o.ec.message() +
                             " (check --rdzv_conf cacert, cert and key: the CA must have signed "
                             "etcd's certificate, and etcd must accept the client's)");
  }
  return Status::connection(std::string(step) + " etcd at " + endpoint + ": " + o.ec.message());
}

// One exchange over a connected stream (plain or TLS): write the request, read the reply.
class Exchange {
 public:
  Exchange(const std::string& endpoint, std::string_view path, std::string_view body,
           const std::string& authorization)
      : endpoint_(endpoint) {
    const Target t = splitEndpoint(endpoint);
    request_.method(http::verb::post);
    request_.target(std::string(path));
    request_.version(11);
    request_.set(http::field::host, t.host + ":" + t.port);
    request_.set(http::field::content_type, "application/json");
    if (!authorization.empty()) {
      request_.set(http::field::authorization, authorization);
    }
    request_.body() = std::string(body);
    request_.prepare_payload();
    parser_.body_limit(kBodyLimit);
  }

  template <typename Stream, typename Abort>
  Status run(asio::io_context& io, Stream& stream, Clock::time_point deadline,
             const std::atomic<bool>* cancel, Abort abort,
             const std::function<bool(unsigned, const std::string&)>& onBody) {
    // A stream that ends by its deadline is not a failure: the caller sees what arrived.
    const auto streamEnded = [&](const Outcome& o) { return o.timedOut && onBody; };
    auto o = await(
        io, deadline, cancel,
        [&](auto handler) { http::async_write(stream, request_, std::move(handler)); }, abort);
    if (streamEnded(o)) {
      return Status::ok();
    }
    if (o.ec || o.timedOut || o.cancelled) {
      return failure(endpoint_, "writing to", o);
    }
    o = await(
        io, deadline, cancel,
        [&](auto handler) {
          http::async_read_header(stream, buffer_, parser_, std::move(handler));
        },
        abort);
    if (streamEnded(o)) {
      return Status::ok();
    }
    if (o.ec || o.timedOut || o.cancelled) {
      return failure(endpoint_, "reading from", o);
    }
    while (!parser_.is_done()) {
      o = await(
          io, deadline, cancel,
          [&](auto handler) {
            http::async_read_some(stream, buffer_, parser_, std::move(handler));
          },
          abort);
      if (streamEnded(o)) {
        return Status::ok();
      }
      if (o.ec || o.cancelled) {
        return failure(endpoint_, "reading from", o);
      }
      if (onBody && onBody(parser_.get().result_int(), parser_.get().body())) {
        return Status::ok();
      }
    }
    if (onBody) {
      onBody(parser_.get().result_int(), parser_.get().body());
    }
    return Status::ok();
  }

  [[nodiscard]] unsigned status() const { return parser_.get().result_int(); }
  std::string takeBody() { return std::move(parser_.get().body()); }

 private:
  std::string endpoint_;
  http::request<http::string_body> request_;
  http::response_parser<http::string_body> parser_;
  beast::flat_buffer buffer_;
};

}  // namespace

struct EtcdHttp::Impl {
  std::unique_ptr<asio::ssl::context> tls;  // null: plain HTTP

  Status exchange(const std::string& endpoint, std::string_view path, std::string_view body,
                  const std::string& authorization, Clock::time_point deadline,
                  const std::atomic<bool>* cancel,
                  const std::function<bool(unsigned, const std::string&)>& onBody,
                  Reply* reply) const {
    asio::io_context io;
    const Target t = splitEndpoint(endpoint);
    error_code ec;
    const auto addresses = tcp::resolver(io).resolve(t.host, t.port, ec);
    if (ec) {
      return Status::connection("etcd endpoint " + endpoint + ": " + ec.message());
    }
    Exchange exchange(endpoint, path, body, authorization);
    Status s;
    if (!tls) {
      tcp::socket socket(io);
      const auto abort = [&] { socket.close(ec); };
      const auto o = await(
          io, deadline, cancel,
          [&](auto handler) { asio::async_connect(socket, addresses, std::move(handler)); }, abort);
      if (o.ec || o.timedOut || o.cancelled) {
        return failure(endpoint, "connecting to", o);
      }
      s = exchange.run(io, socket, deadline, cancel, abort, onBody);
    } else {
      asio::ssl::stream<tcp::socket> stream(io, *tls);
      const auto abort = [&] { stream.lowest_layer().close(ec); };
      auto o = await(
          io, deadline, cancel,
          [&](auto handler) {
            asio::async_connect(stream.lowest_layer(), addresses, std::move(handler));
          },
          abort);
      if (o.ec || o.timedOut || o.cancelled) {
        return failure(endpoint, "connecting to", o);
      }
      stream.set_verify_callback(asio::ssl::host_name_verification(t.host));
      o = await(
          io, deadline, cancel,
          [&](auto handler) {
            stream.async_handshake(asio::ssl::stream_base::client, std::move(handler));
          },
          abort);
      if (o.ec || o.timedOut || o.cancelled) {
        return failure(endpoint, "TLS handshake with", o);
      }
      s = exchange.run(io, stream, deadline, cancel, abort, onBody);
    }
    if (s.isOk() && reply != nullptr) {
      reply->status = exchange.status();
      reply->body = exchange.takeBody();
    }
    return s;
  }
};

EtcdHttp::EtcdHttp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdHttp::~EtcdHttp() = default;

namespace {

// Why `path` cannot be read ("" if it can): OpenSSL's own words for a missing file are "asio.ssl
// error".
std::string unreadable(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return std::system_category().message(errno);
  }
  ::close(fd);
  return {};
}

Status cannotRead(const char* what, const std::string& path, const std::string& why) {
  return Status::invalidArgument("etcd: cannot read the " + std::string(what) + " '" + path +
                                 "': " + why);
}

}  // namespace

Result<std::unique_ptr<EtcdHttp>> EtcdHttp::create(const EtcdTls& tls) {
  for (const auto& [path, what] : {std::pair{tls.caFile, "CA file (--rdzv_conf cacert)"},
                                   std::pair{tls.certFile, "client certificate (--rdzv_conf cert)"},
                                   std::pair{tls.keyFile, "client key (--rdzv_conf key)"}}) {
    if (const auto why = path.empty() ? std::string() : unreadable(path); !why.empty()) {
      return cannotRead(what, path, why);
    }
  }
  auto impl = std::make_unique<Impl>();
  if (!tls.caFile.empty()) {
    impl->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    error_code ec;
    impl->tls->load_verify_file(tls.caFile, ec);
    if (ec) {
      return Status::invalidArgument("etcd: cannot read the CA file '" + tls.caFile +
                                     "' (--rdzv_conf cacert): " + ec.message());
    }
    impl->tls->set_verify_mode(asio::ssl::verify_peer);
    if (!tls.certFile.empty()) {
      impl->tls->use_certificate_chain_file(tls.certFile, ec);
      if (ec) {
        return Status::invalidArgument("etcd: cannot read the client certificate '" + tls.certFile +
                                       "' (--rdzv_conf cert): " + ec.message());
      }
      impl->tls->use_private_key_file(tls.keyFile, asio::ssl::context::pem, ec);
      if (ec) {
        return Status::invalidArgument("etcd: cannot read the client key '" + tls.keyFile +
                                       "' (--rdzv_conf key): " + ec.message());
      }
    }
  }
  return std::unique_ptr<EtcdHttp>(new EtcdHttp(std::move(impl)));
}

Result<EtcdHttp::Reply> EtcdHttp::post(const std::string& endpoint, std::string_view path,
                                       std::string_view body, const std::string& authorization,
                                       Clock::time_point deadline) const {
  Reply reply;
  DTRUN_TRY(
      impl_->exchange(endpoint, path, body, authorization, deadline, nullptr, nullptr, &reply));
  return reply;
}

Status EtcdHttp::stream(const std::string& endpoint, std::string_view path, std::string_view body,
                        const std::string& authorization, Clock::time_point deadline,
                        const std::atomic<bool>* cancel,
                        const std::function<bool(unsigned, const std::string&)>& onBody) const {
  return impl_->exchange(endpoint, path, body, authorization, deadline, cancel, onBody, nullptr);
}

}  // namespace dtrun::rdzv::detail
