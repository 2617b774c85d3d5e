#include "store_connection.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store_auth.h"

namespace dtrun::rdzv::detail {

using std::chrono::milliseconds;

int remainingMs(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
}

StoreConnection::StoreConnection(ClientOptions options)
    : options_(std::move(options)),
      peer_(options_.host + ":" + std::to_string(options_.port)),
      dialect_(options_.dialect == rdzv::Dialect::kV2 ? Dialect::kV2 : Dialect::kLegacy) {}

Status StoreConnection::connectUntil(Clock::time_point until) {
  Backoff backoff;
  int attempts = 0;
  Status last = Status::connection("no attempt made");
  do {
    ++attempts;
    last = connectOnce(until);
    if (last.isOk() || last.code() == Errc::kDenied) {
      return last;
    }
    const auto pause = std::min<std::int64_t>(backoff.nextDelay().count(), remainingMs(until));
    std::this_thread::sleep_for(milliseconds(pause));
  } while (Clock::now() < until);
  const auto seconds = std::chrono::duration<double>(options_.timeout).count();
  return Status::error(
      last.code() == Errc::kProtocol ? Errc::kProtocol : Errc::kConnection,
      last.message() + " (" + std::to_string(attempts) + " attempts over " +
          std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 2) + "s)");
}

Status StoreConnection::connectOnce(Clock::time_point until) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc =
      ::getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &found);
  if (rc != 0) {
    return Status::connection("connect(" + peer_ + "): cannot resolve host: " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  Status last = Status::connection("connect(" + peer_ + "): no address");
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last = Status::system("socket()", errno);
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = Status::connection("connect(" + peer_ + "): " + std::system_category().message(errno));
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    const int ready = ::poll(&p, 1, remainingMs(until));
    int err = ETIMEDOUT;
    socklen_t len = sizeof err;
    if (ready > 0) {
      static_cast<void>(::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len));
    }
    if (err != 0) {
      last = Status::connection("connect(" + peer_ + "): " + std::system_category().message(err));
      continue;
    }
    const int one = 1;
    static_cast<void>(::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    fd_ = std::move(fd);
    inBegin_ = inEnd_ = 0;
    if (auto s = handshake(until); !s.isOk()) {
      drop();
      return s;
    }
    return Status::ok();
  }
  return last;
}

Status StoreConnection::handshake(Clock::time_point until) {
  if (dialect_ != detail::Dialect::kV2) {
    return Status::ok();
  }
  std::string out;
  const auto nonce = static_cast<std::uint32_t>(::getpid());
  static_cast<void>(detail::encodeRequest(
      dialect_, Request{.op = Op::kValidate, .word = detail::kValidationMagic}, out));
  static_cast<void>(detail::encodeRequest(dialect_, Request{.op = Op::kPing, .word = nonce}, out));
  std::uint32_t echo = 0;
  if (auto s = writeAll(out, until); !s.isOk()) {
    return s.withContext("connect(" + peer_ + "): handshake");
  }
  if (auto s = readU32(echo, until); !s.isOk()) {
    return s.withContext("connect(" + peer_ + "): handshake");
  }
  if (echo != nonce) {
    return Status::protocol("connect(" + peer_ + "): handshake ping echoed " +
                            std::to_string(echo) + " instead of " + std::to_string(nonce) +
                            "; is this a TCPStore server?");
  }
  return options_.token.empty() ? Status::ok() : proveToken(until);
}

Status StoreConnection::proveToken(Clock::time_point until) {
  const std::string what = "connect(" + peer_ + "): token handshake";
  const std::string clientNonce = detail::randomNonce();
  std::string out;
  static_cast<void>(detail::encodeRequest(
      dialect_, Request{.op = Op::kAuthChallenge, .proof = clientNonce}, out));
  Bytes serverNonce;
  if (auto s = writeAll(out, until); !s.isOk()) {
    return s.withContext(what);
  }
  if (auto s = readBytes(serverNonce, until); !s.isOk()) {
    return Status::error(Errc::kDenied,
                         what +
                             ": the store closed the connection: it has no token (unset "
                             "DTRUN_STORE_TOKEN here) or is not a dtrun store (" +
                             s.message() + ")");
  }
  out.clear();
  const std::string proof = detail::tokenProof(options_.token, serverNonce, clientNonce);
  static_cast<void>(
      detail::encodeRequest(dialect_, Request{.op = Op::kAuthProof, .proof = proof}, out));
  char verdict = detail::kAuthRefused;
  if (auto s = writeAll(out, until); !s.isOk()) {
    return s.withContext(what);
  }
  const auto s = readByte(verdict, until);
  if (!s.isOk() || verdict != detail::kAuthAccepted) {
    return Status::error(Errc::kDenied, what +
                                            ": the store refused our token: DTRUN_STORE_TOKEN (or "
                                            "--rdzv_conf token) must match the store's");
  }
  return Status::ok();
}

