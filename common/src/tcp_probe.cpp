#include "tcp_probe.h"

#include <cerrno>
#include <memory>
#include <system_error>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

namespace dtrun {

Status acceptsConnection(const std::string& host, std::uint16_t port,
                         std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return Status::connection("connect(" + where + "): cannot resolve host: " + ::gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  Status last = Status::connection("connect(" + where + "): no address");
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last = Status::system("socket()", errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        err = ETIMEDOUT;
        if (::poll(&p, 1, static_cast<int>(wait.count())) > 0) {
          socklen_t len = sizeof err;
          static_cast<void>(::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len));
        }
      }
    }
    if (err == 0) {
      return Status::ok();
    }
    last = Status::connection("connect(" + where + "): " + std::system_category().message(err));
  }
  return last;
}

}  // namespace dtrun
