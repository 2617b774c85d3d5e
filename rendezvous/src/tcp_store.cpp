// Store client over plain blocking-style POSIX sockets: the descriptor is non-blocking and every
// wait goes through poll() with the call's deadline, so no call can hang past its timeout.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dtrun/rendezvous.h"

#include "protocol.h"
#include "store_auth.h"

namespace dtrun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Op;
using detail::Request;
using std::chrono::milliseconds;

std::string describeKeys(std::span<const std::string> keys) {
  constexpr std::size_t kShown = 4;
  std::string out = "[";
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += (i > 0 ? ", " : "") + (keys[i].size() > 80 ? keys[i].substr(0, 80) + "..." : keys[i]);
  }
  if (keys.size() > kShown) {
    out += ", ... (" + std::to_string(keys.size()) + " keys)";
  }
  return out + "]";
}

int remainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
}

class TcpStore final : public Store {
 public:
  explicit TcpStore(ClientOptions options)
      : options_(std::move(options)),
        peer_(options_.host + ":" + std::to_string(options_.port)),
        dialect_(options_.dialect == Dialect::kV2 ? detail::Dialect::kV2
                                                  : detail::Dialect::kLegacy) {}

  Status connect() { return connectUntil(Clock::now() + options_.timeout); }

  Status set(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kSet, .key = key, .value = value};
    return call(r, "set(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<Bytes> get(std::string_view key) override {
    const std::string keyString(key);
    DTRUN_TRY(wait(std::span(&keyString, 1), options_.timeout));
    Request r{.op = Op::kGet, .key = key};
    Bytes value;
    DTRUN_TRY(call(r, "get(" + keyString + ")", deadline(),
                   [&](auto dl) { return readBytes(value, dl); }));
    return value;
  }

  Result<std::int64_t> add(std::string_view key, std::int64_t delta) override {
    Request r{.op = Op::kAdd, .key = key, .integer = delta};
    return callForInt(r, "add(" + std::string(key) + ")");
  }

  Result<Bytes> compareSet(std::string_view key, std::string_view expected,
                           std::string_view desired) override {
    Request r{.op = Op::kCompareSet, .key = key, .value = expected, .desired = desired};
    Bytes value;
    DTRUN_TRY(call(r, "compare_set(" + std::string(key) + ")", deadline(),
                   [&](auto dl) { return readBytes(value, dl); }));
    return value;
  }

  Result<bool> check(std::span<const std::string> keys) override {
    Request r{.op = Op::kCheck, .keys = views(keys)};
    char reply = 0;
    DTRUN_TRY(call(r, "check(" + describeKeys(keys) + ")", deadline(),
                   [&](auto dl) { return readByte(reply, dl); }));
    return reply == detail::kCheckReady;
  }

  Result<std::optional<Bytes>> tryGet(std::string_view key) override {
    // CHECK and GET pipelined: GET alone cannot tell an absent key from an empty value.
    const std::array<Request, 2> checkAndGet{Request{.op = Op::kCheck, .keys = {key}},
                                             Request{.op = Op::kGet, .key = key}};
    char present = 0;
    Bytes value;
    const auto readBoth = [&](Clock::time_point dl) {
      DTRUN_TRY(readByte(present, dl));
      return readBytes(value, dl);
    };
    DTRUN_TRY(callAll(checkAndGet, "try_get(" + std::string(key) + ")", deadline(), readBoth));
    return present == detail::kCheckReady ? std::optional<Bytes>(std::move(value)) : std::nullopt;
  }

  Status wait(std::span<const std::string> keys, milliseconds timeout) override {
    Request r{.op = Op::kWait, .keys = views(keys)};
    return waitForStop(r, "wait(" + describeKeys(keys) + ")", timeout);
  }

  Result<std::int64_t> numKeys() override {
    Request r{.op = Op::kNumKeys};
    return callForInt(r, "num_keys()");
  }