void StoreConnection::drop() {
  fd_.reset();
  inBegin_ = inEnd_ = 0;
}

Status StoreConnection::call(const Request& request, const std::string& what,
                             Clock::time_point until, const ReplyReader& readReply,
                             bool keepOnTimeout) {
  return callAll(std::span(&request, 1), what, until, readReply, keepOnTimeout);
}

Status StoreConnection::callAll(std::span<const Request> requests, const std::string& what,
                                Clock::time_point until, const ReplyReader& readReply,
                                bool keepOnTimeout) {
  if (!fd_.valid()) {
    if (auto s = connectUntil(until); !s.isOk()) {
      return s.withContext(what);
    }
  }
  out_.clear();
  for (const auto& request : requests) {
    if (!detail::encodeRequest(dialect_, request, out_)) {
      return Status::invalidArgument(what +
                                     ": not part of the torch<=2.0 protocol this client "
                                     "was configured to speak");
    }
  }
  Status s = writeAll(out_, until);
  if (s.isOk() && readReply) {
    s = readReply(until);
  }
  if (!s.isOk()) {
    if (!(keepOnTimeout && s.code() == Errc::kTimeout)) {
      drop();
    }
    return s.withContext(what + " on " + peer_);
  }
  return s;
}

Status StoreConnection::writeAll(std::string_view bytes, Clock::time_point until) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno != EAGAIN) {
      return Status::connection(std::string("send: ") + std::system_category().message(errno));
    }
    DTRUN_TRY(pollFor(POLLOUT, until));
  }
  return Status::ok();
}

Status StoreConnection::fill(std::size_t want, Clock::time_point until) {
  if (inEnd_ - inBegin_ >= want) {
    return Status::ok();
  }
  if (inBegin_ > 0) {
    // Only the unread bytes move (usually none): erase() would shift the whole 64 KiB buffer
    // and the resize below would then zero what it cut, on every reply.
    std::memmove(in_.data(), in_.data() + inBegin_, inEnd_ - inBegin_);
    inEnd_ -= inBegin_;
    inBegin_ = 0;
  }
  if (in_.size() < std::max<std::size_t>(want, kReadChunk)) {
    in_.resize(std::max<std::size_t>(want, kReadChunk));
  }
  while (inEnd_ < want) {
    // A reply is rarely there the moment its request left: waiting first saves a recv that
    // would only say EAGAIN (2 syscalls per round trip instead of 3).
    DTRUN_TRY(pollFor(POLLIN, until));
    const ssize_t n = ::recv(fd_.get(), in_.data() + inEnd_, in_.size() - inEnd_, 0);
    if (n > 0) {
      inEnd_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::connection("connection closed by the server");
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno != EAGAIN) {
      return Status::connection(std::string("recv: ") + std::system_category().message(errno));
    }
  }
  return Status::ok();
}

Status StoreConnection::pollFor(short events, Clock::time_point until) {
  for (;;) {
    pollfd p{fd_.get(), events, 0};
    const int ms = remainingMs(until);
    const int ready = ::poll(&p, 1, ms);
    if (ready > 0) {
      return Status::ok();
    }
    if (ready == 0) {
      return Status::timeout("no reply within the deadline");
    }
    if (errno != EINTR) {
      return Status::system("poll", errno);
    }
  }
}

Status StoreConnection::readByte(char& out, Clock::time_point until) {
  DTRUN_TRY(fill(1, until));
  out = in_[inBegin_++];
  return Status::ok();
}

Status StoreConnection::readU32(std::uint32_t& out, Clock::time_point until) {
  DTRUN_TRY(fill(4, until));
  out = detail::loadU32(in_.data() + inBegin_);
  inBegin_ += 4;
  return Status::ok();
}

Status StoreConnection::readI64(std::int64_t& out, Clock::time_point until) {
  DTRUN_TRY(fill(8, until));
  out = static_cast<std::int64_t>(detail::loadU64(in_.data() + inBegin_));
  inBegin_ += 8;
  return Status::ok();
}

Status StoreConnection::readBytes(Bytes& out, Clock::time_point until) {
  std::int64_t length = 0;
  DTRUN_TRY(readI64(length, until));
  if (length < 0 || static_cast<std::uint64_t>(length) > kMaxReplyValue) {
    return Status::protocol("reply value length " +
                            std::to_string(static_cast<std::uint64_t>(length)) +
                            " is over the client's limit");
  }
  const auto n = static_cast<std::size_t>(length);
  DTRUN_TRY(fill(n, until));
  out.assign(in_.data() + inBegin_, n);
  inBegin_ += n;
  return Status::ok();
}

}  // namespace dtrun::rdzv::detail
