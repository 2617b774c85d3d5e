// A raw TCP client for tests that must control every byte on the wire (golden transcripts, bad
// input): blocking socket with a receive timeout, loopback only.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "dtrun/common.h"

namespace dtrun::testing {

class RawClient {
 public:
  // `source`: a loopback address to connect from (e.g. "127.0.0.5"), as a client of another host.
  explicit RawClient(std::uint16_t port, int timeoutMs = 5000, const char* source = nullptr)
      : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
      if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
        throw std::runtime_error(std::string("RawClient: bind to ") + source + " failed");
      }
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API wants sockaddr*
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("RawClient: connect to port " + std::to_string(port) + " failed");
    }
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{timeoutMs / 1000, (timeoutMs % 1000) * 1000};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        throw std::runtime_error("RawClient: send failed");
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  // Exactly n bytes; fewer if the peer closed or the timeout passed.
  std::string recv(std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_.get(), out.data() + got, n - got, 0);
      if (r <= 0) {
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
  }
  // True if the server closed the connection (EOF or reset) within the receive timeout.
  bool closedByPeer() {
    char byte = 0;
    const ssize_t r = ::recv(fd_.get(), &byte, 1, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }
  void shutdownWrite() { ::shutdown(fd_.get(), SHUT_WR); }

 private:
  UniqueFd fd_;
};

inline std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4U];
    out += kDigits[b & 0xfU];
  }
  return out;
}

inline std::string unhex(std::string_view text) {
  std::string out;
  const auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
    out.push_back(static_cast<char>(nibble(text[i]) * 16 + nibble(text[i + 1])));
  }
  return out;
}

}  // namespace dtrun::testing