  Result<bool> deleteKey(std::string_view key) override {
    Request r{.op = Op::kDeleteKey, .key = key};
    DTRUN_ASSIGN_OR_RETURN(auto n, callForInt(r, "delete_key(" + std::string(key) + ")"));
    return n == 1;
  }

  Status append(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kAppend, .key = key, .value = value};
    return call(r, "append(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<std::vector<Bytes>> multiGet(std::span<const std::string> keys) override {
    const std::string what = "multi_get(" + describeKeys(keys) + ")";
    DTRUN_TRY(wait(keys, options_.timeout));
    Request r{.op = Op::kMultiGet, .keys = views(keys)};
    std::vector<Bytes> values(keys.size());
    const auto readValues = [&](Clock::time_point dl) {
      for (auto& value : values) {
        DTRUN_TRY(readBytes(value, dl));
      }
      return Status::ok();
    };
    DTRUN_TRY(call(r, what, deadline(), readValues));
    return values;
  }

  Status multiSet(std::span<const std::string> keys, std::span<const Bytes> values) override {
    if (keys.size() != values.size()) {
      return Status::invalidArgument("multi_set: " + std::to_string(keys.size()) + " keys but " +
                                     std::to_string(values.size()) + " values");
    }
    Request r{.op = Op::kMultiSet, .keys = views(keys), .values = views(values)};
    return call(r, "multi_set(" + describeKeys(keys) + ")", deadline(), nullptr);
  }

  Result<std::chrono::microseconds> ping() override {
    const auto nonce = static_cast<std::uint32_t>(::getpid()) ^ ++pingCount_;
    Request r{.op = Op::kPing, .word = nonce};
    const auto start = Clock::now();
    std::uint32_t echo = 0;
    DTRUN_TRY(call(r, "ping()", deadline(), [&](auto dl) { return readU32(echo, dl); }));
    if (echo != nonce) {
      drop();
      return Status::protocol("ping() on " + peer_ + ": echoed nonce " + std::to_string(echo) +
                              " instead of " + std::to_string(nonce));
    }
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  }

  Status queuePush(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kQueuePush, .key = key, .value = value};
    return call(r, "queue_push(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<Bytes> queuePop(std::string_view key, milliseconds timeout) override {
    DTRUN_ASSIGN_OR_RETURN(auto items, queuePopMany(key, 1, timeout));
    return std::move(items.front());
  }

  Result<std::vector<Bytes>> queuePopMany(std::string_view key, std::size_t maxItems,
                                          milliseconds timeout) override {
    const std::string keyString(key);
    const std::string what = "queue_pop(" + keyString + ")";
    const auto until = Clock::now() + timeout;
    const Request pop{.op = Op::kQueuePop, .key = key};
    std::vector<Bytes> items;
    const auto readPopped = [&](Clock::time_point dl) {
      std::int64_t length = 0;
      DTRUN_TRY(readI64(length, dl));
      return length > 0 ? readBytes(items.emplace_back(), dl) : Status::ok();
    };
    for (;;) {
      // Another consumer may take the item between our WAIT and POP: wait again until the deadline.
      Request waitRequest{.op = Op::kWait, .keys = {key}};
      DTRUN_TRY(waitForStop(waitRequest, what, milliseconds(remainingMs(until))));
      // The first item and the length of the rest in one round trip, then the rest (pipelined
      // requests) in one more: a busy queue drains in three round trips, not two per item.
      const std::array<Request, 2> firstAndLength{pop, Request{.op = Op::kQueueLen, .key = key}};
      std::int64_t left = 0;
      const auto readFirstAndLength = [&](Clock::time_point dl) {
        DTRUN_TRY(readPopped(dl));
        return readI64(left, dl);
      };
      DTRUN_TRY(callAll(firstAndLength, what, deadline(), readFirstAndLength));
      const auto more = std::min<std::int64_t>(left, static_cast<std::int64_t>(maxItems) - 1);
      if (!items.empty() && more > 0) {
        const std::vector<Request> pops(static_cast<std::size_t>(more), pop);
        const auto readRest = [&](Clock::time_point dl) {
          for (std::int64_t i = 0; i < more; ++i) {
            DTRUN_TRY(readPopped(dl));
          }
          return Status::ok();
        };
        DTRUN_TRY(callAll(pops, what, deadline(), readRest));
      }
      if (!items.empty()) {
        return items;
      }
    }
  }

