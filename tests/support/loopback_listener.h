// A listening TCP socket on a free loopback port, for tests that play a server (a fake or a
// proxy in front of a real one). Not thread-safe.
#pragma once

#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace dtrun::testing {

// Returns the socket (the caller closes it) and sets `endpoint` to "127.0.0.1:<port>".
inline int listenOnLoopback(std::string& endpoint) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  auto* raw = reinterpret_cast<sockaddr*>(&addr);  // NOLINT(*-reinterpret-cast): POSIX API
  REQUIRE(::bind(fd, raw, len) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  REQUIRE(::getsockname(fd, raw, &len) == 0);
  endpoint = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  return fd;
}

}  // namespace dtrun::testing
