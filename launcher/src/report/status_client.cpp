#include "report/status_client.h"

#include <memory>
#include <utility>  // before Asio (Boost 1.74 under C++20)

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace dtrun::launcher {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

}  // namespace

std::optional<std::pair<std::string, std::string>> splitAddress(std::string text) {
  if (text.starts_with("http://")) {
    text = text.substr(7);
  }
  text = text.substr(0, text.find('/'));
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return std::nullopt;
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::pair{host, text.substr(colon + 1)};
}

Result<HttpAnswer> httpGet(const std::string& address, const std::string& target,
                           const std::string& token, std::chrono::milliseconds timeout) {
  const auto where = splitAddress(address);
  if (!where) {
    return Status::invalidArgument("'" + address +
                                   "' is not HOST:PORT (the address of a job's --status_port, "
                                   "e.g. 127.0.0.1:29600)");
  }
  asio::io_context io;
  beast::tcp_stream stream(io);
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(where->first, where->second, ec);
  if (ec) {
    return Status::connection("cannot resolve " + where->first + ": " + ec.message());
  }
  stream.expires_after(timeout);
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::uint64_t{256} << 20U);  // the stacks of a large job
  beast::flat_buffer buffer;
  stream.async_connect(endpoints, [&](boost::system::error_code connected, const auto&) {
    if (connected) {
      ec = connected;
      return;
    }
    auto request = std::make_shared<http::request<http::empty_body>>(http::verb::get, target, 11);
    request->set(http::field::host, where->first);
    if (!token.empty()) {
      request->set(http::field::authorization, "Bearer " + token);
    }
    http::async_write(
        stream, *request, [&, request](boost::system::error_code written, std::size_t) {
          if (written) {
            ec = written;
            return;
          }
          http::async_read(stream, buffer, parser,
                           [&](boost::system::error_code read, std::size_t) { ec = read; });
        });
  });
  io.run();
  if (ec == beast::error::timeout) {
    return Status::timeout("no answer from " + address + " within " +
                           std::to_string(timeout.count() / 1000) + " s");
  }
  if (ec) {
    return Status::connection("cannot read " + target + " at " + address + ": " + ec.message() +
                              " (is the job running with --status_port, and is the address its "
                              "--status_addr?)");
  }
  HttpAnswer answer;
  answer.status = static_cast<int>(parser.get().result_int());
  answer.body = std::move(parser.get().body());
  return answer;
}

}  // namespace dtrun::launcher