  Result<std::int64_t> queueLen(std::string_view key) override {
    Request r{.op = Op::kQueueLen, .key = key};
    return callForInt(r, "queue_len(" + std::string(key) + ")");
  }

  Result<std::vector<Bytes>> listKeys() override {
    Request r{.op = Op::kListKeys};
    std::vector<Bytes> keys;
    const auto readKeys = [&](Clock::time_point dl) {
      std::int64_t n = 0;
      DTRUN_TRY(readI64(n, dl));
      if (n < 0) {
        return Status::protocol("negative key count " + std::to_string(n));
      }
      keys.resize(static_cast<std::size_t>(n));
      for (auto& key : keys) {
        DTRUN_TRY(readBytes(key, dl));
      }
      return Status::ok();
    };
    DTRUN_TRY(call(r, "list_keys()", deadline(), readKeys));
    return keys;
  }

  Status barrier(std::string_view key, std::int64_t worldSize, milliseconds timeout) override {
    Request r{.op = Op::kBarrier, .key = key, .integer = worldSize};
    return waitForStop(r, "barrier(" + std::string(key) + ", " + std::to_string(worldSize) + ")",
                       timeout);
  }

  [[nodiscard]] std::string peer() const override { return peer_; }

 private:
  using ReplyReader = std::function<Status(Clock::time_point)>;

  [[nodiscard]] Clock::time_point deadline() const { return Clock::now() + options_.timeout; }

  template <typename Strings>
  static std::vector<std::string_view> views(const Strings& strings) {
    return {strings.begin(), strings.end()};
  }

