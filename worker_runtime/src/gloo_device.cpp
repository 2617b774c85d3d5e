#include "gloo_device.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>

#include "dtrun/runtime.h"

namespace dtrun::runtime::detail {
namespace {

const char* envOrNull(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): nothing in libdtrt sets variables
}

bool isLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, address, sizeof v4);
    return (ntohl(v4.sin_addr.s_addr) >> 24U) == 127U;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, address, sizeof v6);
    return IN6_IS_ADDR_LOOPBACK(&v6.sin6_addr) != 0;
  }
  return false;
}

// The local address the kernel would use to reach `host`: a UDP connect() sends nothing but picks
// the route and source address, which getsockname() then reports. Empty on any failure.
std::string localAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    return {};
  }
  std::string result;
  for (const addrinfo* ai = found; ai != nullptr && result.empty(); ai = ai->ai_next) {
    if (isLoopback(ai->ai_addr)) {
      result = "127.0.0.1";
      break;
    }
    const int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      continue;
    }
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    auto* localAddress = reinterpret_cast<sockaddr*>(&local);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, localAddress, &length) == 0) {
      std::array<char, NI_MAXHOST> text{};
      if (getnameinfo(localAddress, length, text.data(), text.size(), nullptr, 0, NI_NUMERICHOST) ==
          0) {
        result = text.data();
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return result;
}

}  // namespace

std::shared_ptr<gloo::transport::Device> makeGlooDevice() {
  gloo::transport::tcp::attr attr;
  std::string where;
  if (const char* iface = envOrNull("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
    where = "interface " + attr.iface + " (GLOO_SOCKET_IFNAME)";
  } else {
    const char* storeHost = envOrNull("MASTER_ADDR");
    attr.hostname = localAddressTowards(storeHost != nullptr ? storeHost : "127.0.0.1");
    if (attr.hostname.empty()) {
      // No route found: let Gloo resolve this machine's hostname, as it does by default.
      std::array<char, 256> name{};
      if (gethostname(name.data(), name.size() - 1) == 0) {
        attr.hostname = name.data();
      }
    }
    where = "address " + attr.hostname;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const gloo::Exception& e) {
    throw CommError("gloo: cannot listen on " + where + ": " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw CommError("gloo: cannot listen on " + where + ": " + e.what());
  }
}

}  // namespace dtrun::runtime::detail