  Status connectUntil(Clock::time_point until) {
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

  Status connectOnce(Clock::time_point until) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc =
        ::getaddrinfo(options_.host.c_str(), std::to_string(options_.port).c_str(), &hints, &found);
    if (rc != 0) {
      return Status::connection("connect(" + peer_ +
                                "): cannot resolve host: " + ::gai_strerror(rc));
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
        last =
            Status::connection("connect(" + peer_ + "): " + std::system_category().message(errno));
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

  // torch >= 2.2: VALIDATE with the magic, then PING; the echo proves a compatible server.
  Status handshake(Clock::time_point until) {
    if (dialect_ != detail::Dialect::kV2) {
      return Status::ok();
    }
    std::string out;
    const auto nonce = static_cast<std::uint32_t>(::getpid());
    static_cast<void>(detail::encodeRequest(
        dialect_, Request{.op = Op::kValidate, .word = detail::kValidationMagic}, out));
    static_cast<void>(
        detail::encodeRequest(dialect_, Request{.op = Op::kPing, .word = nonce}, out));
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

  // The store sends a fresh nonce; the proof covers it and ours (see store_auth.h).
  Status proveToken(Clock::time_point until) {
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
      return Status::error(Errc::kDenied,
                           what +
                               ": the store refused our token: DTRUN_STORE_TOKEN (or "
                               "--rdzv_conf token) must match the store's");
    }
    return Status::ok();
  }

  void drop() {
    fd_.reset();
    inBegin_ = inEnd_ = 0;
  }

  // Sends `request` and reads its reply with `readReply` (none if null). A failure drops the
  // connection (the next call reconnects) and names the operation and the peer; with
  // `keepOnTimeout`, a reply that did not come in time leaves it open for the caller to cancel.
  Status call(const Request& request, const std::string& what, Clock::time_point until,
              const ReplyReader& readReply, bool keepOnTimeout = false) {
    return callAll(std::span(&request, 1), what, until, readReply, keepOnTimeout);
  }

  // Sends `requests` in one write (the server answers them in order) and reads every reply.
  Status callAll(std::span<const Request> requests, const std::string& what,
                 Clock::time_point until, const ReplyReader& readReply,
                 bool keepOnTimeout = false) {
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

  Result<std::int64_t> callForInt(const Request& request, const std::string& what) {
    std::int64_t value = 0;
    DTRUN_TRY(call(request, what, deadline(), [&](auto dl) { return readI64(value, dl); }));
    return value;
  }

  // WAIT and BARRIER: the reply (STOP_WAITING) may come much later. On timeout the server is told
  // to drop the wait; its reply is 01, or 00 then 01 if the wait completed meanwhile.
  Status waitForStop(const Request& request, const std::string& what, milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    char reply = 0;
    auto s = call(
        request, what, until, [&](auto dl) { return readByte(reply, dl); },
        /*keepOnTimeout=*/dialect_ == detail::Dialect::kV2);
    if (s.isOk()) {
      return reply == detail::kStopWaiting
                 ? Status::ok()
                 : Status::protocol(what + " on " + peer_ + ": unexpected reply byte " +
                                    std::to_string(static_cast<int>(reply)));
    }
    if (s.code() != Errc::kTimeout || !fd_.valid() || dialect_ != detail::Dialect::kV2) {
      drop();
      return s;
    }
    Status timedOut = Status::timeout(what + " on " + peer_ + ": not satisfied within " +
                                      std::to_string(timeout.count()) + "ms");
    const auto cancelDeadline = deadline();
    Status c =
        writeAll(std::string(1, static_cast<char>(*detail::wireFromOp(dialect_, Op::kCancelWait))),
                 cancelDeadline);
    if (c.isOk()) {
      c = readByte(reply, cancelDeadline);
    }
    if (c.isOk() && reply == detail::kStopWaiting) {
      c = readByte(reply, cancelDeadline);
    }
    if (!c.isOk() || reply != detail::kWaitCanceled) {
      drop();
    }
    return timedOut;
  }

  // Timeouts from the low-level readers keep fd_ open; waitForStop decides what happens next.
  Status writeAll(std::string_view bytes, Clock::time_point until) {
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

  Status fill(std::size_t want, Clock::time_point until) {
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

  Status pollFor(short events, Clock::time_point until) {
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

  Status readByte(char& out, Clock::time_point until) {
    DTRUN_TRY(fill(1, until));
    out = in_[inBegin_++];
    return Status::ok();
  }

  Status readU32(std::uint32_t& out, Clock::time_point until) {
    DTRUN_TRY(fill(4, until));
    out = detail::loadU32(in_.data() + inBegin_);
    inBegin_ += 4;
    return Status::ok();
  }

  Status readI64(std::int64_t& out, Clock::time_point until) {
    DTRUN_TRY(fill(8, until));
    out = static_cast<std::int64_t>(detail::loadU64(in_.data() + inBegin_));
    inBegin_ += 8;
    return Status::ok();
  }

  Status readBytes(Bytes& out, Clock::time_point until) {
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

  static constexpr std::size_t kReadChunk = std::size_t{64} * 1024;
  static constexpr std::uint64_t kMaxReplyValue = 1ULL << 32;

  const ClientOptions options_;
  const std::string peer_;
  const detail::Dialect dialect_;
  UniqueFd fd_;
  std::string out_;
  std::string in_;
  std::size_t inBegin_ = 0;
  std::size_t inEnd_ = 0;
  std::uint32_t pingCount_ = 0;
};

}  // namespace

Result<std::unique_ptr<Store>> connectStore(const ClientOptions& options) {
  if (options.port == 0) {
    return Status::invalidArgument(
        "connectStore: port 0 is not a store address; pass the port "
        "the server reported");
  }
  auto store = std::make_unique<TcpStore>(options);
  DTRUN_TRY(store->connect());
  return std::unique_ptr<Store>(std::move(store));
}

StoreFactory storeFactory(const ClientOptions& options) {
  return [options] { return connectStore(options); };
}

}  // namespace dtrun::rdzv
